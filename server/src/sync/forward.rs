//! Forwarding to a document's owner (SPEC C2): a sync socket that lands on
//! a node which does not own its document is carried, frame for frame, to
//! the owner's internal endpoint, so a y-websocket client never needs to
//! know which node owns what.
//!
//! The node that took the socket authenticates the member and checks the
//! document's access; the owner trusts that because the internal channel
//! shows the cluster's secret ([`crate::cluster::SECRET_HEADER`]), and joins the
//! member with the role named. Nothing is forwarded twice: an owner that
//! no longer owns the document answers 409 and the first node looks again.
//! When the owner stops answering (it crashed), a new connection waits for
//! its lease to lapse and joins wherever the document goes next, itself
//! included; a connection already carried to it is closed once its lease
//! lapses or moves (SPEC C5), and its client reconnects the same way.

use std::time::Duration;

use axum::extract::ws::{self, WebSocket};
use futures_util::{SinkExt, StreamExt};
use margin_protocol::sync::close;
use margin_protocol::Role;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tracing::{debug, Instrument};

use super::command::JoinRefused;
use super::hub::Joined;
use super::socket::close_message;
use super::Hub;
use crate::cluster::{Cluster, Heard};
use crate::sockets;
use crate::storage::Node;

/// The header naming the member a forwarded connection is for.
pub const ACCOUNT_HEADER: &str = "x-margin-account";
/// The header naming the member's role on the document.
pub const ROLE_HEADER: &str = "x-margin-role";

/// How long to wait before looking for the owner again.
const RETRY_EVERY: Duration = Duration::from_millis(50);

/// Largest frame an owner sends (a whole document's sync step 2 can pass
/// the limit on what members send).
const MAX_OWNER_FRAME: usize = 256 * 1024 * 1024;

/// How long a close frame may wait behind a member that is not reading.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a member is told to reconnect when its owner vanished.
const STOPPED: &str = "the server holding the document stopped; reconnect";

/// Why a member is told to reconnect when its owner lost the document.
const LOST: &str = "the server holding the document lost it (it stopped answering); reconnect";

/// Why a member is told to reconnect when its owner stopped answering.
const UNANSWERED: &str = "the server holding the document stopped answering; reconnect";

/// A connection to the owner's internal sync endpoint.
pub type Upstream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Where a sync socket is served.
pub enum SyncRoute {
    /// On this node: it joined the document's task here.
    Here(Joined),
    /// On the owner node, through this connection, watched by this
    /// node's cluster.
    There(Box<Upstream>, Node, Cluster),
}

/// Why a connection could not be routed.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// Joining here failed.
    #[error(transparent)]
    Join(#[from] JoinRefused),
    /// No node could serve the document in time.
    #[error("no server could take the document in time ({0}); try again")]
    Unavailable(String),
}

/// Finds where member `account` with `role` is served on document `id`:
/// here when this node owns it or can take it, else on its owner.
pub async fn route_sync(
    hub: &Hub,
    cluster: &Cluster,
    id: &str,
    account: &str,
    role: Role,
) -> Result<SyncRoute, RouteError> {
    let deadline = Instant::now() + cluster.failover_patience();
    loop {
        let last;
        let owner = cluster
            .elsewhere(id)
            .await
            .map_err(|e| RouteError::Unavailable(e.to_string()))?;
        match owner {
            Some(node) => match connect(cluster, &node, id, account, role).await {
                Ok(upstream) => {
                    return Ok(SyncRoute::There(Box::new(upstream), node, cluster.clone()))
                }
                Err(error) => {
                    debug!(%error, node = %node.id, "owner did not take the connection");
                    last = error.to_string();
                }
            },
            None => match hub.join(id, account, role).await {
                Ok(joined) => return Ok(SyncRoute::Here(joined)),
                Err(JoinRefused::Elsewhere(why)) => last = why,
                Err(refused) => return Err(refused.into()),
            },
        }
        if Instant::now() >= deadline {
            return Err(RouteError::Unavailable(last));
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_EVERY) => {}
            _ = cluster.woken() => {}
        }
    }
}

/// Why the owner did not take a forwarded connection.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error("owner at {0} did not answer in time")]
    Timeout(String),
    #[error("owner at {0} refused: {1}")]
    Refused(String, String),
    #[error("bad owner address {0}")]
    Address(String),
}

