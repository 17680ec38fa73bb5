//! People's actions on a card: answer, discard, reopen, add an option or a
//! criterion (SPEC D).

use margin_decisions::{act, Action, Answer, CardState, Choice, DecisionCard, Key, ResponseKind};
use margin_protocol::ErrorCode;
use pretty_assertions::assert_eq;

fn card(response: ResponseKind) -> DecisionCard {
    let choices = if response.has_choices() {
        ["EU", "US"]
            .iter()
            .enumerate()
            .map(|(i, l)| Choice {
                id: format!("c{}", i + 1),
                label: (*l).into(),
                added_by: None,
            })
            .collect()
    } else {
        vec![]
    };
    DecisionCard {
        id: "card-1".into(),
        key: Key::parse("region").unwrap(),
        question: "Which region?".into(),
        description: None,
        response,
        choices,
        criteria: vec![],
        anchors: vec![],
        state: CardState::Open,
        answer: None,
        answered_by: None,
        excerpt: None,
    }
}

#[test]
fn answer_then_reopen_then_answer_again() {
    let mut c = card(ResponseKind::SingleChoice);
    act(
        &mut c,
        "bo",
        Action::Answer(Answer::Choices(vec!["c2".into()])),
    )
    .unwrap();
    assert_eq!(
        (c.state, c.answer.clone(), c.answered_by.as_deref()),
        (
            CardState::Answered,
            Some(Answer::Choices(vec!["c2".into()])),
            Some("bo")
        )
    );
    act(&mut c, "ada", Action::Reopen).unwrap();
    assert_eq!(c.state, CardState::Reopened);
    act(
        &mut c,
        "ada",
        Action::Answer(Answer::Choices(vec!["c1".into()])),
    )
    .unwrap();
    assert_eq!(
        (c.state, c.answered_by.as_deref()),
        (CardState::Answered, Some("ada"))
    );
}

#[test]
fn discard_and_reopen() {
    let mut c = card(ResponseKind::YesNo);
    act(&mut c, "bo", Action::Discard).unwrap();
    assert_eq!(c.state, CardState::Discarded);
    assert_eq!(
        act(&mut c, "bo", Action::Discard).unwrap_err().code,
        ErrorCode::InvalidTransition
    );
    assert_eq!(
        act(&mut c, "bo", Action::Answer(Answer::YesNo(true)))
            .unwrap_err()
            .code,
        ErrorCode::InvalidTransition
    );
    act(&mut c, "bo", Action::Reopen).unwrap();
    act(&mut c, "bo", Action::Answer(Answer::YesNo(true))).unwrap();
    assert_eq!(c.answer, Some(Answer::YesNo(true)));
}

#[test]
fn cancelled_cards_take_no_actions() {
    let mut c = card(ResponseKind::SingleChoice);
    c.state = CardState::Cancelled;
    for action in [
        Action::Discard,
        Action::Reopen,
        Action::AddOption("x".into()),
        Action::Answer(Answer::Choices(vec!["c1".into()])),
    ] {
        assert_eq!(
            act(&mut c, "bo", action).unwrap_err().code,
            ErrorCode::InvalidTransition
        );
    }
    assert_eq!(c.state, CardState::Cancelled);
}

#[test]
fn people_add_options_and_criteria_with_their_own_ids() {
    let mut c = card(ResponseKind::MultipleChoice);
    act(&mut c, "bo", Action::AddOption("Both".into())).unwrap();
    act(&mut c, "cy", Action::AddOption("Neither".into())).unwrap();
    act(&mut c, "cy", Action::AddCriterion("cost".into())).unwrap();
    let added: Vec<_> = c
        .choices
        .iter()
        .filter_map(|ch| ch.added_by.as_ref().map(|by| (ch.id.as_str(), by.as_str())))
        .collect();
    assert_eq!(added, vec![("p1", "bo"), ("p2", "cy")]);
    assert_eq!(c.planner_choices().collect::<Vec<_>>(), vec!["EU", "US"]);
    assert_eq!(c.criteria, vec!["cost"]);
    act(
        &mut c,
        "bo",
        Action::Answer(Answer::Choices(vec!["c1".into(), "p1".into()])),
    )
    .unwrap();
    assert_eq!(
        act(&mut c, "bo", Action::AddOption("EU".into()))
            .unwrap_err()
            .code,
        ErrorCode::InvalidInput
    );
    assert_eq!(
        act(&mut c, "bo", Action::AddCriterion("cost".into()))
            .unwrap_err()
            .code,
        ErrorCode::InvalidInput
    );
    assert_eq!(
        act(
            &mut card(ResponseKind::FreeText),
            "bo",
            Action::AddOption("x".into())
        )
        .unwrap_err()
        .code,
        ErrorCode::InvalidInput
    );
}

#[test]
fn answers_must_fit_the_response_kind() {
    let bad = vec![
        (ResponseKind::SingleChoice, Answer::Choices(vec![])),
        (
            ResponseKind::SingleChoice,
            Answer::Choices(vec!["c1".into(), "c2".into()]),
        ),
        (
            ResponseKind::SingleChoice,
            Answer::Choices(vec!["c9".into()]),
        ),
        (
            ResponseKind::MultipleChoice,
            Answer::Choices(vec!["c1".into(), "c1".into()]),
        ),
        (ResponseKind::FreeText, Answer::Text("   ".into())),
        (ResponseKind::FreeText, Answer::Text("x".repeat(4001))),
        (ResponseKind::FreeText, Answer::YesNo(true)),
        (ResponseKind::YesNo, Answer::Text("yes".into())),
    ];
    for (kind, answer) in bad {
        let mut c = card(kind);
        let error = act(&mut c, "bo", Action::Answer(answer.clone())).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAnswer, "{kind:?} {answer:?}");
        assert_eq!((c.state, c.answer), (CardState::Open, None));
    }
    let mut c = card(ResponseKind::FreeText);
    act(
        &mut c,
        "bo",
        Action::Answer(Answer::Text("EU first,\nthen US".into())),
    )
    .unwrap();
}

#[test]
fn withdrawing_cancels_only_a_card_that_holds_its_question() {
    use margin_decisions::withdraw;
    let mut open = card(ResponseKind::YesNo);
    assert!(withdraw(&mut open));
    assert_eq!(open.state, CardState::Cancelled);
    assert!(!withdraw(&mut open));
    let mut discarded = card(ResponseKind::YesNo);
    discarded.state = CardState::Discarded;
    assert!(!withdraw(&mut discarded));
    assert_eq!(discarded.state, CardState::Discarded);
}

#[test]
fn withdrawing_never_cancels_an_answer_a_person_gave() {
    use margin_decisions::withdraw;
    let mut answered = card(ResponseKind::YesNo);
    act(&mut answered, "bo", Action::Answer(Answer::YesNo(true))).unwrap();
    assert!(!withdraw(&mut answered));
    assert_eq!(answered.state, CardState::Answered);
    let mut reopened = answered.clone();
    act(&mut reopened, "bo", Action::Reopen).unwrap();
    assert!(withdraw(&mut reopened), "a reopened card waits again");
}
