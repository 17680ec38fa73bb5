//! A session across dropped links and restarts on a virtual clock (SPEC
//! L2–L7, L9, W1, W2a): what is kept, what `resume` hands back and in what
//! order, and what is said.

mod support;

use margin_planner::{
    CallId, CardId, Effect, Held, LinkLoss, Millis, ReleaseReason, RequestId, RunStatus, TurnId,
    DEFAULT_ATTACH_GRACE,
};
use margin_protocol::link::ServerMessage;
use pretty_assertions::assert_eq;
use support::Sim;

const DAYS: u64 = 24 * 60;

fn held(questions: &[&str]) -> Held {
    Held {
        questions: questions.iter().map(|q| RequestId::from(*q)).collect(),
        ..Held::default()
    }
}

/// What a step sends, by type.
fn sends(step: &margin_planner::Step) -> Vec<&'static str> {
    step.effects
        .iter()
        .map(|e| match e {
            Effect::Send(ServerMessage::Stop { .. }) => "stop",
            Effect::Send(ServerMessage::InputResult { .. }) => "input-result",
            Effect::Send(ServerMessage::ToolResult { .. }) => "tool-result",
            Effect::Send(ServerMessage::Invoke { .. }) => "invoke",
            Effect::Send(ServerMessage::Refusal { .. }) => "refusal",
            Effect::Send(_) => "other",
            Effect::Redeliver { .. } => "redeliver",
            Effect::Withdraw(_) => "withdraw",
            Effect::RunTool { .. } => "run-tool",
            Effect::Released(_) => "released",
        })
        .collect()
}

fn texts(step: &margin_planner::Step) -> Vec<&str> {
    step.chat.iter().map(|l| l.text.as_str()).collect()
}

#[test]
fn a_dropped_resumable_link_keeps_a_session_with_a_live_run_for_days_with_no_deadline() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    let lost = sim.link_lost(LinkLoss::Dropped);
    assert_eq!(
        texts(&lost),
        ["The Planner disconnected. Its runs and questions are kept until it reconnects; answers wait for it."]
    );
    assert!(sim.session.is_away());
    assert_eq!(sim.session.poll_timeout(), None, "no timer while away");
    sim.wait(3 * DAYS);
    assert_eq!(sim.released(), None);
    let back = sim.resume(held(&[]));
    assert_eq!(texts(&back), ["The Planner reconnected."]);
    assert_eq!(
        sim.event_kinds()[1..],
        ["run_updated", "planner_disconnected", "planner_reconnected"]
    );
}

#[test]
fn a_restart_keeps_a_session_like_a_drop_and_announces_nothing() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    let stop = sim.session.handle_stop_requested(sim.now);
    sim.take(stop);
    let restarted = sim.restart();
    assert!(restarted.chat.is_empty(), "a restart says nothing (L9)");
    assert!(sim.session.is_away());
    assert_eq!(sim.session.poll_timeout(), None, "in use: no deadline (L2)");
    sim.wait(DAYS);
    let back = sim.resume(held(&[]));
    assert!(back.chat.is_empty(), "nor when the machine is back");
    assert_eq!(sends(&back), ["stop"], "the held Stop goes first");
}

#[test]
fn runs_keep_their_true_age_across_a_restart() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    sim.wait(40);
    sim.restart();
    sim.wait(5);
    let age = sim
        .session
        .run_age(&margin_planner::RunId::from("build"), sim.now);
    assert_eq!(age, Some(Millis::minutes(45)));
}

#[test]
fn messages_queued_for_the_next_turn_survive_a_restart_and_start_it_after_resume() {
    let mut sim = Sim::new();
    sim.say("@planner first");
    sim.say("@planner then this");
    sim.restart();
    // The machine still runs t1 and replies after resuming.
    sim.resume(Held {
        turn: Some(TurnId::from("t1")),
        ..Held::default()
    });
    sim.reply("First done.");
    assert_eq!(
        sim.invoked(),
        Some(("t2".into(), vec!["@planner then this".into()], vec![]))
    );
}

#[test]
fn a_turn_the_machine_still_runs_is_handed_back_and_its_reply_is_posted() {
    let mut sim = Sim::new();
    sim.say("@planner draft");
    sim.read("c1", 1);
    sim.link_lost(LinkLoss::Dropped);
    let back = sim.resume(Held {
        turn: Some(TurnId::from("t1")),
        ..Held::default()
    });
    assert!(sends(&back).is_empty(), "nothing to hand back but the turn");
    sim.reply("Drafted.");
    assert_eq!(sim.chat_texts().last(), Some(&"Drafted."));
}

