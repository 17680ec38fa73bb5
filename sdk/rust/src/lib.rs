//! Margin's Rust connector SDK: links a Planner machine to Margin at
//! `/machine` and runs a [`Handler`] for its Planner (SPEC O3).
//!
//! The SDK owns the link's mechanics so a Planner only writes its work:
//! `hello` (asking for `resumable-sessions` unless told not to, SPEC L1),
//! heartbeats, one task per turn with typed tool calls ([`Turn`]), the
//! turn's `reply`, answers to questions it asked, and Stop (the turn is
//! aborted, [`Handler::stop`] runs, then `stopped` is sent).
//!
//! Machine credentials are short-lived (SPEC L8): the server sends a fresh
//! one right after `welcome` and again well before it expires. The
//! connector keeps the newest for its next connect — in memory, or, with
//! [`Connector::credential_file`], in a file readable by its owner only
//! (mode 0600) that each renewal replaces atomically, so a Planner backend
//! that restarts re-attaches with a credential that is still valid.
//!
//! A reply or run report written into a link that had already died is lost
//! with it, so the connector keeps each until the server acknowledges it
//! (`reply-received`, `run-received`, SPEC L10) and sends it again after
//! the next `resumed`: posted once, never twice.
//!
//! ```no_run
//! use margin_sdk::{Connector, Handler, Turn, ToolError};
//!
//! struct Echo;
//!
//! impl Handler for Echo {
//!     async fn turn(&self, turn: Turn) -> Result<String, ToolError> {
//!         let read = turn.read_document().await?;
//!         Ok(format!("The plan has {} blocks.", read.outline.len()))
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let connector = Connector::with_credential_file("http://127.0.0.1:7070", "laptop.credential");
//! let linked = connector.connect().await?;
//! let ended = linked.serve(Echo, std::future::pending()).await;
//! println!("link ended: {ended}");
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod calls;
mod credential;
mod handler;
mod kept;
mod link;

pub use credential::write_credential_file;
pub use handler::{Answer, Handler, SessionHandle, ToolError, Turn};
pub use link::{Ended, Linked};

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use credential::Keeper;

use futures_util::{SinkExt, StreamExt};
use margin_protocol::link::{Capabilities, ClientMessage, ServerMessage, PROTOCOL_VERSION};
use margin_protocol::sessions::Manifest;
use margin_protocol::{Code, ErrorBody};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

pub use margin_protocol::link::RESUMABLE_SESSIONS;

/// Called with each link's `welcome`.
type OnLink = Arc<dyn Fn(&Welcome) + Send + Sync>;

/// How to reach a server: its address and where the machine's credential
/// is kept. Clones share that credential: a renewal one link receives is
/// what every clone connects with next.
#[derive(Clone)]
pub struct Connector {
    server: String,
    credential: Keeper,
    resumable: bool,
    run_capacity: Option<u32>,
    planning: bool,
    /// Where the sessions a `resume` names are kept across restarts.
    held_file: Option<PathBuf>,
    /// A link this long without a frame from the server counts as dropped.
    silence: Duration,
    on_link: Option<OnLink>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("server", &self.server)
            .field("credential", &self.credential)
            .field("resumable", &self.resumable)
            .field("run_capacity", &self.run_capacity)
            .field("planning", &self.planning)
            .field("held_file", &self.held_file)
            .field("silence", &self.silence)
            .finish_non_exhaustive()
    }
}

/// The first pause before linking again; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
/// The longest pause between attempts to link again.
const MAX_PAUSE: Duration = Duration::from_secs(30);
/// How long a link may stay silent before it counts as dropped: three of
/// the server's heartbeats.
const SILENCE: Duration = Duration::from_secs(45);

