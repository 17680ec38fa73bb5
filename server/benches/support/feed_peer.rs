//! The feed bench's peer: a minimal axum server with no storage and no
//! auth, the floor of an SSE fan-out on this machine. `/machine` takes
//! `run` reports over a WebSocket and renders each as the `run_updated`
//! frame Margin sends, kept in a list in memory and sent on a broadcast
//! channel; `/sessions/{sid}` gives the cursor, and
//! `/sessions/{sid}/events?after=` sends the list from the cursor in
//! batches, then live, each wake-up writing every frame waiting at once.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::ws::{Message as PeerMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path as Segment, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use margin_protocol::link::ClientMessage;
use margin_protocol::sessions::{SessionEvent, SessionRun};
use serde_json::json;
use tokio::sync::broadcast;

use super::peers;

/// Most events the peer writes at once (Margin reads 1,000 from storage).
const PEER_BATCH: usize = 1_000;

/// One session's frames: all so far, and each new one as it comes.
struct PeerFeed {
    log: Mutex<Vec<Bytes>>,
    live: broadcast::Sender<Bytes>,
}

/// The peer's sessions, each with its frames.
#[derive(Default)]
pub(crate) struct PeerState {
    feeds: Mutex<HashMap<String, Arc<PeerFeed>>>,
    /// Frames a slow subscriber lost (the broadcast channel overran).
    pub(crate) lagged: AtomicU64,
}

impl PeerState {
    fn feed(&self, session: &str) -> Arc<PeerFeed> {
        self.feeds
            .lock()
            .expect("peer feeds lock")
            .entry(session.to_owned())
            .or_insert_with(|| {
                Arc::new(PeerFeed {
                    log: Mutex::default(),
                    live: broadcast::channel(16_384).0,
                })
            })
            .clone()
    }
}

/// `/machine`: each `run` report becomes a `run_updated` frame.
async fn peer_link(mut socket: WebSocket, state: Arc<PeerState>) {
    while let Some(Ok(message)) = socket.recv().await {
        let PeerMessage::Text(text) = message else {
            continue;
        };
        let Ok(ClientMessage::Run {
            session,
            run,
            name,
            status,
            ..
        }) = serde_json::from_str(text.as_str())
        else {
            continue;
        };
        let event = SessionEvent::RunUpdated {
            run: SessionRun { run, name, status },
        };
        let Ok(body) = serde_json::to_string(&event) else {
            continue;
        };
        let feed = state.feed(&session);
        let mut log = feed.log.lock().expect("peer log lock");
        let frame = Bytes::from(format!(
            "id: {}\nevent: run_updated\ndata: {body}\n\n",
            log.len() + 1
        ));
        log.push(frame.clone());
        let _ = feed.live.send(frame);
    }
}

#[derive(serde::Deserialize)]
struct After {
    after: Option<usize>,
}

fn concat(frames: &[Bytes]) -> Bytes {
    let mut out = Vec::with_capacity(frames.iter().map(Bytes::len).sum());
    for frame in frames {
        out.extend_from_slice(frame);
    }
    Bytes::from(out)
}

/// `/sessions/{sid}/events?after=N`: the list from the cursor, then live.
async fn peer_events(
    State(state): State<Arc<PeerState>>,
    Segment(session): Segment<String>,
    Query(after): Query<After>,
) -> Response {
    let feed = state.feed(&session);
    let (backlog, live) = {
        let log = feed.log.lock().expect("peer log lock");
        let from = after.after.unwrap_or(0).min(log.len());
        (log[from..].to_vec(), feed.live.subscribe())
    };
    let body = futures_util::stream::unfold(
        (backlog, 0, live, state),
        |(backlog, at, mut live, state)| async move {
            if at < backlog.len() {
                let end = (at + PEER_BATCH).min(backlog.len());
                let frames = concat(&backlog[at..end]);
                return Some((Ok::<_, Infallible>(frames), (backlog, end, live, state)));
            }
            let mut frames = Vec::new();
            loop {
                match live.recv().await {
                    Ok(frame) => {
                        frames.push(frame);
                        break;
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        state.lagged.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
            while frames.len() < PEER_BATCH {
                match live.try_recv() {
                    Ok(frame) => frames.push(frame),
                    Err(broadcast::error::TryRecvError::Lagged(n)) => {
                        state.lagged.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(_) => break,
                }
            }
            Some((Ok(concat(&frames)), (backlog, at, live, state)))
        },
    );
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// Starts the peer on its own runtime in this process (as many worker
/// threads as CPUs, like `margin`'s); returns its address and state.
pub(crate) fn start() -> (SocketAddr, Arc<PeerState>) {
    let state = Arc::new(PeerState::default());
    let shared = state.clone();
    let addr = peers::spawn(move |listener| async move {
        let app = axum::Router::new()
            .route(
                "/machine",
                get(
                    |ws: WebSocketUpgrade, State(state): State<Arc<PeerState>>| async move {
                        ws.on_upgrade(move |socket| peer_link(socket, state))
                    },
                ),
            )
            .route(
                "/sessions/{sid}",
                get(
                    |State(state): State<Arc<PeerState>>, Segment(sid): Segment<String>| async move {
                        let cursor = state.feed(&sid).log.lock().expect("peer log lock").len();
                        axum::Json(json!({ "cursor": cursor }))
                    },
                ),
            )
            .route("/sessions/{sid}/events", get(peer_events))
            .with_state(state);
        let served = if peers::nodelay() {
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            axum::serve(listener, app).await
        } else {
            axum::serve(listener, app).await
        };
        served.expect("the peer stopped");
    });
    (addr, shared)
}
