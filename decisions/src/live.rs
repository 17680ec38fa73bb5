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
//! It is read at the first refresh, not when made: a document nobody
//! asks the outline of (people typing, no Planner) never pays for it.
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
/// Built lazily: nothing is observed or read until the first refresh, so a
/// document only people edit (no Planner reading it) pays neither the full
/// read when it loads nor the observer on every transaction. Once read, it
/// follows the document until dropped.
///
/// Holds a handle on the document (so the observer it registers can always
/// be removed) and unregisters it when dropped.
pub struct LiveOutline {
    doc: Doc,
    following: Option<Following>,
}

/// A live outline once it has been read: the observer and what it saw.
struct Following {
    fragment: XmlFragmentRef,
    key: Origin,
    changes: Arc<Mutex<Changes>>,
    outline: Arc<Outline>,
}

impl LiveOutline {
    /// An outline of `doc`, read at the first [`LiveOutline::refresh`].
    /// Costs nothing until then.
    pub fn new(doc: &Doc) -> Self {
        LiveOutline {
            doc: doc.clone(),
            following: None,
        }
    }

    /// Whether the outline has been read (and the document is observed).
    pub fn is_read(&self) -> bool {
        self.following.is_some()
    }

    /// Brings the outline up to date with the document and returns it.
    /// Blocks that did not change keep their text and digest unread; the
    /// first call reads every block.
    ///
    /// Opens a transaction (the first call a write one, which emits no
    /// update: creating an empty root type changes no state, as `yrs`'s own
    /// `get_or_insert_*` do): it must not be called while the same thread
    /// holds a transaction on the document.
    pub fn refresh(&mut self) -> &Outline {
        self.current()
    }

    /// [`LiveOutline::refresh`], shared: what
    /// [`ReadCache::remember`](crate::ReadCache::remember) keeps. The next
    /// refresh that finds a change copies the outline instead of changing
    /// the snapshot; the copy shares every run of blocks the change did not
    /// touch (see [`Outline`]).
    pub fn snapshot(&mut self) -> Arc<Outline> {
        Arc::clone(self.current())
    }

    fn current(&mut self) -> &Arc<Outline> {
        if let Some(following) = &mut self.following {
            following.refresh(&self.doc);
        }
        let doc = &self.doc;
        &self
            .following
            .get_or_insert_with(|| Following::start(doc))
            .outline
    }
}

impl Following {
    /// Observes `doc`'s `prosemirror` fragment (creating the empty root
    /// type if nobody has typed yet) and reads the outline once in full.
    fn start(doc: &Doc) -> Self {
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
        Following {
            fragment,
            key,
            changes,
            outline,
        }
    }

    /// Reads again what changed since the last refresh.
    fn refresh(&mut self, doc: &Doc) {
        let txn = doc.transact();
        // Taken under the read transaction, so no write can slip between
        // what is taken and what is read.
        let changes =
            std::mem::take(&mut *self.changes.lock().unwrap_or_else(PoisonError::into_inner));
        if changes.is_empty() {
            return;
        }
        // Copies the outline only if a snapshot of it is still held, and
        // then only its parts that the changes below touch.
        let outline = Arc::make_mut(&mut self.outline);
        if changes.everything {
            *outline = Outline::read(&txn, &self.fragment);
            return;
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
    }
}

impl Drop for LiveOutline {
    // Here, not on `Following`: the fragment points into the document's
    // store, which `self.doc` may be the last handle on, and fields drop
    // after this runs; a `Following` dropped as a field after `doc` would
    // unobserve through a freed store.
    fn drop(&mut self) {
        if let Some(following) = self.following.take() {
            following.fragment.unobserve_deep(following.key);
        }
    }
}

impl std::fmt::Debug for LiveOutline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveOutline")
            .field(
                "blocks",
                &self
                    .following
                    .as_ref()
                    .map(|following| following.outline.len()),
            )
            .finish_non_exhaustive()
    }
}