/// Why a link could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The server address is not `http(s)://` or `ws(s)://`.
    #[error("server address {0:?} must start with http://, https://, ws:// or wss://")]
    Address(String),
    /// The credential cannot go in a header.
    #[error("the credential is not a valid header value")]
    Credential,
    /// The server refused the upgrade. A 401's `code` names the cause
    /// (`margin_protocol::link::refused`): `unauthenticated` (an unknown
    /// credential), `machine_revoked` or `credential_expired`.
    #[error("the server refused the link with HTTP {status} ({}): {message}", code.map_or("no code", Code::as_str))]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The error body's code (`None` when the body was unreadable).
        code: Option<Code>,
        /// The error body's message.
        message: String,
    },
    /// The credential file could not be read (missing, or not readable).
    #[error("cannot read the credential file {}: {source}", path.display())]
    CredentialFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The credential file holds no credential.
    #[error("the credential file {} is empty; write the machine's credential (mgm_…) into it", path.display())]
    EmptyCredentialFile {
        /// The file.
        path: PathBuf,
    },
    /// The connection failed.
    #[error("cannot reach the server: {0}")]
    Network(#[from] tokio_tungstenite::tungstenite::Error),
    /// The server answered `hello` with a refusal.
    #[error("the server refused hello ({code}): {message}")]
    Hello {
        /// The refusal's code.
        code: margin_protocol::RefusalCode,
        /// Its message.
        message: String,
    },
    /// The server closed or said something else instead of `welcome`.
    #[error("the server did not welcome the machine: {0}")]
    NoWelcome(String),
}

impl Connector {
    /// A connector for `server` (e.g. `http://127.0.0.1:7070`) with the
    /// machine's `credential` (`mgm_…`), kept in memory: each fresh
    /// credential a link sends replaces it for the next connect. It asks
    /// for resumable sessions.
    pub fn new(server: impl Into<String>, credential: impl Into<String>) -> Self {
        Connector {
            server: server.into(),
            credential: Keeper::memory(credential.into()),
            resumable: true,
            run_capacity: None,
            planning: false,
            held_file: None,
            silence: SILENCE,
            on_link: None,
        }
    }

    /// A connector for `server` whose credential lives in the file at
    /// `path`: see [`Connector::credential_file`].
    pub fn with_credential_file(server: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Connector::new(server, String::new()).credential_file(path)
    }

