//! Planner sessions (SPEC P, T, L, U, W, E): one driver task per live
//! session, each owning its `margin_planner::PlannerSession`, and the
//! registry that finds them.
//!
//! [`Sessions`] is what the rest of the server calls: Chat's `@planner`,
//! the machine link's messages, people's answers, Stop and Resume,
//! archiving and deleting. Each call finds the one driver it concerns — by
//! session, document or machine id, never by scanning — and queues an
//! input in its mailbox; a tool call runs in that driver, in order within
//! its session, concurrently with every other. The machine's own word for
//! a session is never enough: a message is routed only to a session of
//! the machine whose link carried it.
//!
//! Here: the registry and how a driver starts and is forgotten; `routing`
//! takes a machine link's messages to their session, `people` what people
//! and owners do to one, and `views` what they see of it.
//!
//! A driver commits each step (`commit`: journal, feed and snapshots in one
//! transaction, grouped across sessions by the [`commit::Journal`] task)
//! before it reveals anything; `restore` takes sessions back from their
//! journals when the server starts; `feeds` shows committed events to
//! applications.

mod commit;
mod driver;
mod feed;
mod feeds;
mod input;
mod people;
mod reader;
mod restore;
mod result_frame;
mod resume;
mod routing;
mod views;

pub use commit::Keeping;
pub use feed::{Entry, Feed};
pub use feeds::Feeds;
pub use people::ResumeError;
pub use reader::{Delivery, Reader};
pub use resume::{resume_refusal, ResumeAnswered, ResumeUnderway};

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use margin_planner::{Millis, PlannerSession, ReleaseReason, ReleaseTrigger, Shown, Timing};
use margin_protocol::sessions::SessionSnapshot;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use commit::Journal;
use driver::Driver;
use input::Input;

use crate::cluster::{Cluster, Lease, TakeRefused};
use crate::link::{Link, Links};
use crate::storage::Account;
use crate::sync::Hub;
use crate::watchers::Bell;

/// How many events each session keeps behind its snapshot by default
/// (`MARGIN_SESSION_EVENTS_RETAINED`). A reader further behind resyncs.
pub const DEFAULT_RETAINED: u64 = 10_000;

/// Journal records between two domain snapshots.
const SNAPSHOT_EVERY: u64 = 256;

/// Most inputs waiting for one session's driver; past it the machine is
/// told the session is busy, with `retry`.
const MAILBOX: usize = 1_024;

/// Longest a link waits for room in a session's mailbox.
const BUSY_WAIT: Duration = Duration::from_secs(1);

/// Longest id (session, turn, call, run, request) a machine may name.
const MAX_ID_BYTES: usize = 128;

/// The server's Planner sessions; cheap to clone.
#[derive(Clone)]
pub struct Sessions {
    shared: Arc<Shared>,
}

/// What every driver shares.
pub(crate) struct Shared {
    hub: Hub,
    links: Links,
    journal: Journal,
    feeds: Feeds,
    keeping: Keeping,
    timing: Timing,
    /// How often an idle, viewed session checks its viewers.
    viewers_every: Duration,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    registry: Mutex<Registry>,
    /// In a cluster: each session holds its document's lease for its life
    /// and its writes are fenced on it (SPEC C1).
    cluster: Option<Cluster>,
}

/// Where each live session's driver is. Held only for lookups.
#[derive(Default)]
struct Registry {
    sessions: HashMap<String, Live>,
    /// Document → its session.
    documents: HashMap<String, String>,
    /// Machine → its sessions.
    machines: HashMap<String, BTreeSet<String>>,
    /// Documents archived or deleted: `@planner` binds no session to them.
    closed: HashSet<String>,
    /// Sessions the server released and told to `stop`, with the link they
    /// ran on: the machine's `stopped` for one is accepted quietly.
    released: HashMap<String, Option<u64>>,
    /// Sessions being taken back from their journals (at most once each).
    restoring: HashSet<String>,
    /// Documents whose last session ended with a confirmed Stop, none
    /// having started since: their Planner shows as stopped (SPEC B1a).
    /// Not kept across a restart, where it shows as available again.
    stopped: HashSet<String>,
}

/// A live session, as the registry finds it.
struct Live {
    machine: String,
    account: String,
    mailbox: mpsc::Sender<Input>,
    /// The session as last committed; none until a new session's start
    /// is (nothing shows a session before that, not even its id).
    shown: watch::Receiver<Option<Shown>>,
}

