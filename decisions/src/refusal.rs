//! Why an `open_decisions` batch was refused: a stable code the Planner can
//! act on and a message naming the key and the one cause that happened.

use std::fmt;

use margin_protocol::RefusalCode;

use crate::card::Key;

/// The cause of a refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The server no longer holds the read of that revision (evicted from
    /// the cache, or lost in a restart).
    ReadEvicted {
        /// The batch's revision.
        revision: i64,
    },
    /// The address's index and digest name different blocks.
    AddressMismatch {
        /// The index given.
        index: usize,
    },
    /// The paragraph appeared more than once when it was read.
    RepeatedWhenRead {
        /// The index given.
        index: usize,
    },
    /// The block read was rewritten since.
    BlockRewritten {
        /// The index given.
        index: usize,
    },
    /// The block read was removed or moved (deleted and re-inserted) since.
    BlockRemovedOrMoved {
        /// The index given.
        index: usize,
    },
    /// An identical paragraph now stands beside it.
    TwinNow {
        /// The index given.
        index: usize,
    },
    /// The key already holds a different decision; what differs.
    DifferentDecision {
        /// `question`, `description`, `response kind`, `choice list` or
        /// `passage`.
        differs: &'static str,
    },
    /// `open_decision` and `ask` need the current revision (SPEC D9).
    StaleRevision {
        /// The revision given.
        revision: i64,
        /// The document's revision.
        current: i64,
    },
    /// The Planner may not open decisions on this document (SPEC D10).
    NoAccess,
}

/// A refused batch: nothing was created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The card it concerns, when it concerns one.
    pub key: Option<Key>,
    /// What happened.
    pub cause: Cause,
}

impl Cause {
    /// The stable machine-readable code.
    pub fn code(&self) -> RefusalCode {
        match self {
            Cause::ReadEvicted { .. } => RefusalCode::ReadEvicted,
            Cause::AddressMismatch { .. } => RefusalCode::AddressMismatch,
            Cause::RepeatedWhenRead { .. } => RefusalCode::RepeatedWhenRead,
            Cause::BlockRewritten { .. } => RefusalCode::BlockRewritten,
            Cause::BlockRemovedOrMoved { .. } => RefusalCode::BlockRemovedOrMoved,
            Cause::TwinNow { .. } => RefusalCode::TwinNow,
            Cause::DifferentDecision { .. } => RefusalCode::DifferentDecision,
            Cause::StaleRevision { .. } => RefusalCode::StaleRevision,
            Cause::NoAccess => RefusalCode::NoAccess,
        }
    }

    /// Whether reading the document again is the remedy.
    pub fn read_again(&self) -> bool {
        !matches!(self, Cause::DifferentDecision { .. } | Cause::NoAccess)
    }

    fn describe(&self) -> String {
        match self {
            Cause::ReadEvicted { revision } => {
                format!("the server no longer has the read of revision {revision}")
            }
            Cause::AddressMismatch { index } => {
                format!(
                    "the address at index {index} does not match the block read at that position"
                )
            }
            Cause::RepeatedWhenRead { index } => {
                format!("the paragraph at index {index} appeared more than once when it was read")
            }
            Cause::BlockRewritten { index } => {
                format!("the block read at index {index} was rewritten since")
            }
            Cause::BlockRemovedOrMoved { index } => {
                format!("the block read at index {index} was removed or moved since")
            }
            Cause::TwinNow { index } => {
                format!("an identical paragraph now stands beside the one read at index {index}")
            }
            Cause::DifferentDecision { differs } => {
                format!("it already holds a different decision (another {differs}); use a new key")
            }
            Cause::StaleRevision { revision, current } => {
                format!("revision {revision} is not the current revision {current}")
            }
            Cause::NoAccess => "the Planner has no access to this document".to_owned(),
        }
    }
}

impl Refusal {
    /// A refusal of card `key`.
    pub fn of(key: &Key, cause: Cause) -> Self {
        Refusal {
            key: Some(key.clone()),
            cause,
        }
    }

    /// The stable code.
    pub fn code(&self) -> RefusalCode {
        self.cause.code()
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cause.read_again() {
            f.write_str("document changed, read it again: ")?;
        }
        match &self.key {
            Some(key) => write!(f, "card {:?}: {}", key.as_str(), self.cause.describe()),
            None => f.write_str(&self.cause.describe()),
        }?;
        f.write_str("; nothing was created")
    }
}

impl std::error::Error for Refusal {}
