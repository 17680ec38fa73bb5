//! A session's life (SPEC P1–P4, R1, R2, L4, L5): runs and their true
//! ages, Stop and Resume, answers that wait for the machine, what releases
//! a session and what is said when it goes.

use margin_protocol::chat::ChatKind;
use margin_protocol::decisions::AnswerBody;
use margin_protocol::link::ServerMessage;
use margin_protocol::RefusalCode;

use super::effect::{Effect, Step};
use super::journal::Entry;
use super::turns::refusal;
use super::{PlannerSession, ReleaseReason, ReleaseTrigger, RunStatus};
use crate::ids::{CardId, Millis, RequestId, RunId};
use crate::wording;

/// Why a Resume was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResumeRefusal {
    /// No Stop is waiting to be confirmed.
    NoStop,
    /// The machine is away: a Resume is refused, not held (L4).
    Away,
}

/// How a session's end is told in Chat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Telling {
    /// A confirmed Stop: "stopped", with each run's true age.
    Stopped,
    /// The server ended it by an act: the machine is told to stop.
    Act(ReleaseTrigger),
    /// The link ended it: runs are unknown, not stopped.
    LinkEnded {
        /// Said first.
        first: Option<&'static str>,
        /// Whether to say a running turn's reply was not posted.
        mention_turn: bool,
    },
    /// Nothing is said (idle, a deleted document).
    Silent,
}

impl PlannerSession {
    /// The Planner reported `attempt` of `run` with `status` (SPEC R1, R2,
    /// T4). An attempt beyond the declared capacity is refused and changes
    /// nothing; a report about an older attempt than the run's newest frees
    /// that attempt's slot but never repaints the run, and is refused.
    pub fn handle_run(
        &mut self,
        run: RunId,
        name: String,
        status: RunStatus,
        attempt: u32,
        now: Millis,
    ) -> Step {
        self.step(|session, step| {
            let of = session.state.id.clone();
            let received = ServerMessage::RunReceived {
                session: of.clone(),
                run: run.0.clone(),
                attempt,
                status,
            };
            if session.state.released.is_some() {
                return;
            }
            if attempt == 0 {
                step.send(
                    refusal(
                        RefusalCode::MalformedMessage,
                        format!("run {:?}: attempts are numbered from 1", run.0),
                    )
                    .answering_run(&of, &run.0),
                );
                return;
            }
            let known = session.state.runs.get(&run);
            // A report sent again (L10) — or any that changes nothing: the
            // run has that status already, or that attempt has ended — is
            // answered without a record, so it never revives an ended run.
            if known.is_some_and(|k| {
                k.attempt == attempt && (k.status == status || !k.status.is_live())
            }) {
                step.send(received);
                return;
            }
            let superseded = known
                .filter(|k| attempt < k.attempt)
                .map(|k| (attempt, k.attempt));
            let new_attempt = known.is_none_or(|k| attempt > k.attempt);
            let attempts = &session.state.attempts;
            if new_attempt && attempts.live() >= attempts.capacity() {
                let capacity = attempts.capacity();
                step.send(refusal(
                    RefusalCode::RunCapacity,
                    format!("run {:?}: the session already has {capacity} live run attempts, its declared capacity", run.0),
                ).answering_run(&of, &run.0));
                return;
            }
            let entry = Entry::RunReported {
                run: run.clone(),
                name,
                attempt,
                status,
            };
            session.record(step, now, entry);
            match superseded {
                Some((attempt, newest)) => step.send(refusal(
                    RefusalCode::SupersededAttempt,
                    format!("run {:?}: attempt {attempt} is older than the run's attempt {newest}; the run keeps the newer state", run.0),
                ).answering_run(&of, &run.0)),
                None => step.send(received),
            }
        })
    }

    /// A member pressed Stop (SPEC L4): sent now, or held while the machine
    /// is away; Chat says which — "stopped" only once the machine confirms.
    pub fn handle_stop_requested(&mut self, now: Millis) -> Step {
        self.step(|session, step| {
            if session.state.released.is_some() || session.state.stop_pending {
                return;
            }
            session.record(step, now, Entry::StopRequested);
            if session.is_away() {
                step.say(ChatKind::System, wording::STOP_HELD);
            } else {
                step.say(ChatKind::System, wording::STOP_SENT);
                step.send(session.stop_message());
            }
        })
    }

