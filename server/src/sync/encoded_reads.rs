//! The `read_document` output last written for each document, kept so a
//! read of a revision already read is not written again, and a read of a
//! new revision is written from it. Writing a 10,000-block read whole is
//! milliseconds of CPU, most of it loading 10,000 texts scattered through
//! the heap; a Planner reads a revision again while it waits for people,
//! every session on a document reads the same one, and between two
//! revisions most blocks are unchanged. The read before, once nobody holds
//! it, is kept emptied as the buffers the next read is written into:
//! megabytes written into pages new to the process each time cost more
//! than the writing. Bounded by bytes, least recently read first out;
//! lost, like any cache, in a restart.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, Weak};

use lru::LruCache;
use margin_decisions::wire::{ReadBuffers, WrittenRead};
use margin_decisions::Outline;
use margin_protocol::decisions::EncodedRead;

/// How many bytes of written reads are kept, across documents: room for
/// the reads of several 10,000-block plans, each with the layout that
/// says where each block's entry lies in it.
pub const ENCODED_READ_BYTES: usize = 32 * 1024 * 1024;

/// At most this many documents' reads are kept, however small.
const DOCUMENTS: NonZeroUsize = match NonZeroUsize::new(4096) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};

/// One document's last written read.
struct Kept {
    revision: i64,
    /// The outline it was written from: a read is reused only for that
    /// very outline, so nothing rebuilt or reloaded since can be answered
    /// with another's text, whatever its revision says. (Held weakly, it
    /// is not kept alive; its allocation is, so no other outline can
    /// take its address.)
    outline: Weak<Outline>,
    written: WrittenRead,
    /// The buffers of the read before, to write the next read into.
    spare: Option<ReadBuffers>,
}

impl Kept {
    /// Bytes held: the read and the buffers kept beside it.
    fn size(&self) -> usize {
        self.written.size() + self.spare.as_ref().map_or(0, ReadBuffers::size)
    }
}

/// The last written read of each document, within a byte budget.
pub struct EncodedReads {
    kept: Mutex<Shelf>,
    budget: usize,
}

struct Shelf {
    reads: LruCache<String, Kept>,
    bytes: usize,
}

impl EncodedReads {
    /// Keeps at most `budget` bytes of written reads.
    pub fn new(budget: usize) -> Self {
        EncodedReads {
            kept: Mutex::new(Shelf {
                reads: LruCache::new(DOCUMENTS),
                bytes: 0,
            }),
            budget,
        }
    }

    /// The read of `id` written from `outline` at `revision`, if kept.
    /// Cheap: the read is shared, not copied.
    pub fn get(&self, id: &str, revision: i64, outline: &Arc<Outline>) -> Option<EncodedRead> {
        let mut shelf = self.kept.lock().ok()?;
        let kept = shelf.reads.get(id)?;
        let same = kept.revision == revision && Weak::as_ptr(&kept.outline) == Arc::as_ptr(outline);
        same.then(|| kept.written.read().clone())
    }

    /// The read of `id` written last, whatever its revision: what a read
    /// of another revision is written from.
    pub fn last(&self, id: &str) -> Option<WrittenRead> {
        let mut shelf = self.kept.lock().ok()?;
        shelf.reads.get(id).map(|kept| kept.written.clone())
    }

    /// The buffers to write `id`'s next read into: those of the read before
    /// its last, if kept, else new ones.
    pub fn buffers(&self, id: &str) -> ReadBuffers {
        let Ok(mut shelf) = self.kept.lock() else {
            return ReadBuffers::default();
        };
        let Some(spare) = shelf.reads.peek_mut(id).and_then(|kept| kept.spare.take()) else {
            return ReadBuffers::default();
        };
        shelf.bytes -= spare.size();
        spare
    }

    /// Keeps `written`, written from `outline` at `revision` of `id`, in
    /// place of the document's last, whose buffers are kept beside it if
    /// nobody holds that read any more; the least recently read go while
    /// over the budget. A read larger than the whole budget is not kept.
    pub fn keep(&self, id: &str, revision: i64, outline: &Arc<Outline>, written: WrittenRead) {
        let Ok(mut shelf) = self.kept.lock() else {
            return;
        };
        let spare = shelf.forget(id).and_then(|old| match old.spare {
            Some(spare) => Some(spare),
            None => old.written.into_buffers(),
        });
        let kept = Kept {
            revision,
            outline: Arc::downgrade(outline),
            written,
            spare,
        };
        let size = kept.size();
        if size > self.budget {
            return;
        }
        while shelf.bytes + size > self.budget {
            match shelf.reads.pop_lru() {
                Some((_, old)) => shelf.let_go(&old),
                None => break,
            }
        }
        if let Some((_, old)) = shelf.reads.push(id.to_owned(), kept) {
            // Over the count of documents: the least recently read went.
            shelf.let_go(&old);
        }
        shelf.bytes += size;
    }

    /// Forgets `id`'s read (it was deleted).
    pub fn forget(&self, id: &str) {
        if let Ok(mut shelf) = self.kept.lock() {
            shelf.forget(id);
        }
    }
}

impl Shelf {
    /// Takes `id`'s read off the shelf.
    fn forget(&mut self, id: &str) -> Option<Kept> {
        let old = self.reads.pop(id)?;
        self.let_go(&old);
        Some(old)
    }

