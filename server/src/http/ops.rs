//! What an operator's tools ask a server (SPEC O1): `/healthz` (it runs
//! and its database answers), `/readyz` (it can take traffic) and
//! `/metrics` (Prometheus text). None needs a token: they say nothing about
//! any document's content, and load balancers and scrapers carry none.

use std::time::Duration;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use super::{AppError, AppState};
use crate::metrics::{self, Gauges};

pub async fn healthz(State(state): State<AppState>) -> Result<Json<serde_json::Value>, AppError> {
    tokio::time::timeout(Duration::from_secs(5), state.hub.store().ping())
        .await
        .map_err(|_| AppError::Internal("database ping timed out".into()))??;
    Ok(Json(json!({ "status": "ok" })))
}

/// Whether this server can take traffic (SPEC O1): it is not stopping, its
/// database answers and, in a cluster, it holds a live registration and is
/// not draining. A load balancer sends new connections only to a node that
/// says so; once SIGTERM came it says no at once, while the server still
/// serves for its drain period (C4).
pub async fn readyz(State(state): State<AppState>) -> Result<Json<serde_json::Value>, AppError> {
    if state.hub.is_draining() {
        return Err(AppError::Unavailable(
            "this server is draining: it is stopping, and serves what it has until then; send new connections elsewhere"
                .into(),
        ));
    }
    tokio::time::timeout(Duration::from_secs(5), state.hub.store().ping())
        .await
        .map_err(|_| AppError::Unavailable("the database did not answer within 5 s".into()))?
        .map_err(|e| AppError::Unavailable(format!("the database failed: {e}")))?;
    match state.hub.cluster() {
        None => Ok(Json(json!({ "status": "ready" }))),
        Some(cluster) if cluster.ready() => Ok(Json(json!({
            "status": "ready",
            "node": cluster.incarnation().node,
            "advertise": cluster.advertise(),
        }))),
        Some(_) => Err(AppError::Unavailable(
            "this node is not serving: it is draining, or its lease lapsed and it is joining the cluster again"
                .into(),
        )),
    }
}

/// `GET /metrics`: the counters, and gauges read now from the registries
/// (SPEC O1). One count query on the database at most, bounded by 5 s.
pub async fn metrics(State(state): State<AppState>) -> Result<impl IntoResponse, AppError> {
    let (documents_loaded, sync_connections) = state.hub.load();
    let open_decisions = tokio::time::timeout(
        Duration::from_secs(5),
        state.hub.store().open_decision_count(),
    )
    .await
    .map_err(|_| AppError::Unavailable("the database did not answer within 5 s".into()))??;
    let gauges = Gauges {
        documents_loaded,
        sync_connections,
        sync_connections_forwarded: state.hub.forwarded(),
        machine_links: state.links.count(),
        sessions: state.sessions.states(),
        open_decisions,
        document_streams: state.hub.watchers().streams(),
        storage_connections: state.hub.store().pool_connections(),
    };
    Ok((
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        metrics::render(&gauges),
    ))
}
