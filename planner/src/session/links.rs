//! A session across its machine's links and the server's restarts (SPEC
//! L1–L7, L9, W1, W2a): what a link's end keeps, what `resume` hands back
//! — held Stops, unacknowledged answers, the running turn and its calls'
//! results — and what a restart does to calls that were in flight.

use std::collections::BTreeSet;

use margin_protocol::chat::ChatKind;
use margin_protocol::link::ResumedSession;
use margin_protocol::RefusalCode;

use super::effect::{Effect, Step};
use super::journal::{Entry, TurnEnd};
use super::state::CallState;
use super::{LinkLoss, PlannerSession};
use crate::ids::{CallId, Millis, RequestId, TurnId};
use crate::wording;

/// What a machine's `resume` says it still holds of a session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// The questions it still waits on.
    pub questions: Vec<RequestId>,
    /// The turn it still runs.
    pub turn: Option<TurnId>,
    /// That turn's calls still waiting for a result.
    pub calls: Vec<CallId>,
}

impl PlannerSession {
    /// The link went away (SPEC L1, L2, L7). A resumable link that dropped
    /// keeps a session in use with no deadline, and Chat says so once; a
    /// detach, or a drop with nothing to keep, leases it for the attach
    /// grace; a link that cannot resume ends it.
    pub fn handle_link_lost(&mut self, loss: LinkLoss, now: Millis) -> Step {
        self.step(|session, step| session.link_lost(step, loss, now))
    }

    fn link_lost(&mut self, step: &mut Step, loss: LinkLoss, now: Millis) {
        if self.state.released.is_some() || self.is_away() {
            return;
        }
        if loss == LinkLoss::Ended {
            self.release_by_link(step, None, now);
            return;
        }
        let kept = matches!(loss, LinkLoss::Dropped | LinkLoss::Restarted) && self.in_use();
        let until = (!kept).then(|| now.plus(self.state.timing.attach_grace));
        self.record(step, now, Entry::LinkLost { loss, until });
        if kept && loss == LinkLoss::Dropped {
            step.say(ChatKind::System, wording::DISCONNECTED);
            if self.state.stop_pending {
                step.say(ChatKind::System, wording::STOP_UNCONFIRMED);
            }
        }
    }

    /// The session was taken back from its journal after a restart (SPEC
    /// W1, W2, L9): every call that was in flight is `interrupted` and will
    /// never run; the session is kept as for a drop but nothing is
    /// announced, and a lease starts again (the machine could not come
    /// back while the server was down).
    pub fn handle_restarted(&mut self, now: Millis) -> Step {
        self.step(|session, step| {
            if session.state.released.is_some() {
                return;
            }
            let pending: Vec<CallId> = session
                .state
                .turn
                .iter()
                .flat_map(|turn| turn.calls.iter())
                .filter(|(_, call)| call.state == CallState::Pending)
                .map(|(id, _)| id.clone())
                .collect();
            for call in pending {
                session.record(step, now, Entry::CallInterrupted { call });
            }
            match session.state.away {
                None => session.link_lost(step, LinkLoss::Restarted, now),
                Some(away) if away.until.is_some() => {
                    let until = Some(now.plus(session.state.timing.attach_grace));
                    let loss = LinkLoss::Restarted;
                    session.record(step, now, Entry::LinkLost { loss, until });
                }
                Some(_) => {}
            }
        })
    }

    /// Machine `machine`, named `name`, is resuming the session (SPEC L3).
    /// Another machine of the account than the one it ran on is journaled,
    /// so that a restart files the session under the machine that runs it
    /// — whose revocation then ends it — and people see its name.
    pub fn handle_moved(&mut self, machine: &str, name: &str, now: Millis) -> Step {
        self.step(|session, step| {
            if session.state.released.is_some() || session.state.machine == machine {
                return;
            }
            let entry = Entry::MachineChanged {
                machine: machine.to_owned(),
                name: name.to_owned(),
            };
            session.record(step, now, entry);
        })
    }

