//! One Planner session as one aggregate (SPEC P, T, L, U, W): lifecycle
//! and retention, the turn in progress and the messages waiting for the
//! next, host requests and their answers, runs with their true ages, the
//! plan, and the tool journal — every part of it here and nowhere else.
//!
//! [`PlannerSession`] is a sans-IO state machine, as `quinn-proto`'s
//! `Connection` is to `quinn`: the server's driver feeds it inputs
//! (`handle_*`, each with the caller's `now`) and carries out the [`Step`]
//! each returns — commit its journal records, feed events and Chat lines in
//! one transaction, then carry out its [`Effect`]s. It asks to be called
//! back at [`PlannerSession::poll_timeout`] with
//! [`PlannerSession::handle_timeout`].
//!
//! Every change is a journal [`Record`] folded in by one function, so a
//! session restored from its journal ([`PlannerSession::restore`]) is the
//! session that was committed. A driver that cannot commit a step keeps
//! the session as it was: it calls inputs on a clone and keeps the clone
//! only once the step is committed.
//!
//! The rules, in brief:
//! - A session is **in use** while it is replying, owns a live run, or
//!   waits on a person; nothing but an explicit act releases it then, and
//!   there is no deadline on work or on a pending decision (P1–P3). A
//!   session not in use, with nobody viewing, goes after the idle period.
//! - A reply that asks in prose is withheld for a repair turn; the repair
//!   succeeds when the turn captured a card per question (T2). Messages
//!   that arrive during a turn wait, in order, for the next (T3).
//! - A resumable link that drops keeps a session in use with no deadline;
//!   a detach, or a drop with nothing to keep, leases it for the attach
//!   grace. Answers wait for `input-received`; Stops wait for the machine
//!   and go first when it is back (L2–L7). A restart keeps it like a drop
//!   but announces nothing (L9).
//! - A document tool call is journaled before it runs and its result as it
//!   finishes; a call in flight at a restart is `interrupted`, and none is
//!   run twice: a call id seen before is answered from the journal (W1).

mod calls;
mod effect;
mod journal;
mod lifecycle;
mod links;
mod published;
mod shown;
mod state;
mod turns;

pub use calls::ToolOutcome;
pub use effect::{ChatLine, Effect, Step};
pub use journal::{Entry, Record, StoredResult, TurnEnd, KEPT_READ_BYTES};
pub use lifecycle::ResumeRefusal;
pub use links::Held;
pub use margin_protocol::link::RunStatus;
pub use published::Published;
pub use shown::Shown;

use margin_protocol::link::{PlannerState, PlannerView, RunView};
use margin_protocol::sessions::SessionEvent;
use serde::{Deserialize, Serialize};

use crate::ids::{Millis, RequestId, RunId, TurnId};
use state::State;

/// Most runs a session keeps live at once unless its machine declares
/// another capacity.
pub const DEFAULT_RUN_CAPACITY: usize = 8;

/// `MARGIN_PLANNER_ATTACH_GRACE_MS` by default: 60 seconds.
pub const DEFAULT_ATTACH_GRACE: Millis = Millis(60_000);

/// `MARGIN_PLANNER_IDLE_MS` by default: 30 minutes.
pub const DEFAULT_IDLE: Millis = Millis::minutes(30);

/// The server's settings for its sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// `MARGIN_PLANNER_IDLE_MS`: how long a session with nothing to do and nobody
    /// viewing is kept (SPEC P3).
    pub idle: Millis,
    /// `MARGIN_PLANNER_ATTACH_GRACE_MS`: how long a detached link's session, or a
    /// dropped one with nothing to keep, waits for its machine (SPEC L7).
    pub attach_grace: Millis,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            idle: DEFAULT_IDLE,
            attach_grace: DEFAULT_ATTACH_GRACE,
        }
    }
}