#[test]
fn a_turn_the_machine_lost_after_acting_ends_saying_so_and_the_next_one_starts() {
    let mut sim = Sim::new();
    sim.say("@planner draft");
    sim.read("c1", 1);
    sim.say("@planner also this");
    sim.restart();
    let back = sim.resume(held(&[]));
    assert_eq!(
        texts(&back),
        ["The Planner came back without the turn it was working on; that turn ended without a reply. Mention @planner again."]
    );
    assert_eq!(sends(&back), ["invoke"]);
    assert_eq!(
        sim.invoked(),
        Some(("t2".into(), vec!["@planner also this".into()], vec![]))
    );
}

#[test]
fn a_turn_the_machine_never_acted_on_is_sent_again() {
    let mut sim = Sim::new();
    sim.say("@planner draft");
    sim.link_lost(LinkLoss::Dropped);
    let back = sim.resume(held(&[]));
    assert_eq!(texts(&back), ["The Planner reconnected."]);
    assert_eq!(sends(&back), ["invoke"]);
    assert_eq!(sim.turn(), "t1", "the same turn, not a new one");
}

#[test]
fn an_answer_given_while_away_is_held_and_sent_after_resume_until_acknowledged() {
    let mut sim = Sim::new();
    sim.say("@planner ask");
    sim.ask("c1", "q1");
    sim.reply("Asked.");
    sim.link_lost(LinkLoss::Dropped);
    sim.wait(2 * DAYS);
    let answered = sim.answer("q1");
    assert!(sends(&answered).is_empty(), "held, not sent, while away");
    sim.wait(DAYS);
    assert_eq!(sim.released(), None, "a held answer keeps the session");
    let back = sim.resume(held(&["q1"]));
    assert_eq!(sends(&back), ["input-result"]);
    // Unacknowledged, it goes again after the next drop.
    sim.link_lost(LinkLoss::Dropped);
    assert_eq!(sends(&sim.resume(held(&["q1"]))), ["input-result"]);
    let ack = sim
        .session
        .handle_answer_received(RequestId::from("q1"), sim.now);
    sim.take(ack);
    sim.link_lost(LinkLoss::Dropped);
    assert!(sends(&sim.resume(held(&[]))).is_empty());
}

#[test]
fn resume_sends_a_held_stop_then_answers_then_call_results_then_the_next_turn() {
    let mut sim = Sim::new();
    sim.say("@planner ask");
    sim.ask("c1", "q1");
    sim.read("c2", 1);
    sim.say("@planner next");
    sim.link_lost(LinkLoss::Dropped);
    let stop = sim.session.handle_stop_requested(sim.now);
    assert_eq!(
        texts(&sim.take(stop)),
        ["Stop was asked while the Planner is disconnected. The Stop is kept and reaches it first when it reconnects."]
    );
    sim.answer("q1");
    let back = sim.resume(Held {
        questions: vec![],
        turn: Some(TurnId::from("t1")),
        calls: vec![CallId::from("c2")],
    });
    assert_eq!(sends(&back), ["stop", "input-result", "redeliver"]);
}

#[test]
fn a_drop_with_nothing_to_keep_or_a_detach_is_leased_for_the_attach_grace_only() {
    for (loss, work) in [(LinkLoss::Dropped, false), (LinkLoss::Detached, true)] {
        let mut sim = Sim::new();
        if work {
            sim.run("build", RunStatus::Running);
        }
        let lost = sim.link_lost(loss);
        assert!(lost.chat.is_empty(), "{loss:?}: nothing announced");
        let at = sim.now;
        assert_eq!(
            sim.session.poll_timeout(),
            Some(at.plus(DEFAULT_ATTACH_GRACE))
        );
        sim.wait_ms(Millis(59_999));
        assert_eq!(sim.released(), None, "{loss:?}");
        sim.wait_ms(Millis(1));
        assert_eq!(sim.released(), Some(ReleaseReason::LinkClosed), "{loss:?}");
        assert!(!sim.chat_texts().iter().any(|t| t.contains("was stopped")));
    }
}

#[test]
fn a_link_without_resumable_sessions_ends_its_sessions_when_it_closes() {
    let mut sim = Sim::new();
    sim.say("@planner ask");
    sim.ask("c1", "q1");
    let lost = sim.link_lost(LinkLoss::Ended);
    assert_eq!(sim.released(), Some(ReleaseReason::LinkClosed));
    assert_eq!(
        texts(&lost),
        ["The Planner disconnected during its turn; its reply was not posted."]
    );
    assert_eq!(sends(&lost), ["withdraw", "released"]);
}

