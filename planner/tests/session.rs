//! Session lifecycle on a virtual clock (SPEC P1–P4, R2, L2–L7).

use margin_planner::{
    Effect, LinkLoss, Millis, ReleaseReason, ReleaseTrigger, ReplyOutcome, RequestId,
    ResumeRefusal, RunId, RunRefusal, RunStatus, Session, TurnId, DEFAULT_IDLE,
};
use pretty_assertions::assert_eq;

/// A session on a virtual clock that calls back whenever the session asks.
struct Sim {
    session: Session,
    now: Millis,
    effects: Vec<Effect>,
}

impl Sim {
    fn new() -> Self {
        Sim {
            session: Session::new(Millis(0), DEFAULT_IDLE),
            now: Millis(0),
            effects: Vec::new(),
        }
    }

    /// Lets `minutes` pass, honouring every timeout the session sets.
    fn wait(&mut self, minutes: u64) {
        let until = self.now.plus(Millis::minutes(minutes));
        while let Some(due) = self.session.poll_timeout() {
            if due > until {
                break;
            }
            self.now = due.max(self.now);
            let effects = self.session.handle_timeout(self.now);
            self.effects.extend(effects);
            if self.session.released().is_some() {
                break;
            }
        }
        self.now = until;
    }

    fn turn(&mut self, turn: &str) {
        let effects = self
            .session
            .handle_turn_started(TurnId::from(turn), self.now);
        self.effects.extend(effects);
    }

    fn reply(&mut self, turn: &str, outcome: ReplyOutcome) {
        let effects = self
            .session
            .handle_reply_finished(TurnId::from(turn), outcome, self.now);
        self.effects.extend(effects);
    }

    fn run(&mut self, run: &str, status: RunStatus) {
        self.attempt(run, 1, status)
            .expect("the report is accepted");
    }

    fn attempt(&mut self, run: &str, attempt: u32, status: RunStatus) -> Result<(), RunRefusal> {
        let effects = self
            .session
            .handle_run(RunId::from(run), attempt, status, self.now)?;
        self.effects.extend(effects);
        Ok(())
    }

    fn ask(&mut self, request: &str) {
        let effects = self
            .session
            .handle_request_opened(RequestId::from(request), self.now);
        self.effects.extend(effects);
    }

    fn answered(&mut self, request: &str) {
        let effects = self
            .session
            .handle_request_settled(&RequestId::from(request), self.now);
        self.effects.extend(effects);
    }

    fn release(&mut self, trigger: ReleaseTrigger) {
        let effects = self.session.handle_release(trigger, self.now);
        self.effects.extend(effects);
    }

    fn released(&self) -> Option<ReleaseReason> {
        self.session.released()
    }
}

#[test]
fn a_refused_reply_keeps_a_session_with_a_live_run() {
    let mut sim = Sim::new();
    sim.turn("t1");
    sim.run("plan-review", RunStatus::Running);
    sim.wait(31);
    sim.reply("t1", ReplyOutcome::Refused);
    sim.wait(24 * 60);
    assert_eq!(sim.released(), None);
    assert_eq!(
        sim.effects,
        vec![Effect::AnnounceWithheld(TurnId::from("t1"))]
    );
}

#[test]
fn a_refused_reply_keeps_a_session_with_only_an_open_question() {
    let mut sim = Sim::new();
    sim.turn("t1");
    sim.ask("q1");
    sim.reply("t1", ReplyOutcome::Unverifiable);
    sim.wait(3 * 24 * 60);
    assert_eq!(sim.released(), None);
    assert!(sim.session.in_use());
}

#[test]
fn a_normal_turn_with_an_open_question_keeps_it_until_the_question_settles() {
    let mut sim = Sim::new();
    sim.turn("t1");
    sim.ask("q1");
    sim.reply("t1", ReplyOutcome::Accepted);
    sim.wait(90);
    assert_eq!(sim.released(), None);
    sim.answered("q1");
    sim.wait(29);
    assert_eq!(sim.released(), None);
    sim.wait(1);
    assert_eq!(sim.released(), Some(ReleaseReason::Idle));
}

