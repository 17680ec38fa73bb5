//! A sync connection as the document task sees it: where to send its frames
//! and how to close it with a code and reason.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use margin_protocol::sync::close;
use margin_protocol::Role;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::metrics::COUNTERS;

/// Identifies one sync connection within the server.
pub type ConnId = u64;

/// Closes a connection once, with the first code and reason given.
#[derive(Clone, Debug, Default)]
pub struct Closer {
    token: CancellationToken,
    reason: Arc<Mutex<Option<(u16, String)>>>,
}

impl Closer {
    /// Asks the connection's writer to close with `code` and `reason`. Later
    /// calls keep the first reason: it is the one that explains the close.
    pub fn close(&self, code: u16, reason: impl Into<String>) {
        if let Ok(mut slot) = self.reason.lock() {
            if slot.is_none() {
                *slot = Some((code, reason.into()));
            }
        }
        self.token.cancel();
    }

    /// Resolves once [`Closer::close`] has been called.
    pub async fn closed(&self) {
        self.token.cancelled().await;
    }

    /// The code and reason given, if any.
    pub fn reason(&self) -> Option<(u16, String)> {
        self.reason.lock().ok().and_then(|slot| slot.clone())
    }
}

/// The close told to a member's connection whose access changed to
/// `role`: final once it is no longer a member (`None`), else one the
/// client reconnects after, joining with the new role.
pub fn access_close(role: Option<Role>) -> (u16, String) {
    match role {
        None => (
            close::REMOVED,
            "you are no longer a member of this document".into(),
        ),
        Some(role) => (
            close::ACCESS_CHANGED,
            format!(
                "your role on this document changed to {}; reconnect",
                role.as_str()
            ),
        ),
    }
}

/// Frames waiting to be written to one connection, bounded in count and in
/// bytes: a client that cannot keep up is closed so it resyncs, and never
/// makes the server hold an unbounded backlog for it.
///
/// The queue takes no memory while it is empty, grows with a burst and
/// gives the room back once the burst is written: most connections are
/// idle, and a channel that keeps a block of slots for each held that
/// block on every one of them.
#[derive(Debug)]
pub struct Outbox {
    shared: Arc<Shared>,
    max_frames: usize,
    max_bytes: usize,
}

/// The writer's end of an [`Outbox`].
#[derive(Debug)]
pub struct OutboxReader {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Rung on every frame queued and when either end goes.
    ready: Notify,
}

#[derive(Debug, Default)]
struct Queue {
    frames: VecDeque<Bytes>,
    /// Bytes of `frames`.
    bytes: usize,
    /// The document task dropped its end: nothing more will come.
    sender_gone: bool,
    /// The writer dropped its end: nothing more is taken.
    reader_gone: bool,
}

/// Room kept in an outbox that has emptied; more is given back.
const KEPT_SLOTS: usize = 8;

/// Why a frame was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The outbox is full (frames or bytes): the client is too slow.
    Full,
    /// The writer is gone.
    Closed,
}

/// An outbox of at most `frames` frames and about `max_bytes` bytes (a
/// single frame larger than that is still accepted into an empty outbox).
pub fn outbox(frames: usize, max_bytes: usize) -> (Outbox, OutboxReader) {
    let shared = Arc::new(Shared::default());
    (
        Outbox {
            shared: shared.clone(),
            max_frames: frames.max(1),
            max_bytes,
        },
        OutboxReader { shared },
    )
}

impl Outbox {
    /// Queues `frame` without waiting.
    pub fn try_push(&self, frame: Bytes) -> Result<(), Refused> {
        let size = frame.len();
        {
            let mut queue = self.shared.lock();
            if queue.reader_gone {
                return Err(Refused::Closed);
            }
            let full = queue.frames.len() >= self.max_frames
                || (queue.bytes > 0 && queue.bytes + size > self.max_bytes);
            if full {
                return Err(Refused::Full);
            }
            queue.frames.push_back(frame);
            queue.bytes += size;
        }
        COUNTERS
            .outbox_bytes
            .fetch_add(bytes(size), Ordering::Relaxed);
        self.shared.ready.notify_one();
        Ok(())
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.shared.lock().sender_gone = true;
        self.shared.ready.notify_one();
    }
}

