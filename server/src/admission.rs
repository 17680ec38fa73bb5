//! Admission: what a connection may hold before it has said who it is
//! (SPEC A3, W3). The HTTP server's accept loop lives here, so every bound
//! applies before a byte of a request is parsed:
//!
//! - At most [`Limits::connections`] HTTP connections are open, and at most
//!   [`Limits::per_address`] from one address. When a new one would pass a
//!   cap, the oldest connection that has not yet sent a whole request head
//!   is closed to make room — a thousand half-sent headers cannot lock out
//!   a client that speaks promptly; with none to close, the newcomer is
//!   answered 503 and closed.
//! - A request head must arrive within [`Limits::header_timeout`].
//! - When the process runs out of file descriptors, the oldest waiting
//!   connection is closed and accepting pauses briefly instead of spinning.
//!
//! The cap on connections starts from the process's file-descriptor limit,
//! keeping a reserve for the database, the data folder and upgraded sockets.

use margin_protocol::{ErrorBody, ErrorCode};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use tracing::{debug, warn};

/// File descriptors kept out of the connection cap: the database pool, the
/// data folder, logs, and the listener itself.
const RESERVED_FDS: u64 = 64;

/// How long accepting pauses when the process is out of descriptors.
const FD_PAUSE: Duration = Duration::from_millis(20);

/// How long a refused connection is given to read its 503.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);

/// Bounds on connections before and while they are served.
#[derive(Clone, Debug)]
pub struct Limits {
    /// `MARGIN_MAX_CONNECTIONS`: open HTTP connections in all. Lowered to
    /// the file-descriptor limit less a reserve, when that is smaller.
    pub connections: usize,
    /// `MARGIN_MAX_CONNECTIONS_PER_ADDRESS`: open HTTP connections from
    /// one IP address.
    pub per_address: usize,
    /// `MARGIN_HEADER_TIMEOUT_MS`: how long a request head may take.
    pub header_timeout: Duration,
    /// `MARGIN_BODY_TIMEOUT_MS`: how long a request body may take, once
    /// its head arrived (a 408 then).
    pub body_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: 4096,
            per_address: 512,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
        }
    }
}

impl Limits {
    /// The total cap in force: the setting, or what the file-descriptor
    /// limit leaves room for.
    pub fn effective_connections(&self) -> usize {
        let fds = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let room = fds.saturating_sub(RESERVED_FDS).max(1);
        self.connections
            .min(usize::try_from(room).unwrap_or(usize::MAX))
    }
}

/// The open connections, and which of them have not yet sent a request.
#[derive(Debug, Default)]
struct Ledger {
    open: usize,
    per_address: HashMap<IpAddr, usize>,
    /// Connections still waiting for their first request head, oldest
    /// first: (admission number) → (address, how to close it).
    waiting: BTreeMap<u64, (IpAddr, CancellationToken)>,
    next: u64,
}

/// Counts connections against the caps; cheap to clone.
#[derive(Clone, Debug)]
struct Admission {
    total: usize,
    per_address: usize,
    ledger: Arc<Mutex<Ledger>>,
}

/// A connection's place in the ledger; leaving gives it back.
struct Ticket {
    number: u64,
    address: IpAddr,
    close: CancellationToken,
    ledger: Arc<Mutex<Ledger>>,
}

impl Admission {
    fn lock(&self) -> MutexGuard<'_, Ledger> {
        // A panic elsewhere cannot leave the counts half-written: every
        // change below is a few integer and map updates.
        self.ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Admits a connection from `address`, closing the oldest waiting one
    /// if a cap is reached; `None` when nothing can make room.
    fn admit(&self, address: IpAddr) -> Option<Ticket> {
        let mut ledger = self.lock();
        if ledger.per_address.get(&address).copied().unwrap_or(0) >= self.per_address {
            let oldest = ledger
                .waiting
                .iter()
                .find(|(_, (from, _))| *from == address)
                .map(|(number, _)| *number);
            evict(&mut ledger, oldest?);
        }
        if ledger.open >= self.total {
            let oldest = ledger.waiting.keys().next().copied();
            evict(&mut ledger, oldest?);
        }
        let number = ledger.next;
        ledger.next += 1;
        ledger.open += 1;
        *ledger.per_address.entry(address).or_insert(0) += 1;
        let close = CancellationToken::new();
        ledger.waiting.insert(number, (address, close.clone()));
        Some(Ticket {
            number,
            address,
            close,
            ledger: self.ledger.clone(),
        })
    }

