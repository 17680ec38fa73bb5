//! No false refusals of what yrs itself encodes (SPEC A3a): peers editing
//! one plan concurrently through yrs — paragraphs, nested lists, text with
//! astral characters, formatting marks, attributes, the decisions map,
//! undo and redo — exchange every change, catch up after time offline with
//! a diff against their state vector, and finally encode their whole
//! state. Every one of those updates is checked against what its receiver
//! holds, as the server checks an editor's, and every one is accepted; the
//! peers end equal.

use std::sync::{Arc, Mutex};

use margin_sync_core::{decode, Known};
use yrs::block::ClientID;
use yrs::types::text::YChange;
use yrs::types::Attrs;
use yrs::updates::decoder::Decode;
use yrs::{
    Any, Doc, GetString, Map, OffsetKind, Options, ReadTxn, StateVector, Text, Transact,
    UndoManager, Update, Xml, XmlElementPrelim, XmlFragment, XmlFragmentRef, XmlOut, XmlTextPrelim,
    XmlTextRef,
};

/// A seeded walk (splitmix64): the same seed, the same session.
struct Walk(u64);

impl Walk {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const WORDS: &[&str] = &[
    "plan",
    "launch",
    "beta",
    "é",
    "naïve",
    "日本",
    "😀",
    "𝄞",
    "TBD?",
    " ",
    "\n",
    "mix😀ed",
];

struct Peer {
    doc: Doc,
    fragment: XmlFragmentRef,
    known: Known,
    undo: UndoManager,
    /// What this peer's own transactions produced, not yet learned.
    produced: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Updates from others not yet delivered (it is offline while set).
    inbox: Vec<Vec<u8>>,
    offline: bool,
}

impl Peer {
    fn new(client: u64) -> Peer {
        let mut options = Options::with_client_id(ClientID::new(client));
        options.offset_kind = OffsetKind::Utf16;
        let doc = Doc::with_options(options);
        let fragment = doc.get_or_insert_xml_fragment("prosemirror");
        doc.get_or_insert_map("decisions");
        let produced = Arc::new(Mutex::new(Vec::new()));
        let sink = produced.clone();
        doc.observe_update_v1("corpus", move |_, event| {
            sink.lock().unwrap().push(event.update.clone())
        })
        .unwrap();
        let mut undo = UndoManager::new();
        undo.expand_scope(&doc, &fragment);
        Peer {
            doc,
            fragment,
            known: Known::new(),
            undo,
            produced,
            inbox: Vec::new(),
            offline: false,
        }
    }

    /// Checks an update against what this peer holds, applies it, checks
    /// the change it made and learns that — as the server does.
    fn receive(&mut self, bytes: &[u8], counted: &mut usize) {
        let update = decode(bytes).unwrap_or_else(|e| panic!("refused: {e}"));
        let checked = self
            .known
            .check(&update)
            .unwrap_or_else(|e| panic!("refused against what the peer holds: {e}"));
        self.known.order(&update, &checked);
        *counted += 1;
        let change = {
            let mut txn = self.doc.transact_mut();
            txn.apply_update(Update::decode_v1(bytes).unwrap()).unwrap();
            assert!(
                txn.store().pending_update().is_none(),
                "an accepted update left structs waiting"
            );
            assert!(
                txn.store().pending_ds().is_none(),
                "an accepted update left deletions waiting"
            );
            txn.encode_update_v1()
        };
        // The subscription saw the same change; it is learned here (its
        // items were placed with the update they came in).
        self.produced.lock().unwrap().clear();
        self.learn(&change, false, counted);
    }

    fn learn(&mut self, change: &[u8], place: bool, counted: &mut usize) {
        let update = decode(change).unwrap_or_else(|e| panic!("a change yrs made is refused: {e}"));
        let checked = self
            .known
            .check(&update)
            .unwrap_or_else(|e| panic!("a change yrs made does not fit: {e}"));
        if place {
            self.known.order(&update, &checked);
        }
        *counted += 1;
        self.known.learn(&checked);
    }

    /// Learns what its own last transactions made; returns them to send.
    fn own(&mut self, counted: &mut usize) -> Vec<Vec<u8>> {
        let produced: Vec<Vec<u8>> = std::mem::take(&mut *self.produced.lock().unwrap());
        for change in &produced {
            self.learn(change, true, counted);
        }
        produced
    }

