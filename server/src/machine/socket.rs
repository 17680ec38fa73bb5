//! One machine link: the `hello` handshake, heartbeats, credential renewal
//! (SPEC L8), refusals and `detach` (SPEC L1, A2). A malformed or unknown
//! message gets a refusal naming the problem and the link carries on.
//!
//! The read loop only parses frames: each message for a session is handed
//! to that session's driver (`Sessions`), so a slow tool call of one
//! session never holds up another, nor this link's heartbeats. What the
//! drivers send comes back through the link's outbox, already encoded.

use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use futures_util::{SinkExt, StreamExt};
use margin_planner::ReleaseTrigger;
use margin_protocol::link::{
    close, Capabilities, ClientMessage, ServerMessage, CLIENT_MESSAGE_TYPES, MAX_FEATURES,
    MAX_FEATURE_BYTES, MAX_RUN_CAPACITY, PROTOCOL_VERSION, RESUMABLE_SESSIONS,
};
use margin_protocol::RefusalCode;
use tokio::time::{interval_at, Instant, MissedTickBehavior};
use tracing::{debug, info, warn, Instrument};

use super::relay::{self, Relays, ResumeFailed};
use crate::auth;
use crate::cluster::Cluster;
use crate::link::{refusal, Link, LinkEnd, Links, Terms};
use crate::sessions::Sessions;
use crate::sockets::{self, Inbound};
use crate::storage::{Machine, StorageError, Store};
use crate::sync::conn::Closer;
use crate::sync::socket::close_message;

