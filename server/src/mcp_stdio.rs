//! `margin mcp` (SPEC O4): Margin's MCP server over stdio, for desktop
//! clients that only start a command. Each JSON-RPC line read on stdin is
//! sent to a server's `/mcp` (Streamable HTTP, stateless) with the member's
//! token, and its answer written on stdout, so tools, resources, roles and
//! refusals are exactly `/mcp`'s. One thing stdio can do that stateless
//! HTTP cannot: tell the client when a resource changes. So
//! `resources/subscribe` is answered here: each subscribed resource is
//! read through `/mcp` every [`POLL`] and, when what it reads changes,
//! `notifications/resources/updated` is written for it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use margin_protocol::mcp::DocumentResource;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;

/// How often a subscribed resource is read again.
pub const POLL: Duration = Duration::from_secs(2);
/// Longest line read from the client: `/mcp`'s request bound, with room.
const MAX_LINE_BYTES: u64 = 8 * 1024 * 1024;
/// Most resources subscribed at once.
const MAX_SUBSCRIPTIONS: usize = 64;
/// Most requests sent to the server at once.
const MAX_IN_FLIGHT: usize = 16;
/// Most lines waiting to be written to the client.
const MAX_WAITING_LINES: usize = 256;
/// How long one request to the server may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest token file.
const MAX_TOKEN_BYTES: u64 = 4096;

/// Why `margin mcp` could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum McpStdioError {
    /// The token file could not be read.
    #[error("cannot read the token file {path:?}: {source}")]
    Token {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The token file holds no token.
    #[error("the token file {0:?} is empty; put a token from `margin account add` or `margin token add` in it")]
    EmptyToken(PathBuf),
    /// The server address cannot be used.
    #[error("server address {0:?} must start with http:// (this build speaks no TLS: reach an https server through a local TLS proxy, or point the client at its /mcp directly)")]
    Server(String),
    /// The HTTP client could not be made.
    #[error("cannot make the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    /// Stdin or stdout failed.
    #[error("stdio failed: {0}")]
    Stdio(#[from] std::io::Error),
}

/// Runs the relay until stdin ends.
pub async fn run(server: &str, token_file: &Path) -> Result<(), McpStdioError> {
    let token = read_token(token_file).await?;
    let base = server.trim_end_matches('/');
    if !base.starts_with("http://") {
        return Err(McpStdioError::Server(server.to_owned()));
    }
    let relay = Relay {
        http: reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .build()?,
        endpoint: format!("{base}/mcp"),
        token,
        version: Arc::new(Mutex::new(None)),
    };
    let (out, lines) = mpsc::channel::<String>(MAX_WAITING_LINES);
    let writer = tokio::spawn(write_lines(lines));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut subscriptions: HashMap<String, JoinHandle<()>> = HashMap::new();
    let mut stdin = BufReader::new(tokio::io::stdin());
    loop {
        let mut line = String::new();
        let read = (&mut stdin)
            .take(MAX_LINE_BYTES)
            .read_line(&mut line)
            .await?;
        if read == 0 {
            break;
        }
        if !line.ends_with('\n') && read as u64 == MAX_LINE_BYTES {
            let _ = out
                .send(error_line(&Value::Null, -32600, "the message is too large"))
                .await;
            // The rest of the oversized line is not a message.
            skip_line(&mut stdin).await?;
            continue;
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let message: Value = match serde_json::from_str(line) {
            Ok(message) => message,
            Err(error) => {
                let _ = out
                    .send(error_line(
                        &Value::Null,
                        -32700,
                        &format!("not JSON: {error}"),
                    ))
                    .await;
                continue;
            }
        };
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        match message.get("method").and_then(Value::as_str) {
            Some("resources/subscribe") => {
                let answer = subscribe(&relay, &out, &mut subscriptions, &message);
                let _ = out.send(answered(&id, answer)).await;
            }
            Some("resources/unsubscribe") => {
                if let Some(uri) = uri_of(&message) {
                    if let Some(poller) = subscriptions.remove(uri) {
                        poller.abort();
                    }
                }
                let _ = out.send(answered(&id, Ok(()))).await;
            }
            _ => {
                let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
                    break;
                };
                let relay = relay.clone();
                let out = out.clone();
                tokio::spawn(async move {
                    for line in relay.send(message).await {
                        let _ = out.send(line).await;
                    }
                    drop(permit);
                });
            }
        }
    }
    for (_, poller) in subscriptions {
        poller.abort();
    }
    drop(out);
    let _ = writer.await;
    Ok(())
}

/// The token in `path`, trimmed.
async fn read_token(path: &Path) -> Result<String, McpStdioError> {
    let failed = |source| McpStdioError::Token {
        path: path.to_owned(),
        source,
    };
    let file = tokio::fs::File::open(path).await.map_err(failed)?;
    let mut text = String::new();
    file.take(MAX_TOKEN_BYTES)
        .read_to_string(&mut text)
        .await
        .map_err(failed)?;
    match text.trim() {
        "" => Err(McpStdioError::EmptyToken(path.to_owned())),
        token => Ok(token.to_owned()),
    }
}

/// Reads and drops the rest of a line.
async fn skip_line(stdin: &mut BufReader<tokio::io::Stdin>) -> std::io::Result<()> {
    loop {
        let buffer = stdin.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(());
        }
        match buffer.iter().position(|b| *b == b'\n') {
            Some(end) => {
                stdin.consume(end + 1);
                return Ok(());
            }
            None => {
                let all = buffer.len();
                stdin.consume(all);
            }
        }
    }
}