    /// A member pressed Resume: it undoes the Stop pending now, and only
    /// while the machine is linked — pressed while away it is refused, not
    /// held (SPEC L4).
    pub fn handle_resume_requested(&mut self, now: Millis) -> Result<Step, ResumeRefusal> {
        if self.state.released.is_some() || !self.state.stop_pending {
            return Err(ResumeRefusal::NoStop);
        }
        if self.is_away() {
            return Err(ResumeRefusal::Away);
        }
        Ok(self.step(|session, step| {
            session.record(step, now, Entry::StopWithdrawn);
            step.say(ChatKind::System, wording::RESUME_SENT);
            step.send(ServerMessage::StopWithdrawn {
                session: session.state.id.clone(),
            });
        }))
    }

    /// The machine confirmed a Stop (`stopped`): the session ends, its live
    /// runs stopped with their true age (SPEC P3, P4).
    pub fn handle_stopped(&mut self, now: Millis) -> Step {
        self.step(|session, step| {
            session.release(
                step,
                ReleaseReason::Trigger(ReleaseTrigger::Stop),
                Telling::Stopped,
                now,
            );
        })
    }

    /// A member answered `request`: delivered now, or held while away; it
    /// stays with the session until the machine acknowledges it (SPEC L5).
    pub fn handle_answered(
        &mut self,
        request: RequestId,
        answer: AnswerBody,
        by: String,
        now: Millis,
    ) -> Step {
        self.step(|session, step| session.answered(step, request, answer, by, now))
    }

    pub(super) fn answered(
        &mut self,
        step: &mut Step,
        request: RequestId,
        answer: AnswerBody,
        by: String,
        now: Millis,
    ) {
        if self.state.released.is_some() || !self.state.requests.contains(&request) {
            return;
        }
        let entry = Entry::Answered {
            request: request.clone(),
            answer,
            by,
        };
        self.record(step, now, entry);
        if !self.is_away() {
            step.effects
                .extend(self.input_result(&request).map(Effect::Send));
        }
    }

    /// People discarded `card`: a question on it no longer waits, and a
    /// machine that comes back is told it was withdrawn (SPEC L3); the
    /// running turn no longer counts it as captured (T2).
    pub fn handle_discarded(&mut self, card: CardId, now: Millis) -> Step {
        self.step(|session, step| {
            if session.state.released.is_some() {
                return;
            }
            let counted = session
                .state
                .turn
                .as_ref()
                .is_some_and(|turn| turn.cards.contains(&card));
            let request = RequestId::from(&card);
            if session.state.requests.contains(&request) {
                session.record(step, now, Entry::RequestSettled { request });
            }
            if counted {
                session.record(step, now, Entry::CardDiscarded { card });
            }
        })
    }

    /// The machine acknowledged the answer to `request` (`input-received`).
    pub fn handle_answer_received(&mut self, request: RequestId, now: Millis) -> Step {
        self.step(|session, step| {
            if session.state.answers.contains_key(&request) {
                session.record(step, now, Entry::AnswerReceived { request });
            }
        })
    }

    /// An explicit act releases the session, in use or not (SPEC P3): the
    /// machine is told to stop; its questions are withdrawn; Chat says the
    /// session ended and which runs were asked to stop — not that they
    /// stopped, which only the machine can confirm (P4). A deleted
    /// document's questions, Chat and the session's journal went with it:
    /// nothing is said or written.
    pub fn handle_release(&mut self, trigger: ReleaseTrigger, now: Millis) -> Step {
        let mut step = self.step(|session, step| {
            if session.state.released.is_some() {
                return;
            }
            let telling = match trigger {
                ReleaseTrigger::Stop => Telling::Stopped,
                ReleaseTrigger::DocumentDeleted => Telling::Silent,
                other => Telling::Act(other),
            };
            if trigger != ReleaseTrigger::Stop && !session.is_away() {
                step.send(session.stop_message());
            }
            session.release(step, ReleaseReason::Trigger(trigger), telling, now);
        });
        if trigger == ReleaseTrigger::DocumentDeleted {
            // Its journal and feed went with the document: nothing is left
            // to write them to.
            step.journal.clear();
            step.events.clear();
        }
        step
    }

