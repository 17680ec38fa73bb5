//! An outline kept current as its document changes (SPEC S4), without
//! reading the whole document after every edit.
//!
//! [`LiveOutline`] owns one [`Outline`] of one document and a deep observer
//! on the document's `prosemirror` fragment. The observer only notes, per
//! transaction, *which* top-level blocks changed (by [`BlockIdentity`]) and
//! whether blocks were added or removed; [`LiveOutline::refresh`] then reads
//! just those blocks again — their text, normalised, and digest — and keeps
//! every other block, its digest included, as it was. When blocks were added
//! or removed it walks the fragment's children once (identities only, no
//! text) to put the blocks back in order, reading only the new ones.
//!
//! The result is always equal to [`Outline::of_doc`] of the document as it
//! stands; anything the observer cannot place (a change outside the XML
//! tree) makes the next refresh read everything.
//!
//! It performs no I/O and starts no threads; the caller decides when to
//! refresh.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use yrs::types::xml::XmlOut;
use yrs::types::Event;
use yrs::{BranchID, DeepObservable, Doc, Origin, Out, Transact, Xml, XmlFragmentRef};

use crate::block::BlockIdentity;
use crate::outline::{identity_of, Outline, FRAGMENT_NAME};

/// What changed since the last refresh, as the observer saw it.
#[derive(Debug, Default)]
struct Changes {
    /// Top-level blocks whose content (text, children, attributes) changed.
    blocks: HashSet<BlockIdentity>,
    /// Blocks were added to or removed from the fragment.
    order: bool,
    /// Something changed that could not be placed: read everything.
    everything: bool,
}

impl Changes {
    fn is_empty(&self) -> bool {
        self.blocks.is_empty() && !self.order && !self.everything
    }

    fn note(&mut self, event: &Event) {
        match top_level(event.target()) {
            Some(Top::Fragment) => self.order = true,
            Some(Top::Block(identity)) => {
                self.blocks.insert(identity);
            }
            None => self.everything = true,
        }
    }
}

/// Where a change happened.
enum Top {
    /// In the fragment's own list of children.
    Fragment,
    /// Inside (or on) the top-level block with this identity.
    Block(BlockIdentity),
}

/// The top-level block `target` belongs to, climbing parents until the one
/// whose parent is the root fragment.
fn top_level(target: Out) -> Option<Top> {
    let mut node = XmlOut::try_from(target).ok()?;
    loop {
        if let BranchID::Root(_) = node.id() {
            return Some(Top::Fragment);
        }
        let parent = match &node {
            XmlOut::Element(element) => element.parent(),
            XmlOut::Text(text) => text.parent(),
            XmlOut::Fragment(fragment) => fragment.parent(),
        }?;
        if let BranchID::Root(_) = parent.id() {
            return identity_of(node.as_ref()).map(Top::Block);
        }
        node = parent;
    }
}

/// Tells observers of different live outlines apart.
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

/// The outline of one document, kept current cheaply: after a one-block edit
/// a refresh reads that one block, not all of them.
///
/// Holds a handle on the document (so the observer it registers can always
/// be removed) and unregisters it when dropped.
pub struct LiveOutline {
    doc: Doc,
    fragment: XmlFragmentRef,
    key: Origin,
    changes: Arc<Mutex<Changes>>,
    outline: Arc<Outline>,
}

impl LiveOutline {
    /// Starts following `doc`: observes its `prosemirror` fragment (creating
    /// the empty root type if nobody has typed yet, which changes nothing in
    /// the document's state) and reads the outline once in full.
    ///
    /// Like `yrs`'s own `get_or_insert_*`, this opens a write transaction
    /// (which emits no update: creating a root type changes no state), so it
    /// waits for other transactions and must not be called while this thread
    /// holds one.
    pub fn new(doc: &Doc) -> Self {
        let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        let changes = Arc::new(Mutex::new(Changes::default()));
        let key = Origin::from(format!(
            "margin-live-outline-{}",
            NEXT_KEY.fetch_add(1, Ordering::Relaxed)
        ));
        let seen: Weak<Mutex<Changes>> = Arc::downgrade(&changes);
        fragment.observe_deep(key.clone(), move |_txn, events| {
            if let Some(changes) = seen.upgrade() {
                let mut changes = changes.lock().unwrap_or_else(PoisonError::into_inner);
                for event in events.iter() {
                    changes.note(event);
                }
            }
        });
        let outline = Arc::new(Outline::read(&doc.transact(), &fragment));
        LiveOutline {
            doc: doc.clone(),
            fragment,
            key,
            changes,
            outline,
        }
    }

    /// Brings the outline up to date with the document and returns it.
    /// Blocks that did not change keep their text and digest unread.
    ///
    /// Opens a read transaction: it must not be called while the same
    /// thread holds a write transaction on the document.
    pub fn refresh(&mut self) -> &Outline {
        let txn = self.doc.transact();
        // Taken under the read transaction, so no write can slip between
        // what is taken and what is read.
        let changes =
            std::mem::take(&mut *self.changes.lock().unwrap_or_else(PoisonError::into_inner));
        if changes.is_empty() {
            return &self.outline;
        }
        // Copies the outline only if a snapshot of it is still held.
        let outline = Arc::make_mut(&mut self.outline);
        if changes.everything {
            *outline = Outline::read(&txn, &self.fragment);
            return &self.outline;
        }
        if changes.order {
            outline.resync(&txn, &self.fragment);
        }
        for identity in changes.blocks {
            if !outline.reread(&txn, identity) {
                *outline = Outline::read(&txn, &self.fragment);
                break;
            }
        }
        &self.outline
    }

    /// The outline as of the last refresh.
    pub fn outline(&self) -> &Outline {
        &self.outline
    }

    /// The outline as of the last refresh, shared: what
    /// [`ReadCache::remember`](crate::ReadCache::remember) keeps. Cheap; the
    /// next refresh that finds a change copies the outline once instead of
    /// changing the snapshot.
    pub fn snapshot(&self) -> Arc<Outline> {
        Arc::clone(&self.outline)
    }
}

impl Drop for LiveOutline {
    fn drop(&mut self) {
        self.fragment.unobserve_deep(self.key.clone());
    }
}

impl std::fmt::Debug for LiveOutline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveOutline")
            .field("blocks", &self.outline.len())
            .finish_non_exhaustive()
    }
}
