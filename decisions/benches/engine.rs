//! Decision-engine benchmarks (server/benches/results/decisions.md).
//!
//! `cargo bench -p margin-decisions --bench engine`
//!
//! Plain `std::time::Instant` timing, many iterations, p50 / p99 / mean per
//! figure, each set against the aim it answers to, plus `blake3`'s own
//! single-core speed measured in the same process for comparison. Figures
//! only: nothing here asserts on time.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use margin_decisions::wire::WrittenRead;
use margin_decisions::{
    open_decisions, wire, Access, Block, CardSpec, Digest, DocumentState, Key, LiveOutline,
    Outline, Passage, ReadCache, ResponseKind, Strictness, FRAGMENT_NAME,
};
use margin_protocol::decisions::ReadDocumentOutput;
use yrs::types::xml::{XmlElementPrelim, XmlTextPrelim};
use yrs::{Doc, GetString, ReadTxn, Text, Transact, XmlFragment, XmlOut};

const BLOCKS: usize = 10_000;

/// A small deterministic generator (xorshift64*), so every run builds the
/// same document.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const WORDS: &[&str] = &[
    "the",
    "region",
    "launch",
    "budget",
    "team",
    "should",
    "we",
    "pick",
    "a",
    "vendor",
    "before",
    "March",
    "review",
    "latency",
    "users",
    "in",
    "Europe",
    "cost",
    "estimate",
    "plan",
    "risk",
    "decide",
    "whether",
    "database",
    "migration",
    "rollout",
    "owner",
    "support",
    "contract",
    "staging",
    "beta",
    "customers",
    "feedback",
    "deadline",
    "scope",
    "quarter",
    "metrics",
    "hiring",
    "security",
    "audit",
    "pricing",
    "and",
    "or",
    "of",
    "to",
    "for",
    "with",
    "on",
];

/// Words until the text is `min..=max` characters long.
fn sentence(rng: &mut Rng, min: usize, max: usize) -> String {
    let target = min + rng.below(max - min + 1);
    let mut text = String::with_capacity(target + 16);
    while text.len() < target {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(WORDS[rng.below(WORDS.len())]);
    }
    text.truncate(target);
    text.trim_end().to_owned()
}

/// A plan of `blocks` top-level blocks: mostly paragraphs of 80–200
/// characters, a heading every 25 blocks and a 3-item bullet list every 40.
fn build_doc(blocks: usize, rng: &mut Rng) -> Doc {
    let doc = Doc::new();
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    for chunk in (0..blocks).collect::<Vec<_>>().chunks(100) {
        let mut txn = doc.transact_mut();
        for &i in chunk {
            let at = i as u32;
            if i % 25 == 0 {
                let h = fragment.insert(&mut txn, at, XmlElementPrelim::empty("heading"));
                h.insert(&mut txn, 0, XmlTextPrelim::new(sentence(rng, 15, 40)));
            } else if i % 40 == 7 {
                let list = fragment.insert(&mut txn, at, XmlElementPrelim::empty("bulletList"));
                for j in 0..3 {
                    let item = list.insert(&mut txn, j, XmlElementPrelim::empty("listItem"));
                    let p = item.insert(&mut txn, 0, XmlElementPrelim::empty("paragraph"));
                    p.insert(&mut txn, 0, XmlTextPrelim::new(sentence(rng, 30, 80)));
                }
            } else {
                let p = fragment.insert(&mut txn, at, XmlElementPrelim::empty("paragraph"));
                p.insert(&mut txn, 0, XmlTextPrelim::new(sentence(rng, 80, 200)));
            }
        }
    }
    doc
}

fn insert_paragraph(doc: &Doc, index: u32, text: &str) {
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    let mut txn = doc.transact_mut();
    let p = fragment.insert(&mut txn, index, XmlElementPrelim::empty("paragraph"));
    p.insert(&mut txn, 0, XmlTextPrelim::new(text));
}

fn remove_block(doc: &Doc, index: u32) {
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    fragment.remove_range(&mut doc.transact_mut(), index, 1);
}

