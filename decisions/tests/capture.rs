//! The `open_decisions` engine, case by case (SPEC S5, D1–D10).

// The random edits of the harness are for the outline tests.
#[allow(dead_code)]
mod support;

use margin_decisions::{
    open_decisions, Access, BatchError, CaptureSummary, CardState, Cause, Choice, DocumentState,
    Key, Outcome, Passage, ReadCache, ResponseKind, Strictness,
};
use pretty_assertions::assert_eq;
use support::{card, code, digest_of, Fixture};

const PLAN: [&str; 4] = ["Intro", "Pick a region", "Budget", "Launch date"];

#[test]
fn current_batch_anchors_each_card_to_the_addressed_block() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let captures = f
        .open(at, &[card("region", "Which region?", vec![f.passage(1)])])
        .unwrap();
    assert_eq!(captures.len(), 1);
    assert!(captures[0].created() && captures[0].captured);
    assert_eq!(f.anchored_at("region"), Some(1));
}

#[test]
fn a_new_card_keeps_what_its_paragraph_said_when_it_was_opened() {
    let long = format!("Pick a region {}", "and say why ".repeat(20));
    let mut f = Fixture::with(&["Intro", &long]);
    let at = f.read();
    f.open(at, &[card("region", "Which region?", vec![f.passage(1)])])
        .unwrap();
    let excerpt = f.card("region").excerpt.clone().unwrap();
    assert!(
        excerpt.starts_with("Pick a region and say why"),
        "{excerpt}"
    );
    assert!(
        excerpt.ends_with('…') && excerpt.chars().count() <= 161,
        "cut to 160 characters: {excerpt}"
    );
    // The paragraph going away later leaves the excerpt as it was.
    f.rewrite(1, "Something else entirely");
    assert_eq!(f.card("region").excerpt.as_deref(), Some(excerpt.as_str()));
}

#[test]
fn unrelated_edit_elsewhere_keeps_a_stale_batch_on_the_right_blocks() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let (region, budget) = (f.passage(1), f.passage(2));
    f.insert(0, "A new first paragraph");
    f.rewrite(4, "Launch date: March");
    let captures = f
        .open(
            at,
            &[
                card("region", "Which region?", vec![region]),
                card("budget", "How much?", vec![budget]),
            ],
        )
        .unwrap();
    assert_eq!(CaptureSummary::of(&captures).added, 2);
    assert_eq!(f.anchored_at("region"), Some(2));
    assert_eq!(f.anchored_at("budget"), Some(3));
}

#[test]
fn mixed_batch_replays_existing_keys_and_creates_new_ones_at_a_stale_revision() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let first = card("region", "Which region?", vec![f.passage(1)]);
    f.open(at, std::slice::from_ref(&first)).unwrap();
    let second = card("budget", "How much?", vec![f.passage(2)]);
    f.insert(4, "Someone typing at the end");
    let captures = f.open(at, &[first, second]).unwrap();
    let summary = CaptureSummary::of(&captures);
    assert_eq!(
        (
            summary.added,
            summary.already_in_document,
            summary.captured()
        ),
        (1, 1, 2)
    );
    assert_eq!(
        summary.to_string(),
        "added 1 decision; 1 decision already in the document"
    );
    assert_eq!(f.cards.len(), 2);
}

#[test]
fn identical_paragraph_inserted_ahead_refuses_twin_now_and_creates_nothing() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let region = f.passage(1);
    f.insert(0, "Pick a region");
    let result = f.open(at, &[card("region", "Which region?", vec![region])]);
    assert_eq!(code(&result), "twin_now");
    assert!(f.cards.is_empty());
}

/// "Pick a café" spelled composed (U+00E9) and decomposed (`e` + U+0301):
/// the same words to a reader, so twins (SPEC S4a).
const CAFE_NFC: &str = "Pick a caf\u{e9}";
const CAFE_NFD: &str = "Pick a cafe\u{301}";

