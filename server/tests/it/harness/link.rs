//! A bare machine-link client: JSON text frames over a WebSocket, the way
//! a connector in any language would speak to `/machine`.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use margin_protocol::link::ServerMessage;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{connect_async, MaybeTlsStream, WebSocketStream};

use super::client::PATIENCE;

pub struct LinkClient {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// Set when the server closed the link: (code, reason).
    pub closed: Option<(u16, String)>,
    /// The `credential` messages received so far, oldest first:
    /// (credential, expires_at). [`LinkClient::next`] and the readers built
    /// on it set them aside here (SPEC L8); [`LinkClient::next_raw`] does not.
    pub credentials: Vec<(String, i64)>,
    /// Every `reply-received` and `run-received`, in order (SPEC L10):
    /// kept here, like credentials, so tests that read a link's work see
    /// the work.
    pub acks: Vec<ServerMessage>,
}

/// How the server refused an upgrade at `/machine`: HTTP status and the
/// error body's code and message.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl LinkClient {
    /// Connects with `credential`; the HTTP status if the upgrade is refused.
    pub async fn connect(addr: std::net::SocketAddr, credential: &str) -> Result<LinkClient, u16> {
        Self::open(addr, credential)
            .await
            .map_err(|refused| refused.status)
    }

    /// Connects with `credential`; how the upgrade was refused, with the
    /// error body's code and message.
    pub async fn open(addr: std::net::SocketAddr, credential: &str) -> Result<LinkClient, Refused> {
        let mut request = format!("ws://{addr}/machine")
            .into_client_request()
            .unwrap();
        request.headers_mut().insert(
            "Authorization",
            format!("Bearer {credential}").parse().unwrap(),
        );
        match connect_async(request).await {
            Ok((ws, _)) => Ok(LinkClient {
                ws,
                closed: None,
                credentials: Vec::new(),
                acks: Vec::new(),
            }),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let body: serde_json::Value = response
                    .body()
                    .as_deref()
                    .and_then(|body| serde_json::from_slice(body).ok())
                    .unwrap_or_default();
                Err(Refused {
                    status: response.status().as_u16(),
                    code: body["error"]["code"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    message: body["error"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                })
            }
            Err(other) => panic!("link connect failed: {other}"),
        }
    }

    /// Connects with `credential`, expecting a refusal.
    pub async fn refused(addr: std::net::SocketAddr, credential: &str) -> Refused {
        match Self::open(addr, credential).await {
            Ok(_) => panic!("the link opened with credential {credential:?}"),
            Err(refused) => refused,
        }
    }

    pub async fn send_text(&mut self, text: &str) {
        let _ = self.ws.send(WsMessage::Text(text.into())).await;
    }

    pub async fn send_binary(&mut self, bytes: Vec<u8>) {
        let _ = self.ws.send(WsMessage::Binary(bytes.into())).await;
    }

    pub async fn hello(&mut self) -> ServerMessage {
        self.send_text(
            r#"{"type":"hello","protocol_version":1,"features":["resumable-sessions"]}"#,
        )
        .await;
        self.next().await.expect("an answer to hello")
    }

    /// A `hello` whose manifest declares `planning: true` (SPEC U1).
    pub async fn hello_planning(&mut self) -> ServerMessage {
        self.send_text(
            r#"{"type":"hello","protocol_version":1,"features":["resumable-sessions"],"manifest":{"planning":true}}"#,
        )
        .await;
        self.next().await.expect("an answer to hello")
    }

    /// A `hello` without `resumable-sessions`: a drop ends the sessions.
    pub async fn hello_without_resume(&mut self) -> ServerMessage {
        self.send_text(r#"{"type":"hello","protocol_version":1,"features":[]}"#)
            .await;
        self.next().await.expect("an answer to hello")
    }

    /// The next server message that is not a `credential` (those are kept
    /// in [`LinkClient::credentials`]), or `None` once the link is closed.
    pub async fn next(&mut self) -> Option<ServerMessage> {
        tokio::time::timeout(PATIENCE, async {
            loop {
                match self.next_raw().await? {
                    ServerMessage::Credential {
                        credential,
                        expires_at,
                    } => self.credentials.push((credential, expires_at)),
                    ack @ (ServerMessage::ReplyReceived { .. }
                    | ServerMessage::RunReceived { .. }) => self.acks.push(ack),
                    other => return Some(other),
                }
            }
        })
        .await
        .expect("the server neither spoke nor closed in time")
    }

    /// The next server message, whatever it is, or `None` once the link is
    /// closed.
    pub async fn next_raw(&mut self) -> Option<ServerMessage> {
        tokio::time::timeout(PATIENCE, async {
            loop {
                match self.ws.next().await {
                    Some(Ok(WsMessage::Text(text))) => {
                        return Some(
                            serde_json::from_str(&text).expect("server sent a malformed message"),
                        )
                    }
                    Some(Ok(WsMessage::Close(frame))) => {
                        self.closed = frame.map(|f| (u16::from(f.code), f.reason.to_string()));
                        return None;
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(_)) | None => return None,
                }
            }
        })
        .await
        .expect("the server neither spoke nor closed in time")
    }

    /// The next message that is not a heartbeat (heartbeats are answered),
    /// within the test's patience overall.
    pub async fn next_work(&mut self) -> Option<ServerMessage> {
        tokio::time::timeout(PATIENCE, async {
            loop {
                match self.next().await? {
                    ServerMessage::Heartbeat { seq } => {
                        self.send_text(&format!(r#"{{"type":"heartbeat-ack","seq":{seq}}}"#))
                            .await;
                    }
                    other => return Some(other),
                }
            }
        })
        .await
        .expect("no message but heartbeats within the time allowed")
    }

    /// The first message other than a heartbeat within `quiet`, if any.
    pub async fn work_within(&mut self, quiet: Duration) -> Option<ServerMessage> {
        tokio::time::timeout(quiet, self.next_work())
            .await
            .ok()
            .flatten()
    }

    /// Sends a client message.
    pub async fn send_message(&mut self, message: &margin_protocol::link::ClientMessage) {
        self.send_text(&serde_json::to_string(message).unwrap())
            .await;
    }

    /// Reads until the server closes; returns the close code and reason.
    pub async fn wait_closed(&mut self) -> (u16, String) {
        while self.next().await.is_some() {}
        self.closed.clone().expect("closed without a close frame")
    }

    /// Reads for `quiet`, answering heartbeats; returns every other message
    /// that arrived meanwhile.
    pub async fn collect_for(&mut self, quiet: Duration) -> Vec<ServerMessage> {
        let deadline = tokio::time::Instant::now() + quiet;
        let mut got = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return got;
            }
            match tokio::time::timeout(left, self.ws.next()).await {
                Err(_) => return got,
                Ok(Some(Ok(WsMessage::Text(text)))) => {
                    match serde_json::from_str(&text).expect("server sent a malformed message") {
                        ServerMessage::Heartbeat { seq } => {
                            self.send_text(&format!(r#"{{"type":"heartbeat-ack","seq":{seq}}}"#))
                                .await;
                        }
                        ServerMessage::Credential {
                            credential,
                            expires_at,
                        } => self.credentials.push((credential, expires_at)),
                        ack @ (ServerMessage::ReplyReceived { .. }
                        | ServerMessage::RunReceived { .. }) => self.acks.push(ack),
                        other => got.push(other),
                    }
                }
                Ok(Some(Ok(WsMessage::Close(frame)))) => {
                    self.closed = frame.map(|f| (u16::from(f.code), f.reason.to_string()));
                    return got;
                }
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(_)) | None) => return got,
            }
        }
    }

    /// Reads for `quiet`, answering heartbeats; false if the link closed.
    pub async fn stays_open_answering(&mut self, quiet: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + quiet;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            match tokio::time::timeout(left, self.ws.next()).await {
                Err(_) => return true,
                Ok(Some(Ok(WsMessage::Text(text)))) => match serde_json::from_str(&text) {
                    Ok(ServerMessage::Heartbeat { seq }) => {
                        self.send_text(&format!(r#"{{"type":"heartbeat-ack","seq":{seq}}}"#))
                            .await;
                    }
                    Ok(ServerMessage::Credential {
                        credential,
                        expires_at,
                    }) => self.credentials.push((credential, expires_at)),
                    _ => {}
                },
                Ok(Some(Ok(WsMessage::Close(frame)))) => {
                    self.closed = frame.map(|f| (u16::from(f.code), f.reason.to_string()));
                    return false;
                }
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(_)) | None) => return false,
            }
        }
    }
}