    /// Counts out the bytes of `old`, taken off the shelf.
    fn let_go(&mut self, old: &Kept) {
        self.bytes -= old.size();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use margin_decisions::{wire, Block, BlockIdentity, Digest};

    /// A read of one block of `padding` letters at `revision`.
    fn read(revision: i64, padding: usize) -> WrittenRead {
        let text = "x".repeat(padding);
        let block = Block {
            index: 0,
            kind: Arc::from("paragraph"),
            digest: Digest::of("paragraph", &text),
            text: Arc::from(text),
            identity: BlockIdentity {
                client: 1,
                clock: 0,
            },
        };
        wire::encoded_read(revision, &Outline::from_blocks(vec![block]), None).expect("written")
    }

    #[test]
    fn a_kept_read_is_the_same_read_for_the_same_revision_and_outline() {
        let reads = EncodedReads::new(4096);
        let outline = Arc::new(Outline::default());
        let written = read(3, 10);
        reads.keep("d", 3, &outline, written.clone());
        let again = reads.get("d", 3, &outline).expect("kept");
        assert_eq!(&again, written.read());
        // Shared, not copied.
        assert!(std::ptr::eq(again.json(), written.read().json()));
    }

    #[test]
    fn a_kept_read_is_not_given_for_another_revision_outline_or_document() {
        let reads = EncodedReads::new(4096);
        let outline = Arc::new(Outline::default());
        reads.keep("d", 3, &outline, read(3, 10));
        assert!(reads.get("d", 4, &outline).is_none(), "another revision");
        let rebuilt = Arc::new(Outline::default());
        assert!(reads.get("d", 3, &rebuilt).is_none(), "another outline");
        assert!(reads.get("e", 3, &outline).is_none(), "another document");
        reads.forget("d");
        assert!(reads.get("d", 3, &outline).is_none(), "forgotten");
    }

    #[test]
    fn the_last_read_of_a_document_is_given_to_write_the_next_from() {
        let reads = EncodedReads::new(4096);
        let outline = Arc::new(Outline::default());
        assert!(reads.last("d").is_none());
        let written = read(3, 10);
        reads.keep("d", 3, &outline, written.clone());
        let last = reads.last("d").expect("kept");
        assert!(std::ptr::eq(last.read().json(), written.read().json()));
        assert!(reads.last("e").is_none(), "another document");
        reads.forget("d");
        assert!(reads.last("d").is_none(), "forgotten");
    }

    #[test]
    fn the_least_recently_read_go_first_when_over_the_byte_budget() {
        let one = read(1, 100).size();
        let reads = EncodedReads::new(2 * one);
        let outline = Arc::new(Outline::default());
        reads.keep("a", 1, &outline, read(1, 100));
        reads.keep("b", 1, &outline, read(1, 100));
        assert!(reads.get("a", 1, &outline).is_some(), "a read last");
        reads.keep("c", 1, &outline, read(1, 100));
        assert!(reads.get("b", 1, &outline).is_none(), "b went");
        assert!(reads.get("a", 1, &outline).is_some());
        assert!(reads.get("c", 1, &outline).is_some());
        // A document's new read takes its old one's place, not more room,
        // when the old one is still held (its buffers are not kept).
        let held = reads.get("a", 1, &outline);
        reads.keep("a", 2, &outline, read(2, 100));
        drop(held);
        assert!(reads.get("c", 1, &outline).is_some());
        assert!(reads.get("a", 2, &outline).is_some());
    }

    #[test]
    fn the_buffers_of_the_read_before_the_last_are_what_the_next_is_written_into() {
        let reads = EncodedReads::new(4096);
        let outline = Arc::new(Outline::default());
        assert_eq!(reads.buffers("d").size(), 0, "nothing kept");
        let first = read(1, 100);
        let at = first.read().json().as_ptr();
        reads.keep("d", 1, &outline, first);
        assert_eq!(reads.buffers("d").size(), 0, "one read kept");
        reads.keep("d", 2, &outline, read(2, 100));
        let buffers = reads.buffers("d");
        assert!(buffers.size() > 0, "the first read's buffers");
        let next = wire::encoded_read_into(3, &Outline::default(), None, buffers).expect("written");
        assert_eq!(next.read().json().as_ptr(), at, "written into them");
        assert_eq!(reads.buffers("d").size(), 0, "taken");
        // A read somebody still holds keeps its buffers.
        let held = reads.get("d", 2, &outline).expect("kept");
        reads.keep("d", 3, &outline, next);
        assert_eq!(reads.buffers("d").size(), 0, "the last read is held");
        drop(held);
    }

    #[test]
    fn kept_buffers_count_against_the_budget() {
        let reads = EncodedReads::new(4096);
        let outline = Arc::new(Outline::default());
        reads.keep("d", 1, &outline, read(1, 100));
        let one = reads.kept.lock().expect("shelf").bytes;
        reads.keep("d", 2, &outline, read(2, 100));
        let with_buffers = reads.kept.lock().expect("shelf").bytes;
        assert!(with_buffers > one, "{with_buffers} ≤ {one}");
        let buffers = reads.buffers("d");
        let without = reads.kept.lock().expect("shelf").bytes;
        assert_eq!(without + buffers.size(), with_buffers);
        reads.forget("d");
        assert_eq!(reads.kept.lock().expect("shelf").bytes, 0);
    }

    #[test]
    fn a_read_larger_than_the_budget_is_not_kept() {
        let reads = EncodedReads::new(read(1, 1).size() + 10);
        let outline = Arc::new(Outline::default());
        reads.keep("a", 1, &outline, read(1, 1));
        reads.keep("a", 2, &outline, read(2, 100));
        assert!(reads.get("a", 2, &outline).is_none());
        assert!(reads.get("a", 1, &outline).is_none(), "its old one went");
    }
}
