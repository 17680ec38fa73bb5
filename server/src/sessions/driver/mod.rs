//! The task that owns one Planner session (SPEC W1, W2a, P1–P4): it feeds
//! each [`Input`] to its [`PlannerSession`], commits the step that comes
//! back, and only then carries the step out — messages to the machine,
//! Chat lines, tool calls, withdrawn questions. It arms the session's
//! `poll_timeout` and stops when the session is released or the server
//! shuts down.
//!
//! Inputs run on a clone of the session; the clone replaces the session
//! only once its step is committed, so a failed commit leaves the session
//! exactly as storage has it. Tool calls run here, in order within the
//! session and concurrently with every other session's.
//!
//! Here: the loop, batches of inputs, and commits; `inputs` steps each
//! input, `links` follows the session's link, `calls` runs tool calls and
//! `effects` carries a committed step out.

use std::sync::Arc;
use std::time::Duration;

use margin_planner::{Effect, Millis, PlannerSession, ReleaseTrigger, Shown, Step};
use margin_protocol::chat::ChatKind;
use margin_protocol::sessions::SessionSnapshot;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep_until, Instant};
use tracing::{info, warn, Instrument};

use crate::cluster::Lease;
use crate::link::Link;
use crate::metrics::COUNTERS;
use crate::sessions::commit::{write_of, Written};
use crate::sessions::input::Input;
use crate::sessions::Shared;
use crate::storage::{Account, StorageError};
use crate::watchers::Bell;

mod calls;
mod effects;
mod inputs;
mod links;

use inputs::{plan, Planned, BATCH};
use links::Unrecorded;

/// How often an idle session someone is viewing checks whether they left.
const VIEWERS_EVERY: Duration = Duration::from_secs(5);
/// How long a timeout whose step could not be committed waits to try
/// again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// One session's driver.
pub(super) struct Driver {
    session: PlannerSession,
    /// The feed snapshot as committed.
    feed: SessionSnapshot,
    /// The link the session runs on; none while the machine is away.
    link: Option<Link>,
    /// Between `resume` and `resumed`: the link sends wait for.
    attaching: Option<(Link, Vec<String>)>,
    /// The account it acts for (the owner's; SPEC A1).
    account: Account,
    shared: Arc<Shared>,
    /// What people see (`GET /documents/{id}/planner`).
    shown: watch::Sender<Option<Shown>>,
    /// No timeout before this (a commit failed).
    pause: Option<Instant>,
    /// A step about the machine that storage refused, tried again once
    /// the pause is over.
    unrecorded: Option<Unrecorded>,
    /// In a cluster: its share of the document's lease, which every
    /// write is fenced on (SPEC C1).
    lease: Option<Lease>,
    /// Another node took the document: this copy writes and says nothing
    /// more, and leaves.
    moved: bool,
}

impl Driver {
    pub(super) fn new(
        session: PlannerSession,
        feed: SessionSnapshot,
        link: Option<Link>,
        account: Account,
        shared: Arc<Shared>,
        shown: watch::Sender<Option<Shown>>,
        lease: Option<Lease>,
    ) -> Self {
        Driver {
            session,
            feed,
            link,
            attaching: None,
            account,
            shared,
            shown,
            pause: None,
            unrecorded: None,
            lease,
            moved: false,
        }
    }

