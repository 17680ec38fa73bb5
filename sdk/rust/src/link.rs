//! The link's I/O loop: reads server messages, answers heartbeats, keeps
//! each fresh credential (SPEC L8), runs one task per turn, answer and
//! Stop, matches tool results to their calls, writes what the tasks send,
//! and keeps what a `resume` needs — the sessions and questions this
//! machine holds — across links.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::{SinkExt, StreamExt};
use margin_protocol::decisions::ToolRefusal;
use margin_protocol::link::{Capabilities, ClientMessage, HeldSession, ServerMessage};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tracing::{debug, warn, Instrument};

use crate::credential::Keeper;
use crate::handler::{Answer, Handler, SessionHandle, ToolError, Turn};
use crate::Welcome;

pub(super) type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;
/// Calls waiting for a result: call id → the call.
type Pending = HashMap<String, InFlight>;

/// A call waiting for its result.
#[derive(Debug)]
struct InFlight {
    session: String,
    turn: String,
    /// Whether its frame went out on a link: only then can the server
    /// have it, and only then is it named in `resume` (one still queued
    /// goes out after it, and gets its result then).
    written: bool,
    waiting: oneshot::Sender<Result<serde_json::Value, ToolError>>,
}
/// Sessions this machine holds, with the questions each waits on.
type Held = BTreeMap<String, BTreeSet<String>>;

/// Messages the tasks may queue before they wait for the socket.
const OUTBOX: usize = 256;

/// An open link, welcomed; [`Linked::serve`] runs it.
pub struct Linked {
    pub(super) socket: Socket,
    welcome: Welcome,
    pub(super) credential: Keeper,
}

/// How a link ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The machine detached (the `until` future completed).
    Detached,
    /// The server closed the link with this code and reason (e.g. 4403
    /// revoked, 4002 unresponsive, 4409 taken over, 1001 shutting down).
    Closed {
        /// The close code.
        code: u16,
        /// The reason.
        reason: String,
    },
    /// The connection broke without a close.
    Dropped(String),
    /// The server refused to link again, for good (an unknown or revoked
    /// credential, a refused `hello`): [`crate::Connector::run`] gave up.
    Refused(String),
}

impl Ended {
    /// Whether linking again cannot help: the machine left, or the server
    /// ended this machine's link on purpose (revoked, bad `hello`, taken
    /// over by another link).
    pub fn is_final(&self) -> bool {
        use margin_protocol::link::close;
        match self {
            Ended::Detached | Ended::Refused(_) => true,
            Ended::Closed { code, .. } => {
                matches!(*code, close::REVOKED | close::BAD_HELLO | close::SUPERSEDED)
            }
            Ended::Dropped(_) => false,
        }
    }
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ended::Detached => f.write_str("detached"),
            Ended::Closed { code, reason } => write!(f, "closed by the server ({code}: {reason})"),
            Ended::Dropped(why) => write!(f, "dropped ({why})"),
            Ended::Refused(why) => write!(f, "refused ({why})"),
        }
    }
}

impl Linked {
    pub(super) fn new(
        socket: Socket,
        machine: String,
        capabilities: Capabilities,
        credential: Keeper,
    ) -> Self {
        Linked {
            socket,
            welcome: Welcome {
                machine,
                capabilities,
            },
            credential,
        }
    }

    /// What the server's `welcome` said.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// Serves `handler` on this one link until the server closes it or
    /// `until` completes (then the machine sends `detach`). Turns still
    /// running when the link ends are aborted. [`crate::Connector::run`]
    /// instead links again and resumes. Each fresh credential the server
    /// sends is kept (in memory or in the credential file) before the next
    /// message is read, so a link that ends has saved the newest.
    pub async fn serve<H: Handler>(self, handler: H, until: impl Future<Output = ()>) -> Ended {
        let mut serving = Serving::new(handler, None);
        tokio::pin!(until);
        let ended = serving
            .drive(self.socket, &self.credential, until.as_mut(), false)
            .await;
        serving.finish();
        ended
    }
}