/// The explicit acts that release a session (SPEC P3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseTrigger {
    /// The machine confirmed a Stop.
    Stop,
    /// The owner signed out.
    SignOut,
    /// The machine was unpaired.
    MachineUnpaired,
    /// The machine's credential was revoked.
    MachineRevoked,
    /// The Planner was reset.
    PlannerReset,
    /// The document was archived.
    DocumentArchived,
    /// The document was closed.
    DocumentClosed,
    /// The document was deleted.
    DocumentDeleted,
}

/// Why a session was released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseReason {
    /// An explicit act.
    Trigger(ReleaseTrigger),
    /// The link of a machine that cannot resume closed, its lease ran out,
    /// or it came back without the session (SPEC L1, L7).
    LinkClosed,
    /// No reply, question or run, nobody viewing, for the idle period.
    Idle,
}

/// How the session's link went away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkLoss {
    /// A resumable link dropped unexpectedly: closed without `detach` or a
    /// refusal, or closed by the server as unresponsive (L2).
    Dropped,
    /// The machine detached on purpose.
    Detached,
    /// A link without `resumable-sessions` closed, or one closed for a
    /// refusal: its sessions end (L1).
    Ended,
    /// The server restarted and took the session back from its journal:
    /// kept as for a drop, but announced as nothing, neither now nor when
    /// the machine is back (L9).
    Restarted,
}

/// Who a new session belongs to and what its Planner declared: the
/// journal's first record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// The session's id (the caller makes it unique).
    pub session: String,
    /// Its document.
    pub document: String,
    /// The owner's account.
    pub account: String,
    /// The machine's id.
    pub machine: String,
    /// The machine's name.
    pub machine_name: String,
    /// Its Planner declared `planning` (SPEC U1).
    pub planning: bool,
    /// Most run attempts live at once, as its `hello` declared (SPEC R2).
    pub run_capacity: usize,
}

/// A session's state as a domain snapshot: what the journal folds to at
/// its `seq`, stored so a restore reads only the records after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Snapshot(State);

impl Snapshot {
    /// The last record folded in.
    pub fn seq(&self) -> u64 {
        self.0.seq
    }
}

/// Why a journal could not be folded back into a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreError {
    /// No snapshot, and the first record is not `started`.
    NotStarted,
    /// A record is missing: `expected` came next, `found` did.
    Gap {
        /// The record expected.
        expected: u64,
        /// The record found.
        found: u64,
    },
}

impl std::fmt::Display for RestoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RestoreError::NotStarted => f.write_str("the journal does not begin with started"),
            RestoreError::Gap { expected, found } => {
                write!(f, "journal record {expected} is missing (found {found})")
            }
        }
    }
}

impl std::error::Error for RestoreError {}

/// One Planner session. See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannerSession {
    state: State,
}

impl PlannerSession {
    /// A new session at `now`; its step opens the journal and the feed.
    pub fn start(start: Start, timing: Timing, now: Millis) -> (PlannerSession, Step) {
        let state = State::new(&start, 1, now, timing);
        let step = Step {
            events: vec![SessionEvent::SessionStarted {
                document: start.document.clone(),
                machine: start.machine_name.clone(),
                planning: start.planning,
            }],
            journal: vec![Record {
                seq: 1,
                at: now,
                entry: Entry::Started(start),
            }],
            ..Step::default()
        };
        (PlannerSession { state }, step)
    }

    /// The session a domain snapshot (if any) and the records after it
    /// fold to, with `timing` in force.
    pub fn restore(
        snapshot: Option<Snapshot>,
        records: impl IntoIterator<Item = Record>,
        timing: Timing,
    ) -> Result<PlannerSession, RestoreError> {
        let mut records = records.into_iter();
        let mut state = match snapshot {
            Some(Snapshot(state)) => state,
            None => match records.next() {
                Some(Record {
                    seq,
                    at,
                    entry: Entry::Started(start),
                }) => State::new(&start, seq, at, timing),
                _ => return Err(RestoreError::NotStarted),
            },
        };
        state.timing = timing;
        for record in records {
            if record.seq != state.seq + 1 {
                return Err(RestoreError::Gap {
                    expected: state.seq + 1,
                    found: record.seq,
                });
            }
            state.apply(&record);
        }
        Ok(PlannerSession { state })
    }

