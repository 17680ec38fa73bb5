//! The task that owns one loaded document (SPEC S2, S3).
//!
//! Every frame for the document passes through this task, in order. It works
//! in batches: it takes whatever frames are waiting, applies them to the
//! in-memory `yrs` document, commits the resulting changes to storage in one
//! transaction, and only then sends anything — so nothing is acknowledged or
//! broadcast before it is durable. A storage failure closes every connection
//! and unloads the document; clients reconnect, the document is rebuilt from
//! what was committed, and their sync step 2 restores what they still hold.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use margin_decisions::{wire, DecisionCard, LiveOutline, Outline};
use margin_protocol::decisions::EditPlanOutput;
use margin_protocol::sync::close;
use margin_protocol::tools::ToolOutput;
use margin_protocol::Role;
use margin_sync_core::{Access, Effect, LiveDocument, Owner, Written};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::cards::{mirror_entry, CardSet};
use super::command::{
    ChangeReply, Command, DecideRefused, DecideReply, EditRefused, EditReply, EditRequest,
    JoinRefused, RecordResult, ToRecord,
};
use super::compaction::{Compaction, Compactor};
use super::conn::{access_close, Conn, ConnId, Refused};
use super::decide::{self, Answered, Captured, Decided};
use super::hub::Hub;
use super::load::rebuilt;
use super::reads::Reads;
use super::writes;
use crate::cluster::{Lease, Ownership, TakeRefused};
use crate::metrics::COUNTERS;
use crate::storage::{
    Alongside, ClientBinding, Epoch, SessionWrite, StorageError, Store, StoredCard,
};
use margin_sync_core::messages;

/// The origin of the server's own changes; connections count from 1.
const SERVER: ConnId = 0;

/// Most commands handled in one batch (one storage transaction).
const MAX_BATCH: usize = 256;

/// How long a document nobody has open stays loaded after its last
/// command. A Planner's turn calls its tools one after another on a
/// document nobody may be viewing; unloading after each call rebuilt the
/// document from storage and took a new owner epoch for the next one (and
/// fenced the last one's final compaction).
const LINGER: Duration = Duration::from_secs(30);

struct Member {
    conn: Conn,
    /// The owner its updates write as: its account.
    owner: Owner,
}

enum Target {
    One(ConnId),
    AllBut(ConnId),
}

/// What one batch produced, held back until its changes are committed.
#[derive(Default)]
struct Effects {
    /// Each change with the connection it came from.
    deltas: Vec<(ConnId, Vec<u8>)>,
    sends: Vec<(Target, Bytes)>,
    outlines: Vec<oneshot::Sender<(i64, Arc<Outline>)>>,
    /// Edit replies: how many of the batch's changes precede the reply's
    /// revision, and the outline at it.
    edits: Vec<(EditReply, usize, Arc<Outline>)>,
    /// New cards, stored with the batch.
    cards: Vec<DecisionCard>,
    /// Decision batches' replies.
    decisions: Vec<Judgement>,
    /// Cards changed, at their new versions, stored with the batch.
    changed: Vec<StoredCard>,
    /// Their replies.
    changes: Vec<(ChangeReply, StoredCard)>,
    /// Session calls whose results are recorded with the batch: how many
    /// of its changes precede each, and what it made.
    recorded: Vec<(RecordResult, usize, Made)>,
    /// Client ids the batch's changes are the first to write, and their
    /// owners (SPEC A3a).
    clients: Vec<ClientBinding>,
    /// Who made the batch's last edit (a person's change, or an
    /// `edit_plan`), stored as the document's `edited_by`; the server's
    /// mirror of cards leaves it be.
    edited_by: Option<Arc<str>>,
}

/// A batch of cards judged, answered once the batch commits.
struct Judgement {
    reply: DecideReply,
    /// How many of the batch's changes precede the reply's revision.
    before: usize,
    /// The outline at that revision.
    outline: Arc<Outline>,
    captured: Arc<Captured>,
    answered: Vec<Answered>,
}

