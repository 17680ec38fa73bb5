//! The one task that writes session logs (SPEC E2, U5). It takes what is
//! queued in batches, commits each session's events with its snapshot in
//! one transaction, then pushes them to the session's feed: nothing is
//! shown before it is committed, and a failed commit shows nothing.

use std::collections::HashMap;
use std::sync::Arc;

use margin_protocol::decisions::ToolRefusal;
use margin_protocol::sessions::{SessionEvent, SessionSnapshot, SessionState};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info_span, Instrument};

use super::feed::Entry;
use super::plan::{judge, Judged};
use super::{Command, Feeds, Owner, PlanDecision};
use crate::storage::{SessionCommit, SessionOwner, StorageError, Store, StoredEvent};

/// Most commands taken from the queue per batch.
const BATCH: usize = 512;

pub(super) struct Writer {
    store: Store,
    feeds: Feeds,
    retained: u64,
    /// Snapshots of sessions written since start, as committed.
    live: HashMap<String, SessionSnapshot>,
}

/// Runs until `shutdown`, then commits what is still queued.
pub(super) async fn run(
    mut writer: Writer,
    mut queue: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            command = queue.recv() => command,
            () = shutdown.cancelled() => None,
        };
        let Some(first) = first else { break };
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match queue.try_recv() {
                Ok(command) => batch.push(command),
                Err(_) => break,
            }
        }
        writer.handle(batch).await;
    }
    let mut rest = Vec::new();
    while let Ok(command) = queue.try_recv() {
        rest.push(command);
    }
    writer.handle(rest).await;
}

impl Writer {
    pub(super) fn new(store: Store, feeds: Feeds, retained: u64) -> Self {
        Writer {
            store,
            feeds,
            retained: retained.max(1),
            live: HashMap::new(),
        }
    }

    /// Carries out `batch` in order per session: events queued for one
    /// session are committed together, and always before a plan update of
    /// that session that was queued after them.
    async fn handle(&mut self, batch: Vec<Command>) {
        let mut pending: Vec<(String, Option<Owner>, Vec<SessionEvent>)> = Vec::new();
        for command in batch {
            match command {
                Command::Events {
                    session,
                    owner,
                    events,
                } => match pending.iter_mut().find(|(s, _, _)| *s == session) {
                    Some((_, _, queued)) => queued.extend(events),
                    None => pending.push((session, owner, events)),
                },
                Command::UpdatePlan {
                    session,
                    turn,
                    call_id,
                    input,
                    decided,
                } => {
                    if let Some(at) = pending.iter().position(|(s, _, _)| *s == session) {
                        let (session, owner, events) = pending.remove(at);
                        self.commit_logged(&session, owner, events).await;
                    }
                    let span = info_span!("update_plan", %session, %turn, %call_id);
                    let decision = self
                        .update_plan(&session, &turn, &call_id, input)
                        .instrument(span)
                        .await;
                    let _ = decided.send(decision);
                }
                Command::Flush(done) => {
                    for (session, owner, events) in pending.drain(..) {
                        self.commit_logged(&session, owner, events).await;
                    }
                    let _ = done.send(());
                }
            }
        }
        for (session, owner, events) in pending {
            self.commit_logged(&session, owner, events).await;
        }
    }

    async fn update_plan(
        &mut self,
        session: &str,
        turn: &str,
        call_id: &str,
        input: margin_protocol::sessions::UpdatePlanInput,
    ) -> Result<PlanDecision, StorageError> {
        let Some(snapshot) = self.take(session).await? else {
            // Its first commit failed: there is no log to keep a plan in.
            return Ok(PlanDecision::Refused(ToolRefusal {
                code: margin_protocol::RefusalCode::Internal,
                message: "this session's log could not be written when it started; its plan cannot be kept".into(),
                read_again: false,
                retry: false,
            }));
        };
        match judge(&snapshot, turn, call_id, input) {
            Judged::Late(refusal) => {
                self.keep(session, snapshot);
                Ok(PlanDecision::Refused(refusal))
            }
            Judged::Accepted { event, output } => {
                self.commit(session, None, snapshot, vec![event]).await?;
                Ok(PlanDecision::Updated(output))
            }
            Judged::Rejected { event, refusal } => {
                self.commit(session, None, snapshot, vec![event]).await?;
                Ok(PlanDecision::Refused(refusal))
            }
        }
    }

