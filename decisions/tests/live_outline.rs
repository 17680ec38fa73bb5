//! `LiveOutline` keeps the outline a full read would give (SPEC S4), however
//! the document got there.

// Only the document half of the harness is used here.
#[allow(dead_code)]
mod support;

use margin_decisions::{LiveOutline, Outline, FRAGMENT_NAME};
use pretty_assertions::assert_eq;
use support::{digest_of, Fixture, Walk};
use yrs::types::xml::{XmlElementPrelim, XmlTextPrelim};
use yrs::updates::decoder::Decode;
use yrs::{Doc, ReadTxn, Text, Transact, Update, XmlFragment, XmlOut};

const PLAN: [&str; 5] = ["Intro", "Pick a region", "Budget", "Launch date", "Risks"];

/// Refreshes and checks the result against a full read.
fn assert_current(live: &mut LiveOutline, doc: &Doc) {
    let full = Outline::of_doc(doc);
    assert_eq!(*live.refresh(), full);
    assert_eq!(*live.snapshot(), full);
}

#[test]
fn an_outline_is_read_only_when_first_asked_for() {
    let mut f = Fixture::with(&PLAN);
    let mut live = LiveOutline::new(&f.doc);
    f.rewrite(1, "Pick a region in the EU");
    f.insert(0, "Typed before anyone asked");
    assert!(!live.is_read(), "nothing is read before the first refresh");
    assert_current(&mut live, &f.doc);
    assert!(live.is_read());
    f.delete(2);
    assert_current(&mut live, &f.doc);

    let empty = Doc::new();
    let live = LiveOutline::new(&empty);
    assert!(
        empty.transact().get_xml_fragment(FRAGMENT_NAME).is_none(),
        "an outline never asked for creates no root type"
    );
    drop(live);
}

#[test]
fn starts_equal_to_a_full_read_and_on_an_empty_document() {
    let f = Fixture::with(&PLAN);
    let mut live = LiveOutline::new(&f.doc);
    assert_eq!(*live.refresh(), f.outline());
    assert_current(&mut live, &f.doc);

    let empty = Doc::new();
    let mut live = LiveOutline::new(&empty);
    assert_eq!(*live.refresh(), Outline::default());
    assert_eq!(Outline::of_doc(&empty), Outline::default());
}

#[test]
fn rewriting_one_block_updates_its_text_and_digest_and_keeps_its_identity() {
    let mut f = Fixture::with(&PLAN);
    let mut live = LiveOutline::new(&f.doc);
    let before = live.refresh().get(1).unwrap().clone();
    f.rewrite(1, "Pick a region in the EU");
    assert_current(&mut live, &f.doc);
    let after = live.refresh().get(1).unwrap();
    assert_eq!(&*after.text, "Pick a region in the EU");
    assert_eq!(after.identity, before.identity);
    assert_eq!(live.refresh().count_digest(&before.digest), 0);
}

#[test]
fn inserts_at_the_start_middle_and_end_renumber_later_blocks() {
    let mut f = Fixture::with(&PLAN);
    let mut live = LiveOutline::new(&f.doc);
    f.insert(0, "A new first paragraph");
    assert_current(&mut live, &f.doc);
    f.insert(3, "In the middle");
    assert_current(&mut live, &f.doc);
    f.insert(7, "At the end");
    assert_current(&mut live, &f.doc);
    assert_eq!(live.refresh().len(), 8);
    assert_eq!(&*live.refresh().get(7).unwrap().text, "At the end");
}

#[test]
fn deletes_at_the_start_middle_and_end_renumber_later_blocks() {
    let mut f = Fixture::with(&PLAN);
    let mut live = LiveOutline::new(&f.doc);
    let gone = live.refresh().get(0).unwrap().identity;
    f.delete(0);
    assert_current(&mut live, &f.doc);
    assert!(live.refresh().by_identity(gone).is_none());
    f.delete(2);
    assert_current(&mut live, &f.doc);
    f.delete(2);
    assert_current(&mut live, &f.doc);
    f.delete(0);
    f.delete(0);
    assert_current(&mut live, &f.doc);
    assert!(live.refresh().is_empty());
}