    /// Commits `first` (the session's start or restart) — `ready` hears
    /// once it is — then serves the mailbox until the session ends.
    pub(super) async fn run(
        mut self,
        first: Step,
        mut mailbox: mpsc::Receiver<Input>,
        ready: oneshot::Sender<()>,
    ) {
        let span = tracing::info_span!(
            "session",
            session = %self.session.id(),
            document = %self.session.document()
        );
        async move {
            let next = self.session.clone();
            let first = self.commit(next, first).await;
            let _ = ready.send(());
            match first {
                Ok(step) => {
                    self.carry_out(step.effects).await;
                    // Taken back here from another node's journal, where
                    // its `invoke` may have died unread with that node
                    // (SPEC C3, L10).
                    if self.link.is_none() {
                        self.carry_on_unheard(0, self.shared.now()).await;
                    }
                }
                Err(error) => {
                    warn!(%error, "session not committed; it ends here");
                    self.shared.forget(&self.session);
                    return;
                }
            }
            let shutdown = self.shared.shutdown.clone();
            // Without a lease (a server alone) this never fires.
            let lapsed = self
                .lease
                .as_ref()
                .map(|lease| lease.holder.lapsed.clone())
                .unwrap_or_default();
            let mut aside = None;
            while self.session.released().is_none() && !self.moved {
                if let Some(input) = aside.take() {
                    aside = self.serve(input, &mut mailbox).await;
                    continue;
                }
                let due = self.due();
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = lapsed.cancelled() => {
                        // Another node may own the document now (SPEC C3)
                        // and takes the session back from its journal.
                        info!("this node lapsed; the session leaves it");
                        self.moved = true;
                    }
                    input = mailbox.recv() => match input {
                        Some(input) => aside = self.serve(input, &mut mailbox).await,
                        None => break,
                    },
                    () = sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                        self.timeout().await;
                    }
                }
            }
            if self.session.released().is_some() || self.moved {
                self.shared.forget(&self.session);
            }
            if self.session.released().is_some() {
                // A call queued as the session ended still gets its one
                // answer (W1): the turn it names is not running.
                mailbox.close();
                while let Ok(input) = mailbox.try_recv() {
                    if let Input::ToolCall { turn, call, .. } = input {
                        let refused =
                            super::routing::unknown_turn(self.session.id(), &turn, Some(&call.0));
                        self.send(&refused);
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// When to look at the clock next: a step storage refused, to try it
    /// again; the session's own timeout; or a check on its viewers while
    /// it is idle and viewed.
    fn due(&self) -> Option<Instant> {
        if self.unrecorded.is_some() {
            return Some(self.pause.unwrap_or_else(Instant::now));
        }
        let now = self.shared.now();
        let at = |due: Millis| Instant::now() + Duration::from_millis(due.since(now).0);
        let due = match self.session.poll_timeout() {
            Some(due) => Some(at(due)),
            None if !self.session.in_use() && !self.session.is_away() => {
                Some(Instant::now() + VIEWERS_EVERY.min(self.shared.viewers_every))
            }
            None => None,
        };
        match (due, self.pause) {
            (Some(due), Some(pause)) => Some(due.max(pause)),
            (due, _) => due,
        }
    }

    async fn timeout(&mut self) {
        let now = self.shared.now();
        if let Some(unrecorded) = self.unrecorded {
            self.record(unrecorded, now).await;
            return;
        }
        let viewers = self.shared.hub.viewers(self.session.document());
        let stepped = self
            .apply(|session| {
                let viewed = session.handle_viewers(viewers, now);
                viewed.and(session.handle_timeout(now))
            })
            .await;
        if stepped.is_err() {
            // Storage is failing: look again in a while, not at once.
            self.pause = Some(Instant::now() + RETRY_PAUSE);
        }
    }

    /// Serves `first` and, while they keep coming, the inputs queued behind
    /// it: inputs that only change the session are stepped one after the
    /// other on one clone and committed together, as one write — a burst
    /// costs one commit, not one each. The batch ends at an input that must
    /// be handled alone (returned, to serve next), at a tool call that
    /// runs, or at [`BATCH`] inputs.
    async fn serve(&mut self, first: Input, mailbox: &mut mpsc::Receiver<Input>) -> Option<Input> {
        let now = self.shared.now();
        let mut next = self.session.clone();
        let mut step = Step::default();
        let mut answers = Vec::new();
        let mut input = Some(first);
        let mut aside = None;
        while let Some(current) = input.take() {
            match plan(&mut next, current, now) {
                Planned::Alone(alone) if answers.is_empty() => {
                    self.alone(alone, now).await;
                    return None;
                }
                Planned::Alone(alone) => {
                    aside = Some(alone);
                    break;
                }
                Planned::Step(more, answer) => {
                    let runs_tool = more
                        .effects
                        .iter()
                        .any(|e| matches!(e, Effect::RunTool { .. }));
                    step = step.and(more);
                    answers.push(answer);
                    if runs_tool || answers.len() >= BATCH {
                        break;
                    }
                    input = mailbox.try_recv().ok();
                }
            }
        }
        match self.commit(next, step).await {
            Ok(step) => {
                self.carry_out(step.effects).await;
                for answer in answers {
                    answer.committed();
                }
            }
            Err(error) => {
                for answer in answers {
                    self.not_committed(answer, &error);
                }
            }
        }
        aside
    }

    /// An input that changes more than the session (its link, what is
    /// shown, who else is told), handled on its own.
    async fn alone(&mut self, input: Input, now: Millis) {
        match input {
            Input::Resume { link, held, done } => {
                let resumed = self.resume(link, held, now).await;
                let _ = done.send(resumed);
            }
            Input::Attach { link } => self.attach(link),
            Input::NotResumed => self.record(Unrecorded::NotResumed, now).await,
            Input::LinkLost { link, end } => self.link_lost(link, end, now).await,
            Input::ResumeRequested { done } => {
                let mut refused = None;
                let result = self
                    .apply(|session| match session.handle_resume_requested(now) {
                        Ok(step) => step,
                        Err(refusal) => {
                            refused = Some(refusal);
                            Step::default()
                        }
                    })
                    .await
                    .map(|_| refused.map_or(Ok(()), Err));
                let _ = done.send(result);
            }
            Input::Release { trigger, done } => {
                // Marked before the commit: the machine's `stopped` may
                // come the moment the committed step sends `stop`.
                let by_server = trigger != ReleaseTrigger::Stop;
                if by_server {
                    self.shared
                        .released_by_server(self.session.id(), self.link.as_ref().map(|l| l.id));
                }
                let released = self
                    .apply(|session| session.handle_release(trigger, now))
                    .await
                    .map(drop);
                if released.is_err() && by_server {
                    self.shared.not_released_by_server(self.session.id());
                }
                let _ = done.send(released);
            }
            // `plan` steps every other input.
            other => {
                let mut next = self.session.clone();
                if let Planned::Step(step, answer) = plan(&mut next, other, now) {
                    match self.commit(next, step).await {
                        Ok(step) => {
                            self.carry_out(step.effects).await;
                            answer.committed();
                        }
                        Err(error) => self.not_committed(answer, &error),
                    }
                }
            }
        }
    }

    /// Runs `change` on a clone of the session, commits its step, then
    /// carries it out. A step that cannot be committed changes nothing and
    /// reveals nothing.
    async fn apply(
        &mut self,
        change: impl FnOnce(&mut PlannerSession) -> Step,
    ) -> Result<Step, StorageError> {
        let mut next = self.session.clone();
        let step = change(&mut next);
        let step = self.commit(next, step).await?;
        self.carry_out(step.effects.clone()).await;
        Ok(step)
    }

    /// Commits `step`, which took the session to `next`; once committed,
    /// `next` is the session and its feed events and Chat lines are shown.
    async fn commit(&mut self, next: PlannerSession, step: Step) -> Result<Step, StorageError> {
        if step.commits_nothing() {
            self.keep(next, None);
            return Ok(step);
        }
        let mut written = write_of(&next, &step, &self.feed, self.shared.keeping)?;
        written.write.lease = self.lease.as_ref().map(Lease::fence);
        let started = std::time::Instant::now();
        let committed = self.shared.journal.commit(written.write.clone()).await;
        COUNTERS.session_commit.observe(started.elapsed());
        if let Err(error) = committed {
            COUNTERS
                .session_commits_failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            warn!(%error, "session step not committed; nothing of it was revealed");
            if let StorageError::LeaseLost { .. } = error {
                self.moved = true;
            }
            return Err(error);
        }
        self.keep(next, Some(written));
        self.post(&step).await;
        Ok(step)
    }

    /// `next` is the session now; `written` is what its step committed.
    fn keep(&mut self, next: PlannerSession, written: Option<Written>) {
        if let Some(written) = written {
            self.shared
                .feeds
                .push(next.id(), written.write.cursor, &written.write.events);
            self.feed = written.feed;
        }
        self.session = next;
        self.shown.send_replace(Some(self.session.shown()));
        self.shared
            .hub
            .watchers()
            .ring(self.session.document(), Bell::Planner);
    }

    /// Appends the step's Chat lines. What they announce is committed; a
    /// line that cannot be written is logged, never retried as something
    /// else.
    async fn post(&self, step: &Step) {
        for line in &step.chat {
            let author = match line.kind {
                ChatKind::Planner => margin_planner::wording::PLANNER_AUTHOR,
                _ => margin_planner::wording::SYSTEM_AUTHOR,
            };
            if let Err(error) = self
                .shared
                .hub
                .append_chat(self.session.document(), author, line.kind, &line.text)
                .await
            {
                warn!(%error, "chat line not written");
            }
        }
    }
}
