//! One relay's socket to another node (SPEC C2): opened at that node's
//! internal link endpoint with the link's terms in headers, then pumped —
//! the machine's messages out, that node's frames back as events.

use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

use super::Event;
use crate::cluster::{Cluster, Heard};
use crate::link::Terms;
use crate::sockets;
use crate::storage::{Machine, Node};

/// Headers that carry a relayed link's terms (SPEC L1, R2, U1).
pub const RUN_CAPACITY_HEADER: &str = "x-margin-run-capacity";

/// Whether `resumable-sessions` was granted.
pub const RESUMABLE_HEADER: &str = "x-margin-resumable";

/// Whether the machine's manifest declared `planning`.
pub const PLANNING_HEADER: &str = "x-margin-planning";

pub(super) type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `machine`'s relay on `node`.
pub(super) async fn open(
    cluster: &Cluster,
    node: &Node,
    machine: &Machine,
    terms: Terms,
) -> Result<Ws, String> {
    let mut request = cluster
        .internal_request(node, &format!("/internal/machines/{}/link", machine.id))
        .ok_or_else(|| format!("bad node address {}", node.advertise))?;
    let headers = request.headers_mut();
    let value = |text: &str| HeaderValue::from_str(text).map_err(|e| e.to_string());
    headers.insert(RUN_CAPACITY_HEADER, value(&terms.run_capacity.to_string())?);
    headers.insert(RESUMABLE_HEADER, value(&terms.resumable.to_string())?);
    headers.insert(PLANNING_HEADER, value(&terms.planning.to_string())?);
    let config = sockets::opening(margin_protocol::link::MAX_SERVER_FRAME_BYTES);
    let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
    match tokio::time::timeout(cluster.lease_ttl(), connecting).await {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("no answer in time".into()),
    }
}

/// Carries one relay: what the link sends out to the node, what the node
/// sends in to the link's loop, until either ends — or until the node
/// lapses (it paused or lost the database past its lease: it answers
/// nothing, and its sessions go to other nodes) or stops answering the
/// pings sent every renewal interval (it is cut off from this node), SPEC
/// C5.
pub(super) async fn pump(
    ws: Ws,
    mut outgoing: mpsc::Receiver<Message>,
    node: String,
    events: mpsc::Sender<(String, Event)>,
    cluster: Cluster,
) {
    let (mut sink, mut stream) = ws.split();
    let mut lapsed = std::pin::pin!(cluster.until_lapsed(&node));
    let heard = Heard::default();
    let mut ping = tokio::time::interval(cluster.renew_every());
    loop {
        tokio::select! {
            _ = &mut lapsed => {
                let _ = events.send((node, Event::Closed(None))).await;
                return;
            }
            _ = heard.silent_for(cluster.silence_allowed()) => {
                let _ = events.send((node, Event::Closed(None))).await;
                return;
            }
            _ = ping.tick() => {
                if sink.send(Message::Ping(Default::default())).await.is_err() {
                    let _ = events.send((node, Event::Closed(None))).await;
                    return;
                }
            }
            out = outgoing.recv() => match out {
                Some(message) => {
                    let closing = matches!(message, Message::Close(_));
                    if sink.send(message).await.is_err() || closing {
                        return;
                    }
                }
                None => {
                    let _ = sink.close().await;
                    return;
                }
            },
            incoming = stream.next() => {
                heard.now();
                match incoming {
                    Some(Ok(Message::Text(text))) => {
                        if events.send((node.clone(), Event::Frame(text.to_string()))).await.is_err() {
                            return;
                        }
                    }
                    Some(Ok(Message::Close(frame))) => {
                        let closed = frame.map(|f| (u16::from(f.code), f.reason.to_string()));
                        let _ = events.send((node, Event::Closed(closed))).await;
                        return;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => {
                        let _ = events.send((node, Event::Closed(None))).await;
                        return;
                    }
                }
            }
        }
    }
}
