//! The live document as the server drives it (SPEC A3a): an editor's new
//! edit may overtake the sync step 2 of what it wrote offline, as
//! y-websocket sends it on reconnecting; it waits, and applies once what it
//! builds on has come. A joiner holding nothing is answered with the whole
//! document as it stands, however it last changed.

use std::sync::Arc;

use margin_sync_core::{Access, Effect, LiveDocument, Owner, Written};
use yrs::sync::{Message, SyncMessage};
use yrs::updates::decoder::Decode;
use yrs::updates::encoder::Encode;
use yrs::{Doc, GetString, ReadTxn, StateVector, Text, Transact, Update};

fn frame(update: Vec<u8>) -> Vec<u8> {
    Message::Sync(SyncMessage::Update(update)).encode_v1()
}

fn changes(effects: &[Effect]) -> usize {
    effects
        .iter()
        .filter(|e| matches!(e, Effect::Change(..)))
        .count()
}

#[test]
fn an_edit_that_overtakes_what_it_builds_on_waits_and_then_applies() {
    let (mut live, _) = LiveDocument::load([], []).unwrap();
    let editor = Doc::with_client_id(7);
    let text = editor.get_or_insert_text("t");
    text.insert(&mut editor.transact_mut(), 0, "offline");
    let offline = editor
        .transact()
        .encode_state_as_update_v1(&Default::default());
    let seen = editor.transact().state_vector();
    text.insert(&mut editor.transact_mut(), 7, " and on");
    let next = editor.transact().encode_diff_v1(&seen);
    let ada = Owner::Account(Arc::from("ada"));
    let mut effects = Vec::new();
    live.frame(1, &ada, Access::Edit, &frame(next), &mut effects)
        .expect("it waits, the sender stays");
    assert_eq!(changes(&effects), 0);
    live.frame(1, &ada, Access::Edit, &frame(offline), &mut effects)
        .expect("accepted");
    assert_eq!(changes(&effects), 2, "both applied, in order");
    let got = live.doc().get_or_insert_text("t");
    assert_eq!(
        yrs::GetString::get_string(&got, &live.doc().transact()),
        "offline and on"
    );
}

#[test]
fn what_waits_is_dropped_when_its_sender_leaves() {
    let (mut live, _) = LiveDocument::load([], []).unwrap();
    let editor = Doc::with_client_id(7);
    let text = editor.get_or_insert_text("t");
    text.insert(&mut editor.transact_mut(), 0, "never sent");
    let first = editor
        .transact()
        .encode_state_as_update_v1(&Default::default());
    let seen = editor.transact().state_vector();
    text.insert(&mut editor.transact_mut(), 0, "x");
    let next = editor.transact().encode_diff_v1(&seen);
    let ada = Owner::Account(Arc::from("ada"));
    let mut effects = Vec::new();
    live.join(1);
    live.frame(1, &ada, Access::Edit, &frame(next.clone()), &mut effects)
        .unwrap();
    live.leave(1);
    // The change it waited for arrives from another member: what waited
    // went with its sender.
    live.frame(2, &ada, Access::Edit, &frame(first), &mut effects)
        .unwrap();
    assert_eq!(changes(&effects), 1);
    let got = live.doc().get_or_insert_text("t");
    assert_eq!(
        yrs::GetString::get_string(&got, &live.doc().transact()),
        "never sent"
    );
}

/// The history the fuzz targets start from (server/fuzz/history).
fn history() -> Vec<Vec<u8>> {
    let mut bytes: &[u8] = include_bytes!("../../fuzz/history/concurrent.updates");
    let mut updates = Vec::new();
    while let Some((len, rest)) = bytes.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len) as usize;
        updates.push(rest[..len].to_vec());
        bytes = &rest[len..];
    }
    updates
}

/// Sends `finding` (a fuzz target's input: a selector byte, then the
/// update) to `live` as eve's; asserts it is refused as placed by arrival,
/// with nothing applied or relayed.
fn refused_as_placed_by_arrival(mut live: LiveDocument, finding: &[u8]) {
    let before = margin_sync_core::content::content(live.doc());
    let eve = Owner::Account(Arc::from("eve"));
    let mut effects = Vec::new();
    let update = frame(finding[1..].to_vec());
    let refused = live
        .frame(1, &eve, Access::Edit, &update, &mut effects)
        .unwrap_err();
    assert_eq!(
        refused.reason,
        "update refused: its items would be placed differently by a client loading the document later"
    );
    assert_eq!(changes(&effects), 0);
    assert_eq!(margin_sync_core::content::content(live.doc()), before);
}

