//! A session's state and the one function that changes it: [`State::apply`]
//! folds a journal record in. A live session and one restored from its
//! journal go through the same fold, so they cannot disagree.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use margin_protocol::chat::ChatMessageView;
use margin_protocol::decisions::AnswerBody;
use margin_protocol::tools::ToolName;
use serde::{Deserialize, Serialize};

use super::journal::{Entry, Record};
use super::{ReleaseReason, ReleaseTrigger, RunStatus, Start, Timing};
use crate::attempt::{AttemptId, Attempts, Ending};
use crate::ids::{CallId, CardId, Millis, RequestId, RunId, TurnId};
use crate::plan::Plan;

/// Most finished calls a turn remembers for `resume`; older ones are
/// forgotten (a machine waits on its newest calls, not on calls it already
/// built on).
pub(super) const REMEMBERED_CALLS: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct State {
    pub id: String,
    pub document: String,
    pub account: String,
    pub machine: String,
    pub machine_name: String,
    pub planning: bool,
    /// The last record folded in.
    pub seq: u64,
    /// Turns started so far (names the next one).
    pub turns: u64,
    pub turn: Option<Turn>,
    /// Messages for the next turn, in order (SPEC T3).
    pub waiting: VecDeque<ChatMessageView>,
    pub runs: BTreeMap<RunId, Run>,
    pub attempts: Attempts,
    /// Questions that wait on a person.
    pub requests: BTreeSet<RequestId>,
    /// Answers the machine has not acknowledged (SPEC L5).
    pub answers: BTreeMap<RequestId, HeldAnswer>,
    pub stop_pending: bool,
    pub away: Option<Away>,
    /// The end of the last activity: idle time counts from here.
    pub quiet_since: Millis,
    pub released: Option<ReleaseReason>,
    /// The plan, when the Planner declared `planning` (SPEC U1).
    pub plan: Option<Plan>,
    /// Who views the document now: live, never journaled.
    #[serde(skip)]
    pub viewers: usize,
    /// The server's settings: given, never journaled.
    #[serde(skip)]
    pub timing: Timing,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Turn {
    pub id: TurnId,
    /// The messages it answers.
    pub messages: Vec<ChatMessageView>,
    /// A repair turn's withheld questions.
    pub repair: Vec<String>,
    /// The distinct cards its decision calls captured that still hold
    /// their question (SPEC T2). Shared between copies of the state: the
    /// driver copies the session at every step (a step is applied to a copy
    /// and kept once committed), and a long turn's cards run to thousands,
    /// so they are copied only by a step that changes them.
    #[serde(default)]
    pub cards: Arc<BTreeSet<CardId>>,
    /// How many calls it made.
    pub made: usize,
    /// Its calls, oldest first (the newest [`REMEMBERED_CALLS`] finished
    /// ones, and every pending one).
    pub calls: VecDeque<(CallId, Call)>,
}

impl Turn {
    pub fn call(&self, id: &CallId) -> Option<&Call> {
        self.calls
            .iter()
            .find(|(c, _)| c == id)
            .map(|(_, call)| call)
    }

    fn call_mut(&mut self, id: &CallId) -> Option<&mut Call> {
        self.calls
            .iter_mut()
            .find(|(c, _)| c == id)
            .map(|(_, call)| call)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Call {
    pub tool: ToolName,
    pub state: CallState,
    /// The questions it opened (`ask`): a machine that has not had its
    /// result cannot name them yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub opened: Vec<RequestId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum CallState {
    /// Started; no result yet.
    Pending,
    /// Its result is in this record.
    Finished { seq: u64 },
    /// It was running when the server stopped.
    Interrupted,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Run {
    pub name: String,
    pub status: RunStatus,
    /// When its newest attempt was first reported.
    pub started: Millis,
    pub ended: Option<Millis>,
    /// The newest attempt reported.
    pub attempt: u32,
    /// The journal record that first reported it: cards are listed in
    /// that order, a new attempt keeping its place.
    #[serde(default)]
    pub reported: u64,
    /// Each reported attempt's record in the session's [`Attempts`].
    pub attempts: BTreeMap<u32, AttemptId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct HeldAnswer {
    pub answer: AnswerBody,
    pub by: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Away {
    /// When a lease ends the session; `None`: kept with no deadline.
    pub until: Option<Millis>,
    /// Whether the disconnection was announced.
    pub announced: bool,
}

impl State {
    /// A session as its `started` record (`seq`, at `at`) makes it.
    pub fn new(start: &Start, seq: u64, at: Millis, timing: Timing) -> State {
        State {
            id: start.session.clone(),
            document: start.document.clone(),
            account: start.account.clone(),
            machine: start.machine.clone(),
            machine_name: start.machine_name.clone(),
            planning: start.planning,
            seq,
            turns: 0,
            turn: None,
            waiting: VecDeque::new(),
            runs: BTreeMap::new(),
            attempts: Attempts::new(start.run_capacity),
            requests: BTreeSet::new(),
            answers: BTreeMap::new(),
            stop_pending: false,
            away: None,
            quiet_since: at,
            released: None,
            plan: start.planning.then(Plan::default),
            viewers: 0,
            timing,
        }
    }

    /// Whether the session is replying, owns a live run or waits on a
    /// person (SPEC P1).
    pub fn in_use(&self) -> bool {
        self.turn.is_some()
            || self.runs.values().any(|run| run.status.is_live())
            || !self.requests.is_empty()
            || !self.answers.is_empty()
    }

    /// Folds `record` in. The one place the state changes.
    pub fn apply(&mut self, record: &Record) {
        self.seq = record.seq;
        let at = record.at;
        match &record.entry {
            // Only the first record; `started` built the state.
            Entry::Started(_) => {}
            Entry::MessageQueued { message } => self.waiting.push_back(message.clone()),
            Entry::TurnStarted { turn, repair } => {
                self.turns += 1;
                let messages = if repair.is_empty() {
                    self.waiting.drain(..).collect()
                } else {
                    Vec::new()
                };
                self.turn = Some(Turn {
                    id: turn.clone(),
                    messages,
                    repair: repair.clone(),
                    cards: Arc::default(),
                    made: 0,
                    calls: VecDeque::new(),
                });
            }
            Entry::TurnEnded { turn, .. } => {
                if self.turn.as_ref().is_some_and(|t| &t.id == turn) {
                    self.turn = None;
                    self.quiet_since = self.quiet_since.max(at);
                }
            }
            Entry::CallStarted { call, tool } => {
                if let Some(turn) = self.turn.as_mut() {
                    turn.made += 1;
                    turn.calls.push_back((
                        call.clone(),
                        Call {
                            tool: *tool,
                            state: CallState::Pending,
                            opened: Vec::new(),
                        },
                    ));
                }
            }
            Entry::CallFinished {
                call,
                tool,
                cards,
                opened,
                ..
            } => {
                if let Some(turn) = self.turn.as_mut() {
                    let finished = CallState::Finished { seq: record.seq };
                    match turn.call_mut(call) {
                        Some(known) => {
                            known.state = finished;
                            known.opened.clone_from(opened);
                        }
                        None => {
                            turn.made += 1;
                            turn.calls.push_back((
                                call.clone(),
                                Call {
                                    tool: *tool,
                                    state: finished,
                                    opened: opened.clone(),
                                },
                            ));
                        }
                    }
                    if cards.iter().any(|card| !turn.cards.contains(card)) {
                        Arc::make_mut(&mut turn.cards).extend(cards.iter().cloned());
                    }
                    forget_old_calls(turn);
                }
                self.requests.extend(opened.iter().cloned());
            }
            Entry::CallInterrupted { call } => {
                if let Some(known) = self.turn.as_mut().and_then(|t| t.call_mut(call)) {
                    known.state = CallState::Interrupted;
                }
            }
            Entry::PlanUpdated { plan } => {
                if self.plan.is_some() {
                    self.plan = Some(plan.clone());
                }
            }
            Entry::RunReported {
                run,
                name,
                attempt,
                status,
            } => self.apply_run(run, name, (*attempt, *status), record.seq, at),
            Entry::Answered {
                request,
                answer,
                by,
            } => {
                if self.requests.remove(request) {
                    self.answers.insert(
                        request.clone(),
                        HeldAnswer {
                            answer: answer.clone(),
                            by: by.clone(),
                        },
                    );
                }
            }
            Entry::RequestSettled { request } => {
                if self.requests.remove(request) {
                    self.quiet_since = self.quiet_since.max(at);
                    self.lease_if_nothing_kept(at);
                }
            }
            Entry::CardDiscarded { card } => {
                if let Some(turn) = self.turn.as_mut() {
                    if turn.cards.contains(card) {
                        Arc::make_mut(&mut turn.cards).remove(card);
                    }
                }
            }
            Entry::AnswerReceived { request } => {
                if self.answers.remove(request).is_some() {
                    self.quiet_since = self.quiet_since.max(at);
                }
            }
            Entry::Unviewed => self.quiet_since = self.quiet_since.max(at),
            Entry::StopRequested => self.stop_pending = true,
            Entry::StopWithdrawn => self.stop_pending = false,
            Entry::MachineChanged { machine, name } => {
                self.machine.clone_from(machine);
                self.machine_name.clone_from(name);
            }
            Entry::LinkLost { loss, until } => {
                self.away = Some(Away {
                    until: *until,
                    announced: *loss == super::LinkLoss::Dropped && until.is_none(),
                });
            }
            Entry::LinkBack => self.away = None,
            Entry::Released { reason } => self.release(*reason, at),
        }
    }

    /// A run report (SPEC R1, R2, T4); the rules that refuse one are
    /// checked before it is recorded ([`super::PlannerSession::handle_run`]).
    fn apply_run(
        &mut self,
        run: &RunId,
        name: &str,
        (attempt, status): (u32, RunStatus),
        seq: u64,
        at: Millis,
    ) {
        let attempts = &mut self.attempts;
        match self.runs.get_mut(run) {
            Some(known) if attempt < known.attempt => {
                if let (Some(id), Some(ending)) = (known.attempts.get(&attempt), ending(status)) {
                    // Frees its slot; the run is not repainted.
                    let _ = attempts.handle_ended(*id, ending);
                }
                return;
            }
            Some(known) if attempt == known.attempt => {
                // An attempt that has ended stays ended: a late report
                // never revives it.
                if known.status.is_live() {
                    known.status = status;
                    if let (Some(id), Some(ending)) = (known.attempts.get(&attempt), ending(status))
                    {
                        end(attempts, *id, ending);
                        known.ended = Some(at);
                    }
                }
            }
            known => {
                let Ok(id) = attempts.handle_prepare(run.clone()) else {
                    return;
                };
                let _ = attempts.handle_launch(id);
                let _ = attempts.handle_started(id);
                let (name, mut earlier, reported) = match known {
                    Some(k) => (k.name.clone(), std::mem::take(&mut k.attempts), k.reported),
                    None => (name.to_owned(), BTreeMap::new(), seq),
                };
                earlier.insert(attempt, id);
                let ended = ending(status).map(|ending| {
                    end(attempts, id, ending);
                    at
                });
                self.runs.insert(
                    run.clone(),
                    Run {
                        name,
                        status,
                        started: at,
                        ended,
                        attempt,
                        attempts: earlier,
                        reported,
                    },
                );
            }
        }
        if !status.is_live() {
            self.quiet_since = self.quiet_since.max(at);
        }
    }

    /// The runs in the order first reported.
    pub fn runs_as_reported(&self) -> impl Iterator<Item = (&RunId, &Run)> {
        let mut runs: Vec<_> = self.runs.iter().collect();
        runs.sort_by_key(|(_, run)| run.reported);
        runs.into_iter()
    }

    /// While away with nothing left to keep, the session is only leased for
    /// the attach grace (SPEC L7).
    fn lease_if_nothing_kept(&mut self, at: Millis) {
        let in_use = self.in_use();
        let grace = self.timing.attach_grace;
        if let Some(away) = self.away.as_mut() {
            if away.until.is_none() && !in_use {
                away.until = Some(at.plus(grace));
            }
        }
    }

    /// The session ends: live runs stop with their true age when a
    /// confirmed Stop ended it, else their state becomes unknown (SPEC P4);
    /// open questions go.
    fn release(&mut self, reason: ReleaseReason, at: Millis) {
        if self.released.is_some() {
            return;
        }
        self.released = Some(reason);
        self.turn = None;
        let confirmed = reason == ReleaseReason::Trigger(ReleaseTrigger::Stop);
        for run in self.runs.values_mut() {
            if !run.status.is_live() {
                continue;
            }
            run.ended = Some(at);
            let newest = run.attempts.get(&run.attempt).copied();
            if confirmed {
                run.status = RunStatus::Stopped;
                if let Some(attempt) = newest {
                    end(&mut self.attempts, attempt, Ending::Interrupted);
                }
            } else if let Some(attempt) = newest {
                let _ = self.attempts.handle_lost(attempt);
            }
        }
        self.answers.clear();
        self.requests.clear();
        self.stop_pending = false;
    }
}

/// Keeps at most [`REMEMBERED_CALLS`] finished calls, dropping the oldest.
fn forget_old_calls(turn: &mut Turn) {
    let finished = |call: &Call| call.state != CallState::Pending;
    while turn.calls.iter().filter(|(_, c)| finished(c)).count() > REMEMBERED_CALLS {
        match turn.calls.iter().position(|(_, c)| finished(c)) {
            Some(oldest) => {
                turn.calls.remove(oldest);
            }
            None => break,
        }
    }
}

/// The attempt ending a terminal status reports; none for a live one.
pub(super) fn ending(status: RunStatus) -> Option<Ending> {
    match status {
        RunStatus::Running | RunStatus::Paused => None,
        RunStatus::Completed => Some(Ending::Completed),
        RunStatus::Failed => Some(Ending::Failed),
        RunStatus::Stopped => Some(Ending::Interrupted),
    }
}

/// Ends an attempt by the Planner's report, accepting a completed result.
/// The newest attempt is never obsolete, so acceptance cannot be refused.
fn end(attempts: &mut Attempts, attempt: AttemptId, ending: Ending) {
    let _ = attempts.handle_ended(attempt, ending);
    if ending == Ending::Completed {
        let _ = attempts.handle_accept(attempt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::journal::StoredResult;

    fn record(seq: u64, entry: Entry) -> Record {
        Record {
            seq,
            at: Millis(seq),
            entry,
        }
    }

    fn finished(call: &str, cards: &[&str]) -> Entry {
        Entry::CallFinished {
            call: CallId::from(call),
            tool: ToolName::OpenDecisions,
            result: StoredResult::NotKept { bytes: 0 },
            cards: cards.iter().map(|&c| CardId::from(c)).collect(),
            opened: Vec::new(),
        }
    }

    fn cards(state: &State) -> &Arc<BTreeSet<CardId>> {
        &state.turn.as_ref().expect("a turn").cards
    }

    #[test]
    fn a_copy_of_the_state_shares_its_turns_cards_until_a_step_changes_them() {
        let start = Start {
            session: "s".into(),
            document: "d".into(),
            account: "a".into(),
            machine: "m".into(),
            machine_name: "laptop".into(),
            planning: false,
            run_capacity: 1,
        };
        let mut state = State::new(&start, 0, Millis(0), Timing::default());
        let turn = Entry::TurnStarted {
            turn: TurnId::from("t1"),
            repair: Vec::new(),
        };
        state.apply(&record(1, turn));
        state.apply(&record(2, finished("c1", &["card-1", "card-2"])));

        // A step that captures no new card keeps sharing them.
        let mut next = state.clone();
        next.apply(&record(3, finished("c2", &["card-1"])));
        assert!(Arc::ptr_eq(cards(&state), cards(&next)));

        // One that does copies them once; the state it was copied from
        // keeps its own.
        next.apply(&record(4, finished("c3", &["card-3"])));
        assert!(!Arc::ptr_eq(cards(&state), cards(&next)));
        assert_eq!((cards(&state).len(), cards(&next).len()), (2, 3));

        let mut discarded = next.clone();
        discarded.apply(&record(
            5,
            Entry::CardDiscarded {
                card: CardId::from("card-9"),
            },
        ));
        assert!(
            Arc::ptr_eq(cards(&next), cards(&discarded)),
            "not a turn's card"
        );
        discarded.apply(&record(
            6,
            Entry::CardDiscarded {
                card: CardId::from("card-3"),
            },
        ));
        assert_eq!((cards(&next).len(), cards(&discarded).len()), (3, 2));
    }
}
