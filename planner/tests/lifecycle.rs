//! A session's life on a virtual clock (SPEC P1–P4, R1, R2, T4, L4, L5):
//! what keeps it, what releases it, runs and their true ages, Stop.

mod support;

use margin_planner::{
    Effect, Held, Millis, ReleaseReason, ReleaseTrigger, RequestId, ResumeRefusal, RunStatus,
};
use margin_protocol::link::{RunView, ServerMessage};
use pretty_assertions::assert_eq;
use support::Sim;

/// A question the session asked in a turn that has since replied: the
/// session waits on a person only.
fn waiting_on(sim: &mut Sim, card: &str) {
    sim.say("@planner ask");
    sim.ask("c1", card);
    sim.reply("I asked.");
}

fn run_cards(sim: &Sim) -> Vec<(String, RunStatus, u64)> {
    sim.session
        .view(sim.now)
        .runs
        .into_iter()
        .map(
            |RunView {
                 run,
                 status,
                 age_ms,
                 ..
             }| (run, status, Millis(age_ms).whole_minutes()),
        )
        .collect()
}

fn refusal_codes(step: &margin_planner::Step) -> Vec<String> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Send(ServerMessage::Refusal { code, .. }) => Some(code.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_refused_reply_keeps_a_session_with_a_live_run_with_no_deadline() {
    let mut sim = Sim::new();
    sim.say("@planner plan");
    sim.run("plan-review", RunStatus::Running);
    sim.wait(31);
    sim.reply("Which region? Which month?");
    sim.reply("Still asking: which region?");
    sim.wait(24 * 60);
    assert_eq!(sim.released(), None);
}

#[test]
fn a_refused_reply_keeps_a_session_that_holds_only_an_open_question() {
    let mut sim = Sim::new();
    waiting_on(&mut sim, "q1");
    sim.say("@planner and the budget?");
    sim.reply("Which budget? Which month?");
    sim.reply("Still asking: which budget?");
    assert!(sim
        .chat_texts()
        .iter()
        .any(|t| t.starts_with("The Planner's reply was withheld")));
    sim.wait(24 * 60);
    assert_eq!(sim.released(), None, "a question in use keeps it (P2)");
}

#[test]
fn a_session_waiting_on_a_question_is_kept_until_it_settles_then_idle_counts() {
    let mut sim = Sim::new();
    waiting_on(&mut sim, "q1");
    sim.wait(3 * 24 * 60);
    assert_eq!(
        sim.released(),
        None,
        "no deadline on a pending decision (P1)"
    );
    sim.answer("q1");
    let ack = sim
        .session
        .handle_answer_received(RequestId::from("q1"), sim.now);
    sim.take(ack);
    sim.wait(29);
    assert_eq!(sim.released(), None);
    sim.wait(1);
    assert_eq!(sim.released(), Some(ReleaseReason::Idle));
}

#[test]
fn a_reply_longer_than_the_idle_period_is_not_cut_off_and_idle_counts_from_its_end() {
    let mut sim = Sim::new();
    sim.say("@planner think hard");
    sim.wait(45);
    assert_eq!(sim.released(), None);
    sim.reply("Done.");
    let ended = sim.now;
    assert_eq!(
        sim.session.poll_timeout(),
        Some(ended.plus(Millis::minutes(30)))
    );
    sim.wait(29);
    assert_eq!(sim.released(), None);
    sim.wait(1);
    assert_eq!(sim.released(), Some(ReleaseReason::Idle));
    assert_eq!(
        sim.effects.last(),
        Some(&Effect::Released(ReleaseReason::Idle))
    );
    assert_eq!(sim.event_kinds().last(), Some(&"session_ended"));
    assert!(sim.chat_texts() == ["Done."], "idle release says nothing");
}

#[test]
fn someone_viewing_the_document_keeps_an_idle_session_and_idle_counts_from_their_leaving() {
    let mut sim = Sim::new();
    sim.viewers(2);
    sim.wait(120);
    assert_eq!(sim.released(), None);
    sim.viewers(0);
    sim.wait(29);
    assert_eq!(sim.released(), None);
    sim.wait(1);
    assert_eq!(sim.released(), Some(ReleaseReason::Idle));
}

#[test]
fn a_session_restored_after_its_viewers_left_goes_idle_when_the_live_one_would() {
    let mut sim = Sim::new();
    sim.viewers(2);
    sim.wait(120);
    // Idle counts from here; the server restarts 10 minutes later and the
    // machine resumes: the session folded from its journal must count
    // from the same moment (SPEC P3, W2).
    sim.viewers(0);
    sim.wait(10);
    sim.restart();
    sim.resume(Held::default());
    sim.wait(19);
    assert_eq!(sim.released(), None);
    sim.wait(1);
    assert_eq!(sim.released(), Some(ReleaseReason::Idle));
}

#[test]
fn every_explicit_act_releases_a_session_that_holds_only_a_question_and_withdraws_it() {
    for trigger in [
        ReleaseTrigger::SignOut,
        ReleaseTrigger::MachineUnpaired,
        ReleaseTrigger::MachineRevoked,
        ReleaseTrigger::PlannerReset,
        ReleaseTrigger::DocumentClosed,
        ReleaseTrigger::DocumentArchived,
    ] {
        let mut sim = Sim::new();
        waiting_on(&mut sim, "q1");
        sim.wait(5);
        let step = sim.release(trigger);
        assert_eq!(sim.released(), Some(ReleaseReason::Trigger(trigger)));
        assert_eq!(
            step.effects,
            [
                Effect::Send(ServerMessage::Stop {
                    session: "s1".into()
                }),
                Effect::Withdraw(RequestId::from("q1")),
                Effect::Released(ReleaseReason::Trigger(trigger))
            ],
            "{trigger:?}"
        );
    }
}

#[test]
fn a_confirmed_stop_releases_a_session_that_holds_only_a_question_and_withdraws_it() {
    let mut sim = Sim::new();
    waiting_on(&mut sim, "q1");
    let asked = sim.session.handle_stop_requested(sim.now);
    sim.take(asked);
    let confirmed = sim.session.handle_stopped(sim.now);
    let step = sim.take(confirmed);
    assert_eq!(
        sim.released(),
        Some(ReleaseReason::Trigger(ReleaseTrigger::Stop))
    );
    assert!(step
        .effects
        .contains(&Effect::Withdraw(RequestId::from("q1"))));
}

#[test]
fn a_deleted_documents_session_ends_silently_and_withdraws_nothing() {
    let mut sim = Sim::new();
    waiting_on(&mut sim, "q1");
    let step = sim.release(ReleaseTrigger::DocumentDeleted);
    assert!(step.chat.is_empty() && step.events.is_empty());
    assert!(!step
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Withdraw(_))));
}

