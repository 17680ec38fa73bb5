//! The machine links open on this node (SPEC L1, L8, A1, A2): each link's
//! handle ([`Link`], what a session sends through), how it ended
//! ([`LinkEnd`]), and the registry of open links ([`Links`]), so revoking
//! a machine closes them. The loop that serves a link lives in `machine`.

/// How a link ended, as its sessions see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkEnd {
    /// Closed with no `detach` or refusal, or by the server as unresponsive:
    /// a resumable link's sessions in use are kept (SPEC L2).
    Dropped,
    /// The machine detached on purpose.
    Detached,
    /// The server closed it for a refusal (a bad frame, revocation).
    Refused,
    /// Another link of the account took its work over (`resume`).
    Superseded,
    /// The server is shutting down: nothing is announced (SPEC L9).
    Shutdown,
}

impl LinkEnd {
    /// The end a link's close code (if the server closed it) means.
    pub fn of(closed_with: Option<(u16, String)>) -> Self {
        match closed_with.map(|(code, _)| code) {
            None | Some(close::UNRESPONSIVE) => LinkEnd::Dropped,
            Some(close::DETACHED) => LinkEnd::Detached,
            Some(close::SUPERSEDED) => LinkEnd::Superseded,
            Some(close::GOING_AWAY) => LinkEnd::Shutdown,
            Some(_) => LinkEnd::Refused,
        }
    }
}

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use margin_protocol::link::{close, ServerMessage};
use margin_protocol::RefusalCode;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::auth::MACHINE_CREDENTIAL_TTL;
use crate::storage::Machine;
use crate::sync::conn::Closer;
use crate::watchers::Watchers;

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
    /// How long a machine credential opens links (SPEC L8; default
    /// [`MACHINE_CREDENTIAL_TTL`], 15 minutes). Pairing issues one for this
    /// long, and each link is sent a fresh one every third of it.
    pub credential_ttl: Duration,
}

impl Default for LinkSettings {
    fn default() -> Self {
        LinkSettings {
            hello_timeout: Duration::from_secs(10),
            heartbeat: Duration::from_secs(15),
            missed_heartbeats: 3,
            credential_ttl: MACHINE_CREDENTIAL_TTL,
        }
    }
}

impl LinkSettings {
    /// How often a link is sent a fresh credential: a third of the
    /// credential's lifetime, so two renewals can fail before the newest
    /// credential the machine holds expires.
    pub fn credential_renewal(&self) -> Duration {
        (self.credential_ttl / 3).max(Duration::from_millis(10))
    }
}

/// How many server messages may wait for one link before it counts as
/// unable to keep up and is closed.
const LINK_OUTBOX: usize = 256;

/// One open link, as others reach it.
#[derive(Clone, Debug)]
pub struct Link {
    /// The link's id.
    pub id: u64,
    /// The machine.
    pub machine: Machine,
    /// Most run attempts each of its sessions keeps live at once, as its
    /// `hello` declared (SPEC R2).
    pub run_capacity: usize,
    /// Whether `resumable-sessions` was granted: an unexpected drop then
    /// keeps the sessions in use (SPEC L1, L2).
    pub resumable: bool,
    /// Whether its manifest declared `planning: true`: sessions it starts
    /// keep a durable plan (SPEC U1), pinned for their life.
    pub planning: bool,
    /// Frames for the machine, serialized by whoever sends them, so a large
    /// result is never encoded on the link's own task.
    outbox: mpsc::Sender<String>,
    closer: Closer,
}

/// What a link's accepted `hello` declared.
#[derive(Clone, Copy, Debug)]
pub struct Terms {
    /// Most live run attempts per session (SPEC R2).
    pub run_capacity: usize,
    /// `resumable-sessions` granted (SPEC L1).
    pub resumable: bool,
    /// The manifest's `planning` (SPEC U1).
    pub planning: bool,
}

impl Link {
    /// Queues `message` for the machine; false (and the link closed) when
    /// it cannot keep up or is gone.
    pub fn send(&self, message: &ServerMessage) -> bool {
        match serde_json::to_string(message) {
            Ok(frame) => self.send_frame(frame),
            Err(_) => false,
        }
    }