#[test]
fn an_update_placed_differently_by_a_later_reader_is_refused() {
    // Found by the document_update fuzz target: a real editor's offline
    // step 2 with one origin moved, so its text landed in one order in the
    // live document and in another in a client loading it afterwards.
    let parts = history();
    let (live, skipped) = LiveDocument::load(parts.iter().map(Vec::as_slice), []).unwrap();
    assert!(skipped.is_empty());
    let finding = include_bytes!("../../fuzz/regressions/document_update/divergent-order-62da8139");
    refused_as_placed_by_arrival(live, finding);
}

#[test]
fn a_load_learning_beside_yrs_builds_what_one_learning_after_it_does() {
    // A large part is placed and learned on a second thread while yrs
    // applies it. Whatever the parts, the load must end where one on a
    // single thread does: the same text, state, parts left out and
    // knowledge. The history is given with two parts swapped, so that
    // some are left out.
    let mut parts = history();
    parts.swap(1, 3);
    let load = |beside_from| {
        let (live, skipped) =
            LiveDocument::load_learning_beside(parts.iter().map(Vec::as_slice), [], beside_from)
                .unwrap();
        let state = live.doc().transact().state_vector();
        let snapshot = live
            .doc()
            .transact()
            .encode_state_as_update_v1(&StateVector::default());
        let known = live.known_spans();
        (
            margin_sync_core::content::content(live.doc()),
            state,
            snapshot,
            skipped,
            known,
        )
    };
    let alone = load(usize::MAX);
    assert!(!alone.3.is_empty(), "the swap leaves parts out");
    assert_eq!(load(0), alone);
    // And each judges the next update alike.
    let finding = include_bytes!("../../fuzz/regressions/document_update/divergent-order-62da8139");
    for beside_from in [usize::MAX, 0] {
        let parts = history();
        let (live, _) =
            LiveDocument::load_learning_beside(parts.iter().map(Vec::as_slice), [], beside_from)
                .unwrap();
        refused_as_placed_by_arrival(live, finding);
    }
}

#[test]
fn an_item_next_to_collected_text_is_refused() {
    // Found by the document_update fuzz target: a new client's text with
    // its origin in a collected range of the history and its right origin
    // in a live paragraph. Yjs collects such an item; yrs put it in the
    // paragraph, inside a code mark live and outside it on reload: tried
    // on a copy, it is refused. The history is loaded compacted, as its
    // collected text is stored.
    let parts = history();
    let (whole, _) = LiveDocument::load(parts.iter().map(Vec::as_slice), []).unwrap();
    let snapshot = whole
        .doc()
        .transact()
        .encode_state_as_update_v1(&Default::default());
    let (live, skipped) = LiveDocument::load([snapshot.as_slice()], []).unwrap();
    assert!(skipped.is_empty());
    let finding =
        include_bytes!("../../fuzz/regressions/document_update/divergent-gc-neighbour-d50c5891");
    refused_as_placed_by_arrival(live, finding);
}

#[test]
fn a_client_rearranging_its_own_text_as_yjs_redo_does_is_accepted() {
    // Caught by web-tests/tests/update-corpus.test.mjs: a real npm yjs
    // editor's sync step 2 (after undo and redo offline) holds items whose
    // right origin lies before their origin, all of its own writing; yjs
    // itself orders them otherwise when loading the result afresh. A Yjs
    // client writes this, so it is taken, and the change says so.
    let state = include_bytes!("fixtures/redo-state.update");
    let step2 = include_bytes!("fixtures/redo-step2.update");
    let (mut live, skipped) = LiveDocument::load([state.as_slice()], []).unwrap();
    assert!(skipped.is_empty());
    let ada = Owner::Account(Arc::from("ada"));
    let mut effects = Vec::new();
    live.frame(1, &ada, Access::Edit, &frame(step2.to_vec()), &mut effects)
        .expect("accepted");
    let reorders: Vec<bool> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Change(_, change) => Some(change.reorders),
            _ => None,
        })
        .collect();
    assert_eq!(reorders, vec![true]);
}

/// The text `t` of what a joiner holding nothing gets in answer to its
/// sync step 1.
fn joined(live: &mut LiveDocument) -> String {
    let update = whole_answer(live);
    let joiner = Doc::new();
    joiner
        .transact_mut()
        .apply_update(Update::decode_v1(&update).expect("an update"))
        .expect("applied");
    let text = joiner.get_or_insert_text("t");
    let got = text.get_string(&joiner.transact());
    got
}

