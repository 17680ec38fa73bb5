//! A machine link's relays to the other nodes of a cluster (SPEC C2): the
//! node a machine linked to keeps the link itself — `hello`, heartbeats,
//! credential renewal — and mirrors it on every other live node over the
//! internal channel (`/internal/machines/{id}/link`), so that whichever
//! node owns a document can bind the machine to its Planner session and
//! talk to it.
//!
//! Each message from the machine goes where its session runs: here, or to
//! the node that sent the session's last frame. A `resume` is split by the
//! node each named session runs on — a session that runs nowhere is taken
//! back here — and every relayed node gets its part (an empty one tells it
//! the machine holds none of its sessions); the `resumed` answers are
//! merged into one, and what a node sends after its own answer waits until
//! the merged one has gone out, so the machine sees the order it would see
//! from one server. A node relayed only after the `resume` gets an empty
//! part of its own, and its answer is kept from the machine.
//!
//! When the link ends, each relay is closed with what the machine's end
//! means to the sessions there. When a relay ends first — its node stopped,
//! or it superseded or revoked the link — or its node lapses or stops
//! answering (paused, cut off, SPEC C5), the machine's link is closed so
//! the machine reconnects and resumes, wherever its sessions went.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use margin_protocol::link::{close, ClientMessage, HeldSession, ServerMessage};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tracing::{debug, info, warn};

use crate::cluster::{Cluster, TakeRefused};
use crate::link::{Link, LinkEnd, Terms};
use crate::sessions::{resume_refusal, ResumeAnswered, Sessions};
use crate::storage::{Machine, Node};

mod peer;

use peer::{open, pump};
pub use peer::{PLANNING_HEADER, RESUMABLE_HEADER, RUN_CAPACITY_HEADER};

/// How often a link looks for nodes it has no relay to yet.
pub(super) const REFRESH: Duration = Duration::from_secs(2);

/// Frames waiting to go to one relayed node.
const RELAY_QUEUE: usize = 256;

/// Events from every relay of one link, waiting for its loop.
const EVENTS: usize = 1024;

/// What a relay reports to its link's loop.
pub(super) enum Event {
    /// A frame its node sent for the machine.
    Frame(String),
    /// It ended, with the close its node sent, if any.
    Closed(Option<(u16, String)>),
}

/// The relays of one machine link.
pub(super) struct Relays {
    cluster: Cluster,
    sessions: Sessions,
    machine: Machine,
    terms: Terms,
    /// Node id → the relay to it.
    open: HashMap<String, mpsc::Sender<Message>>,
    /// Session → the node that runs it, from the frames nodes sent.
    routes: HashMap<String, String>,
    events: mpsc::Sender<(String, Event)>,
    merge: Option<Merge>,
    /// Whether the machine's `resume` was split already: a node relayed
    /// later is sent an empty part of its own, so its sessions of this
    /// machine fare as a part would have had them (one the machine never
    /// answered in is carried on, SPEC L10); its answer is not the
    /// machine's to see.
    resumed: bool,
    /// Nodes sent such a late part whose `resumed` is still to come.
    late: HashSet<String>,
}

/// A split `resume` whose answers are being merged.
struct Merge {
    /// The nodes yet to answer.
    waiting: HashSet<String>,
    /// Whether this node's own part is yet to answer.
    local: bool,
    carried: Vec<margin_protocol::link::ResumedSession>,
    ended: Vec<String>,
    /// Frames nodes sent after their answer, in order.
    after: Vec<String>,
    /// This node's part, once answered, to follow up after `resumed`.
    answered: Option<ResumeAnswered>,
}

/// Where a session named by `resume` runs.
enum Target {
    Here,
    Node(String),
    /// Not known in time: its node neither answers nor lapsed, or this
    /// one cannot take documents now. Answering it ended would make the
    /// machine give it up; the machine is told to resume again instead.
    Unknown(String),
}

