//! A sync connection as the document task sees it: where to send its frames
//! and how to close it with a code and reason.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use margin_protocol::sync::close;
use margin_protocol::Role;
use tokio::sync::mpsc;
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
#[derive(Debug)]
pub struct Outbox {
    tx: mpsc::Sender<Bytes>,
    queued: Arc<AtomicUsize>,
    max_bytes: usize,
}

/// The writer's end of an [`Outbox`].
#[derive(Debug)]
pub struct OutboxReader {
    rx: mpsc::Receiver<Bytes>,
    queued: Arc<AtomicUsize>,
}

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
    let (tx, rx) = mpsc::channel(frames.max(1));
    let queued = Arc::new(AtomicUsize::new(0));
    (
        Outbox {
            tx,
            queued: queued.clone(),
            max_bytes,
        },
        OutboxReader { rx, queued },
    )
}

impl Outbox {
    /// Queues `frame` without waiting.
    pub fn try_push(&self, frame: Bytes) -> Result<(), Refused> {
        let size = frame.len();
        let before = self.queued.fetch_add(size, Ordering::AcqRel);
        if before > 0 && before + size > self.max_bytes {
            self.queued.fetch_sub(size, Ordering::AcqRel);
            return Err(Refused::Full);
        }
        self.tx.try_send(frame).map_err(|error| {
            self.queued.fetch_sub(size, Ordering::AcqRel);
            match error {
                mpsc::error::TrySendError::Full(_) => Refused::Full,
                mpsc::error::TrySendError::Closed(_) => Refused::Closed,
            }
        })?;
        COUNTERS
            .outbox_bytes
            .fetch_add(bytes(size), Ordering::Relaxed);
        Ok(())
    }
}

impl OutboxReader {
    /// The next frame to write.
    pub async fn recv(&mut self) -> Option<Bytes> {
        let frame = self.rx.recv().await?;
        self.queued.fetch_sub(frame.len(), Ordering::AcqRel);
        COUNTERS
            .outbox_bytes
            .fetch_sub(bytes(frame.len()), Ordering::Relaxed);
        Some(frame)
    }
}

impl Drop for OutboxReader {
    fn drop(&mut self) {
        // Frames never written leave the fan-out queue with the connection.
        let left = self.queued.swap(0, Ordering::AcqRel);
        COUNTERS
            .outbox_bytes
            .fetch_sub(bytes(left), Ordering::Relaxed);
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
