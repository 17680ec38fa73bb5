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
//! Runs (SPEC R1, R2, T4): each report names an attempt of its run (from 1).
//! Attempts go through the strict [`Attempts`] state machine, and a
//! session keeps at most its declared run capacity live at once. A report
//! about an older attempt than the run's newest is recorded for that attempt
//! but never repaints the run. A run is announced stopped only when a
//! confirmed Stop ended it; when the session ends any other way its live
//! runs become unknown — nothing proves their work stopped (P4).
//!
//! Links (SPEC L2, L4, L5, L7): when a resumable link drops unexpectedly, a
//! session in use is kept **with no deadline** — no timer, the idle period
//! included, ends it while its machine is away. A detached link, or a drop
//! with nothing to keep, only leases the session for the attach grace.
//! Answers to questions are delivered while linked and held while away; an
//! answer stays with the session until the machine acknowledges it, and is
//! sent again when the machine comes back. A Stop pressed while away, or
//! sent and unconfirmed when the link dropped, is held and sent first when
//! it comes back.
//!
//! Call order: feed events with the `handle_*` methods (each takes `now` and
//! returns the [`Effect`]s to carry out), ask [`Session::poll_timeout`] when
//! to call back, and call [`Session::handle_timeout`] then. After a release
//! every input is ignored and returns no effects.

use std::collections::{BTreeMap, BTreeSet};

use crate::attempt::{AttemptId, Attempts, Ending};
use crate::ids::{Millis, RequestId, RunId, TurnId};

/// Most runs a session keeps live at once unless its machine declares
/// another capacity.
pub const DEFAULT_RUN_CAPACITY: usize = 8;

/// `PLANNER_ATTACH_GRACE_MS` by default: 60 seconds.
pub const DEFAULT_ATTACH_GRACE: Millis = Millis(60_000);

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
    /// The link of a machine that did not ask to resume closed (SPEC L1).
    LinkClosed,
    /// No reply, question or run, nobody viewing, for the idle period.
    Idle,
}

/// How the session's link went away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkLoss {
    /// A resumable link dropped unexpectedly: closed without `detach` or a
    /// refusal, or closed by the server as unresponsive (L2).
    Dropped,
    /// The machine detached on purpose.
    Detached,
    /// A link without `resumable-sessions` closed, or one closed for a
    /// refusal: its sessions end (L1).
    Ended,
    /// The server restarted and took the session back from storage: kept
    /// as for a drop, but announced as nothing, neither now nor when the
    /// machine is back (L9).
    Restarted,
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
    /// A live run ended with the session without a confirmed stop: its
    /// work may still be going on (R2). `after` is its age so far.
    RunUnknown {
        /// The run.
        run: RunId,
        /// How long it had been live.
        after: Millis,
    },
    /// A live run stopped with the session; `after` is its true age (P4).
    RunStopped {
        /// The run.
        run: RunId,
        /// How long it had been running.
        after: Millis,
    },
    /// Withdraw a question that no longer has a session to answer.
    WithdrawRequest(RequestId),
    /// Say once that the Planner disconnected; its work is kept (L2).
    AnnounceDisconnected,
    /// Say once that the Planner is back (L2).
    AnnounceReconnected,
    /// Send `stop` to the machine now (L4).
    SendStop,
    /// A Stop was pressed while the machine is away: say it is held (L4).
    StopHeld,
    /// A member pressed Resume before the Stop was confirmed: tell the
    /// machine the Stop is withdrawn (L4).
    WithdrawStop,
    /// The link dropped before the machine confirmed a Stop: say it was not
    /// confirmed and is held (L4).
    StopUnconfirmed,
    /// Send this question's answer to the machine (`input-result`, L5).
    DeliverAnswer(RequestId),
    /// The session is gone.
    Released(ReleaseReason),
}

#[derive(Clone, Debug)]
struct Run {
    status: RunStatus,
    /// When its newest attempt was first reported.
    started: Millis,
    ended: Option<Millis>,
    /// The newest attempt reported.
    attempt: u32,
    /// Each reported attempt's record in the session's [`Attempts`].
    attempts: BTreeMap<u32, AttemptId>,
}