/// Writes each line to stdout, in order, until every sender is gone.
async fn write_lines(mut lines: mpsc::Receiver<String>) {
    let mut stdout = tokio::io::stdout();
    while let Some(line) = lines.recv().await {
        let written = async {
            stdout.write_all(line.as_bytes()).await?;
            stdout.write_all(b"\n").await?;
            stdout.flush().await
        };
        if let Err(error) = written.await {
            tracing::warn!(%error, "stdout failed; the client is gone");
            return;
        }
    }
}

/// Starts polling the resource `message` names, unless it is no document
/// resource or too many are polled.
fn subscribe(
    relay: &Relay,
    out: &mpsc::Sender<String>,
    subscriptions: &mut HashMap<String, JoinHandle<()>>,
    message: &Value,
) -> Result<(), String> {
    let uri = uri_of(message).ok_or("resources/subscribe needs params.uri")?;
    if DocumentResource::parse(uri).is_none() {
        return Err(format!("no resource {uri:?} to subscribe to"));
    }
    if subscriptions.contains_key(uri) {
        return Ok(());
    }
    if subscriptions.len() >= MAX_SUBSCRIPTIONS {
        return Err(format!(
            "at most {MAX_SUBSCRIPTIONS} resources are subscribed at once; unsubscribe one first"
        ));
    }
    let poller = tokio::spawn(poll(relay.clone(), uri.to_owned(), out.clone()));
    subscriptions.insert(uri.to_owned(), poller);
    Ok(())
}

/// Reads `uri` every [`POLL`] and says when what it reads changed.
async fn poll(relay: Relay, uri: String, out: mpsc::Sender<String>) {
    let mut last: Option<String> = None;
    let mut ticks = tokio::time::interval(POLL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let read = json!({
            "jsonrpc": "2.0",
            "id": "margin-mcp-subscription",
            "method": "resources/read",
            "params": { "uri": uri },
        });
        let Some(now) = relay.read(read).await else {
            continue;
        };
        let changed = last.as_ref().is_some_and(|last| *last != now);
        last = Some(now);
        if changed {
            let updated = json!({
                "jsonrpc": "2.0",
                "method": "notifications/resources/updated",
                "params": { "uri": uri },
            });
            if out.send(updated.to_string()).await.is_err() {
                return;
            }
        }
    }
}