    /// Closes the oldest waiting connection (out of descriptors).
    fn evict_oldest(&self) -> bool {
        let mut ledger = self.lock();
        match ledger.waiting.keys().next().copied() {
            Some(number) => {
                evict(&mut ledger, number);
                true
            }
            None => false,
        }
    }
}

/// Closes waiting connection `number`; it leaves the counts when its task
/// ends.
fn evict(ledger: &mut Ledger, number: u64) {
    if let Some((address, close)) = ledger.waiting.remove(&number) {
        debug!(%address, "closing a connection that sent no request, to make room");
        close.cancel();
    }
}

impl Ticket {
    /// The connection sent a whole request head: it is no longer evicted.
    fn started(&self) {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        ledger.waiting.remove(&self.number);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        ledger.waiting.remove(&self.number);
        ledger.open = ledger.open.saturating_sub(1);
        if let Some(count) = ledger.per_address.get_mut(&self.address) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                ledger.per_address.remove(&self.address);
            }
        }
    }
}

/// Serves `app` on `listener` until `shutdown`, then lets open requests
/// finish (upgraded sockets are closed by their own tasks).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let admission = Admission {
        total: limits.effective_connections(),
        per_address: limits.per_address,
        ledger: Arc::default(),
    };
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) if out_of_descriptors(&error) => {
                warn!(%error, "out of file descriptors; closing the oldest connection that sent no request");
                admission.evict_oldest();
                tokio::time::sleep(FD_PAUSE).await;
                continue;
            }
            // A connection reset before it was accepted, and the like.
            Err(error) => {
                debug!(%error, "accept failed");
                continue;
            }
        };
        // Small frames go out at once: with Nagle's algorithm a Planner's
        // small tool result waited behind the unacknowledged end of another
        // session's large one, up to a delayed ACK (40 ms) at a time.
        if let Err(error) = tcp.set_nodelay(true) {
            debug!(%error, "TCP_NODELAY not set");
        }
        match admission.admit(peer.ip()) {
            Some(ticket) => {
                let (app, limits, shutdown) = (app.clone(), limits.clone(), shutdown.clone());
                connections.spawn(connection(tcp, peer, ticket, app, limits, shutdown));
            }
            None => {
                connections.spawn(refuse(tcp));
            }
        }
    }
    connections.close();
    connections.wait().await;
    Ok(())
}

/// Serves one connection until it ends, is evicted, or the server stops.
async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    ticket: Ticket,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let ticket = Arc::new(ticket);
    let close = ticket.close.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        ticket.started();
        request.extensions_mut().insert(ConnectInfo(peer));
        let app = app.clone();
        async move {
            Ok::<_, Infallible>(
                app.oneshot(request.map(axum::body::Body::new))
                    .await
                    .unwrap_or_else(|never| match never {}),
            )
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let served = builder
        .serve_connection(TokioIo::new(tcp), service)
        .with_upgrades();
    tokio::pin!(served);
    let result = tokio::select! {
        result = served.as_mut() => result,
        _ = close.cancelled() => return,
        _ = shutdown.cancelled() => {
            served.as_mut().graceful_shutdown();
            served.await
        }
    };
    if let Err(error) = result {
        debug!(%peer, %error, "connection ended with an error");
    }
}

/// Answers a connection no cap has room for, and closes it.
async fn refuse(mut tcp: TcpStream) {
    let body = ErrorBody::new(
        ErrorCode::TooManyConnections,
        "the server has no room for another connection; retry shortly",
    );
    let body = serde_json::to_string(&body).unwrap_or_default();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_WRITE, tcp.write_all(response.as_bytes())).await;
}

fn out_of_descriptors(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(code) if code == rustix::io::Errno::MFILE.raw_os_error() || code == rustix::io::Errno::NFILE.raw_os_error())
}
