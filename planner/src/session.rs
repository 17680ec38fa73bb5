//! One Planner session's life (SPEC P1–P4): when it is in use, what may
//! release it, and what is announced when it goes.
//!
//! A session is **in use** while it is replying, owns a live (running or
//! paused) run, or has an open host request. Nothing releases a session in
//! use but an explicit trigger ([`ReleaseTrigger`]); in particular a refused
//! reply does not (P2), and there is no wall-clock limit on work or on a
//! pending human decision (P1). A session not in use, with nobody viewing its
//! document, is released after the idle period, counted from the end of its
//! last activity (P3).
//!
//! Call order: feed events with the `handle_*` methods (each takes `now` and
//! returns the [`Effect`]s to carry out), ask [`Session::poll_timeout`] when
//! to call back, and call [`Session::handle_timeout`] then. After a release
//! every input is ignored and returns no effects.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{Millis, RequestId, RunId, TurnId};

/// `PLANNER_IDLE_MS` by default: 30 minutes.
pub const DEFAULT_IDLE: Millis = Millis::minutes(30);

/// A run's status as the Planner reports it (SPEC R1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunStatus {
    /// Working.
    Running,
    /// Waiting; still owned by the session.
    Paused,
    /// Finished well.
    Completed,
    /// Finished badly.
    Failed,
    /// Stopped.
    Stopped,
}

impl RunStatus {
    /// Whether the run still belongs to a session that must be kept.
    pub fn is_live(self) -> bool {
        matches!(self, RunStatus::Running | RunStatus::Paused)
    }
}

/// The explicit acts that release a session (SPEC P3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseTrigger {
    /// A member pressed Stop.
    Stop,
    /// The owner signed out.
    SignOut,
    /// The machine was unpaired.
    MachineUnpaired,
    /// The machine's credential was revoked.
    MachineRevoked,
    /// The owner's binding of the Planner to the document ended.
    BindingEnded,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReason {
    /// An explicit act.
    Trigger(ReleaseTrigger),
    /// No reply, question or run, nobody viewing, for the idle period.
    Idle,
}

/// How a turn's reply ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyOutcome {
    /// The reply passed the reply policy and is published.
    Accepted,
    /// The reply was refused by the reply policy (T2).
    Refused,
    /// The reply could not be verified.
    Unverifiable,
}

/// What the caller must carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Publish the turn's reply.
    PublishReply(TurnId),
    /// Announce that the turn's reply was withheld; never publish its text.
    AnnounceWithheld(TurnId),
    /// A live run stopped with the session; `after` is its true age (P4).
    RunStopped {
        /// The run.
        run: RunId,
        /// How long it had been running.
        after: Millis,
    },
    /// Withdraw a question that no longer has a session to answer.
    WithdrawRequest(RequestId),
    /// The session is gone.
    Released(ReleaseReason),
}

#[derive(Clone, Copy, Debug)]
struct Run {
    status: RunStatus,
    started: Millis,
    ended: Option<Millis>,
}

/// A run as a card shows it (SPEC R1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunCard {
    /// The run.
    pub run: RunId,
    /// Its last status.
    pub status: RunStatus,
    /// Its true age: from its first report to now, or to when it ended.
    pub age: Millis,
}

/// One Planner session. See the module documentation for the call order.
#[derive(Debug)]
pub struct Session {
    idle_after: Millis,
    replying: Option<TurnId>,
    runs: BTreeMap<RunId, Run>,
    requests: BTreeSet<RequestId>,
    viewers: usize,
    /// The end of the last activity (or the last viewer leaving): idle time
    /// counts from here.
    quiet_since: Millis,
    released: Option<ReleaseReason>,
}

impl Session {
    /// A session started at `now` that goes idle after `idle_after`.
    pub fn new(now: Millis, idle_after: Millis) -> Self {
        Session {
            idle_after,
            replying: None,
            runs: BTreeMap::new(),
            requests: BTreeSet::new(),
            viewers: 0,
            quiet_since: now,
            released: None,
        }
    }

    /// Whether the session is replying, owns a live run or waits on a
    /// person (SPEC P1).
    pub fn in_use(&self) -> bool {
        self.replying.is_some()
            || self.runs.values().any(|run| run.status.is_live())
            || !self.requests.is_empty()
    }

    /// The run cards at `now`, in run-id order.
    pub fn runs(&self, now: Millis) -> Vec<RunCard> {
        self.runs
            .iter()
            .map(|(id, run)| RunCard {
                run: id.clone(),
                status: run.status,
                age: run.ended.unwrap_or(now).since(run.started),
            })
            .collect()
    }

