//! Cluster mode (SPEC C1–C4): several `margin serve --cluster` nodes on one
//! PostgreSQL database, coordinating only through it.
//!
//! This module owns the node's membership and its documents' ownership:
//! [`Cluster`] registers the node (`cluster_nodes`), keeps it live by
//! renewing it every `renew_every`, and takes and releases document leases
//! for the document tasks ([`Ownership`]). A node that finds it has lapsed
//! — it paused or lost the database past its lease — drops every document
//! it holds at once (their tasks close their clients, who reconnect to
//! whichever node owns the document now) and joins again under a new id.
//! [`leases`] holds the document leases themselves; [`calls`] carries an
//! HTTP call that reached a node which does not own its document to the
//! node that does (a sync socket goes through `sync::forward`), and
//! [`notice`] what one node tells every other; [`watch`] sees to it that
//! no client carried to another node waits on one that lost its hold.

pub mod calls;
pub mod notice;

mod leases;
mod taken;
mod watch;

use leases::Held;
pub use leases::{Lease, Ownership, TakeRefused};
pub use notice::{MachinesEnded, Whose};
pub use watch::Heard;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::storage::{Node, StorageError, Store};

/// The header that carries the cluster's secret on the internal channel.
pub const SECRET_HEADER: &str = "x-margin-cluster-secret";

/// Cluster mode's settings.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    /// Where the other nodes reach this one (`http://HOST:PORT`); `None`
    /// uses the address it listens on.
    pub advertise: Option<String>,
    /// How long a node stays the owner of its documents after its last
    /// renewal; another node takes them once it passes (SPEC C3).
    pub lease_ttl: Duration,
    /// How often a node renews its lease.
    pub renew_every: Duration,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            advertise: None,
            lease_ttl: Duration::from_millis(1_500),
            renew_every: Duration::from_millis(500),
        }
    }
}

/// Why cluster settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The renewal interval leaves no room for a missed renewal.
    #[error("the lease renewal interval ({renew} ms) must be at most a third of the lease TTL ({ttl} ms), so one late renewal does not lose every document")]
    Timing {
        /// The renewal interval.
        renew: u128,
        /// The TTL.
        ttl: u128,
    },
    /// No address the other nodes could reach.
    #[error("--advertise is required when listening on {0}: the other nodes need an address that reaches this one")]
    Advertise(std::net::SocketAddr),
    /// An address the internal channel cannot use.
    #[error("--advertise must be http://HOST:PORT (the nodes' internal channel is plain HTTP on their own network), not {0:?}")]
    AdvertiseUrl(String),
    /// Joining failed.
    #[error("cannot join the cluster: {0}")]
    Storage(#[from] StorageError),
}

/// This node's standing in the cluster; cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    advertise: String,
    secret: String,
    /// The NOTIFY channel the nodes tell each other things on.
    channel: String,
    settings: ClusterSettings,
    /// The node as it is registered now.
    current: Mutex<Incarnation>,
    /// The documents this node holds, by (node id, document): how many
    /// things here use each (its document task, its Planner session) and
    /// the latest epoch taken. The lease goes when the last lets go.
    holds: Mutex<HashMap<(String, String), Held>>,
    /// Draining: it takes no new documents (a graceful stop).
    draining: AtomicBool,
    /// Woken when another node let documents go ([`notice`]).
    wakeup: tokio::sync::Notify,
    /// What the clients carried to other nodes wait on ([`watch`]).
    watches: watch::Watches,
    /// Documents taken afresh, for the sessions to follow ([`taken`]).
    taken: taken::Taken,
}

/// One registration of this node: its id, and a token cancelled when it
/// lapses, which every document held under it watches.
#[derive(Clone, Debug)]
pub struct Incarnation {
    /// The node's id while this registration lasts.
    pub node: String,
    /// Cancelled when the registration lapsed: whatever it held may have
    /// been taken by another node.
    pub lapsed: CancellationToken,
    /// Until when, on this node's clock, the lease surely holds: the last
    /// renewal was sent before it began.
    valid_until: Instant,
}

