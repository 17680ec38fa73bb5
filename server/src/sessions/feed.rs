//! Live delivery of a session's events (SPEC E2): a ring of the latest
//! committed events and a cursor that wakes readers.
//!
//! The log in storage is the source of truth; the ring only spares readers
//! a query when they are close behind, and the wake-up carries no events,
//! so a slow reader never loses any: it reads on from its own cursor, from
//! the ring or from storage, until it is level. A reader whose cursor was
//! pruned from storage is told to resync.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use tokio::sync::watch;

use crate::storage::StoredEvent;

/// Most committed events a session's ring keeps in memory (fewer when
/// fewer are retained in storage, so the ring never outlives the log).
pub const RING: usize = 1_024;

/// One committed event, with its SSE frame rendered once for every reader.
#[derive(Debug)]
pub struct Entry {
    /// Its cursor.
    pub seq: u64,
    /// `id: …`, `event: …`, `data: …` and the blank line.
    pub frame: Bytes,
    /// Whether it is `session_ended`: nothing follows it.
    pub last: bool,
}

impl Entry {
    /// Renders `event`'s frame. Its body is one line of JSON, so one
    /// `data:` line carries it.
    pub fn new(event: &StoredEvent) -> Self {
        Entry {
            seq: event.seq,
            last: event.kind == "session_ended",
            frame: Bytes::from(format!(
                "id: {}\nevent: {}\ndata: {}\n\n",
                event.seq, event.kind, event.body
            )),
        }
    }
}

/// One session's ring and wake-up.
#[derive(Debug)]
pub struct Feed {
    ring: Mutex<VecDeque<Arc<Entry>>>,
    capacity: usize,
    cursor: watch::Sender<u64>,
}

/// What the ring holds after a cursor.
pub enum Ring {
    /// The events after the cursor (empty: the reader is level).
    Covered(Vec<Arc<Entry>>),
    /// The ring starts later (or is empty): read storage.
    Behind,
}

impl Feed {
    /// An empty feed at `cursor` keeping up to `capacity` events.
    pub fn new(cursor: u64, capacity: usize) -> Self {
        Feed {
            ring: Mutex::new(VecDeque::new()),
            capacity: capacity.min(RING),
            cursor: watch::Sender::new(cursor),
        }
    }

    /// Adds committed events, in order, and wakes readers.
    pub fn push(&self, entries: Vec<Arc<Entry>>) {
        let Some(last) = entries.last().map(|e| e.seq) else {
            return;
        };
        {
            let mut ring = self.ring();
            ring.extend(entries);
            while ring.len() > self.capacity {
                ring.pop_front();
            }
        }
        self.cursor.send_replace(last);
    }

    /// The ring's events after `cursor`.
    pub fn after(&self, cursor: u64) -> Ring {
        let ring = self.ring();
        match ring.front() {
            Some(first) if first.seq <= cursor + 1 => {
                let skip = (cursor + 1 - first.seq) as usize;
                Ring::Covered(ring.iter().skip(skip).cloned().collect())
            }
            _ => Ring::Behind,
        }
    }

    /// A wake-up for each commit from now on.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.cursor.subscribe()
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Entry>>> {
        self.ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64) -> Arc<Entry> {
        Arc::new(Entry::new(&StoredEvent {
            seq,
            kind: "turn_started".into(),
            body: format!(r#"{{"kind":"turn_started","turn":"t{seq}"}}"#),
        }))
    }

    fn seqs(ring: Ring) -> Option<Vec<u64>> {
        match ring {
            Ring::Covered(entries) => Some(entries.iter().map(|e| e.seq).collect()),
            Ring::Behind => None,
        }
    }

    #[test]
    fn a_frame_is_one_sse_event_with_its_cursor_as_id() {
        let frame = entry(7).frame.clone();
        assert_eq!(
            std::str::from_utf8(&frame).unwrap(),
            "id: 7\nevent: turn_started\ndata: {\"kind\":\"turn_started\",\"turn\":\"t7\"}\n\n"
        );
    }

    #[test]
    fn the_ring_serves_a_reader_close_behind_and_sends_one_further_back_to_storage() {
        let feed = Feed::new(0, RING);
        assert_eq!(seqs(feed.after(0)), None, "empty: storage decides");
        feed.push((1..=RING as u64 + 10).map(entry).collect());
        assert_eq!(seqs(feed.after(3)), None, "pruned from the ring");
        let last = RING as u64 + 10;
        assert_eq!(seqs(feed.after(last - 2)), Some(vec![last - 1, last]));
        assert_eq!(seqs(feed.after(last)), Some(vec![]));
        assert_eq!(seqs(feed.after(10)).map(|s| s.len()), Some(RING));
    }

    #[test]
    fn a_push_wakes_a_watcher_with_the_last_cursor() {
        let feed = Feed::new(0, RING);
        let mut watch = feed.watch();
        feed.push(vec![entry(1), entry(2)]);
        assert!(watch.has_changed().unwrap());
        assert_eq!(*watch.borrow_and_update(), 2);
    }
}
