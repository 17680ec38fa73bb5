//! The outlines the Planner read, remembered per revision (SPEC S5).

use std::num::NonZeroUsize;
use std::sync::Arc;

use lru::LruCache;

use crate::outline::Outline;

/// How many reads a document remembers by default.
pub const DEFAULT_READS: usize = 8;

/// The last N outlines read from one document, each keyed by its revision.
/// Every outline keeps the identity of the live block behind each entry,
/// which is what tells a rewritten paragraph from its twin.
#[derive(Debug)]
pub struct ReadCache {
    reads: LruCache<i64, Arc<Outline>>,
}

impl Default for ReadCache {
    fn default() -> Self {
        ReadCache::new(NonZeroUsize::new(DEFAULT_READS).unwrap_or(NonZeroUsize::MIN))
    }
}

impl ReadCache {
    /// A cache of `capacity` reads.
    pub fn new(capacity: NonZeroUsize) -> Self {
        ReadCache {
            reads: LruCache::new(capacity),
        }
    }

    /// Remembers the outline read at `revision`. A read already remembered
    /// is never replaced — the outline of a revision does not change, and
    /// the result of an edit made from it is a new revision of its own.
    /// Returns the read this one pushed out, if any, for the caller to drop
    /// where dropping a large outline costs nobody a wait.
    pub fn remember(&mut self, revision: i64, outline: Arc<Outline>) -> Option<Arc<Outline>> {
        if self.reads.contains(&revision) {
            self.reads.promote(&revision);
            return None;
        }
        self.reads
            .push(revision, outline)
            .map(|(_, forgotten)| forgotten)
    }

    /// The outline read at `revision`, if still remembered. Looking does not
    /// count as reading: eviction follows the order of reads.
    pub fn get(&self, revision: i64) -> Option<Arc<Outline>> {
        self.reads.peek(&revision).cloned()
    }

    /// Forgets everything (as a restart does).
    pub fn clear(&mut self) {
        self.reads.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ninth_read_evicts_the_first() {
        let mut cache = ReadCache::default();
        for revision in 0..9 {
            cache.remember(revision, Arc::new(Outline::default()));
        }
        assert!(cache.get(0).is_none());
        assert!(cache.get(1).is_some());
        assert!(cache.get(8).is_some());
    }

    #[test]
    fn a_remembered_read_is_not_replaced() {
        let mut cache = ReadCache::default();
        let first = Arc::new(Outline::default());
        cache.remember(3, first.clone());
        cache.remember(3, Arc::new(Outline::default()));
        assert!(Arc::ptr_eq(&cache.get(3).unwrap(), &first));
    }
}
