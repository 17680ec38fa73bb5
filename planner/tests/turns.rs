//! Turns, the reply policy and steering on a virtual clock (SPEC T1–T3,
//! P2, U6).

mod support;

use margin_planner::{CardId, Effect, ReleaseReason};
use margin_protocol::chat::ChatKind;
use margin_protocol::decisions::{CaptureStatus, ToolRefusal};
use margin_protocol::link::ServerMessage;
use margin_protocol::RefusalCode;
use pretty_assertions::assert_eq;
use support::{decisions, Sim};

#[test]
fn a_message_starts_a_turn_and_an_accepted_reply_is_posted_as_the_planners() {
    let mut sim = Sim::new();
    sim.say("@planner review the plan");
    assert_eq!(
        sim.invoked(),
        Some(("t1".into(), vec!["@planner review the plan".into()], vec![]))
    );
    assert!(sim.session.replying());
    sim.reply("I added a risks section.");
    assert_eq!(
        sim.chat.last().map(|l| (l.kind, l.text.as_str())),
        Some((ChatKind::Planner, "I added a risks section."))
    );
    assert!(!sim.session.replying());
    assert_eq!(
        sim.event_kinds(),
        ["session_started", "turn_started", "turn_finished"]
    );
}

#[test]
fn messages_during_a_turn_wait_in_order_and_start_the_next_turn_together() {
    let mut sim = Sim::new();
    sim.say("@planner draft it");
    sim.say("@planner also the EU");
    sim.say("@planner and the budget");
    assert_eq!(
        sim.sent
            .iter()
            .filter(|m| matches!(m, ServerMessage::Invoke { .. }))
            .count(),
        1,
        "one turn at a time"
    );
    sim.reply("Drafted.");
    assert_eq!(
        sim.invoked(),
        Some((
            "t2".into(),
            vec![
                "@planner also the EU".into(),
                "@planner and the budget".into()
            ],
            vec![]
        ))
    );
    sim.reply("Done.");
    assert!(!sim.session.replying());
}

#[test]
fn a_reply_that_asks_is_withheld_and_a_repair_turn_carries_its_questions() {
    let mut sim = Sim::new();
    sim.say("@planner plan the launch");
    sim.reply("Which region first? Should we invite only?");
    assert_eq!(
        sim.invoked(),
        Some((
            "t2".into(),
            vec![],
            vec![
                "Which region first?".into(),
                "Should we invite only?".into()
            ]
        ))
    );
    assert!(sim.chat.is_empty(), "the withheld text is never posted");
}

/// A reply that asked two questions, and a repair turn whose
/// `open_decisions` came to `cards`.
fn repair_capturing(cards: &[(&str, CaptureStatus)]) -> Sim {
    let mut sim = Sim::new();
    sim.say("@planner plan the launch");
    sim.reply("Which region first? Should we invite only?");
    let batch = serde_json::json!({"revision": 7, "cards": []});
    sim.call("c1", "open_decisions", batch);
    sim.finish("c1", Ok(decisions(cards)));
    sim
}

#[test]
fn a_repair_that_captures_every_question_succeeds_and_posts_a_reply_that_asks_nothing() {
    let mut sim = repair_capturing(&[
        ("k1", CaptureStatus::Created),
        ("k2", CaptureStatus::AlreadyInDocument),
    ]);
    sim.reply("I opened both as decisions.");
    assert_eq!(
        sim.chat_texts(),
        [
            "The Planner opened its 2 question(s) as decisions.",
            "I opened both as decisions."
        ]
    );
}

#[test]
fn a_repair_that_captures_too_few_fails_visibly_and_never_posts_the_text() {
    // A discarded card is never recreated and never counts (SPEC D4).
    let mut sim = repair_capturing(&[
        ("k1", CaptureStatus::Created),
        ("k2", CaptureStatus::NotCaptured),
    ]);
    sim.reply("Which region first?");
    assert_eq!(
        sim.chat_texts(),
        ["The Planner's reply was withheld: it asked 2 question(s) in Chat and opened 1 as decisions."]
    );
    assert_eq!(
        sim.released(),
        None,
        "a refused reply releases nothing (P2)"
    );
    assert!(!sim.session.replying());
}

