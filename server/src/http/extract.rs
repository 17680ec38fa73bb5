//! Extractors: the authenticated caller, and JSON bodies whose rejections
//! use the common error shape.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::StatusCode;
use margin_protocol::ErrorCode;

use super::{AppError, AppState};
use crate::auth;
use crate::storage::{Account, StorageError};

/// The account a request's bearer token names.
pub struct Caller(pub Account);

impl FromRequestParts<AppState> for Caller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        if let Some(account) = relayed_caller(parts, state).await? {
            return Ok(Caller(account));
        }
        let SignedIn { account, .. } = SignedIn::from_request_parts(parts, state).await?;
        Ok(Caller(account))
    }
}

/// In a cluster, the caller of a call another node relayed here (SPEC
/// C2): that node authenticated the token and names the account on the
/// internal channel, which only a node can use (it shows the cluster's
/// secret). `None` for any other call.
async fn relayed_caller(parts: &Parts, state: &AppState) -> Result<Option<Account>, AppError> {
    let Some(cluster) = state.hub.cluster() else {
        return Ok(None);
    };
    let Some(name) = parts
        .headers
        .get(crate::sync::forward::ACCOUNT_HEADER)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(None);
    };
    if !crate::cluster::calls::from_a_node(cluster, &parts.headers) {
        return Ok(None);
    }
    match state.hub.store().account_by_name(name).await {
        Ok(account) => Ok(Some(account)),
        Err(StorageError::NotFound(_)) => Err(AppError::Unauthenticated(
            "the relayed caller's account no longer exists",
        )),
        Err(other) => Err(other.into()),
    }
}

/// The caller and the token it signed in with: what signing out forgets.
pub struct SignedIn {
    pub account: Account,
    pub token: String,
}

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let token = bearer(parts).or_else(|| query_token(parts));
        let Some(token) = token else {
            return Err(AppError::Unauthenticated(
                "send a token as 'Authorization: Bearer <token>'",
            ));
        };
        let signing_in = async {
            match auth::authenticate(state.hub.store(), &token).await {
                Ok(account) => Ok(account),
                Err(StorageError::NotFound(_)) => {
                    Err(AppError::Unauthenticated("unknown or revoked token"))
                }
                Err(other) => Err(other.into()),
            }
        };
        let client = state.throttle.client(parts);
        let account = state.throttle.sign_in(client, &token, signing_in).await?;
        Ok(SignedIn { account, token })
    }
}

fn bearer(parts: &Parts) -> Option<String> {
    let value = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ")?;
    Some(token.trim().to_owned())
}

/// `?token=` — accepted only on the sync route and the event streams (a
/// document's and a session's), since browsers cannot set headers on a
/// WebSocket or an `EventSource`.
fn query_token(parts: &Parts) -> Option<String> {
    let segments: Vec<&str> = parts.uri.path().split('/').collect();
    let browser_route = match segments.as_slice() {
        ["", "documents", id, "sync" | "events"] | ["", "sessions", id, "events"] => !id.is_empty(),
        _ => false,
    };
    if !browser_route {
        return None;
    }
    parts
        .uri
        .query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
        .map(str::to_owned)
}

/// A JSON object body, parsed into `T`, whose every rejection is an
/// [`AppError`] saying what is wrong: not JSON, not an object (serde would
/// otherwise take `["x"]` for a struct of one field), or not this
/// request's shape.
pub struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, AppError> {
        let json_type = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .is_some_and(|kind| {
                let kind = kind.trim();
                kind.eq_ignore_ascii_case("application/json")
                    || (kind.starts_with("application/") && kind.ends_with("+json"))
            });
        if !json_type {
            return Err(AppError::bad_request(
                ErrorCode::InvalidBody,
                "send the body as JSON, with 'Content-Type: application/json'",
            ));
        }
        let bytes = match axum::body::Bytes::from_request(req, state).await {
            Ok(bytes) => bytes,
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(AppError::TooLarge(rejection.body_text()))
            }
            Err(rejection) if timed_out(&rejection) => {
                return Err(AppError::TimedOut(
                    "the request body did not arrive in time".into(),
                ))
            }
            Err(rejection) => {
                return Err(AppError::bad_request(
                    ErrorCode::InvalidBody,
                    rejection.body_text(),
                ))
            }
        };
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(AppError::bad_request(
                ErrorCode::InvalidBody,
                "the body must be a JSON object",
            ));
        }
        serde_json::from_slice(&bytes).map(JsonBody).map_err(|e| {
            let message = if e.is_data() {
                format!("the body does not fit this request: {e}")
            } else {
                format!("the body is not valid JSON: {e}")
            };
            AppError::bad_request(ErrorCode::InvalidBody, message)
        })
    }
}

/// Whether reading the body failed because it did not arrive in time (the
/// body timeout of `serve`).
fn timed_out(rejection: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(rejection);
    while let Some(error) = cause {
        if error.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// How much of a refused body is read and thrown away after the 413, and
/// for how long, before the connection closes.
const LINGER_BYTES: u64 = 64 * 1024 * 1024;
const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Answers 413 at once when a request declares a body longer than `limit`
/// (`Content-Length`), before reading a byte of it; a body that declares
/// nothing is cut at the limit as it is read.
///
/// The answer goes first; then what the client still sends is read and
/// discarded, up to [`LINGER_BYTES`] within [`LINGER_TIME`], and the
/// connection closes (a lingering close, as nginx does). Closed at once, a
/// client still writing its body meets a reset and never reads the 413:
/// Node's `fetch` writes the whole body before it reads.
pub async fn declared_length(
    axum::extract::State(limit): axum::extract::State<usize>,
    request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    match declared {
        Some(length) if length > limit as u64 => {
            tokio::spawn(discard(request.into_body(), length.min(LINGER_BYTES)));
            let refused = AppError::TooLarge(format!(
                "a body of {length} bytes exceeds this route's limit of {limit} bytes"
            ));
            let mut response = axum::response::IntoResponse::into_response(refused);
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            response
        }
        _ => next.run(request).await,
    }
}

/// Reads `body` and throws it away, until `bound` bytes, its end, an error
/// or [`LINGER_TIME`].
async fn discard(body: axum::body::Body, bound: u64) {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let _ = tokio::time::timeout(LINGER_TIME, async {
        let mut read = 0u64;
        while let Some(Ok(chunk)) = stream.next().await {
            read += chunk.len() as u64;
            if read >= bound {
                break;
            }
        }
    })
    .await;
}
