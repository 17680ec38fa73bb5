//! The reply policy (SPEC T2).

use margin_planner::reply::{judge, questions, repaired, Verdict};
use pretty_assertions::assert_eq;

#[test]
fn a_reply_without_questions_is_published() {
    assert_eq!(
        judge("I added the risks section. Budget is next."),
        Verdict::Publish
    );
}

#[test]
fn a_reply_that_asks_people_something_is_withheld_with_its_questions() {
    let reply =
        "I drafted the launch plan.\nShould we launch in the EU first? Or the US? Let me know.";
    assert_eq!(
        judge(reply),
        Verdict::Withhold {
            questions: vec![
                "Should we launch in the EU first?".into(),
                "Or the US?".into()
            ]
        }
    );
}

#[test]
fn question_marks_in_code_and_quotes_ask_nothing() {
    let reply = "The regex is `a?b` now.\n```\nlet x = y?;\n```\n> Who owns this?\nDone.";
    assert_eq!(questions(reply), Vec::<String>::new());
}

#[test]
fn list_items_and_full_width_marks_are_questions_too() {
    assert_eq!(
        questions("- Which region?\n* 予算は？"),
        vec!["Which region?", "予算は？"]
    );
    assert_eq!(questions("???"), Vec::<String>::new());
}

#[test]
fn a_repair_succeeds_only_when_captured_cards_cover_the_questions() {
    // Two questions withheld: two cards replayed or new succeed.
    assert!(repaired(2, 2));
    assert!(repaired(2, 3));
    // A replayed discarded card does not count, so one live card fails.
    assert!(!repaired(2, 1));
    assert!(!repaired(1, 0));
}

#[test]
fn a_message_calls_the_planner_only_by_its_whole_name() {
    use margin_planner::reply::mentions_planner;
    assert!(mentions_planner("@planner draft the risks"));
    assert!(mentions_planner("thanks, @Planner!"));
    assert!(!mentions_planner("mail me at ops@plannerco.com"));
    assert!(!mentions_planner("@planners unite"));
    assert!(!mentions_planner("no mention"));
}