#[test]
fn stopped_after_n_minutes_is_said_only_for_a_confirmed_stop_with_its_true_age() {
    let mut sim = Sim::new();
    sim.say("@planner plan");
    sim.reply("Which one?");
    sim.wait(10);
    sim.run("plan-review", RunStatus::Running);
    sim.wait(31);
    let stop = sim.session.handle_stop_requested(sim.now);
    let stop = sim.take(stop);
    assert_eq!(
        stop.chat
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>(),
        ["Stop was sent to the Planner; waiting for it to confirm."]
    );
    sim.wait(6);
    let stopped = sim.session.handle_stopped(sim.now);
    let stopped = sim.take(stopped);
    assert_eq!(
        stopped
            .chat
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>(),
        [
            "The Planner stopped.",
            "Run plan-review was stopped after 37 min."
        ]
    );
    assert_eq!(
        run_cards(&sim),
        [("plan-review".into(), RunStatus::Stopped, 37)]
    );
}

#[test]
fn a_session_ended_without_a_confirmed_stop_calls_its_live_runs_unknown_not_stopped() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    sim.run("done", RunStatus::Completed);
    sim.wait(12);
    let step = sim.link_lost(margin_planner::LinkLoss::Ended);
    assert_eq!(
        step.chat
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>(),
        ["Run build was live when the Planner disconnected; whether it stopped is not known."]
    );
    let archived = {
        let mut sim = Sim::new();
        sim.run("build", RunStatus::Running);
        let step = sim.release(ReleaseTrigger::DocumentArchived);
        step.chat.into_iter().map(|l| l.text).collect::<Vec<_>>()
    };
    assert_eq!(
        archived,
        [
            "The Planner's session ended: the document was archived.",
            "Run build was asked to stop."
        ]
    );
}

