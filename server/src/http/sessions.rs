//! A Planner session for applications (SPEC E1–E3): its snapshot with a
//! cursor, and its events as Server-Sent Events replayed from a cursor.
//! Both inherit the read authorization of the session's document: a caller
//! who may not read it gets the same 404 as for a session that does not
//! exist.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream;
use margin_protocol::sessions::{Resync, SessionSnapshot, SessionState};
use margin_protocol::ErrorCode;

use super::documents::visible;
use super::extract::Caller;
use super::sse::{self, truncate, CursorQuery};
use super::{AppError, AppState};
use crate::sessions::Delivery;

/// Longest session id looked up.
const MAX_SESSION_ID_BYTES: usize = 64;

/// `GET /sessions/{sid}` (SPEC E1).
pub async fn snapshot(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(session): Path<String>,
) -> Result<Json<SessionSnapshot>, AppError> {
    Ok(Json(readable(&state, &account, &session).await?))
}

/// `GET /sessions/{sid}/events` (SPEC E2): every event after the cursor
/// (`Last-Event-ID`, else `?after=`, else 0), then each new one as it is
/// committed. A cursor the log cannot continue from gets one `resync`
/// event, without an id, and the stream ends. The stream also ends after
/// `session_ended`; asked again from there, it answers 204 No Content.
pub async fn events(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(session): Path<String>,
    headers: HeaderMap,
    query: Result<Query<CursorQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, AppError> {
    let after = sse::cursor(&headers, query, "an event id")?;
    let snapshot = readable(&state, &account, &session).await?;
    if snapshot.state == SessionState::Ended && after == snapshot.cursor {
        // Everything was delivered and nothing will follow: 204 tells an
        // EventSource to stop reconnecting.
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let href = format!("/sessions/{session}");
    let reader = state.sessions.feeds().reader(&snapshot, after);
    let body = stream::unfold(Some(reader), move |reader| {
        let href = href.clone();
        async move {
            let mut reader = reader?;
            match reader.next().await {
                Delivery::Events(frames) => {
                    Some((Ok::<_, std::convert::Infallible>(frames), Some(reader)))
                }
                Delivery::KeepAlive => {
                    Some((Ok(Bytes::from_static(b": keep-alive\n\n")), Some(reader)))
                }
                Delivery::Resync(reason) => Some((Ok(resync_frame(reason, href)), None)),
                Delivery::End => None,
            }
        }
    });
    Ok(sse::response(body))
}

/// The session's snapshot, if `account` may read its document; the same
/// 404 otherwise, so its existence never leaks (SPEC E3).
async fn readable(
    state: &AppState,
    account: &crate::storage::Account,
    session: &str,
) -> Result<SessionSnapshot, AppError> {
    let not_found = || AppError::NotFound {
        code: ErrorCode::SessionNotFound,
        message: format!(
            "no Planner session {:?} that you can see",
            truncate(session)
        ),
    };
    if session.is_empty() || session.len() > MAX_SESSION_ID_BYTES {
        return Err(not_found());
    }
    let Some((document, snapshot)) = state.sessions.feeds().snapshot(session).await? else {
        return Err(not_found());
    };
    match visible(state, account, &document).await {
        Ok(_) => Ok(snapshot),
        Err(AppError::NotFound { .. }) => Err(not_found()),
        Err(other) => Err(other),
    }
}

fn resync_frame(reason: String, snapshot: String) -> Bytes {
    let body =
        serde_json::to_string(&Resync { reason, snapshot }).unwrap_or_else(|_| "{}".to_owned());
    Bytes::from(format!("event: resync\ndata: {body}\n\n"))
}
