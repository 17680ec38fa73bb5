//! Rebuilding a `yrs` document from what storage holds.

use yrs::updates::decoder::Decode;
use yrs::{Doc, Transact, Update};

use crate::storage::StoredState;

/// Why a stored document could not be rebuilt. Loading never falls back to
/// an empty document: that document would then overwrite stored state.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A stored update or snapshot does not decode.
    #[error("stored update at position {position} is corrupt: {source}")]
    Corrupt {
        /// 0 for the snapshot, then 1.. for log rows after it.
        position: usize,
        /// The decoder's error.
        source: yrs::encoding::read::Error,
    },
    /// A stored update decodes but does not apply.
    #[error("stored update at position {position} does not apply: {source}")]
    Inapplicable {
        /// As above.
        position: usize,
        /// The integration error.
        source: yrs::error::UpdateError,
    },
    /// The task rebuilding it stopped before it finished.
    #[error("rebuilding the document stopped: {0}")]
    Task(String),
}

/// Builds the document `state` describes and hands it to `then`, on a
/// blocking thread: a large document takes tens of milliseconds of CPU,
/// which would otherwise hold up every task sharing the async workers.
pub async fn rebuilt<T, F>(state: StoredState, then: F) -> Result<T, LoadError>
where
    F: FnOnce(Doc, StoredState) -> T + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(move || rebuild(&state).map(|doc| then(doc, state)))
        .await
        .map_err(|e| LoadError::Task(e.to_string()))?
}

/// Builds the document `state` describes.
pub(super) fn rebuild(state: &StoredState) -> Result<Doc, LoadError> {
    let doc = Doc::new();
    {
        let mut txn = doc.transact_mut();
        let snapshot = state.snapshot.as_ref().map(|(_, data)| data.as_slice());
        let parts = snapshot.into_iter().map(|s| (0, s)).chain(
            state
                .updates
                .iter()
                .enumerate()
                .map(|(i, u)| (i + 1, u.as_slice())),
        );
        for (position, bytes) in parts {
            let update = Update::decode_v1(bytes)
                .map_err(|source| LoadError::Corrupt { position, source })?;
            txn.apply_update(update)
                .map_err(|source| LoadError::Inapplicable { position, source })?;
        }
    }
    Ok(doc)
}