/// A Planner served across one or more links.
pub(super) struct Serving<H> {
    handler: Arc<H>,
    calls: Calls,
    outbox: mpsc::Receiver<ClientMessage>,
    tasks: JoinSet<()>,
    /// The running turn of each session (its id and task), to abort on
    /// Stop and to name in `resume`.
    turns: HashMap<String, (String, JoinHandle<()>)>,
    /// Answers already given to the handler: one sent again after a
    /// `resumed` is acknowledged, not delivered twice.
    delivered: HashSet<String>,
    /// Turns whose reply went out: (session, turn).
    replied: HashSet<(String, String)>,
}

impl<H: Handler> Serving<H> {
    /// Serving `handler`; with `held`, the sessions and questions a
    /// `resume` names are kept in that file too, so a restarted machine
    /// resumes them.
    pub(super) fn new(handler: H, held: Option<PathBuf>) -> Self {
        let (out, outbox) = mpsc::channel(OUTBOX);
        Serving {
            handler: Arc::new(handler),
            calls: Calls::new(out, held),
            outbox,
            tasks: JoinSet::new(),
            turns: HashMap::new(),
            delivered: HashSet::new(),
            replied: HashSet::new(),
        }
    }

    /// Runs one link until it ends or `until` completes. With `resume`, the
    /// first message is `resume` and the link's end keeps running turns and
    /// their calls in flight: the next `resume` names them, and each call
    /// gets its result — or `interrupted` — after `resumed` (SPEC W1).
    pub(super) async fn drive<F: Future<Output = ()>>(
        &mut self,
        socket: Socket,
        keeper: &Keeper,
        mut until: Pin<&mut F>,
        resume: bool,
    ) -> Ended {
        let (mut sink, mut stream) = socket.split();
        if resume {
            let held = self.resume_message();
            if let Err(e) = sink.send(Message::Text(encode(&held).into())).await {
                return Ended::Dropped(e.to_string());
            }
        }
        let ended = loop {
            tokio::select! {
                () = &mut until => {
                    let _ = sink.send(Message::Text(encode(&ClientMessage::Detach {}).into())).await;
                    let _ = sink.close().await;
                    break Ended::Detached;
                }
                Some(message) = self.outbox.recv() => {
                    if let Err(e) = sink.send(Message::Text(encode(&message).into())).await {
                        break Ended::Dropped(e.to_string());
                    }
                    self.written(&message);
                }
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => {}
                frame = stream.next() => match frame {
                    Some(Ok(Message::Text(text))) => match serde_json::from_str(&text) {
                        Ok(ServerMessage::Credential { credential, expires_at }) => {
                            keep(keeper, credential, expires_at).await;
                        }
                        Ok(message) => {
                            if let Some(answer) = self.dispatch(message) {
                                if let Err(e) = sink.send(Message::Text(encode(&answer).into())).await {
                                    break Ended::Dropped(e.to_string());
                                }
                            }
                        }
                        Err(e) => warn!(error = %e, "unreadable server message ignored"),
                    },
                    Some(Ok(Message::Close(frame))) => {
                        break match frame {
                            Some(frame) => Ended::Closed { code: frame.code.into(), reason: frame.reason.to_string() },
                            None => Ended::Closed { code: 1005, reason: String::new() },
                        };
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break Ended::Dropped(e.to_string()),
                    None => break Ended::Dropped("connection closed".into()),
                },
            }
        };
        if !resume || ended.is_final() {
            // Nothing will be resumed: a result that was on its way is lost
            // with the link.
            self.finish();
        }
        ended
    }

    /// Ends everything: running turns and tasks, calls in flight, and what
    /// a resume would name.
    pub(super) fn finish(&mut self) {
        self.tasks.abort_all();
        for (_, turn) in self.turns.values() {
            turn.abort();
        }
        self.calls.fail_in_flight();
        self.calls.forget_all();
    }

    /// Handles one server message; returns an answer to send at once.
    fn dispatch(&mut self, message: ServerMessage) -> Option<ClientMessage> {
        match message {
            ServerMessage::Heartbeat { seq } => return Some(ClientMessage::HeartbeatAck { seq }),
            ServerMessage::Invoke {
                session,
                turn,
                document,
                messages,
                repair,
                plan,
            } => {
                let span = tracing::info_span!("turn", %session, %turn, %document);
                self.calls.hold_session(&session);
                let id = turn.clone();
                let turn = Turn {
                    session: self.session(&session),
                    id: turn,
                    document,
                    messages,
                    repair,
                    plan,
                };
                let (handler, calls) = (self.handler.clone(), self.calls.clone());
                let task = tokio::spawn(run_turn(handler, calls, turn).instrument(span));
                self.turns.retain(|_, (_, turn)| !turn.is_finished());
                if let Some((_, earlier)) = self.turns.insert(session, (id, task)) {
                    earlier.abort();
                }
            }
            ServerMessage::ToolResult {
                call_id,
                output,
                error,
                ..
            } => self.calls.settle(
                &call_id,
                match error {
                    Some(refusal) => Err(ToolError::Refused(refusal)),
                    None => serde_json::to_value(output).map_err(ToolError::Output),
                },
            ),
            ServerMessage::InputResult {
                session,
                request,
                answer,
                answered_by,
            } => {
                self.calls.settle_question(&session, &request);
                let received = ClientMessage::InputReceived {
                    session: session.clone(),
                    request: request.clone(),
                };
                // Sent again after a `resumed` if the acknowledgement was
                // lost: acknowledged again, delivered once.
                if self.delivered.insert(request.clone()) {
                    let answer = Answer {
                        session: self.session(&session),
                        request,
                        answer,
                        answered_by,
                    };
                    let handler = self.handler.clone();
                    self.tasks
                        .spawn(async move { handler.answered(answer).await });
                }
                return Some(received);
            }
            ServerMessage::Stop { session } => {
                let turn = self.turns.remove(&session).map(|(_, turn)| turn);
                let (handler, calls) = (self.handler.clone(), self.calls.clone());
                let handle = self.session(&session);
                self.tasks.spawn(async move {
                    if let Some(turn) = turn {
                        // The turn's work is gone before the Planner is told.
                        turn.abort();
                        let _ = turn.await;
                    }
                    handler.stop(handle).await;
                    if calls
                        .send(ClientMessage::Stopped {
                            session: session.clone(),
                        })
                        .await
                        .is_ok()
                    {
                        calls.forget_session(&session);
                    }
                });
            }
            ServerMessage::StopWithdrawn { session } => {
                let (handler, handle) = (self.handler.clone(), self.session(&session));
                self.tasks
                    .spawn(async move { handler.stop_withdrawn(handle).await });
            }
            ServerMessage::Resumed { sessions, ended } => {
                for session in ended {
                    if let Some((_, turn)) = self.turns.remove(&session) {
                        turn.abort();
                    }
                    self.calls.fail_session(&session);
                    self.calls.forget_session(&session);
                }
                for carried in sessions {
                    for request in carried.withdrawn {
                        self.calls.settle_question(&carried.session, &request);
                    }
                }
            }
            ServerMessage::Refusal {
                code,
                message,
                call_id: Some(call_id),
                session: None,
                turn: None,
                run: None,
            } => self.calls.settle(
                &call_id,
                Err(ToolError::Refused(ToolRefusal {
                    code,
                    message,
                    read_again: false,
                    retry: false,
                })),
            ),
            ServerMessage::Refusal { code, message, .. } => {
                warn!(%code, %message, "the server refused a message");
            }
            ServerMessage::ReplyReceived { .. } | ServerMessage::RunReceived { .. } => {}
            ServerMessage::Welcome { .. } => warn!("a second welcome ignored"),
            // Kept by the read loop before it dispatches anything else.
            ServerMessage::Credential { .. } => {}
        }
        None
    }

    /// The `resume` naming what this machine holds: each session's
    /// questions, its running turn and that turn's calls still waiting.
    ///
    /// A turn whose task finished still counts until its reply is written:
    /// a reply queued while the link was down goes out after `resume`, to a
    /// turn the server must still hold.
    fn resume_message(&mut self) -> ClientMessage {
        let replied = &self.replied;
        self.turns.retain(|session, (turn, task)| {
            !task.is_finished() || !replied.contains(&(session.clone(), turn.clone()))
        });
        let turns = &self.turns;
        self.calls
            .resume(|session| turns.get(session).map(|(id, _)| id.clone()))
    }

    /// `message` went out on the link.
    fn written(&mut self, message: &ClientMessage) {
        match message {
            ClientMessage::ToolCall { call_id, .. } => self.calls.mark_written(call_id),
            ClientMessage::Reply { session, turn, .. } => {
                self.replied.insert((session.clone(), turn.clone()));
                self.turns
                    .retain(|s, (t, task)| !(s == session && t == turn && task.is_finished()));
            }
            _ => {}
        }
    }

    fn session(&self, id: &str) -> SessionHandle {
        SessionHandle {
            id: id.to_owned(),
            calls: self.calls.clone(),
        }
    }
}

/// Keeps a fresh credential as the newest, unless it could not be one of
/// ours (it would never open a link, and must not replace one that does).
async fn keep(keeper: &Keeper, credential: String, expires_at: i64) {
    let plausible = credential.starts_with("mgm_")
        && credential.len() <= 128
        && credential.bytes().all(|b| b.is_ascii_graphic());
    if !plausible {
        warn!("a malformed credential from the server ignored");
        return;
    }
    keeper.replace(credential).await;
    debug!(expires_at, "credential renewed");
}

/// Runs a turn and sends its reply. A turn that fails still replies, so the
/// people waiting in Chat learn why — after the next `resume` if the link
/// is down meanwhile.
async fn run_turn<H: Handler>(handler: Arc<H>, calls: Calls, turn: Turn) {
    let (session, id) = (turn.session.id.clone(), turn.id.clone());
    let text = match handler.turn(turn).await {
        Ok(text) => text,
        Err(ToolError::LinkClosed) => {
            "The Planner lost its link during this turn and did not finish it.".to_owned()
        }
        Err(e) => {
            warn!(error = %e, "turn failed");
            format!("The Planner could not finish this turn: {e}")
        }
    };
    let _ = calls
        .send(ClientMessage::Reply {
            session,
            turn: id,
            text,
        })
        .await;
}

/// The way out to the socket, the tool calls waiting for results, and the
/// sessions and questions a `resume` names.
#[derive(Clone, Debug)]
pub(super) struct Calls {
    out: mpsc::Sender<ClientMessage>,
    pending: Arc<Mutex<Pending>>,
    held: Arc<Mutex<Held>>,
    /// Where `held` is kept across the machine's restarts, if anywhere.
    file: Option<Arc<PathBuf>>,
    next: Arc<AtomicU64>,
}

impl Calls {
    fn new(out: mpsc::Sender<ClientMessage>, file: Option<PathBuf>) -> Self {
        let held = file.as_deref().map(read_held).unwrap_or_default();
        Calls {
            out,
            pending: Arc::default(),
            held: Arc::new(Mutex::new(held)),
            file: file.map(Arc::new),
            next: Arc::default(),
        }
    }

