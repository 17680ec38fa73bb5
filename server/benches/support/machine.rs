//! A machine's end of the link for the benches that drive it by hand: the
//! upgrade request with its credential, `hello` → `welcome`, writing a
//! message, reading the next one that is not a heartbeat (heartbeats are
//! answered on the way) and one tool call waited for. [`Machine`] is the
//! same link split in two, a task answering heartbeats while the bench
//! writes. (A Planner that times tool calls by id is [`super::planner`].)

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use margin_protocol::link::{
    Capabilities, ClientMessage, ServerMessage, PROTOCOL_VERSION, RESUMABLE_SESSIONS,
};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::{Error, Message, Utf8Bytes};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// A link opened with [`connect`].
pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long any single expected answer may take before the bench gives up.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// The upgrade request of `/machine` at `addr`, with `credential` as its
/// bearer token (a peer takes none).
pub(crate) fn request(addr: SocketAddr, credential: Option<&str>) -> Result<Request, String> {
    let mut request = format!("ws://{addr}/machine")
        .into_client_request()
        .map_err(|e| format!("bad link URL: {e}"))?;
    if let Some(credential) = credential {
        let header = format!("Bearer {credential}")
            .parse()
            .map_err(|e| format!("bad credential header: {e}"))?;
        request.headers_mut().insert("Authorization", header);
    }
    Ok(request)
}

/// The `hello` every bench's machine says: this protocol, resumable
/// sessions, no run capacity or manifest.
pub(crate) fn hello_message() -> ClientMessage {
    ClientMessage::Hello {
        protocol_version: PROTOCOL_VERSION,
        features: vec![RESUMABLE_SESSIONS.into()],
        run_capacity: None,
        manifest: None,
    }
}

/// Opens a link to `addr`. The machine side disables Nagle, as a
/// latency-minded connector would; the servers' sockets are left as each
/// server sets them.
pub(crate) async fn connect(addr: SocketAddr, credential: Option<&str>) -> Result<Ws, String> {
    let (ws, _) =
        tokio_tungstenite::connect_async_with_config(request(addr, credential)?, None, true)
            .await
            .map_err(|e| format!("link connect: {e}"))?;
    Ok(ws)
}

pub(crate) async fn send<S>(
    ws: &mut WebSocketStream<S>,
    message: &ClientMessage,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let text = serde_json::to_string(message).map_err(|e| format!("serialising: {e}"))?;
    ws.send(Message::text(text))
        .await
        .map_err(|e| format!("link write: {e}"))
}

/// What a frame from the server was.
// One value per frame read, never stored: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Frame {
    /// A message and its size in bytes.
    Message(ServerMessage, usize),
    /// The link closed, and why.
    Closed(String),
    /// Anything else (a ping, a binary frame).
    Other,
}

pub(crate) fn frame(next: Option<Result<Message, Error>>) -> Frame {
    match next {
        Some(Ok(Message::Text(text))) => match serde_json::from_str::<ServerMessage>(text.as_str())
        {
            Ok(message) => Frame::Message(message, text.len()),
            Err(e) => Frame::Closed(format!("server sent a malformed message ({e}): {text}")),
        },
        Some(Ok(Message::Close(close))) => Frame::Closed(match close {
            Some(close) => format!("{} {}", u16::from(close.code), close.reason.as_str()),
            None => "close without code".into(),
        }),
        Some(Ok(_)) => Frame::Other,
        Some(Err(e)) => Frame::Closed(format!("error: {e}")),
        None => Frame::Closed("eof".into()),
    }
}

/// The next message that is not a heartbeat (heartbeats are answered), a
/// credential renewal (a bench links well within a credential's life) or an
/// acknowledgement of a reply or run report (a bench keeps nothing to send
/// again).
pub(crate) async fn next_message<S>(
    ws: &mut WebSocketStream<S>,
) -> Result<(ServerMessage, usize), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    tokio::time::timeout(PATIENCE, async {
        loop {
            match frame(ws.next().await) {
                Frame::Message(ServerMessage::Heartbeat { seq }, _) => {
                    send(ws, &ClientMessage::HeartbeatAck { seq }).await?;
                }
                Frame::Message(
                    ServerMessage::Credential { .. }
                    | ServerMessage::ReplyReceived { .. }
                    | ServerMessage::RunReceived { .. },
                    _,
                )
                | Frame::Other => {}
                Frame::Message(message, bytes) => return Ok((message, bytes)),
                Frame::Closed(why) => return Err(format!("link closed: {why}")),
            }
        }
    })
    .await
    .map_err(|_| format!("the server said nothing for {} s", PATIENCE.as_secs()))?
}

/// Says [`hello_message`] and waits for `welcome`; what it granted.
pub(crate) async fn hello<S>(ws: &mut WebSocketStream<S>) -> Result<Capabilities, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    send(ws, &hello_message()).await?;
    match next_message(ws).await? {
        (ServerMessage::Welcome { capabilities, .. }, _) => Ok(capabilities),
        (other, _) => Err(format!("expected welcome, got {other:?}")),
    }
}