#[test]
fn stop_revocation_and_document_close_release_it_and_withdraw_its_questions() {
    for trigger in [
        ReleaseTrigger::Stop,
        ReleaseTrigger::MachineRevoked,
        ReleaseTrigger::DocumentClosed,
    ] {
        let mut sim = Sim::new();
        sim.turn("t1");
        sim.ask("q1");
        sim.reply("t1", ReplyOutcome::Accepted);
        sim.wait(5);
        sim.release(trigger);
        assert_eq!(sim.released(), Some(ReleaseReason::Trigger(trigger)));
        assert_eq!(
            sim.effects[1..],
            [
                Effect::WithdrawRequest(RequestId::from("q1")),
                Effect::Released(ReleaseReason::Trigger(trigger))
            ]
        );
    }
}

#[test]
fn a_reply_longer_than_the_idle_period_is_not_cut_off_and_idle_counts_from_its_end() {
    let mut sim = Sim::new();
    sim.turn("t1");
    sim.wait(45);
    assert_eq!(sim.released(), None);
    sim.reply("t1", ReplyOutcome::Accepted);
    sim.wait(29);
    assert_eq!(sim.released(), None);
    sim.wait(1);
    assert_eq!(sim.released(), Some(ReleaseReason::Idle));
}

#[test]
fn an_idle_session_with_nobody_viewing_is_released_after_30_minutes_and_not_before() {
    let mut sim = Sim::new();
    sim.turn("t1");
    sim.reply("t1", ReplyOutcome::Accepted);
    let ended = sim.now;
    sim.wait(29);
    assert_eq!(sim.released(), None);
    assert_eq!(
        sim.session.poll_timeout(),
        Some(ended.plus(Millis::minutes(30)))
    );
    sim.wait(1);
    assert_eq!(sim.released(), Some(ReleaseReason::Idle));
    assert_eq!(
        sim.effects.last(),
        Some(&Effect::Released(ReleaseReason::Idle))
    );
}

#[test]
fn someone_viewing_the_document_keeps_an_idle_session_and_idle_counts_from_their_leaving() {
    let mut sim = Sim::new();
    let effects = sim.session.handle_viewers(2, sim.now);
    assert!(effects.is_empty());
    sim.wait(120);
    assert_eq!(sim.released(), None);
    sim.session.handle_viewers(0, sim.now);
    sim.wait(29);
    assert_eq!(sim.released(), None);
    sim.wait(1);
    assert_eq!(sim.released(), Some(ReleaseReason::Idle));
}

#[test]
fn stopped_after_n_minutes_appears_only_for_a_real_stop_with_its_true_age() {
    let mut sim = Sim::new();
    sim.turn("t1");
    sim.reply("t1", ReplyOutcome::Refused);
    sim.wait(10);
    sim.run("plan-review", RunStatus::Running);
    sim.wait(31);
    // The refused reply stopped nothing.
    assert!(!sim
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RunStopped { .. })));
    sim.wait(6);
    sim.release(ReleaseTrigger::Stop);
    let stopped: Vec<_> = sim
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::RunStopped { run, after } => Some((run.0.as_str(), after.whole_minutes())),
            _ => None,
        })
        .collect();
    assert_eq!(stopped, vec![("plan-review", 37)]);
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
    let before = sim.effects.len();
    sim.run("r2", RunStatus::Running);
    sim.release(ReleaseTrigger::Stop);
    assert_eq!(sim.effects.len(), before);
}

#[test]
fn run_cards_show_the_true_age_and_freeze_it_when_the_run_ends() {
    let mut sim = Sim::new();
    sim.run("review", RunStatus::Running);
    sim.wait(12);
    let cards = sim.session.runs(sim.now);
    assert_eq!(
        (cards[0].status, cards[0].age.whole_minutes()),
        (RunStatus::Running, 12)
    );
    sim.run("review", RunStatus::Completed);
    sim.wait(20);
    let cards = sim.session.runs(sim.now);
    assert_eq!(
        (cards[0].status, cards[0].age.whole_minutes()),
        (RunStatus::Completed, 12)
    );
}