/// Opens the owner's internal sync endpoint for `id`.
async fn connect(
    cluster: &Cluster,
    node: &Node,
    id: &str,
    account: &str,
    role: Role,
) -> Result<Upstream, ConnectError> {
    let address = || ConnectError::Address(node.advertise.clone());
    let mut request = cluster
        .internal_request(node, &format!("/internal/documents/{id}/sync"))
        .ok_or_else(address)?;
    let headers = request.headers_mut();
    headers.insert(
        ACCOUNT_HEADER,
        HeaderValue::from_str(account).map_err(|_| address())?,
    );
    headers.insert(ROLE_HEADER, HeaderValue::from_static(role.as_str()));
    let config = sockets::opening(MAX_OWNER_FRAME);
    let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
    // An owner that cannot answer within its lease's span (it paused) is
    // looked up again: by then it may have lapsed.
    match tokio::time::timeout(cluster.lease_ttl(), connecting).await {
        Err(_) => Err(ConnectError::Timeout(node.advertise.clone())),
        Ok(Ok((upstream, _))) => Ok(upstream),
        Ok(Err(tungstenite::Error::Http(response))) => Err(ConnectError::Refused(
            node.advertise.clone(),
            match response.status() {
                StatusCode::CONFLICT => "it no longer owns the document".into(),
                status => status.to_string(),
            },
        )),
        Ok(Err(error)) => Err(ConnectError::Refused(
            node.advertise.clone(),
            error.to_string(),
        )),
    }
}

/// Carries frames between the member's `client` socket and the owner's
/// `upstream` until either closes; a close on one side is passed to the
/// other with its code and reason. An owner that vanishes (a crash), or
/// that no longer holds the document (it paused past its lease, SPEC C5),
/// closes the member with "going away", so it reconnects and finds the
/// next owner.
pub async fn pipe(
    cluster: Cluster,
    client: Box<WebSocket>,
    upstream: Box<Upstream>,
    id: String,
    node: Node,
) {
    let span = tracing::info_span!("forward", document = %id, owner = %node.id);
    async move {
        let (mut client_tx, mut client_rx) = (*client).split();
        let (mut up_tx, mut up_rx) = (*upstream).split();
        let going_away = |why: &str| Some(close_message(close::GOING_AWAY, why));
        // The owner is pinged every renewal interval; one that answers
        // nothing for a lease's span (cut off from this node, though it may
        // still hold its lease) is given up.
        let heard = Heard::default();
        let (ping_every, silence) = (cluster.renew_every(), cluster.silence_allowed());
        // Each direction is a task of its own, so traffic one way never
        // polls the other way's socket again. Each ends with the close the
        // member is owed, if any.
        let mut inbound = tokio::spawn(
            async move {
                let mut ping = tokio::time::interval(ping_every);
                loop {
                    let message = tokio::select! {
                        message = client_rx.next() => message,
                        _ = ping.tick() => {
                            if up_tx.send(Message::Ping(Default::default())).await.is_err() {
                                return going_away(STOPPED);
                            }
                            continue;
                        }
                    };
                    let Some(message) = message else { break };
                    let Ok(message) = message else { return None };
                    let closing = matches!(message, ws::Message::Close(_));
                    if up_tx.send(to_upstream(message)).await.is_err() {
                        return going_away(STOPPED);
                    }
                    if closing {
                        break;
                    }
                }
                let _ = up_tx.close().await;
                None
            }
            .in_current_span(),
        );
        let outbound = async {
            loop {
                let frame = up_rx.next().await;
                heard.now();
                match frame {
                    Some(Ok(Message::Close(frame))) => {
                        break Some(
                            frame
                                .map(|f| close_message(u16::from(f.code), &f.reason))
                                .unwrap_or(ws::Message::Close(None)),
                        );
                    }
                    Some(Ok(message)) => {
                        if let Some(message) = to_client(message) {
                            if client_tx.send(message).await.is_err() {
                                break None;
                            }
                        }
                    }
                    Some(Err(_)) | None => break going_away(STOPPED),
                }
            }
        };
        // Either side ending, or the owner losing the document or going
        // silent, ends both.
        let farewell = tokio::select! {
            ended = &mut inbound => ended.ok().flatten(),
            farewell = outbound => farewell,
            _ = cluster.until_moved(&id, &node.id) => {
                debug!("the owner no longer holds the document");
                going_away(LOST)
            }
            _ = heard.silent_for(silence) => {
                debug!("the owner stopped answering");
                going_away(UNANSWERED)
            }
        };
        inbound.abort();
        if let Some(farewell) = farewell {
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, client_tx.send(farewell)).await;
        }
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, client_tx.close()).await;
        debug!("forwarded connection ended");
    }
    .instrument(span)
    .await
}

fn to_upstream(message: ws::Message) -> Message {
    match message {
        ws::Message::Binary(data) => Message::Binary(data),
        ws::Message::Text(text) => Message::Text(text.as_str().into()),
        ws::Message::Ping(data) => Message::Ping(data),
        ws::Message::Pong(data) => Message::Pong(data),
        ws::Message::Close(frame) => Message::Close(frame.map(|f| CloseFrame {
            code: CloseCode::from(f.code),
            reason: f.reason.as_str().into(),
        })),
    }
}

fn to_client(message: Message) -> Option<ws::Message> {
    match message {
        Message::Binary(data) => Some(ws::Message::Binary(data)),
        Message::Text(text) => Some(ws::Message::Text(text.as_str().into())),
        // Each hop answers its own pings.
        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) | Message::Close(_) => None,
    }
}
