//! The registry of loaded documents: finds or starts the one task that owns a
//! document, and answers outline requests from it or from storage.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::num::NonZeroUsize;

use margin_decisions::wire::WrittenRead;
use margin_decisions::{Edit, Outline, DEFAULT_READS};
use margin_protocol::chat::{ChatKind, ChatMessageView};
use margin_protocol::decisions::EncodedRead;
use margin_protocol::sync::close;
use margin_protocol::Role;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::cards::{CardChange, ChangeRefused};
use super::command::{Command, DecideRefused, EditRefused, EditRequest, JoinRefused, RecordResult};
use super::compaction::Compaction;
use super::conn::{self, Closer, Conn, ConnId, OutboxReader};
use super::decide::{Batch, Decided};
use super::document;
use super::encoded_reads::{EncodedReads, ENCODED_READ_BYTES};
use super::load::{rebuilt, LoadError};
use super::reads::Reads;
use crate::cluster::{Cluster, Ownership};
use crate::storage::{StorageError, Store, StoredCard};
use crate::watchers::{Bell, Watchers};

/// Commands waiting for a document task; a full mailbox slows the
/// connections that feed it (TCP backpressure), it never drops a frame.
const MAILBOX: usize = 1024;

/// How many times a join retries a document that was unloading.
const JOIN_ATTEMPTS: usize = 8;

/// Tunables of the hub.
#[derive(Clone, Copy, Debug)]
pub struct HubSettings {
    /// Snapshot compaction.
    pub compaction: Compaction,
    /// How many Planner reads each document remembers (SPEC S5).
    pub read_capacity: NonZeroUsize,
    /// Frames waiting for one connection before it counts as too slow.
    pub outbox_frames: usize,
    /// Bytes waiting for one connection before it counts as too slow.
    pub outbox_bytes: usize,
}

impl Default for HubSettings {
    fn default() -> Self {
        HubSettings {
            compaction: Compaction::default(),
            read_capacity: NonZeroUsize::new(DEFAULT_READS).unwrap_or(NonZeroUsize::MIN),
            outbox_frames: 512,
            // Four of the largest updates.
            outbox_bytes: 4 * margin_protocol::sync::MAX_UPDATE_BYTES,
        }
    }
}

/// Shared handle to the loaded documents.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// Whether this server owns every document it loads, or takes a lease
    /// on each from its cluster.
    ownership: Ownership,
    docs: Mutex<HashMap<String, mpsc::Sender<Command>>>,
    /// What the Planner read of each document (SPEC S5).
    reads: Reads,
    /// The last `read_document` output written for each document.
    encoded_reads: EncodedReads,
    /// Sync connections per document (SPEC P3: idle release only with
    /// nobody viewing).
    viewers: Mutex<HashMap<String, usize>>,
    /// Who follows each document's feed (its Chat and Planner status).
    watchers: Watchers,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    compaction: Compaction,
    outbox_frames: usize,
    outbox_bytes: usize,
    next_conn: AtomicU64,
}

/// A connection that has joined its document's task.
pub struct Joined {
    /// The connection's id.
    pub id: ConnId,
    /// Where to send its frames.
    pub mailbox: mpsc::Sender<Command>,
    /// Frames to write to it.
    pub outbox: OutboxReader,
    /// How the task closes it.
    pub closer: Closer,
    /// Leaves the document when dropped.
    pub membership: Membership,
}

/// A joined connection's place in its document: dropping it leaves (the
/// task forgets the member, the viewer count goes down), however the
/// connection ended — also when it never got to run, as when a WebSocket
/// upgrade failed after the join.
pub struct Membership {
    hub: Hub,
    document: String,
    conn: ConnId,
    mailbox: mpsc::Sender<Command>,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.hub.viewer_left(&self.document);
        let leave = Command::Leave { conn: self.conn };
        if let Err(mpsc::error::TrySendError::Full(leave)) = self.mailbox.try_send(leave) {
            // A busy document: wait for room, as a frame would.
            let mailbox = self.mailbox.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = mailbox.send(leave).await;
                });
            }
        }
    }
}

/// Why an outline could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum OutlineError {
    /// Storage failed or the revision is unknown or compacted.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The stored state does not rebuild.
    #[error(transparent)]
    Load(#[from] LoadError),
}

