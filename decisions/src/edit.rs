//! `edit_plan`: inserting, replacing and deleting blocks, addressed at the
//! current revision (SPEC S5). Applies to a `yrs` transaction; publishing
//! the change is the caller's.

use std::collections::HashMap;

use margin_protocol::RefusalCode;

use yrs::types::xml::{XmlElementPrelim, XmlTextPrelim};
use yrs::{Any, TransactionMut, Xml, XmlElementRef, XmlFragment, XmlFragmentRef, XmlOut};

use crate::block::BlockIdentity;
use crate::card::{check_text, Passage};
use crate::outline::Outline;

/// Longest text of one block written by an edit, in bytes.
pub const MAX_EDIT_TEXT_BYTES: usize = 10_000;

/// Most edits in one call.
pub const MAX_EDITS: usize = 64;

/// The kinds of block an edit may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// A paragraph.
    Paragraph,
    /// A heading of level 1–3.
    Heading(u8),
}

impl BlockKind {
    /// Parses a kind and optional level.
    pub fn parse(kind: &str, level: Option<u8>) -> Result<BlockKind, String> {
        match (kind, level) {
            ("paragraph", None) => Ok(BlockKind::Paragraph),
            ("heading", Some(level @ 1..=3)) => Ok(BlockKind::Heading(level)),
            ("heading", _) => Err("a heading needs a level from 1 to 3".into()),
            ("paragraph", Some(_)) => Err("a paragraph has no level".into()),
            (other, _) => Err(format!(
                "edits write paragraphs and headings, not {other:?}"
            )),
        }
    }
}

/// One change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edit {
    /// A new block after `after` (at the start when `None`).
    Insert {
        /// The block it follows.
        after: Option<Passage>,
        /// What kind.
        kind: BlockKind,
        /// Its text.
        text: String,
    },
    /// New text for a block, which keeps its identity.
    Replace {
        /// The block.
        at: Passage,
        /// Its new text.
        text: String,
    },
    /// Removes a block.
    Delete {
        /// The block.
        at: Passage,
    },
}

/// Why an edit batch changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// An address's index and digest disagree in the current outline.
    #[error("edit {edit}: the address at index {index} does not match the current outline; read the document again")]
    AddressMismatch {
        /// Position of the edit in the batch, from 0.
        edit: usize,
        /// The index given.
        index: usize,
    },
    /// The input breaks a rule.
    #[error("edit {edit}: {message}")]
    Invalid {
        /// Position of the edit in the batch.
        edit: usize,
        /// The rule.
        message: String,
    },
}

impl EditError {
    /// The stable code.
    pub fn code(&self) -> RefusalCode {
        match self {
            EditError::AddressMismatch { .. } => RefusalCode::AddressMismatch,
            EditError::Invalid { .. } => RefusalCode::InvalidInput,
        }
    }
}