#[test]
fn twins_across_unicode_spellings_refuse_a_stale_batch_with_twin_now() {
    let mut f = Fixture::with(&["Intro", CAFE_NFC, "Budget", "Launch date"]);
    let at = f.read();
    let cafe = f.passage(1);
    // The same words typed ahead in the other spelling: as for a
    // byte-identical copy, the batch cannot tell which one it meant.
    f.insert(0, CAFE_NFD);
    let result = f.open(at, &[card("cafe", "Which café?", vec![cafe])]);
    assert_eq!(code(&result), "twin_now");
    assert!(f.cards.is_empty());
}

#[test]
fn twins_across_unicode_spellings_when_read_refuse_repeated_when_read() {
    let mut f = Fixture::with(&[CAFE_NFD, "Other", CAFE_NFC]);
    let at = f.read();
    let addressed = f.passage(2);
    f.delete(0);
    let result = f.open(at, &[card("k", "Which one?", vec![addressed])]);
    assert_eq!(code(&result), "repeated_when_read");
    assert!(f.cards.is_empty());
}

#[test]
fn decomposed_paragraph_is_addressed_by_the_digest_of_its_composed_text() {
    let mut f = Fixture::with(&["Intro", CAFE_NFD]);
    let at = f.read();
    assert_eq!(&*f.outline().get(1).unwrap().text, CAFE_NFC);
    assert_eq!(f.passage(1).digest, digest_of(CAFE_NFC));
    let captures = f
        .open(at, &[card("cafe", "Which café?", vec![f.passage(1)])])
        .unwrap();
    assert!(captures[0].created());
    assert_eq!(f.anchored_at("cafe"), Some(1));
}

#[test]
fn paragraph_rewritten_beside_an_identical_copy_refuses_block_rewritten() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let region = f.passage(1);
    // The paragraph read is rewritten, and a copy of its old words appears:
    // a digest-only match would land on the copy.
    f.rewrite(1, "Pick a region in the EU");
    f.insert(3, "Pick a region");
    let result = f.open(at, &[card("region", "Which region?", vec![region])]);
    assert_eq!(code(&result), "block_rewritten");
    assert!(f.cards.is_empty());
}

#[test]
fn paragraph_already_repeated_when_read_refuses_repeated_when_read() {
    let mut f = Fixture::with(&["Same words", "Other", "Same words"]);
    let at = f.read();
    let addressed = f.passage(2);
    f.delete(0);
    let result = f.open(at, &[card("k", "Which one?", vec![addressed])]);
    assert_eq!(code(&result), "repeated_when_read");
}

#[test]
fn read_no_longer_retained_after_nine_later_outlines_refuses_read_evicted() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let region = f.passage(1);
    for i in 0..8 {
        f.insert(4 + i, &format!("typed {i}"));
        f.read();
    }
    let result = f.open(at, &[card("region", "Which region?", vec![region])]);
    assert_eq!(code(&result), "read_evicted");
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("\"region\"") && message.contains("read it again"),
        "{message}"
    );
}

#[test]
fn read_lost_in_a_restart_refuses_read_evicted() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let region = f.passage(1);
    f.insert(4, "typed");
    f.restart();
    assert_eq!(
        f.refused(at, &[card("region", "Which region?", vec![region])]),
        "read_evicted"
    );
}

#[test]
fn paragraph_moved_refuses_block_removed_or_moved() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let region = f.passage(1);
    f.move_block(1, 3);
    assert_eq!(
        f.refused(at, &[card("region", "Which region?", vec![region])]),
        "block_removed_or_moved"
    );
    let mut g = Fixture::with(&PLAN);
    let at = g.read();
    let region = g.passage(1);
    g.delete(1);
    assert_eq!(
        code(&g.open(at, &[card("region", "Which region?", vec![region])])),
        "block_removed_or_moved"
    );
}

#[test]
fn address_whose_index_disagrees_with_its_digest_refuses_address_mismatch() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let wrong = Passage {
        index: 2,
        digest: digest_of("Pick a region"),
    };
    assert_eq!(
        f.refused(at, &[card("k", "Q?", vec![wrong])]),
        "address_mismatch"
    );
    f.insert(0, "typed");
    assert_eq!(
        f.refused(at, &[card("k", "Q?", vec![wrong])]),
        "address_mismatch"
    );
    assert!(f.cards.is_empty());
}

