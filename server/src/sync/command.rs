//! What a document task is asked to do, and the replies it gives.

use std::sync::Arc;

use axum::body::Bytes;
use margin_decisions::{BatchError, Edit, EditError, Outline};
use margin_protocol::tools::ToolOutput;
use margin_protocol::Role;
use tokio::sync::oneshot;

use super::cards::{CardChange, ChangeRefused};
use super::conn::{Conn, ConnId};
use super::decide::{Batch, Decided};
use crate::storage::{SessionWrite, StoredCard};

/// What a document task is asked to do.
#[derive(Debug)]
pub enum Command {
    /// A connection joins; the reply says whether it is in.
    Join {
        /// The connection (boxed, as every rare command's parts are, so
        /// the commands nearly all are, frames, take small slots).
        conn: Box<Conn>,
        /// Ok, or why not.
        reply: oneshot::Sender<Result<(), JoinRefused>>,
    },
    /// A binary frame from a connection.
    Frame {
        /// Whose.
        conn: ConnId,
        /// The y-websocket message(s).
        data: Bytes,
    },
    /// A connection ended.
    Leave {
        /// Whose.
        conn: ConnId,
    },
    /// The current outline and the revision it is of.
    Outline {
        /// Where to send it.
        reply: oneshot::Sender<(i64, Arc<Outline>)>,
    },
    /// The Planner's `edit_plan`, strict at the current revision.
    Edit {
        /// The edits and what comes with them.
        request: Box<EditRequest>,
        /// The revision the edit made and its outline, once committed.
        reply: EditReply,
    },
    /// A batch of decision cards (`open_decisions`, `open_decision`,
    /// `ask`): judged against the document and its cards, and what it
    /// creates stored with its live mirror — and the call's result — in
    /// one transaction (SPEC D1–D10, W1).
    Decide {
        /// The batch.
        batch: Box<Batch>,
        /// Where a Planner session's call has its result recorded with
        /// its writes; `None` for a call over HTTP.
        record: Option<RecordResult>,
        /// What the batch came to, once committed.
        reply: DecideReply,
    },
    /// A change to one card (a person's action, or a withdrawn question):
    /// stored with its live mirror in one transaction.
    Change {
        /// The card's id.
        card: String,
        /// What happens to it.
        change: Box<CardChange>,
        /// The card as changed (`None`: nothing to change), once
        /// committed.
        reply: ChangeReply,
    },
    /// The document was archived or unarchived (SPEC P3): while archived,
    /// every connection's edits are refused the way a viewer's are, and so
    /// are the Planner's `edit_plan`s. The server's own mirror of cards
    /// still goes through (a withdrawn question must show as cancelled).
    Archive {
        /// Archived now, or not.
        archived: bool,
        /// Answered once it is in force.
        reply: oneshot::Sender<()>,
    },
    /// The document was deleted: close every connection with
    /// [`margin_protocol::sync::close::DELETED`] and unload, writing nothing
    /// more.
    Delete {
        /// Answered once every connection was told.
        reply: oneshot::Sender<()>,
    },
    /// The owner changed `account`'s access to the document: its
    /// connections close at once — for good when it is no longer a member
    /// ([`margin_protocol::sync::close::REMOVED`]), to reconnect with its
    /// new role otherwise ([`margin_protocol::sync::close::ACCESS_CHANGED`]).
    /// Connections already joined with that role stay.
    Access {
        /// Whose access changed.
        account: String,
        /// The role it has now; `None` once removed.
        role: Option<Role>,
        /// Answered once its connections were told.
        reply: oneshot::Sender<()>,
    },
}

/// The Planner's `edit_plan`, as [`Command::Edit`] carries it.
#[derive(Debug)]
pub struct EditRequest {
    /// The revision the edits are addressed at.
    pub revision: i64,
    /// The edits.
    pub edits: Vec<Edit>,
    /// Who edits, recorded as the document's `edited_by`: the calling
    /// account, or `planner` for a Planner session's call.
    pub by: Arc<str>,
    /// Where a Planner session's call has its result recorded with the
    /// edit (SPEC W1); `None` for a call over HTTP.
    pub record: Option<RecordResult>,
}

