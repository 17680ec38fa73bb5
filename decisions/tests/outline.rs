//! Outline behaviour over real `yrs` documents (SPEC S4).

use margin_decisions::{Digest, Outline, FRAGMENT_NAME};
use pretty_assertions::assert_eq;
use yrs::types::xml::{XmlElementPrelim, XmlTextPrelim};
use yrs::{Doc, Text, Transact, XmlFragment, XmlOut};

fn insert_paragraph(doc: &Doc, index: u32, text: &str) {
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    let mut txn = doc.transact_mut();
    let paragraph = fragment.insert(&mut txn, index, XmlElementPrelim::empty("paragraph"));
    paragraph.insert(&mut txn, 0, XmlTextPrelim::new(text));
}

fn remove_block(doc: &Doc, index: u32) {
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    let mut txn = doc.transact_mut();
    fragment.remove_range(&mut txn, index, 1);
}

fn append_to_block(doc: &Doc, index: u32, text: &str) {
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    let mut txn = doc.transact_mut();
    let Some(XmlOut::Element(block)) = fragment.get(&txn, index) else {
        panic!("block {index} is not an element");
    };
    let Some(XmlOut::Text(body)) = block.get(&txn, 0) else {
        panic!("block {index} has no text");
    };
    let end = body.len(&txn);
    body.insert(&mut txn, end, text);
}

#[test]
fn empty_document_has_empty_outline() {
    assert_eq!(Outline::of_doc(&Doc::new()), Outline::default());
}

#[test]
fn outline_lists_blocks_in_order_with_kind_and_normalised_text() {
    let doc = Doc::new();
    insert_paragraph(&doc, 0, "  Ship   the beta ");
    insert_paragraph(&doc, 1, "Pick a region");
    let outline = Outline::of_doc(&doc);
    let summary: Vec<_> = outline
        .blocks()
        .map(|b| (b.index, &*b.kind, &*b.text))
        .collect();
    assert_eq!(
        summary,
        vec![
            (0, "paragraph", "Ship the beta"),
            (1, "paragraph", "Pick a region")
        ]
    );
    assert_eq!(
        outline.get(0).unwrap().digest,
        Digest::of("paragraph", "Ship the beta")
    );
}

/// The outline's first two blocks share a digest, counted twice, and are
/// still two blocks.
fn assert_first_two_are_twins(outline: &Outline) {
    let (first, second) = (outline.get(0).unwrap(), outline.get(1).unwrap());
    assert_eq!(first.digest, second.digest);
    assert_ne!(first.identity, second.identity);
    assert_eq!(outline.count_digest(&first.digest), 2);
}

#[test]
fn twins_have_equal_digests_and_distinct_identities() {
    let doc = Doc::new();
    insert_paragraph(&doc, 0, "Same words");
    insert_paragraph(&doc, 1, "Same words");
    let outline = Outline::of_doc(&doc);
    assert_first_two_are_twins(&outline);
}

#[test]
fn twins_across_unicode_spellings_have_equal_digests_and_nfc_text() {
    let doc = Doc::new();
    // Composed U+00E9, then `e` + combining acute U+0301.
    insert_paragraph(&doc, 0, "Pick a caf\u{e9}");
    insert_paragraph(&doc, 1, "Pick a cafe\u{301}");
    let outline = Outline::of_doc(&doc);
    assert_eq!(&*outline.get(1).unwrap().text, "Pick a caf\u{e9}");
    assert_first_two_are_twins(&outline);
}

#[test]
fn nested_text_in_a_decomposed_spelling_is_composed() {
    let doc = Doc::new();
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    {
        let mut txn = doc.transact_mut();
        let list = fragment.insert(&mut txn, 0, XmlElementPrelim::empty("bulletList"));
        for (i, words) in ["cafe\u{301}", "\u{301}clair"].into_iter().enumerate() {
            let item = list.insert(&mut txn, i as u32, XmlElementPrelim::empty("listItem"));
            let para = item.insert(&mut txn, 0, XmlElementPrelim::empty("paragraph"));
            para.insert(&mut txn, 0, XmlTextPrelim::new(words));
        }
    }
    let block = Outline::of_doc(&doc).get(0).unwrap().clone();
    // The second item's leading mark has only the separating space before
    // it, so it stays a lone mark; the first item's composes.
    assert_eq!(&*block.text, "caf\u{e9} \u{301}clair");
    assert_eq!(
        block.digest,
        Digest::of("bulletList", "caf\u{e9} \u{301}clair")
    );
}

