//! What the document fuzz targets share: the document an update is sent
//! to, and the checks run once it is accepted (see
//! fuzz_targets/document_update.rs).

use std::sync::{Arc, OnceLock};

use margin_decisions::Outline;
use margin_sync_core::content::content;
use margin_sync_core::{Access, Effect, LiveDocument, Owner};
use yrs::sync::{Message, SyncMessage};
use yrs::updates::encoder::Encode;
use yrs::{ReadTxn, StateVector, Transact};

/// The stored history: every update the server received from three npm
/// yjs editors, in order.
pub fn history() -> &'static [Vec<u8>] {
    static HISTORY: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    HISTORY.get_or_init(|| {
        let mut bytes: &[u8] = include_bytes!("../history/concurrent.updates");
        let mut updates = Vec::new();
        while let Some((len, rest)) = bytes.split_first_chunk::<4>() {
            let len = u32::from_le_bytes(*len) as usize;
            let (update, rest) = rest.split_at(len);
            updates.push(update.to_vec());
            bytes = rest;
        }
        updates
    })
}

/// The history as one snapshot, as compaction would store it (loading 163
/// updates for every input would slow the fuzzer tenfold).
fn snapshot() -> &'static [u8] {
    static SNAPSHOT: OnceLock<Vec<u8>> = OnceLock::new();
    SNAPSHOT.get_or_init(|| {
        let (doc, skipped) =
            LiveDocument::load(history().iter().map(Vec::as_slice), []).expect("the history loads");
        assert!(skipped.is_empty(), "the history is refused: {skipped:?}");
        let state = doc
            .doc()
            .transact()
            .encode_state_as_update_v1(&StateVector::default());
        state
    })
}

/// The state vector of the history.
fn base_vector() -> &'static StateVector {
    static VECTOR: OnceLock<StateVector> = OnceLock::new();
    VECTOR.get_or_init(|| {
        load([snapshot()], "the history")
            .doc()
            .transact()
            .state_vector()
    })
}

/// The history's editors' client ids.
pub const HISTORY_CLIENTS: [u64; 3] = [1001, 1002, 1003];

/// A document an editor sends updates to, and what the server stored.
pub struct Target {
    doc: LiveDocument,
    /// The stored parts: the snapshot the document loaded from, then
    /// every change accepted since.
    stored: Vec<Vec<u8>>,
    /// The history's snapshot, when the document holds it.
    base: Option<&'static [u8]>,
    sender: Owner,
    /// An accepted change rearranged its writer's own text so that a later
    /// reader orders it otherwise (as Yjs' redo can): from then on only
    /// what the document holds is compared, not its order.
    reordered: bool,
}

impl Target {
    /// The document `selector` picks (see document_update.rs).
    pub fn new(selector: u8) -> Target {
        let base = (selector & 1 == 1).then(snapshot);
        let owners: Vec<(u64, Owner)> = if selector & 2 == 0 && base.is_some() {
            HISTORY_CLIENTS
                .iter()
                .map(|&client| (client, Owner::Account(Arc::from("ada"))))
                .collect()
        } else {
            Vec::new()
        };
        let stored: Vec<Vec<u8>> = base.iter().map(|b| b.to_vec()).collect();
        let (doc, skipped) =
            LiveDocument::load(stored.iter().map(Vec::as_slice), owners).expect("the base loads");
        assert!(skipped.is_empty());
        Target {
            doc,
            stored,
            base,
            sender: Owner::Account(Arc::from("eve")),
            reordered: false,
        }
    }

    /// The document's own state vector.
    pub fn state_vector(&self) -> StateVector {
        self.doc.doc().transact().state_vector()
    }

    /// Sends `update` as an editor's sync update; whether it was accepted
    /// and changed the document.
    pub fn send(&mut self, update: &[u8]) -> bool {
        let frame = Message::Sync(SyncMessage::Update(update.to_vec())).encode_v1();
        let mut effects = Vec::new();
        match self
            .doc
            .frame(1, &self.sender, Access::Edit, &frame, &mut effects)
        {
            Ok(()) => {
                let mut changed = false;
                for effect in effects {
                    if let Effect::Change(_, change) = effect {
                        self.reordered |= change.reorders;
                        self.stored.push(change.bytes);
                        changed = true;
                    }
                }
                changed
            }
            Err(close) => {
                assert!(
                    !close.poisoned,
                    "the document was left suspect: {}",
                    close.reason
                );
                false
            }
        }
    }

    /// What the server does with the document after an edit, checked.
    pub fn after(&self) {
        let live = self.doc.doc();
        let _outline = Outline::of_doc(live);
        let expected = self.seen(live);
        // The stored log replays to the same document.
        let replayed = load(self.stored.iter().map(Vec::as_slice), "the stored log");
        assert_eq!(
            self.seen(replayed.doc()),
            expected,
            "the stored log replays to another document"
        );
        // Its whole state (a compaction's snapshot, a sync step 2 to an
        // empty client) loads alone.
        let state = live
            .transact()
            .encode_state_as_update_v1(&StateVector::default());
        let loaded = load([state.as_slice()], "the document's state");
        assert_eq!(
            self.seen(loaded.doc()),
            expected,
            "the document's state loads as another document"
        );
        // A sync step 2 to a client that holds the history.
        if let Some(base) = self.base {
            let diff = live.transact().encode_diff_v1(base_vector());
            let caught_up = load([base, diff.as_slice()], "a step 2 after the history");
            assert_eq!(
                self.seen(caught_up.doc()),
                expected,
                "a step 2 brings another document"
            );
        }
    }

    /// What is compared: the whole content, or after a change that
    /// reorders its writer's own text, what the document holds.
    fn seen(&self, doc: &yrs::Doc) -> String {
        if self.reordered {
            format!("{:?}", doc.transact().state_vector())
        } else {
            content(doc)
        }
    }
}

fn load<'a>(parts: impl IntoIterator<Item = &'a [u8]> + Clone, what: &str) -> LiveDocument {
    let (doc, skipped) =
        LiveDocument::load(parts, []).unwrap_or_else(|e| panic!("{what} does not load: {e}"));
    assert!(skipped.is_empty(), "{what} is refused: {skipped:?}");
    doc
}