impl Hub {
    /// A hub whose tasks run on `tracker` and stop when `shutdown` fires.
    pub fn new(
        store: Store,
        tracker: TaskTracker,
        shutdown: CancellationToken,
        settings: HubSettings,
        ownership: Ownership,
    ) -> Self {
        Hub {
            inner: Arc::new(Inner {
                store,
                ownership,
                docs: Mutex::new(HashMap::new()),
                reads: Reads::new(settings.read_capacity),
                encoded_reads: EncodedReads::new(ENCODED_READ_BYTES),
                viewers: Mutex::new(HashMap::new()),
                watchers: Watchers::default(),
                tracker,
                shutdown,
                compaction: settings.compaction,
                outbox_frames: settings.outbox_frames,
                outbox_bytes: settings.outbox_bytes,
                next_conn: AtomicU64::new(1),
            }),
        }
    }

    /// The store documents load from.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// How many documents have a task here, and how many sync connections
    /// they hold: what `/metrics` reports.
    pub fn load(&self) -> (usize, usize) {
        let documents = self.inner.docs.lock().map_or(0, |docs| docs.len());
        let connections = self
            .inner
            .viewers
            .lock()
            .map_or(0, |viewers| viewers.values().sum());
        (documents, connections)
    }

    /// Who follows each document's feed.
    pub fn watchers(&self) -> &Watchers {
        &self.inner.watchers
    }

    /// Appends a line to document `id`'s Chat and wakes those following
    /// its feed: every Chat line goes through here.
    pub async fn append_chat(
        &self,
        id: &str,
        author: &str,
        kind: ChatKind,
        text: &str,
    ) -> Result<ChatMessageView, StorageError> {
        let line = self.inner.store.append_chat(id, author, kind, text).await?;
        self.inner.watchers.ring(id, Bell::Chat);
        Ok(line)
    }

    /// Who may own the documents this server loads.
    pub fn ownership(&self) -> &Ownership {
        &self.inner.ownership
    }

    /// This node's cluster, in cluster mode.
    pub fn cluster(&self) -> Option<&Cluster> {
        match &self.inner.ownership {
            Ownership::Alone => None,
            Ownership::Cluster(cluster) => Some(cluster),
        }
    }

    /// What the Planner read of each document.
    pub(super) fn reads(&self) -> &Reads {
        &self.inner.reads
    }

    pub(super) fn compaction(&self) -> Compaction {
        self.inner.compaction
    }

    /// Joins `account`'s connection with `role` to document `id`, loading
    /// it if needed.
    pub async fn join(&self, id: &str, account: &str, role: Role) -> Result<Joined, JoinRefused> {
        let account: Arc<str> = Arc::from(account);
        for _ in 0..JOIN_ATTEMPTS {
            let mailbox = self.task_for(id)?;
            let (outbox_tx, outbox) =
                conn::outbox(self.inner.outbox_frames, self.inner.outbox_bytes);
            let closer = Closer::default();
            let conn_id = self.inner.next_conn.fetch_add(1, Ordering::Relaxed);
            let conn = Box::new(Conn {
                id: conn_id,
                account: account.clone(),
                role,
                outbox: outbox_tx,
                closer: closer.clone(),
            });
            let (reply, answer) = oneshot::channel();
            if mailbox.send(Command::Join { conn, reply }).await.is_err() {
                continue;
            }
            match answer.await {
                Ok(Ok(())) => {
                    self.viewer(id, 1);
                    self.confirm_access(id, &account, role, &closer).await;
                    return Ok(Joined {
                        id: conn_id,
                        mailbox: mailbox.clone(),
                        outbox,
                        closer,
                        membership: Membership {
                            hub: self.clone(),
                            document: id.to_owned(),
                            conn: conn_id,
                            mailbox,
                        },
                    });
                }
                Ok(Err(JoinRefused::Unloading)) | Err(_) => continue,
                Ok(Err(refused)) => return Err(refused),
            }
        }
        Err(JoinRefused::Unloading)
    }

    /// Closes a connection that joined with a role its member no longer
    /// has. The route checked the member before the join; an access change
    /// committed in between told the task before this connection was in it
    /// ([`Hub::access_changed`]), so it is told here instead. Once joined,
    /// the task tells it of every later change.
    async fn confirm_access(&self, id: &str, account: &str, role: Role, closer: &Closer) {
        match self.inner.store.member_role(id, account).await {
            Ok(now) if now == Some(role) => {}
            Ok(now) => {
                let (code, reason) = conn::access_close(now);
                closer.close(code, reason);
            }
            Err(error) => {
                tracing::warn!(document = id, %error, "could not confirm a joining member's access");
                closer.close(
                    close::INTERNAL,
                    "could not confirm your access to the document; reconnect",
                );
            }
        }
    }