fn existing_region(f: &mut Fixture) -> (i64, margin_decisions::CardSpec) {
    let at = f.read();
    let spec = card("region", "Which region?", vec![f.passage(1)]);
    f.open(at, std::slice::from_ref(&spec)).unwrap();
    (at, spec)
}

#[test]
fn repeated_key_with_another_decision_refuses_different_decision_naming_the_key() {
    type Change = Box<dyn Fn(&mut margin_decisions::CardSpec, &Fixture)>;
    let variants: Vec<(&str, Change)> = vec![
        (
            "question",
            Box::new(|c, _| c.question = "Which regions?".into()),
        ),
        (
            "description",
            Box::new(|c, _| c.description = Some("context".into())),
        ),
        (
            "response kind",
            Box::new(|c, _| c.response = ResponseKind::MultipleChoice),
        ),
        (
            "choice list",
            Box::new(|c, _| c.choices.push("Maybe".into())),
        ),
        ("passage", Box::new(|c, f| c.passages = vec![f.passage(2)])),
    ];
    for (differs, change) in variants {
        let mut f = Fixture::with(&PLAN);
        let (at, mut spec) = existing_region(&mut f);
        change(&mut spec, &f);
        let fresh = card("fresh", "New question?", vec![f.passage(3)]);
        let result = f.open(at, &[fresh, spec]);
        let Err(BatchError::Refused(refusal)) = &result else {
            panic!("{differs}: expected a refusal, got {result:?}");
        };
        assert_eq!(
            refusal.cause,
            Cause::DifferentDecision { differs },
            "{differs}"
        );
        assert_eq!(refusal.key, Some(Key::parse("region").unwrap()));
        assert!(refusal
            .to_string()
            .contains("already holds a different decision"));
        // The mixed batch created nothing: "fresh" does not exist.
        assert_eq!(f.cards.len(), 1, "{differs}");
    }
}

#[test]
fn identical_replay_after_a_person_added_an_option_is_idempotent_and_counted() {
    let mut f = Fixture::with(&PLAN);
    let (at, spec) = existing_region(&mut f);
    f.card_mut("region").choices.push(Choice {
        id: "p1".into(),
        label: "Both".into(),
        added_by: Some("bo".into()),
    });
    f.insert(4, "typed");
    let captures = f.open(at, &[spec]).unwrap();
    assert_eq!(CaptureSummary::of(&captures).already_in_document, 1);
    assert_eq!(
        captures[0].outcome,
        Outcome::AlreadyInDocument {
            id: "card-1".into(),
            state: CardState::Open
        }
    );
    assert_eq!(f.cards.len(), 1);
}

#[test]
fn identical_replay_after_restart_beside_its_paragraph_is_idempotent() {
    let mut f = Fixture::with(&PLAN);
    let (at, spec) = existing_region(&mut f);
    f.insert(0, "typed ahead");
    f.restart();
    let captures = f.open(at, &[spec]).unwrap();
    assert!(!captures[0].created() && captures[0].captured);
}

#[test]
fn replay_with_read_evicted_beside_a_twin_of_a_rewritten_paragraph_is_refused() {
    let mut f = Fixture::with(&PLAN);
    let (at, spec) = existing_region(&mut f);
    f.rewrite(1, "Pick a region: EU");
    f.insert(3, "Pick a region");
    f.restart();
    assert_eq!(f.refused(at, &[spec]), "read_evicted");
}

#[test]
fn replay_with_read_held_after_a_rewrite_beside_a_copy_refuses_block_rewritten() {
    let mut f = Fixture::with(&PLAN);
    let (at, spec) = existing_region(&mut f);
    f.rewrite(1, "Pick a region: EU");
    f.insert(3, "Pick a region");
    // The read names the card's own block, but that block no longer carries
    // what was read: D6 holds for a replay as for the rest of its batch.
    assert_eq!(f.refused(at, &[spec]), "block_rewritten");
    assert_eq!(f.cards.len(), 1);
}

#[test]
fn replay_with_read_held_after_a_rewrite_refuses_block_rewritten() {
    let mut f = Fixture::with(&PLAN);
    let (at, spec) = existing_region(&mut f);
    f.rewrite(1, "Pick a region: EU");
    assert_eq!(f.refused(at, &[spec]), "block_rewritten");
}