    async fn commit_logged(
        &mut self,
        session: &str,
        owner: Option<Owner>,
        events: Vec<SessionEvent>,
    ) {
        let count = events.len();
        if let Err(error) = self.commit_events(session, owner, events).await {
            // The session's state already changed; only its feed missed
            // these. Readers carry on from the stored log.
            error!(%session, %error, count, "session events not written");
        }
    }

    /// Takes `session`'s committed snapshot out of memory, or reads it
    /// from storage; [`Writer::keep`] puts it back once it is committed.
    async fn take(&mut self, session: &str) -> Result<Option<SessionSnapshot>, StorageError> {
        if let Some(snapshot) = self.live.remove(session) {
            return Ok(Some(snapshot));
        }
        let Some(stored) = self.store.session(session).await? else {
            return Ok(None);
        };
        let snapshot = serde_json::from_str(&stored.snapshot)
            .map_err(|e| StorageError::Corrupt(format!("session snapshot: {e}")))?;
        Ok(Some(snapshot))
    }

    /// Keeps a committed snapshot in memory while its session lives.
    fn keep(&mut self, session: &str, snapshot: SessionSnapshot) {
        if snapshot.state != SessionState::Ended {
            self.live.insert(session.to_owned(), snapshot);
        }
    }

    /// Commits `events` of `session` (opening it when `owner` is given).
    async fn commit_events(
        &mut self,
        session: &str,
        owner: Option<Owner>,
        events: Vec<SessionEvent>,
    ) -> Result<(), StorageError> {
        let snapshot = match (self.take(session).await?, &owner) {
            (Some(snapshot), _) => snapshot,
            (None, Some(_)) => SessionSnapshot::empty(session),
            (None, None) => return Err(StorageError::NotFound("session")),
        };
        if snapshot.state == SessionState::Ended {
            debug!(%session, "events after the session ended are not written");
            return Ok(());
        }
        self.commit(session, owner, snapshot, events).await
    }

    /// Folds `events` into `snapshot` and commits both; then, and only
    /// then, readers see them. On failure the snapshot is dropped: storage
    /// is read again next time.
    async fn commit(
        &mut self,
        session: &str,
        owner: Option<Owner>,
        mut snapshot: SessionSnapshot,
        events: Vec<SessionEvent>,
    ) -> Result<(), StorageError> {
        let base = snapshot.cursor;
        let mut stored = Vec::with_capacity(events.len());
        for (seq, event) in (base + 1..).zip(&events) {
            snapshot.apply(seq, event);
            stored.push(StoredEvent {
                seq,
                kind: event.kind().to_owned(),
                body: encode(event)?,
            });
        }
        let owner = owner.as_ref().filter(|_| base == 0).map(|o| SessionOwner {
            document: &o.document,
            account: &o.account,
            machine: &o.machine,
        });
        let state = match snapshot.state {
            SessionState::Active => "active",
            SessionState::Disconnected => "disconnected",
            SessionState::Ended => "ended",
        };
        let commit = SessionCommit {
            base,
            events: &stored,
            snapshot: &encode(&snapshot)?,
            state,
        };
        self.store
            .commit_session_events(session, owner, commit)
            .await?;
        let entries = stored.iter().map(|e| Arc::new(Entry::new(e))).collect();
        self.feeds.get_or_new(session, base).push(entries);
        let cursor = snapshot.cursor;
        if snapshot.state == SessionState::Ended {
            self.feeds.lock().remove(session);
        }
        self.keep(session, snapshot);
        self.prune(session, base, cursor).await;
        Ok(())
    }

    /// Keeps `retained` events behind the snapshot, pruning in steps of a
    /// tenth of that so most commits delete nothing.
    async fn prune(&self, session: &str, base: u64, cursor: u64) {
        let step = (self.retained / 10).max(1);
        if cursor <= self.retained || base / step == cursor / step {
            return;
        }
        if let Err(error) = self
            .store
            .prune_session_events(session, cursor - self.retained)
            .await
        {
            error!(%session, %error, "session events not pruned");
        }
    }
}

fn encode<T: serde::Serialize>(value: &T) -> Result<String, StorageError> {
    serde_json::to_string(value).map_err(|e| StorageError::Corrupt(format!("session event: {e}")))
}
