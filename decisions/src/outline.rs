//! The outline of a document: its blocks in order (SPEC S4).

use std::collections::HashMap;
use std::sync::Arc;

use yrs::branch::{Branch, BranchPtr};
use yrs::types::xml::{XmlElementRef, XmlOut};
use yrs::{
    BranchID, Doc, GetString, Nested, ReadTxn, TextRef, Transact, Xml, XmlFragment, XmlFragmentRef,
    XmlTextRef,
};

use crate::block::{normalise_owned, push_normalised, Block, BlockIdentity, Digest};

mod shared;

pub use shared::Blocks;
use shared::{BlockRuns, DigestCounts};

/// The name of the `XmlFragment` that holds a document's text, the one a
/// Tiptap / y-prosemirror editor binds to (SPEC S1).
pub const FRAGMENT_NAME: &str = "prosemirror";

/// The outline's indexes hash with `foldhash`, seeded at random per
/// process: building them with the standard SipHash took a noticeable
/// share of a 10,000-block outline's time. The seed keeps keys a client
/// chooses (block identities carry its client id) from being aimed at one
/// bucket.
type Index<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The blocks of a document, in order, indexed by identity and digest.
///
/// Cheap to copy, and a copy changed in one block copies little (see
/// [`shared`]): a live outline changes while remembered reads hold it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outline {
    /// Blocks in document order; the block at `i` has `index == i`.
    blocks: BlockRuns,
    /// Position of each block by identity. Changes only when blocks are
    /// added or removed, which moves the positions after them anyway.
    by_identity: Arc<Index<BlockIdentity, usize>>,
    /// How many blocks carry each digest.
    digest_counts: DigestCounts,
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
        let mut scratch = String::new();
        for node in fragment.children(txn) {
            if let Some(block) = node_block(txn, blocks.len(), &node, &mut scratch) {
                blocks.push(block);
            }
        }
        Outline::from_blocks(blocks)
    }

    /// An outline of `blocks`, which must be in order with `index` set.
    pub fn from_blocks(blocks: Vec<Block>) -> Self {
        let mut by_identity = Index::with_capacity_and_hasher(blocks.len(), Default::default());
        for block in &blocks {
            by_identity.insert(block.identity, block.index);
        }
        let digest_counts = DigestCounts::of(blocks.iter().map(|block| &block.digest));
        Outline {
            blocks: BlockRuns::from_vec(blocks),
            by_identity: Arc::new(by_identity),
            digest_counts,
        }
    }

    /// Blocks in document order.
    pub fn blocks(&self) -> Blocks<'_> {
        self.blocks.iter()
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
        self.blocks.len() == 0
    }

    /// The block whose identity is `identity`, wherever it now stands.
    pub fn by_identity(&self, identity: BlockIdentity) -> Option<&Block> {
        self.by_identity
            .get(&identity)
            .and_then(|&i| self.blocks.get(i))
    }

    /// How many blocks carry `digest` (2 or more: twins).
    pub fn count_digest(&self, digest: &Digest) -> usize {
        self.digest_counts.count(digest)
    }

    /// Brings the order of blocks in line with the children of `fragment`
    /// after blocks were added or removed, reading only the blocks it did not
    /// hold. Blocks it keeps are not re-read, so a block whose words also
    /// changed must be re-read afterwards ([`Outline::reread`]).
    pub(crate) fn resync<T: ReadTxn>(&mut self, txn: &T, fragment: &XmlFragmentRef) {
        let children: Vec<(BlockIdentity, XmlOut)> = fragment
            .children(txn)
            .filter(|node| !matches!(node, XmlOut::Fragment(_)))
            .filter_map(|node| Some((identity_of(node.as_ref())?, node)))
            .collect();
        let old_len = self.blocks.len();
        let shortest = old_len.min(children.len());
        let same = |at: usize, child: &(BlockIdentity, XmlOut)| {
            self.blocks
                .get(at)
                .is_some_and(|block| block.identity == child.0)
        };
        let prefix = (0..shortest)
            .take_while(|&at| same(at, &children[at]))
            .count();
        let suffix = (0..shortest - prefix)
            .take_while(|&back| same(old_len - 1 - back, &children[children.len() - 1 - back]))
            .count();
        // The blocks between the common ends are taken out, and those still
        // in the document put back where they now stand.
        let (old_end, new_end) = (old_len - suffix, children.len() - suffix);
        let by_identity = Arc::make_mut(&mut self.by_identity);
        let mut kept: HashMap<BlockIdentity, Block> = HashMap::new();
        for block in (prefix..old_end).filter_map(|at| self.blocks.get(at)) {
            by_identity.remove(&block.identity);
            self.digest_counts.forget(&block.digest);
            kept.insert(block.identity, block.clone());
        }
        let mut scratch = String::new();
        let middle: Vec<Block> = children[prefix..new_end]
            .iter()
            .filter_map(|(identity, node)| match kept.remove(identity) {
                Some(block) => Some(block),
                None => node_block(txn, 0, node, &mut scratch),
            })
            .collect();
        let inserted = middle.len();
        for block in &middle {
            self.digest_counts.add(block.digest);
        }
        // Numbers the middle and the blocks after it by their new places.
        self.blocks.splice(prefix..old_end, middle);
        // The common tail moved by the same amount: one pass over the map's
        // values, which is much cheaper than re-hashing each identity.
        if inserted != old_end - prefix {
            let moved_by = |at: usize| at + prefix + inserted - old_end;
            for at in by_identity.values_mut() {
                if *at >= old_end {
                    *at = moved_by(*at);
                }
            }
        }
        for block in (prefix..prefix + inserted).filter_map(|at| self.blocks.get(at)) {
            by_identity.insert(block.identity, block.index);
        }
    }

    /// Reads again the block whose identity is `identity`, if the outline
    /// holds it. Returns `false` when the outline holds it but the document
    /// no longer has it as a block (the order is then out of date).
    pub(crate) fn reread<T: ReadTxn>(&mut self, txn: &T, identity: BlockIdentity) -> bool {
        let Some(&index) = self.by_identity.get(&identity) else {
            return true;
        };
        let id = yrs::ID::new(yrs::block::ClientID::new(identity.client), identity.clock);
        let Some(node) = Nested::<XmlElementRef>::new(id).get(txn).and_then(|node| {
            XmlOut::try_from(BranchPtr::from(AsRef::<Branch>::as_ref(&node))).ok()
        }) else {
            return false;
        };
        let Some(block) = node_block(txn, index, &node, &mut String::new()) else {
            return false;
        };
        if let Some(old) = self.blocks.get(index) {
            if old.digest != block.digest {
                self.digest_counts.forget(&old.digest);
                self.digest_counts.add(block.digest);
            }
        }
        self.blocks.set(index, block);
        true
    }
}

