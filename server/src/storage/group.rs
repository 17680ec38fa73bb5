//! Group commit's queue: writers queue their writes and wait for an
//! answer; the committer takes every write waiting when it frees up,
//! within bounds, and commits them in one transaction and one fsync.

use tokio::sync::{mpsc, oneshot};

use super::StorageError;

/// Bounds of one group and of the queue before it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bounds {
    /// Writes waiting before writers wait to queue.
    pub queue: usize,
    /// Writes in one group at most.
    pub writes: usize,
    /// Total weight of one group at most (a group always holds at least
    /// one write, however heavy).
    pub weight: usize,
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