impl Shared {
    /// Milliseconds since the Unix epoch: times in the journal keep their
    /// meaning across a restart (a run's true age, SPEC P4).
    fn now(&self) -> Millis {
        now()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A released session leaves the registry.
    fn forget(&self, session: &PlannerSession) {
        let mut registry = self.lock();
        let id = session.id();
        if session.released() == Some(ReleaseReason::Trigger(ReleaseTrigger::Stop)) {
            registry.stopped.insert(session.document().to_owned());
        }
        self.hub.watchers().ring(session.document(), Bell::Planner);
        if registry.sessions.remove(id).is_some() {
            if registry
                .documents
                .get(session.document())
                .map(String::as_str)
                == Some(id)
            {
                registry.documents.remove(session.document());
            }
            if let Some(sessions) = registry.machines.get_mut(session.machine()) {
                sessions.remove(id);
                if sessions.is_empty() {
                    registry.machines.remove(session.machine());
                }
            }
        }
    }

    /// `session` of `link`'s account moves to `link`'s machine (a `resume`
    /// from it): from now on that machine speaks for it. Its driver, if the
    /// account owns it.
    fn move_to(&self, session: &str, link: &Link) -> Option<mpsc::Sender<Input>> {
        let mut registry = self.lock();
        let live = registry
            .sessions
            .get_mut(session)
            .filter(|live| live.account == link.machine.account.id)?;
        let mailbox = live.mailbox.clone();
        let old = std::mem::replace(&mut live.machine, link.machine.id.clone());
        if old != link.machine.id {
            if let Some(sessions) = registry.machines.get_mut(&old) {
                sessions.remove(session);
                if sessions.is_empty() {
                    registry.machines.remove(&old);
                }
            }
            registry
                .machines
                .entry(link.machine.id.clone())
                .or_default()
                .insert(session.to_owned());
        }
        Some(mailbox)
    }

    /// The server released `session` and told its machine to stop.
    fn released_by_server(&self, session: &str, link: Option<u64>) {
        self.lock().released.insert(session.to_owned(), link);
    }

    /// Undoes [`Shared::released_by_server`] for a release not committed:
    /// the session carries on, and a `stopped` for it is its own again.
    fn not_released_by_server(&self, session: &str) {
        self.lock().released.remove(session);
    }

    /// Starts a driver for `session`, whose first step is `first`, on
    /// `link` (none: the machine is away) with its feed at `feed`, and
    /// registers it. A session taken back from its journal is shown at
    /// once (it is committed); a new one once its start is.
    #[allow(clippy::too_many_arguments)]
    fn spawn(
        self: &Arc<Self>,
        registry: &mut Registry,
        session: PlannerSession,
        first: margin_planner::Step,
        account: Account,
        link: Option<Link>,
        feed: SessionSnapshot,
        lease: Option<Lease>,
        stored: bool,
    ) -> (mpsc::Sender<Input>, oneshot::Receiver<()>) {
        let (mailbox, inputs) = mpsc::channel(MAILBOX);
        let (ready_tx, ready) = oneshot::channel();
        let (shown_tx, shown) = watch::channel(stored.then(|| session.shown()));
        let id = session.id().to_owned();
        registry.sessions.insert(
            id.clone(),
            Live {
                machine: session.machine().to_owned(),
                account: account.id.clone(),
                mailbox: mailbox.clone(),
                shown,
            },
        );
        registry
            .documents
            .insert(session.document().to_owned(), id.clone());
        registry.stopped.remove(session.document());
        if stored {
            self.hub.watchers().ring(session.document(), Bell::Planner);
        }
        registry
            .machines
            .entry(session.machine().to_owned())
            .or_default()
            .insert(id);
        let driver = Driver::new(session, feed, link, account, self.clone(), shown_tx, lease);
        self.tracker.spawn(driver.run(first, inputs, ready_tx));
        (mailbox, ready)
    }
}

/// Milliseconds since the Unix epoch.
fn now() -> Millis {
    Millis(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
    )
}

impl Sessions {
    /// The sessions of `hub`'s documents and `links`' machines; drivers run
    /// on `tracker` and stop at `shutdown`.
    pub fn new(
        hub: Hub,
        links: Links,
        timing: Timing,
        retained: u64,
        tracker: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let store = hub.store().clone();
        let cluster = hub.cluster().cloned();
        let ring = usize::try_from(retained).unwrap_or(usize::MAX);
        let shortest = timing.idle.0.min(timing.attach_grace.0);
        Sessions {
            shared: Arc::new(Shared {
                journal: Journal::new(store.clone()),
                feeds: Feeds::new(store, ring, shutdown.clone()),
                hub,
                links,
                keeping: Keeping {
                    events: retained,
                    snapshot_every: SNAPSHOT_EVERY,
                },
                timing,
                viewers_every: Duration::from_millis((shortest / 4).clamp(10, 5_000)),
                tracker: tracker.clone(),
                shutdown,
                registry: Mutex::default(),
                cluster,
            }),
        }
    }

    /// The sessions' feeds, for applications (SPEC E1, E2).
    pub fn feeds(&self) -> &Feeds {
        &self.shared.feeds
    }

    /// Takes back the sessions a previous run left open; call once at
    /// start, before serving. A server alone only: in a cluster,
    /// [`Sessions::sweep`] takes them back one document at a time.
    pub async fn restore(&self) {
        restore::restore(&self.shared).await;
    }

    /// Whether session `id` runs here.
    pub fn runs_here(&self, id: &str) -> bool {
        self.shared.lock().sessions.contains_key(id)
    }

    /// In a cluster: takes open session `id` back here from its journal,
    /// holding its document's lease, unless it runs here already; refused
    /// when another live node holds the document (it runs there).
    pub async fn take_back_here(&self, id: &str) -> Result<(), TakeRefused> {
        restore::take_back_one(&self.shared, id).await
    }

    /// In a cluster, every `every` until shutdown: takes back the open
    /// sessions whose document no live node holds — their node stopped —
    /// taking each document's lease first (SPEC C3).
    pub async fn sweep(self, every: Duration) {
        restore::sweep(&self.shared, every).await;
    }
}