impl OutboxReader {
    /// The next frame to write; `None` once the document task let go and
    /// everything queued was taken.
    pub async fn recv(&mut self) -> Option<Bytes> {
        loop {
            // Taken before looking, so a frame queued in between still
            // wakes this read (a notification without a waiter is kept).
            let ready = self.shared.ready.notified();
            {
                let mut queue = self.shared.lock();
                if let Some(frame) = queue.frames.pop_front() {
                    queue.bytes -= frame.len();
                    if queue.frames.is_empty() && queue.frames.capacity() > KEPT_SLOTS {
                        queue.frames.shrink_to(KEPT_SLOTS);
                    }
                    drop(queue);
                    COUNTERS
                        .outbox_bytes
                        .fetch_sub(bytes(frame.len()), Ordering::Relaxed);
                    return Some(frame);
                }
                if queue.sender_gone {
                    return None;
                }
            }
            ready.await;
        }
    }
}

impl Drop for OutboxReader {
    fn drop(&mut self) {
        // Frames never written leave the fan-out queue with the connection.
        let left = {
            let mut queue = self.shared.lock();
            queue.reader_gone = true;
            queue.frames.clear();
            std::mem::take(&mut queue.bytes)
        };
        COUNTERS
            .outbox_bytes
            .fetch_sub(bytes(left), Ordering::Relaxed);
    }
}

impl Shared {
    /// The queue; a panic while it was held leaves nothing half-done in it
    /// (each change is one push or pop and its byte count).
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn bytes(size: usize) -> i64 {
    i64::try_from(size).unwrap_or(i64::MAX)
}

/// The document task's end of a connection.
#[derive(Debug)]
pub struct Conn {
    /// The connection's id.
    pub id: ConnId,
    /// The member's account name: whose edits these are (the document's
    /// `edited_by`), and whose sockets an access change closes.
    pub account: Arc<str>,
    /// The member's role; viewers may not change the document.
    pub role: Role,
    /// Frames to send. Bounded: a client that cannot keep up is closed so it
    /// resynchronises, rather than having frames silently dropped.
    pub outbox: Outbox,
    /// Closes the connection.
    pub closer: Closer,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(size: usize) -> Bytes {
        Bytes::from(vec![0; size])
    }

    #[tokio::test]
    async fn frames_come_out_in_order_and_end_once_the_task_lets_go() {
        let (outbox, mut reader) = outbox(4, 1024);
        outbox.try_push(frame(1)).unwrap();
        outbox.try_push(frame(2)).unwrap();
        drop(outbox);
        assert_eq!(reader.recv().await.map(|f| f.len()), Some(1));
        assert_eq!(reader.recv().await.map(|f| f.len()), Some(2));
        assert_eq!(reader.recv().await, None);
    }

    #[tokio::test]
    async fn a_waiting_writer_wakes_for_a_frame() {
        let (outbox, mut reader) = outbox(4, 1024);
        let writer = tokio::spawn(async move { reader.recv().await.map(|f| f.len()) });
        tokio::task::yield_now().await;
        outbox.try_push(frame(3)).unwrap();
        assert_eq!(writer.await.unwrap(), Some(3));
    }

    #[test]
    fn an_outbox_refuses_past_its_frames_or_bytes_but_takes_one_large_frame_when_empty() {
        let (outbox, _reader) = outbox(2, 100);
        outbox.try_push(frame(150)).unwrap();
        assert_eq!(outbox.try_push(frame(1)), Err(Refused::Full));
        let (outbox, _reader) = super::outbox(2, 100);
        outbox.try_push(frame(10)).unwrap();
        outbox.try_push(frame(10)).unwrap();
        assert_eq!(outbox.try_push(frame(10)), Err(Refused::Full));
    }

    #[test]
    fn a_frame_for_a_writer_that_is_gone_is_refused_as_closed() {
        let (outbox, reader) = outbox(2, 100);
        drop(reader);
        assert_eq!(outbox.try_push(frame(1)), Err(Refused::Closed));
    }

    #[tokio::test]
    async fn an_emptied_outbox_gives_back_the_room_a_burst_took() {
        let (outbox, mut reader) = outbox(512, 1 << 20);
        for _ in 0..256 {
            outbox.try_push(frame(1)).unwrap();
        }
        assert!(outbox.shared.lock().frames.capacity() >= 256);
        for _ in 0..256 {
            reader.recv().await.unwrap();
        }
        assert!(outbox.shared.lock().frames.capacity() <= KEPT_SLOTS);
    }
}
