//! What a machine sends that changes state is answered once it is committed
//! (SPEC L10): each `reply` with `reply-received` or a refusal naming its
//! turn, each `run` report with `run-received` or a refusal naming its run
//! — so a machine can keep and send again what a dead link swallowed, and
//! a copy sent again is never posted twice nor revives an ended run.

mod support;

use margin_planner::{Effect, RunStatus};
use margin_protocol::link::ServerMessage;
use margin_protocol::RefusalCode;
use pretty_assertions::assert_eq;
use support::Sim;

fn received_reply(turn: &str) -> ServerMessage {
    ServerMessage::ReplyReceived {
        session: "s1".into(),
        turn: turn.into(),
    }
}

fn received_run(run: &str, attempt: u32, status: RunStatus) -> ServerMessage {
    ServerMessage::RunReceived {
        session: "s1".into(),
        run: run.into(),
        attempt,
        status,
    }
}

/// The code, session, turn and run a refusal names.
type Named<'a> = (
    RefusalCode,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
);

fn refused(message: &ServerMessage) -> Option<Named<'_>> {
    match message {
        ServerMessage::Refusal {
            code,
            session,
            turn,
            run,
            ..
        } => Some((*code, session.as_deref(), turn.as_deref(), run.as_deref())),
        _ => None,
    }
}

#[test]
fn a_committed_reply_is_acknowledged_before_the_next_turn_is_invoked() {
    let mut sim = Sim::new();
    sim.say("@planner draft it");
    sim.say("@planner and the budget");
    let from = sim.sent.len();
    sim.reply("Drafted.");
    let sent = sim.sent_since(from);
    assert_eq!(sent.first(), Some(&received_reply("t1")));
    assert!(
        matches!(sent.get(1), Some(ServerMessage::Invoke { turn, .. }) if turn == "t2"),
        "{sent:?}"
    );
}

#[test]
fn a_withheld_reply_is_acknowledged_too_and_its_repair_turn_follows() {
    let mut sim = Sim::new();
    sim.say("@planner go");
    let from = sim.sent.len();
    sim.reply("Should we launch in the EU first?");
    let sent = sim.sent_since(from);
    assert_eq!(sent.first(), Some(&received_reply("t1")));
    assert!(
        matches!(sent.get(1), Some(ServerMessage::Invoke { turn, repair, .. }) if turn == "t2" && !repair.is_empty())
    );
}

#[test]
fn a_reply_sent_again_after_it_was_committed_is_refused_naming_its_turn_and_posted_once() {
    let mut sim = Sim::new();
    sim.say("@planner go");
    sim.reply("Done.");
    let posted = sim.chat_texts().len();
    let again = sim.session.handle_reply("t1", "Done.".into(), sim.now);
    let again = sim.take(again);
    assert!(again.journal.is_empty() && again.chat.is_empty());
    let [Effect::Send(refusal)] = again.effects.as_slice() else {
        panic!("one answer: {again:?}");
    };
    assert_eq!(
        refused(refusal),
        Some((RefusalCode::UnknownTurn, Some("s1"), Some("t1"), None))
    );
    assert_eq!(sim.chat_texts().len(), posted, "posted once");
}

#[test]
fn a_reply_too_long_to_post_is_refused_naming_its_turn() {
    let mut sim = Sim::new();
    sim.say("@planner go");
    let step = sim.session.handle_reply("t1", "x".repeat(5000), sim.now);
    let step = sim.take(step);
    let [Effect::Send(refusal)] = step.effects.as_slice() else {
        panic!("one answer: {step:?}");
    };
    assert_eq!(
        refused(refusal),
        Some((RefusalCode::MalformedMessage, Some("s1"), Some("t1"), None))
    );
}

#[test]
fn each_run_report_is_answered_once_with_what_it_reported() {
    let mut sim = Sim::new();
    let from = sim.sent.len();
    sim.run("build", RunStatus::Running);
    sim.run("build", RunStatus::Completed);
    assert_eq!(
        sim.sent_since(from),
        [
            received_run("build", 1, RunStatus::Running),
            received_run("build", 1, RunStatus::Completed)
        ]
    );
}

#[test]
fn a_run_report_sent_again_changes_nothing_and_is_answered_again() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    sim.run("build", RunStatus::Completed);
    let view = sim.session.view(sim.now).runs;
    for status in [RunStatus::Completed, RunStatus::Running] {
        let again = sim.run("build", status);
        assert!(
            again.journal.is_empty() && again.events.is_empty(),
            "{again:?}"
        );
        assert_eq!(
            again.effects,
            [Effect::Send(received_run("build", 1, status))]
        );
    }
    assert_eq!(
        sim.session.view(sim.now).runs,
        view,
        "an ended run is never revived"
    );
}

#[test]
fn a_refused_run_report_is_answered_by_its_refusal_naming_the_run() {
    let mut sim = Sim::with(false, 1);
    sim.run("build", RunStatus::Running);
    let step = sim.run("lint", RunStatus::Running);
    let [Effect::Send(refusal)] = step.effects.as_slice() else {
        panic!("one answer: {step:?}");
    };
    assert_eq!(
        refused(refusal),
        Some((RefusalCode::RunCapacity, Some("s1"), None, Some("lint")))
    );
    sim.run("build", RunStatus::Completed);
    sim.attempt("build", 2, RunStatus::Running);
    let late = sim.attempt("build", 1, RunStatus::Failed);
    let [Effect::Send(refusal)] = late.effects.as_slice() else {
        panic!("one answer: {late:?}");
    };
    assert_eq!(
        refused(refusal),
        Some((
            RefusalCode::SupersededAttempt,
            Some("s1"),
            None,
            Some("build")
        ))
    );
}

#[test]
fn a_session_is_unheard_until_its_machine_answers_in_it_planning_or_not() {
    for mut sim in [Sim::new(), Sim::planning()] {
        sim.say("@planner plan");
        assert!(
            sim.session.unheard(),
            "its first invoke may have died unread"
        );
        sim.restart();
        assert!(
            sim.session.unheard(),
            "taken back from its journal, still unheard"
        );
        sim.read("c1", 1);
        assert!(!sim.session.unheard(), "a call answers in it");
    }
    let mut sim = Sim::planning();
    sim.say("@planner plan");
    let plan = serde_json::json!({"expected_revision": 0,
        "steps": [{"id": "a", "description": "Draft", "status": "in_progress"}]});
    sim.call("c1", "update_plan", plan);
    assert!(!sim.session.unheard(), "a plan answers in it");
}
