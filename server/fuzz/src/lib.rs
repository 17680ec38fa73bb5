//! What the document fuzz targets share: the document an update is sent
//! to, and the checks run once it is accepted (see
//! fuzz_targets/document_update.rs).

use std::sync::{Arc, OnceLock};

use margin_decisions::Outline;
use margin_sync_core::{Access, Effect, LiveDocument, Owner};
use yrs::sync::{Message, SyncMessage};
use yrs::types::text::YChange;
use yrs::updates::encoder::Encode;
use yrs::{Any, Map, ReadTxn, StateVector, Text, Transact, Xml, XmlFragment, XmlOut};

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
        let expected = content(&self.doc);
        // The stored log replays to the same document.
        let replayed = load(self.stored.iter().map(Vec::as_slice), "the stored log");
        assert_eq!(
            content(&replayed),
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
            content(&loaded),
            expected,
            "the document's state loads as another document"
        );
        // A sync step 2 to a client that holds the history.
        if let Some(base) = self.base {
            let diff = live.transact().encode_diff_v1(base_vector());
            let caught_up = load([base, diff.as_slice()], "a step 2 after the history");
            assert_eq!(
                content(&caught_up),
                expected,
                "a step 2 brings another document"
            );
        }
    }
}

fn load<'a>(parts: impl IntoIterator<Item = &'a [u8]> + Clone, what: &str) -> LiveDocument {
    let (doc, skipped) =
        LiveDocument::load(parts, []).unwrap_or_else(|e| panic!("{what} does not load: {e}"));
    assert!(skipped.is_empty(), "{what} is refused: {skipped:?}");
    doc
}

/// What a reader sees: the state vector, the plan (elements, attributes
/// and marks in key order: yrs keeps them in hash maps) and the map.
fn content(doc: &LiveDocument) -> (StateVector, String, Vec<(String, String)>) {
    let doc = doc.doc();
    let txn = doc.transact();
    let mut text = String::new();
    if let Some(fragment) = txn.get_xml_fragment("prosemirror") {
        for child in fragment.children(&txn) {
            render(&txn, child, &mut text);
        }
    }
    let mut map: Vec<(String, String)> = txn
        .get_map("decisions")
        .map(|m| {
            m.iter(&txn)
                .map(|(k, v)| (k.to_string(), v.to_string(&txn)))
                .collect()
        })
        .unwrap_or_default();
    map.sort();
    (txn.state_vector(), text, map)
}

fn render<T: ReadTxn>(txn: &T, node: XmlOut, out: &mut String) {
    match node {
        XmlOut::Element(element) => {
            let mut attributes: Vec<(String, String)> = element
                .attributes(txn)
                .map(|(k, v)| (k.to_string(), v.to_string(txn)))
                .collect();
            attributes.sort();
            out.push_str(&format!("<{}{attributes:?}>", element.tag()));
            for child in element.children(txn) {
                render(txn, child, out);
            }
            out.push_str("</>");
        }
        XmlOut::Text(text) => {
            for chunk in text.diff(txn, YChange::identity) {
                let mut marks: Vec<String> = chunk
                    .attributes
                    .iter()
                    .flat_map(|a| a.iter())
                    .map(|(k, v)| format!("{k}={}", canon(v)))
                    .collect();
                marks.sort();
                out.push_str(&format!("{:?}{marks:?}", chunk.insert));
            }
        }
        XmlOut::Fragment(fragment) => {
            for child in fragment.children(txn) {
                render(txn, child, out);
            }
        }
    }
}

/// `any` with its maps' keys in order.
fn canon(any: &Any) -> String {
    match any {
        Any::Map(map) => {
            let mut entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}:{}", canon(v)))
                .collect();
            entries.sort();
            format!("{{{}}}", entries.join(","))
        }
        Any::Array(items) => {
            let items: Vec<String> = items.iter().map(canon).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}