/// What a session's call that writes made, to make its output from once
/// the revision is known.
enum Made {
    /// An `edit_plan`: the outline at the revision.
    Edit(Arc<Outline>),
    /// A batch of cards.
    Decided(Arc<Captured>),
}

impl Made {
    fn output(&self, revision: i64) -> ToolOutput {
        match self {
            Made::Edit(outline) => ToolOutput::EditPlan(EditPlanOutput {
                revision,
                outline: wire::blocks(outline),
            }),
            Made::Decided(captured) => ToolOutput::Decisions(captured.at(revision)),
        }
    }
}

/// Asks each session call's driver for the write recording its output at
/// the revision the batch gives it (SPEC W1): the writes, and whom to tell
/// once they committed. A driver that is gone answers nothing: its call's
/// writes commit alone.
async fn record_results(
    recorded: &[(RecordResult, usize, Made)],
    base: i64,
) -> (Vec<SessionWrite>, Vec<oneshot::Sender<()>>) {
    let mut waiting = Vec::with_capacity(recorded.len());
    for (record, before, made) in recorded {
        let (write, written) = oneshot::channel();
        let output = made.output(base + *before as i64);
        if record.0.send(ToRecord { output, write }).await.is_ok() {
            waiting.push(written);
        }
    }
    let mut writes = Vec::with_capacity(waiting.len());
    let mut committed = Vec::with_capacity(waiting.len());
    for written in waiting {
        if let Ok(result) = written.await {
            writes.push(result.write);
            committed.push(result.committed);
        }
    }
    (writes, committed)
}

pub struct DocumentTask {
    id: String,
    store: Store,
    /// The document, its checks and its members' awareness (the sync
    /// core): every frame and every write of the server's goes through it.
    live: LiveDocument,
    /// The outline, kept current by re-reading only the blocks that change.
    outline: LiveOutline,
    revision: i64,
    /// This task's claim on the document: every write names it (W3).
    epoch: Epoch,
    members: HashMap<ConnId, Member>,
    compactor: Compactor,
    /// Archived: edits are refused from everyone (SPEC P3).
    archived: bool,
    /// The document's cards: changed only here, in the step that writes
    /// the change, so a batch is judged against what is stored.
    cards: CardSet,
    /// The Planner's remembered reads, which batches are judged with.
    reads: Reads,
    /// Deleted: unload at once and write nothing more.
    deleted: bool,
    /// Another owner claimed the document: this copy writes nothing more.
    fenced: bool,
    /// In a cluster: the lease this node holds on the document (SPEC C1).
    lease: Option<Lease>,
    /// yrs failed on something the sync core accepted: the in-memory
    /// document is suspect, so nothing of the batch is committed and the
    /// task unloads.
    poisoned: bool,
}

/// Loads document `id` and runs its task until nobody connected has used it
/// for [`LINGER`], storage fails, or the server shuts down.
pub async fn run(
    id: String,
    hub: Hub,
    mailbox: mpsc::Sender<Command>,
    mut rx: mpsc::Receiver<Command>,
    shutdown: CancellationToken,
) {
    let span = tracing::info_span!("document", document = %id);
    async move {
        // Boxed, as the task it loads is: loading needs 2.4 KB of room
        // once, and the task's state (712 bytes) sat beside a second slot
        // for it while loading could fail; inline, every loaded document's
        // task kept both (issue #16).
        let loading = Box::pin(DocumentTask::load(
            id.clone(),
            hub.store().clone(),
            hub.compaction(),
            hub.ownership(),
            hub.reads().clone(),
        ));
        let mut task = match loading.await {
            Ok(task) => task,
            Err(refused) => {
                if let JoinRefused::Elsewhere(_) = refused {
                    // Another node took it first: the caller goes there.
                    debug!(%refused, "document not loaded here");
                } else {
                    warn!(%refused, "document failed to load");
                }
                hub.forget(&id, &mailbox);
                refuse_all(&mut rx, refused).await;
                return;
            }
        };
        info!(revision = task.revision, "document loaded");
        task.serve(&mut rx, &shutdown).await;
        hub.forget(&id, &mailbox);
        drop(mailbox);
        refuse_all(&mut rx, JoinRefused::Unloading).await;
        task.finish().await;
        // Its share of the lease goes with it.
        task.lease = None;
        info!(revision = task.revision, "document unloaded");
    }
    .instrument(span)
    .await
}

