//! The task that owns one loaded document (SPEC S2, S3).
//!
//! Every frame for the document passes through this task, in order. It works
//! in batches: it takes whatever frames are waiting, applies them to the
//! in-memory `yrs` document, commits the resulting changes to storage in one
//! transaction, and only then sends anything — so nothing is acknowledged or
//! broadcast before it is durable. A storage failure closes every connection
//! and unloads the document; clients reconnect, the document is rebuilt from
//! what was committed, and their sync step 2 restores what they still hold.

use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use margin_decisions::{DecisionCard, LiveOutline, Outline};
use margin_protocol::sync::{
    close, MAX_AWARENESS_BYTES, MAX_AWARENESS_CLIENTS, MAX_PENDING_BYTES, MAX_UPDATE_BYTES,
};
use margin_protocol::tools::ToolOutput;
use margin_protocol::Role;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};
use yrs::sync::{Awareness, Message, SyncMessage};
use yrs::{ClientID, ReadTxn, StateVector, Transact, Update};

use super::command::{
    ChangeReply, Command, DecideRefused, DecideReply, EditRefused, EditReply, EditRequest,
    JoinRefused, Rider,
};
use super::compaction::{Compaction, Compactor};
use super::conn::{access_close, Conn, ConnId, Refused};
use super::decide::{self, Answered, Captured, Decided};
use super::editor::{self, Applied};
use super::frame;
use super::hub::Hub;
use super::load::rebuilt;
use super::messages;
use super::reads::Reads;
use super::writes;
use crate::cards::{mirror_entry, CardSet};
use crate::cluster::{Lease, Ownership, TakeRefused};
use crate::metrics::COUNTERS;
use crate::storage::{Epoch, Riding, SessionWrite, StorageError, Store, StoredCard};
use crate::tools;

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
    /// Awareness client ids this connection has announced, removed when it
    /// leaves so its cursor disappears for everyone else.
    clients: HashSet<ClientID>,
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
    /// What rides with the batch: how many of its changes precede each.
    riders: Vec<(Rider, usize, Arc<Outline>)>,
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