#[test]
fn moved_block_takes_its_new_place_with_a_new_identity() {
    let mut f = Fixture::with(&PLAN);
    let mut live = LiveOutline::new(&f.doc);
    let old = live.refresh().get(1).unwrap().identity;
    f.move_block(1, 3);
    assert_current(&mut live, &f.doc);
    let moved = live.refresh().get(3).unwrap();
    assert_eq!(&*moved.text, "Pick a region");
    assert_ne!(moved.identity, old);
    f.move_block(4, 0);
    assert_current(&mut live, &f.doc);
}

#[test]
fn twins_are_counted_as_a_full_read_counts_them() {
    let mut f = Fixture::with(&PLAN);
    let mut live = LiveOutline::new(&f.doc);
    f.insert(0, "Pick a region");
    assert_current(&mut live, &f.doc);
    assert_eq!(live.refresh().count_digest(&digest_of("Pick a region")), 2);
    // Rewriting one twin leaves one; rewriting it back makes two again.
    f.rewrite(0, "Pick two regions");
    assert_current(&mut live, &f.doc);
    assert_eq!(live.refresh().count_digest(&digest_of("Pick a region")), 1);
    f.rewrite(0, "Pick a region");
    assert_current(&mut live, &f.doc);
    assert_eq!(live.refresh().count_digest(&digest_of("Pick a region")), 2);
    f.delete(2);
    assert_current(&mut live, &f.doc);
    assert_eq!(live.refresh().count_digest(&digest_of("Pick a region")), 1);
}

#[test]
fn many_changes_between_two_refreshes_are_all_seen() {
    let mut f = Fixture::with(&PLAN);
    let mut live = LiveOutline::new(&f.doc);
    f.rewrite(4, "Risks, revised");
    f.insert(2, "Typed, then rewritten");
    f.rewrite(2, "Rewritten after typing");
    f.rewrite(0, "Edited, then deleted");
    f.delete(0);
    f.move_block(3, 0);
    f.insert(5, "Budget");
    assert_current(&mut live, &f.doc);
}

#[test]
fn changes_made_in_one_transaction_are_all_seen() {
    let f = Fixture::with(&PLAN);
    let mut live = LiveOutline::new(&f.doc);
    let fragment = f.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    {
        let mut txn = f.doc.transact_mut();
        let p = fragment.insert(&mut txn, 1, XmlElementPrelim::empty("heading"));
        let text = p.insert(&mut txn, 0, XmlTextPrelim::new("A heading"));
        text.insert(&mut txn, 9, " that grew");
        let Some(XmlOut::Element(last)) = fragment.get(&txn, 5) else {
            panic!("no block 5");
        };
        let Some(XmlOut::Text(body)) = last.get(&txn, 0) else {
            panic!("no text");
        };
        body.insert(&mut txn, 0, "Known ");
        fragment.remove_range(&mut txn, 3, 1);
    }
    assert_current(&mut live, &f.doc);
    assert_eq!(&*live.refresh().get(1).unwrap().kind, "heading");
}

#[test]
fn editing_a_nested_list_item_rereads_the_whole_list_block() {
    let doc = Doc::new();
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    {
        let mut txn = doc.transact_mut();
        let list = fragment.insert(&mut txn, 0, XmlElementPrelim::empty("bulletList"));
        for (i, words) in ["first item", "second item"].into_iter().enumerate() {
            let item = list.insert(&mut txn, i as u32, XmlElementPrelim::empty("listItem"));
            let para = item.insert(&mut txn, 0, XmlElementPrelim::empty("paragraph"));
            para.insert(&mut txn, 0, XmlTextPrelim::new(words));
        }
    }
    let mut live = LiveOutline::new(&doc);
    {
        let mut txn = doc.transact_mut();
        let Some(XmlOut::Element(list)) = fragment.get(&txn, 0) else {
            panic!("no list");
        };
        let Some(XmlOut::Element(item)) = list.get(&txn, 1) else {
            panic!("no item");
        };
        let Some(XmlOut::Element(para)) = item.get(&txn, 0) else {
            panic!("no paragraph");
        };
        let Some(XmlOut::Text(text)) = para.get(&txn, 0) else {
            panic!("no text");
        };
        text.insert(&mut txn, 6, " and last");
        let third = list.insert(&mut txn, 2, XmlElementPrelim::empty("listItem"));
        let para = third.insert(&mut txn, 0, XmlElementPrelim::empty("paragraph"));
        para.insert(&mut txn, 0, XmlTextPrelim::new("third"));
    }
    assert_current(&mut live, &doc);
    assert_eq!(
        &*live.refresh().get(0).unwrap().text,
        "first item second and last item third"
    );
}

