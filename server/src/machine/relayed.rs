//! A machine link relayed here from the node the machine linked to (SPEC
//! C2; the other side is [`super::relay`]). It is a link like any other to
//! this node's sessions — `@planner` binds to it, drivers send through it,
//! `resume` moves sessions onto it — but the machine's `hello`, heartbeats
//! and credentials stay with the node that holds its socket. The relay
//! ends with the close that node gives it, which says how the machine's
//! link ended (detached, dropped, …), and this node's own closes
//! (superseded, revoked) go back to the machine the same way.

use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use futures_util::{SinkExt, StreamExt};
use margin_protocol::link::{close, ClientMessage};
use tracing::{debug, Instrument};

use super::socket::{dispatch, parse};
use crate::link::{refusal, LinkEnd, Links, Terms};
use crate::sessions::Sessions;
use crate::sockets;
use crate::storage::Machine;
use crate::sync::conn::Closer;
use crate::sync::socket::close_message;

/// How long a close frame may wait behind a node that is not reading.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `machine`'s link relayed over `socket`, with the `terms` its
/// `hello` declared on the node that holds it. Boxed, as a direct link's
/// are ([`super::socket::serve`]): the socket, a message's dispatch and
/// the close, so the future does not keep room for them while it idles.
pub async fn serve(
    socket: Box<WebSocket>,
    links: Links,
    sessions: Sessions,
    machine: Machine,
    terms: Terms,
) {
    let span =
        tracing::info_span!("relayed link", machine = %machine.id, account = %machine.account.name);
    async move {
        let closer = Closer::default();
        let (link, mut outbox) = links.open(&machine, terms, closer.clone());
        let (mut sink, stream) = (*socket).split();
        let mut stream = sockets::read_ahead(stream);
        let shutdown = links.shutdown();
        debug!(link = link.id, "machine link relayed here");
        loop {
            tokio::select! {
                // A stopping node serves nothing more: what the machine
                // sends now goes to whichever node takes its sessions.
                biased;
                _ = closer.closed() => break,
                _ = shutdown.cancelled() => {
                    closer.close(close::GOING_AWAY, "server shutting down");
                    break;
                }
                frame = outbox.recv() => match frame {
                    Some(frame) => {
                        if sink.send(Message::Text(frame.into())).await.is_err() { break; }
                    }
                    None => break,
                },
                message = stream.recv() => match message {
                    Some(Ok(Message::Text(text))) => match parse(&text) {
                        Ok(ClientMessage::Detach {}) => {
                            closer.close(close::DETACHED, "detached");
                            break;
                        }
                        // The holding node answered these itself.
                        Ok(ClientMessage::Hello { .. } | ClientMessage::HeartbeatAck { .. }) => {}
                        Ok(message) => {
                            if let Some(reply) = Box::pin(dispatch(&sessions, &link, message)).await {
                                if !link.send(&reply) { break; }
                            }
                        }
                        Err((code, message)) => {
                            if !link.send(&refusal(code, message)) { break; }
                        }
                    },
                    Some(Ok(Message::Close(frame))) => {
                        // How the machine's link ended, as its node says.
                        match frame {
                            Some(frame) => closer.close(frame.code, frame.reason.to_string()),
                            None => closer.close(close::UNRESPONSIVE, "the machine's link dropped"),
                        }
                        break;
                    }
                    Some(Ok(_)) => {}
                    // Its node vanished: to the sessions here, a drop.
                    Some(Err(_)) | None => break,
                },
            }
        }
        links.close(&link);
        Box::pin(sessions.link_closed(&link, LinkEnd::of(closer.reason()))).await;
        if let Some((code, reason)) = closer.reason() {
            let _ =
                tokio::time::timeout(CLOSE_TIMEOUT, sink.send(close_message(code, &reason))).await;
        }
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, sink.close()).await;
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use crate::future_size::ReturnSize;

    /// A relayed link's future lives as long as the link, so its dispatch,
    /// its close and the socket are boxed: inline, their room was kept
    /// beside it while it idled.
    #[test]
    fn a_relayed_links_future_keeps_no_room_for_its_rare_steps() {
        let size = super::serve.return_size();
        assert!(size <= 1280, "a relayed link's future is {size} bytes");
    }
}