    /// The machine is back and its `resume` named this session (SPEC L3–L5,
    /// W1, W2a). Questions it listed that no longer wait are withdrawn in
    /// `resumed`; questions open here that it no longer lists are settled
    /// (it withdrew them while away). Then, in order: a held Stop, every
    /// unacknowledged answer, and the running turn — handed back when the
    /// machine still runs it, with a result for each call it lists; sent
    /// again when the machine never acted on it; otherwise ended, saying
    /// so. Then a turn for messages that waited.
    pub fn handle_resume(&mut self, held: Held, now: Millis) -> (ResumedSession, Step) {
        let mut withdrawn = Vec::new();
        let step = self.step(|session, step| {
            if session.state.released.is_some() {
                return;
            }
            let listed: BTreeSet<RequestId> = held.questions.into_iter().collect();
            let waiting: BTreeSet<RequestId> = session.questions().cloned().collect();
            withdrawn = listed.difference(&waiting).map(|q| q.0.clone()).collect();
            // Questions opened by a call the machine still waits on: it
            // learns them with that call's result, so it cannot list them.
            let unseen: BTreeSet<&RequestId> = match &session.state.turn {
                Some(turn) if held.turn.as_ref() == Some(&turn.id) => held
                    .calls
                    .iter()
                    .filter_map(|call| turn.call(call))
                    .flat_map(|call| call.opened.iter())
                    .collect(),
                _ => BTreeSet::new(),
            };
            let dropped: Vec<RequestId> = session
                .state
                .requests
                .iter()
                .filter(|request| !listed.contains(*request) && !unseen.contains(request))
                .cloned()
                .collect();
            for request in dropped {
                let entry = Entry::RequestSettled {
                    request: request.clone(),
                };
                session.record(step, now, entry);
                step.effects.push(Effect::Withdraw(request));
            }
            if let Some(away) = session.state.away {
                session.record(step, now, Entry::LinkBack);
                if away.announced {
                    step.say(ChatKind::System, wording::RECONNECTED);
                }
            }
            if session.state.stop_pending {
                step.send(session.stop_message());
            }
            let answers: Vec<RequestId> = session.state.answers.keys().cloned().collect();
            for request in answers {
                step.effects
                    .extend(session.input_result(&request).map(Effect::Send));
            }
            session.hand_back_turn(step, held.turn, held.calls, now);
            session.start_next_turn(step, now);
        });
        let resumed = ResumedSession {
            session: self.state.id.clone(),
            document: self.state.document.clone(),
            withdrawn,
        };
        (resumed, step)
    }

    /// The running turn after a `resume` that named `turn` with `calls`
    /// waiting (SPEC W1, W2a).
    fn hand_back_turn(
        &mut self,
        step: &mut Step,
        turn: Option<TurnId>,
        calls: Vec<CallId>,
        now: Millis,
    ) {
        let held_turn = turn.as_ref().map_or("", |t| t.0.as_str()).to_owned();
        let Some(current) = self.state.turn.as_ref() else {
            for call in calls {
                step.send(self.unknown_turn(&held_turn, Some(call.0)));
            }
            return;
        };
        if turn.as_ref() == Some(&current.id) {
            for call in calls {
                let known = self
                    .state
                    .turn
                    .as_ref()
                    .and_then(|t| t.call(&call))
                    .map(|c| (c.tool, c.state));
                match known {
                    Some(known) => self.answer_again(step, call, known, now),
                    None => step.send(margin_protocol::link::ServerMessage::Refusal {
                        code: RefusalCode::UnknownCall,
                        message: format!(
                            "no record of call {:?} in this turn: it never ran, and calling it again is safe",
                            call.0
                        ),
                        call_id: Some(call.0),
                        session: None,
                        turn: None,
                        run: None,
                    }),
                }
            }
            return;
        }
        for call in calls {
            step.send(self.unknown_turn(&held_turn, Some(call.0)));
        }
        if current.made == 0 {
            // Nothing was done in it yet, so nothing can be done twice: the
            // machine gets the turn again.
            step.effects.extend(self.invoke().map(Effect::Send));
        } else {
            let id = current.id.clone();
            step.say(ChatKind::System, wording::TURN_ABANDONED);
            self.end_turn(step, id, TurnEnd::Abandoned, now);
        }
    }

    /// The machine came back without naming this session in its `resume`:
    /// it no longer holds the session's work, so the session ends (its live
    /// runs unknown, its questions withdrawn).
    pub fn handle_not_resumed(&mut self, now: Millis) -> Step {
        self.step(|session, step| {
            session.release_by_link(step, Some(wording::CAME_BACK_WITHOUT), now);
        })
    }
}