    /// The session as a domain snapshot.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot(self.state.clone())
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        &self.state.id
    }

    /// Its document.
    pub fn document(&self) -> &str {
        &self.state.document
    }

    /// Its owner's account.
    pub fn account(&self) -> &str {
        &self.state.account
    }

    /// The machine it runs on.
    pub fn machine(&self) -> &str {
        &self.state.machine
    }

    /// Whether its Planner declared `planning` (pinned, SPEC U1).
    pub fn planning(&self) -> bool {
        self.state.planning
    }

    /// The last journal record folded in.
    pub fn seq(&self) -> u64 {
        self.state.seq
    }

    /// The oldest journal record the session may still read back (a
    /// result to send again); records before it, and before the last
    /// snapshot, may be pruned.
    pub fn oldest_needed(&self) -> u64 {
        self.state
            .turn
            .iter()
            .flat_map(|turn| turn.calls.iter())
            .filter_map(|(_, call)| match call.state {
                state::CallState::Finished { seq } => Some(seq),
                _ => None,
            })
            .min()
            .unwrap_or(self.state.seq + 1)
    }

    /// Why it was released, once it has been.
    pub fn released(&self) -> Option<ReleaseReason> {
        self.state.released
    }

    /// Whether the machine is away (the link dropped or detached and has
    /// not come back).
    pub fn is_away(&self) -> bool {
        self.state.away.is_some()
    }

    /// Whether the machine has answered nothing in this session yet: its
    /// first turn runs and has made no call, and no run, question or plan
    /// came from it (a planning session starts with an empty plan at
    /// revision 0, no answer). Its `invoke` may have died with the link before the
    /// machine read it, so a `resume` that leaves the session out carries
    /// it on and sends the `invoke` again rather than ending it (SPEC L10).
    pub fn unheard(&self) -> bool {
        let state = &self.state;
        state.turns == 1
            && state.turn.as_ref().is_some_and(|turn| turn.made == 0)
            && state.runs.is_empty()
            && state.requests.is_empty()
            && state.answers.is_empty()
            && state.plan.as_ref().is_none_or(|plan| plan.revision == 0)
    }

    /// Whether it is replying, owns a live run or waits on a person (P1).
    pub fn in_use(&self) -> bool {
        self.state.in_use()
    }

    /// Whether a turn is running.
    pub fn replying(&self) -> bool {
        self.state.turn.is_some()
    }

    /// The running turn's id, if a turn is running.
    pub fn turn(&self) -> Option<&TurnId> {
        self.state.turn.as_ref().map(|turn| &turn.id)
    }

    /// Whether a Stop was asked and not yet confirmed.
    pub fn stop_pending(&self) -> bool {
        self.state.stop_pending
    }

    /// The questions that wait on a person.
    pub fn requests(&self) -> impl Iterator<Item = &RequestId> {
        self.state.requests.iter()
    }

    /// The questions that wait on a person or on the machine's
    /// acknowledgement of their answer.
    pub fn questions(&self) -> impl Iterator<Item = &RequestId> {
        self.state.requests.iter().chain(self.state.answers.keys())
    }

    /// What the Planner is doing, as its status names it (SPEC B1a): the
    /// first of these that holds.
    fn planner_state(&self) -> PlannerState {
        let state = &self.state;
        let running = state
            .runs
            .values()
            .any(|run| run.status == RunStatus::Running);
        let paused = state
            .runs
            .values()
            .any(|run| run.status == RunStatus::Paused);
        if self.is_away() {
            PlannerState::Disconnected
        } else if state.stop_pending {
            PlannerState::Stopping
        } else if state.turn.is_some() || running {
            PlannerState::Working
        } else if !state.requests.is_empty() || paused {
            PlannerState::Waiting
        } else {
            PlannerState::Available
        }
    }

    /// The document's Planner as people see it at `now`.
    pub fn view(&self, now: Millis) -> PlannerView {
        self.shown().view(now)
    }

    /// What people see of the session, to keep beside it: its view (run
    /// ages brought to a reader's clock by [`Shown::view`]) and whether it
    /// ended.
    pub fn shown(&self) -> Shown {
        Shown::new(
            self.view_as_committed(),
            self.state.released,
            self.unheard(),
        )
    }

    /// The view with each run's age as of its last report.
    fn view_as_committed(&self) -> PlannerView {
        let away = self.is_away();
        PlannerView {
            state: self.planner_state(),
            connected: !away,
            disconnected: away,
            machine: Some(self.state.machine_name.clone()),
            session: Some(self.state.id.clone()),
            replying: self.replying(),
            stop_pending: self.stop_pending(),
            questions: self.state.requests.len(),
            runs: self
                .state
                .runs_as_reported()
                .map(|(id, run)| RunView {
                    run: id.0.clone(),
                    name: run.name.clone(),
                    status: run.status,
                    age_ms: run.ended.unwrap_or(run.started).since(run.started).0,
                    started_at: run.started.0,
                    ended_at: run.ended.map(|at| at.0),
                    disconnected: away,
                })
                .collect(),
        }
    }

    /// A run's true age at `now`: from its newest attempt's first report
    /// to now, or to when it ended (SPEC P4).
    pub fn run_age(&self, run: &RunId, now: Millis) -> Option<Millis> {
        let run = self.state.runs.get(run)?;
        Some(run.ended.unwrap_or(now).since(run.started))
    }

    /// How many people view the document now. The count is not journaled
    /// (a restarted server counts again); the last one leaving is, as the
    /// moment the idle period counts from, so a session folded back from
    /// its journal goes idle when the live one would (SPEC P3).
    pub fn handle_viewers(&mut self, viewers: usize, now: Millis) -> Step {
        self.step(|session, step| {
            if session.state.released.is_some() {
                return;
            }
            let left = session.state.viewers > 0 && viewers == 0;
            session.state.viewers = viewers;
            if left {
                session.record(step, now, Entry::Unviewed);
            }
        })
    }

    /// When to call [`PlannerSession::handle_timeout`]: the end of a lease
    /// while the machine is away, or the moment idle release is due when
    /// the session is idle and unviewed; `None` while in use.
    pub fn poll_timeout(&self) -> Option<Millis> {
        let state = &self.state;
        if state.released.is_some() {
            return None;
        }
        // Away, only a lease ends the session: no idle period, no other
        // timer (L2, L7).
        if let Some(away) = state.away {
            return away.until;
        }
        if state.in_use() || state.viewers > 0 {
            return None;
        }
        Some(state.quiet_since.plus(state.timing.idle))
    }

    /// Folds `entry`, at `now`, into the session and the step.
    fn record(&mut self, step: &mut Step, now: Millis, entry: Entry) {
        let record = Record {
            seq: self.state.seq + 1,
            at: now,
            entry,
        };
        self.state.apply(&record);
        step.journal.push(record);
    }

    /// Runs `change` on the session and returns its step with the feed
    /// events that take applications from the view before to the view
    /// after (SPEC E2). A release shows only how its runs ended, then
    /// `session_ended`, whose fold clears the rest.
    fn step(&mut self, change: impl FnOnce(&mut Self, &mut Step)) -> Step {
        let before = Published::of(&self.state);
        let was_released = self.state.released.is_some();
        let mut step = Step::default();
        change(self, &mut step);
        let after = Published::of(&self.state);
        let mut events = match self.state.released {
            Some(reason) if !was_released => {
                let ended = Published {
                    runs: after.runs,
                    ..before.clone()
                };
                let mut events = before.diff(&ended);
                if reason != ReleaseReason::Trigger(ReleaseTrigger::DocumentDeleted) {
                    events.push(SessionEvent::SessionEnded {
                        reason: crate::wording::ended_because(reason).to_owned(),
                    });
                }
                events
            }
            _ => before.diff(&after),
        };
        // Events the change named itself (`plan_updated`, …) follow the
        // view's changes that led up to them.
        events.append(&mut step.events);
        step.events = events;
        step
    }
}