/// How long a close frame may wait behind a machine that is not reading.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves one link of `machine`. Right after `welcome`, and then every
/// third of a credential's lifetime, the machine is sent a fresh credential
/// (SPEC L8); a renewal touches nothing else, and a failed one is logged
/// and tried again at the next.
///
/// The future lives as long as the link, so its rare steps are boxed
/// (relays, renewals, ending sessions: each large when inline), as is a
/// message's dispatch (one allocation beside its work), and so is the
/// socket.
pub async fn serve(
    socket: Box<WebSocket>,
    links: Links,
    sessions: Sessions,
    store: Store,
    machine: Machine,
    cluster: Option<Cluster>,
) {
    let span = tracing::info_span!("link", machine = %machine.id, account = %machine.account.name);
    async move {
        let closer = Closer::default();
        let mut opened = None;
        // In a cluster: this link's relays to the other nodes.
        let mut relays: Option<Relays> = None;
        let mut relay_events = None;
        let mut local_resume = None;
        let (mut sink, stream) = (*socket).split();
        let mut stream = sockets::read_ahead(stream);
        let settings = links.settings();
        let shutdown = links.shutdown();
        let outcome = async {
            // The handshake: the first message must be a good `hello`.
            let first = tokio::select! {
                message = tokio::time::timeout(settings.hello_timeout, next_text(&mut stream)) => message,
                _ = closer.closed() => return,
                _ = shutdown.cancelled() => {
                    closer.close(close::GOING_AWAY, "server shutting down");
                    return;
                }
            };
            let Ok(Some(first)) = first else {
                closer.close(close::BAD_HELLO, "no hello in time");
                return;
            };
            match hello(&first) {
                Ok((features, terms)) => {
                    let welcome = ServerMessage::Welcome {
                        protocol_version: PROTOCOL_VERSION,
                        machine: machine.name.clone(),
                        capabilities: Capabilities { durable_plans: true, features },
                    };
                    // Registered before `welcome` goes out: a machine told it is
                    // linked can be found by the next `@planner` at once (its
                    // outbox is sent only after `welcome`) — in a cluster on
                    // every node, through the relays.
                    opened = Some(links.open(&machine, terms, closer.clone()));
                    if let Some(cluster) = &cluster {
                        let (started, events) =
                            Box::pin(Relays::start(cluster.clone(), sessions.clone(), &machine, terms)).await;
                        relays = Some(started);
                        relay_events = Some(events);
                    }
                    if send(&mut sink, &welcome).await.is_err() {
                        return;
                    }
                    info!("machine linked");
                }
                Err((code, message)) => {
                    let _ = send(&mut sink, &refusal(code, message.clone())).await;
                    closer.close(close::BAD_HELLO, message);
                    return;
                }
            }
            let Some((link, outbox)) = opened.as_mut() else { return };
            // In a cluster: once this node lapses its sessions leave it for
            // the nodes that take their documents, where they wait for
            // the machine's `resume` (SPEC C3, C5); never without one.
            let lapsed = cluster
                .as_ref()
                .map(|cluster| cluster.incarnation().lapsed)
                .unwrap_or_default();
            // A renewal waits on the database, which a lapsed node may not
            // reach again for long.
            let renewing = Box::pin(renew(&mut sink, &store, &machine, settings.credential_ttl));
            let Some(renewed) = unless_lapsed(renewing, &lapsed).await else {
                closer.close(close::UNRESPONSIVE, LAPSED);
                return;
            };
            match renewed {
                Ok(()) => {}
                Err(Renewal::Gone) => return,
                Err(Renewal::Revoked) => {
                    Box::pin(revoked(&sessions, &machine.id)).await;
                    return;
                }
            }
            let every = settings.credential_renewal();
            let mut renewals = interval_at(Instant::now() + every, every);
            renewals.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let period = settings.heartbeat;
            let mut ticks = interval_at(Instant::now() + period, period);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let (mut seq, mut unanswered) = (0u64, 0u32);
            let mut refresh = interval_at(Instant::now() + relay::REFRESH, relay::REFRESH);
            refresh.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = closer.closed() => return,
                    _ = shutdown.cancelled() => {
                        closer.close(close::GOING_AWAY, "server shutting down");
                        return;
                    }
                    _ = lapsed.cancelled() => {
                        closer.close(close::UNRESPONSIVE, LAPSED);
                        return;
                    }
                    frame = outbox.recv() => match frame {
                        Some(frame) => {
                            if sink.send(Message::Text(frame.into())).await.is_err() { return; }
                        }
                        None => return,
                    },
                    event = relay::next_event(&mut relay_events) => {
                        let Some(relays) = relays.as_mut() else { continue };
                        if let Some((code, reason)) = relays.on_event(event, link) {
                            closer.close(code, reason);
                            return;
                        }
                    }
                    answered = relay::local_answers(&mut local_resume) => {
                        local_resume = None;
                        if let (Some(relays), Some(answered)) = (relays.as_mut(), answered) {
                            relays.local_answered(answered, link);
                        }
                    }
                    _ = refresh.tick(), if relays.is_some() => {
                        if let Some(relays) = relays.as_mut() {
                            // A new node may take a lease TTL to answer.
                            let refreshing = Box::pin(relays.refresh());
                            if beating(refreshing, &mut sink, &mut ticks, &mut seq, &lapsed).await.is_none() {
                                if lapsed.is_cancelled() { closer.close(close::UNRESPONSIVE, LAPSED); }
                                return;
                            }
                        }
                    }
                    _ = renewals.tick() => {
                        let renewing = Box::pin(renew(&mut sink, &store, &machine, settings.credential_ttl));
                        let Some(renewed) = unless_lapsed(renewing, &lapsed).await else {
                            closer.close(close::UNRESPONSIVE, LAPSED);
                            return;
                        };
                        match renewed {
                            Ok(()) => {}
                            Err(Renewal::Gone) => return,
                            Err(Renewal::Revoked) => {
                                Box::pin(revoked(&sessions, &machine.id)).await;
                                return;
                            }
                        }
                    }
                    _ = ticks.tick() => {
                        if unanswered >= settings.missed_heartbeats {
                            closer.close(close::UNRESPONSIVE, format!("{unanswered} heartbeats unanswered"));
                            return;
                        }
                        seq += 1;
                        unanswered += 1;
                        if send(&mut sink, &ServerMessage::Heartbeat { seq }).await.is_err() {
                            return;
                        }
                    }
                    frame = stream.recv() => {
                        let text = match frame {
                            Some(Ok(Message::Text(text)))
                                if crate::sockets::over_limit(text.len(), margin_protocol::link::MAX_FRAME_BYTES) =>
                            {
                                closer.close(close::TOO_BIG, "frame over the 1 MiB limit");
                                return;
                            }
                            Some(Ok(Message::Text(text))) => text.to_string(),
                            Some(Ok(Message::Binary(_))) => {
                                let refusal = refusal(RefusalCode::MalformedMessage, "link frames are JSON text, not binary");
                                if send(&mut sink, &refusal).await.is_err() { return; }
                                continue;
                            }
                            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                            Some(Ok(Message::Close(_))) | None => return,
                            Some(Err(error)) => {
                                debug!(%error, "link read failed");
                                if error.to_string().contains("too long") || error.to_string().contains("Space limit") {
                                    closer.close(close::TOO_BIG, "frame over the 1 MiB limit");
                                }
                                return;
                            }
                        };
                        match parse(&text) {
                            Ok(ClientMessage::HeartbeatAck { seq: acked }) if acked <= seq => unanswered = 0,
                            Ok(ClientMessage::HeartbeatAck { seq: acked }) => {
                                let refusal = refusal(RefusalCode::UnexpectedMessage, format!("heartbeat-ack {acked} answers no heartbeat sent"));
                                if send(&mut sink, &refusal).await.is_err() { return; }
                            }
                            Ok(ClientMessage::Detach {}) => {
                                if let Some(relays) = relays.as_mut() {
                                    relays.detach(&text);
                                }
                                closer.close(close::DETACHED, "detached");
                                return;
                            }
                            Ok(ClientMessage::Hello { .. }) => {
                                let refusal = refusal(RefusalCode::UnexpectedMessage, "the link is already open; hello comes once");
                                if send(&mut sink, &refusal).await.is_err() { return; }
                            }
                            Ok(ClientMessage::Resume { sessions: held }) if relays.is_some() => {
                                let Some(relays) = relays.as_mut() else { continue };
                                // Where each session runs may take up to the
                                // failover patience to find (a node that
                                // neither answers nor lapsed). Heartbeats go
                                // on: a machine hearing nothing would give
                                // this link up and resume elsewhere, and this
                                // resume, ending later, would take its
                                // sessions over from that newer link (C5).
                                let resuming = Box::pin(relays.resume(link, held));
                                let Some(resumed) = beating(resuming, &mut sink, &mut ticks, &mut seq, &lapsed).await else {
                                    if lapsed.is_cancelled() { closer.close(close::UNRESPONSIVE, LAPSED); }
                                    return;
                                };
                                match resumed {
                                    Ok(answering) => local_resume = Some(answering),
                                    Err(ResumeFailed::Refused(refused)) => {
                                        if send(&mut sink, &refused).await.is_err() { return; }
                                    }
                                    Err(ResumeFailed::Undecided(why)) => {
                                        closer.close(close::UNRESPONSIVE, format!("cannot reach every session's server yet ({why}); reconnect and resume"));
                                        return;
                                    }
                                }
                            }
                            Ok(message) => {
                                if relays.as_mut().is_some_and(|relays| relays.forward(&text, &message)) {
                                    continue;
                                }
                                if let Some(refusal) = Box::pin(dispatch(&sessions, link, message)).await {
                                    if send(&mut sink, &refusal).await.is_err() { return; }
                                }
                            }
                            Err((code, message)) => {
                                if send(&mut sink, &refusal(code, message)).await.is_err() { return; }
                            }
                        }
                    }
                }
            }
        };
        outcome.await;
        if let Some(relays) = relays.take() {
            relays.end(LinkEnd::of(closer.reason()));
        }
        if let Some((link, _)) = opened.take() {
            links.close(&link);
            Box::pin(sessions.link_closed(&link, LinkEnd::of(closer.reason()))).await;
        }
        if let Some((code, reason)) = closer.reason() {
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, sink.send(close_message(code, &reason))).await;
            info!(code, %reason, "link closed");
        }
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, sink.close()).await;
    }
    .instrument(span)
    .await
}

