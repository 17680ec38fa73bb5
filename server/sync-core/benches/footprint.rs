//! What a loaded document holds in memory beside yrs' own document of the
//! same bytes, in the same process
//! (server/benches/results/2026-12-07-known-footprint.md).
//!
//! `cargo bench -p margin-sync-core --bench footprint`
//!
//! One scenario: the 10,000-paragraph plan (about 1 MB) loaded from one
//! stored part. Counted by a wrapper of the system allocator: the bytes
//! held once each load returns, and the allocations it made. yrs' decode
//! and apply alone is the peer; `Known` is what Margin adds (SPEC A3a: a
//! loaded document knows where every struct sits). Figures only: nothing
//! here asserts.

use std::alloc::System;
use std::hint::black_box;

use margin_sync_core::{decode, Known, LiveDocument};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use yrs::types::xml::{XmlElementPrelim, XmlTextPrelim};
use yrs::updates::decoder::Decode;
use yrs::{Doc, ReadTxn, StateVector, Transact, Update, XmlFragment};

#[global_allocator]
static COUNTED: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const BLOCKS: usize = 10_000;

/// The plan as one stored part.
fn plan() -> Vec<u8> {
    let doc = Doc::with_client_id(1);
    let fragment = doc.get_or_insert_xml_fragment("prosemirror");
    let mut txn = doc.transact_mut();
    for i in 0..BLOCKS {
        let text =
            format!("Paragraph {i:05}: the plan says what happens next, who does it, and by when.");
        fragment.push_back(
            &mut txn,
            XmlElementPrelim::new("paragraph", [XmlTextPrelim::new(text).into()]),
        );
    }
    drop(txn);
    let part = doc
        .transact()
        .encode_state_as_update_v1(&StateVector::default());
    part
}

/// The bytes `make`'s result holds once made, and the allocations made.
fn held<T>(make: impl FnOnce() -> T) -> (T, f64, usize) {
    let region = Region::new(COUNTED);
    let made = make();
    let change = region.change();
    // A reallocation's growth counts in `bytes_allocated` already.
    let bytes = change.bytes_allocated as f64 - change.bytes_deallocated as f64;
    (
        made,
        bytes / (1024.0 * 1024.0),
        change.allocations + change.reallocations,
    )
}

fn main() {
    let part = plan();
    println!("plan: {BLOCKS} paragraphs, {} bytes", part.len());
    println!();
    println!("| held once loaded | MiB | allocations | ÷ yrs alone |");
    println!("|---|---|---|---|");
    let (doc, yrs_mib, yrs_allocs) = held(|| {
        let doc = Doc::new();
        doc.transact_mut()
            .apply_update(Update::decode_v1(&part).expect("decodes"))
            .expect("applies");
        doc
    });
    drop(black_box(doc));
    println!("| yrs' document alone | {yrs_mib:.2} | {yrs_allocs} | 1.00 |");
    let (live, live_mib, live_allocs) =
        held(|| LiveDocument::load([part.as_slice()], []).expect("loads"));
    drop(black_box(live));
    println!(
        "| `LiveDocument::load` (yrs' document and `Known`) | {live_mib:.2} | {live_allocs} | {:.2} |",
        live_mib / yrs_mib
    );
    let (known, known_mib, known_allocs) = held(|| {
        let mut known = Known::new();
        let update = decode(&part).expect("decodes");
        let checked = known.check(&update).expect("fits");
        known.order_kept(&update, &checked);
        known.learn(&checked);
        known
    });
    drop(black_box(known));
    println!(
        "| `Known` alone (places, order) | {known_mib:.2} | {known_allocs} | {:.2} |",
        known_mib / yrs_mib
    );
    let update = decode(&part).expect("decodes");
    let (checked, checked_mib, _) = held(|| Known::new().check(&update).expect("fits"));
    drop(black_box(checked));
    println!(
        "| a check's result for the part, while it is learned | {checked_mib:.2} | — | {:.2} |",
        checked_mib / yrs_mib
    );
}
