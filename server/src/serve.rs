//! Running the server until SIGINT/SIGTERM, then shutting down gracefully:
//! sockets are closed with "going away", document tasks write their final
//! snapshots, and storage is closed.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cluster::{Cluster, ClusterError, ClusterSettings, Ownership};
use crate::http::{router, AppState, Throttle, TrustedProxies};
use crate::link::{LinkSettings, Links};
use crate::sessions::Sessions;
use crate::storage::{Claim, ClaimMode, StorageError, Store};
use crate::sync::{Hub, HubSettings};
use margin_planner::Millis;

/// Connections the kernel queues before they are accepted. The default
/// tokio/mio listener asks for 128: a storm of machines relinking at once
/// overflowed it, and many of them waited out the kernel's SYN retry
/// (server/benches/results/reconnect.md). The kernel caps it at
/// `net.core.somaxconn`.
const ACCEPT_BACKLOG: u32 = 4096;

/// Longest wait for document tasks at shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);
/// Other nodes' notices of ended machines waiting to be carried out here;
/// past it, the listener waits.
const NOTICES_WAITING: usize = 64;

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Document tasks and Planner reads.
    pub hub: HubSettings,
    /// Machine link timing.
    pub links: LinkSettings,
    /// `MARGIN_PLANNER_IDLE_MS`: how long a Planner session with nothing to do and
    /// nobody viewing is kept (SPEC P3).
    pub planner_idle: Duration,
    /// `MARGIN_PLANNER_ATTACH_GRACE_MS`: how long a detached link's sessions, or a
    /// dropped link's sessions with nothing to keep, wait for the machine
    /// (SPEC L7).
    pub attach_grace: Duration,
    /// `MARGIN_SESSION_EVENTS_RETAINED`: events each session keeps behind its
    /// snapshot for replay (SPEC E2).
    pub session_events_retained: u64,
    /// Connection caps and the request-head timeout (SPEC A3).
    pub limits: crate::admission::Limits,
    /// Cluster mode (SPEC C1–C4): `None` for a server alone on its
    /// database.
    pub cluster: Option<ClusterSettings>,
    /// `MARGIN_TRUSTED_PROXY`: the peers whose `X-Forwarded-For` or
    /// `Forwarded` names the client address failed sign-ins count against
    /// (SPEC A3b); none by default.
    pub trusted_proxies: TrustedProxies,
}

