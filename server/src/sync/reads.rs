//! What the Planner read of each document (SPEC S5). Kept apart from the
//! document tasks so a read outlives a document unloading; lost, like a
//! cache should be, in a restart.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use margin_decisions::{Outline, ReadCache};

/// How many documents' reads are remembered; the least recently read
/// document's reads go first (its next batch gets `read_evicted`).
const READ_DOCUMENTS: NonZeroUsize = match NonZeroUsize::new(4096) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};

/// The remembered reads of every document, shared by the hub and the
/// document tasks that judge batches against them.
#[derive(Clone)]
pub struct Reads {
    reads: Arc<Mutex<LruCache<String, ReadCache>>>,
    /// How many reads each document remembers.
    capacity: NonZeroUsize,
}

impl Reads {
    /// Remembers `capacity` reads per document.
    pub fn new(capacity: NonZeroUsize) -> Self {
        Reads {
            reads: Arc::new(Mutex::new(LruCache::new(READ_DOCUMENTS))),
            capacity,
        }
    }

    /// Remembers that the Planner read `outline` at `revision` of `id`.
    /// The read this pushes out is dropped on a blocking thread: freeing
    /// the last copy of a 10,000-block outline frees every block's text,
    /// which a tool call would otherwise wait on.
    pub fn remember(&self, id: &str, revision: i64, outline: Arc<Outline>) {
        let forgotten = match self.reads.lock() {
            Ok(mut reads) => reads
                .get_or_insert_mut(id.to_owned(), || ReadCache::new(self.capacity))
                .remember(revision, outline),
            Err(_) => None,
        };
        if let (Some(forgotten), Ok(runtime)) = (forgotten, tokio::runtime::Handle::try_current()) {
            runtime.spawn_blocking(move || drop(forgotten));
        }
    }

    /// Runs `f` with the reads remembered for `id`.
    pub fn with<T>(&self, id: &str, f: impl FnOnce(&ReadCache) -> T) -> T {
        let empty = ReadCache::new(self.capacity);
        match self.reads.lock() {
            Ok(reads) => f(reads.peek(id).unwrap_or(&empty)),
            Err(_) => f(&empty),
        }
    }

    /// Forgets every read of `id` (it was deleted).
    pub fn forget(&self, id: &str) {
        if let Ok(mut reads) = self.reads.lock() {
            reads.pop(id);
        }
    }
}