/// Answers what is left in a closed mailbox.
async fn refuse_all(rx: &mut mpsc::Receiver<Command>, why: JoinRefused) {
    rx.close();
    while let Some(command) = rx.recv().await {
        match command {
            Command::Join { conn, reply } => {
                if reply.send(Err(why.clone())).is_err() {
                    conn.closer.close(close::GOING_AWAY, "document unloaded");
                }
            }
            // Dropping the reply makes the caller read storage instead.
            Command::Outline { .. }
            | Command::Edit { .. }
            | Command::Decide { .. }
            | Command::Change { .. }
            | Command::Archive { .. }
            | Command::Access { .. }
            | Command::Delete { .. }
            | Command::Frame { .. }
            | Command::Leave { .. } => {}
        }
    }
}

impl DocumentTask {
    async fn load(
        id: String,
        store: Store,
        compaction: Compaction,
        ownership: &Ownership,
        reads: Reads,
    ) -> Result<Box<Self>, JoinRefused> {
        let stored = |e: StorageError| match e {
            StorageError::NotFound("document") => JoinRefused::Deleted,
            other => JoinRefused::LoadFailed(other.to_string()),
        };
        // The claim first: the state loaded after it is what this owner's
        // writes build on, and any owner before it is refused from now on.
        let (epoch, lease) = match ownership {
            Ownership::Alone => (store.claim_document(&id).await.map_err(stored)?, None),
            Ownership::Cluster(cluster) => match cluster.take(&id).await {
                Ok(lease) => (lease.epoch, Some(lease)),
                Err(TakeRefused::Storage(e)) => return Err(stored(e)),
                Err(refused) => return Err(JoinRefused::Elsewhere(refused.to_string())),
            },
        };
        let state = store.load_state(&id, None).await.map_err(stored)?;
        let archived = store.is_archived(&id).await.map_err(stored)?;
        let cards = store.cards(&id).await.map_err(stored)?;
        let (mut revision, mut logged) = (state.revision, state.updates.len() as u64);
        let mut logged_bytes: u64 = state.updates.iter().map(|u| u.len() as u64).sum();
        let snapshot_bytes = state
            .snapshot
            .as_ref()
            .map_or(0, |(_, data)| data.len() as u64);
        let mirror = mirror_of(&cards);
        let (doc, live, repair) = rebuilt(state, move |mut doc, _| {
            let live = LiveOutline::new(doc.doc());
            // The rows are the record: make the map agree with them.
            let repair =
                doc.write(|doc| Ok::<_, std::convert::Infallible>(writes::project(doc, &mirror)));
            (doc, live, repair)
        })
        .await
        .map_err(|e| JoinRefused::LoadFailed(e.to_string()))?;
        let repair = match repair {
            Written::Changed(change) => Some(change),
            Written::Unchanged => None,
            Written::Refused(never) => match never {},
            Written::Broken(close) => return Err(JoinRefused::LoadFailed(close.reason)),
        };
        if let Some(repair) = repair {
            logged_bytes += repair.bytes.len() as u64;
            let clients = bindings(repair.bound);
            // Committed before anyone joins, so no editor ever sees a
            // mirror that disagrees with the rows.
            let alongside = Alongside {
                clients: &clients,
                ..Alongside::default()
            };
            revision = store
                .append_with(&id, epoch, revision, vec![repair.bytes], alongside)
                .await
                .map_err(stored)?;
            logged += 1;
            warn!(
                cards = cards.len(),
                "repaired the decisions mirror from the card rows"
            );
        }
        Ok(Box::new(DocumentTask {
            id,
            store,
            live: doc,
            outline: live,
            revision,
            epoch,
            members: HashMap::new(),
            compactor: Compactor::new(compaction, logged, logged_bytes, snapshot_bytes),
            archived,
            cards: CardSet::new(cards),
            reads,
            deleted: false,
            fenced: false,
            lease,
            poisoned: false,
        }))
    }