/// Why a `resume` got no `resumed`.
pub(super) enum ResumeFailed {
    /// It breaks a bound: refused, the link carries on.
    Refused(Box<ServerMessage>),
    /// Where a session runs could not be found in time: the link closes as
    /// unresponsive, so the machine reconnects and resumes again, losing
    /// nothing.
    Undecided(String),
}

impl Relays {
    /// Opens relays for `machine`'s link to every other live node; returns
    /// them and the events they will report.
    pub(super) async fn start(
        cluster: Cluster,
        sessions: Sessions,
        machine: &Machine,
        terms: Terms,
    ) -> (Relays, mpsc::Receiver<(String, Event)>) {
        let (events, receiver) = mpsc::channel(EVENTS);
        let mut relays = Relays {
            cluster,
            sessions,
            machine: machine.clone(),
            terms,
            open: HashMap::new(),
            routes: HashMap::new(),
            events,
            merge: None,
            resumed: false,
            late: HashSet::new(),
        };
        relays.refresh().await;
        (relays, receiver)
    }

    /// Opens a relay to each live node that has none yet.
    pub(super) async fn refresh(&mut self) {
        let me = self.cluster.incarnation().node;
        let nodes = match self.cluster.live_nodes().await {
            Ok(nodes) => nodes,
            Err(error) => {
                warn!(%error, "live nodes not read; relays stay as they are");
                return;
            }
        };
        for node in nodes {
            if node.id != me && !self.open.contains_key(&node.id) {
                self.connect(&node).await;
            }
        }
    }

    async fn connect(&mut self, node: &Node) {
        match open(&self.cluster, node, &self.machine, self.terms).await {
            Ok(ws) => {
                let (tx, rx) = mpsc::channel(RELAY_QUEUE);
                let (id, events) = (node.id.clone(), self.events.clone());
                tokio::spawn(pump(ws, rx, id, events, self.cluster.clone()));
                if self.resumed {
                    let part = serde_json::to_string(&ClientMessage::Resume {
                        sessions: Vec::new(),
                    })
                    .unwrap_or_default();
                    if tx.send(Message::Text(part.into())).await.is_ok() {
                        self.late.insert(node.id.clone());
                    }
                }
                self.open.insert(node.id.clone(), tx);
                debug!(node = %node.id, "link relayed");
            }
            Err(error) => debug!(%error, node = %node.id, "link not relayed"),
        }
    }

    /// Sends `text` (the machine's `message`) to the node its session runs
    /// on, unless it runs here or nowhere known; whether it went.
    pub(super) fn forward(&mut self, text: &str, message: &ClientMessage) -> bool {
        let Some(session) = session_of(message) else {
            return false;
        };
        if self.sessions.runs_here(session) {
            return false;
        }
        let Some(node) = self.routes.get(session) else {
            return false;
        };
        match self.open.get(node) {
            Some(relay) => relay.try_send(Message::Text(text.into())).is_ok(),
            None => false,
        }
    }

    /// Tells every relayed node the machine detached.
    pub(super) fn detach(&mut self, text: &str) {
        for relay in self.open.values() {
            let _ = relay.try_send(Message::Text(text.into()));
        }
    }