impl Cluster {
    /// Joins the cluster on `store` as a node reachable at `advertise`;
    /// [`Cluster::keep_live`] must run from then on.
    pub async fn join(
        store: Store,
        advertise: String,
        settings: ClusterSettings,
    ) -> Result<Cluster, ClusterError> {
        if settings.renew_every.is_zero() || settings.renew_every * 3 > settings.lease_ttl {
            return Err(ClusterError::Timing {
                renew: settings.renew_every.as_millis(),
                ttl: settings.lease_ttl.as_millis(),
            });
        }
        let authority = advertise.strip_prefix("http://").unwrap_or_default();
        if authority.is_empty() || authority.contains('/') {
            return Err(ClusterError::AdvertiseUrl(advertise));
        }
        let fresh = crate::auth::new_secret("mgc_").map_err(|e| {
            StorageError::Claim(format!("no randomness for the cluster secret: {e}"))
        })?;
        let secret = store.cluster_secret(&fresh).await?;
        let channel = store.cluster_channel().await?;
        let started = Instant::now();
        let node = store.register_node(&advertise, ttl_ms(&settings)).await?;
        info!(node = %node.id, %advertise, "joined the cluster");
        let cluster = Cluster {
            inner: Arc::new(Inner {
                store,
                advertise,
                secret,
                channel,
                current: Mutex::new(Incarnation {
                    node: node.id,
                    lapsed: CancellationToken::new(),
                    valid_until: started + settings.lease_ttl,
                }),
                settings,
                holds: Mutex::new(HashMap::new()),
                draining: AtomicBool::new(false),
                wakeup: tokio::sync::Notify::new(),
                watches: watch::Watches::default(),
                taken: taken::Taken::default(),
            }),
        };
        Ok(cluster)
    }

    /// The secret the internal channel carries.
    pub fn secret(&self) -> &str {
        &self.inner.secret
    }

    /// Where the other nodes reach this one.
    pub fn advertise(&self) -> &str {
        &self.inner.advertise
    }

    /// How often the node renews its lease.
    pub fn renew_every(&self) -> Duration {
        self.inner.settings.renew_every
    }

    /// How long a node owns its documents after its last renewal.
    pub fn lease_ttl(&self) -> Duration {
        self.inner.settings.lease_ttl
    }

    /// How long a connection waits for a document whose owner stopped
    /// answering: long enough for its lease to lapse and a node to take it.
    pub fn failover_patience(&self) -> Duration {
        self.inner.settings.lease_ttl * 2 + Duration::from_secs(1)
    }

    /// The registration in force.
    pub fn incarnation(&self) -> Incarnation {
        self.inner
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether this node can serve: registered, renewed within its lease,
    /// and not draining (`/readyz`).
    pub fn ready(&self) -> bool {
        let current = self.incarnation();
        !self.inner.draining.load(Ordering::Relaxed)
            && !current.lapsed.is_cancelled()
            && Instant::now() < current.valid_until
    }

    /// The WebSocket request that opens `path` on `node`'s internal
    /// channel, showing the cluster's secret; `None` for an address that
    /// is not `http://HOST:PORT`.
    pub fn internal_request(
        &self,
        node: &Node,
        path: &str,
    ) -> Option<tokio_tungstenite::tungstenite::handshake::client::Request> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let authority = node.advertise.strip_prefix("http://")?;
        let mut request = format!("ws://{authority}{path}")
            .into_client_request()
            .ok()?;
        let secret = self.secret().parse().ok()?;
        request.headers_mut().insert(SECRET_HEADER, secret);
        Some(request)
    }

    /// The nodes live now.
    pub async fn live_nodes(&self) -> Result<Vec<Node>, StorageError> {
        self.inner.store.live_nodes().await
    }

    /// The live node that owns document `id`, unless it is this one or
    /// nobody does.
    pub async fn elsewhere(&self, id: &str) -> Result<Option<Node>, StorageError> {
        let me = self.incarnation().node;
        Ok(self
            .inner
            .store
            .lease_holder(id)
            .await?
            .filter(|holder| holder.live && holder.node.id != me)
            .map(|holder| holder.node))
    }