    async fn serve(&mut self, rx: &mut mpsc::Receiver<Command>, shutdown: &CancellationToken) {
        // Without a lease (a server alone) this never fires.
        let lapsed = self
            .lease
            .as_ref()
            .map(|lease| lease.holder.lapsed.clone())
            .unwrap_or_default();
        // Set while nobody is connected: when the last command came.
        let mut idle_since: Option<Instant> = None;
        loop {
            let deadline = self.compactor.deadline();
            let linger = idle_since.map(|since| since + LINGER);
            let first = tokio::select! {
                biased;
                _ = shutdown.cancelled() => {
                    self.close_all(close::GOING_AWAY, "server shutting down");
                    return;
                }
                _ = lapsed.cancelled() => {
                    // Another node may own the document now (SPEC C3):
                    // this copy writes nothing more, and its clients
                    // reconnect to whoever does.
                    warn!("this node lapsed; dropping the document");
                    self.close_all(close::GOING_AWAY, "the document moved; reconnect to resync");
                    self.fenced = true;
                    return;
                }
                _ = self.compactor.wait() => continue,
                _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    self.start_compaction();
                    continue;
                }
                _ = sleep_until(linger.unwrap_or_else(Instant::now)), if linger.is_some() => {
                    debug!("nobody used the document for a while; unloading it");
                    return;
                }
                command = rx.recv() => match command {
                    Some(command) => command,
                    None => return,
                },
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(command) => batch.push(command),
                    Err(_) => break,
                }
            }
            let mut effects = Effects::default();
            for command in batch {
                self.handle(command, &mut effects);
            }
            if self.poisoned {
                // Nothing of the batch was committed or answered; clients
                // resync from storage, where a new task loads it.
                self.close_all(close::INTERNAL, "the document failed; reconnect to resync");
                return;
            }
            if self.deleted {
                // Nothing of this batch is committed or answered: the
                // document is gone.
                return;
            }
            match self.publish(effects).await {
                Ok(()) => {}
                Err(cause @ StorageError::OwnerMoved { .. }) => {
                    // Nothing of the batch was committed or answered; this
                    // copy is stale, and its clients resync from the owner.
                    warn!(%cause, "another owner claimed the document; unloading");
                    self.close_all(close::GOING_AWAY, "the document moved; reconnect to resync");
                    self.fenced = true;
                    return;
                }
                Err(cause) => {
                    warn!(%cause, "storage failed; closing every connection");
                    self.close_all(close::INTERNAL, "storage failed; reconnect to resync");
                    return;
                }
            }
            idle_since = self.members.is_empty().then(Instant::now);
        }
    }

    fn handle(&mut self, command: Command, effects: &mut Effects) {
        match command {
            // A deleted document takes nobody in and no more changes; an
            // edit's or projection's reply is dropped, as an unloading
            // task's is.
            Command::Join { conn, reply } if self.deleted => {
                if reply.send(Err(JoinRefused::Deleted)).is_err() {
                    conn.closer
                        .close(close::DELETED, "the document was deleted");
                }
            }
            Command::Edit { .. }
            | Command::Decide { .. }
            | Command::Change { .. }
            | Command::Frame { .. }
                if self.deleted => {}
            Command::Join { conn, reply } => {
                let id = conn.id;
                for first in self.live.join(id) {
                    effects.sends.push((Target::One(id), Bytes::from(first)));
                }
                let closer = conn.closer.clone();
                let owner = Owner::Account(conn.account.clone());
                self.members.insert(id, Member { conn: *conn, owner });
                if reply.send(Ok(())).is_err() {
                    closer.close(close::GOING_AWAY, "connection gave up joining");
                    self.remove(id, effects);
                }
                debug!(conn = id, members = self.members.len(), "joined");
            }
            Command::Frame { conn, data } => self.frame(conn, &data, effects),
            Command::Leave { conn } => {
                self.remove(conn, effects);
                debug!(conn, members = self.members.len(), "left");
            }
            Command::Outline { reply } => effects.outlines.push(reply),
            Command::Archive { archived, reply } => {
                self.archived = archived;
                info!(archived, "archive state changed");
                let _ = reply.send(());
            }
            Command::Access {
                account,
                role,
                reply,
            } => {
                self.access_changed(&account, role, effects);
                let _ = reply.send(());
            }
            Command::Delete { reply } => {
                self.deleted = true;
                self.close_all(close::DELETED, "the document was deleted");
                info!("document deleted; closing its connections");
                let _ = reply.send(());
            }
            Command::Edit { reply, .. } if self.archived => {
                let _ = reply.send(Err(EditRefused::Archived));
            }
            Command::Edit { request, reply } => {
                let EditRequest {
                    revision,
                    edits,
                    by,
                    record,
                } = *request;
                // Changes earlier in this batch already moved the document.
                let current = self.revision + effects.deltas.len() as i64;
                if revision != current {
                    let _ = reply.send(Err(EditRefused::Stale { revision, current }));
                    return;
                }
                let before = self.outline.refresh();
                match self.live.write(|doc| writes::edit(doc, before, &edits)) {
                    Written::Broken(close) => self.broken(close),
                    Written::Refused(refused) => {
                        let _ = reply.send(Err(refused.into()));
                    }
                    written @ (Written::Changed(_) | Written::Unchanged) => {
                        if let Written::Changed(change) = written {
                            effects.server_change(change);
                            effects.edited_by = Some(by);
                        }
                        self.outline.refresh();
                        let outline = self.outline.snapshot();
                        let before = effects.deltas.len();
                        if let Some(record) = record {
                            effects
                                .recorded
                                .push((record, before, Made::Edit(outline.clone())));
                        }
                        effects.edits.push((reply, before, outline));
                    }
                }
            }
            Command::Decide { reply, .. } if self.archived => {
                let _ = reply.send(Err(DecideRefused::Archived));
            }
            Command::Decide {
                batch,
                record,
                reply,
            } => self.decide(*batch, record, reply, effects),
            Command::Change {
                card,
                change,
                reply,
            } => match self.cards.change(&card, *change) {
                Ok(Some(changed)) => {
                    let mirror = [mirror_entry(&changed.card)];
                    if !self.project(&mirror, effects) {
                        return;
                    }
                    effects.changed.push(changed.clone());
                    effects.changes.push((reply, changed));
                }
                other => {
                    let _ = reply.send(other);
                }
            },
        }
    }

    /// Judges a batch of cards against the document as this batch left
    /// it, and has what it creates — the cards, their mirror and the
    /// call's result — committed with the batch (SPEC D1–D10, W1).
    fn decide(
        &mut self,
        batch: decide::Batch,
        record: Option<RecordResult>,
        reply: DecideReply,
        effects: &mut Effects,
    ) {
        // Changes earlier in this batch already moved the document.
        let current = self.revision + effects.deltas.len() as i64;
        self.outline.refresh();
        let outline = self.outline.snapshot();
        let (cards, id) = (&self.cards, &self.id);
        let judged = self.reads.with(id, |reads| {
            decide::judge(current, &outline, reads, cards, &batch)
        });
        let judged = match judged {
            Ok(judged) => judged,
            Err(refused) => {
                let _ = reply.send(Err(refused.into()));
                return;
            }
        };
        // The mirror is in the decisions map, outside the blocks: the
        // outline at the revision it makes is the one judged against.
        let deltas = effects.deltas.len();
        if !self.project(&judged.mirror, effects) {
            return;
        }
        let changed = effects.deltas.len() > deltas;
        let before = effects.deltas.len();
        if let Some(record) = record.filter(|_| changed) {
            let made = Made::Decided(judged.captured.clone());
            effects.recorded.push((record, before, made));
        }
        for card in &judged.created {
            self.cards.insert(card.clone());
        }
        effects.cards.extend(judged.created);
        effects.decisions.push(Judgement {
            reply,
            before,
            outline,
            captured: judged.captured,
            answered: judged.answered,
        });
    }

    /// Handles one frame through the sync core: what it asks for goes
    /// into the batch's effects; a refusal closes the connection with its
    /// code and reason and changes nothing.
    fn frame(&mut self, conn: ConnId, data: &[u8], effects: &mut Effects) {
        let Some(member) = self.members.get(&conn) else {
            // Frames that raced a close; the connection is already gone.
            return;
        };
        let access = if self.archived {
            Access::ReadOnly("read-only: the document is archived")
        } else if !member.conn.role.can_edit() {
            Access::ReadOnly("read-only: viewers cannot edit this document")
        } else {
            Access::Edit
        };
        let account = member.conn.account.clone();
        let mut asked = Vec::new();
        let outcome = self
            .live
            .frame(conn, &member.owner, access, data, &mut asked);
        // What the frame's messages before a refusal did stands.
        for effect in asked {
            match effect {
                Effect::Reply(frame) => effects.sends.push((Target::One(conn), Bytes::from(frame))),
                Effect::Others(frame) => effects
                    .sends
                    .push((Target::AllBut(conn), Bytes::from(frame))),
                Effect::Change(from, change) => {
                    if change.reorders {
                        info!(conn = from, "an editor's change rearranges its own text so a later reader orders it otherwise, as Yjs' redo can");
                    }
                    effects.clients.extend(bindings(change.bound));
                    effects.deltas.push((from, change.bytes));
                    let by = self
                        .members
                        .get(&from)
                        .map_or(&account, |m| &m.conn.account);
                    effects.edited_by = Some(by.clone());
                }
                Effect::Close(other, close) => {
                    debug!(conn = other, code = close.code, reason = %close.reason, "closing connection");
                    if let Some(member) = self.members.get(&other) {
                        member.conn.closer.close(close.code, close.reason);
                    }
                    self.remove(other, effects);
                }
            }
        }
        if let Err(close) = outcome {
            if close.poisoned {
                warn!(conn, reason = %close.reason, "yrs failed on what the sync core accepted; unloading the document");
                self.poisoned = true;
            }
            debug!(conn, code = close.code, reason = %close.reason, "closing connection");
            if let Some(member) = self.members.get(&conn) {
                member.conn.closer.close(close.code, close.reason);
            }
            self.remove(conn, effects);
        }
    }

    /// Writes `mirror` into the decisions map through the sync core and
    /// queues the change; false when the document broke (then the task
    /// unloads and the caller's reply is dropped).
    fn project(&mut self, mirror: &[(String, String)], effects: &mut Effects) -> bool {
        match self
            .live
            .write(|doc| Ok::<_, std::convert::Infallible>(writes::project(doc, mirror)))
        {
            Written::Changed(change) => effects.server_change(change),
            Written::Unchanged => {}
            Written::Refused(never) => match never {},
            Written::Broken(close) => {
                self.broken(close);
                return false;
            }
        }
        true
    }

    /// The server's own change did not fit the document: a bug. Nothing
    /// of the batch is committed; everyone resyncs from storage.
    fn broken(&mut self, close: margin_sync_core::Close) {
        warn!(reason = %close.reason, "the server's own change broke the document; unloading it");
        self.poisoned = true;
    }

    /// Closes `account`'s connections whose role is no longer `role`
    /// (all of them once it is `None`): a removed member's for good, a
    /// changed one's so the client reconnects and joins with the new role.
    fn access_changed(&mut self, account: &str, role: Option<Role>, effects: &mut Effects) {
        let changed: Vec<ConnId> = self
            .members
            .values()
            .filter(|m| &*m.conn.account == account && Some(m.conn.role) != role)
            .map(|m| m.conn.id)
            .collect();
        if changed.is_empty() {
            return;
        }
        let (code, reason) = access_close(role);
        for &id in &changed {
            if let Some(member) = self.members.get(&id) {
                member.conn.closer.close(code, reason.clone());
            }
            self.remove(id, effects);
        }
        info!(
            account,
            closed = changed.len(),
            code,
            "access changed; closed the member's connections"
        );
    }

    fn remove(&mut self, conn: ConnId, effects: &mut Effects) {
        if self.members.remove(&conn).is_none() {
            return;
        }
        if let Some(frame) = self.live.leave(conn) {
            effects
                .sends
                .push((Target::AllBut(conn), Bytes::from(frame)));
        }
    }

    /// Commits the batch's changes, then sends what it produced.
    async fn publish(&mut self, effects: Effects) -> Result<(), StorageError> {
        let base = self.revision;
        let mut sends = Vec::new();
        if !effects.deltas.is_empty() || !effects.cards.is_empty() || !effects.changed.is_empty() {
            let changes: Vec<Vec<u8>> = effects.deltas.iter().map(|(_, d)| d.clone()).collect();
            let count = changes.len() as u64;
            let bytes = changes.iter().map(|change| change.len() as u64).sum();
            let (sessions, recorded) = Box::pin(record_results(&effects.recorded, base)).await;
            let alongside = Alongside {
                cards: &effects.cards,
                changed: &effects.changed,
                sessions: &sessions,
                edited_by: effects.edited_by.as_deref(),
                clients: &effects.clients,
            };
            let started = Instant::now();
            // Boxed: inline, the room a commit needs (1.7 KB) was kept in
            // every document's task for its whole life (issue #16).
            self.revision = Box::pin(self.store.append_with(
                &self.id,
                self.epoch,
                self.revision,
                changes,
                alongside,
            ))
            .await?;
            COUNTERS.document_commit.observe(started.elapsed());
            for committed in recorded {
                let _ = committed.send(());
            }
            COUNTERS
                .updates_committed
                .fetch_add(count, std::sync::atomic::Ordering::Relaxed);
            self.compactor.committed(count, bytes);
            sends = self.fan_out(&effects.deltas);
        }
        sends.extend(effects.sends);
        let mut slow = self.dispatch(sends);
        // Closing a slow client announces its departure, which may find
        // another slow client; each round removes at least one member.
        while !slow.is_empty() {
            let mut gone = Effects::default();
            for id in slow {
                warn!(conn = id, "client fell behind; closing it so it resyncs");
                if let Some(member) = self.members.get(&id) {
                    member
                        .conn
                        .closer
                        .close(close::TOO_SLOW, "client fell behind; reconnect to resync");
                }
                self.remove(id, &mut gone);
            }
            slow = self.dispatch(gone.sends);
        }
        for (reply, changes_before, outline) in effects.edits {
            let _ = reply.send(Ok((base + changes_before as i64, outline)));
        }
        for judged in effects.decisions {
            let decided = Decided {
                output: judged.captured.at(base + judged.before as i64),
                outline: judged.outline,
                answered: judged.answered,
            };
            let _ = judged.reply.send(Ok(decided));
        }
        for (reply, changed) in effects.changes {
            let _ = reply.send(Ok(Some(changed)));
        }
        if !effects.outlines.is_empty() {
            self.outline.refresh();
            let outline = self.outline.snapshot();
            for reply in effects.outlines {
                let _ = reply.send((self.revision, outline.clone()));
            }
        }
        Ok(())
    }

    /// One update frame per member for the whole batch: the batch's changes
    /// merged, less the member's own. A burst then costs each client one
    /// message per batch instead of one per change, which keeps clients
    /// that are merely busy from falling behind.
    fn fan_out(&self, deltas: &[(ConnId, Vec<u8>)]) -> Vec<(Target, Bytes)> {
        let merged = |skip: Option<ConnId>| -> Option<Bytes> {
            let parts: Vec<&[u8]> = deltas
                .iter()
                .filter(|(origin, _)| Some(*origin) != skip)
                .map(|(_, delta)| delta.as_slice())
                .collect();
            match parts.as_slice() {
                [] => None,
                [one] => Some(Bytes::from(messages::update(one.to_vec()))),
                many => match yrs::merge_updates_v1(many.iter().copied()) {
                    Ok(update) => Some(Bytes::from(messages::update(update))),
                    // Unmergeable (it should not happen): send them one by one.
                    Err(error) => {
                        warn!(%error, "could not merge a batch's changes; sending them one by one");
                        None
                    }
                },
            }
        };
        let mut origins: Vec<ConnId> = deltas.iter().map(|(origin, _)| *origin).collect();
        origins.sort_unstable();
        origins.dedup();
        let mut sends = Vec::new();
        let everyone = merged(None);
        for member in self.members.values() {
            let id = member.conn.id;
            let frame = if origins.contains(&id) {
                merged(Some(id))
            } else {
                everyone.clone()
            };
            match frame {
                Some(frame) => sends.push((Target::One(id), frame)),
                None => sends.extend(deltas.iter().filter(|(origin, _)| *origin != id).map(
                    |(_, delta)| {
                        (
                            Target::One(id),
                            Bytes::from(messages::update(delta.clone())),
                        )
                    },
                )),
            }
        }
        sends
    }

    /// Queues frames on their connections; returns those whose queue is full.
    fn dispatch(&self, sends: Vec<(Target, Bytes)>) -> Vec<ConnId> {
        let mut slow = Vec::new();
        for (target, frame) in sends {
            match target {
                Target::One(id) => {
                    if let Some(member) = self.members.get(&id) {
                        deliver(member, frame, &mut slow);
                    }
                }
                Target::AllBut(origin) => {
                    for member in self.members.values().filter(|m| m.conn.id != origin) {
                        deliver(member, frame.clone(), &mut slow);
                    }
                }
            }
        }
        slow.sort_unstable();
        slow.dedup();
        slow
    }

    fn close_all(&mut self, code: u16, reason: &str) {
        for member in self.members.values() {
            member.conn.closer.close(code, reason);
        }
        self.members.clear();
    }

    /// Has the compactor snapshot everything committed so far, in the
    /// background: editors wait on neither the encoding nor the write.
    fn start_compaction(&mut self) {
        self.compactor
            .start(&self.store, &self.id, self.epoch, self.revision);
    }

    /// Leaves storage compact on the way out (a deleted document has no
    /// storage left to compact, a fenced copy no right to).
    async fn finish(&mut self) {
        if self.deleted || self.fenced {
            return;
        }
        if self.compactor.in_flight() {
            self.compactor.wait().await;
        }
        if self.compactor.has_pending() {
            self.start_compaction();
            self.compactor.wait().await;
        }
    }
}

