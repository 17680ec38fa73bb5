//! The outline of a document: its blocks in order (SPEC S4).

use std::collections::HashMap;

use yrs::branch::Branch;
use yrs::types::xml::{XmlElementRef, XmlOut};
use yrs::{
    BranchID, Doc, GetString, ReadTxn, TextRef, Transact, XmlFragment, XmlFragmentRef, XmlTextRef,
};

use crate::block::{normalise, Block, BlockIdentity, Digest};

/// The name of the `XmlFragment` that holds a document's text, the one a
/// Tiptap / y-prosemirror editor binds to (SPEC S1).
pub const FRAGMENT_NAME: &str = "prosemirror";

/// The blocks of a document, in order, indexed by identity and digest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outline {
    /// Blocks in document order; `blocks[i].index == i`.
    blocks: Vec<Block>,
    /// Position of each block by identity.
    by_identity: HashMap<BlockIdentity, usize>,
    /// How many blocks carry each digest.
    digest_counts: HashMap<Digest, usize>,
}

impl Outline {
    /// Outline of `doc` as it stands.
    pub fn of_doc(doc: &Doc) -> Self {
        let txn = doc.transact();
        match txn.get_xml_fragment(FRAGMENT_NAME) {
            Some(fragment) => Self::read(&txn, &fragment),
            // A document nobody has typed in yet has no fragment at all.
            None => Outline::default(),
        }
    }

    /// Outline of `fragment` as seen by `txn`.
    pub fn read<T: ReadTxn>(txn: &T, fragment: &XmlFragmentRef) -> Self {
        let mut blocks = Vec::with_capacity(fragment.len(txn) as usize);
        for node in fragment.children(txn) {
            let index = blocks.len();
            let block = match node {
                XmlOut::Element(element) => element_block(txn, index, &element),
                // Bare text at the top level is not something ProseMirror
                // produces, but another client could write it; it is still a
                // block people can see, so it gets an entry of kind "text".
                XmlOut::Text(text) => identity_of(text.as_ref())
                    .map(|identity| block(index, "text", &plain_text(txn, &text), identity)),
                XmlOut::Fragment(_) => continue,
            };
            if let Some(block) = block {
                blocks.push(block);
            }
        }
        Outline::from_blocks(blocks)
    }

    /// An outline of `blocks`, which must be in order with `index` set.
    pub fn from_blocks(blocks: Vec<Block>) -> Self {
        let mut by_identity = HashMap::with_capacity(blocks.len());
        let mut digest_counts: HashMap<Digest, usize> = HashMap::with_capacity(blocks.len());
        for block in &blocks {
            by_identity.insert(block.identity, block.index);
            *digest_counts.entry(block.digest).or_default() += 1;
        }
        Outline {
            blocks,
            by_identity,
            digest_counts,
        }
    }

    /// Blocks in document order.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// The block at `index`.
    pub fn get(&self, index: usize) -> Option<&Block> {
        self.blocks.get(index)
    }

    /// How many blocks there are.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether the document has no blocks.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The block whose identity is `identity`, wherever it now stands.
    pub fn by_identity(&self, identity: BlockIdentity) -> Option<&Block> {
        self.by_identity
            .get(&identity)
            .and_then(|&i| self.blocks.get(i))
    }

    /// How many blocks carry `digest` (2 or more: twins).
    pub fn count_digest(&self, digest: &Digest) -> usize {
        self.digest_counts.get(digest).copied().unwrap_or(0)
    }
}

fn element_block<T: ReadTxn>(txn: &T, index: usize, element: &XmlElementRef) -> Option<Block> {
    let identity = identity_of(element.as_ref())?;
    let mut raw = String::new();
    collect_text(txn, element, &mut raw);
    Some(block(index, element.tag(), &raw, identity))
}

/// The item id of a nested branch; root branches have none.
fn identity_of(branch: &Branch) -> Option<BlockIdentity> {
    match branch.id() {
        BranchID::Nested(id) => Some(BlockIdentity::from(id)),
        BranchID::Root(_) => None,
    }
}

/// Text without formatting marks (bold, links), which do not change words.
fn plain_text<T: ReadTxn>(txn: &T, text: &XmlTextRef) -> String {
    let text: &TextRef = text.as_ref();
    text.get_string(txn)
}

fn block(index: usize, kind: &str, raw_text: &str, identity: BlockIdentity) -> Block {
    let text = normalise(raw_text);
    Block {
        index,
        digest: Digest::of(kind, &text),
        kind: kind.to_owned(),
        text,
        identity,
    }
}

/// Appends the plain text under `element`. Nested elements (list items,
/// hard breaks) are separated by a space so their words never run together.
fn collect_text<T: ReadTxn>(txn: &T, element: &XmlElementRef, out: &mut String) {
    for child in element.children(txn) {
        match child {
            XmlOut::Text(text) => out.push_str(&plain_text(txn, &text)),
            XmlOut::Element(nested) => {
                out.push(' ');
                collect_text(txn, &nested, out);
                out.push(' ');
            }
            XmlOut::Fragment(fragment) => out.push_str(&fragment.get_string(txn)),
        }
    }
}
