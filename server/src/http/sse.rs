//! What the two event streams share — a document's feed (`http::events`)
//! and a Planner session's (`http::sessions`): the cursor a client resumes
//! after, and the response that carries Server-Sent Events.

use margin_protocol::ErrorCode;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use serde::Deserialize;

use super::AppError;

/// `?after=CURSOR`, for a client that cannot send `Last-Event-ID`.
#[derive(Deserialize)]
pub struct CursorQuery {
    after: Option<String>,
}

/// The cursor to resume after: `Last-Event-ID`, else `?after=`, else 0.
/// `what` says what a cursor is, for the error a bad one gets.
pub fn cursor(
    headers: &HeaderMap,
    query: Result<Query<CursorQuery>, QueryRejection>,
    what: &str,
) -> Result<u64, AppError> {
    let Query(query) =
        query.map_err(|e| AppError::bad_request(ErrorCode::InvalidQuery, e.body_text()))?;
    let last = headers
        .get("last-event-id")
        .map(|value| value.to_str().unwrap_or("\u{fffd}").to_owned());
    match last.or(query.after) {
        None => Ok(0),
        Some(cursor) => cursor.trim().parse::<u64>().map_err(|_| {
            AppError::bad_request(
                ErrorCode::InvalidCursor,
                format!(
                    "a cursor is {what} (a whole number); got {:?}",
                    truncate(&cursor)
                ),
            )
        }),
    }
}

/// A `text/event-stream` response of `frames`, which no cache or proxy
/// holds back.
pub fn response(
    frames: impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            // Proxies that buffer would hold events back.
            (
                header::HeaderName::from_static("x-accel-buffering"),
                HeaderValue::from_static("no"),
            ),
        ],
        Body::from_stream(frames),
    )
        .into_response()
}

/// At most the first 64 bytes of `text`, cut at a character boundary: how
/// much of a client's string an error repeats.
pub fn truncate(text: &str) -> &str {
    let mut end = text.len().min(64);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