    /// Renews the registration every `renew_every` until `shutdown`; when
    /// it finds it lapsed, drops what it held and registers anew. Watches
    /// the nodes it carries clients to meanwhile ([`watch`]).
    pub async fn keep_live(self, shutdown: CancellationToken) {
        tokio::spawn(self.clone().poll_watches(shutdown.clone()));
        let settings = self.inner.settings.clone();
        let mut tick = tokio::time::interval(settings.renew_every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let current = self.incarnation();
            let sent = Instant::now();
            if sent >= current.valid_until {
                // Past the lease on this node's own clock (it paused, or
                // the database did not answer): another node may own these
                // documents now.
                self.lapse(&current, "the lease ran out before it was renewed");
            }
            if current.lapsed.is_cancelled() {
                self.rejoin().await;
                continue;
            }
            // A database that stops answering (cut off, black-holed) must
            // not hold the renewal past the lease: this node lapses on its
            // own clock then, whether or not the answer ever comes.
            let renewal = self
                .inner
                .store
                .renew_node(&current.node, ttl_ms(&settings));
            match tokio::time::timeout_at(current.valid_until, renewal).await {
                Ok(Ok(true)) => self.renewed(&current, sent + settings.lease_ttl),
                Ok(Ok(false)) => {
                    self.lapse(&current, "the database says the lease ran out");
                    self.rejoin().await;
                }
                Ok(Err(error)) => warn!(%error, "lease not renewed; trying again"),
                Err(_) => self.lapse(&current, "the database did not answer within the lease"),
            }
        }
    }

    fn renewed(&self, incarnation: &Incarnation, until: Instant) {
        let mut current = self
            .inner
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.node == incarnation.node {
            current.valid_until = until;
        }
    }

    fn lapse(&self, incarnation: &Incarnation, why: &str) {
        if !incarnation.lapsed.is_cancelled() {
            warn!(node = %incarnation.node, why, "this node lapsed: dropping every document it held");
            incarnation.lapsed.cancel();
        }
    }

    /// Registers under a new id once the old registration lapsed.
    async fn rejoin(&self) {
        let started = Instant::now();
        let registering = self
            .inner
            .store
            .register_node(&self.inner.advertise, ttl_ms(&self.inner.settings));
        // Bounded as a renewal is: an answer later than the lease it
        // grants would be a lease already run out.
        let registered = tokio::time::timeout(self.inner.settings.lease_ttl, registering)
            .await
            .unwrap_or_else(|_| {
                Err(StorageError::Unreachable {
                    target: "the cluster's database".into(),
                    cause: "no answer within the lease".into(),
                })
            });
        match registered {
            Ok(node) => {
                info!(node = %node.id, "joined the cluster again");
                *self
                    .inner
                    .current
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Incarnation {
                    node: node.id,
                    lapsed: CancellationToken::new(),
                    valid_until: started + self.inner.settings.lease_ttl,
                };
            }
            Err(error) => warn!(%error, "cannot join the cluster again; trying again"),
        }
    }

    /// Leaves the cluster at a graceful stop, once every document
    /// unloaded: its leases go with it.
    pub async fn leave(&self) {
        let node = self.incarnation().node;
        match self.inner.store.remove_node(&node).await {
            Ok(()) => self.released().await,
            Err(error) => warn!(%error, "node not removed; its leases lapse with it"),
        }
    }

    /// Marks this node draining: it takes no new documents and `/readyz`
    /// fails, so a load balancer sends nobody new.
    pub async fn drain(&self) {
        self.inner.draining.store(true, Ordering::Relaxed);
        let node = self.incarnation().node;
        if let Err(error) = self.inner.store.set_draining(&node, true).await {
            warn!(%error, "draining not recorded");
        }
    }
}

fn ttl_ms(settings: &ClusterSettings) -> i64 {
    settings.lease_ttl.as_millis() as i64
}