#[test]
fn a_paused_run_keeps_the_session_and_an_ended_run_is_not_revived() {
    let mut sim = Sim::new();
    sim.run("r1", RunStatus::Running);
    sim.run("r1", RunStatus::Paused);
    sim.wait(600);
    assert_eq!(sim.released(), None);
    sim.run("r1", RunStatus::Completed);
    // A late report of the finished run does not bring it back.
    sim.run("r1", RunStatus::Running);
    assert!(!sim.session.in_use());
    sim.wait(30);
    assert_eq!(sim.released(), Some(ReleaseReason::Idle));
    // A released session ignores everything and stops nothing twice.
    let late = sim.run("r2", RunStatus::Running);
    let again = sim.release(ReleaseTrigger::Stop);
    assert_eq!((late.effects.len(), again.effects.len()), (0, 0));
}

#[test]
fn run_cards_show_the_true_age_and_freeze_it_when_the_run_ends() {
    let mut sim = Sim::new();
    sim.run("review", RunStatus::Running);
    sim.wait(12);
    assert_eq!(run_cards(&sim), [("review".into(), RunStatus::Running, 12)]);
    sim.run("review", RunStatus::Completed);
    sim.wait(20);
    assert_eq!(
        run_cards(&sim),
        [("review".into(), RunStatus::Completed, 12)]
    );
}

#[test]
fn a_run_beyond_the_declared_capacity_is_refused_and_changes_nothing() {
    let mut sim = Sim::with(false, 2);
    sim.run("a", RunStatus::Running);
    sim.run("b", RunStatus::Paused);
    let refused = sim.run("c", RunStatus::Running);
    assert_eq!(refusal_codes(&refused), ["run_capacity"]);
    assert!(refused.journal.is_empty());
    assert_eq!(run_cards(&sim).len(), 2);
    // An ended run frees its slot.
    sim.run("a", RunStatus::Completed);
    sim.run("c", RunStatus::Running);
    let names: Vec<_> = run_cards(&sim)
        .into_iter()
        .map(|(r, s, _)| (r, s))
        .collect();
    assert_eq!(
        names,
        [
            ("a".into(), RunStatus::Completed),
            ("b".into(), RunStatus::Paused),
            ("c".into(), RunStatus::Running)
        ]
    );
}

#[test]
fn a_late_report_of_an_older_attempt_never_repaints_the_run_but_frees_its_slot() {
    let mut sim = Sim::with(false, 2);
    sim.run("deploy", RunStatus::Running);
    sim.wait(3);
    sim.attempt("deploy", 2, RunStatus::Running);
    // Attempt 1 still holds a slot: it may be running.
    assert_eq!(
        refusal_codes(&sim.run("other", RunStatus::Running)),
        ["run_capacity"]
    );
    let late = sim.attempt("deploy", 1, RunStatus::Failed);
    assert_eq!(refusal_codes(&late), ["superseded_attempt"]);
    assert_eq!(run_cards(&sim), [("deploy".into(), RunStatus::Running, 0)]);
    assert!(refusal_codes(&sim.run("other", RunStatus::Running)).is_empty());
    assert_eq!(
        refusal_codes(&sim.attempt("deploy", 0, RunStatus::Running)),
        ["malformed_message"]
    );
}