#[test]
fn updates_from_another_replica_are_seen() {
    let mut remote = Fixture::with(&PLAN);
    let local = Doc::new();
    let mut live = LiveOutline::new(&local);
    let sync = |from: &Doc, to: &Doc| {
        let have = to.transact().state_vector();
        let update = from.transact().encode_state_as_update_v1(&have);
        to.transact_mut()
            .apply_update(Update::decode_v1(&update).unwrap())
            .unwrap();
    };
    sync(&remote.doc, &local);
    assert_current(&mut live, &local);
    remote.rewrite(2, "Budget: 40k");
    remote.delete(0);
    remote.insert(3, "From far away");
    sync(&remote.doc, &local);
    assert_current(&mut live, &local);
    assert_eq!(*live.refresh(), remote.outline());
}

#[test]
fn a_snapshot_keeps_the_outline_it_was_taken_from() {
    let mut f = Fixture::with(&PLAN);
    let mut live = LiveOutline::new(&f.doc);
    let read = live.snapshot();
    let expected = f.outline();
    f.rewrite(1, "Pick a region now");
    f.insert(0, "New");
    assert_current(&mut live, &f.doc);
    assert_eq!(*read, expected);
    assert_ne!(*read, *live.refresh());
}

#[test]
fn a_dropped_live_outline_leaves_the_document_editable() {
    let mut f = Fixture::with(&PLAN);
    let live = LiveOutline::new(&f.doc);
    drop(live);
    f.insert(0, "Still typing");
    assert_eq!(f.outline().len(), PLAN.len() + 1);
}

#[test]
fn a_read_live_outline_holding_the_last_handle_on_its_document_drops_cleanly() {
    let f = Fixture::with(&PLAN);
    let mut live = LiveOutline::new(&f.doc);
    assert_eq!(live.refresh().len(), PLAN.len());
    // The document's store lives on in `live` alone: its observer must be
    // removed while the store is still there.
    drop(f);
    drop(live);
}

#[test]
fn a_live_outline_can_move_between_threads() {
    fn send<T: Send>(_: &T) {}
    let f = Fixture::with(&PLAN);
    let live = LiveOutline::new(&f.doc);
    send(&live);
}

/// A fixed pseudo-random walk over inserts, deletes, rewrites, moves and
/// twins, refreshing after one to four edits at a time.
#[test]
fn random_edit_sequences_always_match_a_full_read() {
    let mut walk = Walk::new(0x5eed_1234_abcd_0001);
    let words = ["alpha", "beta", "Pick a region", "Budget", "gamma delta"];
    let mut f = Fixture::with(&PLAN);
    let mut live = LiveOutline::new(&f.doc);
    for round in 0..400 {
        f.random_edits(&mut walk, &words);
        let full = f.outline();
        assert_eq!(*live.refresh(), full, "round {round}");
    }
}

/// The same walk over a document a few hundred blocks long, with every read
/// remembered as a Planner's is (SPEC S5): each refresh then changes an
/// outline that reads still share, and each read must keep what it saw.
#[test]
fn random_edits_to_a_long_document_leave_every_remembered_read_as_it_was() {
    let mut walk = Walk::new(0x5eed_1234_abcd_0002);
    let words = ["alpha", "beta", "Pick a region", "Budget", "gamma delta"];
    let texts: Vec<String> = (0..300).map(|n| format!("paragraph {n}")).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut f = Fixture::with(&texts);
    let mut live = LiveOutline::new(&f.doc);
    let mut reads = Vec::new();
    for round in 0..200 {
        f.random_edits(&mut walk, &words);
        let full = f.outline();
        assert!(*live.refresh() == full, "round {round}");
        reads.push((live.snapshot(), full));
    }
    for (round, (read, full)) in reads.iter().enumerate() {
        assert!(**read == *full, "read of round {round} changed");
    }
}
