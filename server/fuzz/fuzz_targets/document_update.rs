//! `document_update`: arbitrary bytes as a yrs v1 update, applied to a
//! document shaped like the server's (a `prosemirror` XmlFragment).
//!
//! An editor's sync step 2 and update messages carry such bytes, and the
//! document task decodes and applies them (server/src/sync/document.rs);
//! the log it stores is replayed the same way on load and compaction. yrs
//! has had panics on hostile updates (a known class of its bugs), and a
//! panic there takes a document down, so this target looks for them. It
//! follows what the server does with an update it accepts: decode, apply,
//! take the transaction's change (`writes::change_of`, what is relayed and
//! stored), read the outline, answer a sync step 1 (`encode_diff_v1`), then
//! encode the whole state and load that into a fresh document, as
//! compaction and a restart would.
//!
//! Bytes reach yrs only as the server lets them: inside a sync update
//! message that `sync::frame::messages` accepts, so its guards (counts
//! that cannot fit the body) apply here too. Past that it does not paper
//! over what it finds: a crash is a yrs bug to guard in the server; keep
//! its input under regressions/document_update/.
#![no_main]

use libfuzzer_sys::fuzz_target;
use margin_decisions::{Outline, FRAGMENT_NAME};
use margin_server::sync::frame;
use margin_server::sync::writes::change_of;
use yrs::sync::{Message, SyncMessage};
use yrs::updates::decoder::Decode;
use yrs::updates::encoder::Encode;
use yrs::{Doc, ReadTxn, StateVector, Transact, Update};

fuzz_target!(|data: &[u8]| {
    let message = Message::Sync(SyncMessage::Update(data.to_vec())).encode_v1();
    if frame::messages(&message).is_err() {
        return;
    }
    let Ok(update) = Update::decode_v1(data) else {
        return;
    };
    let doc = Doc::new();
    doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    {
        let mut txn = doc.transact_mut();
        if txn.apply_update(update).is_err() {
            return;
        }
        let _change = change_of(&txn);
    }
    let _outline = Outline::of_doc(&doc);
    // Sync step 2 to an editor that connects with nothing (messages::step2).
    let _step2 = doc.transact().encode_diff_v1(&StateVector::default());
    let state = doc
        .transact()
        .encode_state_as_update_v1(&StateVector::default());

    // The state the server would store must load again.
    let update = Update::decode_v1(&state).expect("the document's own state does not decode");
    let fresh = Doc::new();
    fresh.get_or_insert_xml_fragment(FRAGMENT_NAME);
    fresh
        .transact_mut()
        .apply_update(update)
        .expect("the document's own state does not apply");
    let _outline = Outline::of_doc(&fresh);
});
