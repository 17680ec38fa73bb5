//! Planner sessions as applications follow them (SPEC U1–U6, E1–E2): each
//! session's event log and the snapshot folded from it, written by one
//! task, and the plan `update_plan` keeps.
//!
//! [`SessionLog`] is the handle: [`Planners`](crate::planners::Planners)
//! queues the events its sessions' changes produce (in the order they
//! happened, since it queues them under its own lock) and sends
//! `update_plan` calls; the writer commits each session's events with its
//! snapshot in one transaction, then wakes readers. A plan update is
//! judged against the snapshot as of every event queued before it, so a
//! call from a turn that ended, or after a Stop, cannot land late (U5).

mod diff;
mod feed;
mod plan;
mod reader;
mod writer;

pub use diff::Published;
pub use feed::{Entry, Feed};
pub use reader::{Reader, Step};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use margin_protocol::decisions::ToolRefusal;
use margin_protocol::sessions::{SessionEvent, SessionSnapshot, UpdatePlanInput, UpdatePlanOutput};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::storage::{StorageError, Store};

/// How many events each session keeps behind its snapshot by default
/// (`SESSION_EVENTS_RETAINED`). A reader further behind resyncs.
pub const DEFAULT_RETAINED: u64 = 10_000;

/// What an `update_plan` call came to.
#[derive(Debug)]
pub enum PlanDecision {
    /// Committed with its `plan_updated` event.
    Updated(UpdatePlanOutput),
    /// Refused; nothing changed. A rule the list or revision broke is
    /// committed as `tool_finished`; a call whose turn is over is not.
    Refused(ToolRefusal),
}

/// Who a new session belongs to.
#[derive(Clone, Debug)]
pub struct Owner {
    /// Its document.
    pub document: String,
    /// Its owner's account.
    pub account: String,
    /// The machine it runs on.
    pub machine: String,
}

enum Command {
    Events {
        session: String,
        owner: Option<Owner>,
        events: Vec<SessionEvent>,
    },
    UpdatePlan {
        session: String,
        turn: String,
        call_id: String,
        input: UpdatePlanInput,
        decided: oneshot::Sender<Result<PlanDecision, StorageError>>,
    },
    Flush(oneshot::Sender<()>),
}

/// The sessions' log; cheap to clone.
#[derive(Clone)]
pub struct SessionLog {
    inner: Arc<Inner>,
}

struct Inner {
    commands: mpsc::UnboundedSender<Command>,
    feeds: Feeds,
    store: Store,
    shutdown: CancellationToken,
}

/// The live sessions' feeds, shared by the writer and readers; each ring
/// keeps at most `capacity` events.
#[derive(Clone)]
struct Feeds {
    map: Arc<Mutex<HashMap<String, Arc<Feed>>>>,
    capacity: usize,
}

impl Feeds {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Feed>>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get_or_new(&self, session: &str, cursor: u64) -> Arc<Feed> {
        self.lock()
            .entry(session.to_owned())
            .or_insert_with(|| Arc::new(Feed::new(cursor, self.capacity)))
            .clone()
    }
}

impl SessionLog {
    /// Starts the writer on `tracker`, keeping `retained` events behind
    /// each snapshot; it commits what is queued and stops at `shutdown`.
    pub fn start(
        store: Store,
        retained: u64,
        tracker: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let (commands, queue) = mpsc::unbounded_channel();
        let feeds = Feeds {
            map: Arc::default(),
            capacity: usize::try_from(retained).unwrap_or(usize::MAX),
        };
        let writer = writer::Writer::new(store.clone(), feeds.clone(), retained);
        tracker.spawn(writer::run(writer, queue, shutdown.clone()));
        SessionLog {
            inner: Arc::new(Inner {
                commands,
                feeds,
                store,
                shutdown,
            }),
        }
    }

    /// Opens session `session` of `owner` with its first event.
    pub fn begin(&self, session: &str, owner: Owner, started: SessionEvent) {
        self.send(Command::Events {
            session: session.to_owned(),
            owner: Some(owner),
            events: vec![started],
        });
    }

    /// Queues `events` of `session`, after everything queued before.
    pub fn append(&self, session: &str, events: Vec<SessionEvent>) {
        if !events.is_empty() {
            self.send(Command::Events {
                session: session.to_owned(),
                owner: None,
                events,
            });
        }
    }

    /// Judges and commits an `update_plan` call of `turn`, after every
    /// event queued before it (SPEC U2–U5).
    pub async fn update_plan(
        &self,
        session: &str,
        turn: &str,
        call_id: &str,
        input: UpdatePlanInput,
    ) -> Result<PlanDecision, StorageError> {
        let (decided, decision) = oneshot::channel();
        self.send(Command::UpdatePlan {
            session: session.to_owned(),
            turn: turn.to_owned(),
            call_id: call_id.to_owned(),
            input,
            decided,
        });
        decision
            .await
            .map_err(|_| StorageError::Durability("the session log stopped".into()))?
    }

    /// Waits until everything queued so far is committed (or failed).
    pub async fn flush(&self) {
        let (done, flushed) = oneshot::channel();
        self.send(Command::Flush(done));
        let _ = flushed.await;
    }

    /// Session `session`'s stored snapshot and its owner's document.
    pub async fn snapshot(
        &self,
        session: &str,
    ) -> Result<Option<(String, SessionSnapshot)>, StorageError> {
        let Some(stored) = self.inner.store.session(session).await? else {
            return Ok(None);
        };
        let snapshot = serde_json::from_str(&stored.snapshot)
            .map_err(|e| StorageError::Corrupt(format!("session snapshot: {e}")))?;
        Ok(Some((stored.document, snapshot)))
    }

    /// A reader of `snapshot`'s session from `after` on.
    pub fn reader(&self, snapshot: &SessionSnapshot, after: u64) -> Reader {
        let ended = snapshot.state == margin_protocol::sessions::SessionState::Ended;
        let feed = if ended {
            // Nothing more will be written: no need to be woken.
            Arc::new(Feed::new(snapshot.cursor, 0))
        } else {
            self.inner
                .feeds
                .get_or_new(&snapshot.session, snapshot.cursor)
        };
        Reader::new(
            self.inner.store.clone(),
            snapshot.session.clone(),
            feed,
            (after, snapshot.cursor, ended),
            self.inner.shutdown.clone(),
        )
    }

    fn send(&self, command: Command) {
        // The writer lives until shutdown; after it, nothing is written.
        if self.inner.commands.send(command).is_err() {
            tracing::warn!("session log is closed; event not written");
        }
    }
}