    /// Queues an encoded message for the machine, as [`Link::send`].
    pub fn send_frame(&self, frame: String) -> bool {
        match self.outbox.try_send(frame) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.closer
                    .close(close::UNRESPONSIVE, "the machine is not reading its link");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
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
    /// Machine id → its open links.
    open: Mutex<HashMap<String, Vec<Link>>>,
    next: AtomicU64,
    /// Told when an account's machines link or leave: whether a
    /// document's Planner is available depends on it (SPEC B1a).
    watchers: Watchers,
    /// Woken whenever a link opens.
    opened: tokio::sync::Notify,
}

impl Links {
    /// Links that close when `shutdown` fires, telling `watchers` as
    /// machines link and leave.
    pub fn new(settings: LinkSettings, shutdown: CancellationToken, watchers: Watchers) -> Self {
        Links {
            inner: Arc::new(Inner {
                settings,
                shutdown,
                open: Mutex::new(HashMap::new()),
                next: AtomicU64::new(1),
                watchers,
                opened: tokio::sync::Notify::new(),
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

    /// Registers a link of `machine` once its `hello` is accepted; returns
    /// it and the messages to write to it.
    pub fn open(
        &self,
        machine: &Machine,
        terms: Terms,
        closer: Closer,
    ) -> (Link, mpsc::Receiver<String>) {
        let (outbox, rx) = mpsc::channel(LINK_OUTBOX);
        let link = self.link(machine, terms, outbox, closer);
        if let Ok(mut open) = self.inner.open.lock() {
            open.entry(machine.id.clone())
                .or_default()
                .push(link.clone());
        }
        self.inner.watchers.ring_owner(&machine.account.id);
        self.inner.opened.notify_waiters();
        (link, rx)
    }

    fn link(
        &self,
        machine: &Machine,
        terms: Terms,
        outbox: mpsc::Sender<String>,
        closer: Closer,
    ) -> Link {
        Link {
            id: self.inner.next.fetch_add(1, Ordering::Relaxed),
            machine: machine.clone(),
            run_capacity: terms.run_capacity,
            resumable: terms.resumable,
            planning: terms.planning,
            outbox,
            closer,
        }
    }

    /// Forgets `link`.
    pub fn close(&self, link: &Link) {
        if let Ok(mut open) = self.inner.open.lock() {
            if let Some(links) = open.get_mut(&link.machine.id) {
                links.retain(|l| l.id != link.id);
                if links.is_empty() {
                    open.remove(&link.machine.id);
                }
            }
        }
        self.inner.watchers.ring_owner(&link.machine.account.id);
    }

    /// An open link of one of `account`'s machines (the oldest), if any: the
    /// machine a document's Planner binds to.
    pub fn of_account(&self, account: &str) -> Option<Link> {
        let open = self.inner.open.lock().ok()?;
        open.values()
            .flatten()
            .filter(|link| link.machine.account.id == account)
            .min_by_key(|link| link.id)
            .cloned()
    }

    /// `machine`'s newest open link, if it has one.
    pub fn newest_of(&self, machine: &str) -> Option<Link> {
        let open = self.inner.open.lock().ok()?;
        open.get(machine)?
            .iter()
            .max_by_key(|link| link.id)
            .cloned()
    }

    /// [`Links::of_account`], waiting up to `within` for one to open.
    pub async fn of_account_within(&self, account: &str, within: Duration) -> Option<Link> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let opened = self.inner.opened.notified();
            if let Some(link) = self.of_account(account) {
                return Some(link);
            }
            if tokio::time::timeout_at(deadline, opened).await.is_err() {
                return self.of_account(account);
            }
        }
    }

    /// Closes `link`: another link took its work over (SPEC L3).
    pub fn supersede(&self, link: &Link) {
        link.closer
            .close(close::SUPERSEDED, "another link took this link's work over");
        self.close(link);
    }

    /// How many links are open, for `/metrics`.
    pub fn count(&self) -> usize {
        self.inner
            .open
            .lock()
            .map(|open| open.values().map(Vec::len).sum())
            .unwrap_or(0)
    }

    /// Whether link `id` is still open.
    pub fn is_open(&self, id: u64) -> bool {
        self.inner
            .open
            .lock()
            .map(|open| open.values().flatten().any(|l| l.id == id))
            .unwrap_or(false)
    }

    /// Closes every link of a revoked machine (SPEC P3).
    pub fn revoke(&self, machine: &str) {
        let closers = match self.inner.open.lock() {
            Ok(mut open) => open.remove(machine).unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        for link in closers {
            self.inner.watchers.ring_owner(&link.machine.account.id);
            link.closer.close(
                close::REVOKED,
                "machine revoked; pair it again to reconnect",
            );
        }
    }
}

/// A refusal that answers no particular call.
pub(crate) fn refusal(code: RefusalCode, message: impl Into<String>) -> ServerMessage {
    ServerMessage::Refusal {
        code,
        message: message.into(),
        call_id: None,
        session: None,
        turn: None,
        run: None,
    }
}
