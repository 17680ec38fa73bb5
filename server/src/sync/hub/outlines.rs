//! The Planner's reads of a document (SPEC S4, S5): its outline at the
//! current revision, from the task or from storage, the output last
//! written for it, and the reads remembered for batches to be judged by.

use std::sync::Arc;

use margin_decisions::wire::{ReadBuffers, WrittenRead};
use margin_decisions::Outline;
use margin_protocol::decisions::EncodedRead;
use tokio::sync::oneshot;

use super::Hub;
use crate::storage::StorageError;
use crate::sync::command::Command;
use crate::sync::load::{rebuilt, LoadError};

impl Hub {
    /// The outline of document `id` at `revision` (the current one when
    /// `None`), from its task when loaded, else from storage.
    pub async fn outline(
        &self,
        id: &str,
        revision: Option<i64>,
    ) -> Result<(i64, Arc<Outline>), OutlineError> {
        let loaded = self.loaded(id);
        if let (Some(mailbox), None) = (loaded, revision) {
            let (reply, answer) = oneshot::channel();
            if mailbox.send(Command::Outline { reply }).await.is_ok() {
                if let Ok(answer) = answer.await {
                    return Ok(answer);
                }
            }
        }
        let state = self.inner.store.load_state(id, revision).await?;
        let outline = rebuilt(state, |doc, state| {
            (state.revision, Arc::new(Outline::of_doc(doc.doc())))
        })
        .await?;
        Ok(outline)
    }

    /// The `read_document` output of `outline` at `revision` of `id`, if
    /// one was written and is still kept.
    pub fn encoded_read(
        &self,
        id: &str,
        revision: i64,
        outline: &Arc<Outline>,
    ) -> Option<EncodedRead> {
        self.inner.encoded_reads.get(id, revision, outline)
    }

    /// The `read_document` output of `id` written last, whatever its
    /// revision, if still kept: the next read is written from it.
    pub fn last_encoded_read(&self, id: &str) -> Option<WrittenRead> {
        self.inner.encoded_reads.last(id)
    }

    /// The buffers to write `id`'s next `read_document` output into: the
    /// read before the last's, when nobody holds it any more.
    pub fn read_buffers(&self, id: &str) -> ReadBuffers {
        self.inner.encoded_reads.buffers(id)
    }

    /// Keeps `written`, the `read_document` output of `outline` at
    /// `revision` of `id`, for the next reader of that revision and the
    /// next read written.
    pub fn keep_encoded_read(
        &self,
        id: &str,
        revision: i64,
        outline: &Arc<Outline>,
        written: WrittenRead,
    ) {
        self.inner
            .encoded_reads
            .keep(id, revision, outline, written);
    }

    /// Remembers that the Planner read `outline` at `revision` of `id`.
    pub fn remember_read(&self, id: &str, revision: i64, outline: Arc<Outline>) {
        self.inner.reads.remember(id, revision, outline);
    }
}

/// Why an outline could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum OutlineError {
    /// Storage failed or the revision is unknown or compacted.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The stored state does not rebuild.
    #[error(transparent)]
    Load(#[from] LoadError),
}
