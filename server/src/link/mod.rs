//! Machine links at `/machine` (SPEC L1, A1, A2): the registry of open
//! links, so revoking a machine closes them, and the socket loop
//! ([`socket`]).

pub mod socket;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use margin_protocol::link::close;
use tokio_util::sync::CancellationToken;

use crate::sync::conn::Closer;

/// Link timing.
#[derive(Clone, Copy, Debug)]
pub struct LinkSettings {
    /// How long a machine has to send `hello` after connecting.
    pub hello_timeout: Duration,
    /// How often the server sends `heartbeat`.
    pub heartbeat: Duration,
    /// How many heartbeats may go unanswered before the link is closed as
    /// unresponsive.
    pub missed_heartbeats: u32,
}

impl Default for LinkSettings {
    fn default() -> Self {
        LinkSettings {
            hello_timeout: Duration::from_secs(10),
            heartbeat: Duration::from_secs(15),
            missed_heartbeats: 3,
        }
    }
}

/// The open machine links.
#[derive(Clone)]
pub struct Links {
    inner: Arc<Inner>,
}

struct Inner {
    settings: LinkSettings,
    shutdown: CancellationToken,
    /// Machine id → the closers of its open links.
    open: Mutex<HashMap<String, Vec<(u64, Closer)>>>,
    next: AtomicU64,
}

impl Links {
    /// Links that close when `shutdown` fires.
    pub fn new(settings: LinkSettings, shutdown: CancellationToken) -> Self {
        Links {
            inner: Arc::new(Inner {
                settings,
                shutdown,
                open: Mutex::new(HashMap::new()),
                next: AtomicU64::new(1),
            }),
        }
    }

    /// The timing in force.
    pub fn settings(&self) -> LinkSettings {
        self.inner.settings
    }

    /// Fires when the server shuts down.
    pub fn shutdown(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    /// Registers a link of `machine`; returns its handle for [`Links::close`].
    pub fn open(&self, machine: &str, closer: Closer) -> u64 {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut open) = self.inner.open.lock() {
            open.entry(machine.to_owned())
                .or_default()
                .push((id, closer));
        }
        id
    }

    /// Forgets link `id` of `machine`.
    pub fn close(&self, machine: &str, id: u64) {
        if let Ok(mut open) = self.inner.open.lock() {
            if let Some(links) = open.get_mut(machine) {
                links.retain(|(link, _)| *link != id);
                if links.is_empty() {
                    open.remove(machine);
                }
            }
        }
    }

    /// Closes every link of a revoked machine (SPEC P3).
    pub fn revoke(&self, machine: &str) {
        let closers = match self.inner.open.lock() {
            Ok(mut open) => open.remove(machine).unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        for (_, closer) in closers {
            closer.close(
                close::REVOKED,
                "machine revoked; pair it again to reconnect",
            );
        }
    }
}