/// Types `word` into the paragraph at `index`, at `offset` in its text.
fn type_into(doc: &Doc, index: u32, offset: u32, word: &str) {
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    let mut txn = doc.transact_mut();
    let Some(XmlOut::Element(block)) = fragment.get(&txn, index) else {
        panic!("no element at {index}");
    };
    let Some(XmlOut::Text(body)) = block.get(&txn, 0) else {
        panic!("block {index} has no text");
    };
    let at = offset.min(body.len(&txn));
    body.insert(&mut txn, at, word);
}

struct Stats {
    p50: Duration,
    p99: Duration,
    mean: Duration,
    n: usize,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let n = samples.len();
    let at = |q: f64| samples[((n as f64 * q).ceil() as usize).clamp(1, n) - 1];
    Stats {
        p50: at(0.50),
        p99: at(0.99),
        mean: samples.iter().sum::<Duration>() / n as u32,
        n,
    }
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

/// One line of the table; `aim` is checked against `which` (p50 or p99).
fn row(name: &str, s: &Stats, aim: Option<(&str, Duration)>) {
    let verdict = match aim {
        Some((which, limit)) => {
            let got = if which == "p99" { s.p99 } else { s.p50 };
            let mark = if got <= limit { "✓" } else { "✗" };
            format!("{mark} {which} ≤ {}", fmt(limit))
        }
        None => "—".to_owned(),
    };
    println!(
        "| {name} | {} | {} | {} | {} | {verdict} |",
        s.n,
        fmt(s.p50),
        fmt(s.p99),
        fmt(s.mean)
    );
}

fn time<R>(f: impl FnOnce() -> R) -> (Duration, R) {
    let start = Instant::now();
    let r = f();
    (start.elapsed(), r)
}

/// Bytes `Digest::of` hashes for one block: two length prefixes, kind, text.
fn hashed_bytes(outline: &Outline) -> usize {
    outline
        .blocks()
        .map(|b| 16 + b.kind.len() + b.text.len())
        .sum()
}

fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn main() {
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load().trim());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let doc = build_doc(BLOCKS, &mut rng);
    let outline = Outline::of_doc(&doc);
    assert_eq!(outline.len(), BLOCKS);
    let bytes = hashed_bytes(&outline);
    let text_bytes: usize = outline.blocks().map(|b| b.text.len()).sum();
    println!(
        "document: {} blocks, {} bytes of normalised text ({} bytes hashed per outline)",
        outline.len(),
        text_bytes,
        bytes
    );
    println!();
    println!("| figure | n | p50 | p99 | mean | aim |");
    println!("|---|---|---|---|---|---|");

    // --- Full outline -----------------------------------------------------
    for _ in 0..5 {
        black_box(Outline::of_doc(&doc));
    }
    let full: Vec<Duration> = (0..200)
        .map(|_| {
            // The outline is dropped outside the timed region.
            let (d, outline) = time(|| black_box(Outline::of_doc(&doc)));
            drop(outline);
            d
        })
        .collect();
    let full = stats(full);
    row(
        "`Outline::of_doc`, 10,000 blocks",
        &full,
        Some(("p50", Duration::from_millis(3))),
    );

