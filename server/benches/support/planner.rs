//! A Planner's side of a running server for the benches that call tools:
//! accounts made with the binary's own CLI, the HTTP API (machines,
//! documents, Chat, a document's Planner; documents filled through the
//! tools' HTTP routes), and one machine link that starts turns and times
//! tool calls by call id.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use margin_protocol::chat::{ChatMessageView, PostChat};
use margin_protocol::decisions::{EditInput, EditPlanInput, ReadDocumentOutput};
use margin_protocol::link::{ClientMessage, PlannerView, ServerMessage};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use super::machine::{hello_message, request};

/// Most edits one `edit_plan` takes.
const EDITS_PER_CALL: usize = 64;

/// An account and its token, made with the binary's own CLI (so any
/// build of `margin` can be benched, whatever its schema).
pub(crate) fn account(bin: &Path, args: &[String], name: &str) -> String {
    let output = std::process::Command::new(bin)
        .args(["account", "add", name])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("margin account add");
    assert!(
        output.status.success(),
        "account add failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The HTTP API of a running server, as one account.
#[derive(Clone)]
pub(crate) struct Api {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
}

impl Api {
    pub(crate) fn new(addr: SocketAddr) -> Api {
        Api {
            http: reqwest::Client::new(),
            base: format!("http://{addr}"),
        }
    }

    /// The server's address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.base
            .trim_start_matches("http://")
            .parse()
            .expect("the server's address")
    }

    /// `/metrics`, the exposition's text.
    pub(crate) async fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("the metrics")
    }

    /// POSTs `body` to `path` as `token`; the answer as JSON.
    pub(crate) async fn post(&self, token: &str, path: &str, body: &Value) -> Value {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("POST {path}'s answer: {e}"))
    }

    /// GETs `path` as `token`: the answer, or what went wrong (a status
    /// that is not 2xx, with its body).
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        token: &str,
        path: &str,
    ) -> Result<T, String> {
        let request = self.http.get(format!("{}{path}", self.base));
        answer(request.bearer_auth(token), "GET", path).await
    }

    /// Posts `text` in `document`'s Chat; the message, or what went wrong.
    pub(crate) async fn chat(
        &self,
        token: &str,
        document: &str,
        text: &str,
    ) -> Result<ChatMessageView, String> {
        let path = format!("/documents/{document}/chat");
        let request = self.http.post(format!("{}{path}", self.base));
        let body = PostChat { text: text.into() };
        answer(request.bearer_auth(token).json(&body), "POST", &path).await
    }

    /// `document`'s Planner as its owner sees it.
    pub(crate) async fn planner(&self, token: &str, document: &str) -> Result<PlannerView, String> {
        self.get(token, &format!("/documents/{document}/planner"))
            .await
    }

    /// POSTs `body` to `path` as `token`; the answer's string `field`.
    async fn made(&self, token: &str, path: &str, body: Value, field: &str) -> String {
        let made = self.post(token, path, &body).await;
        made[field]
            .as_str()
            .unwrap_or_else(|| panic!("POST {path}: no {field} in {made}"))
            .to_owned()
    }

    /// Pairs a machine named `name`; its credential.
    pub(crate) async fn pair(&self, token: &str, name: &str) -> String {
        self.made(token, "/machines", json!({ "name": name }), "credential")
            .await
    }

    /// A new document titled `title`; its id.
    pub(crate) async fn document(&self, token: &str, title: &str) -> String {
        self.made(token, "/documents", json!({ "title": title }), "id")
            .await
    }

    /// `read_document` over HTTP.
    pub(crate) async fn read(&self, token: &str, document: &str) -> ReadDocumentOutput {
        let path = format!("/documents/{document}/tools/read_document");
        serde_json::from_value(self.post(token, &path, &json!({})).await)
            .expect("a read_document output")
    }

    /// Inserts `count` paragraphs at the start of `document`, through
    /// `edit_plan` over HTTP; the revision they made.
    pub(crate) async fn fill(&self, token: &str, document: &str, count: usize) -> i64 {
        let mut revision = self.read(token, document).await.revision;
        let path = format!("/documents/{document}/tools/edit_plan");
        let mut written = 0;
        while written < count {
            let n = EDITS_PER_CALL.min(count - written);
            let edits = (0..n)
                .map(|i| EditInput::Insert {
                    after: None,
                    kind: "paragraph".into(),
                    level: None,
                    text: format!(
                        "Paragraph {} of the plan, with a sentence of ordinary length.",
                        written + i
                    ),
                })
                .collect();
            let input = serde_json::to_value(EditPlanInput { revision, edits }).expect("input");
            let edited = self.post(token, &path, &input).await;
            revision = edited["revision"]
                .as_i64()
                .unwrap_or_else(|| panic!("edit_plan refused: {edited}"));
            written += n;
        }
        revision
    }
}