/// Answers heartbeats on an idle link until it closes; why it closed.
pub(crate) async fn keep_alive(ws: &mut Ws) -> String {
    loop {
        match frame(ws.next().await) {
            Frame::Message(ServerMessage::Heartbeat { seq }, _) => {
                if let Err(e) = send(ws, &ClientMessage::HeartbeatAck { seq }).await {
                    return e;
                }
            }
            Frame::Closed(why) => return why,
            Frame::Message(..) | Frame::Other => {}
        }
    }
}

/// A `tool-call` of `name` with `arguments`, as call `call_id` of `turn`.
pub(crate) fn tool_call(
    session: &str,
    turn: &str,
    call_id: String,
    name: &str,
    arguments: Value,
) -> ClientMessage {
    ClientMessage::ToolCall {
        session: session.into(),
        turn: turn.into(),
        call_id,
        name: name.into(),
        arguments,
    }
}

/// Tool call `id` of `name`, waited for: its output (or its refusal), and
/// the result frame's size in bytes.
pub(crate) async fn call(
    ws: &mut Ws,
    (session, turn): (&str, &str),
    id: String,
    name: &str,
    arguments: Value,
) -> Result<(Result<Value, String>, usize), String> {
    send(ws, &tool_call(session, turn, id.clone(), name, arguments)).await?;
    loop {
        let (message, bytes) = next_message(ws).await?;
        match message {
            ServerMessage::ToolResult {
                call_id,
                output,
                error,
                ..
            } if call_id == id => {
                let output = match (output, error) {
                    (Some(output), _) => Ok(serde_json::to_value(&output).unwrap_or_default()),
                    (None, Some(error)) => Err(format!("{}: {}", error.code, error.message)),
                    (None, None) => Err("a tool-result with neither output nor error".into()),
                };
                return Ok((output, bytes));
            }
            ServerMessage::Refusal { code, message, .. } => {
                return Err(format!("refused: {code}: {message}"))
            }
            _ => {}
        }
    }
}

/// A link split in two: the bench writes (each write awaited, so a write's
/// time is when it left), and a task reads, answers heartbeats and queues
/// the rest.
pub(crate) struct Machine {
    sink: Arc<tokio::sync::Mutex<SplitSink<Ws, Message>>>,
    inbox: mpsc::UnboundedReceiver<ServerMessage>,
    reader: tokio::task::JoinHandle<()>,
}

impl Machine {
    pub(crate) async fn connect(addr: SocketAddr, credential: Option<&str>) -> Machine {
        let ws = connect(addr, credential)
            .await
            .unwrap_or_else(|e| panic!("link to {addr}: {e}"));
        let (sink, mut stream) = ws.split();
        let sink = Arc::new(tokio::sync::Mutex::new(sink));
        let (queue, inbox) = mpsc::unbounded_channel();
        let acks = sink.clone();
        let reader = tokio::spawn(async move {
            while let Some(Ok(message)) = stream.next().await {
                let Message::Text(text) = message else {
                    continue;
                };
                match serde_json::from_str::<ServerMessage>(text.as_str()) {
                    Ok(ServerMessage::Heartbeat { seq }) => {
                        let ack = serde_json::to_string(&ClientMessage::HeartbeatAck { seq })
                            .expect("heartbeat-ack");
                        if acks.lock().await.send(Message::text(ack)).await.is_err() {
                            return;
                        }
                    }
                    Ok(ServerMessage::ReplyReceived { .. } | ServerMessage::RunReceived { .. }) => {
                    }
                    Ok(message) => {
                        let _ = queue.send(message);
                    }
                    Err(e) => println!("  the server sent a malformed link message ({e}): {text}"),
                }
            }
        });
        Machine {
            sink,
            inbox,
            reader,
        }
    }

    /// Writes a message already serialised (a bench that writes many keeps
    /// their text).
    pub(crate) async fn send_text(&self, text: Utf8Bytes) {
        self.sink
            .lock()
            .await
            .send(Message::Text(text))
            .await
            .expect("link write");
    }

    /// Says [`hello_message`] and waits for `welcome`.
    pub(crate) async fn hello(&mut self) {
        let hello = serde_json::to_string(&hello_message()).expect("hello");
        self.send_text(hello.into()).await;
        match self.next().await {
            ServerMessage::Welcome { .. } => {}
            other => panic!("expected welcome, got {other:?}"),
        }
    }

    /// The next message queued (heartbeats are answered, not queued).
    pub(crate) async fn next(&mut self) -> ServerMessage {
        tokio::time::timeout(PATIENCE, self.inbox.recv())
            .await
            .expect("the server said nothing on the link for 60 s")
            .expect("the link closed")
    }

    /// Refusals received so far.
    pub(crate) fn refusals(&mut self) -> Vec<String> {
        let mut refusals = Vec::new();
        while let Ok(message) = self.inbox.try_recv() {
            if let ServerMessage::Refusal { code, message, .. } = message {
                refusals.push(format!("{code}: {message}"));
            }
        }
        refusals
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.reader.abort();
    }
}
