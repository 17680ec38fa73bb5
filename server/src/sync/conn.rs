//! A sync connection as the document task sees it: where to send its frames
//! and how to close it with a code and reason.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use margin_protocol::Role;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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

/// The document task's end of a connection.
#[derive(Debug)]
pub struct Conn {
    /// The connection's id.
    pub id: ConnId,
    /// The member's role; viewers may not change the document.
    pub role: Role,
    /// Frames to send. Bounded: a client that cannot keep up is closed so it
    /// resynchronises, rather than having frames silently dropped.
    pub outbox: mpsc::Sender<Bytes>,
    /// Closes the connection.
    pub closer: Closer,
}
