//! A document's feed, `GET /documents/{id}/events` (SPEC B1, B1a, T1, E3):
//! Server-Sent Events carrying its Chat lines as they are committed, its
//! Planner's status as it changes, and the document itself when its title,
//! archive state or the caller's role changes, so an editor shows a reply
//! the moment it is posted instead of polling. Members only (a viewer too);
//! others get the document's 404.
//!
//! On every (re)connect the stream sends the document and the Planner's
//! view, then every Chat line after the cursor (`Last-Event-ID`, else
//! `?after=`, else 0), a page at a time, then waits on the document's
//! [`Watch`]. Woken, it reads the document or its Chat from storage when
//! their bell rang, and the view from the session registry, and sends what
//! is new: nothing is sent that is not committed, and a wake-up lost or
//! merged delays nothing beyond the next. Once the caller is no longer a member the stream ends
//! (its reconnect gets the 404).
//! In a cluster the call is relayed to the document's owner (where its
//! Chat is appended and its Planner session runs); a client whose stream
//! breaks reconnects with its `Last-Event-ID` wherever the document went.

use margin_protocol::ErrorCode;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use futures_util::stream;
use margin_protocol::document_feed::DocumentEvent;
use margin_protocol::link::PlannerView;
use margin_protocol::Role;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::documents::{info, visible};
use super::extract::Caller;
use super::sse::{self, CursorQuery};
use super::{AppError, AppState};
use crate::cluster::Lease;
use crate::storage::Account;
use crate::watchers::{Rung, Watch};

/// Most Chat lines read from storage at a time.
const PAGE: i64 = 200;

/// How long a stream stays silent before a keep-alive comment (proxies
/// close idle streams); each one also checks the caller is still a member.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `GET /documents/{id}/events`.
pub async fn feed(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<CursorQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, AppError> {
    let after = sse::cursor(&headers, query, "the seq of a Chat line")?;
    let after = i64::try_from(after).map_err(|_| {
        AppError::bad_request(
            ErrorCode::InvalidCursor,
            "that cursor is past any Chat line",
        )
    })?;
    visible(&state, &account, &id).await?;
    let owner = state.hub.store().document_owner(&id).await?;
    // In a cluster the feed holds the document where it is served, like its
    // task and its Planner session: every Chat line and Planner step then
    // happens on this node, where it rings this feed's bells (SPEC C1, C2).
    let lease = match state.hub.cluster() {
        Some(cluster) => Some(
            cluster
                .hold(&id)
                .await
                .map_err(|refused| AppError::Unavailable(format!("{refused}; connect again")))?,
        ),
        None => None,
    };
    // Watched before the first read: a line committed after it wakes us.
    let watch = state.hub.watchers().watch(&id, &owner.id);
    let feed = Feed {
        lapsed: lease.as_ref().map(|lease| lease.holder.lapsed.clone()),
        _lease: lease,
        shutdown: state.links.shutdown(),
        state,
        account,
        owner,
        document: id,
        watch,
        cursor: after,
        shown: None,
        seen: None,
        caught_up: false,
        heard: None,
    };
    let body = stream::unfold(Some(feed), |feed| async move {
        let mut feed = feed?;
        let frames = feed.next().await?;
        Some((Ok::<_, std::convert::Infallible>(frames), Some(feed)))
    });
    Ok(sse::response(body))
}

/// One open stream.
struct Feed {
    state: AppState,
    account: Account,
    owner: Account,
    document: String,
    watch: Watch,
    /// The last Chat line sent.
    cursor: i64,
    /// The Planner view last sent, as compared (see [`comparable`]).
    shown: Option<PlannerView>,
    /// The document's title, archive state and the caller's role, as last
    /// sent.
    seen: Option<(String, bool, Role)>,
    /// Whether the last read found no more lines waiting.
    caught_up: bool,
    /// The bells' counts when the feed last looked; none before it did.
    heard: Option<Rung>,
    /// Fires when the server stops.
    shutdown: CancellationToken,
    /// In a cluster: the document's lease, held while the feed is open…
    _lease: Option<Lease>,
    /// …and cancelled if this node lapses, when another may have taken it.
    lapsed: Option<CancellationToken>,
}

impl Feed {
    /// The next frames to send, waiting for them; `None` ends the stream
    /// (the server stops, storage failed, or the caller lost access — a
    /// client reconnects from its cursor and is answered as it deserves).
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if self.caught_up {
                let lapsed = self.lapsed.clone().unwrap_or_default();
                let woken = tokio::select! {
                    () = self.watch.changed() => true,
                    () = self.shutdown.cancelled() => return None,
                    // The client reconnects, and finds where the document went.
                    () = lapsed.cancelled() => return None,
                    () = tokio::time::sleep(KEEP_ALIVE) => false,
                };
                if !woken {
                    if visible(&self.state, &self.account, &self.document)
                        .await
                        .is_err()
                    {
                        return None;
                    }
                    return Some(Bytes::from_static(b": keep-alive\n\n"));
                }
            }
            // Seen before reading: what is committed after this wakes us.
            let rung = self.watch.seen();
            let heard = self.heard.replace(rung);
            let rang = |bell: fn(&Rung) -> u64| heard.is_none_or(|h| bell(&h) != bell(&rung));
            let mut frames = String::new();
            if rang(|r| r.document) && !self.document(&mut frames).await {
                return None;
            }
            // In memory: looked at on every wake-up, whichever bell rang.
            self.planner(&mut frames);
            if rang(|r| r.chat) || !self.caught_up {
                if let Err(error) = self.chat(&mut frames).await {
                    warn!(document = %self.document, %error, "the document feed's Chat was not read");
                    return None;
                }
            }
            if !frames.is_empty() {
                return Some(Bytes::from(frames));
            }
        }
    }

    /// The document, if what the caller sees of it changed; false once the
    /// caller may no longer read it (or storage failed): the stream ends.
    async fn document(&mut self, frames: &mut String) -> bool {
        let Ok(row) = visible(&self.state, &self.account, &self.document).await else {
            return false;
        };
        let seen = (row.title.clone(), row.archived, row.role);
        if self.seen.as_ref() == Some(&seen) {
            return true;
        }
        if let Ok(frame) = DocumentEvent::Document(info(row)).frame() {
            frames.push_str(&frame);
            self.seen = Some(seen);
        }
        true
    }

    /// The Planner's view, if it changed since the last one sent.
    fn planner(&mut self, frames: &mut String) {
        let view = self.state.sessions.view(&self.document, &self.owner);
        let compared = comparable(&view);
        if self.shown.as_ref() == Some(&compared) {
            return;
        }
        if let Ok(frame) = DocumentEvent::Planner(view).frame() {
            frames.push_str(&frame);
            self.shown = Some(compared);
        }
    }

    /// The Chat lines after the cursor, a page at most.
    async fn chat(&mut self, frames: &mut String) -> Result<(), crate::storage::StorageError> {
        let lines = self
            .state
            .hub
            .store()
            .chat(&self.document, self.cursor, PAGE)
            .await?;
        self.caught_up = (lines.len() as i64) < PAGE;
        for line in lines {
            self.cursor = line.seq;
            if let Ok(frame) = DocumentEvent::Chat(line).frame() {
                frames.push_str(&frame);
            }
        }
        Ok(())
    }
}

/// `view` as compared with the last one sent: a live run's age grows with
/// the clock, and a client counts it from `started_at` itself, so only a
/// change of anything else is news.
fn comparable(view: &PlannerView) -> PlannerView {
    let mut view = view.clone();
    for run in &mut view.runs {
        run.age_ms = 0;
    }
    view
}