    /// The outline of document `id` at `revision` (the current one when
    /// `None`), from its task when loaded, else from storage.
    pub async fn outline(
        &self,
        id: &str,
        revision: Option<i64>,
    ) -> Result<(i64, Arc<Outline>), OutlineError> {
        let loaded = self.loaded(id);
        if let (Some(mailbox), None) = (loaded, revision) {
            let (reply, answer) = oneshot::channel();
            if mailbox.send(Command::Outline { reply }).await.is_ok() {
                if let Ok(answer) = answer.await {
                    return Ok(answer);
                }
            }
        }
        let state = self.inner.store.load_state(id, revision).await?;
        let outline = rebuilt(state, |doc, state| {
            (state.revision, Arc::new(Outline::of_doc(doc.doc())))
        })
        .await?;
        Ok(outline)
    }

    /// The `read_document` output of `outline` at `revision` of `id`, if
    /// one was written and is still kept.
    pub fn encoded_read(
        &self,
        id: &str,
        revision: i64,
        outline: &Arc<Outline>,
    ) -> Option<EncodedRead> {
        self.inner.encoded_reads.get(id, revision, outline)
    }

    /// The `read_document` output of `id` written last, whatever its
    /// revision, if still kept: the next read is written from it.
    pub fn last_encoded_read(&self, id: &str) -> Option<WrittenRead> {
        self.inner.encoded_reads.last(id)
    }

    /// Keeps `written`, the `read_document` output of `outline` at
    /// `revision` of `id`, for the next reader of that revision and the
    /// next read written.
    pub fn keep_encoded_read(
        &self,
        id: &str,
        revision: i64,
        outline: &Arc<Outline>,
        written: WrittenRead,
    ) {
        self.inner
            .encoded_reads
            .keep(id, revision, outline, written);
    }

    /// Remembers that the Planner read `outline` at `revision` of `id`.
    pub fn remember_read(&self, id: &str, revision: i64, outline: Arc<Outline>) {
        self.inner.reads.remember(id, revision, outline);
    }

    /// Applies the Planner's edits to `id` and returns the revision they made
    /// and its outline, once committed — with the session write `record`
    /// asks for in the same transaction, when given, and `by` as the
    /// document's last editor.
    pub async fn edit(
        &self,
        id: &str,
        revision: i64,
        edits: Vec<Edit>,
        by: &str,
        record: Option<RecordResult>,
    ) -> Result<(i64, Arc<Outline>), EditRefused> {
        let by: Arc<str> = Arc::from(by);
        self.request(id, |reply| Command::Edit {
            request: Box::new(EditRequest {
                revision,
                edits: edits.clone(),
                by: by.clone(),
                record: record.clone(),
            }),
            reply,
        })
        .await
        .map_err(|e| EditRefused::Unavailable(e.to_string()))?
    }

    /// Judges `batch` of cards for `id` in its task and stores what it
    /// creates with their live mirror — and the call's result, recorded
    /// through `record` when given — in one transaction; what it came to,
    /// once committed.
    pub async fn decide(
        &self,
        id: &str,
        batch: Batch,
        record: Option<RecordResult>,
    ) -> Result<Decided, DecideRefused> {
        self.request(id, |reply| Command::Decide {
            batch: Box::new(batch.clone()),
            record: record.clone(),
            reply,
        })
        .await
        .map_err(|e| DecideRefused::Unavailable(e.to_string()))?
    }

    /// Applies `change` to card `card` of `id` in its task and stores it
    /// with its live mirror in one transaction; the card as changed
    /// (`None`: there was nothing to change), once committed.
    pub async fn change_card(
        &self,
        id: &str,
        card: &str,
        change: CardChange,
    ) -> Result<Result<Option<StoredCard>, ChangeRefused>, JoinRefused> {
        self.request(id, |reply| Command::Change {
            card: card.to_owned(),
            change: Box::new(change.clone()),
            reply,
        })
        .await
    }

    /// Puts document `id`'s archive state in force on its loaded task, if
    /// any (SPEC P3). Storage must already say so: a task that loads later
    /// reads it there.
    pub async fn set_archived(&self, id: &str, archived: bool) {
        // Those following its feed see it archived (or not) at once.
        self.inner.watchers.ring(id, Bell::Document);
        let Some(mailbox) = self.loaded(id) else {
            return;
        };
        let (reply, answer) = oneshot::channel();
        if mailbox
            .send(Command::Archive { archived, reply })
            .await
            .is_ok()
        {
            // No answer: the task was unloading, and the next one reads
            // storage.
            let _ = answer.await;
        }
    }