    /// Splits `resume` by where each named session runs, queues this
    /// node's part with its drivers and sends every relayed node its own;
    /// the answers are merged as they come ([`Relays::on_event`],
    /// [`Relays::local_answered`]). Returns this node's answers to come.
    pub(super) async fn resume(
        &mut self,
        link: &Link,
        held: Vec<HeldSession>,
    ) -> Result<oneshot::Receiver<ResumeAnswered>, ResumeFailed> {
        if let Some(refused) = resume_refusal(&held) {
            return Err(ResumeFailed::Refused(Box::new(refused)));
        }
        let mut here = Vec::new();
        let mut placed = Vec::new();
        for session in held {
            match self.locate(&session.session).await {
                // Its node may have been relayed only now, by `locate`.
                Target::Node(node) if self.open.contains_key(&node) => {
                    // What the machine says of it next goes there too.
                    self.routes.insert(session.session.clone(), node.clone());
                    placed.push((node, session));
                }
                Target::Node(_) | Target::Here => here.push(session),
                Target::Unknown(why) => return Err(ResumeFailed::Undecided(why)),
            }
        }
        // Every relayed node gets a part, those relayed by `locate` too.
        let mut there: HashMap<String, Vec<HeldSession>> = self
            .open
            .keys()
            .map(|node| (node.clone(), Vec::new()))
            .collect();
        for (node, session) in placed {
            there.entry(node).or_default().push(session);
        }
        self.resumed = true;
        let underway = self
            .sessions
            .begin_resume(link, here)
            .await
            .map_err(|refused| ResumeFailed::Refused(Box::new(refused)))?;
        let (answer, answered) = oneshot::channel();
        tokio::spawn(async move {
            let _ = answer.send(underway.answers().await);
        });
        let mut waiting = HashSet::new();
        for (node, part) in there {
            let text = serde_json::to_string(&ClientMessage::Resume { sessions: part })
                .unwrap_or_default();
            if let Some(relay) = self.open.get(&node) {
                if relay.send(Message::Text(text.into())).await.is_ok() {
                    waiting.insert(node);
                }
            }
        }
        self.merge = Some(Merge {
            waiting,
            local: true,
            carried: Vec::new(),
            ended: Vec::new(),
            after: Vec::new(),
            answered: None,
        });
        Ok(answered)
    }

