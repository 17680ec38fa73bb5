//! HTTP calls relayed to a document's owner (SPEC C2; sync sockets are
//! [`super::forward`]'s, machine links `machine::relay`'s): a call that acts on
//! a document — Chat, card actions, the Planner's tools, archiving — goes
//! to the node that runs the document's task, so it lands where the
//! document's state lives; the caller never needs to know which node that
//! is.
//!
//! The relaying node has already authenticated the caller (failed sign-ins
//! are throttled there, by the caller's own address). The request goes on
//! as it came, but for its token: the relaying node names the account
//! instead, and adds the cluster's secret, which is what the owner trusts
//! (`http::extract::Caller`). The owner serves it as its own and never
//! relays a call that shows the secret again, so a call crosses at most one
//! hop.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::HOST;
use axum::http::{HeaderValue, Uri};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tracing::debug;

use super::{Cluster, SECRET_HEADER};
use crate::storage::Node;

/// Longest wait for the owner's answer to begin; a relayed body then
/// streams for as long as it takes.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a call could not be relayed.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The owner's address is not `http://HOST:PORT`.
    #[error("the owner's address {0} is not http://HOST:PORT")]
    Address(String),
    /// The owner could not be reached, or failed mid-call.
    #[error("the server holding the document ({0}) did not answer: {1}")]
    Unreachable(String, String),
}

/// Whether `request` came from another node of `cluster` (it shows the
/// cluster's secret). Compared as hashes: the comparison takes the same
/// time wherever the texts first differ.
pub fn from_a_node(cluster: &Cluster, headers: &axum::http::HeaderMap) -> bool {
    let shown = headers
        .get(SECRET_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    blake3::hash(shown.as_bytes()) == blake3::hash(cluster.secret().as_bytes())
}

/// Sends `request` to `node` and returns its answer as it streams.
pub async fn relay(
    cluster: &Cluster,
    node: &Node,
    mut request: Request,
) -> Result<Response, RelayError> {
    let authority = node
        .advertise
        .strip_prefix("http://")
        .filter(|rest| !rest.is_empty() && !rest.contains('/'))
        .ok_or_else(|| RelayError::Address(node.advertise.clone()))?
        .to_owned();
    let unreachable =
        |e: &dyn std::fmt::Display| RelayError::Unreachable(node.advertise.clone(), e.to_string());
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    *request.uri_mut() = Uri::try_from(path).map_err(|e| unreachable(&e))?;
    let headers = request.headers_mut();
    headers.insert(
        SECRET_HEADER,
        HeaderValue::from_str(cluster.secret()).map_err(|e| unreachable(&e))?,
    );
    headers.insert(
        HOST,
        HeaderValue::from_str(&authority).map_err(|e| unreachable(&e))?,
    );
    let call = async {
        let stream = TcpStream::connect(&authority)
            .await
            .map_err(|e| unreachable(&e))?;
        let _ = stream.set_nodelay(true);
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(&e))?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                debug!(%error, "relayed call's connection ended");
            }
        });
        sender
            .send_request(request)
            .await
            .map_err(|e| unreachable(&e))
    };
    let answer = tokio::time::timeout(ANSWER_TIMEOUT, call)
        .await
        .map_err(|_| unreachable(&"no answer within 60 s"))??;
    Ok(answer.map(Body::new))
}
