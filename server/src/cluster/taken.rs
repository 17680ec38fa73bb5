//! The documents this node took afresh since its Planner sessions last
//! looked (SPEC C3). A session runs where its document is: when its node
//! dies, the node that takes the document next takes the session back too.
//! The sweep of orphaned sessions cannot see such a one — a live node, this
//! one, holds its document — so the sessions look here instead.

use std::collections::HashSet;
use std::sync::Mutex;

use super::Cluster;

/// Most documents remembered between two looks: past it, the next look
/// is at every document this node holds.
const AT_MOST: usize = 1024;

#[derive(Default)]
pub(super) struct Taken {
    fresh: Mutex<Fresh>,
    bell: tokio::sync::Notify,
}

#[derive(Default)]
struct Fresh {
    documents: HashSet<String>,
    overflowed: bool,
}

impl Cluster {
    /// Document `id` was just taken under a new epoch.
    pub(super) fn note_taken(&self, id: &str) {
        {
            let mut fresh = self.lock_fresh();
            if fresh.documents.len() < AT_MOST {
                fresh.documents.insert(id.to_owned());
            } else {
                fresh.overflowed = true;
            }
        }
        self.inner.taken.bell.notify_one();
    }

    /// Resolves once a document was taken since the last
    /// [`Cluster::taken_since`].
    pub async fn documents_taken(&self) {
        self.inner.taken.bell.notified().await;
    }

    /// The documents taken since the last call: at most [`AT_MOST`], or
    /// every document held when more were.
    pub fn taken_since(&self) -> Vec<String> {
        let fresh = std::mem::take(&mut *self.lock_fresh());
        if !fresh.overflowed {
            return fresh.documents.into_iter().collect();
        }
        let node = self.incarnation().node;
        self.lock_holds()
            .keys()
            .filter(|(holder, _)| *holder == node)
            .map(|(_, document)| document.clone())
            .collect()
    }

    fn lock_fresh(&self) -> std::sync::MutexGuard<'_, Fresh> {
        self.inner
            .taken
            .fresh
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
