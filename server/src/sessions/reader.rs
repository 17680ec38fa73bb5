//! One application's read of a session's events from its cursor (SPEC
//! E2): from the ring when close behind, else from storage, then waiting
//! for the next commit. Every event after the cursor is delivered, in
//! order and once, or the reader is told to resync — never a silent gap.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use margin_protocol::sessions::MAX_EVENTS_PER_READ;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::feed::{Entry, Feed, Ring};
use crate::metrics::COUNTERS;
use crate::storage::Store;

/// How long a reader waits in silence before a keep-alive comment, so
/// proxies do not close an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What a reader produces next.
#[derive(Debug)]
pub enum Delivery {
    /// SSE frames of the events after the cursor, in order.
    Events(Bytes),
    /// Nothing new for a while.
    KeepAlive,
    /// The cursor cannot be continued: refetch the snapshot.
    Resync(String),
    /// The session ended and its last event was delivered, or the server
    /// is stopping or storage failed (reconnect from the cursor).
    End,
}

/// A read of one session's events (counted in `/metrics` while it lasts).
pub struct Reader {
    store: Store,
    session: String,
    feed: Arc<Feed>,
    watch: watch::Receiver<u64>,
    cursor: u64,
    /// The cursor of `session_ended`, once known: the stream ends there.
    ends_at: Option<u64>,
    resync: Option<String>,
    shutdown: CancellationToken,
}

impl Reader {
    /// A read of `session` after `after`, whose log is at `current` and
    /// ends there if `ended`.
    pub(super) fn new(
        store: Store,
        session: String,
        feed: Arc<Feed>,
        (after, current, ended): (u64, u64, bool),
        shutdown: CancellationToken,
    ) -> Self {
        let resync = (after > current).then(|| {
            format!("cursor {after} is ahead of this session's log, which ends at {current}")
        });
        COUNTERS.session_streams.fetch_add(1, Ordering::Relaxed);
        Reader {
            store,
            session,
            watch: feed.watch(),
            feed,
            cursor: after,
            ends_at: ended.then_some(current),
            resync,
            shutdown,
        }
    }

    /// The cursor of the last event delivered.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The next events, waiting for them.
    pub async fn next(&mut self) -> Delivery {
        if let Some(reason) = self.resync.take() {
            return Delivery::Resync(reason);
        }
        loop {
            let ended = self.ends_at.is_some_and(|end| self.cursor >= end);
            if ended || self.shutdown.is_cancelled() {
                return Delivery::End;
            }
            // Marked seen before reading: a commit after this read wakes us.
            self.watch.borrow_and_update();
            let entries = match self.feed.after(self.cursor) {
                Ring::Covered(entries) => entries,
                Ring::Behind => match self
                    .store
                    .session_events(&self.session, self.cursor, MAX_EVENTS_PER_READ)
                    .await
                {
                    Ok(rows) => {
                        if rows.first().is_some_and(|row| row.seq != self.cursor + 1) {
                            return Delivery::Resync(format!(
                                "events after {} were pruned; the log now starts at {}",
                                self.cursor,
                                rows.first().map_or(0, |row| row.seq)
                            ));
                        }
                        rows.iter().map(|row| Arc::new(Entry::new(row))).collect()
                    }
                    Err(error) => {
                        warn!(session = %self.session, %error, "session events not read");
                        return Delivery::End;
                    }
                },
            };
            if let Some(last) = entries.last() {
                self.cursor = last.seq;
                if let Some(end) = entries.iter().find(|e| e.last) {
                    self.ends_at = Some(end.seq);
                }
                let mut frames = Vec::with_capacity(entries.iter().map(|e| e.frame.len()).sum());
                for entry in &entries {
                    frames.extend_from_slice(&entry.frame);
                }
                return Delivery::Events(Bytes::from(frames));
            }
            tokio::select! {
                changed = self.watch.changed() => {
                    if changed.is_err() {
                        return Delivery::End;
                    }
                }
                () = self.shutdown.cancelled() => return Delivery::End,
                () = tokio::time::sleep(KEEP_ALIVE) => return Delivery::KeepAlive,
            }
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        COUNTERS.session_streams.fetch_sub(1, Ordering::Relaxed);
    }
}
