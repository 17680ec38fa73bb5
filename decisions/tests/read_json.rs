//! `read_document`'s JSON written straight from an outline, whole or from
//! the last read written: always the bytes serde writes for the outline's
//! wire blocks.

// Only the document half of the harness is used here.
#[allow(dead_code)]
mod support;

use margin_decisions::wire::{self, WrittenRead};
use margin_decisions::{Outline, FRAGMENT_NAME};
use margin_protocol::decisions::ReadDocumentOutput;
use pretty_assertions::assert_eq;
use support::{Fixture, Walk};
use yrs::types::xml::{XmlElementPrelim, XmlTextPrelim};
use yrs::{Transact, XmlFragment};

/// The read serde writes for `outline` at `revision`.
fn through_serde(revision: i64, outline: &Outline) -> String {
    let read = ReadDocumentOutput {
        revision,
        outline: wire::blocks(outline),
    };
    serde_json::to_string(&read).unwrap()
}

/// A document of `n` numbered paragraphs.
fn paragraphs(n: usize) -> Fixture {
    let texts: Vec<String> = (0..n).map(|i| format!("paragraph {i}")).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    Fixture::with(&texts)
}

/// Texts that need escaping, or normalising, or are not ASCII.
const AWKWARD: [&str; 8] = [
    "Ship the beta",
    "She said \"no\" twice",
    r"a back\slash and a \u escape",
    "a bell \u{7} and a delete \u{7f}",
    "tabs\tand\nnewlines collapse",
    "Café, naïve, 北京, 🚀",
    "</script><!--",
    "",
];

#[test]
fn a_read_written_straight_from_the_outline_is_the_json_of_its_wire_blocks() {
    let f = Fixture::with(&AWKWARD);
    {
        // A client may name an element anything.
        let fragment = f.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        let mut txn = f.doc.transact_mut();
        let odd = fragment.insert(&mut txn, 2, XmlElementPrelim::empty("we\"ird\\kind"));
        odd.insert(&mut txn, 0, XmlTextPrelim::new("odd"));
    }
    let outline = f.outline();
    let written = wire::encoded_read(-7, &outline, None).unwrap();
    assert_eq!(written.read().json(), through_serde(-7, &outline));
    assert_eq!(written.copied(), 0);
    let empty = wire::encoded_read(0, &Outline::default(), None).unwrap();
    assert_eq!(empty.read().json(), r#"{"revision":0,"outline":[]}"#);
}

#[test]
fn a_read_from_the_last_copies_every_block_whose_words_did_not_change() {
    let mut f = paragraphs(40);
    let last = wire::encoded_read(1, &f.outline(), None).unwrap();
    f.rewrite(3, "rewritten");
    f.insert(10, "new");
    // More blocks deleted in a row than are looked for near their place.
    for _ in 0..12 {
        f.delete(20);
    }
    let outline = f.outline();
    let next = wire::encoded_read(2, &outline, Some(&last)).unwrap();
    assert_eq!(next.read().json(), through_serde(2, &outline));
    // 40 blocks, one rewritten and 12 deleted, plus one new: 27 unchanged.
    assert_eq!((outline.len(), next.copied()), (29, 27));
}

#[test]
fn a_read_from_the_last_is_the_read_written_whole_whatever_the_edits() {
    let mut walk = Walk::new(0x5eed_0000_4ead_0001);
    let mut f = Fixture::with(&AWKWARD);
    let (mut before, mut last): (Option<WrittenRead>, Option<WrittenRead>) = (None, None);
    for round in 0..300 {
        // Every tenth read is of a document nobody changed since.
        if round % 10 != 0 {
            f.random_edits(&mut walk, &AWKWARD);
        }
        let outline = f.outline();
        // Written into the buffers of the read before last, as the server
        // does, whatever they held.
        let buffers = before.and_then(WrittenRead::into_buffers);
        let written =
            wire::encoded_read_into(round, &outline, last.as_ref(), buffers.unwrap_or_default())
                .unwrap();
        assert_eq!(
            written.read().json(),
            through_serde(round, &outline),
            "round {round}"
        );
        before = last;
        last = Some(written);
    }
}

#[test]
fn a_read_is_written_into_the_buffers_of_one_nobody_holds() {
    let mut f = paragraphs(300);
    let first = wire::encoded_read(1, &f.outline(), None).unwrap();
    let held = first.read().clone();
    assert!(first.clone().into_buffers().is_none(), "a reader holds it");
    drop(held);
    let at = first.read().json().as_ptr();
    let buffers = first.into_buffers().expect("nobody holds it");
    assert!(buffers.size() > 0);
    f.rewrite(3, "rewritten");
    let outline = f.outline();
    let last = wire::encoded_read(2, &outline, None).unwrap();
    f.rewrite(4, "rewritten too");
    let outline = f.outline();
    let next = wire::encoded_read_into(3, &outline, Some(&last), buffers).unwrap();
    assert_eq!(next.read().json(), through_serde(3, &outline));
    assert_eq!(next.read().json().as_ptr(), at, "the same buffer");
}
