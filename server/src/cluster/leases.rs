//! Document leases (SPEC C1, C3): a node owns a document while it holds its
//! lease, taken with a new epoch so every write of the previous owner is
//! refused; the lease is shared by whatever uses the document on the node
//! (its task, its session's driver, an open feed) and let go when the last
//! one drops it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use tracing::warn;

use super::{Cluster, Incarnation};
use crate::storage::{Epoch, LeaseFence, Node, StorageError, Take};

impl Cluster {
    /// Takes document `id` for this node under a new owner epoch (SPEC
    /// C1), unless a live node owns it: what a document task does each
    /// time it loads.
    pub async fn take(&self, id: &str) -> Result<Lease, TakeRefused> {
        let holder = self.incarnation();
        if self.inner.draining.load(Ordering::Relaxed) || holder.lapsed.is_cancelled() {
            return Err(TakeRefused::NotTaking);
        }
        let taken = match self.inner.store.take_document(id, &holder.node).await {
            // A node stuck in the middle of a commit holds the document's
            // row until PostgreSQL ends its transaction: look again soon
            // rather than wait (SPEC C5).
            Err(error) if error.is_lock_timeout() => return Err(TakeRefused::Busy),
            taken => taken?,
        };
        match taken {
            Take::Taken(epoch) => {
                self.note_taken(id);
                Ok(self.held(holder, id, Some(epoch)))
            }
            Take::Held(node) => Err(TakeRefused::Elsewhere(node)),
            Take::Lapsed => Err(TakeRefused::NotTaking),
        }
    }

    /// Holds document `id` for this node: shares the lease when the node
    /// holds it already, else takes it. What a Planner session does for
    /// its life (its writes are fenced on the lease, not on an epoch).
    pub async fn hold(&self, id: &str) -> Result<Lease, TakeRefused> {
        let holder = self.incarnation();
        if !holder.lapsed.is_cancelled() {
            let key = (holder.node.clone(), id.to_owned());
            if self.lock_holds().contains_key(&key) {
                return Ok(self.held(holder, id, None));
            }
        }
        self.take(id).await
    }

    pub(super) fn lock_holds(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Held>> {
        self.inner
            .holds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One more user of `id` under `holder`, at `epoch` when it was just
    /// taken.
    pub(super) fn held(&self, holder: Incarnation, id: &str, epoch: Option<Epoch>) -> Lease {
        let key = (holder.node.clone(), id.to_owned());
        let mut holds = self.lock_holds();
        let held = holds.entry(key).or_insert(Held {
            users: 0,
            epoch: epoch.unwrap_or(Epoch(0)),
        });
        held.users += 1;
        if let Some(epoch) = epoch {
            held.epoch = Epoch(held.epoch.0.max(epoch.0));
        }
        let epoch = held.epoch;
        Lease {
            epoch,
            _hold: Hold {
                cluster: self.clone(),
                node: holder.node.clone(),
                document: id.to_owned(),
            },
            holder,
        }
    }

    /// A user of `document` under `node` is done; the last one lets the
    /// lease go (unless a newer take moved its epoch meanwhile).
    pub(super) fn let_go(&self, node: &str, document: &str) {
        let key = (node.to_owned(), document.to_owned());
        let epoch = {
            let mut holds = self.lock_holds();
            let Some(held) = holds.get_mut(&key) else {
                return;
            };
            held.users = held.users.saturating_sub(1);
            if held.users > 0 {
                return;
            }
            let epoch = held.epoch;
            holds.remove(&key);
            epoch
        };
        let cluster = self.clone();
        let (node, document) = key;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                match cluster
                    .inner
                    .store
                    .release_document(&document, &node, epoch)
                    .await
                {
                    Ok(()) => cluster.released().await,
                    // The lease ends with the node's registration anyway.
                    Err(error) => warn!(%error, document, "document lease not released"),
                }
            });
        }
    }
}

/// A document this node took: the epoch its writes carry, and the
/// registration it was taken under. The node keeps the document's lease
/// while any `Lease` of it lives here; the last one dropped lets it go.
#[derive(Debug)]
pub struct Lease {
    /// The owner epoch (`documents.epoch`).
    pub epoch: Epoch,
    /// The registration; the lease ends when it lapses.
    pub holder: Incarnation,
    _hold: Hold,
}

impl Lease {
    /// Whether this node surely still holds the lease: its registration
    /// has not lapsed and was renewed within the TTL, by this node's clock.
    /// A write that failed when it did not was likely cut off for it (its
    /// transaction outlived the lease, SPEC C5): the document moved.
    pub fn surely_held(&self) -> bool {
        let current = self._hold.cluster.incarnation();
        current.node == self.holder.node
            && !current.lapsed.is_cancelled()
            && tokio::time::Instant::now() < current.valid_until
    }

    /// The fence a session write of this document carries (SPEC C1).
    pub fn fence(&self) -> LeaseFence {
        LeaseFence {
            document: self._hold.document.clone(),
            node: self.holder.node.clone(),
        }
    }
}

/// One user's share of a held document.
pub(super) struct Hold {
    cluster: Cluster,
    node: String,
    document: String,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hold({} on {})", self.document, self.node)
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.cluster.let_go(&self.node, &self.document);
    }
}

/// How a document is held here.
pub(super) struct Held {
    users: usize,
    epoch: Epoch,
}

/// Why this node could not take a document.
#[derive(Debug, thiserror::Error)]
pub enum TakeRefused {
    /// Another live node owns it.
    #[error("the document is served by node {} ({})", .0.id, .0.advertise)]
    Elsewhere(Node),
    /// Another node's transaction still holds the document.
    #[error("another node's unfinished write still holds the document; trying again")]
    Busy,
    /// This node lapsed, or is draining: it takes nothing now.
    #[error("this node is not taking documents now (it lapsed or is draining)")]
    NotTaking,
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Who may own the documents this server loads.
#[derive(Clone)]
pub enum Ownership {
    /// The only server on its database: it owns every document it loads.
    Alone,
    /// A node of a cluster: it owns the documents it takes a lease on.
    Cluster(Cluster),
}
