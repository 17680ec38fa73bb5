//! What the validator costs per update, beside yrs' own work on the same
//! bytes in the same process
//! (server/benches/results/2026-12-04-validator.md).
//!
//! `cargo bench -p margin-sync-core --bench validator`
//!
//! Two scenarios on a 10,000-paragraph plan (about 1 MB):
//! - a keystroke: an editor types one character into a paragraph. Timed:
//!   Margin's decode, check and learning alone, yrs' decode alone, the whole of
//!   `LiveDocument::frame` (decode, check, order, yrs apply, the change
//!   checked again and learned) and yrs' decode and apply alone;
//! - a 1 MB sync step 2 into an empty document: Margin's decode and
//!   check, yrs' decode, `LiveDocument::load` and yrs' decode and apply.
//!
//! Plain `std::time::Instant`, p50 and mean of many iterations. Figures
//! only: nothing here asserts on time.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use margin_sync_core::{decode, Access, Known, LiveDocument, Owner};
use yrs::sync::{Message, SyncMessage};
use yrs::types::xml::{XmlElementPrelim, XmlTextPrelim};
use yrs::updates::decoder::Decode;
use yrs::updates::encoder::Encode;
use yrs::{Doc, ReadTxn, StateVector, Text, Transact, Update, XmlFragment, XmlOut};

const BLOCKS: usize = 10_000;
const KEYSTROKES: usize = 2_000;

fn plan() -> Doc {
    let doc = Doc::with_client_id(1);
    let fragment = doc.get_or_insert_xml_fragment("prosemirror");
    let mut txn = doc.transact_mut();
    for i in 0..BLOCKS {
        let text = format!("Paragraph {i}: should the launch region be Europe or the US, and who owns the budget review?");
        fragment.push_back(
            &mut txn,
            XmlElementPrelim::new("paragraph", [XmlTextPrelim::new(text).into()]),
        );
    }
    drop(txn);
    doc
}

/// `KEYSTROKES` updates of an editor (client 2) typing into paragraph 5,000.
fn keystrokes(base: &[u8]) -> Vec<Vec<u8>> {
    let doc = Doc::with_client_id(2);
    doc.transact_mut()
        .apply_update(Update::decode_v1(base).expect("the plan decodes"))
        .expect("the plan applies");
    let fragment = doc.get_or_insert_xml_fragment("prosemirror");
    let text = {
        let txn = doc.transact();
        match fragment.get(&txn, 5_000) {
            Some(XmlOut::Element(p)) => match p.get(&txn, 0) {
                Some(XmlOut::Text(text)) => text,
                _ => panic!("no text"),
            },
            _ => panic!("no paragraph"),
        }
    };
    let mut updates = Vec::with_capacity(KEYSTROKES);
    for i in 0..KEYSTROKES {
        let before = doc.transact().state_vector();
        text.insert(&mut doc.transact_mut(), 10 + i as u32, "x");
        updates.push(doc.transact().encode_diff_v1(&before));
    }
    updates
}

struct Figures(Vec<Duration>);

impl Figures {
    fn p50(&self) -> Duration {
        let mut sorted = self.0.clone();
        sorted.sort();
        sorted[sorted.len() / 2]
    }

    fn mean(&self) -> Duration {
        self.0.iter().sum::<Duration>() / self.0.len() as u32
    }
}

fn time(iterations: usize, mut f: impl FnMut(usize)) -> Figures {
    let mut times = Vec::with_capacity(iterations);
    for i in 0..iterations {
        let start = Instant::now();
        f(i);
        times.push(start.elapsed());
    }
    Figures(times)
}

fn row(what: &str, ours: &Figures, theirs: &Figures, of: &str) {
    println!(
        "| {what} | {:.2} µs / {:.2} µs | {of} {:.2} µs / {:.2} µs | {:.2}× |",
        ours.p50().as_secs_f64() * 1e6,
        ours.mean().as_secs_f64() * 1e6,
        theirs.p50().as_secs_f64() * 1e6,
        theirs.mean().as_secs_f64() * 1e6,
        ours.mean().as_secs_f64() / theirs.mean().as_secs_f64(),
    );
}

fn main() {
    let base = plan()
        .transact()
        .encode_state_as_update_v1(&StateVector::default());
    println!("plan: {BLOCKS} paragraphs, {} bytes", base.len());
    let typed = keystrokes(&base);
    println!(
        "keystrokes: {KEYSTROKES}, {} bytes each at most",
        typed.iter().map(Vec::len).max().unwrap_or(0)
    );
    println!();
    println!("| figure (p50 / mean) | Margin | yrs alone | ratio |");
    println!("|---|---|---|---|");

    // A keystroke against the plan.
    let (mut live, skipped) = LiveDocument::load([base.as_slice()], []).expect("the plan loads");
    assert!(skipped.is_empty());
    let mut known = {
        let mut known = Known::new();
        let update = decode(&base).expect("decodes");
        let checked = known.check(&update).expect("fits");
        known.order_kept(&update, &checked);
        known.learn(&checked);
        known
    };
    // Each keystroke builds on the one before: it is learned once checked.
    let check = time(KEYSTROKES, |i| {
        let update = decode(&typed[i]).expect("decodes");
        let checked = known.check(&update).expect("fits");
        known.learn(&checked);
    });
    let yrs_decode = time(KEYSTROKES, |i| {
        black_box(Update::decode_v1(&typed[i]).expect("decodes"));
    });
    row(
        "keystroke: decode + check + learn / yrs decode",
        &check,
        &yrs_decode,
        "decode",
    );
    let owner = Owner::Account(Arc::from("ada"));
    let frames: Vec<Vec<u8>> = typed
        .iter()
        .map(|u| Message::Sync(SyncMessage::Update(u.clone())).encode_v1())
        .collect();
    let mut effects = Vec::new();
    let whole = time(KEYSTROKES, |i| {
        effects.clear();
        live.frame(1, &owner, Access::Edit, &frames[i], &mut effects)
            .expect("accepted");
    });
    let plain = Doc::new();
    plain
        .transact_mut()
        .apply_update(Update::decode_v1(&base).expect("decodes"))
        .expect("applies");
    let yrs_apply = time(KEYSTROKES, |i| {
        let mut txn = plain.transact_mut();
        txn.apply_update(Update::decode_v1(&typed[i]).expect("decodes"))
            .expect("applies");
        black_box(txn.encode_update_v1());
    });
    row(
        "keystroke: whole frame / yrs decode + apply + change",
        &whole,
        &yrs_apply,
        "apply",
    );

    // A 1 MB sync step 2 into an empty document.
    let runs = 20;
    let empty = Known::new();
    let check = time(runs, |_| {
        let update = decode(&base).expect("decodes");
        black_box(empty.check(&update).expect("fits"));
    });
    let yrs_decode = time(runs, |_| {
        black_box(Update::decode_v1(&base).expect("decodes"));
    });
    row(
        "1 MB step 2: decode + check / yrs decode",
        &check,
        &yrs_decode,
        "decode",
    );
    let load = time(runs, |_| {
        black_box(LiveDocument::load([base.as_slice()], []).expect("loads"));
    });
    let yrs_load = time(runs, |_| {
        let doc = Doc::new();
        doc.transact_mut()
            .apply_update(Update::decode_v1(&base).expect("decodes"))
            .expect("applies");
        black_box(doc);
    });
    row(
        "1 MB step 2: LiveDocument::load / yrs decode + apply",
        &load,
        &yrs_load,
        "apply",
    );
    println!();
    println!(
        "the plan's check footprint: {} runs of clocks",
        live.known_spans()
    );
}