pub struct DocumentTask {
    id: String,
    store: Store,
    awareness: Awareness,
    /// The outline, kept current by re-reading only the blocks that change.
    live: LiveOutline,
    revision: i64,
    /// This task's claim on the document: every write names it (W3).
    epoch: Epoch,
    /// Bytes of updates applied while the document held changes waiting
    /// for missing ones (bounded by [`MAX_PENDING_BYTES`]).
    pending_bytes: usize,
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
    /// An update panicked inside yrs: the in-memory document is suspect,
    /// so nothing of the batch is committed and the task unloads.
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
        let (doc, live, repair) = rebuilt(state, move |doc, _| {
            let live = LiveOutline::new(&doc);
            // The rows are the record: make the map agree with them.
            let repair = writes::project(&doc, &mirror);
            (doc, live, repair)
        })
        .await
        .map_err(|e| JoinRefused::LoadFailed(e.to_string()))?;
        if let Some(repair) = repair {
            logged_bytes += repair.len() as u64;
            // Committed before anyone joins, so no editor ever sees a
            // mirror that disagrees with the rows.
            revision = store
                .append_with(&id, epoch, revision, vec![repair], Riding::default())
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
            live,
            awareness: Awareness::new(doc),
            revision,
            epoch,
            pending_bytes: 0,
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
                effects
                    .sends
                    .push((Target::One(id), messages::step1(&self.awareness)));
                if let Some(states) = messages::awareness_all(&self.awareness) {
                    effects.sends.push((Target::One(id), states));
                }
                let closer = conn.closer.clone();
                self.members.insert(
                    id,
                    Member {
                        conn: *conn,
                        clients: HashSet::new(),
                    },
                );
                if reply.send(Ok(())).is_err() {
                    closer.close(close::GOING_AWAY, "connection gave up joining");
                    self.remove(id, effects);
                }
                debug!(conn = id, members = self.members.len(), "joined");
            }
            Command::Frame { conn, data } => {
                if let Err((code, reason)) = self.frame(conn, &data, effects) {
                    debug!(conn, code, %reason, "closing connection");
                    if let Some(member) = self.members.get(&conn) {
                        member.conn.closer.close(code, reason);
                    }
                    self.remove(conn, effects);
                }
            }
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
                    rider,
                } = *request;
                // Changes earlier in this batch already moved the document.
                let current = self.revision + effects.deltas.len() as i64;
                if revision != current {
                    let _ = reply.send(Err(EditRefused::Stale { revision, current }));
                    return;
                }
                let before = self.live.refresh();
                match writes::edit(self.awareness.doc(), before, &edits) {
                    Ok(change) => {
                        if let Some(change) = change {
                            effects.deltas.push((SERVER, change));
                            effects.edited_by = Some(by);
                        }
                        self.live.refresh();
                        let outline = self.live.snapshot();
                        let before = effects.deltas.len();
                        if let Some(rider) = rider {
                            effects.riders.push((rider, before, outline.clone()));
                        }
                        effects.edits.push((reply, before, outline));
                    }
                    Err(refused) => {
                        let _ = reply.send(Err(refused.into()));
                    }
                }
            }
            Command::Decide { reply, .. } if self.archived => {
                let _ = reply.send(Err(DecideRefused::Archived));
            }
            Command::Decide {
                batch,
                recorder,
                reply,
            } => self.decide(*batch, recorder, reply, effects),
            Command::Change {
                card,
                change,
                reply,
            } => match self.cards.change(&card, *change) {
                Ok(Some(changed)) => {
                    let mirror = [mirror_entry(&changed.card)];
                    if let Some(delta) = writes::project(self.awareness.doc(), &mirror) {
                        effects.deltas.push((SERVER, delta));
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
        recorder: Option<tools::Recorder>,
        reply: DecideReply,
        effects: &mut Effects,
    ) {
        // Changes earlier in this batch already moved the document.
        let current = self.revision + effects.deltas.len() as i64;
        self.live.refresh();
        let outline = self.live.snapshot();
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
        let wrote = writes::project(self.awareness.doc(), &judged.mirror);
        let changed = wrote.is_some();
        if let Some(change) = wrote {
            effects.deltas.push((SERVER, change));
        }
        let before = effects.deltas.len();
        if let Some(recorder) = recorder.filter(|_| changed) {
            let captured = judged.captured.clone();
            let rider = tools::rider(recorder, move |revision, _| {
                ToolOutput::Decisions(captured.at(revision))
            });
            effects.riders.push((rider, before, outline.clone()));
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

    /// Handles one frame; an error closes the connection with its code and
    /// reason and changes nothing.
    fn frame(
        &mut self,
        conn: ConnId,
        data: &[u8],
        effects: &mut Effects,
    ) -> Result<(), (u16, String)> {
        let Some(member) = self.members.get(&conn) else {
            // Frames that raced a close; the connection is already gone.
            return Ok(());
        };
        let can_edit = member.conn.role.can_edit() && !self.archived;
        let account = member.conn.account.clone();
        let messages = frame::messages(data).map_err(|e| (close::MALFORMED, e.to_string()))?;
        for message in messages {
            match message {
                Message::Sync(SyncMessage::SyncStep1(remote)) => {
                    // yrs has panicked encoding a diff of a document a
                    // hostile update reached; the copy is then suspect.
                    let awareness = &self.awareness;
                    match catch_unwind(AssertUnwindSafe(|| messages::step2(awareness, &remote))) {
                        Ok(step2) => effects.sends.push((Target::One(conn), step2)),
                        Err(_) => {
                            warn!("encoding a sync step 2 panicked inside yrs; unloading the document");
                            self.poisoned = true;
                            return Err((
                                close::INTERNAL,
                                "the document failed; reconnect to resync".into(),
                            ));
                        }
                    }
                }
                Message::Sync(SyncMessage::SyncStep2(update) | SyncMessage::Update(update)) => {
                    if update.len() > MAX_UPDATE_BYTES {
                        return Err((
                            close::TOO_BIG,
                            format!(
                                "update of {} bytes exceeds the {MAX_UPDATE_BYTES}-byte limit",
                                update.len()
                            ),
                        ));
                    }
                    let bytes = update.len();
                    let update = editor::decode(&update)?;
                    if can_edit {
                        let applied = self.apply(update, bytes)?;
                        // What did integrate is published even when the
                        // sender is closed for what did not.
                        if let Some(delta) = applied.change {
                            effects.deltas.push((conn, delta));
                            effects.edited_by = Some(account.clone());
                        }
                        if applied.overflowed {
                            return Err((
                                close::BAD_UPDATE,
                                format!("updates that wait for changes never sent passed {MAX_PENDING_BYTES} bytes; they were dropped"),
                            ));
                        }
                    } else if self.is_news(&update) {
                        let reason = if self.archived {
                            "read-only: the document is archived"
                        } else {
                            "read-only: viewers cannot edit this document"
                        };
                        return Err((close::READ_ONLY, reason.into()));
                    }
                }
                Message::Awareness(update) => {
                    let size: usize = update.clients.values().map(|e| e.json.len()).sum();
                    if size > MAX_AWARENESS_BYTES {
                        return Err((close::TOO_BIG, format!("awareness state of {size} bytes exceeds the {MAX_AWARENESS_BYTES}-byte limit")));
                    }
                    // Every y-websocket client parses each state it is
                    // relayed; one that is not JSON would break them all.
                    if let Some((client, _)) = update
                        .clients
                        .iter()
                        .find(|(_, e)| !editor::is_awareness_state(&e.json))
                    {
                        return Err((
                            close::MALFORMED,
                            format!(
                                "awareness state of client {client} is not a JSON object or null"
                            ),
                        ));
                    }
                    let mut update = update;
                    // A connection speaks only for the client ids it claimed
                    // first: it may not move or erase another's cursor.
                    update.clients.retain(|client, _| {
                        !self
                            .members
                            .iter()
                            .any(|(id, m)| *id != conn && m.clients.contains(client))
                    });
                    let clients: Vec<ClientID> = update.clients.keys().copied().collect();
                    if let Some(member) = self.members.get_mut(&conn) {
                        member.clients.extend(clients.iter().copied());
                        if member.clients.len() > MAX_AWARENESS_CLIENTS {
                            return Err((close::MALFORMED, format!("more than {MAX_AWARENESS_CLIENTS} awareness clients on one connection")));
                        }
                    }
                    if clients.is_empty() {
                        continue;
                    }
                    self.awareness
                        .apply_update(update)
                        .map_err(|e| (close::MALFORMED, format!("bad awareness update: {e}")))?;
                    if let Some(frame) = messages::awareness_of(&self.awareness, &clients) {
                        effects.sends.push((Target::AllBut(conn), frame));
                    }
                }
                Message::AwarenessQuery => {
                    if let Some(states) = messages::awareness_all(&self.awareness) {
                        effects.sends.push((Target::One(conn), states));
                    }
                }
                // `frame::messages` refuses these before they get here.
                Message::Auth(_) | Message::Custom(..) => {
                    return Err((close::MALFORMED, "unsupported message type".into()));
                }
            }
        }
        Ok(())
    }

    /// Applies an editor's update of `bytes` ([`editor::apply`]); a panic
    /// or a change that would not load again leaves this copy suspect.
    fn apply(&mut self, update: Update, bytes: usize) -> Result<Applied, (u16, String)> {
        editor::apply(self.awareness.doc(), update, bytes, &mut self.pending_bytes).map_err(
            |failed| {
                self.poisoned |= failed.poisoned;
                (failed.code, failed.reason)
            },
        )
    }

    /// Whether a viewer's update carries anything the document lacks. A
    /// viewer's sync step 2 normally carries nothing new and is ignored.
    fn is_news(&self, update: &Update) -> bool {
        let txn = self.awareness.doc().transact();
        let known: StateVector = txn.state_vector();
        let beyond = update
            .state_vector()
            .iter()
            .any(|(client, clock)| *clock > known.get(client));
        beyond
            || update.extends(&known)
            || !update
                .delete_set()
                .diff(&txn.snapshot().delete_set)
                .is_empty()
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
        let Some(member) = self.members.remove(&conn) else {
            return;
        };
        let clients: Vec<ClientID> = member.clients.into_iter().collect();
        for client in &clients {
            self.awareness.remove_state(*client);
        }
        if let Some(frame) = messages::awareness_of(&self.awareness, &clients) {
            effects.sends.push((Target::AllBut(conn), frame));
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
            let sessions: Vec<SessionWrite> = effects
                .riders
                .iter()
                .filter_map(|(rider, before, outline)| {
                    let mut ride = rider.0.lock().ok()?;
                    ride.rows(base + *before as i64, outline)
                })
                .collect();
            let riding = Riding {
                cards: &effects.cards,
                changed: &effects.changed,
                sessions: &sessions,
                edited_by: effects.edited_by.as_deref(),
            };
            let started = Instant::now();
            // Boxed: inline, the room a commit needs (1.7 KB) was kept in
            // every document's task for its whole life (issue #16).
            self.revision = Box::pin(self.store.append_with(
                &self.id,
                self.epoch,
                self.revision,
                changes,
                riding,
            ))
            .await?;
            COUNTERS.document_commit.observe(started.elapsed());
            COUNTERS
                .updates_committed
                .fetch_add(count, std::sync::atomic::Ordering::Relaxed);
            for (rider, _, _) in &effects.riders {
                if let Ok(mut ride) = rider.0.lock() {
                    ride.committed();
                }
            }
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
            self.live.refresh();
            let outline = self.live.snapshot();
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
                [one] => Some(messages::update(one.to_vec())),
                many => match yrs::merge_updates_v1(many.iter().copied()) {
                    Ok(update) => Some(messages::update(update)),
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
                None => sends.extend(
                    deltas
                        .iter()
                        .filter(|(origin, _)| *origin != id)
                        .map(|(_, delta)| (Target::One(id), messages::update(delta.clone()))),
                ),
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
        .map(|stored| crate::cards::mirror_entry(&stored.card))
        .collect()
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