    // --- The outline as `read_document` sends it -----------------------------
    let wire_blocks: Vec<Duration> = (0..200)
        .map(|_| {
            let (d, blocks) = time(|| black_box(wire::blocks(&outline)));
            drop(blocks);
            d
        })
        .collect();
    row("`wire::blocks`, 10,000 blocks", &stats(wire_blocks), None);
    // The read's JSON both ways: entries encoded by serde (how reads were
    // sent before), and written straight from the outline (how they are).
    let through_serde: Vec<Duration> = (0..200)
        .map(|_| {
            let (d, json) = time(|| {
                let read = ReadDocumentOutput {
                    revision: 1,
                    outline: wire::blocks(&outline),
                };
                black_box(serde_json::to_string(&read))
            });
            drop(json);
            d
        })
        .collect();
    row(
        "a read's JSON through `wire::blocks` and serde, 10,000 blocks",
        &stats(through_serde),
        None,
    );
    let written: Vec<Duration> = (0..200)
        .map(|_| {
            let (d, json) = time(|| black_box(wire::encoded_read(1, &outline, None)));
            drop(json);
            d
        })
        .collect();
    row(
        "`wire::encoded_read` (`read_document`'s JSON), 10,000 blocks",
        &stats(written),
        None,
    );
    // The next read, after 50 blocks were typed in: written from the last
    // read, on a document of its own so the rows below see the same one.
    let mut side = Rng(0x51de_0000_0000_0001);
    let typed = build_doc(BLOCKS, &mut side);
    let first = Outline::of_doc(&typed);
    let typable: Vec<u32> = first
        .blocks()
        .filter(|b| &*b.kind == "paragraph")
        .map(|b| b.index as u32)
        .collect();
    // Each read written twice from the same last one: into new buffers, and
    // into the buffers of the read before last, as the server does.
    let mut last = wire::encoded_read(0, &first, None).unwrap();
    let mut before: Option<WrittenRead> = None;
    let (mut from_last, mut into_before) = (Vec::new(), Vec::new());
    for revision in 1..=100 {
        for _ in 0..50 {
            let at = typable[side.below(typable.len())];
            type_into(&typed, at, 0, "typed ");
        }
        let now = Outline::of_doc(&typed);
        let (d, fresh) = time(|| wire::encoded_read(revision, &now, Some(&last)).unwrap());
        drop(fresh);
        from_last.push(d);
        let buffers = before
            .take()
            .and_then(WrittenRead::into_buffers)
            .unwrap_or_default();
        let (d, next) =
            time(|| wire::encoded_read_into(revision, &now, Some(&last), buffers).unwrap());
        into_before.push(d);
        before = Some(std::mem::replace(&mut last, next));
    }
    row(
        "`wire::encoded_read` from the last read, 50 blocks typed in since",
        &stats(from_last),
        None,
    );
    row(
        "same, into the buffers of the read before last",
        &stats(into_before),
        None,
    );

    // --- Re-outline after a one-block edit ----------------------------------
    let paragraphs: Vec<u32> = outline
        .blocks()
        .filter(|b| &*b.kind == "paragraph")
        .map(|b| b.index as u32)
        .collect();
    let mut live = LiveOutline::new(&doc);
    // Read in full once, as the first refresh does, outside what is timed.
    live.refresh();
    let mut text_edit = Vec::new();
    let mut text_edit_full = Vec::new();
    for i in 0..1000 {
        let at = paragraphs[rng.below(paragraphs.len())];
        type_into(&doc, at, rng.below(120) as u32, " typed");
        let (d, _) = time(|| black_box(live.refresh().len()));
        text_edit.push(d);
        if i % 10 == 0 {
            let (d, now) = time(|| Outline::of_doc(&doc));
            text_edit_full.push(d);
            assert_eq!(*live.refresh(), now, "incremental outline diverged");
        }
    }
    row(
        "re-outline after typing in one block (`LiveOutline::refresh`)",
        &stats(text_edit),
        Some(("p50", Duration::from_micros(200))),
    );
    row(
        "same edit, full `Outline::of_doc` (for comparison)",
        &stats(text_edit_full),
        None,
    );

    let mut inserted = Vec::new();
    let mut removed = Vec::new();
    for i in 0..300 {
        let at = rng.below(BLOCKS) as u32;
        insert_paragraph(&doc, at, &sentence(&mut rng, 80, 200));
        inserted.push(time(|| black_box(live.refresh().len())).0);
        remove_block(&doc, rng.below(BLOCKS) as u32);
        removed.push(time(|| black_box(live.refresh().len())).0);
        if i % 30 == 0 {
            assert_eq!(*live.refresh(), Outline::of_doc(&doc));
        }
    }
    row(
        "re-outline after inserting one paragraph",
        &stats(inserted),
        None,
    );
    row("re-outline after deleting one block", &stats(removed), None);
    // Inserts and deletes moved blocks about: find the paragraphs again.
    let paragraphs: Vec<u32> = live
        .refresh()
        .blocks()
        .filter(|b| &*b.kind == "paragraph")
        .map(|b| b.index as u32)
        .collect();
    let mut copied = Vec::new();
    for _ in 0..50 {
        let read = live.snapshot();
        let at = paragraphs[rng.below(paragraphs.len())];
        type_into(&doc, at, 0, "typed ");
        copied.push(time(|| black_box(live.refresh().len())).0);
        drop(read);
    }
    row(
        "re-outline after typing, while a snapshot is held (copies the outline)",
        &stats(copied),
        None,
    );
    let snapshots: Vec<Duration> = (0..50)
        .map(|_| time(|| black_box(live.snapshot())).0)
        .collect();
    row(
        "`LiveOutline::snapshot` (remembering a read; no edit since)",
        &stats(snapshots),
        None,
    );

