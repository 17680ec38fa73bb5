//! Group commit: one task commits whatever writes wait for it, together.
//!
//! SQLite has one writer, and each of its transactions costs an fsync and,
//! through `sqlx`, a round trip per statement to the connection's worker
//! thread. Writers that queue for one task instead, which takes every
//! write waiting when it frees up and commits them in one transaction,
//! share both. Nothing is answered before that commit returns. A group
//! that fails is tried again write by write, so one write's error (a moved
//! fence, a bad row) is its own and the others still land.

use std::future::Future;

use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;
use tracing::warn;

use super::StorageError;

/// How one kind of write is committed in groups.
pub trait Commits: Send + Sync + 'static {
    /// One write.
    type Write: Send + Sync + 'static;
    /// What a committed write answers.
    type Landed: Send + 'static;
    /// Commits `writes` in one transaction: every one of them, each with
    /// its answer in order, or none.
    fn commit(
        &self,
        writes: &[Self::Write],
    ) -> impl Future<Output = Result<Vec<Self::Landed>, StorageError>> + Send;
    /// A write's share of a group's budget (bytes, say).
    fn weight(_write: &Self::Write) -> usize {
        1
    }
}

type Queued<C> = (
    <C as Commits>::Write,
    oneshot::Sender<Result<<C as Commits>::Landed, StorageError>>,
);

/// The writers' end of a group-commit task; cheap to clone. The task ends
/// once every handle is dropped, after committing what was queued.
pub struct Group<C: Commits> {
    queue: mpsc::Sender<Queued<C>>,
    what: &'static str,
}

impl<C: Commits> Clone for Group<C> {
    fn clone(&self) -> Self {
        Group {
            queue: self.queue.clone(),
            what: self.what,
        }
    }
}

impl<C: Commits> std::fmt::Debug for Group<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("what", &self.what).finish()
    }
}

/// Bounds of one group and of the queue before it.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Writes waiting before writers wait to queue.
    pub queue: usize,
    /// Writes in one group at most.
    pub writes: usize,
    /// Total [`Commits::weight`] of one group at most (a group always
    /// holds at least one write, however heavy).
    pub weight: usize,
}

impl<C: Commits> Group<C> {
    /// Starts the task committing through `committer`, on `tracker` when
    /// shutdown must wait for it; `what` names the writes in errors and
    /// logs.
    pub fn start(
        committer: C,
        what: &'static str,
        bounds: Bounds,
        tracker: Option<&TaskTracker>,
    ) -> Self {
        let (queue, writes) = mpsc::channel(bounds.queue.max(1));
        let task = run(committer, writes, bounds, what);
        match tracker {
            Some(tracker) => drop(tracker.spawn(task)),
            None => drop(tokio::spawn(task)),
        }
        Group { queue, what }
    }

    /// Commits `write` with whatever else is waiting; its answer once the
    /// group is committed.
    pub async fn commit(&self, write: C::Write) -> Result<C::Landed, StorageError> {
        let stopped = || StorageError::Durability(format!("the {} writer stopped", self.what));
        queue_and_wait(&self.queue, write, stopped).await
    }
}

/// Queues `write` for the committer reading `queue` and waits for its
/// answer; `stopped` is the error once that committer is gone.
pub(super) async fn queue_and_wait<W, L>(
    queue: &mpsc::Sender<(W, oneshot::Sender<Result<L, StorageError>>)>,
    write: W,
    stopped: impl Fn() -> StorageError,
) -> Result<L, StorageError> {
    let (done, answer) = oneshot::channel();
    queue.send((write, done)).await.map_err(|_| stopped())?;
    answer.await.map_err(|_| stopped())?
}

async fn run<C: Commits>(
    committer: C,
    mut queue: mpsc::Receiver<Queued<C>>,
    bounds: Bounds,
    what: &'static str,
) {
    while let Some(first) = queue.recv().await {
        let group = gather(first, &mut queue, bounds, C::weight);
        let (writes, dones): (Vec<C::Write>, Vec<_>) = group.into_iter().unzip();
        match committer.commit(&writes).await {
            Ok(landed) => {
                for (done, landed) in dones.into_iter().zip(landed) {
                    let _ = done.send(Ok(landed));
                }
            }
            Err(error) if writes.len() > 1 => {
                warn!(%error, writes = writes.len(), "{what} group not committed; committing one by one");
                for (write, done) in writes.iter().zip(dones) {
                    let alone = committer.commit(std::slice::from_ref(write)).await;
                    let _ = done.send(alone.and_then(|landed| first_of(landed, what)));
                }
            }
            Err(error) => {
                if let Some(done) = dones.into_iter().next() {
                    let _ = done.send(Err(error));
                }
            }
        }
    }
}

/// A group: `first`, then whatever else waits in `queue` within `bounds`.
pub(super) fn gather<W, D>(
    first: (W, D),
    queue: &mut mpsc::Receiver<(W, D)>,
    bounds: Bounds,
    weight_of: fn(&W) -> usize,
) -> Vec<(W, D)> {
    let mut weight = weight_of(&first.0);
    let mut group = vec![first];
    while group.len() < bounds.writes && weight < bounds.weight {
        match queue.try_recv() {
            Ok(next) => {
                weight += weight_of(&next.0);
                group.push(next);
            }
            Err(_) => break,
        }
    }
    group
}

/// The one answer of a group of one.
fn first_of<T>(landed: Vec<T>, what: &str) -> Result<T, StorageError> {
    landed
        .into_iter()
        .next()
        .ok_or_else(|| StorageError::Corrupt(format!("a {what} commit answered nothing")))
}
