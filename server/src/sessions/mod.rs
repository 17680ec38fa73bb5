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
mod reader;
mod restore;
mod result_frame;
mod resume;

pub use commit::Keeping;
pub use feed::{Entry, Feed};
pub use feeds::Feeds;
pub use reader::{Delivery, Reader};
pub use resume::{resume_refusal, ResumeAnswered, ResumeUnderway};

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use margin_planner::{
    CallId, CardId, Held, Millis, PlannerSession, ReleaseReason, ReleaseTrigger, RequestId,
    ResumeRefusal, RunId, Start, Timing, TurnId,
};
use margin_protocol::chat::{ChatKind, ChatMessageView};
use margin_protocol::decisions::{AnswerBody, ToolRefusal};
use margin_protocol::link::{HeldSession, PlannerState, PlannerView, RunStatus, ServerMessage};
use margin_protocol::sessions::SessionSnapshot;
use margin_protocol::RefusalCode;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;
use uuid::Uuid;

use commit::Journal;
use driver::Driver;
use input::Input;

use crate::cluster::{Cluster, Lease, MachinesEnded, TakeRefused, Whose};
use crate::link::{refusal, Link, LinkEnd, Links};
use crate::storage::{Account, StorageError};
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

/// Why a Resume was refused.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The document has no Planner session.
    #[error("the document has no Planner session")]
    NoSession,
    /// No Stop waits to be confirmed.
    #[error("no Stop is waiting to be confirmed; there is nothing to resume")]
    NoStop,
    /// The machine is away: refused, not held (SPEC L4).
    #[error(
        "the Planner is disconnected; a Resume is not held for it, press it again once it is back"
    )]
    Away,
    /// Storage failed; nothing changed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

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
    shown: watch::Receiver<Option<Arc<PlannerSession>>>,
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
        let (shown_tx, shown) = watch::channel(stored.then(|| Arc::new(session.clone())));
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
                journal: Journal::start(store.clone(), tracker),
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

    /// A Chat message mentioned `@planner` (SPEC T1): it goes to the
    /// document's session — starting one on a linked machine of the owner
    /// if there is none — which starts a turn or queues it (T3), or the
    /// sender is told at once that no Planner is connected. Returns once
    /// what it caused is committed.
    pub async fn called(
        &self,
        document: &str,
        owner: &Account,
        message: ChatMessageView,
    ) -> Result<(), StorageError> {
        // In a cluster a new session holds its document's lease (the
        // call was relayed here because this node owns the document).
        let mut lease = match &self.shared.cluster {
            Some(cluster) => Some(cluster.hold(document).await.map_err(|refused| {
                StorageError::Conflict(format!("{refused}; send the message again"))
            })?),
            None => None,
        };
        // A session ending as the message arrives does not take it (its
        // driver drops the answer, or is gone): the message then binds a
        // new session rather than vanishing with the old one.
        for _ in 0..CALL_ATTEMPTS {
            let mailbox = {
                let mut registry = self.shared.lock();
                if registry.closed.contains(document) {
                    // Archived or deleted since the message was accepted: no
                    // turn starts (SPEC P3).
                    info!(
                        document,
                        "no Planner turn: the document is archived or deleted"
                    );
                    return Ok(());
                }
                let live = registry
                    .documents
                    .get(document)
                    .and_then(|id| registry.sessions.get(id))
                    // One whose start is not committed yet is starting.
                    .filter(|live| {
                        live.shown
                            .borrow()
                            .as_ref()
                            .is_none_or(|session| session.released().is_none())
                    })
                    .map(|live| live.mailbox.clone());
                match live {
                    Some(mailbox) => Some(mailbox),
                    None => self.bind(&mut registry, document, owner, &mut lease),
                }
            };
            let Some(mailbox) = mailbox else {
                let line = margin_planner::wording::not_connected(&owner.name);
                let author = margin_planner::wording::SYSTEM_AUTHOR;
                self.shared
                    .hub
                    .append_chat(document, author, ChatKind::System, &line)
                    .await?;
                return Ok(());
            };
            let (done, answer) = oneshot::channel();
            let input = Input::Message {
                message: message.clone(),
                done,
            };
            if mailbox.send(input).await.is_err() {
                continue;
            }
            if let Ok(result) = answer.await {
                return result;
            }
        }
        tracing::warn!(
            document,
            "a Planner message found only sessions that were ending"
        );
        Err(StorageError::Conflict(
            "the document's Planner session kept ending as the message arrived; send it again"
                .into(),
        ))
    }

    /// A new session for `document` on a linked machine of `owner`'s, if
    /// one is linked.
    fn bind(
        &self,
        registry: &mut Registry,
        document: &str,
        owner: &Account,
        lease: &mut Option<Lease>,
    ) -> Option<mpsc::Sender<Input>> {
        let link = self.shared.links.of_account(&owner.id)?;
        info!(document, machine = %link.machine.id, "Planner bound");
        let start = Start {
            session: Uuid::new_v4().to_string(),
            document: document.to_owned(),
            account: owner.id.clone(),
            machine: link.machine.id.clone(),
            machine_name: link.machine.name.clone(),
            planning: link.planning,
            run_capacity: link.run_capacity,
        };
        let (session, first) = PlannerSession::start(start, self.shared.timing, now());
        let account = link.machine.account.clone();
        let feed = SessionSnapshot::empty(session.id());
        let (mailbox, _ready) = self.shared.spawn(
            registry,
            session,
            first,
            account,
            Some(link),
            feed,
            lease.take(),
            false,
        );
        Some(mailbox)
    }

    /// The driver of `session` if it runs on `link`'s machine: the
    /// machine's word for a session is never enough.
    fn of_link(&self, link: &Link, session: &str) -> Option<mpsc::Sender<Input>> {
        self.shared
            .lock()
            .sessions
            .get(session)
            .filter(|live| live.machine == link.machine.id)
            .map(|live| live.mailbox.clone())
    }

    /// Queues `input` for `session` of `link`'s machine; the refusal to
    /// send back when there is no such session (`missing`) or it stays too
    /// busy (`busy`). A full mailbox makes the link wait — a burst from the
    /// machine slows the machine, it is not refused — but only for
    /// [`BUSY_WAIT`], so one session that does not keep up cannot hold up
    /// the link's other sessions for long.
    async fn route(
        &self,
        link: &Link,
        session: &str,
        input: Input,
        missing: impl FnOnce() -> ServerMessage,
        busy: impl FnOnce(String) -> ServerMessage,
    ) -> Option<ServerMessage> {
        let Some(mailbox) = self.of_link(link, session) else {
            return Some(missing());
        };
        match mailbox.send_timeout(input, BUSY_WAIT).await {
            Ok(()) => None,
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => Some(busy(format!(
                "session {session:?} has {MAILBOX} messages waiting; send this again shortly"
            ))),
            Err(mpsc::error::SendTimeoutError::Closed(_)) => Some(missing()),
        }
    }

    /// [`Sessions::route`] for a message about the session as a whole.
    async fn route_to_session(
        &self,
        link: &Link,
        session: &str,
        input: Input,
    ) -> Option<ServerMessage> {
        let missing = || unknown_session(session);
        self.route(link, session, input, missing, session_busy)
            .await
    }

    /// A `tool-call` from `link`, for its session's document and account.
    pub async fn tool_call(
        &self,
        link: &Link,
        session: String,
        turn: String,
        call: String,
        name: String,
        arguments: serde_json::Value,
    ) -> Option<ServerMessage> {
        if [&session, &turn, &call]
            .iter()
            .any(|id| id.is_empty() || id.len() > MAX_ID_BYTES)
        {
            return Some(ServerMessage::Refusal {
                code: RefusalCode::MalformedMessage,
                message: format!("session, turn and call_id are 1 to {MAX_ID_BYTES} bytes"),
                call_id: (!call.is_empty() && call.len() <= MAX_ID_BYTES).then_some(call),
            });
        }
        let missing = || unknown_turn(&session, &turn, Some(&call));
        // The machine may call again (with a new call id): nothing ran.
        let busy = |message| ServerMessage::ToolResult {
            session: session.clone(),
            turn: turn.clone(),
            call_id: call.clone(),
            output: None,
            error: Some(ToolRefusal {
                code: RefusalCode::SessionBusy,
                message,
                read_again: false,
                retry: true,
            }),
        };
        let input = Input::ToolCall {
            turn: turn.clone(),
            call: CallId(call.clone()),
            name,
            arguments,
        };
        self.route(link, &session, input, missing, busy).await
    }

    /// The turn's reply (SPEC T2).
    pub async fn reply(
        &self,
        link: &Link,
        session: &str,
        turn: String,
        text: String,
    ) -> Option<ServerMessage> {
        let missing = || unknown_turn(session, &turn, None);
        let input = Input::Reply {
            turn: turn.clone(),
            text,
        };
        self.route(link, session, input, missing, session_busy)
            .await
    }

    /// The machine reported a run of `session` (SPEC R1).
    pub async fn run(
        &self,
        link: &Link,
        session: &str,
        run: String,
        name: String,
        status: RunStatus,
        attempt: Option<u32>,
    ) -> Option<ServerMessage> {
        if run.is_empty() || run.len() > MAX_ID_BYTES || name.trim().is_empty() || name.len() > 200
        {
            return Some(refusal(
                RefusalCode::MalformedMessage,
                "a run has an id of 1 to 128 bytes and a name of 1 to 200 bytes",
            ));
        }
        let input = Input::Run {
            run: RunId(run),
            name,
            status,
            attempt: attempt.unwrap_or(1),
        };
        self.route_to_session(link, session, input).await
    }

    /// The machine confirmed a Stop (SPEC P3, P4). A `stopped` for a
    /// session the server already ended (archive, delete) is accepted and
    /// changes nothing.
    pub async fn stopped(&self, link: &Link, session: &str) -> Option<ServerMessage> {
        {
            let mut registry = self.shared.lock();
            if let Some(on) = registry.released.get(session).copied() {
                if on.is_none_or(|id| id == link.id) {
                    registry.released.remove(session);
                    return None;
                }
            }
        }
        self.route_to_session(link, session, Input::Stopped).await
    }

    /// The machine acknowledged an answer (SPEC L5).
    pub async fn input_received(
        &self,
        link: &Link,
        session: &str,
        request: String,
    ) -> Option<ServerMessage> {
        let input = Input::AnswerReceived {
            request: RequestId(request),
        };
        self.route_to_session(link, session, input).await
    }

    /// A link ended (SPEC L1, L2, L7): each session it carried hears how.
    pub async fn link_closed(&self, link: &Link, end: LinkEnd) {
        let mailboxes: Vec<mpsc::Sender<Input>> = {
            let mut registry = self.shared.lock();
            registry
                .released
                .retain(|_, on| on.is_none_or(|id| id != link.id));
            registry
                .machines
                .get(&link.machine.id)
                .into_iter()
                .flatten()
                .filter_map(|id| registry.sessions.get(id))
                .map(|live| live.mailbox.clone())
                .collect()
        };
        for mailbox in mailboxes {
            let _ = mailbox.send(Input::LinkLost { link: link.id, end }).await;
        }
    }

    /// `resume` from `link` (SPEC L3, W1): each named session of the
    /// account moves to this link — taking it over from a link the server
    /// had not yet noticed was dead — and `resumed` says what carries on;
    /// after it come, per session, a held Stop, unacknowledged answers, the
    /// results of the calls it listed and a turn for messages that waited.
    /// A session this machine ran that the list leaves out, and that is
    /// away, has ended on the machine, and ends here.
    ///
    /// This queues the resume with each session's driver, so anything the
    /// link says next reaches them after it; [`ResumeUnderway::finish`]
    /// waits for their answers and sends `resumed`.
    pub async fn begin_resume(
        &self,
        link: &Link,
        held: Vec<HeldSession>,
    ) -> Result<ResumeUnderway, ServerMessage> {
        if let Some(refused) = resume_refusal(&held) {
            return Err(refused);
        }
        let named: HashSet<String> = held.iter().map(|h| h.session.clone()).collect();
        let mut underway = ResumeUnderway {
            sessions: self.clone(),
            link: link.clone(),
            named,
            waiting: Vec::new(),
            ended: Vec::new(),
            abandoned: false,
        };
        for HeldSession {
            session,
            questions,
            turn,
            calls,
        } in held
        {
            if self.shared.cluster.is_some() && !self.runs_here(&session) {
                // In a cluster a resume reaches the node a session belongs
                // on; one being taken back here (the sweep got there first)
                // or still to take back is running before it is answered.
                if let Err(error) = restore::take_back_one(&self.shared, &session).await {
                    info!(%error, session, "session named by a resume not taken back here");
                }
            }
            let Some(mailbox) = self.shared.move_to(&session, link) else {
                underway.ended.push(session);
                continue;
            };
            let (done, answer) = oneshot::channel();
            let held = Held {
                questions: questions.into_iter().map(RequestId).collect(),
                turn: turn.map(TurnId),
                calls: calls.into_iter().map(CallId).collect(),
            };
            let input = Input::Resume {
                link: link.clone(),
                held,
                done,
            };
            if mailbox.send(input).await.is_err() {
                // Gone because the server stops: not ended (see
                // `ResumeUnderway::abandoned`).
                match self.shared.shutdown.is_cancelled() {
                    true => underway.abandoned = true,
                    false => underway.ended.push(session),
                }
                continue;
            }
            underway.waiting.push((session, mailbox, answer));
        }
        Ok(underway)
    }

    /// The driver of `document`'s session, if it has one.
    fn of_document(&self, document: &str) -> Option<mpsc::Sender<Input>> {
        let registry = self.shared.lock();
        let id = registry.documents.get(document)?;
        registry.sessions.get(id).map(|live| live.mailbox.clone())
    }

    /// A person answered `request` of `document`: if a session asked it,
    /// the answer goes to its machine — or waits while it is away — until
    /// acknowledged (SPEC L5). Returns once that is committed.
    pub async fn answered(
        &self,
        document: &str,
        request: RequestId,
        answer: AnswerBody,
        by: String,
    ) {
        let Some(mailbox) = self.of_document(document) else {
            return;
        };
        let (done, answered) = oneshot::channel();
        let input = Input::Answered {
            request,
            answer,
            by,
            done,
        };
        if mailbox.send(input).await.is_ok() {
            let _ = answered.await;
        }
    }

    /// People discarded `card` of `document`: the session no longer waits
    /// on it, nor counts it as captured.
    pub async fn discarded(&self, document: &str, card: CardId) {
        let Some(mailbox) = self.of_document(document) else {
            return;
        };
        let (done, discarded) = oneshot::channel();
        if mailbox.send(Input::Discarded { card, done }).await.is_ok() {
            let _ = discarded.await;
        }
    }

    /// A member pressed Stop (SPEC L4): sent, or held while the machine is
    /// away. False when the document has no Planner session.
    pub async fn stop(&self, document: &str) -> Result<bool, StorageError> {
        let Some(mailbox) = self.of_document(document) else {
            return Ok(false);
        };
        let (done, stopped) = oneshot::channel();
        if mailbox.send(Input::StopRequested { done }).await.is_err() {
            return Ok(false);
        }
        stopped.await.unwrap_or(Ok(())).map(|()| true)
    }

    /// A member pressed Resume (SPEC L4): it withdraws the Stop pending
    /// now, only while the machine is linked.
    pub async fn resume_work(&self, document: &str) -> Result<(), ResumeError> {
        let mailbox = self.of_document(document).ok_or(ResumeError::NoSession)?;
        let (done, resumed) = oneshot::channel();
        mailbox
            .send(Input::ResumeRequested { done })
            .await
            .map_err(|_| ResumeError::NoSession)?;
        match resumed.await.map_err(|_| ResumeError::NoSession)?? {
            Ok(()) => Ok(()),
            Err(ResumeRefusal::NoStop) => Err(ResumeError::NoStop),
            Err(ResumeRefusal::Away) => Err(ResumeError::Away),
        }
    }

    /// The document was archived or deleted (SPEC P3): its session, if it
    /// has one, ends and its machine is told to `stop`; until
    /// [`Sessions::document_reopened`], `@planner` starts nothing there.
    pub async fn document_closed(&self, document: &str, trigger: ReleaseTrigger) {
        self.shared.lock().closed.insert(document.to_owned());
        self.shared.hub.watchers().ring(document, Bell::Planner);
        self.reset(document, trigger).await;
    }

    /// Ends the document's session, if it has one, for `trigger` (SPEC
    /// P3); the next `@planner` starts a new one. False when there was none.
    pub async fn reset(&self, document: &str, trigger: ReleaseTrigger) -> bool {
        match self.of_document(document) {
            Some(mailbox) => {
                release(mailbox, trigger).await;
                true
            }
            None => false,
        }
    }

    /// Ends every session of `account`'s machines (it signed out) or of
    /// machine `machine` (unpaired or revoked) for `trigger` (SPEC P3):
    /// linked or away, in use or not.
    pub async fn machines_ended(&self, whose: Whose<'_>, trigger: ReleaseTrigger) {
        let mailboxes: Vec<mpsc::Sender<Input>> = {
            let registry = self.shared.lock();
            registry
                .sessions
                .values()
                .filter(|live| match whose {
                    Whose::Account(account) => live.account == account,
                    Whose::Machine(machine) => live.machine == machine,
                })
                .map(|live| live.mailbox.clone())
                .collect()
        };
        for mailbox in mailboxes {
            release(mailbox, trigger).await;
        }
    }

    /// Ends a machine that no longer opens links (unpaired or revoked, SPEC
    /// P3): its sessions — linked or away — are released for `trigger`,
    /// then its open links are closed, and in a cluster every other node
    /// is told to do the same.
    pub async fn end_machine(&self, machine: &str, trigger: ReleaseTrigger) {
        self.machines_ended(Whose::Machine(machine), trigger).await;
        self.shared.links.revoke(machine);
        if let Some(cluster) = &self.shared.cluster {
            cluster
                .machines_ended(Whose::Machine(machine), trigger)
                .await;
        }
    }

    /// Carries out, until `ended` closes, other nodes' word that machines'
    /// sessions ended (SPEC C2, P3): their sessions here end, and a revoked
    /// or unpaired machine's links close.
    pub async fn follow_other_nodes(self, mut ended: mpsc::Receiver<MachinesEnded>) {
        while let Some(MachinesEnded {
            account,
            machine,
            trigger,
        }) = ended.recv().await
        {
            if let Some(account) = &account {
                self.machines_ended(Whose::Account(account), trigger).await;
            }
            if let Some(machine) = &machine {
                self.machines_ended(Whose::Machine(machine), trigger).await;
                self.shared.links.revoke(machine);
            }
        }
    }

    /// The document was unarchived: `@planner` starts turns there again.
    pub fn document_reopened(&self, document: &str) {
        self.shared.lock().closed.remove(document);
        self.shared.hub.watchers().ring(document, Bell::Planner);
    }

    /// How many sessions run here in each state their view names, for
    /// `/metrics`.
    pub fn states(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let shown: Vec<Arc<PlannerSession>> = self
            .shared
            .lock()
            .sessions
            .values()
            .filter_map(|live| live.shown.borrow().clone())
            .collect();
        let mut states = std::collections::BTreeMap::new();
        let now = now();
        for session in shown.iter().filter(|s| s.released().is_none()) {
            *states.entry(session.view(now).state.as_str()).or_default() += 1;
        }
        states
    }

    /// The document's Planner as people see it (SPEC B1a): its session's
    /// view, or with none what a `@planner` would find — a machine of
    /// `owner`'s linked, the last session stopped, or nothing.
    pub fn view(&self, document: &str, owner: &Account) -> PlannerView {
        let (shown, stopped, closed) = {
            let registry = self.shared.lock();
            let shown = registry
                .documents
                .get(document)
                .and_then(|id| registry.sessions.get(id))
                .and_then(|live| live.shown.borrow().clone());
            let closed = registry.closed.contains(document);
            (shown, registry.stopped.contains(document), closed)
        };
        match shown {
            Some(session) if session.released().is_none() => session.view(now()),
            // Archived: `@planner` binds nothing here (SPEC P3).
            _ if closed => PlannerView::default(),
            ended => {
                // No session: what a `@planner` would find (SPEC T1).
                let stopped = stopped
                    || ended.is_some_and(|session| {
                        session.released() == Some(ReleaseReason::Trigger(ReleaseTrigger::Stop))
                    });
                let linked = self.shared.links.of_account(&owner.id);
                let state = match (stopped, &linked) {
                    (true, _) => PlannerState::Stopped,
                    (false, Some(_)) => PlannerState::Available,
                    (false, None) => PlannerState::Unlinked,
                };
                PlannerView {
                    state,
                    machine: linked.map(|link| link.machine.name.clone()),
                    ..PlannerView::default()
                }
            }
        }
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

/// Asks a session's driver to end it for `trigger`; returns once that is
/// committed (or the driver is gone).
async fn release(mailbox: mpsc::Sender<Input>, trigger: ReleaseTrigger) {
    let (done, released) = oneshot::channel();
    if mailbox.send(Input::Release { trigger, done }).await.is_ok() {
        let _ = released.await;
    }
}

/// How many sessions a Planner message tries before it gives up: each one
/// it meets was ending, and a new one is bound after it.
const CALL_ATTEMPTS: usize = 3;

/// The refusal of a message for a session with too much waiting: nothing
/// changed; send it again shortly.
fn session_busy(message: String) -> ServerMessage {
    refusal(RefusalCode::SessionBusy, message)
}

/// The refusal of a session that is not running on the machine.
fn unknown_session(session: &str) -> ServerMessage {
    refusal(
        RefusalCode::UnknownSession,
        format!("session {session:?} is not running on this machine"),
    )
}

/// The refusal of work for a turn that is not running; `call` names the
/// `tool-call` refused, so the machine can fail that call.
fn unknown_turn(session: &str, turn: &str, call: Option<&str>) -> ServerMessage {
    ServerMessage::Refusal {
        code: RefusalCode::UnknownTurn,
        message: format!("turn {turn:?} of session {session:?} is not running on this machine"),
        call_id: call.map(str::to_owned),
    }
}