    // --- open_decisions, 32 cards, stale revision ---------------------------
    let doc = build_doc(BLOCKS, &mut Rng(0x1234_5678_9abc_def1));
    let mut reads = ReadCache::default();
    let read_at = 7;
    let read = Arc::new(Outline::of_doc(&doc));
    reads.remember(read_at, read.clone());
    // Addressable blocks: those whose digest is unique when read.
    let unique: Vec<usize> = read
        .blocks()
        .filter(|b| read.count_digest(&b.digest) == 1 && b.index > 0)
        .map(|b| b.index)
        .collect();
    let mut picks: Vec<usize> = (0..64).map(|_| unique[rng.below(unique.len())]).collect();
    picks.sort();
    picks.dedup();
    let cards: Vec<CardSpec> = (0..32)
        .map(|i| {
            let passages: Vec<Passage> = [picks[i], picks[(i + 32) % picks.len()]][..1 + i % 2]
                .iter()
                .map(|&index| Passage {
                    index,
                    digest: read.get(index).unwrap().digest,
                })
                .collect();
            CardSpec {
                key: Key::parse(&format!("plan/decision-{i}")).unwrap(),
                question: format!("Should we settle question {i} before the beta?"),
                description: Some("Context the Planner gives for this decision.".into()),
                response: ResponseKind::SingleChoice,
                choices: vec!["Yes".into(), "No".into(), "Later".into()],
                passages,
            }
        })
        .collect();
    // The document moved on: a paragraph typed at the top, another
    // unaddressed one rewritten, one deleted near the end.
    insert_paragraph(&doc, 0, "A paragraph someone typed after the read");
    let rewrite = (1..BLOCKS as u32)
        .find(|i| !picks.contains(&(*i as usize - 1)))
        .unwrap();
    type_into(&doc, rewrite + 10, 0, "Edited: ");
    remove_block(&doc, BLOCKS as u32 - 3);
    let now = Outline::of_doc(&doc);
    let state = DocumentState {
        revision: read_at + 3,
        outline: &now,
        reads: &reads,
    };
    let stored: HashMap<Key, margin_decisions::DecisionCard> = HashMap::new();
    let run = || {
        open_decisions(
            state,
            Access::Granted,
            |key| stored.get(key),
            read_at,
            &cards,
            Strictness::StaleAllowed,
        )
    };
    let first = run().expect("the stale batch is accepted");
    assert_eq!(first.len(), 32);
    for _ in 0..100 {
        black_box(run().ok());
    }
    let decisions: Vec<Duration> = (0..10_000)
        .map(|_| time(|| black_box(run().ok())).0)
        .collect();
    row(
        "`open_decisions`, 32 cards (48 passages), stale revision",
        &stats(decisions),
        Some(("p99", Duration::from_millis(1))),
    );

