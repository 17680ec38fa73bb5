//! What a document task is asked to do, and the replies it gives.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use margin_decisions::{BatchError, Edit, EditError, Outline};
use margin_protocol::Role;
use tokio::sync::oneshot;

use super::conn::{Conn, ConnId};
use super::decide::{Batch, Decided};
use crate::cards::{CardChange, ChangeRefused};
use crate::storage::{SessionWrite, StoredCard};
use crate::tools::Recorder;

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
        /// The session's side of the call, which records its result with
        /// its writes; `None` for a call over HTTP.
        recorder: Option<Recorder>,
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
    /// What commits with the edit: the call's result (SPEC W1).
    pub rider: Option<Rider>,
}

/// Where a batch's result goes.
pub type DecideReply = oneshot::Sender<Result<Decided, DecideRefused>>;

/// Where a card's change goes.
pub type ChangeReply = oneshot::Sender<Result<Option<StoredCard>, ChangeRefused>>;

/// Rows another owner commits in the same transaction as a document
/// change: a tool call's result, recorded with the call's own writes so a
/// call is never "landed but unrecorded" (SPEC W1).
pub trait Ride: Send {
    /// The rows, given the revision the change made and the outline at it;
    /// none when there is nothing to record.
    fn rows(&mut self, revision: i64, outline: &Arc<Outline>) -> Option<SessionWrite>;
    /// The transaction holding the rows committed.
    fn committed(&mut self);
}

/// A [`Ride`], shared so a command retried on a fresh task carries it.
#[derive(Clone)]
pub struct Rider(pub Arc<Mutex<dyn Ride>>);

impl std::fmt::Debug for Rider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rider")
    }
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
    /// slot is as small as an editor's frame, the command nearly all are
    /// (88 bytes a slot before, 2.8 KB a block; issue #16).
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