#[test]
fn a_question_the_machine_withdrew_while_away_is_settled_on_resume_and_leaves_only_the_lease() {
    let mut sim = Sim::new();
    sim.say("@planner ask");
    sim.ask("c1", "q1");
    sim.reply("Asked.");
    sim.link_lost(LinkLoss::Dropped);
    sim.wait(DAYS);
    let (resumed, step) = sim.session.handle_resume(held(&[]), sim.now);
    let step = sim.take(step);
    assert_eq!(resumed.withdrawn, Vec::<String>::new());
    assert_eq!(sends(&step), ["withdraw"]);
    assert!(!sim.session.in_use());
}

#[test]
fn a_question_people_discarded_while_away_is_withdrawn_in_resumed() {
    let mut sim = Sim::new();
    sim.say("@planner ask");
    sim.ask("c1", "q1");
    sim.reply("Asked.");
    sim.link_lost(LinkLoss::Dropped);
    let discarded = sim.session.handle_discarded(CardId::from("q1"), sim.now);
    sim.take(discarded);
    let (resumed, _) = sim.session.clone().handle_resume(held(&["q1"]), sim.now);
    assert_eq!(resumed.withdrawn, ["q1"]);
    assert_eq!(
        sim.session.poll_timeout(),
        Some(sim.now.plus(DEFAULT_ATTACH_GRACE)),
        "nothing in use: leased"
    );
}

#[test]
fn a_stop_unconfirmed_when_the_link_drops_is_said_so_and_sent_again() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    let stop = sim.session.handle_stop_requested(sim.now);
    assert_eq!(sends(&sim.take(stop)), ["stop"]);
    let lost = sim.link_lost(LinkLoss::Dropped);
    assert_eq!(
        texts(&lost)[1],
        "The Planner disconnected before confirming the Stop. The Stop is kept and reaches it first when it reconnects."
    );
    assert_eq!(sends(&sim.resume(held(&[]))), ["stop"]);
}

#[test]
fn a_machine_that_came_back_without_the_session_ends_it_with_runs_unknown() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    sim.link_lost(LinkLoss::Dropped);
    let ended = sim.session.handle_not_resumed(sim.now);
    let ended = sim.take(ended);
    assert_eq!(
        texts(&ended),
        [
            "The Planner came back without this session's work; the session ended.",
            "Run build was live when the Planner disconnected; whether it stopped is not known."
        ]
    );
    assert_eq!(sim.released(), Some(ReleaseReason::LinkClosed));
}

#[test]
fn a_lease_that_runs_out_says_which_messages_were_not_delivered() {
    let mut sim = Sim::new();
    sim.link_lost(LinkLoss::Detached);
    sim.say("@planner hello?");
    sim.wait(2);
    assert_eq!(sim.released(), Some(ReleaseReason::LinkClosed));
    assert_eq!(
        sim.chat_texts().last(),
        Some(&"The Planner did not come back; 1 message(s) for it were not delivered. Mention @planner again.")
    );
}

#[test]
fn a_question_opened_by_a_call_the_machine_still_waits_on_is_not_withdrawn_on_resume() {
    let mut sim = Sim::new();
    sim.say("@planner ask");
    // The result of `ask` never reached the machine: the link dropped.
    sim.ask("c1", "q1");
    sim.link_lost(LinkLoss::Dropped);
    let (resumed, step) = sim.session.handle_resume(
        Held {
            questions: vec![],
            turn: Some(TurnId::from("t1")),
            calls: vec![CallId::from("c1")],
        },
        sim.now,
    );
    let step = sim.take(step);
    assert!(resumed.withdrawn.is_empty());
    assert_eq!(sends(&step), ["redeliver"], "its result, and no withdrawal");
    assert_eq!(
        sim.session.requests().cloned().collect::<Vec<_>>(),
        [RequestId::from("q1")]
    );
}

#[test]
fn another_machine_that_resumes_the_session_is_its_machine_also_after_a_restart() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    sim.link_lost(LinkLoss::Dropped);
    let moved = sim.session.handle_moved("m-desktop", "desktop", sim.now);
    sim.take(moved);
    sim.resume(held(&[]));
    assert_eq!(sim.session.machine(), "m-desktop");
    assert_eq!(
        sim.session.view(sim.now).machine.as_deref(),
        Some("desktop")
    );
    assert!(
        sim.event_kinds().contains(&"machine_changed"),
        "the feed says so (E2)"
    );
    sim.restart();
    assert_eq!(sim.session.machine(), "m-desktop", "journaled");
    // The machine it already runs on records nothing.
    let again = sim.session.handle_moved("m-desktop", "desktop", sim.now);
    assert!(again.journal.is_empty());
}
