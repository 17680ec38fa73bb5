//! Watching the nodes this node carries clients to (SPEC C5): a sync
//! socket, an event stream or a machine link carried to another node is
//! only as good as that node's hold on what it serves. A node paused or cut
//! off past its lease answers nothing and closes nothing, so the node that
//! carries the client must notice for it.
//!
//! One task polls PostgreSQL every renewal interval — one statement for the
//! documents watched here and one for the nodes, however many clients wait
//! on them — and tells each watcher what it found. A watcher ends once what
//! it carries its client to no longer holds (the document's lease lapsed or
//! moved; the node lapsed), so no client waits on a lost owner longer than
//! the lease TTL and one renewal interval. A node cut off from this one
//! while it keeps its lease is another matter: what carries a client to it
//! pings it and gives up once it hears nothing for as long ([`Heard`]).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::Cluster;
use crate::storage::StorageError;

/// What is watched.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Watched {
    /// A document's lease.
    Document(String),
    /// A node's registration.
    Node(String),
}

/// The latest finding on one watched thing: when the poll that made it
/// began, and the live node holding it then (for a node: itself, if live).
type Finding = (Instant, Option<String>);

/// The watched things and their findings.
#[derive(Default)]
pub(super) struct Watches {
    findings: std::sync::Mutex<HashMap<Watched, watch::Sender<Finding>>>,
}

impl Cluster {
    /// Ends once document `id` is no longer held by live node `node`: its
    /// lease lapsed (the node paused, crashed or lost the database) or
    /// moved to another node.
    pub fn until_moved(&self, id: &str, node: &str) -> impl Future<Output = ()> + Send + 'static {
        self.until_gone(Watched::Document(id.to_owned()), node)
    }

    /// Ends once node `node` is no longer live.
    pub fn until_lapsed(&self, node: &str) -> impl Future<Output = ()> + Send + 'static {
        self.until_gone(Watched::Node(node.to_owned()), node)
    }

    fn until_gone(&self, what: Watched, holder: &str) -> impl Future<Output = ()> + Send + 'static {
        let since = Instant::now();
        let holder = holder.to_owned();
        let mut findings = {
            let mut all = self.lock_watches();
            all.entry(what)
                .or_insert_with(|| watch::channel((since, Some(holder.clone()))).0)
                .subscribe()
        };
        async move {
            // Only a poll begun after the watch began counts: one begun
            // before may have read the holder the caller just moved past.
            while findings.changed().await.is_ok() {
                let (polled, found) = &*findings.borrow_and_update();
                if *polled >= since && found.as_deref() != Some(holder.as_str()) {
                    return;
                }
            }
            // The poll ends only with the server; so does the watch.
            std::future::pending::<()>().await
        }
    }

    fn lock_watches(&self) -> std::sync::MutexGuard<'_, HashMap<Watched, watch::Sender<Finding>>> {
        self.inner
            .watches
            .findings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Polls what is watched every renewal interval until `shutdown`.
    pub(super) async fn poll_watches(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.renew_every());
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let polled = Instant::now();
            let (documents, nodes): (Vec<String>, bool) = {
                let mut all = self.lock_watches();
                all.retain(|_, finding| finding.receiver_count() > 0);
                let documents = all
                    .keys()
                    .filter_map(|what| match what {
                        Watched::Document(id) => Some(id.clone()),
                        Watched::Node(_) => None,
                    })
                    .collect();
                let nodes = all.keys().any(|what| matches!(what, Watched::Node(_)));
                (documents, nodes)
            };
            let held: HashMap<String, String> = if documents.is_empty() {
                HashMap::new()
            } else {
                // Not knowing is no finding: the next poll tries again.
                match bounded(
                    self.renew_every(),
                    self.inner.store.live_holders(&documents),
                )
                .await
                {
                    Ok(held) => held.into_iter().collect(),
                    Err(error) => {
                        warn!(%error, "cannot see who holds the documents forwarded from here");
                        continue;
                    }
                }
            };
            let live: HashSet<String> = if nodes {
                match bounded(self.renew_every(), self.live_nodes()).await {
                    Ok(live) => live.into_iter().map(|node| node.id).collect(),
                    Err(error) => {
                        warn!(%error, "cannot see which nodes are live");
                        continue;
                    }
                }
            } else {
                HashSet::new()
            };
            for (what, finding) in self.lock_watches().iter() {
                let found = match what {
                    Watched::Document(id) => held.get(id).cloned(),
                    Watched::Node(id) => live.contains(id).then(|| id.clone()),
                };
                finding.send_replace((polled, found));
            }
        }
    }
}

/// `query`, given up after `limit`: a database that stops answering
/// delays no poll past the next.
async fn bounded<T>(
    limit: Duration,
    query: impl Future<Output = Result<T, StorageError>>,
) -> Result<T, StorageError> {
    tokio::time::timeout(limit, query)
        .await
        .unwrap_or_else(|_| {
            Err(StorageError::Unreachable {
                target: "the cluster's database".into(),
                cause: "no answer within a renewal interval".into(),
            })
        })
}

/// When a node this one carries a client to was last heard from: what a
/// pipe's watchdog waits on.
pub struct Heard {
    began: Instant,
    /// Milliseconds after `began`.
    last: AtomicU64,
}

impl Default for Heard {
    fn default() -> Heard {
        Heard {
            began: Instant::now(),
            last: AtomicU64::new(0),
        }
    }
}

impl Heard {
    /// Something came from the node just now.
    pub fn now(&self) {
        let ms = self.began.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::Relaxed);
    }

    /// Ends once nothing came for `silence`.
    pub async fn silent_for(&self, silence: Duration) {
        loop {
            let last = self.last.load(Ordering::Relaxed);
            let due = self.began + Duration::from_millis(last) + silence;
            if Instant::now() >= due {
                return;
            }
            tokio::time::sleep_until(due).await;
        }
    }
}

impl Cluster {
    /// How long a node carried to may stay silent before it is given up:
    /// pinged every renewal interval, it had a lease's span and one more
    /// interval to answer.
    pub fn silence_allowed(&self) -> Duration {
        self.lease_ttl() + self.renew_every()
    }
}