fn run_cards(sim: &Sim) -> Vec<(String, RunStatus)> {
    sim.session
        .runs(sim.now)
        .into_iter()
        .map(|card| (card.run.0, card.status))
        .collect()
}

#[test]
fn a_run_beyond_the_declared_capacity_is_refused_and_changes_nothing() {
    let mut sim = Sim::new();
    sim.session = Session::new(Millis(0), DEFAULT_IDLE).with_run_capacity(2);
    sim.run("a", RunStatus::Running);
    sim.run("b", RunStatus::Paused);
    assert_eq!(
        sim.attempt("c", 1, RunStatus::Running),
        Err(RunRefusal::CapacityFull { capacity: 2 })
    );
    assert_eq!(run_cards(&sim).len(), 2);
    // An ended run frees its slot.
    sim.run("a", RunStatus::Completed);
    sim.run("c", RunStatus::Running);
    assert_eq!(
        run_cards(&sim),
        [
            ("a".to_owned(), RunStatus::Completed),
            ("b".to_owned(), RunStatus::Paused),
            ("c".to_owned(), RunStatus::Running)
        ]
    );
}

#[test]
fn a_late_report_of_an_older_attempt_never_repaints_the_run_but_frees_its_slot() {
    let mut sim = Sim::new();
    sim.session = Session::new(Millis(0), DEFAULT_IDLE).with_run_capacity(2);
    sim.run("deploy", RunStatus::Running);
    sim.wait(3);
    sim.attempt("deploy", 2, RunStatus::Running).unwrap();
    // Attempt 1 still holds a slot: it may be running.
    assert_eq!(
        sim.attempt("other", 1, RunStatus::Running),
        Err(RunRefusal::CapacityFull { capacity: 2 })
    );
    assert_eq!(
        sim.attempt("deploy", 1, RunStatus::Failed),
        Err(RunRefusal::Superseded {
            attempt: 1,
            newest: 2
        })
    );
    assert_eq!(run_cards(&sim), [("deploy".to_owned(), RunStatus::Running)]);
    sim.run("other", RunStatus::Running);
    assert_eq!(
        sim.session.runs(sim.now)[0].age,
        Millis(0),
        "attempt 2's age"
    );
    assert_eq!(
        sim.attempt("deploy", 0, RunStatus::Running),
        Err(RunRefusal::NoAttemptZero)
    );
}

#[test]
fn a_session_ended_without_a_confirmed_stop_calls_its_live_runs_unknown_not_stopped() {
    for end in [
        Some(ReleaseTrigger::MachineRevoked),
        Some(ReleaseTrigger::DocumentArchived),
        None,
    ] {
        let mut sim = Sim::new();
        sim.run("build", RunStatus::Running);
        sim.run("done", RunStatus::Completed);
        sim.wait(12);
        match end {
            Some(trigger) => sim.release(trigger),
            None => {
                let effects = sim.session.handle_link_closed(sim.now);
                sim.effects.extend(effects);
            }
        }
        assert!(
            !sim.effects
                .iter()
                .any(|e| matches!(e, Effect::RunStopped { .. })),
            "{end:?}: {:?}",
            sim.effects
        );
        assert_eq!(
            sim.effects[0],
            Effect::RunUnknown {
                run: RunId::from("build"),
                after: Millis::minutes(12)
            },
            "{end:?}"
        );
    }
}

impl Sim {
    fn lose_link(&mut self, loss: LinkLoss) {
        let effects = self.session.handle_link_lost(loss, self.now);
        self.effects.extend(effects);
    }

    fn link_back(&mut self) -> Vec<Effect> {
        let effects = self.session.handle_link_back(self.now);
        self.effects.extend(effects.clone());
        effects
    }

    fn answer(&mut self, request: &str) -> Vec<Effect> {
        let effects = self
            .session
            .handle_answered(&RequestId::from(request), self.now);
        self.effects.extend(effects.clone());
        effects
    }