    /// Whether a turn is replying.
    pub fn replying(&self) -> bool {
        self.replying.is_some()
    }

    /// Why the session was released, once it has been.
    pub fn released(&self) -> Option<ReleaseReason> {
        self.released
    }

    /// A turn started replying.
    pub fn handle_turn_started(&mut self, turn: TurnId, _now: Millis) -> Vec<Effect> {
        if self.released.is_none() {
            self.replying = Some(turn);
        }
        Vec::new()
    }

    /// The turn's reply ended. A refused or unverifiable reply is announced
    /// and withheld, and never releases the session (SPEC P2).
    pub fn handle_reply_finished(
        &mut self,
        turn: TurnId,
        outcome: ReplyOutcome,
        now: Millis,
    ) -> Vec<Effect> {
        if self.released.is_some() || self.replying.as_ref() != Some(&turn) {
            return Vec::new();
        }
        self.replying = None;
        self.quiet_since = now;
        let effect = match outcome {
            ReplyOutcome::Accepted => Effect::PublishReply(turn),
            ReplyOutcome::Refused | ReplyOutcome::Unverifiable => Effect::AnnounceWithheld(turn),
        };
        vec![effect]
    }

    /// The Planner reported `run` with `status`.
    pub fn handle_run(&mut self, run: RunId, status: RunStatus, now: Millis) -> Vec<Effect> {
        if self.released.is_some() {
            return Vec::new();
        }
        let entry = self.runs.entry(run).or_insert(Run {
            status,
            started: now,
            ended: None,
        });
        // A run that has ended stays ended: a late report never revives it.
        if entry.status.is_live() {
            entry.status = status;
            if !status.is_live() {
                entry.ended = Some(now);
            }
        }
        if !status.is_live() {
            self.quiet_since = self.quiet_since.max(now);
        }
        Vec::new()
    }

    /// A question the Planner asked opened.
    pub fn handle_request_opened(&mut self, request: RequestId, _now: Millis) -> Vec<Effect> {
        if self.released.is_none() {
            self.requests.insert(request);
        }
        Vec::new()
    }

    /// A question was answered or withdrawn.
    pub fn handle_request_settled(&mut self, request: &RequestId, now: Millis) -> Vec<Effect> {
        if self.released.is_none() && self.requests.remove(request) {
            self.quiet_since = self.quiet_since.max(now);
        }
        Vec::new()
    }

    /// How many people view the document now.
    pub fn handle_viewers(&mut self, viewers: usize, now: Millis) -> Vec<Effect> {
        if self.released.is_none() {
            if self.viewers > 0 && viewers == 0 {
                self.quiet_since = self.quiet_since.max(now);
            }
            self.viewers = viewers;
        }
        Vec::new()
    }

    /// An explicit act releases the session, in use or not (SPEC P3): live
    /// runs stop with their true age (P4), open questions are withdrawn.
    pub fn handle_release(&mut self, trigger: ReleaseTrigger, now: Millis) -> Vec<Effect> {
        self.release(ReleaseReason::Trigger(trigger), now)
    }

    /// When to call [`Session::handle_timeout`]: the moment idle release is
    /// due, if the session is idle and unviewed; `None` while in use.
    pub fn poll_timeout(&self) -> Option<Millis> {
        if self.released.is_some() || self.in_use() || self.viewers > 0 {
            return None;
        }
        Some(self.quiet_since.plus(self.idle_after))
    }

    /// Releases the session if its idle period has passed.
    pub fn handle_timeout(&mut self, now: Millis) -> Vec<Effect> {
        match self.poll_timeout() {
            Some(due) if now >= due => self.release(ReleaseReason::Idle, now),
            _ => Vec::new(),
        }
    }

    fn release(&mut self, reason: ReleaseReason, now: Millis) -> Vec<Effect> {
        if self.released.is_some() {
            return Vec::new();
        }
        self.released = Some(reason);
        self.replying = None;
        let mut effects: Vec<Effect> = Vec::new();
        for (id, run) in &mut self.runs {
            if run.status.is_live() {
                run.status = RunStatus::Stopped;
                run.ended = Some(now);
                effects.push(Effect::RunStopped {
                    run: id.clone(),
                    after: now.since(run.started),
                });
            }
        }
        effects.extend(
            std::mem::take(&mut self.requests)
                .into_iter()
                .map(Effect::WithdrawRequest),
        );
        effects.push(Effect::Released(reason));
        effects
    }
}