    /// Where session `id` runs: here, on a relayed node, or — when no live
    /// node holds its document — here, taken back from its journal.
    async fn locate(&mut self, id: &str) -> Target {
        if self.sessions.runs_here(id) {
            return Target::Here;
        }
        if let Some(node) = self.routes.get(id) {
            if self.open.contains_key(node) {
                return Target::Node(node.clone());
            }
        }
        let deadline = Instant::now() + self.cluster.failover_patience();
        loop {
            let why = match self.sessions.take_back_here(id).await {
                Ok(()) => return Target::Here,
                Err(TakeRefused::Elsewhere(node)) => {
                    if !self.open.contains_key(&node.id) {
                        self.connect(&node).await;
                    }
                    if self.open.contains_key(&node.id) {
                        return Target::Node(node.id);
                    }
                    // Its node does not answer: wait for its lease to lapse.
                    format!("node {} holding it does not answer", node.id)
                }
                // This node lapsed, or the database failed: wait.
                Err(error) => error.to_string(),
            };
            if Instant::now() >= deadline {
                warn!(session = id, why, "session not located in time");
                return Target::Unknown(why);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// This node's part of a split `resume` answered.
    pub(super) fn local_answered(&mut self, mut answered: ResumeAnswered, link: &Link) {
        let Some(merge) = self.merge.as_mut() else {
            return;
        };
        if answered.abandoned {
            // This node is stopping; the link closes with it.
            return;
        }
        if let ServerMessage::Resumed { sessions, ended } = answered.take_resumed() {
            merge.carried.extend(sessions);
            merge.ended.extend(ended);
        }
        merge.local = false;
        merge.answered = Some(answered);
        self.finish_merge(link);
    }

    /// What a relay reported; the close to give the machine's link when
    /// the relay ended.
    pub(super) fn on_event(
        &mut self,
        (node, event): (String, Event),
        link: &Link,
    ) -> Option<(u16, String)> {
        match event {
            Event::Frame(frame) => {
                let peek = serde_json::from_str::<Peek>(&frame).ok();
                if let Some(session) = peek.as_ref().and_then(|p| p.session.clone()) {
                    self.routes.insert(session, node.clone());
                }
                let resumed = peek.is_some_and(|p| p.kind == "resumed");
                if resumed && self.late.remove(&node) {
                    // A late part's answer: what it carried on follows.
                    return None;
                }
                match self.merge.as_mut() {
                    Some(merge) if merge.waiting.contains(&node) && resumed => {
                        if let Ok(ServerMessage::Resumed { sessions, ended }) =
                            serde_json::from_str(&frame)
                        {
                            merge.carried.extend(sessions);
                            merge.ended.extend(ended);
                        }
                        merge.waiting.remove(&node);
                        self.finish_merge(link);
                    }
                    Some(merge) if merge.waiting.contains(&node) => {
                        link.send_frame(frame);
                    }
                    Some(merge) => merge.after.push(frame),
                    None => {
                        link.send_frame(frame);
                    }
                }
                None
            }
            Event::Closed(closed) => {
                self.open.remove(&node);
                self.routes.retain(|_, on| *on != node);
                info!(%node, ?closed, "link relay ended");
                Some(match closed {
                    Some((code @ (close::SUPERSEDED | close::REVOKED), reason)) => (code, reason),
                    // To the sessions here as to the machine, a drop: they
                    // are kept, and it reconnects and resumes.
                    _ => (
                        close::UNRESPONSIVE,
                        "a server holding some of this machine's sessions stopped; reconnect and resume"
                            .into(),
                    ),
                })
            }
        }
    }

    /// Once every part answered: the merged `resumed`, what the nodes sent
    /// after their answers, then this node's follow-ups.
    fn finish_merge(&mut self, link: &Link) {
        let done = self
            .merge
            .as_ref()
            .is_some_and(|merge| !merge.local && merge.waiting.is_empty());
        if !done {
            return;
        }
        let Some(merge) = self.merge.take() else {
            return;
        };
        link.send(&ServerMessage::Resumed {
            sessions: merge.carried,
            ended: merge.ended,
        });
        for frame in merge.after {
            link.send_frame(frame);
        }
        if let Some(answered) = merge.answered {
            tokio::spawn(answered.follow());
        }
    }

    /// The machine's link ended: each relay is closed with what that means
    /// to the sessions on its node. A node shutting down here is, to them,
    /// a drop: the machine comes back elsewhere.
    pub(super) fn end(self, end: LinkEnd) {
        let (code, reason) = match end {
            LinkEnd::Detached => (close::DETACHED, "detached"),
            LinkEnd::Superseded => (close::SUPERSEDED, "another link took this link's work over"),
            LinkEnd::Refused => (close::REVOKED, "the link was refused"),
            LinkEnd::Dropped | LinkEnd::Shutdown => {
                (close::UNRESPONSIVE, "the machine's link dropped")
            }
        };
        for relay in self.open.values() {
            let _ = relay.try_send(Message::Close(Some(CloseFrame {
                code: CloseCode::from(code),
                reason: reason.into(),
            })));
        }
    }
}

/// The next relay event; pending forever without relays.
pub(super) async fn next_event(
    events: &mut Option<mpsc::Receiver<(String, Event)>>,
) -> (String, Event) {
    match events.as_mut() {
        Some(events) => match events.recv().await {
            Some(event) => event,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// This node's answers to a split `resume`; pending forever without one.
pub(super) async fn local_answers(
    answering: &mut Option<oneshot::Receiver<ResumeAnswered>>,
) -> Option<ResumeAnswered> {
    match answering.as_mut() {
        Some(answering) => answering.await.ok(),
        None => std::future::pending().await,
    }
}

/// What a node's frame names, read without decoding the rest.
#[derive(serde::Deserialize)]
struct Peek {
    #[serde(rename = "type")]
    kind: String,
    session: Option<String>,
}

/// The session a machine's message is for.
fn session_of(message: &ClientMessage) -> Option<&str> {
    match message {
        ClientMessage::ToolCall { session, .. }
        | ClientMessage::Run { session, .. }
        | ClientMessage::InputReceived { session, .. }
        | ClientMessage::Stopped { session }
        | ClientMessage::Reply { session, .. } => Some(session),
        ClientMessage::Hello { .. }
        | ClientMessage::HeartbeatAck { .. }
        | ClientMessage::Detach {}
        | ClientMessage::Resume { .. } => None,
    }
}