/// Applies `edits`, addressed in `outline` (the document as it stands in
/// `txn`), all or nothing: every address is checked before anything changes.
pub fn apply_edits(
    txn: &mut TransactionMut,
    fragment: &XmlFragmentRef,
    outline: &Outline,
    edits: &[Edit],
) -> Result<(), EditError> {
    if edits.is_empty() || edits.len() > MAX_EDITS {
        return Err(EditError::Invalid {
            edit: 0,
            message: format!("an edit_plan call has 1 to {MAX_EDITS} edits"),
        });
    }
    let mut targets = Vec::with_capacity(edits.len());
    for (i, edit) in edits.iter().enumerate() {
        let (address, text) = match edit {
            Edit::Insert { after, text, .. } => (*after, Some(text)),
            Edit::Replace { at, text } => (Some(*at), Some(text)),
            Edit::Delete { at } => (Some(*at), None),
        };
        if let Some(text) = text {
            check_text("text", text, MAX_EDIT_TEXT_BYTES, false)
                .map_err(|message| EditError::Invalid { edit: i, message })?;
        }
        let target = match address {
            None => None,
            Some(passage) => Some(resolve(outline, i, &passage)?),
        };
        if let Some(target) = target {
            let earlier = |wanted: fn(&Edit) -> bool| {
                edits[..i]
                    .iter()
                    .zip(&targets)
                    .any(|(e, t)| wanted(e) && *t == Some(target))
            };
            let message = match edit {
                Edit::Replace { .. } | Edit::Delete { .. }
                    if earlier(|e| matches!(e, Edit::Replace { .. } | Edit::Delete { .. })) =>
                {
                    Some("the block is already replaced or deleted by an earlier edit")
                }
                Edit::Insert { .. } if earlier(|e| matches!(e, Edit::Delete { .. })) => {
                    Some("the block to insert after is deleted by an earlier edit")
                }
                _ => None,
            };
            if let Some(message) = message {
                return Err(EditError::Invalid {
                    edit: i,
                    message: message.into(),
                });
            }
        }
        targets.push(target);
    }
    // Later inserts after the same block follow the earlier ones, in order.
    let mut last_inserted: HashMap<Option<BlockIdentity>, BlockIdentity> = HashMap::new();
    for (edit, target) in edits.iter().zip(targets) {
        match edit {
            Edit::Insert { kind, text, .. } => {
                let anchor = last_inserted.get(&target).copied().or(target);
                let at = match anchor {
                    None => 0,
                    Some(identity) => position(txn, fragment, identity).map_or(0, |i| i + 1),
                };
                let element = insert_block(txn, fragment, at, *kind, text);
                if let Some(identity) = identity_of(&element) {
                    last_inserted.insert(target, identity);
                }
            }
            Edit::Replace { text, .. } => {
                if let Some(element) = target.and_then(|t| element(txn, fragment, t)) {
                    let len = element.len(txn);
                    element.remove_range(txn, 0, len);
                    element.insert(txn, 0, XmlTextPrelim::new(text.as_str()));
                }
            }
            Edit::Delete { .. } => {
                if let Some(at) = target.and_then(|t| position(txn, fragment, t)) {
                    fragment.remove_range(txn, at as u32, 1);
                }
            }
        }
    }
    Ok(())
}

fn resolve(outline: &Outline, edit: usize, passage: &Passage) -> Result<BlockIdentity, EditError> {
    match outline.get(passage.index) {
        Some(block) if block.digest == passage.digest => Ok(block.identity),
        Some(_) => Err(EditError::AddressMismatch {
            edit,
            index: passage.index,
        }),
        None => Err(EditError::Invalid {
            edit,
            message: format!(
                "no block at index {} ({} blocks)",
                passage.index,
                outline.len()
            ),
        }),
    }
}

fn insert_block(
    txn: &mut TransactionMut,
    fragment: &XmlFragmentRef,
    at: usize,
    kind: BlockKind,
    text: &str,
) -> XmlElementRef {
    let element = match kind {
        BlockKind::Paragraph => {
            fragment.insert(txn, at as u32, XmlElementPrelim::empty("paragraph"))
        }
        BlockKind::Heading(level) => {
            let element = fragment.insert(txn, at as u32, XmlElementPrelim::empty("heading"));
            element.insert_attribute(txn, "level", Any::from(i64::from(level)));
            element
        }
    };
    element.insert(txn, 0, XmlTextPrelim::new(text));
    element
}

fn identity_of(element: &XmlElementRef) -> Option<BlockIdentity> {
    match yrs::branch::Branch::id(element.as_ref()) {
        yrs::BranchID::Nested(id) => Some(BlockIdentity::from(id)),
        yrs::BranchID::Root(_) => None,
    }
}

fn position(
    txn: &TransactionMut,
    fragment: &XmlFragmentRef,
    identity: BlockIdentity,
) -> Option<usize> {
    fragment.children(txn).position(|node| match node {
        XmlOut::Element(element) => identity_of(&element) == Some(identity),
        _ => false,
    })
}

fn element(
    txn: &TransactionMut,
    fragment: &XmlFragmentRef,
    identity: BlockIdentity,
) -> Option<XmlElementRef> {
    fragment.children(txn).find_map(|node| match node {
        XmlOut::Element(element) if identity_of(&element) == Some(identity) => Some(element),
        _ => None,
    })
}