/// Hands a machine's message for a session to the session's driver here;
/// the refusal to send back, if any. Link-level messages (`hello`,
/// `heartbeat-ack`, `detach`) are the caller's.
pub(super) async fn dispatch(
    sessions: &Sessions,
    link: &Link,
    message: ClientMessage,
) -> Option<ServerMessage> {
    match message {
        ClientMessage::ToolCall {
            session,
            turn,
            call_id,
            name,
            arguments,
        } => {
            sessions
                .tool_call(link, session, turn, call_id, name, arguments)
                .await
        }
        ClientMessage::Run {
            session,
            run,
            name,
            status,
            attempt,
        } => {
            sessions
                .run(link, &session, run, name, status, attempt)
                .await
        }
        ClientMessage::Resume { sessions: held } => {
            // The drivers have the resume queued before the next frame is
            // read; `resumed` and what follows it go out through the
            // outbox, in order, once they answer.
            match sessions.begin_resume(link, held).await {
                Ok(underway) => {
                    tokio::spawn(underway.finish());
                    None
                }
                Err(refused) => Some(refused),
            }
        }
        ClientMessage::InputReceived { session, request } => {
            sessions.input_received(link, &session, request).await
        }
        ClientMessage::Stopped { session } => sessions.stopped(link, &session).await,
        ClientMessage::Reply {
            session,
            turn,
            text,
        } => sessions.reply(link, &session, turn, text).await,
        ClientMessage::Hello { .. }
        | ClientMessage::HeartbeatAck { .. }
        | ClientMessage::Detach {} => None,
    }
}

