//! HTTP routes: documents, members, outlines, the sync upgrade, the editor's
//! assets and health. Handlers are thin: they authenticate, validate, and
//! call storage or the sync hub.

mod accounts;
mod assets;
mod chat;
mod cidr;
mod decisions;
mod documents;
mod error;
mod events;
mod extract;
mod forwarded;
mod internal;
mod machines;
mod mcp;
mod members;
pub mod openapi;
mod ops;
mod planner;
mod sessions;
mod sse;
mod throttle;
mod tools;

use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use axum::Router;
use margin_protocol::ErrorCode;
use tower_http::trace::TraceLayer;

pub use cidr::{Cidr, CidrError};
pub use error::AppError;
pub use forwarded::TrustedProxies;
pub use throttle::Throttle;

use crate::link::Links;
use crate::sessions::Sessions;
use crate::sync::Hub;

/// Largest JSON request body accepted.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// Largest body of a Planner tool call: a full batch of 32 cards at their
/// bounds, or 64 edits of 10,000 bytes, with room for JSON escaping.
const MAX_TOOL_BODY_BYTES: usize = 2 * 1024 * 1024;

/// What handlers share.
#[derive(Clone)]
pub struct AppState {
    /// Loaded documents and storage.
    pub hub: Hub,
    /// Open machine links.
    pub links: Links,
    /// Planner sessions: their drivers, and their feeds for applications.
    pub sessions: Sessions,
    /// Failed sign-ins per address and per credential, and the client
    /// address a request counts against.
    pub throttle: Throttle,
}

/// The whole HTTP surface, with MCP at `/mcp` (SPEC O4): its tool calls go
/// through the rest of it, as the caller.
pub fn router(state: AppState) -> Router {
    let api = surface(state.clone());
    api.clone()
        .merge(mcp::service(state, api, MAX_TOOL_BODY_BYTES))
}

/// Every route but `/mcp`.
fn surface(state: AppState) -> Router {
    Router::new()
        .route("/", get(assets::index))
        .route("/assets/{file}", get(assets::asset))
        .route("/favicon.ico", get(assets::favicon))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.json", get(openapi::serve))
        .route("/internal/documents/{id}/sync", get(internal::sync))
        .route("/internal/machines/{id}/link", get(internal::machine_link))
        .route("/me", get(accounts::me))
        .route("/me/sign-out", post(accounts::sign_out))
        .route("/machines", post(machines::pair).get(machines::list))
        .route("/machines/{id}", delete(machines::revoke))
        .route("/machine", get(machines::link).delete(machines::unpair))
        .route("/documents", post(documents::create).get(documents::list))
        .route(
            "/documents/{id}",
            get(documents::show)
                .patch(documents::rename)
                .delete(documents::delete),
        )
        .route("/documents/{id}/archive", post(documents::archive))
        .route("/documents/{id}/unarchive", post(documents::unarchive))
        .route(
            "/documents/{id}/members",
            get(members::list).post(members::add),
        )
        .route("/documents/{id}/members/{account}", delete(members::remove))
        .route("/documents/{id}/outline", get(documents::outline))
        .route("/documents/{id}/sync", get(documents::sync))
        .route("/documents/{id}/chat", post(chat::post).get(chat::list))
        .route("/documents/{id}/events", get(events::feed))
        .route("/documents/{id}/planner", get(planner::planner))
        .route("/documents/{id}/planner/stop", post(planner::stop))
        .route("/documents/{id}/planner/resume", post(planner::resume))
        .route("/documents/{id}/planner/reset", post(planner::reset))
        .route("/documents/{id}/planner/invoke", post(planner::invoke))
        .route("/documents/{id}/decisions", get(decisions::list))
        .route(
            "/documents/{id}/decisions/{card}/answer",
            post(decisions::answer),
        )
        .route(
            "/documents/{id}/decisions/{card}/discard",
            post(decisions::discard),
        )
        .route(
            "/documents/{id}/decisions/{card}/reopen",
            post(decisions::reopen),
        )
        .route(
            "/documents/{id}/decisions/{card}/options",
            post(decisions::add_option),
        )
        .route(
            "/documents/{id}/decisions/{card}/criteria",
            post(decisions::add_criterion),
        )
        .route("/sessions/{sid}", get(sessions::snapshot))
        .route("/sessions/{sid}/events", get(sessions::events))
        .layer(axum::middleware::from_fn_with_state(
            MAX_BODY_BYTES,
            extract::declared_length,
        ))
        .merge(tool_routes())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            internal::to_owner,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_failure(on_failure),
        )
        .with_state(state)
}

/// Logs a failed response. A 503 says the server is draining or its
/// database is slow — what a load balancer's checks are for, not an error
/// of the server's (SPEC C4, O1) — so it is logged at INFO; the handler
/// that gave it already said why.
fn on_failure(
    class: tower_http::classify::ServerErrorsFailureClass,
    latency: std::time::Duration,
    _span: &tracing::Span,
) {
    use tower_http::classify::ServerErrorsFailureClass::StatusCode as Status;
    let latency_ms = latency.as_millis() as u64;
    match class {
        Status(status) if status == axum::http::StatusCode::SERVICE_UNAVAILABLE => {
            tracing::info!(%status, latency_ms, "unavailable");
        }
        other => tracing::error!(classification = %other, latency_ms, "response failed"),
    }
}

/// The Planner's tools, whose bodies may be larger than other requests'.
fn tool_routes() -> Router<AppState> {
    Router::new()
        .route("/documents/{id}/tools/{tool}", post(tools::call))
        .layer(axum::middleware::from_fn_with_state(
            MAX_TOOL_BODY_BYTES,
            extract::declared_length,
        ))
        .layer(DefaultBodyLimit::max(MAX_TOOL_BODY_BYTES))
}

/// The span a request's log lines carry: its method and path — which name
/// the document or session it is about — never its query, where a
/// browser's event stream or socket carries its token.
fn request_span<B>(request: &axum::http::Request<B>) -> tracing::Span {
    tracing::info_span!(
        "request",
        method = %request.method(),
        path = request.uri().path(),
    )
}

async fn not_found() -> AppError {
    AppError::NotFound {
        code: ErrorCode::RouteNotFound,
        message: "no such route".into(),
    }
}