    /// Queues a message for the socket (sent once a link is up).
    pub(super) async fn send(&self, message: ClientMessage) -> Result<(), ToolError> {
        self.out
            .send(message)
            .await
            .map_err(|_| ToolError::LinkClosed)
    }

    /// Calls a tool and waits for its result.
    pub(super) async fn call(
        &self,
        session: &str,
        turn: &str,
        name: &str,
        arguments: serde_json::Value,
    ) -> Result<serde_json::Value, ToolError> {
        let call_id = format!("c{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let (result, waiting) = oneshot::channel();
        self.pending().insert(
            call_id.clone(),
            InFlight {
                session: session.to_owned(),
                turn: turn.to_owned(),
                written: false,
                waiting: result,
            },
        );
        let sent = self
            .send(ClientMessage::ToolCall {
                session: session.to_owned(),
                turn: turn.to_owned(),
                call_id: call_id.clone(),
                name: name.to_owned(),
                arguments,
            })
            .await;
        if let Err(e) = sent {
            self.pending().remove(&call_id);
            return Err(e);
        }
        waiting.await.map_err(|_| ToolError::LinkClosed)?
    }

    /// Remembers a question `session` asked, for the next `resume`.
    pub(super) fn hold_question(&self, session: &str, request: &str) {
        self.change_held(|held| {
            held.entry(session.to_owned())
                .or_default()
                .insert(request.to_owned())
        });
    }

    fn hold_session(&self, session: &str) {
        self.change_held(|held| {
            let new = !held.contains_key(session);
            held.entry(session.to_owned()).or_default();
            new
        });
    }

    fn settle_question(&self, session: &str, request: &str) {
        self.change_held(|held| {
            held.get_mut(session)
                .is_some_and(|questions| questions.remove(request))
        });
    }

    fn forget_session(&self, session: &str) {
        self.change_held(|held| held.remove(session).is_some());
    }

    fn forget_all(&self) {
        self.change_held(|held| {
            let any = !held.is_empty();
            held.clear();
            any
        });
    }

    /// Changes what a `resume` names; `change` says whether it changed
    /// anything, and then the held file (if any) is written again.
    fn change_held(&self, change: impl FnOnce(&mut Held) -> bool) {
        let mut held = self.held();
        if change(&mut held) {
            if let Some(file) = &self.file {
                write_held(file, &held);
            }
        }
    }

    /// The `resume` naming what this machine holds; `turn_of` gives each
    /// session's running turn.
    fn resume(&self, turn_of: impl Fn(&str) -> Option<String>) -> ClientMessage {
        let mut pending = self.pending();
        // A call whose turn was aborted has nobody waiting any more.
        pending.retain(|_, call| !call.waiting.is_closed());
        ClientMessage::Resume {
            sessions: self
                .held()
                .iter()
                .map(|(session, questions)| {
                    let turn = turn_of(session);
                    let calls = pending
                        .iter()
                        .filter(|(_, c)| {
                            c.written && c.session == *session && Some(&c.turn) == turn.as_ref()
                        })
                        .map(|(call, _)| call.clone())
                        .take(margin_protocol::link::MAX_HELD_CALLS)
                        .collect();
                    HeldSession {
                        session: session.clone(),
                        questions: questions.iter().cloned().collect(),
                        turn,
                        calls,
                    }
                })
                .collect(),
        }
    }

    fn settle(&self, call_id: &str, result: Result<serde_json::Value, ToolError>) {
        match self.pending().remove(call_id) {
            Some(call) => {
                let _ = call.waiting.send(result);
            }
            None => warn!(%call_id, "a result for no call in flight ignored"),
        }
    }

    /// Fails the calls in flight of a session that ended.
    fn fail_session(&self, session: &str) {
        self.pending().retain(|_, call| call.session != session);
    }

    /// Call `call_id`'s frame went out on a link.
    fn mark_written(&self, call_id: &str) {
        if let Some(call) = self.pending().get_mut(call_id) {
            call.written = true;
        }
    }

    /// Fails every call in flight: its result, if any, went with the link.
    fn fail_in_flight(&self) {
        self.pending().clear();
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a held file says: each session this machine holds, with the
/// questions it waits on. A missing or unreadable file holds nothing.
fn read_held(path: &std::path::Path) -> Held {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).unwrap_or_else(|error| {
            warn!(path = %path.display(), %error, "the held sessions file is unreadable; resuming none");
            Held::default()
        }),
        Err(_) => Held::default(),
    }
}

/// Replaces the held file, atomically and privately; a failure is logged
/// (the sessions are still named while this process lives).
fn write_held(path: &std::path::Path, held: &Held) {
    let json = serde_json::to_string(held).unwrap_or_default();
    if let Err(error) = crate::credential::write_private_file(path, &json) {
        warn!(path = %path.display(), %error, "cannot save the held sessions");
    }
}

/// A client message as a text frame. Serializing these types cannot fail
/// (string keys, no non-finite floats); an empty frame would be refused.
pub(super) fn encode(message: &ClientMessage) -> String {
    serde_json::to_string(message).unwrap_or_default()
}
