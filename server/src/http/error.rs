//! The one HTTP error type: `{"error":{"code","message"}}` with the right
//! status, never leaking internals (SPEC A2).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use margin_protocol::{ErrorBody, ErrorCode};

use crate::storage::StorageError;

/// An error an HTTP handler returns.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// No credentials, or credentials that match no account.
    #[error("{0}")]
    Unauthenticated(&'static str),
    /// A machine credential that opens no link for a known reason (SPEC
    /// L8): `machine_revoked` or `credential_expired`, a 401 like
    /// [`AppError::Unauthenticated`].
    #[error("{message}")]
    CredentialRefused {
        /// Stable code.
        code: ErrorCode,
        /// For people: names the cause and what to do.
        message: String,
    },
    /// Authenticated, but the role does not allow it.
    #[error("{0}")]
    Forbidden(String),
    /// The thing does not exist, or the caller may not know it does.
    #[error("{message}")]
    NotFound {
        /// Stable code.
        code: ErrorCode,
        /// For people.
        message: String,
    },
    /// The request is malformed or breaks a rule.
    #[error("{message}")]
    BadRequest {
        /// Stable code.
        code: ErrorCode,
        /// For people.
        message: String,
    },
    /// A domain rule refused the action (for example answering a discarded
    /// card); the code names the rule.
    #[error("{message}")]
    Refused {
        /// Stable code.
        code: ErrorCode,
        /// For people.
        message: String,
    },
    /// A Planner tool refused the call; nothing changed.
    #[error("{}", .0.message)]
    Tool(margin_protocol::decisions::ToolRefusal),
    /// The body is over the route's size limit.
    #[error("{0}")]
    TooLarge(String),
    /// The request conflicts with what exists.
    #[error("{0}")]
    Conflict(String),
    /// The Planner's state does not allow the act (e.g. a Resume with no
    /// Stop pending, or while the machine is away).
    #[error("{message}")]
    PlannerRefused {
        /// Stable code.
        code: ErrorCode,
        /// What is wrong.
        message: String,
    },
    /// The document is archived: it is read-only until its owner
    /// unarchives it (SPEC P3).
    #[error("{0}")]
    Archived(String),
    /// The request's body did not arrive in time.
    #[error("{0}")]
    TimedOut(String),
    /// Too many failed sign-ins from this address or with this credential
    /// (SPEC A3b): retry after a while.
    #[error("too many failed sign-ins {cause}; retry in {} s", .retry_after.as_secs())]
    Throttled {
        /// When a failure may be answered again.
        retry_after: std::time::Duration,
        /// Whose failures: "from this address", "with this credential".
        cause: &'static str,
    },
    /// The revision asked for was compacted away.
    #[error("{0}")]
    Gone(String),
    /// This server cannot serve the request now (it is not ready, or in a
    /// cluster no node could take the document in time); retry.
    #[error("{0}")]
    Unavailable(String),
    /// Something failed on our side; details are logged, not returned.
    #[error("internal error: {0}")]
    Internal(String),
}

impl AppError {
    /// A 400 with `code`.
    pub fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        AppError::BadRequest {
            code,
            message: message.into(),
        }
    }

    /// The 409 for a change to an archived document.
    pub fn archived() -> Self {
        AppError::Archived(
            "the document is archived; it is read-only until its owner unarchives it".into(),
        )
    }

    /// The 404 for an account that is not a member of the document (or
    /// no account at all: the two are not told apart).
    pub fn member_not_found(account: &str) -> Self {
        AppError::NotFound {
            code: ErrorCode::MemberNotFound,
            message: format!("{account:?} is not a member of this document"),
        }
    }

    /// The 404 for a document the caller cannot see.
    pub fn document_not_found(id: &str) -> Self {
        AppError::NotFound {
            code: ErrorCode::DocumentNotFound,
            message: format!("no document {id:?} that you can see"),
        }
    }
}

impl From<StorageError> for AppError {
    fn from(err: StorageError) -> Self {
        match err {
            StorageError::NotFound(what) => AppError::NotFound {
                code: match what {
                    "document" => ErrorCode::DocumentNotFound,
                    "account" => ErrorCode::AccountNotFound,
                    "revision" => ErrorCode::RevisionNotFound,
                    _ => ErrorCode::NotFound,
                },
                message: format!("{what} not found"),
            },
            StorageError::Conflict(message) => AppError::Conflict(message),
            StorageError::Compacted {
                requested,
                snapshot,
            } => AppError::Gone(format!(
                "revision {requested} is no longer kept; the oldest readable revision is {snapshot}"
            )),
            other => AppError::Internal(other.to_string()),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            AppError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, ErrorCode::Unauthenticated),
            AppError::CredentialRefused { code, .. } => (StatusCode::UNAUTHORIZED, *code),
            AppError::Forbidden(_) => (StatusCode::FORBIDDEN, ErrorCode::Forbidden),
            AppError::NotFound { code, .. } => (StatusCode::NOT_FOUND, *code),
            AppError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, *code),
            AppError::Refused { code, .. } => (StatusCode::UNPROCESSABLE_ENTITY, *code),
            AppError::Tool(refusal) => {
                let body = ErrorBody::new(refusal.code, refusal.message.clone());
                return (StatusCode::UNPROCESSABLE_ENTITY, Json(body)).into_response();
            }
            AppError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::BodyTooLarge),
            AppError::Conflict(_) => (StatusCode::CONFLICT, ErrorCode::Conflict),
            AppError::Archived(_) => (StatusCode::CONFLICT, ErrorCode::Archived),
            AppError::PlannerRefused { code, .. } => (StatusCode::CONFLICT, *code),
            AppError::Gone(_) => (StatusCode::GONE, ErrorCode::RevisionCompacted),
            AppError::TimedOut(_) => (StatusCode::REQUEST_TIMEOUT, ErrorCode::RequestTimeout),
            AppError::Throttled { retry_after, .. } => {
                let body = ErrorBody::new(ErrorCode::TooManyAttempts, self.to_string());
                let retry = [(
                    axum::http::header::RETRY_AFTER,
                    retry_after.as_secs().to_string(),
                )];
                return (StatusCode::TOO_MANY_REQUESTS, retry, Json(body)).into_response();
            }
            AppError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable),
            AppError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
        };
        let message = match &self {
            AppError::Internal(detail) => {
                tracing::error!(%detail, "request failed");
                "the server failed; the error was logged".to_owned()
            }
            other => other.to_string(),
        };
        (status, Json(ErrorBody::new(code, message))).into_response()
    }
}
