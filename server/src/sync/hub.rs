//! The registry of loaded documents: finds or starts the one task that owns a
//! document, and answers outline requests from it or from storage.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use margin_decisions::Outline;
use margin_protocol::Role;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::conn::{Closer, Conn, ConnId};
use super::document::{self, Command, Compaction, JoinRefused};
use super::load::{rebuild, LoadError};
use crate::storage::{StorageError, Store};

/// Commands waiting for a document task; a full mailbox slows the
/// connections that feed it (TCP backpressure), it never drops a frame.
const MAILBOX: usize = 1024;

/// Frames waiting to be written to one connection before it counts as too
/// slow and is closed to resync.
pub const OUTBOX: usize = 512;

/// How many times a join retries a document that was unloading.
const JOIN_ATTEMPTS: usize = 8;

/// Shared handle to the loaded documents.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    docs: Mutex<HashMap<String, mpsc::Sender<Command>>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    compaction: Compaction,
    next_conn: AtomicU64,
}

/// A connection that has joined its document's task.
pub struct Joined {
    /// The connection's id.
    pub id: ConnId,
    /// Where to send its frames.
    pub mailbox: mpsc::Sender<Command>,
    /// Frames to write to it.
    pub outbox: mpsc::Receiver<axum::body::Bytes>,
    /// How the task closes it.
    pub closer: Closer,
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
        compaction: Compaction,
    ) -> Self {
        Hub {
            inner: Arc::new(Inner {
                store,
                docs: Mutex::new(HashMap::new()),
                tracker,
                shutdown,
                compaction,
                next_conn: AtomicU64::new(1),
            }),
        }
    }

    /// The store documents load from.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub(super) fn compaction(&self) -> Compaction {
        self.inner.compaction
    }

    /// Joins a connection with `role` to document `id`, loading it if needed.
    pub async fn join(&self, id: &str, role: Role) -> Result<Joined, JoinRefused> {
        for _ in 0..JOIN_ATTEMPTS {
            let mailbox = self.task_for(id)?;
            let (outbox_tx, outbox) = mpsc::channel(OUTBOX);
            let closer = Closer::default();
            let conn_id = self.inner.next_conn.fetch_add(1, Ordering::Relaxed);
            let conn = Conn {
                id: conn_id,
                role,
                outbox: outbox_tx,
                closer: closer.clone(),
            };
            let (reply, answer) = oneshot::channel();
            if mailbox.send(Command::Join { conn, reply }).await.is_err() {
                continue;
            }
            match answer.await {
                Ok(Ok(())) => {
                    return Ok(Joined {
                        id: conn_id,
                        mailbox,
                        outbox,
                        closer,
                    })
                }
                Ok(Err(JoinRefused::Unloading)) | Err(_) => continue,
                Ok(Err(refused)) => return Err(refused),
            }
        }
        Err(JoinRefused::Unloading)
    }

    /// The outline of document `id` at `revision` (the current one when
    /// `None`), from its task when loaded, else from storage.
    pub async fn outline(
        &self,
        id: &str,
        revision: Option<i64>,
    ) -> Result<(i64, Outline), OutlineError> {
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
        let doc = rebuild(&state)?;
        Ok((state.revision, Outline::of_doc(&doc)))
    }

    /// How many documents are loaded.
    pub fn loaded_count(&self) -> usize {
        self.inner.docs.lock().map(|docs| docs.len()).unwrap_or(0)
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