/// Sends `request` (`method path`, for messages) and reads a JSON answer;
/// a status that is not 2xx is an error carrying its body.
async fn answer<T: DeserializeOwned>(
    request: reqwest::RequestBuilder,
    method: &str,
    path: &str,
) -> Result<T, String> {
    let response = request
        .send()
        .await
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(format!("{method} {path}: {status} {body}"));
    }
    response
        .json()
        .await
        .map_err(|e| format!("{method} {path}: {e}"))
}

/// A session's running turn.
pub(crate) struct Turn {
    pub(crate) session: String,
    pub(crate) turn: String,
    /// Its calls' ids start with this.
    pub(crate) prefix: &'static str,
}

/// Results by call id: when each arrived, and its frame.
type Arrivals = Arc<Mutex<HashMap<String, (Instant, String)>>>;

/// One machine link: a writer task, and a reader that answers heartbeats
/// and files each result under its call id without parsing it.
pub(crate) struct Link {
    out: mpsc::UnboundedSender<ClientMessage>,
    /// Tells the writer to close the socket.
    closing: Arc<tokio::sync::Notify>,
    arrivals: Arrivals,
    invokes: Arc<Mutex<Vec<(String, String, String)>>>,
    woken: Arc<tokio::sync::Notify>,
}

impl Link {
    /// A resumable link (SPEC L3): its sessions outlive it.
    pub(crate) async fn open(addr: SocketAddr, credential: &str) -> Link {
        Link::open_with(addr, credential, hello_message()).await
    }

    /// A link that says `hello`: with no features, its sessions end with
    /// it.
    pub(crate) async fn open_with(
        addr: SocketAddr,
        credential: &str,
        hello: ClientMessage,
    ) -> Link {
        let request = request(addr, Some(credential)).expect("a link request");
        // Results may be larger than what a machine may send.
        let config = WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let (ws, _) = tokio_tungstenite::connect_async_with_config(request, Some(config), true)
            .await
            .expect("the link opens");
        let (mut sink, mut stream) = ws.split();
        let (out, mut outgoing) = mpsc::unbounded_channel::<ClientMessage>();
        let closing = Arc::new(tokio::sync::Notify::new());
        let close = closing.clone();
        tokio::spawn(async move {
            loop {
                // What was sent before the close goes first.
                let message = tokio::select! {
                    biased;
                    message = outgoing.recv() => message,
                    () = close.notified() => None,
                };
                let Some(message) = message else {
                    let _ = sink.close().await;
                    return;
                };
                let text = serde_json::to_string(&message).expect("a frame");
                if sink.send(Message::text(text)).await.is_err() {
                    return;
                }
            }
        });
        let link = Link {
            out: out.clone(),
            closing,
            arrivals: Arrivals::default(),
            invokes: Arc::default(),
            woken: Arc::default(),
        };
        let (arrivals, invokes, woken) = (
            link.arrivals.clone(),
            link.invokes.clone(),
            link.woken.clone(),
        );
        tokio::spawn(async move {
            while let Some(Ok(frame)) = stream.next().await {
                let Message::Text(text) = frame else { continue };
                let at = Instant::now();
                if let Some(call) = call_id_of(text.as_str()) {
                    let call = call.to_owned();
                    arrivals
                        .lock()
                        .expect("arrivals")
                        .insert(call, (at, text.as_str().to_owned()));
                    woken.notify_waiters();
                    continue;
                }
                match serde_json::from_str::<ServerMessage>(text.as_str()) {
                    Ok(ServerMessage::Heartbeat { seq }) => {
                        let _ = out.send(ClientMessage::HeartbeatAck { seq });
                    }
                    Ok(ServerMessage::Invoke {
                        session,
                        turn,
                        document,
                        ..
                    }) => {
                        invokes
                            .lock()
                            .expect("invokes")
                            .push((document, session, turn));
                        woken.notify_waiters();
                    }
                    _ => {}
                }
            }
        });
        link.out.send(hello).expect("hello");
        tokio::time::sleep(Duration::from_millis(200)).await;
        link
    }