#[test]
fn replay_with_read_evicted_after_a_rewrite_refuses_read_evicted() {
    let mut f = Fixture::with(&PLAN);
    let (at, spec) = existing_region(&mut f);
    f.rewrite(1, "Pick a region: EU");
    f.restart();
    assert_eq!(f.refused(at, &[spec]), "read_evicted");
}

#[test]
fn replay_with_read_held_after_an_unrelated_edit_is_idempotent() {
    let mut f = Fixture::with(&PLAN);
    let (at, spec) = existing_region(&mut f);
    f.rewrite(3, "Launch date: March");
    let captures = f.open(at, &[spec]).unwrap();
    assert!(!captures[0].created() && captures[0].captured);
}

#[test]
fn two_passage_card_with_second_passage_rewritten_beside_a_copy_and_read_evicted_refuses_then_retry_succeeds(
) {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let spec = card(
        "both",
        "Region and budget?",
        vec![f.passage(1), f.passage(2)],
    );
    f.open(at, std::slice::from_ref(&spec)).unwrap();
    f.rewrite(2, "Budget: 10k");
    f.insert(3, "Budget");
    for i in 0..9 {
        f.insert(5 + i, &format!("typed {i}"));
        f.read();
    }
    assert_eq!(f.refused(at, std::slice::from_ref(&spec)), "read_evicted");
    // Reading again: the Planner addresses the card's blocks as they are now.
    let fresh = f.read();
    let retry = card(
        "both",
        "Region and budget?",
        vec![f.passage(1), f.passage(2)],
    );
    let captures = f.open(fresh, std::slice::from_ref(&retry)).unwrap();
    assert!(!captures[0].created() && captures[0].captured);
    let again = f.open(fresh, &[retry]).unwrap();
    assert_eq!(again, captures);
    assert_eq!(f.cards.len(), 1);
}

#[test]
fn stale_replay_naming_a_different_intact_paragraph_refuses_different_decision() {
    let mut f = Fixture::with(&PLAN);
    let (at, mut spec) = existing_region(&mut f);
    spec.passages = vec![f.passage(2)];
    f.insert(4, "typed");
    let result = f.open(at, &[spec]);
    assert_eq!(code(&result), "different_decision");
}

#[test]
fn replayed_discarded_key_is_not_recreated_and_not_counted() {
    let mut f = Fixture::with(&PLAN);
    let (at, spec) = existing_region(&mut f);
    f.card_mut("region").state = CardState::Discarded;
    let captures = f.open(at, &[spec]).unwrap();
    assert_eq!(captures[0].captured, false);
    let summary = CaptureSummary::of(&captures);
    assert_eq!((summary.captured(), summary.not_captured), (0, 1));
    assert_eq!(f.card("region").state, CardState::Discarded);
    assert_eq!(f.cards.len(), 1);
}

#[test]
fn cancelled_card_never_counts() {
    let mut f = Fixture::with(&PLAN);
    let (at, spec) = existing_region(&mut f);
    f.card_mut("region").state = CardState::Cancelled;
    assert_eq!(
        CaptureSummary::of(&f.open(at, &[spec]).unwrap()).captured(),
        0
    );
}

#[test]
fn answered_and_reopened_cards_still_count() {
    for state in [CardState::Answered, CardState::Reopened] {
        let mut f = Fixture::with(&PLAN);
        let (at, spec) = existing_region(&mut f);
        f.card_mut("region").state = state;
        assert_eq!(
            CaptureSummary::of(&f.open(at, &[spec]).unwrap()).captured(),
            1,
            "{state:?}"
        );
    }
}

#[test]
fn open_decision_and_ask_at_a_stale_revision_refuse_stale_revision() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let spec = card("region", "Which region?", vec![f.passage(1)]);
    f.insert(4, "typed");
    let result = f.open_strict(at, spec.clone());
    assert_eq!(code(&result), "stale_revision");
    assert!(f.cards.is_empty());
    let now = f.read();
    assert_eq!(code(&f.open_strict(now, spec)), "ok");
}