/// Where a batch's result goes.
pub type DecideReply = oneshot::Sender<Result<Decided, DecideRefused>>;

/// Where a card's change goes.
pub type ChangeReply = oneshot::Sender<Result<Option<StoredCard>, ChangeRefused>>;

/// How a Planner session's tool call that writes has its result recorded
/// in the transaction of its own writes, so a call is never "landed but
/// unrecorded" (SPEC W1). The session's driver, which runs the call and
/// waits on it, hands the task this recorder: given the call's output, it
/// steps a copy of the session (a pure step, no I/O) and returns the write
/// that records it, which the task commits with its batch. The task runs
/// it itself once it knows the revision: asking the driver instead was a
/// round trip between two tasks on every writing call. `None`: the call's
/// writes commit alone and the driver records the result afterwards.
///
/// Callable again: a command retried on a fresh task (the first one
/// unloaded) records again, from the same session, and the driver keeps
/// the step of the write that committed.
#[derive(Clone)]
pub struct RecordResult(pub Arc<dyn Fn(ToolOutput) -> Option<ResultWrite> + Send + Sync>);

impl std::fmt::Debug for RecordResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordResult")
    }
}

/// The session write recording a call's output, and who hears that it
/// committed with the call's writes.
#[derive(Debug)]
pub struct ResultWrite {
    /// The write.
    pub write: SessionWrite,
    /// Fired once the transaction holding it committed; dropped when it
    /// did not, so the driver keeps only a committed step.
    pub committed: oneshot::Sender<()>,
}

/// Why a batch created nothing.
#[derive(Clone, Debug, thiserror::Error)]
pub enum DecideRefused {
    /// The batch's rules refused it (SPEC D1–D10).
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// The document is archived.
    #[error("the document is archived; nothing was changed (its owner can unarchive it)")]
    Archived,
    /// The document could not be loaded or its task stopped.
    #[error("the document is unavailable: {0}")]
    Unavailable(String),
}

/// Where an `edit_plan` result goes.
pub type EditReply = oneshot::Sender<Result<(i64, Arc<Outline>), EditRefused>>;

/// Why an `edit_plan` changed nothing.
#[derive(Clone, Debug, thiserror::Error)]
pub enum EditRefused {
    /// The edits were addressed at an older revision (SPEC D9's rule for
    /// writes: edits are strict).
    #[error("document changed, read it again: revision {revision} is not the current revision {current}; nothing was changed")]
    Stale {
        /// The revision given.
        revision: i64,
        /// The document's revision.
        current: i64,
    },
    /// An address or edit is wrong.
    #[error(transparent)]
    Edit(#[from] EditError),
    /// The document is archived: nobody changes it until its owner
    /// unarchives it.
    #[error("the document is archived; nothing was changed (its owner can unarchive it)")]
    Archived,
    /// The document could not be loaded or its task stopped.
    #[error("the document is unavailable: {0}")]
    Unavailable(String),
}

/// Why a join did not happen.
#[derive(Clone, Debug, thiserror::Error)]
pub enum JoinRefused {
    /// The task is unloading; join again and a fresh task will load it.
    #[error("document is unloading")]
    Unloading,
    /// The document could not be loaded; nothing was created in its place.
    #[error("document could not be loaded: {0}")]
    LoadFailed(String),
    /// The document was deleted.
    #[error("the document was deleted")]
    Deleted,
    /// Another node of the cluster owns the document (SPEC C1), or this
    /// node is not taking documents now; the connection belongs there.
    #[error("{0}")]
    Elsewhere(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document's mailbox holds its commands in blocks of 32 slots, each
    /// the size of the largest command, two blocks per busy document: the
    /// rare commands (joins, tool calls) carry their parts boxed, so every
    /// slot is as small as an editor's frame, the command nearly all are.
    #[test]
    fn a_command_takes_no_more_room_than_a_frame() {
        let frame = std::mem::size_of::<(ConnId, Bytes)>() + 8;
        assert!(
            std::mem::size_of::<Command>() <= frame,
            "a command is {} bytes",
            std::mem::size_of::<Command>()
        );
    }
}