#[test]
fn editing_a_block_changes_its_digest_and_keeps_its_identity() {
    let doc = Doc::new();
    insert_paragraph(&doc, 0, "Draft");
    let before = Outline::of_doc(&doc).get(0).unwrap().clone();
    append_to_block(&doc, 0, " two");
    let after = Outline::of_doc(&doc).get(0).unwrap().clone();
    assert_eq!(&*after.text, "Draft two");
    assert_ne!(before.digest, after.digest);
    assert_eq!(before.identity, after.identity);
}

#[test]
fn deleting_and_reinserting_a_block_gives_a_new_identity() {
    let doc = Doc::new();
    insert_paragraph(&doc, 0, "Moved paragraph");
    let before = Outline::of_doc(&doc).get(0).unwrap().clone();
    remove_block(&doc, 0);
    insert_paragraph(&doc, 0, "Moved paragraph");
    let after = Outline::of_doc(&doc).get(0).unwrap().clone();
    assert_eq!(before.digest, after.digest);
    assert_ne!(before.identity, after.identity);
}

#[test]
fn identity_survives_sync_to_another_replica() {
    use yrs::updates::decoder::Decode;
    use yrs::{ReadTxn, StateVector, Update};
    let doc = Doc::new();
    insert_paragraph(&doc, 0, "Replicated");
    let update = doc
        .transact()
        .encode_state_as_update_v1(&StateVector::default());
    let replica = Doc::new();
    replica
        .transact_mut()
        .apply_update(Update::decode_v1(&update).unwrap())
        .unwrap();
    assert_eq!(Outline::of_doc(&doc), Outline::of_doc(&replica));
}

#[test]
fn formatted_and_nested_text_is_read_as_plain_words() {
    let doc = Doc::new();
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    {
        let mut txn = doc.transact_mut();
        let list = fragment.insert(&mut txn, 0, XmlElementPrelim::empty("bulletList"));
        for (i, words) in ["first item", "second item"].into_iter().enumerate() {
            let item = list.insert(&mut txn, i as u32, XmlElementPrelim::empty("listItem"));
            let para = item.insert(&mut txn, 0, XmlElementPrelim::empty("paragraph"));
            let text = para.insert(&mut txn, 0, XmlTextPrelim::new(words));
            text.format(
                &mut txn,
                0,
                5,
                std::collections::HashMap::from([("bold".into(), true.into())]),
            );
        }
    }
    let outline = Outline::of_doc(&doc);
    assert_eq!(outline.len(), 1);
    assert_eq!(&*outline.get(0).unwrap().kind, "bulletList");
    assert_eq!(&*outline.get(0).unwrap().text, "first item second item");
}

#[test]
fn a_paragraph_broken_by_a_hard_break_reads_the_words_of_both_lines() {
    let doc = Doc::new();
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    {
        let mut txn = doc.transact_mut();
        let para = fragment.insert(&mut txn, 0, XmlElementPrelim::empty("paragraph"));
        para.insert(&mut txn, 0, XmlTextPrelim::new("first line"));
        para.insert(&mut txn, 1, XmlElementPrelim::empty("hardBreak"));
        para.insert(&mut txn, 2, XmlTextPrelim::new("second line"));
    }
    let outline = Outline::of_doc(&doc);
    assert_eq!(&*outline.get(0).unwrap().text, "first line second line");
    assert_eq!(
        outline.get(0).unwrap().digest,
        Digest::of("paragraph", "first line second line")
    );
    // With the break and the second line deleted, the first text is the
    // paragraph's only child again, though its deleted siblings remain.
    {
        let mut txn = doc.transact_mut();
        let Some(XmlOut::Element(para)) = fragment.get(&txn, 0) else {
            panic!("the paragraph is gone");
        };
        para.remove_range(&mut txn, 1, 2);
    }
    let outline = Outline::of_doc(&doc);
    assert_eq!(&*outline.get(0).unwrap().text, "first line");
}