#[test]
fn resume_undoes_only_the_stop_it_covers_and_is_refused_while_away() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    assert_eq!(
        sim.session.clone().handle_resume_requested(sim.now),
        Err(ResumeRefusal::NoStop)
    );
    let stop = sim.session.handle_stop_requested(sim.now);
    sim.take(stop);
    let resumed = sim.session.handle_resume_requested(sim.now).unwrap();
    let resumed = sim.take(resumed);
    assert!(matches!(
        resumed.effects.as_slice(),
        [Effect::Send(ServerMessage::StopWithdrawn { .. })]
    ));
    assert!(!sim.session.stop_pending());
    // A Stop pressed after the Resume is a new one: not covered.
    let stop = sim.session.handle_stop_requested(sim.now);
    sim.take(stop);
    sim.link_lost(margin_planner::LinkLoss::Dropped);
    assert_eq!(
        sim.session.clone().handle_resume_requested(sim.now),
        Err(ResumeRefusal::Away)
    );
    assert!(sim.session.stop_pending(), "refused, not held");
}

#[test]
fn run_cards_are_listed_in_the_order_first_reported_also_after_a_new_attempt() {
    let mut sim = Sim::new();
    sim.say("@planner go");
    for run in ["sync", "build", "lint"] {
        sim.run(run, RunStatus::Running);
    }
    let step = sim.session.handle_run(
        "build".into(),
        "Run build".into(),
        RunStatus::Running,
        2,
        sim.now,
    );
    sim.take(step);
    let order: Vec<String> = run_cards(&sim).into_iter().map(|(run, ..)| run).collect();
    assert_eq!(order, ["sync", "build", "lint"]);
}

fn state(sim: &Sim) -> margin_protocol::link::PlannerState {
    sim.session.view(sim.now).state
}

#[test]
fn the_view_names_what_the_planner_is_doing_one_state_at_a_time() {
    use margin_protocol::link::PlannerState::{
        Available, Disconnected, Stopping, Waiting, Working,
    };
    let mut sim = Sim::new();
    assert_eq!(state(&sim), Available, "bound and idle");
    sim.say("@planner build it");
    assert_eq!(state(&sim), Working, "a turn runs");
    sim.run("build", RunStatus::Running);
    sim.reply("Building.");
    assert_eq!(state(&sim), Working, "the turn ended, its run still runs");
    sim.run("build", RunStatus::Paused);
    assert_eq!(state(&sim), Waiting, "a paused run waits");
    sim.run("build", RunStatus::Completed);
    assert_eq!(state(&sim), Available, "nothing is left to do");
    waiting_on(&mut sim, "q1");
    assert_eq!(state(&sim), Waiting, "a question waits on people");
    let stop = sim.session.handle_stop_requested(sim.now);
    sim.take(stop);
    assert_eq!(state(&sim), Stopping, "a Stop not yet confirmed");
    sim.link_lost(margin_planner::LinkLoss::Dropped);
    assert_eq!(state(&sim), Disconnected, "away outranks everything");
}

#[test]
fn run_cards_carry_when_they_started_and_ended() {
    let mut sim = Sim::new();
    let started = sim.now.0;
    sim.run("build", RunStatus::Running);
    sim.wait(2);
    let live = sim.session.view(sim.now).runs;
    assert_eq!((live[0].started_at, live[0].ended_at), (started, None));
    sim.run("build", RunStatus::Completed);
    let ended = sim.now.0;
    sim.wait(5);
    let done = &sim.session.view(sim.now).runs[0];
    assert_eq!((done.started_at, done.ended_at), (started, Some(ended)));
    assert_eq!(
        Millis(done.age_ms).whole_minutes(),
        2,
        "its age stops at its end (P4)"
    );
}
