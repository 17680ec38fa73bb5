//! The registry of loaded documents: finds or starts the one task that owns a
//! document. Here the registry itself; `joins` lets connections in,
//! `outlines` answers the Planner's reads from the task or from storage,
//! and `asks` carries the server's requests to the task.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use margin_decisions::DEFAULT_READS;
use margin_protocol::chat::{ChatKind, ChatMessageView};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cluster::{Cluster, Ownership};
use crate::storage::{StorageError, Store};
use crate::sync::command::{Command, JoinRefused};
use crate::sync::compaction::Compaction;
use crate::sync::document;
use crate::sync::encoded_reads::{EncodedReads, ENCODED_READ_BYTES};
use crate::sync::reads::Reads;
use crate::watchers::{Bell, Watchers};

mod asks;
mod joins;
mod outlines;

pub use joins::{Joined, Membership};
pub use outlines::OutlineError;

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

/// One forwarded sync socket, counted while it lives.
pub struct Forwarding(Hub);

impl Drop for Forwarding {
    fn drop(&mut self) {
        self.0.inner.forwarded.fetch_sub(1, Ordering::Relaxed);
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
    /// SIGTERM came: `/readyz` answers 503 while the server still serves
    /// for its drain period (SPEC C4, O1).
    draining: AtomicBool,
    /// Sync sockets this node took and carries to their document's owner
    /// (SPEC C2): the owner counts them among its connections, this node
    /// here.
    forwarded: AtomicUsize,
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
                draining: AtomicBool::new(false),
                forwarded: AtomicUsize::new(0),
            }),
        }
    }

    /// From now on `/readyz` says this server is draining.
    pub fn begin_draining(&self) {
        self.inner.draining.store(true, Ordering::Relaxed);
    }

    /// Whether a stop is under way: the server serves, but a load balancer
    /// should send new connections elsewhere.
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::Relaxed)
    }

    /// Counts a sync socket carried to another node until the returned
    /// guard drops.
    pub fn forwarding(&self) -> Forwarding {
        self.inner.forwarded.fetch_add(1, Ordering::Relaxed);
        Forwarding(self.clone())
    }

    /// How many sync sockets this node carries to other nodes now.
    pub fn forwarded(&self) -> usize {
        self.inner.forwarded.load(Ordering::Relaxed)
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