/// The server's own write of `text` at `at` in the text `t`.
fn server_inserts(
    live: &mut LiveDocument,
    at: u32,
    text: &str,
) -> Written<std::convert::Infallible> {
    live.write(|doc| {
        let seen = doc.transact().state_vector();
        let t = doc.get_or_insert_text("t");
        t.insert(&mut doc.transact_mut(), at, text);
        Ok(Some(doc.transact().encode_diff_v1(&seen)))
    })
}

/// The update a joiner holding nothing is answered with.
fn whole_answer(live: &mut LiveDocument) -> Vec<u8> {
    let step1 = Message::Sync(SyncMessage::SyncStep1(StateVector::default())).encode_v1();
    let zed = Owner::Account(Arc::from("zed"));
    let mut effects = Vec::new();
    live.frame(9, &zed, Access::Edit, &step1, &mut effects)
        .expect("answered");
    effects
        .iter()
        .find_map(|effect| match effect {
            Effect::Reply(bytes) => match Message::decode_v1(bytes) {
                Ok(Message::Sync(SyncMessage::SyncStep2(update))) => Some(update),
                _ => None,
            },
            _ => None,
        })
        .expect("a sync step 2")
}

#[test]
fn a_joiner_holding_nothing_gets_the_document_as_it_stands_after_every_change() {
    let (mut live, _) = LiveDocument::load([], []).unwrap();
    let ada = Owner::Account(Arc::from("ada"));
    let editor = Doc::with_client_id(7);
    let text = editor.get_or_insert_text("t");
    let send = |live: &mut LiveDocument, change: &dyn Fn(&mut yrs::TransactionMut)| {
        let seen = editor.transact().state_vector();
        change(&mut editor.transact_mut());
        let diff = editor.transact().encode_diff_v1(&seen);
        let mut effects = Vec::new();
        live.frame(1, &ada, Access::Edit, &frame(diff), &mut effects)
            .expect("accepted");
        assert_eq!(changes(&effects), 1);
    };
    send(&mut live, &|txn| text.insert(txn, 0, "hello world"));
    assert_eq!(joined(&mut live), "hello world");
    assert_eq!(joined(&mut live), "hello world", "asked again, unchanged");
    // A deletion moves no state vector: the answer must still follow it.
    send(&mut live, &|txn| text.remove_range(txn, 5, 6));
    assert_eq!(joined(&mut live), "hello");
    // The server's own write.
    let written = server_inserts(&mut live, 5, ", Ada");
    assert!(matches!(written, Written::Changed(_)));
    assert_eq!(joined(&mut live), "hello, Ada");
}

#[test]
fn a_document_loaded_from_one_stored_part_answers_a_joiner_holding_nothing_with_that_part() {
    // SPEC O5: a cold join of a compacted document need not encode the
    // whole document again, since the part is all it holds. The part keeps
    // deleted text's content, which yrs collects once it applies it, so
    // yrs' own encoding of what it loaded would differ from the part.
    let editor = Doc::with_options(yrs::Options {
        client_id: yrs::block::ClientID::new(7),
        skip_gc: true,
        ..yrs::Options::default()
    });
    let text = editor.get_or_insert_text("t");
    text.insert(&mut editor.transact_mut(), 0, "hello");
    text.remove_range(&mut editor.transact_mut(), 1, 3);
    let part = editor
        .transact()
        .encode_state_as_update_v1(&StateVector::default());

    let (mut live, skipped) = LiveDocument::load([part.as_slice()], []).unwrap();
    assert!(skipped.is_empty());
    // The server's write that changes nothing (a load's projection of the
    // cards' mirror, when the map agrees) keeps it.
    let unchanged = live.write(|doc| {
        drop(doc.transact_mut());
        Ok::<_, std::convert::Infallible>(None)
    });
    assert!(matches!(unchanged, Written::Unchanged));
    assert_eq!(whole_answer(&mut live), part);
    assert_eq!(joined(&mut live), "ho");
    // Once the document changes, the answer is the document as it stands.
    let written = server_inserts(&mut live, 2, "!");
    assert!(matches!(written, Written::Changed(_)));
    assert_ne!(whole_answer(&mut live), part);
    assert_eq!(joined(&mut live), "ho!");

    // Loaded from the part and a later one, it holds more than the part.
    let seen = editor.transact().state_vector();
    text.insert(&mut editor.transact_mut(), 2, "?");
    let later = editor.transact().encode_diff_v1(&seen);
    let (mut live, _) = LiveDocument::load([part.as_slice(), later.as_slice()], []).unwrap();
    assert_ne!(whole_answer(&mut live), part);
    assert_eq!(joined(&mut live), "ho?");
}