impl ServeOptions {
    /// Defaults, listening on `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        ServeOptions {
            listen,
            hub: HubSettings::default(),
            links: LinkSettings::default(),
            planner_idle: Duration::from_millis(margin_planner::DEFAULT_IDLE.0),
            attach_grace: Duration::from_millis(margin_planner::DEFAULT_ATTACH_GRACE.0),
            session_events_retained: crate::sessions::DEFAULT_RETAINED,
            limits: crate::admission::Limits::default(),
            cluster: None,
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Another server holds the database, or it could not be claimed.
    #[error(transparent)]
    Claim(#[from] StorageError),
    /// Cluster mode could not start.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The listener failed.
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// A server that is running.
pub struct Running {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its documents, for in-process callers (the Planner tools).
    pub hub: Hub,
    /// How long a machine credential it issues opens links (SPEC L8).
    pub credential_ttl: Duration,
    store: Store,
    claim: Claim,
    cluster: Option<Cluster>,
    /// Stops the cluster lease upkeep, after the document tasks.
    upkeep: CancellationToken,
    upkeep_task: Option<JoinHandle<()>>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    http: JoinHandle<std::io::Result<()>>,
}

/// Binds and starts serving; returns at once.
pub async fn start(store: Store, options: ServeOptions) -> Result<Running, ServeError> {
    let listener = bind(options.listen).map_err(|source| ServeError::Bind {
        addr: options.listen,
        source,
    })?;
    let addr = listener.local_addr()?;
    // Before anything is loaded: a second server on these data would
    // overwrite the first's writes (SPEC W3).
    let mode = match options.cluster {
        Some(_) => ClaimMode::Cluster,
        None => ClaimMode::Alone,
    };
    let claim = store.claim(&describe_self(addr), mode).await?;
    let tracker = TaskTracker::new();
    let shutdown = CancellationToken::new();
    // Leases outlive document tasks: the upkeep stops only after they did.
    let upkeep = CancellationToken::new();
    let (cluster, upkeep_task) = match options.cluster {
        Some(settings) => {
            let advertise = match &settings.advertise {
                Some(advertise) => advertise.trim_end_matches('/').to_owned(),
                None if addr.ip().is_unspecified() => {
                    return Err(ClusterError::Advertise(addr).into())
                }
                None => format!("http://{addr}"),
            };
            let cluster = Cluster::join(store.clone(), advertise, settings).await?;
            let live = tokio::spawn(cluster.clone().keep_live(upkeep.clone()));
            (Some(cluster), Some(live))
        }
        None => (None, None),
    };
    let hub = Hub::new(
        store.clone(),
        tracker.clone(),
        shutdown.clone(),
        options.hub,
        match &cluster {
            Some(cluster) => Ownership::Cluster(cluster.clone()),
            None => Ownership::Alone,
        },
    );
    let credential_ttl = options.links.credential_ttl;
    let links = Links::new(options.links, shutdown.clone(), hub.watchers().clone());
    let timing = margin_planner::Timing {
        idle: Millis(options.planner_idle.as_millis() as u64),
        attach_grace: Millis(options.attach_grace.as_millis() as u64),
    };
    let sessions = Sessions::new(
        hub.clone(),
        links.clone(),
        timing,
        options.session_events_retained,
        &tracker,
        shutdown.clone(),
    );
    match &cluster {
        None => sessions.restore().await,
        // A node takes back only the sessions no live node holds, each
        // with its document's lease; the first sweep runs at once.
        Some(cluster) => {
            tracker.spawn(sessions.clone().sweep(cluster.renew_every()));
            let (ended, to_end) = tokio::sync::mpsc::channel(NOTICES_WAITING);
            tracker.spawn(cluster.clone().listen(ended, shutdown.clone()));
            tracker.spawn(sessions.clone().follow_other_nodes(to_end));
        }
    }
    if !options.trusted_proxies.is_empty() {
        tracing::info!(proxies = %options.trusted_proxies, "forwarded client addresses believed from these peers");
    }
    let app = router(AppState {
        hub: hub.clone(),
        links,
        sessions,
        throttle: Throttle::new(options.trusted_proxies),
    })
    .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
        options.limits.body_timeout,
    ));
    let http = tokio::spawn(crate::admission::serve(
        listener,
        app,
        options.limits.clone(),
        shutdown.clone(),
    ));
    tracing::info!(%addr, backend = ?store.backend(), "listening");
    Ok(Running {
        addr,
        hub,
        credential_ttl,
        store,
        claim,
        cluster,
        upkeep,
        upkeep_task,
        shutdown,
        tracker,
        http,
    })
}

/// How this server names itself to a second one refused its database.
fn describe_self(addr: SocketAddr) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "this host".to_owned());
    format!(
        "margin (pid {}) on {host}, listening on http://{addr}",
        std::process::id()
    )
}

impl Running {
    /// Begins a stop that load balancers can see (SPEC C4, O1): `/readyz`
    /// answers 503 from now on, while everything is still served; the
    /// caller waits out its drain period, then calls [`Running::stop`].
    pub fn begin_draining(&self) {
        self.hub.begin_draining();
        tracing::info!("draining: /readyz answers 503; serving until the stop");
    }

    /// Stops gracefully and waits until everything is flushed.
    pub async fn stop(self) -> Result<(), ServeError> {
        if let Some(cluster) = &self.cluster {
            cluster.drain().await;
        }
        self.shutdown.cancel();
        let served = self.http.await.map_err(std::io::Error::other)?;
        self.tracker.close();
        if tokio::time::timeout(DRAIN_TIMEOUT, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("document tasks did not finish in time; everything acknowledged is already committed");
        }
        // Document tasks released their leases as they unloaded; the
        // upkeep kept the node live until then.
        self.upkeep.cancel();
        if let Some(task) = self.upkeep_task {
            let _ = task.await;
        }
        if let Some(cluster) = &self.cluster {
            cluster.leave().await;
        }
        self.claim.release().await;
        self.store.close().await;
        tracing::info!("stopped");
        Ok(served?)
    }
}

/// Listens on `addr` with [`ACCEPT_BACKLOG`].
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As std's listener does: a restarted server rebinds at once.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_BACKLOG)
}

/// SIGINT and SIGTERM, heard from the moment this is made. Made before the
/// server starts: a signal sent as soon as it says it is listening (a
/// supervisor stopping it at once) would otherwise meet the default
/// action and kill the process without its drain.
pub struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    /// Listens for SIGINT and SIGTERM from now on.
    pub fn listen() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Waits for the next SIGINT or SIGTERM.
    pub async fn recv(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {},
            _ = self.terminate.recv() => {},
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    }
}