    // --- Hashing throughput vs blake3 ----------------------------------------
    println!();
    let buffer: Vec<u8> = (0..64 << 20)
        .map(|i: u32| (i.wrapping_mul(31) >> 3) as u8)
        .collect();
    black_box(blake3::hash(&buffer));
    let big = stats(
        (0..10)
            .map(|_| time(|| black_box(blake3::hash(black_box(&buffer)))).0)
            .collect(),
    );
    let blake3_gbps = gbps(buffer.len(), big.p50);
    let per_block = stats(
        (0..200)
            .map(|_| {
                time(|| {
                    for b in outline.blocks() {
                        black_box(Digest::of(&b.kind, &b.text));
                    }
                })
                .0
            })
            .collect(),
    );
    let block_gbps = gbps(bytes, per_block.p50);
    // blake3 on its own, on inputs of the blocks' sizes: the fair ceiling
    // for per-block digests (one input under 1 KiB is one chunk, hashed
    // block after block; the big buffer above hashes 16 chunks side by side).
    let messages: Vec<Vec<u8>> = outline
        .blocks()
        .map(|b| {
            let mut m = Vec::with_capacity(16 + b.kind.len() + b.text.len());
            m.extend_from_slice(&(b.kind.len() as u64).to_le_bytes());
            m.extend_from_slice(b.kind.as_bytes());
            m.extend_from_slice(&(b.text.len() as u64).to_le_bytes());
            m.extend_from_slice(b.text.as_bytes());
            m
        })
        .collect();
    let small = stats(
        (0..200)
            .map(|_| {
                time(|| {
                    for m in &messages {
                        black_box(blake3::hash(black_box(m)));
                    }
                })
                .0
            })
            .collect(),
    );
    let small_gbps = gbps(bytes, small.p50);
    // Where the rest of `of_doc`'s time goes: walking the tree and reading
    // the strings (yrs alone), and building the two maps.
    let walk = stats(
        (0..100)
            .map(|_| {
                time(|| {
                    let txn = doc.transact();
                    let fragment = txn.get_xml_fragment(FRAGMENT_NAME).unwrap();
                    let mut n = 0;
                    for node in fragment.children(&txn) {
                        if let XmlOut::Element(e) = node {
                            for child in e.children(&txn) {
                                if let XmlOut::Text(t) = child {
                                    let t: &yrs::TextRef = t.as_ref();
                                    n += t.get_string(&txn).len();
                                }
                            }
                        }
                    }
                    black_box(n)
                })
                .0
            })
            .collect(),
    );
    let ids = stats(
        (0..100)
            .map(|_| {
                time(|| {
                    let txn = doc.transact();
                    let fragment = txn.get_xml_fragment(FRAGMENT_NAME).unwrap();
                    let ids: Vec<_> = fragment.children(&txn).map(|node| node.id()).collect();
                    black_box(ids)
                })
                .0
            })
            .collect(),
    );
    let maps = stats(
        (0..100)
            .map(|_| {
                let blocks: Vec<Block> = outline.blocks().cloned().collect();
                let (d, built) = time(|| black_box(Outline::from_blocks(blocks)));
                drop(built);
                d
            })
            .collect(),
    );
    let outline_gbps = gbps(bytes, full.p50);
    println!("| hashing | bytes | p50 | GB/s | vs blake3 |");
    println!("|---|---|---|---|---|");
    println!(
        "| `blake3::hash`, one 64 MiB buffer (single core) | {} | {} | {blake3_gbps:.2} | 1.00 |",
        buffer.len(),
        fmt(big.p50)
    );
    println!(
        "| `blake3::hash`, the 10,000 block inputs one by one | {bytes} | {} | {small_gbps:.2} | {:.2} |",
        fmt(small.p50),
        small_gbps / blake3_gbps
    );
    println!(
        "| `Digest::of` over the 10,000 blocks (hashing only) | {bytes} | {} | {block_gbps:.2} | {:.2} |",
        fmt(per_block.p50),
        block_gbps / blake3_gbps
    );
    println!(
        "| `Outline::of_doc` (bytes hashed / whole outline time) | {bytes} | {} | {outline_gbps:.2} | {:.2} |",
        fmt(full.p50),
        outline_gbps / blake3_gbps
    );
    println!();
    println!("| `of_doc` breakdown (p50) | time |");
    println!("|---|---|");
    println!("| whole `Outline::of_doc` | {} |", fmt(full.p50));
    println!(
        "| of which hashing (`Digest::of` × 10,000) | {} |",
        fmt(per_block.p50)
    );
    println!(
        "| yrs alone: walk 10,000 blocks and read their strings | {} |",
        fmt(walk.p50)
    );
    println!(
        "| yrs alone: walk 10,000 blocks for their identities only (what a refresh after an insert or delete walks) | {} |",
        fmt(ids.p50)
    );
    println!(
        "| `Outline::from_blocks` (identity and digest maps) | {} |",
        fmt(maps.p50)
    );
    println!();
    println!("load average at end: {}", load().trim());
}