/// A response's body as text, refused beyond [`MAX_LINE_BYTES`].
async fn read_body(mut response: reqwest::Response) -> Result<String, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if (body.len() + chunk.len()) as u64 > MAX_LINE_BYTES {
            return Err(format!("it is over {MAX_LINE_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).map_err(|_| "it is not UTF-8".to_owned())
}

fn uri_of(message: &Value) -> Option<&str> {
    message.pointer("/params/uri").and_then(Value::as_str)
}

/// The answer to request `id`: an empty result, or an invalid-params error.
fn answered(id: &Value, answer: Result<(), String>) -> String {
    match answer {
        Ok(()) => json!({ "jsonrpc": "2.0", "id": id, "result": {} }).to_string(),
        Err(message) => error_line(id, -32602, &message),
    }
}

fn error_line(id: &Value, code: i64, message: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string()
}

/// The way to the server's `/mcp`.
#[derive(Clone)]
struct Relay {
    http: reqwest::Client,
    endpoint: String,
    token: String,
    /// The protocol version `initialize` settled, sent on every later
    /// request as Streamable HTTP asks.
    version: Arc<Mutex<Option<String>>>,
}

impl Relay {
    /// Sends `message` and returns the lines to write back: its answer (the
    /// messages of an event stream, one each), or an error for a request
    /// the server could not answer; nothing for a notification or response.
    async fn send(&self, message: Value) -> Vec<String> {
        let id = message.get("id").cloned();
        let initialize = message.get("method").and_then(Value::as_str) == Some("initialize");
        let failed = |text: String| match &id {
            Some(id) => vec![error_line(id, -32603, &text)],
            None => {
                tracing::warn!(error = %text, "a notification to the server failed");
                Vec::new()
            }
        };
        let mut request = self
            .http
            .post(&self.endpoint)
            .bearer_auth(&self.token)
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .json(&message);
        let version = self
            .version
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(version) = version {
            request = request.header("mcp-protocol-version", version);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => return failed(format!("cannot reach {}: {error}", self.endpoint)),
        };
        let status = response.status();
        let event_stream = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let body = match read_body(response).await {
            Ok(body) => body,
            Err(why) => return failed(format!("the server's answer could not be read: {why}")),
        };
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return failed("the server refused the token (401): check --token-file".into());
        }
        if !status.is_success() {
            return failed(format!("the server answered {status}: {}", body.trim()));
        }
        let messages: Vec<String> = if event_stream {
            body.lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|data| data.trim().to_owned())
                .filter(|data| !data.is_empty())
                .collect()
        } else if body.trim().is_empty() {
            Vec::new()
        } else {
            vec![body.trim().to_owned()]
        };
        if initialize {
            return messages
                .into_iter()
                .map(|line| self.initialized(line))
                .collect();
        }
        messages
    }

    /// `initialize`'s answer: the version it settled is kept, and the
    /// resources capability says subscriptions work (this relay serves
    /// them).
    fn initialized(&self, line: String) -> String {
        let Ok(mut answer) = serde_json::from_str::<Value>(&line) else {
            return line;
        };
        if let Some(version) = answer
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
        {
            *self.version.lock().unwrap_or_else(PoisonError::into_inner) = Some(version.to_owned());
        }
        if let Some(Value::Object(resources)) = answer.pointer_mut("/result/capabilities/resources")
        {
            resources.insert("subscribe".into(), Value::Bool(true));
        }
        answer.to_string()
    }

    /// What reading a resource gives now, to compare; `None` if the read
    /// failed (tried again at the next poll).
    async fn read(&self, message: Value) -> Option<String> {
        let lines = self.send(message).await;
        let answer: Value = serde_json::from_str(lines.first()?).ok()?;
        answer
            .pointer("/result/contents")
            .map(|contents| contents.to_string())
    }
}
