//! The link's I/O loop: reads server messages, answers heartbeats, keeps
//! each fresh credential (SPEC L8), runs one task per turn, answer and
//! Stop, matches tool results to their calls, and writes what the tasks
//! send.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::{SinkExt, StreamExt};
use margin_protocol::decisions::ToolRefusal;
use margin_protocol::link::{Capabilities, ClientMessage, ServerMessage};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tracing::{debug, warn, Instrument};

use super::credential::Keeper;
use super::handler::{Answer, Handler, SessionHandle, ToolError, Turn};
use super::Welcome;

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;
type Pending = HashMap<String, oneshot::Sender<Result<serde_json::Value, ToolError>>>;

/// Messages the tasks may queue before they wait for the socket.
const OUTBOX: usize = 256;

/// An open link, welcomed; [`Linked::serve`] runs it.
pub struct Linked {
    socket: Socket,
    welcome: Welcome,
    credential: Keeper,
}

/// How a link ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The machine detached (the `until` future completed).
    Detached,
    /// The server closed the link with this code and reason (e.g. 4403
    /// revoked, 4002 unresponsive, 1001 shutting down).
    Closed {
        /// The close code.
        code: u16,
        /// The reason.
        reason: String,
    },
    /// The connection broke without a close.
    Dropped(String),
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ended::Detached => f.write_str("detached"),
            Ended::Closed { code, reason } => write!(f, "closed by the server ({code}: {reason})"),
            Ended::Dropped(why) => write!(f, "dropped ({why})"),
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

    /// Serves `handler` until the server closes the link or `until`
    /// completes (then the machine sends `detach`). Turns still running
    /// when the link ends are aborted. Each fresh credential the server
    /// sends is kept (in memory or in the credential file) before the next
    /// message is read, so a link that ends has saved the newest.
    pub async fn serve<H: Handler>(self, handler: H, until: impl Future<Output = ()>) -> Ended {
        let keeper = self.credential;
        let (mut sink, mut stream) = self.socket.split();
        let (out, mut outbox) = mpsc::channel(OUTBOX);
        let mut serving = Serving {
            handler: Arc::new(handler),
            calls: Calls::new(out),
            tasks: JoinSet::new(),
            turns: HashMap::new(),
        };
        tokio::pin!(until);
        let ended = loop {
            tokio::select! {
                () = &mut until => {
                    let _ = sink.send(Message::Text(encode(&ClientMessage::Detach {}).into())).await;
                    let _ = sink.close().await;
                    break Ended::Detached;
                }
                Some(message) = outbox.recv() => {
                    if let Err(e) = sink.send(Message::Text(encode(&message).into())).await {
                        break Ended::Dropped(e.to_string());
                    }
                }
                Some(_) = serving.tasks.join_next(), if !serving.tasks.is_empty() => {}
                frame = stream.next() => match frame {
                    Some(Ok(Message::Text(text))) => match serde_json::from_str(&text) {
                        Ok(ServerMessage::Credential { credential, expires_at }) => {
                            keep(&keeper, credential, expires_at).await;
                        }
                        Ok(message) => {
                            if let Some(answer) = serving.dispatch(message) {
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
        serving.tasks.abort_all();
        for turn in serving.turns.values() {
            turn.abort();
        }
        serving.calls.close();
        ended
    }
}

/// The state of a served link.
struct Serving<H> {
    handler: Arc<H>,
    calls: Calls,
    tasks: JoinSet<()>,
    /// The running turn of each session, to abort on Stop.
    turns: HashMap<String, JoinHandle<()>>,
}

impl<H: Handler> Serving<H> {
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
            } => {
                let span = tracing::info_span!("turn", %session, %turn, %document);
                let turn = Turn {
                    session: self.session(&session),
                    id: turn,
                    document,
                    messages,
                    repair,
                };
                let (handler, calls) = (self.handler.clone(), self.calls.clone());
                let task = tokio::spawn(run_turn(handler, calls, turn).instrument(span));
                self.turns.retain(|_, turn| !turn.is_finished());
                if let Some(earlier) = self.turns.insert(session, task) {
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
                    None => Ok(output.unwrap_or_default()),
                },
            ),
            ServerMessage::InputResult {
                session,
                request,
                answer,
                answered_by,
            } => {
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
            ServerMessage::Stop { session } => {
                let turn = self.turns.remove(&session);
                let (handler, calls) = (self.handler.clone(), self.calls.clone());
                let handle = self.session(&session);
                self.tasks.spawn(async move {
                    if let Some(turn) = turn {
                        // The turn's work is gone before the Planner is told.
                        turn.abort();
                        let _ = turn.await;
                    }
                    handler.stop(handle).await;
                    let _ = calls.send(ClientMessage::Stopped { session }).await;
                });
            }
            ServerMessage::Refusal {
                code,
                message,
                call_id: Some(call_id),
            } => self.calls.settle(
                &call_id,
                Err(ToolError::Refused(ToolRefusal {
                    code,
                    message,
                    read_again: false,
                })),
            ),
            ServerMessage::Refusal { code, message, .. } => {
                warn!(%code, %message, "the server refused a message");
            }
            ServerMessage::Welcome { .. } => warn!("a second welcome ignored"),
            // Kept by the read loop before it dispatches anything else.
            ServerMessage::Credential { .. } => {}
        }
        None
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
/// people waiting in Chat learn why; one cut off by the link sends nothing.
async fn run_turn<H: Handler>(handler: Arc<H>, calls: Calls, turn: Turn) {
    let (session, id) = (turn.session.id.clone(), turn.id.clone());
    let text = match handler.turn(turn).await {
        Ok(text) => text,
        Err(ToolError::LinkClosed) => return,
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

/// The way out to the socket, and the tool calls waiting for results.
#[derive(Clone, Debug)]
pub(super) struct Calls {
    out: mpsc::Sender<ClientMessage>,
    pending: Arc<Mutex<Pending>>,
    next: Arc<AtomicU64>,
}

impl Calls {
    fn new(out: mpsc::Sender<ClientMessage>) -> Self {
        Calls {
            out,
            pending: Arc::default(),
            next: Arc::default(),
        }
    }

    /// Queues a message for the socket.
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
        self.lock().insert(call_id.clone(), result);
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
            self.lock().remove(&call_id);
            return Err(e);
        }
        waiting.await.map_err(|_| ToolError::LinkClosed)?
    }

    fn settle(&self, call_id: &str, result: Result<serde_json::Value, ToolError>) {
        match self.lock().remove(call_id) {
            Some(waiting) => {
                let _ = waiting.send(result);
            }
            None => warn!(%call_id, "a result for no call in flight ignored"),
        }
    }

    /// Fails every call in flight: the link is gone.
    fn close(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A client message as a text frame. Serializing these types cannot fail
/// (string keys, no non-finite floats); an empty frame would be refused.
pub(super) fn encode(message: &ClientMessage) -> String {
    serde_json::to_string(message).unwrap_or_default()
}