/// The next text frame; `None` when the link ends first.
async fn next_text(stream: &mut Inbound<Result<Message, axum::Error>>) -> Option<String> {
    loop {
        match stream.recv().await? {
            Ok(Message::Text(text)) => return Some(text.to_string()),
            Ok(Message::Ping(_) | Message::Pong(_)) => continue,
            Ok(Message::Binary(_)) => return Some(String::new()),
            Ok(Message::Close(_)) | Err(_) => return None,
        }
    }
}

/// Checks a `hello`; the features granted and what it declared.
fn hello(text: &str) -> Result<(Vec<String>, Terms), (RefusalCode, String)> {
    match parse(text) {
        Ok(ClientMessage::Hello {
            protocol_version,
            features,
            run_capacity,
            manifest,
        }) => {
            if protocol_version != PROTOCOL_VERSION {
                return Err((
                    RefusalCode::UnsupportedVersion,
                    format!("this server speaks protocol version {PROTOCOL_VERSION}; the machine sent {protocol_version}"),
                ));
            }
            if features.len() > MAX_FEATURES
                || features
                    .iter()
                    .any(|f| f.is_empty() || f.len() > MAX_FEATURE_BYTES)
            {
                return Err((
                    RefusalCode::InvalidHello,
                    format!("hello lists at most {MAX_FEATURES} features of 1 to {MAX_FEATURE_BYTES} bytes"),
                ));
            }
            let run_capacity = run_capacity.unwrap_or(margin_planner::DEFAULT_RUN_CAPACITY as u32);
            if !(1..=MAX_RUN_CAPACITY).contains(&run_capacity) {
                return Err((
                    RefusalCode::InvalidHello,
                    format!(
                        "run_capacity is 1 to {MAX_RUN_CAPACITY}; the machine sent {run_capacity}"
                    ),
                ));
            }
            // The one optional feature is resumable sessions; unknown ones
            // are ignored and not granted.
            let granted: Vec<String> = features
                .into_iter()
                .filter(|f| f == RESUMABLE_SESSIONS)
                .take(1)
                .collect();
            let terms = Terms {
                run_capacity: run_capacity as usize,
                resumable: !granted.is_empty(),
                planning: manifest.is_some_and(|m| m.planning),
            };
            Ok((granted, terms))
        }
        Ok(_) => Err((
            RefusalCode::HelloExpected,
            "the first message must be hello".into(),
        )),
        // A hello that does not fit its shape is an invalid hello; anything
        // else is not a hello at all.
        Err((RefusalCode::MalformedMessage, message)) if message.starts_with("malformed hello") => {
            Err((RefusalCode::InvalidHello, message))
        }
        Err((_, message)) => Err((
            RefusalCode::HelloExpected,
            format!("the first message must be hello: {message}"),
        )),
    }
}

/// Parses a machine's message, telling malformed JSON, an unknown type and
/// a malformed known message apart.
pub fn parse(text: &str) -> Result<ClientMessage, (RefusalCode, String)> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        (
            RefusalCode::MalformedMessage,
            format!("not a JSON object: {e}"),
        )
    })?;
    let kind = value
        .get("type")
        .and_then(|t| t.as_str())
        .map(str::to_owned);
    match kind {
        None => Err((
            RefusalCode::MalformedMessage,
            "a message needs a string \"type\"".into(),
        )),
        Some(kind) if !CLIENT_MESSAGE_TYPES.contains(&kind.as_str()) => Err((
            RefusalCode::UnknownMessage,
            format!("unknown message type {:?}", truncate(&kind)),
        )),
        Some(kind) => serde_json::from_value(value).map_err(|e| {
            (
                RefusalCode::MalformedMessage,
                format!("malformed {kind}: {e}"),
            )
        }),
    }
}