    fn stop(&mut self) -> Vec<Effect> {
        let effects = self.session.handle_stop_requested(self.now);
        self.effects.extend(effects.clone());
        effects
    }

    fn count(&self, effect: &Effect) -> usize {
        self.effects.iter().filter(|e| *e == effect).count()
    }
}

const DAYS: u64 = 24 * 60;

#[test]
fn a_dropped_resumable_link_keeps_a_session_with_a_live_run_for_days_with_no_deadline() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    sim.lose_link(LinkLoss::Dropped);
    assert!(sim.session.is_away());
    assert_eq!(sim.session.poll_timeout(), None, "no timer while away");
    sim.wait(3 * DAYS);
    assert_eq!(sim.released(), None);
    assert_eq!(sim.link_back(), [Effect::AnnounceReconnected]);
    assert_eq!(sim.count(&Effect::AnnounceDisconnected), 1);
    assert_eq!(run_cards(&sim), [("build".to_owned(), RunStatus::Running)]);
}

#[test]
fn a_session_taken_back_after_a_restart_is_kept_like_a_drop_and_announced_as_nothing() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    sim.stop();
    sim.lose_link(LinkLoss::Restarted);
    assert!(sim.session.is_away());
    assert_eq!(sim.session.poll_timeout(), None, "in use: no deadline (L2)");
    sim.wait(DAYS);
    assert_eq!(sim.released(), None);
    // The held Stop goes first; no line says it disconnected or came back (L9).
    assert_eq!(sim.link_back(), [Effect::SendStop]);
    assert_eq!(sim.count(&Effect::AnnounceDisconnected), 0);
    assert_eq!(sim.count(&Effect::StopUnconfirmed), 0);
    // With nothing in use it is only leased, as for a drop.
    let mut idle = Sim::new();
    idle.lose_link(LinkLoss::Restarted);
    assert!(idle.session.poll_timeout().is_some());
}

#[test]
fn a_dropped_resumable_link_keeps_a_session_with_only_an_open_question() {
    let mut sim = Sim::new();
    sim.turn("t1");
    sim.ask("q1");
    sim.reply("t1", ReplyOutcome::Accepted);
    sim.lose_link(LinkLoss::Dropped);
    sim.wait(2 * DAYS);
    assert_eq!(sim.released(), None);
    // People answer while it is away: the answer is held, not sent.
    assert_eq!(sim.answer("q1"), []);
    sim.wait(DAYS);
    assert_eq!(sim.released(), None, "a held answer keeps the session");
    assert_eq!(
        sim.link_back(),
        [
            Effect::AnnounceReconnected,
            Effect::DeliverAnswer(RequestId::from("q1"))
        ]
    );
}

#[test]
fn an_answer_is_sent_again_after_a_drop_until_the_machine_acknowledges_it() {
    let mut sim = Sim::new();
    sim.ask("q1");
    assert_eq!(
        sim.answer("q1"),
        [Effect::DeliverAnswer(RequestId::from("q1"))]
    );
    // Written into a socket that was already dead: not acknowledged. This is
    // the only question of a Planner with no run; the session is kept.
    sim.lose_link(LinkLoss::Dropped);
    sim.wait(DAYS);
    assert_eq!(sim.released(), None);
    assert_eq!(
        sim.link_back(),
        [
            Effect::AnnounceReconnected,
            Effect::DeliverAnswer(RequestId::from("q1"))
        ]
    );
    let _ = sim
        .session
        .handle_answer_received(&RequestId::from("q1"), sim.now);
    assert!(!sim.session.in_use());
    sim.lose_link(LinkLoss::Dropped);
    assert_eq!(
        sim.link_back(),
        [],
        "an acknowledged answer is not sent again"
    );
}