    /// Releases the session if its idle period or its lease has passed
    /// (SPEC P3, L7). A session in use is never released here.
    pub fn handle_timeout(&mut self, now: Millis) -> Step {
        self.step(|session, step| match session.poll_timeout() {
            Some(due) if now >= due && session.is_away() => {
                let undelivered = session.state.waiting.len();
                session.release(
                    step,
                    ReleaseReason::LinkClosed,
                    Telling::LinkEnded {
                        first: None,
                        mention_turn: true,
                    },
                    now,
                );
                if undelivered > 0 {
                    step.say(ChatKind::System, wording::undelivered(undelivered));
                }
            }
            Some(due) if now >= due => {
                session.release(step, ReleaseReason::Idle, Telling::Silent, now)
            }
            _ => {}
        })
    }

    /// The `input-result` for an answered question of this session.
    pub(super) fn input_result(&self, request: &RequestId) -> Option<ServerMessage> {
        let held = self.state.answers.get(request)?;
        Some(ServerMessage::InputResult {
            session: self.state.id.clone(),
            request: request.0.clone(),
            answer: held.answer.clone(),
            answered_by: held.by.clone(),
        })
    }

    pub(super) fn stop_message(&self) -> ServerMessage {
        ServerMessage::Stop {
            session: self.state.id.clone(),
        }
    }

    /// Ends the session because its link did: `first` is said first, and
    /// its live runs are said unknown, not stopped (SPEC P4).
    pub(super) fn release_by_link(
        &mut self,
        step: &mut Step,
        first: Option<&'static str>,
        now: Millis,
    ) {
        let telling = Telling::LinkEnded {
            mention_turn: first.is_none(),
            first,
        };
        self.release(step, ReleaseReason::LinkClosed, telling, now);
    }

    /// Ends the session for `reason`, telling Chat as `telling` says, and
    /// withdraws its questions (but a deleted document's).
    fn release(&mut self, step: &mut Step, reason: ReleaseReason, telling: Telling, now: Millis) {
        if self.state.released.is_some() {
            return;
        }
        let in_turn = self.state.turn.is_some();
        let live: Vec<(String, u64)> = self
            .state
            .runs
            .values()
            .filter(|run| run.status.is_live())
            .map(|run| (run.name.clone(), now.since(run.started).whole_minutes()))
            .collect();
        let questions: Vec<RequestId> = self.state.requests.iter().cloned().collect();
        self.record(step, now, Entry::Released { reason });
        match telling {
            Telling::Stopped => {
                step.say(ChatKind::System, wording::STOPPED);
                for (name, minutes) in live {
                    step.say(ChatKind::System, wording::run_stopped(&name, minutes));
                }
            }
            Telling::Act(trigger) => {
                step.say(ChatKind::System, wording::session_ended_by(trigger));
                // The machine was told to stop only if it is linked.
                if !self.is_away() {
                    for (name, _) in live {
                        step.say(ChatKind::System, wording::run_asked_to_stop(&name));
                    }
                }
            }
            Telling::LinkEnded {
                first,
                mention_turn,
            } => {
                if let Some(first) = first {
                    step.say(ChatKind::System, first);
                }
                if in_turn && mention_turn {
                    step.say(ChatKind::System, wording::ENDED_IN_TURN);
                }
                for (name, _) in live {
                    step.say(ChatKind::System, wording::run_unknown(&name));
                }
            }
            Telling::Silent => {}
        }
        if reason != ReleaseReason::Trigger(ReleaseTrigger::DocumentDeleted) {
            step.effects
                .extend(questions.into_iter().map(Effect::Withdraw));
        }
        step.effects.push(Effect::Released(reason));
    }
}