    fn paragraphs(&self) -> Vec<XmlTextRef> {
        let txn = self.doc.transact();
        let mut texts = Vec::new();
        collect_texts(&txn, &self.fragment, &mut texts);
        texts
    }

    fn edit(&mut self, walk: &mut Walk) {
        let texts = self.paragraphs();
        let word = WORDS[walk.below(WORDS.len())];
        let len = self.fragment.len(&self.doc.transact());
        match walk.below(10) {
            0 | 1 => {
                let mut txn = self.doc.transact_mut();
                let at = walk.below(len as usize + 1) as u32;
                self.fragment.insert(
                    &mut txn,
                    at,
                    XmlElementPrelim::new("paragraph", [XmlTextPrelim::new(word).into()]),
                );
            }
            2 => {
                let mut txn = self.doc.transact_mut();
                let at = walk.below(len as usize + 1) as u32;
                self.fragment.insert(
                    &mut txn,
                    at,
                    XmlElementPrelim::new(
                        "bullet_list",
                        [XmlElementPrelim::new(
                            "list_item",
                            [
                                XmlElementPrelim::new(
                                    "paragraph",
                                    [XmlTextPrelim::new(word).into()],
                                )
                                .into(),
                            ],
                        )
                        .into()],
                    ),
                );
            }
            3 | 4 if !texts.is_empty() => {
                let text = &texts[walk.below(texts.len())];
                let mut txn = self.doc.transact_mut();
                let at = utf16_boundary(&plain(text, &txn), walk);
                text.insert(&mut txn, at, word);
            }
            5 if !texts.is_empty() => {
                let text = &texts[walk.below(texts.len())];
                let mut txn = self.doc.transact_mut();
                if let Some((start, len)) = span(&plain(text, &txn), walk) {
                    text.remove_range(&mut txn, start, len);
                }
            }
            6 if !texts.is_empty() => {
                let text = &texts[walk.below(texts.len())];
                let mut txn = self.doc.transact_mut();
                if let Some((start, len)) = span(&plain(text, &txn), walk) {
                    let mark: Attrs = if walk.chance(50) {
                        Attrs::from([("bold".into(), Any::Bool(true))])
                    } else {
                        Attrs::from([(
                            "link".into(),
                            Any::from_json(r#"{"href":"https://example.com/ü"}"#).unwrap(),
                        )])
                    };
                    text.format(&mut txn, start, len, mark);
                }
            }
            7 if len > 0 => {
                let mut txn = self.doc.transact_mut();
                let at = walk.below(len as usize) as u32;
                if walk.chance(50) {
                    self.fragment.remove_range(&mut txn, at, 1);
                } else if let Some(XmlOut::Element(element)) = self.fragment.get(&txn, at) {
                    element.insert_attribute(&mut txn, "level", word);
                }
            }
            8 => {
                let map = self.doc.get_or_insert_map("decisions");
                let mut txn = self.doc.transact_mut();
                let key = format!("card-{}", walk.below(6));
                map.insert(
                    &mut txn,
                    key,
                    format!("{{\"question\":\"{}\"}}", word.escape_debug()),
                );
            }
            _ => {
                if walk.chance(50) {
                    self.undo.undo_blocking();
                } else {
                    self.undo.redo_blocking();
                }
            }
        }
        // Each edit is its own undo step.
        self.undo.reset();
    }
}

fn collect_texts<T: ReadTxn>(txn: &T, fragment: &impl XmlFragment, into: &mut Vec<XmlTextRef>) {
    for child in fragment.children(txn) {
        match child {
            XmlOut::Element(element) => collect_texts(txn, &element, into),
            XmlOut::Text(text) => into.push(text),
            XmlOut::Fragment(_) => {}
        }
    }
}

/// The characters of `text`, without its marks.
fn plain<T: ReadTxn>(text: &XmlTextRef, txn: &T) -> String {
    text.diff(txn, YChange::identity)
        .into_iter()
        .map(|d| match d.insert {
            yrs::Out::Any(Any::String(s)) => s.to_string(),
            other => panic!("unexpected insert {other:?}"),
        })
        .collect()
}

/// A random stretch of `text` (start and length, in UTF-16 units) that
/// splits no surrogate pair, if it is not empty.
fn span(text: &str, walk: &mut Walk) -> Option<(u32, u32)> {
    let start = utf16_boundary(text, walk);
    let end = utf16_boundary(text, walk);
    (end > start).then(|| (start, end - start))
}

/// A random offset into `text` (in UTF-16 units) that does not split a
/// surrogate pair, as an editor's positions never do.
fn utf16_boundary(text: &str, walk: &mut Walk) -> u32 {
    let mut offsets = vec![0u32];
    let mut at = 0;
    for c in text.chars() {
        at += c.len_utf16() as u32;
        offsets.push(at);
    }
    offsets[walk.below(offsets.len())]
}

fn content(peer: &Peer) -> String {
    let txn = peer.doc.transact();
    let mut texts = Vec::new();
    collect_texts(&txn, &peer.fragment, &mut texts);
    let formatted: Vec<String> = texts
        .iter()
        .map(|t| {
            t.diff(&txn, YChange::identity)
                .into_iter()
                .map(|d| {
                    // Marks are a hash map: in key order, to compare.
                    let mut marks: Vec<String> = d
                        .attributes
                        .iter()
                        .flat_map(|a| a.iter())
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    marks.sort();
                    format!("{:?}{marks:?}", d.insert)
                })
                .collect()
        })
        .collect();
    format!("{}|{:?}", peer.fragment.get_string(&txn), formatted)
}

/// One session of `peers` peers and `steps` edits; returns how many
/// updates were checked.
fn session(seed: u64, peers: usize, steps: usize) -> usize {
    let mut walk = Walk(seed);
    let mut peers: Vec<Peer> = (0..peers)
        .map(|i| Peer::new(1000 + seed * 10 + i as u64))
        .collect();
    let mut counted = 0;
    for _ in 0..steps {
        let author = walk.below(peers.len());
        peers[author].edit(&mut walk);
        let sent = peers[author].own(&mut counted);
        for (i, peer) in peers.iter_mut().enumerate() {
            if i != author {
                peer.inbox.extend(sent.iter().cloned());
            }
        }
        // Peers drop off and come back; one online delivers what waits.
        let who = walk.below(peers.len());
        if walk.chance(5) {
            peers[who].offline = !peers[who].offline;
        }
        for peer in peers.iter_mut().filter(|p| !p.offline) {
            if walk.chance(60) {
                for bytes in std::mem::take(&mut peer.inbox) {
                    peer.receive(&bytes, &mut counted);
                }
            }
        }
        // Now and then two peers sync by state vector, as y-websocket's
        // sync step 1 and 2 do after a reconnect.
        if walk.chance(10) {
            let (a, b) = (walk.below(peers.len()), walk.below(peers.len()));
            if a != b {
                let sv = peers[b].doc.transact().state_vector();
                let diff = peers[a].doc.transact().encode_diff_v1(&sv);
                peers[b].receive(&diff, &mut counted);
            }
        }
    }
    // Everyone catches up, then their whole state loads into an empty
    // document, and a diff against half of it into the half.
    for i in 0..peers.len() {
        for j in 0..peers.len() {
            if i != j {
                let sv = peers[j].doc.transact().state_vector();
                let diff = peers[i].doc.transact().encode_diff_v1(&sv);
                peers[j].receive(&diff, &mut counted);
            }
        }
    }
    for peer in &peers {
        let state = peer
            .doc
            .transact()
            .encode_state_as_update_v1(&StateVector::default());
        let mut fresh = Peer::new(1);
        fresh.receive(&state, &mut counted);
        assert!(
            content(&fresh) == content(peer),
            "a reloaded state differs (seed {seed})"
        );
    }
    let first = content(&peers[0]);
    for peer in &peers[1..] {
        assert!(content(peer) == first, "peers diverged (seed {seed})");
    }
    counted
}

#[test]
fn every_update_yrs_encodes_for_concurrent_editors_is_accepted() {
    let mut counted = 0;
    for seed in 1..=6 {
        counted += session(seed, 2 + (seed as usize % 4), 1_500);
    }
    assert!(counted > 20_000, "only {counted} updates were checked");
}
