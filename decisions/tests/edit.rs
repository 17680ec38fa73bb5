//! `edit_plan` over a real `yrs` document (SPEC S5).

use margin_decisions::{apply_edits, BlockKind, Edit, EditError, Outline, Passage, FRAGMENT_NAME};
use pretty_assertions::assert_eq;
use yrs::types::xml::{XmlElementPrelim, XmlTextPrelim};
use yrs::{Doc, Transact, XmlFragment};

fn doc_with(texts: &[&str]) -> Doc {
    let doc = Doc::new();
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    let mut txn = doc.transact_mut();
    for (i, text) in texts.iter().enumerate() {
        let p = fragment.insert(&mut txn, i as u32, XmlElementPrelim::empty("paragraph"));
        p.insert(&mut txn, 0, XmlTextPrelim::new(*text));
    }
    drop(txn);
    doc
}

fn edit(doc: &Doc, edits: &[Edit]) -> Result<(), EditError> {
    let outline = Outline::of_doc(doc);
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    let mut txn = doc.transact_mut();
    apply_edits(&mut txn, &fragment, &outline, edits)
}

fn at(doc: &Doc, index: usize) -> Passage {
    Passage {
        index,
        digest: Outline::of_doc(doc).get(index).unwrap().digest,
    }
}

fn texts(doc: &Doc) -> Vec<String> {
    Outline::of_doc(doc)
        .blocks()
        .map(|b| format!("{}:{}", b.kind, b.text))
        .collect()
}

#[test]
fn inserts_replaces_and_deletes_by_address() {
    let doc = doc_with(&["One", "Two", "Three"]);
    let before = Outline::of_doc(&doc);
    edit(
        &doc,
        &[
            Edit::Insert {
                after: None,
                kind: BlockKind::Heading(2),
                text: "Plan".into(),
            },
            Edit::Replace {
                at: at(&doc, 1),
                text: "Two, revised".into(),
            },
            Edit::Delete { at: at(&doc, 2) },
            Edit::Insert {
                after: Some(at(&doc, 0)),
                kind: BlockKind::Paragraph,
                text: "One and a half".into(),
            },
        ],
    )
    .unwrap();
    assert_eq!(
        texts(&doc),
        vec![
            "heading:Plan",
            "paragraph:One",
            "paragraph:One and a half",
            "paragraph:Two, revised"
        ]
    );
    // A replaced block keeps its identity; only its digest changes.
    let after = Outline::of_doc(&doc);
    assert_eq!(
        after.get(3).unwrap().identity,
        before.get(1).unwrap().identity
    );
}

#[test]
fn several_inserts_after_one_block_keep_their_order() {
    let doc = doc_with(&["Intro"]);
    let intro = at(&doc, 0);
    let insert = |text: &str| Edit::Insert {
        after: Some(intro),
        kind: BlockKind::Paragraph,
        text: text.into(),
    };
    edit(&doc, &[insert("a"), insert("b"), insert("c")]).unwrap();
    assert_eq!(
        texts(&doc),
        vec![
            "paragraph:Intro",
            "paragraph:a",
            "paragraph:b",
            "paragraph:c"
        ]
    );
}

#[test]
fn one_bad_address_changes_nothing() {
    let doc = doc_with(&["One", "Two"]);
    let wrong = Passage {
        index: 0,
        digest: at(&doc, 1).digest,
    };
    let result = edit(
        &doc,
        &[
            Edit::Delete { at: at(&doc, 1) },
            Edit::Replace {
                at: wrong,
                text: "x".into(),
            },
        ],
    );
    assert_eq!(result.unwrap_err().code(), "address_mismatch");
    assert_eq!(texts(&doc), vec!["paragraph:One", "paragraph:Two"]);
}

#[test]
fn bad_edits_are_refused_with_the_rule() {
    let doc = doc_with(&["One"]);
    let one = at(&doc, 0);
    let cases = vec![
        (vec![], "1 to 64 edits"),
        (
            vec![Edit::Replace {
                at: one,
                text: " ".into(),
            }],
            "blank",
        ),
        (
            vec![Edit::Replace {
                at: one,
                text: "x".repeat(10_001),
            }],
            "limit is 10000",
        ),
        (
            vec![Edit::Delete {
                at: Passage {
                    index: 5,
                    digest: one.digest,
                },
            }],
            "no block at index 5",
        ),
        (
            vec![
                Edit::Delete { at: one },
                Edit::Replace {
                    at: one,
                    text: "x".into(),
                },
            ],
            "already replaced or deleted",
        ),
        (
            vec![
                Edit::Delete { at: one },
                Edit::Insert {
                    after: Some(one),
                    kind: BlockKind::Paragraph,
                    text: "x".into(),
                },
            ],
            "insert after is deleted",
        ),
    ];
    for (edits, expected) in cases {
        let error = edit(&doc, &edits).unwrap_err();
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
    assert_eq!(
        BlockKind::parse("heading", Some(4)).unwrap_err(),
        "a heading needs a level from 1 to 3"
    );
    assert!(BlockKind::parse("table", None).is_err());
    assert_eq!(texts(&doc), vec!["paragraph:One"]);
}