#[test]
fn a_drop_with_nothing_to_keep_or_a_detach_is_leased_for_the_attach_grace_only() {
    for (loss, work) in [(LinkLoss::Dropped, false), (LinkLoss::Detached, true)] {
        let mut sim = Sim::new();
        sim.session = Session::new(Millis(0), DEFAULT_IDLE).with_attach_grace(Millis(60_000));
        if work {
            sim.run("build", RunStatus::Running);
        }
        sim.lose_link(loss);
        assert_eq!(sim.count(&Effect::AnnounceDisconnected), 0, "{loss:?}");
        let at = sim.now;
        assert_eq!(sim.session.poll_timeout(), Some(at.plus(Millis(60_000))));
        sim.now = at.plus(Millis(59_999));
        let early = sim.session.handle_timeout(sim.now);
        assert_eq!(early, [], "{loss:?}");
        sim.now = at.plus(Millis(60_000));
        let effects = sim.session.handle_timeout(sim.now);
        assert_eq!(sim.released(), Some(ReleaseReason::LinkClosed), "{loss:?}");
        assert!(
            !effects
                .iter()
                .any(|e| matches!(e, Effect::RunStopped { .. })),
            "{effects:?}"
        );
    }
}

#[test]
fn a_link_without_resumable_sessions_ends_its_sessions_when_it_closes() {
    let mut sim = Sim::new();
    sim.ask("q1");
    sim.lose_link(LinkLoss::Ended);
    assert_eq!(sim.released(), Some(ReleaseReason::LinkClosed));
    assert_eq!(
        sim.effects[0],
        Effect::WithdrawRequest(RequestId::from("q1"))
    );
}

#[test]
fn a_question_withdrawn_while_away_leaves_only_the_lease() {
    let mut sim = Sim::new();
    sim.ask("q1");
    sim.lose_link(LinkLoss::Dropped);
    sim.wait(DAYS);
    let _ = sim
        .session
        .handle_request_settled(&RequestId::from("q1"), sim.now);
    let due = sim.session.poll_timeout().expect("a lease");
    assert_eq!(due, sim.now.plus(margin_planner::DEFAULT_ATTACH_GRACE));
}

#[test]
fn a_stop_pressed_while_away_is_held_and_sent_first_when_the_machine_is_back() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    sim.ask("q1");
    sim.lose_link(LinkLoss::Dropped);
    assert_eq!(sim.stop(), [Effect::StopHeld]);
    assert_eq!(sim.stop(), [], "pressed twice, held once");
    sim.answer("q1");
    assert_eq!(
        sim.link_back(),
        [
            Effect::AnnounceReconnected,
            Effect::SendStop,
            Effect::DeliverAnswer(RequestId::from("q1"))
        ]
    );
    assert!(sim.session.stop_pending());
}

#[test]
fn a_stop_unconfirmed_when_the_link_drops_is_said_so_and_sent_again() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    assert_eq!(sim.stop(), [Effect::SendStop]);
    sim.lose_link(LinkLoss::Dropped);
    assert_eq!(
        sim.effects[sim.effects.len() - 2..],
        [Effect::AnnounceDisconnected, Effect::StopUnconfirmed]
    );
    assert_eq!(
        sim.link_back(),
        [Effect::AnnounceReconnected, Effect::SendStop]
    );
}

#[test]
fn resume_undoes_only_the_stop_it_covers_and_is_refused_while_away() {
    let mut sim = Sim::new();
    sim.run("build", RunStatus::Running);
    assert_eq!(
        sim.session.handle_resume_requested(sim.now),
        Err(ResumeRefusal::NoStop)
    );
    assert_eq!(sim.stop(), [Effect::SendStop]);
    assert_eq!(
        sim.session.handle_resume_requested(sim.now),
        Ok(vec![Effect::WithdrawStop])
    );
    assert!(!sim.session.stop_pending());
    // A Stop pressed after the Resume is a new one: not covered.
    assert_eq!(sim.stop(), [Effect::SendStop]);
    sim.lose_link(LinkLoss::Dropped);
    assert_eq!(
        sim.session.handle_resume_requested(sim.now),
        Err(ResumeRefusal::Away)
    );
    // Refused, not held: the Stop still reaches the machine first.
    assert_eq!(
        sim.link_back(),
        [Effect::AnnounceReconnected, Effect::SendStop]
    );
}
