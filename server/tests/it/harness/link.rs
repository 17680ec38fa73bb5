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
}

impl LinkClient {
    /// Connects with `credential`; the HTTP status if the upgrade is refused.
    pub async fn connect(addr: std::net::SocketAddr, credential: &str) -> Result<LinkClient, u16> {
        let mut request = format!("ws://{addr}/machine")
            .into_client_request()
            .unwrap();
        request.headers_mut().insert(
            "Authorization",
            format!("Bearer {credential}").parse().unwrap(),
        );
        match connect_async(request).await {
            Ok((ws, _)) => Ok(LinkClient { ws, closed: None }),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                Err(response.status().as_u16())
            }
            Err(other) => panic!("link connect failed: {other}"),
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

    /// A `hello` without `resumable-sessions`: a drop ends the sessions.
    pub async fn hello_without_resume(&mut self) -> ServerMessage {
        self.send_text(r#"{"type":"hello","protocol_version":1,"features":[]}"#)
            .await;
        self.next().await.expect("an answer to hello")
    }

    /// The next server message, or `None` once the link is closed.
    pub async fn next(&mut self) -> Option<ServerMessage> {
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
                Ok(Some(Ok(WsMessage::Text(text)))) => {
                    if let Ok(ServerMessage::Heartbeat { seq }) = serde_json::from_str(&text) {
                        self.send_text(&format!(r#"{{"type":"heartbeat-ack","seq":{seq}}}"#))
                            .await;
                    }
                }
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