    /// The owner changed `account`'s access to document `id` — `role` is
    /// its role now, `None` once removed — and storage already says so:
    /// the member's connections to the loaded document that hold another
    /// role close at once (SPEC A1), removed ones for good
    /// ([`margin_protocol::sync::close::REMOVED`]), the others to reconnect
    /// with the new role ([`margin_protocol::sync::close::ACCESS_CHANGED`]).
    /// In a cluster this runs on the document's owner, where every socket
    /// on it is joined, forwarded ones included.
    pub async fn access_changed(&self, id: &str, account: &str, role: Option<Role>) {
        // Its feed tells the member their new role, or ends.
        self.inner.watchers.ring(id, Bell::Document);
        let Some(mailbox) = self.loaded(id) else {
            return;
        };
        let (reply, answer) = oneshot::channel();
        let command = Command::Access {
            account: account.to_owned(),
            role,
            reply,
        };
        if mailbox.send(command).await.is_ok() {
            // No answer: the task was unloading, and its connections with it.
            let _ = answer.await;
        }
    }

    /// Document `id` was deleted from storage: closes its sync connections
    /// ([`margin_protocol::sync::close::DELETED`]), unloads it without
    /// writing, and forgets the Planner's reads of it.
    pub async fn deleted(&self, id: &str) {
        // Its feed ends: the next read finds no document.
        self.inner.watchers.ring(id, Bell::Document);
        if let Some(mailbox) = self.loaded(id) {
            let (reply, answer) = oneshot::channel();
            if mailbox.send(Command::Delete { reply }).await.is_ok() {
                let _ = answer.await;
            }
        }
        self.inner.reads.forget(id);
        self.inner.encoded_reads.forget(id);
    }

    /// Asks `id`'s task something and waits for the answer, starting a task
    /// if needed. A task that was unloading drops the question unanswered
    /// (and nothing of it was done, or committed); it is then asked again of
    /// a fresh task.
    async fn request<T>(
        &self,
        id: &str,
        command: impl Fn(oneshot::Sender<T>) -> Command,
    ) -> Result<T, JoinRefused> {
        for _ in 0..JOIN_ATTEMPTS {
            let mailbox = self.task_for(id)?;
            let (reply, answer) = oneshot::channel();
            if mailbox.send(command(reply)).await.is_err() {
                continue;
            }
            if let Ok(answer) = answer.await {
                return Ok(answer);
            }
        }
        Err(JoinRefused::Unloading)
    }

    /// A sync connection to `id` ended.
    pub fn viewer_left(&self, id: &str) {
        self.viewer(id, -1);
    }

    /// How many sync connections `id` has: the people viewing it.
    pub fn viewers(&self, id: &str) -> usize {
        self.inner
            .viewers
            .lock()
            .map(|v| v.get(id).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    fn viewer(&self, id: &str, change: isize) {
        if let Ok(mut viewers) = self.inner.viewers.lock() {
            let count = viewers.entry(id.to_owned()).or_default();
            *count = count.saturating_add_signed(change);
            if *count == 0 {
                viewers.remove(id);
            }
        }
    }

    fn loaded(&self, id: &str) -> Option<mpsc::Sender<Command>> {
        self.inner.docs.lock().ok()?.get(id).cloned()
    }

    /// The task owning `id`, started if there is none.
    fn task_for(&self, id: &str) -> Result<mpsc::Sender<Command>, JoinRefused> {
        let mut docs = self
            .inner
            .docs
            .lock()
            .map_err(|_| JoinRefused::LoadFailed("document registry poisoned".into()))?;
        if let Some(mailbox) = docs.get(id) {
            if !mailbox.is_closed() {
                return Ok(mailbox.clone());
            }
        }
        if self.inner.shutdown.is_cancelled() {
            return Err(JoinRefused::LoadFailed("server is shutting down".into()));
        }
        let (mailbox, rx) = mpsc::channel(MAILBOX);
        docs.insert(id.to_owned(), mailbox.clone());
        self.inner.tracker.spawn(document::run(
            id.to_owned(),
            self.clone(),
            mailbox.clone(),
            rx,
            self.inner.shutdown.clone(),
        ));
        Ok(mailbox)
    }

    /// Removes `mailbox` as `id`'s task, unless a newer task replaced it.
    pub(super) fn forget(&self, id: &str, mailbox: &mpsc::Sender<Command>) {
        if let Ok(mut docs) = self.inner.docs.lock() {
            if docs
                .get(id)
                .is_some_and(|current| current.same_channel(mailbox))
            {
                docs.remove(id);
            }
        }
    }
}
