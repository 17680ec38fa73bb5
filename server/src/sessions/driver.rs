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

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use margin_planner::{
    CallId, Effect, LinkLoss, Millis, PlannerSession, Record, ReleaseReason, ReleaseTrigger,
    RequestId, Step, ToolOutcome,
};
use margin_protocol::chat::ChatKind;
use margin_protocol::decisions::ToolRefusal;
use margin_protocol::link::ServerMessage;
use margin_protocol::sessions::SessionSnapshot;
use margin_protocol::tools::ToolCall;
use margin_protocol::RefusalCode;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep_until, Instant};
use tracing::{info, warn, Instrument};

use super::commit::{write_of, Written};
use super::input::{Input, Resumed};
use super::result_frame::{encoded, encoded_size, is_large, within_frame_limit, Framed};
use super::Shared;
use crate::cluster::Lease;
use crate::link::{Link, LinkEnd};
use crate::metrics::COUNTERS;
use crate::storage::{Account, StorageError};
use crate::sync::cards::CardChange;
use crate::sync::command::{RecordResult, ResultWrite, ToRecord};
use crate::tools::{Ran, ToolError, Tools};
use crate::watchers::Bell;

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
    shown: watch::Sender<Option<Arc<PlannerSession>>>,
    /// No timeout before this (a commit failed).
    pause: Option<Instant>,
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
        shown: watch::Sender<Option<Arc<PlannerSession>>>,
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
                Ok(step) => self.carry_out(step.effects).await,
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

    /// When to look at the clock next: the session's own timeout, or a
    /// check on its viewers while it is idle and viewed.
    fn due(&self) -> Option<Instant> {
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
        let viewers = self.shared.hub.viewers(self.session.document());
        self.session.handle_viewers(viewers, now);
        if self
            .apply(|session| session.handle_timeout(now))
            .await
            .is_err()
        {
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
            // Only a session still away: one a later `resume` carried on
            // stays.
            Input::NotResumed if self.session.is_away() && self.attaching.is_none() => {
                let _ = self.apply(|session| session.handle_not_resumed(now)).await;
            }
            Input::NotResumed => {}
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
                if trigger != ReleaseTrigger::Stop {
                    self.shared
                        .released_by_server(self.session.id(), self.link.as_ref().map(|l| l.id));
                }
                let _ = self
                    .apply(|session| session.handle_release(trigger, now))
                    .await;
                let _ = done.send(());
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

    /// Tells whoever waits on an input whose step was not committed: a
    /// member's request fails; the machine hears that nothing changed and
    /// the same message may succeed later (SPEC L6). An answer or discard
    /// not recorded is still on its card, and a restart takes it from
    /// there; an acknowledgement not recorded is asked for again.
    fn not_committed(&mut self, answer: Answer, error: &StorageError) {
        let failed = || StorageError::Durability(error.to_string());
        match answer {
            Answer::Commit(done) => {
                let _ = done.send(Err(failed()));
            }
            Answer::Unit(done) => {
                let _ = done.send(());
            }
            Answer::Call { turn, call } => {
                let message = ServerMessage::ToolResult {
                    session: self.session.id().to_owned(),
                    turn,
                    call_id: call,
                    output: None,
                    error: Some(refusal_of(
                        ToolError::Internal(format!("its start was not recorded: {error}")),
                        "tool-call",
                    )),
                };
                self.send(&message);
            }
            Answer::Machine => {
                let message = ServerMessage::Refusal {
                    code: RefusalCode::Internal,
                    message: "the server could not record this and changed nothing; send it again"
                        .into(),
                    call_id: None,
                };
                self.send(&message);
            }
            Answer::Nobody => {}
        }
    }

    /// The first half of `resume` (SPEC L3): the session moves to `link`,
    /// its step is committed, and what it sends waits until `resumed` is
    /// out.
    async fn resume(
        &mut self,
        link: Link,
        held: margin_planner::Held,
        now: Millis,
    ) -> Option<Resumed> {
        if self.session.released().is_some() {
            return None;
        }
        let superseded = self
            .link
            .take()
            .filter(|old| old.id != link.id && self.shared.links.is_open(old.id));
        let machine = link.machine.clone();
        self.attaching = Some((link, Vec::new()));
        let mut resumed = None;
        let step = self
            .apply(|session| {
                let moved = session.handle_moved(&machine.id, &machine.name, now);
                let (carried, step) = session.handle_resume(held, now);
                resumed = Some(carried);
                moved.and(step)
            })
            .await;
        if step.is_err() {
            // Not committed: the machine is told nothing of it, and finds
            // the session again with its next `resume`.
            self.attaching = None;
            return None;
        }
        info!(link = ?self.attaching.as_ref().map(|(l, _)| l.id), "Planner session resumed");
        resumed.map(|session| Resumed {
            session,
            superseded,
        })
    }

    /// `resumed` is out on `link`: what the resume decided goes now.
    fn attach(&mut self, link: u64) {
        match self.attaching.take() {
            Some((attached, frames)) if attached.id == link => {
                for frame in frames {
                    attached.send_frame(frame);
                }
                self.link = Some(attached);
            }
            other => self.attaching = other,
        }
    }

    async fn link_lost(&mut self, link: u64, end: LinkEnd, now: Millis) {
        let current = self.link.as_ref().filter(|l| l.id == link).cloned();
        let current = current.or_else(|| {
            self.attaching
                .as_ref()
                .filter(|(l, _)| l.id == link)
                .map(|(l, _)| l.clone())
        });
        let Some(lost) = current else {
            // A link the session had already left.
            return;
        };
        self.link = None;
        self.attaching = None;
        let loss = match end {
            // Nothing is announced (SPEC L9); a takeover moved the work.
            LinkEnd::Shutdown | LinkEnd::Superseded => return,
            LinkEnd::Dropped if lost.resumable => LinkLoss::Dropped,
            LinkEnd::Detached if lost.resumable => LinkLoss::Detached,
            _ => LinkLoss::Ended,
        };
        let _ = self
            .apply(|session| session.handle_link_lost(loss, now))
            .await;
        if self.session.released().is_none() {
            info!(?loss, "Planner away; session kept");
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
        self.shown
            .send_replace(Some(Arc::new(self.session.clone())));
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

    /// Carries out effects in order; a tool call's own effects go first.
    async fn carry_out(&mut self, effects: Vec<Effect>) {
        let mut queue: VecDeque<Effect> = effects.into();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Send(message) if is_large(&message) => {
                    // Encoding megabytes of outline takes milliseconds of
                    // CPU: off the async workers, which carry every other
                    // session's calls and the links' frames.
                    let frame = tokio::task::spawn_blocking(move || {
                        let framed =
                            encoded(&message).map(|frame| within_frame_limit(&message, frame));
                        (framed, message)
                    });
                    let Ok((framed, message)) = frame.await else {
                        continue;
                    };
                    match framed {
                        Ok(Framed::Fits(frame)) => self.send_frame(frame),
                        Ok(Framed::TooLarge(refused, bytes)) => {
                            warn!(bytes, "a tool result over the frame limit was not sent");
                            self.send(&refused);
                        }
                        Err(error) => warn!(%error, "a tool result could not be encoded"),
                    }
                    // Freeing a large outline's strings takes as long as
                    // encoding them: after the frame is on its way, and off
                    // the async workers.
                    tokio::task::spawn_blocking(move || drop(message));
                }
                Effect::Send(message) => self.send(&message),
                Effect::RunTool { call, tool } => {
                    let more = self.run_tool(call, tool).await;
                    for effect in more.into_iter().rev() {
                        queue.push_front(effect);
                    }
                }
                Effect::Redeliver { call, seq, .. } => self.redeliver(call, seq).await,
                Effect::Withdraw(request) => self.withdraw(&request).await,
                Effect::Released(reason) => self.released(reason),
            }
        }
    }

    /// Sends to the machine: now, after `resumed` while a resume is under
    /// way, or not at all while it is away (the session keeps what it owes).
    fn send(&mut self, message: &ServerMessage) {
        if let Ok(frame) = serde_json::to_string(message) {
            self.send_frame(frame);
        }
    }

    fn send_frame(&mut self, frame: String) {
        if let Some((_, waiting)) = self.attaching.as_mut() {
            waiting.push(frame);
        } else if let Some(link) = &self.link {
            link.send_frame(frame);
        }
    }

    /// Runs a document tool call (its start is committed), records its
    /// result — with the call's own writes when it wrote — and returns the
    /// effects of that record.
    async fn run_tool(&mut self, call: CallId, tool: ToolCall) -> Vec<Effect> {
        let now = self.shared.now();
        let name = tool.name();
        let (record, mut to_record) = mpsc::channel(1);
        let tools = Tools::new(self.shared.hub.clone());
        // Inside the session's span: the call's log lines name the session,
        // its document, the turn and the call.
        let span = tracing::info_span!(
            "tool_call",
            tool = name.as_str(),
            call = %call.0,
            turn = self.session.turn().map(|t| t.0.as_str()).unwrap_or_default(),
        );
        let (Ran { result, answered }, recorded) = {
            let run = tools
                .run(
                    &self.account,
                    self.session.document(),
                    tool,
                    RecordResult(record),
                )
                .instrument(span);
            tokio::pin!(run);
            // A call that writes asks, before its writes commit, for the
            // write recording its output; the one answered last rides with
            // them.
            let mut recorded = None;
            loop {
                tokio::select! {
                    ran = &mut run => break (ran, recorded),
                    Some(asked) = to_record.recv() => {
                        recorded = self.record_with_writes(&call, asked, now);
                    }
                }
            }
        };
        if let (Ok(_), Some((next, step, written, mut committed))) = (&result, recorded) {
            if committed.try_recv().is_ok() {
                // Recorded with the call's writes, in their transaction.
                self.keep(next, Some(written));
                self.post(&step).await;
                return step.effects;
            }
        }
        let bytes = match &result {
            Ok(output) if !name.writes() => encoded_size(output),
            _ => 0,
        };
        let outcome = ToolOutcome {
            result: result.map_err(|error| refusal_of(error, name.as_str())),
            answered: answered
                .into_iter()
                .map(|(card, answer, by)| (RequestId(card), answer, by))
                .collect(),
            bytes,
        };
        let mut next = self.session.clone();
        let step = next.handle_tool_finished(call, outcome, now);
        match self.commit(next, step).await {
            Ok(step) => step.effects,
            // The result is not recorded: the machine is not told it, and
            // its `resume` after the restart this calls for gets
            // `interrupted` (SPEC W1).
            Err(_) => Vec::new(),
        }
    }

    /// Steps the session with a writing call's `output` and hands the
    /// write recording it to the document task, to commit with the call's
    /// writes; the session, step and write, to keep if they committed, and
    /// where the task says they did.
    fn record_with_writes(
        &self,
        call: &CallId,
        asked: ToRecord,
        now: Millis,
    ) -> Option<(PlannerSession, Step, Written, oneshot::Receiver<()>)> {
        let ToRecord { output, write } = asked;
        let mut next = self.session.clone();
        let outcome = ToolOutcome {
            result: Ok(output),
            answered: Vec::new(),
            // A writing tool's result is always kept.
            bytes: 0,
        };
        let step = next.handle_tool_finished(call.clone(), outcome, now);
        match write_of(&next, &step, &self.feed, self.shared.keeping) {
            Ok(written) => {
                let (committed, heard) = oneshot::channel();
                let result = ResultWrite {
                    write: written.write.clone(),
                    committed,
                };
                let sent = write.send(result);
                sent.is_ok().then_some((next, step, written, heard))
            }
            Err(error) => {
                // Recorded after the commit instead.
                warn!(%error, call = %call, "a call's result could not ride with its writes");
                None
            }
        }
    }

    /// Sends again the result of `call` journaled in record `seq`.
    async fn redeliver(&mut self, call: CallId, seq: u64) {
        let stored = self
            .shared
            .hub
            .store()
            .journal_record(self.session.id(), seq)
            .await;
        let result = match stored {
            Ok(Some(json)) => match serde_json::from_str::<Record>(&json) {
                Ok(Record {
                    entry: margin_planner::Entry::CallFinished { result, .. },
                    ..
                }) => Some(result),
                _ => None,
            },
            _ => None,
        };
        let message = match result {
            Some(result) => self.session.stored_result(&call, result),
            None => {
                warn!(%call, seq, "a call's stored result could not be read");
                ServerMessage::Refusal {
                    code: RefusalCode::Internal,
                    message: format!(
                        "the result of call {:?} could not be read; verify state before retrying",
                        call.0
                    ),
                    call_id: Some(call.0),
                }
            }
        };
        self.send(&message);
    }

    async fn withdraw(&self, request: &RequestId) {
        // A card that no longer holds its question is left as it is.
        let withdrawn = self
            .shared
            .hub
            .change_card(self.session.document(), &request.0, CardChange::Withdraw)
            .await;
        match withdrawn {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => warn!(%error, card = %request, "could not withdraw a question"),
            Err(error) => warn!(%error, card = %request, "could not withdraw a question"),
        }
    }

    fn released(&mut self, reason: ReleaseReason) {
        info!(?reason, "Planner session released");
    }
}

/// Most inputs stepped into one commit.
const BATCH: usize = 256;

/// What an input came to.
enum Planned {
    /// Its step, and who to tell once it is committed.
    Step(Step, Answer),
    /// It must be handled on its own.
    Alone(Input),
}

/// Who waits on an input's commit.
enum Answer {
    /// A caller that hears whether it committed.
    Commit(super::input::Done<Result<(), StorageError>>),
    /// A caller that hears only that it was done.
    Unit(super::input::Done<()>),
    /// The machine, for this call.
    Call { turn: String, call: String },
    /// The machine, for what it sent.
    Machine,
    /// Nobody.
    Nobody,
}

impl Answer {
    fn committed(self) {
        match self {
            Answer::Commit(done) => {
                let _ = done.send(Ok(()));
            }
            Answer::Unit(done) => {
                let _ = done.send(());
            }
            Answer::Call { .. } | Answer::Machine | Answer::Nobody => {}
        }
    }
}

/// Steps `input` on `next`, when it only changes the session.
fn plan(next: &mut PlannerSession, input: Input, now: Millis) -> Planned {
    match input {
        Input::Message { done, .. } if next.released().is_some() => {
            // A released session takes no more messages: `done` dropped
            // unanswered tells the caller to start a new session (SPEC T1).
            drop(done);
            Planned::Step(Step::default(), Answer::Nobody)
        }
        Input::Message { message, done } => {
            Planned::Step(next.handle_message(message, now), Answer::Commit(done))
        }
        Input::ToolCall {
            turn,
            call,
            name,
            arguments,
        } => {
            let answer = Answer::Call {
                turn: turn.clone(),
                call: call.0.clone(),
            };
            Planned::Step(
                next.handle_tool_call(&turn, call, &name, arguments, now),
                answer,
            )
        }
        Input::Reply { turn, text } => {
            Planned::Step(next.handle_reply(&turn, text, now), Answer::Machine)
        }
        Input::Run {
            run,
            name,
            status,
            attempt,
        } => Planned::Step(
            next.handle_run(run, name, status, attempt, now),
            Answer::Machine,
        ),
        Input::Stopped => Planned::Step(next.handle_stopped(now), Answer::Machine),
        Input::AnswerReceived { request } => {
            Planned::Step(next.handle_answer_received(request, now), Answer::Nobody)
        }
        Input::Answered {
            request,
            answer,
            by,
            done,
        } => Planned::Step(
            next.handle_answered(request, answer, by, now),
            Answer::Unit(done),
        ),
        Input::Discarded { card, done } => {
            Planned::Step(next.handle_discarded(card, now), Answer::Unit(done))
        }
        Input::StopRequested { done } => {
            Planned::Step(next.handle_stop_requested(now), Answer::Commit(done))
        }
        alone => Planned::Alone(alone),
    }
}

/// A tool's failure as the refusal its call returns.
fn refusal_of(error: ToolError, tool: &str) -> ToolRefusal {
    match error {
        ToolError::Refused(refusal) => refusal,
        ToolError::Internal(detail) => {
            warn!(%detail, tool, "tool call failed");
            // The one refusal that is not a decision (SPEC L6).
            ToolRefusal {
                code: RefusalCode::Internal,
                message: "the server failed and could not decide; nothing was acknowledged, so the same call may succeed later".into(),
                read_again: false,
                retry: true,
            }
        }
    }
}