/// The block a top-level node of the fragment stands for, if it is one.
/// `scratch` is a buffer reused from block to block for the raw text.
pub(crate) fn node_block<T: ReadTxn>(
    txn: &T,
    index: usize,
    node: &XmlOut,
    scratch: &mut String,
) -> Option<Block> {
    let (kind, identity, text) = match node {
        XmlOut::Element(element) => {
            let identity = identity_of(element.as_ref())?;
            // The first child and whether it has a sibling, read along the
            // element's item list: `children` would set up an indexed
            // iterator for every element, one of the larger costs in a
            // profile of the full outline. Where the two walks differ (a
            // non-XML item among the children), `collect_text` reads the
            // same text.
            let text = match element.first_child() {
                // The common shape, a paragraph or heading holding one text:
                // its string is the block's text once normalised.
                Some(XmlOut::Text(only)) if only.siblings(txn).next().is_none() => {
                    normalise_owned(plain_text(txn, &only))
                }
                _ => {
                    scratch.clear();
                    collect_text(txn, element, scratch);
                    let mut text = String::with_capacity(scratch.len());
                    push_normalised(scratch, &mut text);
                    text
                }
            };
            (element.tag().clone(), identity, text)
        }
        // Bare text at the top level is not something ProseMirror produces,
        // but another client could write it; it is still a block people can
        // see, so it gets an entry of kind "text".
        XmlOut::Text(text) => {
            let identity = identity_of(text.as_ref())?;
            (
                Arc::from("text"),
                identity,
                normalise_owned(plain_text(txn, text)),
            )
        }
        XmlOut::Fragment(_) => return None,
    };
    Some(Block {
        index,
        digest: Digest::of(&kind, &text),
        kind,
        text: Arc::from(text),
        identity,
    })
}

/// The item id of a nested branch; root branches have none.
pub(crate) fn identity_of(branch: &Branch) -> Option<BlockIdentity> {
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
