//! Rebuilding a document from what storage holds, through the sync core:
//! every stored part is checked as an editor's update is before yrs sees
//! it, and one that does not fit is left out with a warning.

use margin_sync_core::{LiveDocument, LoadFailed, Owner};
use tracing::warn;

use crate::storage::{RefusedUpdate, StoredState};

/// Why a stored document could not be rebuilt. Loading never falls back to
/// an empty document: that document would then overwrite stored state.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// yrs failed on a part the checks accepted.
    #[error(transparent)]
    Broken(#[from] LoadFailed),
    /// The snapshot breaks an invariant of the Yjs format. Without it
    /// nothing after it loads, so the document is not loaded at all
    /// (never served empty).
    #[error("its stored snapshot is refused: {0}")]
    SnapshotRefused(margin_sync_core::Refusal),
    /// The task rebuilding it stopped before it finished.
    #[error("rebuilding the document stopped: {0}")]
    Task(String),
}

/// Builds the document `state` describes and hands it to `then`, on a
/// blocking thread: a large document takes tens of milliseconds of CPU,
/// which would otherwise hold up every task sharing the async workers.
pub async fn rebuilt<T, F>(state: StoredState, then: F) -> Result<T, LoadError>
where
    F: FnOnce(LiveDocument, StoredState) -> T + Send + 'static,
    T: Send + 'static,
{
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        rebuild(&state).map(|(doc, _)| then(doc, state))
    })
    .await
    .map_err(|e| LoadError::Task(e.to_string()))?
}

/// Builds the document `state` describes; returns it and the log rows it
/// left out.
pub(super) fn rebuild(
    state: &StoredState,
) -> Result<(LiveDocument, Vec<RefusedUpdate>), LoadError> {
    let snapshot = state.snapshot.as_ref().map(|(_, data)| data.as_slice());
    let parts: Vec<&[u8]> = snapshot
        .into_iter()
        .chain(state.updates.iter().map(Vec::as_slice))
        .collect();
    let owners = state.clients.iter().map(|binding| {
        let owner = match &binding.account {
            Some(account) => Owner::Account(account.clone()),
            None => Owner::Server,
        };
        (binding.client, owner)
    });
    let (doc, skipped) = LiveDocument::load(parts.iter().copied(), owners)?;
    // Positions count the snapshot first when there is one.
    let (first, base) = match &state.snapshot {
        Some((revision, _)) => (1, *revision),
        None => (0, 0),
    };
    let mut refused = Vec::with_capacity(skipped.len());
    for part in skipped {
        if part.position < first {
            return Err(LoadError::SnapshotRefused(part.refusal));
        }
        let revision = base + (part.position - first) as i64 + 1;
        warn!(revision, refusal = %part.refusal, "a stored update was refused and left out of the document");
        refused.push(RefusedUpdate {
            revision,
            data: parts[part.position].to_vec(),
            reason: part.refusal.to_string(),
        });
    }
    Ok((doc, refused))
}
