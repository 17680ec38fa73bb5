//! The link's I/O loop: reads server messages, answers heartbeats, keeps
//! each fresh credential (SPEC L8), runs one task per turn, answer and
//! Stop, hands each tool result to its call and writes what the tasks
//! send. What the calls and a `resume` need across links — the calls
//! waiting, the sessions and questions this machine holds, the replies and
//! run reports not yet acknowledged — is `crate::calls`'.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use margin_protocol::decisions::ToolRefusal;
use margin_protocol::link::{Capabilities, ClientMessage, ServerMessage};
use margin_protocol::RefusalCode;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tracing::{debug, warn, Instrument};

use crate::calls::Calls;
use crate::credential::Keeper;
use crate::handler::{Answer, Handler, SessionHandle, ToolError, Turn};
use crate::kept::Invoked;
use crate::Welcome;

pub(super) type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;
/// Messages the tasks may queue before they wait for the socket.
const OUTBOX: usize = 256;

/// An open link, welcomed; [`Linked::serve`] runs it.
pub struct Linked {
    pub(super) socket: Socket,
    welcome: Welcome,
    pub(super) credential: Keeper,
    /// How long the link may bring nothing before it counts as dropped.
    silence: Duration,
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
        silence: Duration,
    ) -> Self {
        Linked {
            socket,
            welcome: Welcome {
                machine,
                capabilities,
            },
            credential,
            silence,
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
            .drive(
                self.socket,
                &self.credential,
                until.as_mut(),
                false,
                self.silence,
            )
            .await;
        serving.finish(false);
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
    /// gets its result — or `interrupted` — after `resumed`; one answered
    /// `unknown_call` never reached the server, and goes again (SPEC W1). A
    /// link that brings nothing for `silence` has dropped; it is pinged
    /// every third of that, so only a dead one stays silent.
    pub(super) async fn drive<F: Future<Output = ()>>(
        &mut self,
        socket: Socket,
        keeper: &Keeper,
        mut until: Pin<&mut F>,
        resume: bool,
        silence: Duration,
    ) -> Ended {
        let (mut sink, mut stream) = socket.split();
        let mut ping = tokio::time::interval(silence / 3);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let quiet = tokio::time::sleep(silence);
        tokio::pin!(quiet);
        if resume {
            let held = self.resume_message();
            if let Err(e) = sink.send(Message::Text(encode(&held).into())).await {
                return Ended::Dropped(e.to_string());
            }
        }
        let ended = loop {
            let retry = self.calls.next_retry();
            tokio::select! {
                () = &mut until => {
                    let _ = sink.send(Message::Text(encode(&ClientMessage::Detach {}).into())).await;
                    let _ = sink.close().await;
                    break Ended::Detached;
                }
                Some(message) = self.outbox.recv() => {
                    if let Err(e) = self.write_all(&mut sink, vec![message]).await {
                        break Ended::Dropped(e.to_string());
                    }
                }
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => {}
                () = sleep_until(retry), if retry.is_some() => {
                    if let Err(e) = self.write_all(&mut sink, self.calls.due(Instant::now())).await {
                        break Ended::Dropped(e.to_string());
                    }
                }
                _ = ping.tick() => {
                    if let Err(e) = sink.send(Message::Ping(Vec::new().into())).await {
                        break Ended::Dropped(e.to_string());
                    }
                }
                () = &mut quiet => {
                    break Ended::Dropped(format!("no frame from the server in {} ms", silence.as_millis()));
                }
                frame = stream.next() => {
                    // Any frame, a pong included, is a sign of life.
                    quiet.as_mut().reset(tokio::time::Instant::now() + silence);
                    match frame {
                        Some(Ok(Message::Text(text))) => match serde_json::from_str(&text) {
                            Ok(ServerMessage::Credential { credential, expires_at }) => {
                                keep(keeper, credential, expires_at).await;
                            }
                            Ok(message) => {
                                let answers = self.dispatch(message);
                                if let Err(e) = self.write_all(&mut sink, answers).await {
                                    break Ended::Dropped(e.to_string());
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
                    }
                }
            }
        };
        if !resume || ended.is_final() {
            // Nothing will be resumed on this link: a result that was on its
            // way is lost with it.
            self.finish(resume);
        }
        ended
    }

    /// Writes `messages` in order, each noted as written — even when the
    /// write fails: the link is then gone, and what it took may have
    /// reached the server or not, so each is settled by the next `resume`
    /// (a call is named in it, a reply or run report kept and sent again
    /// after `resumed`) instead of being lost with the link (SPEC L10, W1).
    async fn write_all<S>(
        &mut self,
        sink: &mut S,
        messages: Vec<ClientMessage>,
    ) -> Result<(), S::Error>
    where
        S: futures_util::Sink<Message> + Unpin,
    {
        let mut failed = None;
        for message in messages {
            if failed.is_none() {
                if let Err(e) = sink.send(Message::Text(encode(&message).into())).await {
                    failed = Some(e);
                }
            }
            self.written(&message);
        }
        failed.map_or(Ok(()), Err)
    }

    /// Ends everything: running turns and tasks, calls in flight, and what
    /// a resume would name — but for a resumable machine, a reply or run
    /// report the server has not acknowledged, which a later `resume`
    /// (after a restart, with a held file) sends again (SPEC L10).
    pub(super) fn finish(&mut self, resumable: bool) {
        self.tasks.abort_all();
        for (_, turn) in self.turns.values() {
            turn.abort();
        }
        self.calls.fail_in_flight();
        self.calls.forget(resumable);
    }

    /// Handles one server message; returns the answers to send at once, in
    /// order.
    fn dispatch(&mut self, message: ServerMessage) -> Vec<ClientMessage> {
        match message {
            ServerMessage::Heartbeat { seq } => return vec![ClientMessage::HeartbeatAck { seq }],
            ServerMessage::Invoke {
                session,
                turn,
                document,
                messages,
                repair,
                plan,
            } => {
                let span = tracing::info_span!("turn", %session, %turn, %document);
                // The handler sees each turn once: an `invoke` sent again
                // for a turn still running here, or whose reply is kept,
                // starts nothing.
                if self.turns.get(&session).is_some_and(|(id, _)| *id == turn) {
                    span.in_scope(|| debug!("an invoke of a turn already running ignored"));
                    return Vec::new();
                }
                if let Invoked::Replied(again) = self.calls.invoked(&session, &turn) {
                    span.in_scope(|| {
                        debug!("an invoke of a turn already replied to: the reply goes again")
                    });
                    return vec![again];
                }
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
                return vec![received];
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
                        calls.stopped(&session);
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
                    self.calls.ended(&session);
                }
                for carried in sessions {
                    for request in carried.withdrawn {
                        self.calls.settle_question(&carried.session, &request);
                    }
                }
                // What the last link may have swallowed goes again.
                return self.calls.resumed();
            }
            ServerMessage::Refusal {
                code,
                message,
                call_id: Some(call_id),
                session: None,
                turn: None,
                run: None,
            } => {
                if code == RefusalCode::UnknownCall {
                    // Not for a turn a Stop (first after `resumed`) ended.
                    let turns = &self.turns;
                    let running = |session: &str, turn: &str| {
                        turns
                            .get(session)
                            .is_some_and(|(id, task)| id == turn && !task.is_finished())
                    };
                    if let Some(again) = self.calls.again(&call_id, running) {
                        debug!(%call_id, "a resumed call the server never recorded goes again");
                        return vec![again];
                    }
                }
                self.calls.settle(
                    &call_id,
                    Err(ToolError::Refused(ToolRefusal {
                        code,
                        message,
                        read_again: false,
                        retry: false,
                    })),
                );
            }
            ServerMessage::Refusal {
                code,
                message,
                session: Some(session),
                turn,
                run,
                ..
            } if turn.is_some() || run.is_some() => {
                let span = tracing::info_span!("refused", %session, turn = turn.as_deref(), run = run.as_deref());
                let _entered = span.enter();
                if code == RefusalCode::SessionBusy {
                    debug!(%message, "the server was busy; sending it again shortly");
                } else {
                    warn!(%code, %message, "the server refused a reply or run report; it is not sent again");
                }
                self.calls.refused(
                    &session,
                    turn.as_deref(),
                    run.as_deref(),
                    code,
                    Instant::now(),
                );
            }
            ServerMessage::Refusal { code, message, .. } => {
                warn!(%code, %message, "the server refused a message");
            }
            ServerMessage::ReplyReceived { session, turn } => {
                self.calls.reply_received(&session, &turn);
            }
            ServerMessage::RunReceived {
                session,
                run,
                attempt,
                status,
            } => self.calls.run_received(&session, &run, attempt, status),
            ServerMessage::Welcome { .. } => warn!("a second welcome ignored"),
            // Kept by the read loop before it dispatches anything else.
            ServerMessage::Credential { .. } => {}
        }
        Vec::new()
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
            ClientMessage::Run { .. } => self.calls.sent(message),
            ClientMessage::Reply { session, turn, .. } => {
                // Kept until the server acknowledges it (SPEC L10).
                self.calls.sent(message);
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

impl<H> Drop for Serving<H> {
    /// A machine that stops serving stops its turns too.
    fn drop(&mut self) {
        for (_, turn) in self.turns.values() {
            turn.abort();
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

/// A client message as a text frame. Serializing these types cannot fail
/// (string keys, no non-finite floats); an empty frame would be refused.
pub(super) fn encode(message: &ClientMessage) -> String {
    serde_json::to_string(message).unwrap_or_default()
}

/// Sleeps until `at` (forever without one).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