fn truncate(text: &str) -> &str {
    let mut end = text.len().min(64);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Why the link stops after a renewal.
enum Renewal {
    /// The link is gone: the credential could not be sent.
    Gone,
    /// The machine was revoked where no link could hear it (the command
    /// line, or a node that did not tell this one): it is ended now.
    Revoked,
}

/// Issues a fresh credential for `machine` and sends it. A credential that
/// cannot be issued for another reason is logged, and the machine keeps
/// the ones it holds.
async fn renew(
    sink: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    store: &Store,
    machine: &Machine,
    ttl: Duration,
) -> Result<(), Renewal> {
    match auth::renew_machine_credential(store, machine, ttl).await {
        Ok(issued) => {
            debug!(expires_at = issued.expires_at, "credential renewed");
            let message = ServerMessage::Credential {
                credential: issued.secret,
                expires_at: issued.expires_at,
            };
            send(sink, &message).await.map_err(|_| Renewal::Gone)
        }
        Err(auth::IssueError::Storage(StorageError::NotFound(_))) => Err(Renewal::Revoked),
        Err(error) => {
            warn!(%error, "cannot renew the machine's credential; trying again at the next renewal");
            Ok(())
        }
    }
}

/// Why a machine's link closes when its node lapsed.
const LAPSED: &str = "this server lost its place in the cluster; reconnect and resume";

/// `work`'s outcome, or `None` once the node `lapsed` first.
async fn unless_lapsed<T>(
    work: impl std::future::Future<Output = T>,
    lapsed: &tokio_util::sync::CancellationToken,
) -> Option<T> {
    tokio::select! {
        done = work => Some(done),
        _ = lapsed.cancelled() => None,
    }
}

/// Runs `work` — a relay's step that may wait on another node up to the
/// failover patience, or on a database that does not answer — while
/// heartbeats go on, counted as sent (their acks are read after); `None`
/// when one could not be sent, or the node `lapsed` meanwhile. A machine
/// hearing nothing would give the link up and resume elsewhere, and the
/// work, ending later, could take its sessions over from that newer link
/// (SPEC C5, L3).
async fn beating<T>(
    work: impl std::future::Future<Output = T>,
    sink: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    ticks: &mut tokio::time::Interval,
    seq: &mut u64,
    lapsed: &tokio_util::sync::CancellationToken,
) -> Option<T> {
    let mut work = std::pin::pin!(work);
    loop {
        tokio::select! {
            done = &mut work => return Some(done),
            _ = lapsed.cancelled() => return None,
            _ = ticks.tick() => {
                *seq += 1;
                if send(sink, &ServerMessage::Heartbeat { seq: *seq }).await.is_err() {
                    return None;
                }
            }
        }
    }
}

async fn send(
    sink: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    message: &ServerMessage,
) -> Result<(), axum::Error> {
    let text = serde_json::to_string(message).unwrap_or_default();
    sink.send(Message::Text(text.into())).await
}

/// The machine's credential was revoked while it was linked: its sessions
/// and links end. A session whose end cannot be committed is logged and
/// carries on, away, until its owner revokes the machine again.
async fn revoked(sessions: &Sessions, machine: &str) {
    info!("the machine was revoked; ending its sessions and links");
    if let Err(error) = sessions
        .end_machine(machine, ReleaseTrigger::MachineRevoked)
        .await
    {
        warn!(%error, "a session of the revoked machine did not end");
    }
}

#[cfg(test)]
mod tests {
    use crate::future_size::ReturnSize;
    /// A machine link's future lives as long as the link. Its rare steps
    /// (relays started, refreshed or resumed, a credential renewed, a
    /// machine's sessions ended) and a message's dispatch are boxed, and
    /// so is the socket, so their room is not kept beside it while it
    /// idles.
    #[test]
    fn a_links_future_keeps_no_room_for_its_rare_steps() {
        let size = super::serve.return_size();
        assert!(size <= 4096, "a link's future is {size} bytes");
    }
}