/// Why a Resume was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResumeRefusal {
    /// No Stop is waiting to be confirmed.
    NoStop,
    /// The machine is away: a Resume is refused, not held (L4).
    Away,
}

/// Why a run report was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunRefusal {
    /// Attempts are numbered from 1.
    NoAttemptZero,
    /// Starting another attempt would exceed the declared capacity; nothing
    /// changed.
    CapacityFull {
        /// The capacity.
        capacity: usize,
    },
    /// The report is about an older attempt than the run's newest: an end it
    /// reports frees that attempt's slot, but the run keeps the newer
    /// attempt's state (T4).
    Superseded {
        /// The attempt reported.
        attempt: u32,
        /// The run's newest attempt.
        newest: u32,
    },
}

impl std::fmt::Display for RunRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunRefusal::NoAttemptZero => f.write_str("attempts are numbered from 1"),
            RunRefusal::CapacityFull { capacity } => write!(
                f,
                "the session already has {capacity} live run attempts, its declared capacity"
            ),
            RunRefusal::Superseded { attempt, newest } => write!(
                f,
                "attempt {attempt} is older than the run's attempt {newest}; the run keeps the newer state"
            ),
        }
    }
}

impl std::error::Error for RunRefusal {}

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

/// A session whose machine is away.
#[derive(Clone, Copy, Debug)]
struct Away {
    /// When a lease ends the session; `None`: kept with no deadline.
    until: Option<Millis>,
    /// Whether the disconnection was announced.
    announced: bool,
}