#[test]
fn a_repair_that_opens_a_card_and_replays_its_key_counts_that_card_once() {
    // One card created, then its key replayed: one question covered of two
    // (SPEC T2 counts distinct cards).
    let mut sim = repair_capturing(&[("k1", CaptureStatus::Created)]);
    let batch = serde_json::json!({"revision": 8, "cards": []});
    sim.call("c2", "open_decisions", batch);
    sim.finish(
        "c2",
        Ok(decisions(&[("k1", CaptureStatus::AlreadyInDocument)])),
    );
    sim.reply("Which region first?");
    assert_eq!(
        sim.chat_texts(),
        ["The Planner's reply was withheld: it asked 2 question(s) in Chat and opened 1 as decisions."]
    );
}

#[test]
fn a_card_people_discard_during_the_repair_no_longer_counts() {
    let mut sim = repair_capturing(&[
        ("k1", CaptureStatus::Created),
        ("k2", CaptureStatus::Created),
    ]);
    let step = sim.session.handle_discarded(CardId::from("k2"), sim.now);
    sim.take(step);
    sim.reply("Which region first?");
    assert_eq!(
        sim.chat_texts(),
        ["The Planner's reply was withheld: it asked 2 question(s) in Chat and opened 1 as decisions."]
    );
}

#[test]
fn a_repair_whose_replay_was_refused_as_another_decision_captures_nothing_and_fails() {
    let mut sim = Sim::new();
    sim.say("@planner plan the launch");
    sim.reply("Which region first? Should we invite only?");
    let batch = serde_json::json!({"revision": 7, "cards": []});
    sim.call("c1", "open_decisions", batch);
    let refused = ToolRefusal {
        code: RefusalCode::DifferentDecision,
        message: "card \"k1\" is already in the document with another question".into(),
        read_again: false,
        retry: false,
    };
    sim.finish("c1", Err(refused));
    sim.reply("Which region first?");
    assert_eq!(
        sim.chat_texts(),
        ["The Planner's reply was withheld: it asked 2 question(s) in Chat and opened 0 as decisions."]
    );
}

#[test]
fn a_reply_for_a_turn_that_is_not_running_is_refused() {
    let mut sim = Sim::new();
    sim.say("@planner go");
    let step = sim.session.handle_reply("t9", "Done.".into(), sim.now);
    let step = sim.take(step);
    assert!(matches!(
        step.effects.as_slice(),
        [Effect::Send(ServerMessage::Refusal { code, .. })] if *code == "unknown_turn"
    ));
    assert!(step.journal.is_empty() && step.chat.is_empty());
}

#[test]
fn a_planning_session_hands_its_plan_back_with_each_turn() {
    let mut sim = Sim::planning();
    sim.say("@planner plan");
    let plan = serde_json::json!({"expected_revision": 0,
        "steps": [{"id": "a", "description": "Draft", "status": "in_progress"}]});
    sim.call("c1", "update_plan", plan);
    sim.reply("Planned.");
    sim.say("@planner go on");
    let Some(ServerMessage::Invoke {
        plan: Some(plan), ..
    }) = sim.sent.last()
    else {
        panic!("the next invoke carries the plan: {:?}", sim.sent.last())
    };
    assert_eq!((plan.revision, plan.turn_id.as_str()), (1, "t1"));
}

#[test]
fn a_message_while_the_machine_is_away_waits_and_the_sender_is_told_at_once() {
    let mut sim = Sim::new();
    sim.say("@planner first");
    sim.link_lost(margin_planner::LinkLoss::Dropped);
    let before = sim.sent.len();
    let step = sim.say("@planner are you there");
    assert_eq!(
        step.chat.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(),
        ["The Planner is disconnected. Your message waits for it and reaches it when it reconnects."]
    );
    assert_eq!(sim.sent.len(), before, "nothing is sent while away");
    assert_eq!(sim.released(), None::<ReleaseReason>);
}