#[test]
fn one_bad_card_in_a_batch_of_many_creates_nothing() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let mut cards: Vec<_> = (0..10)
        .map(|i| card(&format!("k{i}"), "Q?", vec![f.passage(i % 4)]))
        .collect();
    cards.push(card(
        "bad",
        "Q?",
        vec![Passage {
            index: 0,
            digest: digest_of("nope"),
        }],
    ));
    assert_eq!(f.refused(at, &cards), "address_mismatch");
    assert!(f.cards.is_empty());
}

#[test]
fn access_is_confirmed_before_the_batch_is_read() {
    let f = Fixture::with(&PLAN);
    let outline = f.outline();
    let reads = ReadCache::default();
    let document = DocumentState {
        revision: f.revision,
        outline: &outline,
        reads: &reads,
    };
    // Even an invalid batch gets no_access: nothing about it was read.
    let result = open_decisions(
        document,
        Access::Denied,
        |_| None,
        999,
        &[],
        Strictness::StaleAllowed,
    );
    assert_eq!(code(&result), "no_access");
}

#[test]
fn bad_input_is_a_clear_error_and_creates_nothing() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let region = f.passage(1);
    let good = || card("k", "Which?", vec![region]);
    let long = "x".repeat(501);
    let cases: Vec<(margin_decisions::CardSpec, &str)> = vec![
        (
            {
                let mut c = good();
                c.question = "  ".into();
                c
            },
            "question is blank",
        ),
        (
            {
                let mut c = good();
                c.question = long;
                c
            },
            "limit is 500",
        ),
        (
            {
                let mut c = good();
                c.question = "a\u{1b}b".into();
                c
            },
            "control characters",
        ),
        (
            {
                let mut c = good();
                c.choices = vec!["only".into()];
                c
            },
            "at least 2 choices",
        ),
        (
            {
                let mut c = good();
                c.choices = (0..25).map(|i| i.to_string()).collect();
                c
            },
            "at most 24 choices",
        ),
        (
            {
                let mut c = good();
                c.choices = vec!["a".into(), "a".into()];
                c
            },
            "listed twice",
        ),
        (
            {
                let mut c = good();
                c.response = ResponseKind::FreeText;
                c
            },
            "has no choices",
        ),
        (
            {
                let mut c = good();
                c.passages = vec![];
                c
            },
            "1 to 8 passages",
        ),
        (
            {
                let mut c = good();
                c.passages = vec![region; 9];
                c
            },
            "1 to 8 passages",
        ),
        (
            {
                let mut c = good();
                c.passages = vec![Passage {
                    index: 40,
                    digest: digest_of("x"),
                }];
                c
            },
            "no block at index 40",
        ),
    ];
    for (spec, expected) in cases {
        let result = f.open(at, &[spec]);
        let Err(BatchError::Invalid(error)) = &result else {
            panic!("{expected}: got {result:?}")
        };
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
    let twice = f.open(at, &[good(), good()]);
    assert!(twice.unwrap_err().to_string().contains("appears twice"));
    assert_eq!(f.refused(at + 5, &[good()]), "invalid_input");
    let too_many: Vec<_> = (0..33)
        .map(|i| card(&format!("k{i}"), "Q?", vec![region]))
        .collect();
    assert_eq!(f.refused(at, &too_many), "invalid_input");
    assert!(
        Key::parse("").is_err()
            && Key::parse("has space").is_err()
            && Key::parse(&"k".repeat(129)).is_err()
    );
    assert!(f.cards.is_empty());
}

#[test]
fn multi_passage_replay_without_its_read_is_refused_until_read_again() {
    let mut f = Fixture::with(&PLAN);
    let at = f.read();
    let spec = card(
        "both",
        "Region and budget?",
        vec![f.passage(1), f.passage(2)],
    );
    f.open(at, std::slice::from_ref(&spec)).unwrap();
    f.insert(0, "typed");
    f.restart();
    // Both passages are intact, yet a later passage cannot be told from a
    // copy without the read: the Planner must read again (SPEC D7).
    assert_eq!(f.refused(at, std::slice::from_ref(&spec)), "read_evicted");
    let fresh = f.read();
    let retry = card(
        "both",
        "Region and budget?",
        vec![f.passage(2), f.passage(3)],
    );
    assert!(!f.open(fresh, &[retry]).unwrap()[0].created());
}