    /// `@planner` on `document`, and the turn it starts.
    pub(crate) async fn turn(
        &self,
        api: &Api,
        token: &str,
        document: &str,
        prefix: &'static str,
    ) -> Turn {
        api.chat(token, document, "@planner read")
            .await
            .unwrap_or_else(|e| panic!("chat: {e}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let notified = self.woken.notified();
            if let Some((_, session, turn)) = self
                .invokes
                .lock()
                .expect("invokes")
                .iter()
                .find(|(d, _, _)| d == document)
                .cloned()
            {
                return Turn {
                    session,
                    turn,
                    prefix,
                };
            }
            assert!(Instant::now() < deadline, "no invoke for {document}");
            let _ = tokio::time::timeout(Duration::from_millis(100), notified).await;
        }
    }

    /// Sends `turn`'s reply.
    pub(crate) fn reply(&self, turn: &Turn, text: &str) {
        let _ = self.out.send(ClientMessage::Reply {
            session: turn.session.clone(),
            turn: turn.turn.clone(),
            text: text.into(),
        });
    }

    /// Closes the socket once what was sent before has gone.
    pub(crate) fn close(&self) {
        self.closing.notify_one();
    }

    /// Sends call `id` of `tool` with `arguments`; when it was sent.
    pub(crate) fn send_call(&self, turn: &Turn, id: &str, tool: &str, arguments: Value) -> Instant {
        let at = Instant::now();
        let _ = self.out.send(ClientMessage::ToolCall {
            session: turn.session.clone(),
            turn: turn.turn.clone(),
            call_id: id.to_owned(),
            name: tool.into(),
            arguments,
        });
        at
    }

    /// Waits for call `id`'s result: when it arrived, and its frame.
    pub(crate) async fn wait(&self, id: &str) -> (Instant, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let notified = self.woken.notified();
            if let Some(arrived) = self.arrivals.lock().expect("arrivals").remove(id) {
                return arrived;
            }
            assert!(Instant::now() < deadline, "no result for {id}");
            let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
        }
    }

    /// `read_document` as call `id` of `turn`; its result's size in bytes.
    pub(crate) async fn read(&self, turn: &Turn, id: &str) -> usize {
        let id = format!("{}-{id}", turn.prefix);
        self.send_call(turn, &id, "read_document", json!({}));
        self.wait(&id).await.1.len()
    }
}

/// The `call_id` of a `tool-result` frame, found without parsing it: the
/// server writes `"type":"tool-result","session":…,"turn":…,"call_id":…`
/// first, so it is near the start.
fn call_id_of(text: &str) -> Option<&str> {
    let head = text.get(..512).unwrap_or(text);
    if !head.starts_with(r#"{"type":"tool-result""#) {
        return None;
    }
    let start = head.find(r#""call_id":""#)? + r#""call_id":""#.len();
    let len = head[start..].find('"')?;
    Some(&head[start..start + len])
}