/// One Planner session. See the module documentation for the call order.
#[derive(Debug)]
pub struct Session {
    idle_after: Millis,
    replying: Option<TurnId>,
    runs: BTreeMap<RunId, Run>,
    attempts: Attempts,
    requests: BTreeSet<RequestId>,
    /// Answered questions whose answer the machine has not acknowledged.
    answers: BTreeSet<RequestId>,
    /// A Stop was asked and not yet confirmed.
    stop_pending: bool,
    /// The machine is away: when the lease ends, if it has one.
    away: Option<Away>,
    attach_grace: Millis,
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
            attempts: Attempts::new(DEFAULT_RUN_CAPACITY),
            requests: BTreeSet::new(),
            answers: BTreeSet::new(),
            stop_pending: false,
            away: None,
            attach_grace: DEFAULT_ATTACH_GRACE,
            viewers: 0,
            quiet_since: now,
            released: None,
        }
    }

    /// The same session with room for `capacity` live run attempts (the
    /// machine's declaration; R2).
    pub fn with_run_capacity(mut self, capacity: usize) -> Self {
        self.attempts = Attempts::new(capacity);
        self
    }

    /// Whether the session is replying, owns a live run or waits on a
    /// person (SPEC P1).
    pub fn in_use(&self) -> bool {
        self.replying.is_some()
            || self.runs.values().any(|run| run.status.is_live())
            || !self.requests.is_empty()
            || !self.answers.is_empty()
    }

    /// The same session with `grace` as its attach grace (L7).
    pub fn with_attach_grace(mut self, grace: Millis) -> Self {
        self.attach_grace = grace;
        self
    }

    /// Whether the machine is away (the link dropped or detached and has
    /// not come back).
    pub fn is_away(&self) -> bool {
        self.away.is_some()
    }

    /// Whether a Stop was asked and not yet confirmed.
    pub fn stop_pending(&self) -> bool {
        self.stop_pending
    }

    /// The questions the session asked that wait on a person or on the
    /// machine's acknowledgement of their answer.
    pub fn questions(&self) -> impl Iterator<Item = &RequestId> {
        self.requests.iter().chain(self.answers.iter())
    }

    /// The link went away (L1, L2, L7).
    pub fn handle_link_lost(&mut self, loss: LinkLoss, now: Millis) -> Vec<Effect> {
        if self.released.is_some() || self.away.is_some() {
            return Vec::new();
        }
        let kept = matches!(loss, LinkLoss::Dropped | LinkLoss::Restarted) && self.in_use();
        match loss {
            LinkLoss::Ended => self.release(ReleaseReason::LinkClosed, now),
            LinkLoss::Restarted if kept => {
                self.away = Some(Away {
                    until: None,
                    announced: false,
                });
                Vec::new()
            }
            _ if kept => {
                self.away = Some(Away {
                    until: None,
                    announced: true,
                });
                let mut effects = vec![Effect::AnnounceDisconnected];
                if self.stop_pending {
                    effects.push(Effect::StopUnconfirmed);
                }
                effects
            }
            _ => {
                self.away = Some(Away {
                    until: Some(now.plus(self.attach_grace)),
                    announced: false,
                });
                Vec::new()
            }
        }
    }

    /// The machine is back (its `resume` named this session): a held Stop
    /// first, then every answer it has not acknowledged (L3, L4, L5).
    pub fn handle_link_back(&mut self, _now: Millis) -> Vec<Effect> {
        if self.released.is_some() {
            return Vec::new();
        }
        let mut effects = Vec::new();
        if let Some(away) = self.away.take() {
            if away.announced {
                effects.push(Effect::AnnounceReconnected);
            }
        }
        if self.stop_pending {
            effects.push(Effect::SendStop);
        }
        effects.extend(self.answers.iter().cloned().map(Effect::DeliverAnswer));
        effects
    }

    /// The machine came back without naming this session in its `resume`:
    /// it no longer holds the session's work, so the session ends (its live
    /// runs unknown, its questions withdrawn).
    pub fn handle_not_resumed(&mut self, now: Millis) -> Vec<Effect> {
        self.release(ReleaseReason::LinkClosed, now)
    }

    /// A member pressed Stop: sent now, or held while the machine is away.
    pub fn handle_stop_requested(&mut self, _now: Millis) -> Vec<Effect> {
        if self.released.is_some() || self.stop_pending {
            return Vec::new();
        }
        self.stop_pending = true;
        match self.away {
            None => vec![Effect::SendStop],
            Some(_) => vec![Effect::StopHeld],
        }
    }

    /// A member pressed Resume: it undoes the Stop pending now (the Stops it
    /// covers), and only while the machine is linked — pressed while away
    /// it is refused, not held (L4).
    pub fn handle_resume_requested(&mut self, _now: Millis) -> Result<Vec<Effect>, ResumeRefusal> {
        if self.released.is_some() || !self.stop_pending {
            return Err(ResumeRefusal::NoStop);
        }
        if self.away.is_some() {
            return Err(ResumeRefusal::Away);
        }
        self.stop_pending = false;
        Ok(vec![Effect::WithdrawStop])
    }

    /// A member answered `request`: delivered now, or held while away. It
    /// stays with the session until the machine acknowledges it (L5).
    pub fn handle_answered(&mut self, request: &RequestId, _now: Millis) -> Vec<Effect> {
        if self.released.is_some() || !self.requests.remove(request) {
            return Vec::new();
        }
        self.answers.insert(request.clone());
        match self.away {
            None => vec![Effect::DeliverAnswer(request.clone())],
            Some(_) => Vec::new(),
        }
    }

    /// The machine acknowledged the answer to `request` (`input-received`).
    pub fn handle_answer_received(&mut self, request: &RequestId, now: Millis) -> Vec<Effect> {
        if self.answers.remove(request) {
            self.quiet_since = self.quiet_since.max(now);
        }
        Vec::new()
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

    /// The Planner reported `attempt` of `run` with `status` (R1, R2, T4).
    pub fn handle_run(
        &mut self,
        run: RunId,
        attempt: u32,
        status: RunStatus,
        now: Millis,
    ) -> Result<Vec<Effect>, RunRefusal> {
        if self.released.is_some() {
            return Ok(Vec::new());
        }
        if attempt == 0 {
            return Err(RunRefusal::NoAttemptZero);
        }
        let attempts = &mut self.attempts;
        match self.runs.get_mut(&run) {
            Some(known) if attempt < known.attempt => {
                if let (Some(id), Some(ending)) = (known.attempts.get(&attempt), ending(status)) {
                    // Frees its slot; the run is not repainted.
                    let _ = attempts.handle_ended(*id, ending);
                }
                return Err(RunRefusal::Superseded {
                    attempt,
                    newest: known.attempt,
                });
            }
            Some(known) if attempt == known.attempt => {
                // An attempt that has ended stays ended: a late report
                // never revives it.
                if known.status.is_live() {
                    known.status = status;
                    if let (Some(id), Some(ending)) = (known.attempts.get(&attempt), ending(status))
                    {
                        end(attempts, *id, ending);
                        known.ended = Some(now);
                    }
                }
            }
            known => {
                let id =
                    attempts
                        .handle_prepare(run.clone())
                        .map_err(|_| RunRefusal::CapacityFull {
                            capacity: attempts.capacity(),
                        })?;
                let _ = attempts.handle_launch(id);
                let _ = attempts.handle_started(id);
                let mut earlier = known
                    .map(|k| std::mem::take(&mut k.attempts))
                    .unwrap_or_default();
                earlier.insert(attempt, id);
                let ended = ending(status).map(|ending| {
                    end(attempts, id, ending);
                    now
                });
                self.runs.insert(
                    run,
                    Run {
                        status,
                        started: now,
                        ended,
                        attempt,
                        attempts: earlier,
                    },
                );
            }
        }
        if !status.is_live() {
            self.quiet_since = self.quiet_since.max(now);
        }
        Ok(Vec::new())
    }

    /// The link of a machine that did not ask to resume closed: the session
    /// ends, and its live runs become unknown.
    pub fn handle_link_closed(&mut self, now: Millis) -> Vec<Effect> {
        self.release(ReleaseReason::LinkClosed, now)
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
            self.lease_if_nothing_kept(now);
        }
        Vec::new()
    }

    /// While away with nothing left to keep, the session is only leased for
    /// the attach grace (L7).
    fn lease_if_nothing_kept(&mut self, now: Millis) {
        let in_use = self.in_use();
        if let Some(away) = self.away.as_mut() {
            if away.until.is_none() && !in_use {
                away.until = Some(now.plus(self.attach_grace));
            }
        }
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
        if self.released.is_some() {
            return None;
        }
        // Away, only a lease ends the session: no idle period, no other
        // timer (L2, L7).
        if let Some(away) = self.away {
            return away.until;
        }
        if self.in_use() || self.viewers > 0 {
            return None;
        }
        Some(self.quiet_since.plus(self.idle_after))
    }

    /// Releases the session if its idle period has passed.
    pub fn handle_timeout(&mut self, now: Millis) -> Vec<Effect> {
        match self.poll_timeout() {
            Some(due) if now >= due && self.away.is_some() => {
                self.release(ReleaseReason::LinkClosed, now)
            }
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
        // Only a Stop the machine confirmed proves the work stopped (P4).
        let confirmed = reason == ReleaseReason::Trigger(ReleaseTrigger::Stop);
        let mut effects: Vec<Effect> = Vec::new();
        for (id, run) in &mut self.runs {
            if !run.status.is_live() {
                continue;
            }
            let after = now.since(run.started);
            run.ended = Some(now);
            let newest = run.attempts.get(&run.attempt).copied();
            if confirmed {
                run.status = RunStatus::Stopped;
                if let Some(attempt) = newest {
                    end(&mut self.attempts, attempt, Ending::Interrupted);
                }
                effects.push(Effect::RunStopped {
                    run: id.clone(),
                    after,
                });
            } else {
                if let Some(attempt) = newest {
                    let _ = self.attempts.handle_lost(attempt);
                }
                effects.push(Effect::RunUnknown {
                    run: id.clone(),
                    after,
                });
            }
        }
        self.answers.clear();
        self.stop_pending = false;
        effects.extend(
            std::mem::take(&mut self.requests)
                .into_iter()
                .map(Effect::WithdrawRequest),
        );
        effects.push(Effect::Released(reason));
        effects
    }
}

/// The attempt ending a terminal status reports; none for a live one.
fn ending(status: RunStatus) -> Option<Ending> {
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