/// What the decisions map should hold for `cards` (SPEC D: SQL rows are
/// the record). A card's change commits with its mirror, but an editor's
/// client rewriting the map, or a row an older server changed alone,
/// leaves them apart until a load projects this again.
fn mirror_of(cards: &[StoredCard]) -> Vec<(String, String)> {
    cards
        .iter()
        .map(|stored| mirror_entry(&stored.card))
        .collect()
}

/// Storage's form of the core's bindings.
fn bindings(bound: Vec<(u64, Owner)>) -> Vec<ClientBinding> {
    bound
        .into_iter()
        .map(|(client, owner)| ClientBinding {
            client,
            account: match owner {
                Owner::Server => None,
                Owner::Account(account) => Some(account),
            },
        })
        .collect()
}

impl Effects {
    /// Queues one of the server's own changes, and the client id it may
    /// bind.
    fn server_change(&mut self, change: margin_sync_core::Change) {
        self.clients.extend(bindings(change.bound));
        self.deltas.push((SERVER, change.bytes));
    }
}

fn deliver(member: &Member, frame: Bytes, slow: &mut Vec<ConnId>) {
    match member.conn.outbox.try_push(frame) {
        Ok(()) => {}
        Err(Refused::Full) => slow.push(member.conn.id),
        // The writer is gone; its Leave is on the way.
        Err(Refused::Closed) => {}
    }
}

#[cfg(test)]
mod tests {
    use crate::future_size::ReturnSize;
    /// A loaded document's task is its future, alive while anyone uses the
    /// document: hundreds at once, mostly waiting on their mailbox. Its
    /// loading and its commits are boxed, so the room they need while they
    /// run is not kept beside the task for its whole life: 4,272 bytes
    /// when they were inline, 1,200 now (issue #16).
    #[test]
    fn a_document_tasks_future_keeps_no_room_for_loading_or_committing() {
        let size = super::run.return_size();
        assert!(size <= 1536, "a document task's future is {size} bytes");
    }
}
