//! Extractors: the authenticated caller, and JSON bodies whose rejections
//! use the common error shape.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::StatusCode;

use super::{AppError, AppState};
use crate::auth;
use crate::storage::{Account, StorageError};

/// The account a request's bearer token names.
pub struct Caller(pub Account);

impl FromRequestParts<AppState> for Caller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let SignedIn { account, .. } = SignedIn::from_request_parts(parts, state).await?;
        Ok(Caller(account))
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
        match auth::authenticate(state.hub.store(), &token).await {
            Ok(account) => Ok(SignedIn { account, token }),
            Err(StorageError::NotFound(_)) => {
                Err(AppError::Unauthenticated("unknown or revoked token"))
            }
            Err(other) => Err(other.into()),
        }
    }
}

fn bearer(parts: &Parts) -> Option<String> {
    let value = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ")?;
    Some(token.trim().to_owned())
}

/// `?token=` — accepted only on the sync route and a session's event
/// stream, since browsers cannot set headers on a WebSocket or an
/// `EventSource`.
fn query_token(parts: &Parts) -> Option<String> {
    let path = parts.uri.path();
    if !(path.ends_with("/sync") || path.starts_with("/sessions/") && path.ends_with("/events")) {
        return None;
    }
    parts
        .uri
        .query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
        .map(str::to_owned)
}

/// `Json<T>` whose rejection is an [`AppError`].
pub struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    axum::Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, AppError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(JsonBody(value)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(AppError::TooLarge(rejection.body_text()))
            }
            Err(rejection) => Err(AppError::bad_request("invalid_body", rejection.body_text())),
        }
    }
}