    /// Keeps the machine's credential in the file at `path` instead of in
    /// memory (the credential given to [`Connector::new`] is then not
    /// used). Each connect reads the file (its content, trimmed); each
    /// fresh credential a link sends replaces it atomically — a temporary
    /// file in the same folder, created with mode 0600, flushed to disk and
    /// renamed over it — so the file always holds a whole, current
    /// credential and is never readable by others (SPEC L8). A file that
    /// cannot be written is logged and keeps the previous credential, which
    /// stays valid until its own expiry.
    pub fn credential_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.credential = Keeper::File(path.into());
        self
    }

    /// Keeps the sessions this machine holds, the questions each waits on,
    /// and the replies and run reports the server has not acknowledged, in
    /// the file at `path` too (`margin_protocol::kept`; private, replaced
    /// atomically on each change), so that after the machine itself
    /// restarts its first `resume` names them again — a kept reply's turn
    /// included — the server carries them on, and the kept reply and
    /// reports go again after `resumed` (SPEC L3, L10, W2). A turn or a
    /// call that was running when it stopped is not kept: the server ends
    /// such a turn saying so, or sends it again if nothing was done in it
    /// yet.
    pub fn held_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.held_file = Some(path.into());
        self
    }

    /// Counts a link that brings nothing from the server for `silence`
    /// (default 45 s, three heartbeats) as dropped — a socket can die
    /// without either end being told, and what is written into it is then
    /// lost. The connector pings the server every third of it, so a quiet
    /// but healthy link is never taken for a dead one; [`Connector::run`]
    /// links again and resumes, sending again what was not acknowledged
    /// (SPEC L10). Waiting for `welcome` is bounded by it too.
    pub fn silence_timeout(mut self, silence: Duration) -> Self {
        self.silence = silence.max(Duration::from_millis(10));
        self
    }

    /// Checks that a credential is at hand — the credential file exists and
    /// holds one — without connecting.
    pub fn check_credential(&self) -> Result<(), ConnectError> {
        self.credential.current().map(drop)
    }

    /// Calls `on_link` with each link's `welcome` in [`Connector::run`].
    pub fn on_link(mut self, on_link: impl Fn(&Welcome) + Send + Sync + 'static) -> Self {
        self.on_link = Some(Arc::new(on_link));
        self
    }

    /// Serves `handler` until `until` completes (then it detaches) or the
    /// server ends the link for good, linking again after every drop with
    /// backoff and jitter. With resumable sessions (the default) each new
    /// link starts with `resume`: the server keeps the sessions through the
    /// drop, running turns carry on, held answers and Stops arrive after
    /// `resumed`, and no answer is delivered twice (SPEC L3, L5).
    pub async fn run<H: Handler>(&self, handler: H, until: impl Future<Output = ()>) -> Ended {
        let mut serving = link::Serving::new(handler, self.held_file.clone());
        tokio::pin!(until);
        let mut failures = 0u32;
        loop {
            match self.connect().await {
                Ok(linked) => {
                    failures = 0;
                    if let Some(on_link) = &self.on_link {
                        on_link(linked.welcome());
                    }
                    let ended = serving
                        .drive(
                            linked.socket,
                            &linked.credential,
                            until.as_mut(),
                            self.resumable,
                            self.silence,
                        )
                        .await;
                    if ended.is_final() {
                        return ended;
                    }
                    tracing::warn!(%ended, "link ended; linking again");
                }
                Err(e) if e.is_final() => {
                    serving.finish(self.resumable);
                    return Ended::Refused(e.to_string());
                }
                Err(e) => tracing::warn!(error = %e, "cannot link; trying again"),
            }
            let pause = backoff(failures);
            failures = failures.saturating_add(1);
            tokio::select! {
                () = &mut until => {
                    serving.finish(self.resumable);
                    return Ended::Detached;
                }
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Declares the most run attempts each session keeps live at once
    /// (1–64; the server's default is 8, SPEC R2).
    pub fn run_capacity(mut self, capacity: u32) -> Self {
        self.run_capacity = Some(capacity);
        self
    }

    /// Declares `planning: true` in the manifest (SPEC U1): each session
    /// this Planner starts keeps a durable plan, through
    /// [`Turn::update_plan`], and each turn hands it back in [`Turn::plan`].
    pub fn planning(mut self, planning: bool) -> Self {
        self.planning = planning;
        self
    }

    /// `resumable: false` opts out of `resumable-sessions` (SPEC L1): a drop
    /// then ends the link's sessions.
    pub fn resumable(mut self, resumable: bool) -> Self {
        self.resumable = resumable;
        self
    }

    /// The features this connector asks for in `hello`.
    pub fn features(&self) -> Vec<String> {
        if self.resumable {
            vec![RESUMABLE_SESSIONS.to_owned()]
        } else {
            Vec::new()
        }
    }

    /// The link's WebSocket address.
    fn url(&self) -> Result<String, ConnectError> {
        let base = self.server.trim_end_matches('/');
        let rest = [
            ("http://", "ws://"),
            ("https://", "wss://"),
            ("ws://", "ws://"),
            ("wss://", "wss://"),
        ]
        .iter()
        .find_map(|(from, to)| base.strip_prefix(from).map(|rest| format!("{to}{rest}")))
        .ok_or_else(|| ConnectError::Address(self.server.clone()))?;
        Ok(format!("{rest}/machine"))
    }

    /// Opens the link with the current credential (read from the
    /// credential file, if there is one): connects, sends `hello`, waits
    /// for `welcome`.
    pub async fn connect(&self) -> Result<Linked, ConnectError> {
        let url = self.url()?;
        let credential = self.credential.current()?;
        let mut request = url.into_client_request()?;
        let bearer = HeaderValue::from_str(&format!("Bearer {credential}"))
            .map_err(|_| ConnectError::Credential)?;
        request.headers_mut().insert("Authorization", bearer);
        let (mut ws, _) = match tokio_tungstenite::connect_async(request).await {
            Ok(opened) => opened,
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let body = response
                    .body()
                    .as_deref()
                    .and_then(|body| serde_json::from_slice::<ErrorBody>(body).ok());
                let (code, message) = match body {
                    Some(body) => (Some(body.error.code), body.error.message),
                    None => (None, String::new()),
                };
                return Err(ConnectError::Refused {
                    status: response.status().as_u16(),
                    code,
                    message,
                });
            }
            Err(other) => return Err(other.into()),
        };
        let hello = ClientMessage::Hello {
            protocol_version: PROTOCOL_VERSION,
            features: self.features(),
            run_capacity: self.run_capacity,
            manifest: self.planning.then_some(Manifest { planning: true }),
        };
        ws.send(Message::Text(link::encode(&hello).into())).await?;
        match tokio::time::timeout(self.silence, self.welcomed(ws)).await {
            Ok(linked) => linked,
            Err(_) => Err(ConnectError::NoWelcome(format!(
                "no answer to hello in {} ms",
                self.silence.as_millis()
            ))),
        }
    }

    /// Waits for `welcome` on a link that sent `hello`.
    async fn welcomed(&self, mut ws: link::Socket) -> Result<Linked, ConnectError> {
        loop {
            let answer = match ws.next().await {
                Some(Ok(Message::Text(text))) => serde_json::from_str::<ServerMessage>(&text)
                    .map_err(|e| ConnectError::NoWelcome(format!("unreadable answer: {e}")))?,
                Some(Ok(Message::Close(frame))) => {
                    return Err(ConnectError::NoWelcome(match frame {
                        Some(frame) => {
                            format!("closed {} ({})", u16::from(frame.code), frame.reason)
                        }
                        None => "closed".into(),
                    }))
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.into()),
                None => return Err(ConnectError::NoWelcome("closed".into())),
            };
            return match answer {
                ServerMessage::Welcome {
                    machine,
                    capabilities,
                    ..
                } => Ok(Linked::new(
                    ws,
                    machine,
                    capabilities,
                    self.credential.clone(),
                    self.silence,
                )),
                ServerMessage::Refusal { code, message, .. } => {
                    Err(ConnectError::Hello { code, message })
                }
                other => Err(ConnectError::NoWelcome(format!("got {other:?}"))),
            };
        }
    }
}

impl ConnectError {
    /// Whether trying again cannot help: the address, credential or
    /// `hello` is wrong, not the network.
    pub fn is_final(&self) -> bool {
        match self {
            ConnectError::Address(_) | ConnectError::Credential | ConnectError::Hello { .. } => {
                true
            }
            ConnectError::Refused { status, .. } => matches!(status, 401 | 403 | 404),
            ConnectError::CredentialFile { .. } | ConnectError::EmptyCredentialFile { .. } => false,
            ConnectError::Network(_) | ConnectError::NoWelcome(_) => false,
        }
    }
}

/// The pause before the next attempt after `failures` failed ones: doubling
/// from [`FIRST_PAUSE`] to [`MAX_PAUSE`], with up to half of it as jitter so
/// a fleet of machines dropped at once does not return at once.
fn backoff(failures: u32) -> Duration {
    let base = FIRST_PAUSE
        .saturating_mul(1u32 << failures.min(8))
        .min(MAX_PAUSE);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let jitter = base.mul_f64(f64::from(nanos % 1000) / 2000.0);
    base - jitter / 2 + jitter
}

/// What `welcome` said.
#[derive(Clone, Debug)]
pub struct Welcome {
    /// The machine's name.
    pub machine: String,
    /// What the server offers, including the features it granted.
    pub capabilities: Capabilities,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_become_the_link_url() {
        let url = |server: &str| Connector::new(server, "c").url().ok();
        assert_eq!(
            url("http://127.0.0.1:7070").as_deref(),
            Some("ws://127.0.0.1:7070/machine")
        );
        assert_eq!(
            url("https://margin.example/").as_deref(),
            Some("wss://margin.example/machine")
        );
        assert_eq!(url("ws://h:1").as_deref(), Some("ws://h:1/machine"));
        assert_eq!(url("margin.example"), None);
    }

    #[test]
    fn backoff_doubles_to_its_cap_with_bounded_jitter() {
        for failures in 0..20 {
            let base = FIRST_PAUSE
                .saturating_mul(1u32 << failures.min(8))
                .min(MAX_PAUSE);
            let pause = backoff(failures);
            assert!(
                pause >= base.mul_f64(0.75) && pause <= base.mul_f64(1.25),
                "{failures}: {pause:?}"
            );
        }
        assert!(backoff(30) <= MAX_PAUSE.mul_f64(1.25));
    }

    #[test]
    fn resumable_sessions_are_asked_for_by_default_and_can_be_declined() {
        assert_eq!(
            Connector::new("http://h", "c").features(),
            [RESUMABLE_SESSIONS]
        );
        assert!(Connector::new("http://h", "c")
            .resumable(false)
            .features()
            .is_empty());
    }
}
