//! The Planner's tool path: `read_document` and `open_decisions` end to
//! end over the machine link, on a large document with many decision
//! cards stored. Results and how to read them:
//! `server/benches/results/tools.md`.
//!
//! ```sh
//! cargo bench -p margin-server --bench tools
//! BLOCKS=2000 CARDS=100 READS=20 ROUNDS=10 cargo bench -p margin-server --bench tools
//! ```
//!
//! One `margin serve` (fresh temp data dir, SQLite unless `DATABASE_URL`
//! names a PostgreSQL database, defaults otherwise), one account with a
//! machine and a document of `BLOCKS` paragraphs written through
//! `edit_plan` over HTTP, and `CARDS` cards stored on it through
//! `open_decisions` over HTTP (one passage each). An editor has the
//! document open (a typist), and a second one watches it, so the server
//! keeps it loaded. Then the machine links and `@planner` starts a turn:
//!
//! 1. **`read_document` again**: `READS` calls in a closed loop (one in
//!    flight), each at the revision the last one read; round trip =
//!    `tool-call` written → its `tool-result` read. Reported with the
//!    result's frame size against the server's frame limit (64 MiB) and a
//!    machine's (1 MiB).
//! 2. **`open_decisions`**: `ROUNDS` rounds of: the Planner reads (over the
//!    link, timed apart as **`read_document` at a new revision**: the
//!    round before moved the document on), the typist types `STALE` edits
//!    into the last paragraph (each its own revision; the round waits until
//!    the watcher has them all, so they are committed), then the Planner
//!    opens `BATCH` new cards of `PASSAGES` passages each, addressed at the
//!    revision it read — stale by `STALE` — on paragraphs nobody else
//!    addressed. Timed is that call alone; every card must come back
//!    `created`, or the bench stops. Cards stored grow by `BATCH` a round.
//!
//! Knobs (env vars): `MARGIN_BIN` (default `target/release/margin`),
//! `DATABASE_URL`, `BLOCKS` (10000), `CARDS` (500), `READS` (100),
//! `ROUNDS` (50), `STALE` (50), `BATCH` (32), `PASSAGES` (4),
//! `QUIET_WAIT_SECONDS` (60: before each part, wait up to this long for
//! the machine to be idle).

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use margin_protocol::link::{MAX_FRAME_BYTES, MAX_SERVER_FRAME_BYTES};
use serde_json::{json, Value};

use support::cpu::{settle, CpuSnap, ServerCpu};
use support::knobs::{env_or, under_cargo_bench};
use support::margin::{margin_bin, Margin, Storage};
use support::planner::{account, Api, Link, Turn};
use support::report::{percentile_ms, table_head, ReportFrame};
use support::sync::SyncSocket;

#[tokio::main]
async fn main() {
    if under_cargo_bench("tools") {
        bench().await;
    }
}

struct Knobs {
    blocks: usize,
    cards: usize,
    reads: usize,
    rounds: usize,
    stale: usize,
    batch: usize,
    passages: usize,
}

impl Knobs {
    fn from_env() -> Knobs {
        Knobs {
            blocks: env_or("BLOCKS", 10_000),
            cards: env_or("CARDS", 500),
            reads: env_or("READS", 100),
            rounds: env_or("ROUNDS", 50),
            stale: env_or("STALE", 50),
            batch: env_or("BATCH", 32),
            passages: env_or("PASSAGES", 4),
        }
    }

    fn line(&self) -> String {
        format!(
            "BLOCKS={} CARDS={} READS={} ROUNDS={} STALE={} BATCH={} PASSAGES={}",
            self.blocks, self.cards, self.reads, self.rounds, self.stale, self.batch, self.passages
        )
    }
}

async fn bench() {
    let bin = margin_bin("tools");
    let knobs = Knobs::from_env();
    let frame = ReportFrame::start(&bin, knobs.line());
    let storage = Storage::from_env();
    let token = account(&bin, &storage.cli_args(), "planner");
    let margin = Margin::start(&bin, storage.data.path(), &storage.serve_args()).await;
    println!("storage: {}", storage.name());
    let api = Api::new(margin.addr);
    let credential = api.pair(&token, "laptop").await;
    let document = api.document(&token, "plan").await;
    let started = Instant::now();
    api.fill(&token, &document, knobs.blocks).await;
    let stored = store_cards(&api, &token, &document, knobs.cards).await;
    println!(
        "document: {} paragraphs and {stored} cards, written in {:.1} s",
        knobs.blocks,
        started.elapsed().as_secs_f64()
    );
    let url = format!(
        "ws://{}/documents/{document}/sync?token={token}",
        margin.addr
    );
    let patience = Duration::from_secs(30);
    let mut typist = SyncSocket::connect(&url, patience)
        .await
        .expect("the typist joins");
    let mut watcher = SyncSocket::connect(&url, patience)
        .await
        .expect("the watcher joins");
    let link = Link::open(margin.addr, &credential).await;
    let turn = link.turn(&api, &token, &document, "t").await;
    let cpu = ServerCpu::Process(margin.pid);

    settle(env_or("QUIET_WAIT_SECONDS", 60.0)).await;
    let snap = CpuSnap::take(cpu);
    let (reads, bytes) = read_loop(&link, &turn, knobs.reads).await;
    let read_cpu = snap.since(cpu);

    settle(env_or("QUIET_WAIT_SECONDS", 60.0)).await;
    let snap = CpuSnap::take(cpu);
    let mut opens = Vec::new();
    let mut fresh_reads = Vec::new();
    let mut next_block = knobs.cards;
    for round in 0..knobs.rounds {
        let (took, read) = read_over(&link, &turn, &format!("r{round}")).await;
        fresh_reads.push(took);
        for k in 0..knobs.stale {
            typist
                .type_in_last(&format!(" [{round}.{k}]"))
                .await
                .expect("typing");
        }
        let last = format!("[{round}.{}]", knobs.stale.saturating_sub(1));
        while knobs.stale > 0 && !watcher.last_text().contains(&last) {
            tokio::time::timeout(patience, watcher.next())
                .await
                .expect("the watcher hears the typing")
                .expect("the watcher reads");
        }
        let cards: Vec<Value> = (0..knobs.batch)
            .map(|k| {
                let passages: Vec<Value> = (0..knobs.passages)
                    .map(|_| {
                        // The last paragraph is the typist's.
                        let index = next_block % (knobs.blocks - 1);
                        next_block += 1;
                        json!({
                            "index": index,
                            "digest": read["outline"][index]["digest"],
                        })
                    })
                    .collect();
                json!({
                    "key": format!("round-{round}-card-{k}"),
                    "question": format!("Does round {round}, card {k} go ahead?"),
                    "response": "yes_no",
                    "passages": passages,
                })
            })
            .collect();
        let arguments = json!({ "revision": read["revision"], "cards": cards });
        let id = format!("t-open-{round}");
        let sent = link.send_call(&turn, &id, "open_decisions", arguments);
        let (arrived, result) = link.wait(&id).await;
        opens.push(arrived - sent);
        let output: Value = serde_json::from_str(&result).expect("a tool-result");
        let created = output["output"]["captures"]
            .as_array()
            .map_or(0, |c| c.iter().filter(|c| c["status"] == "created").count());
        assert_eq!(
            created, knobs.batch,
            "round {round}: every card should be created: {output}"
        );
    }
    let open_cpu = snap.since(cpu);

    let mut out = String::new();
    frame.open(&mut out);
    out.push('\n');
    out.push_str(&table_head(
        "| call | calls | p50 ms | p99 ms | max ms | server CPU per call or round |",
    ));
    out.push('\n');
    let row = |name: String, samples: &[Duration], cpu_seconds: f64| {
        format!(
            "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.2} ms |\n",
            samples.len(),
            percentile_ms(samples, 50.0),
            percentile_ms(samples, 99.0),
            percentile_ms(samples, 100.0),
            cpu_seconds * 1e3 / samples.len().max(1) as f64
        )
    };
    out.push_str(&row(
        format!("`read_document` again, {} blocks", knobs.blocks),
        &reads,
        read_cpu.server,
    ));
    out.push_str(&format!(
        "| `read_document` at a new revision, {} blocks | {} | {:.2} | {:.2} | {:.2} | (in the round's) |\n",
        knobs.blocks,
        fresh_reads.len(),
        percentile_ms(&fresh_reads, 50.0),
        percentile_ms(&fresh_reads, 99.0),
        percentile_ms(&fresh_reads, 100.0),
    ));
    out.push_str(&row(
        format!(
            "`open_decisions`, {} cards × {} passages, stale by {}, {}–{} cards stored",
            knobs.batch,
            knobs.passages,
            knobs.stale,
            stored,
            stored + knobs.batch * knobs.rounds
        ),
        &opens,
        open_cpu.server,
    ));
    out.push_str(&format!(
        "\n`read_document` result: {bytes} bytes in one frame ({} the server's {MAX_SERVER_FRAME_BYTES}-byte frame limit; {} a machine's {MAX_FRAME_BYTES}). An `open_decisions` round's server CPU includes its untimed read and the typing. Other CPU while reading {}, while opening {}\n",
        if bytes <= MAX_SERVER_FRAME_BYTES { "within" } else { "over" },
        if bytes <= MAX_FRAME_BYTES { "within" } else { "over" },
        read_cpu.other_pct(),
        open_cpu.other_pct(),
    ));
    let stopped = margin.terminate().await;
    out.push_str(&format!("\nmargin {}\n", stopped.summary()));
    frame.close(&mut out);
    support::report::print_summary(&out);
    typist.close().await;
    watcher.close().await;
}

/// Stores `count` cards on `document` through `open_decisions` over HTTP,
/// a full batch at a time, each on its own paragraph; how many.
async fn store_cards(api: &Api, token: &str, document: &str, count: usize) -> usize {
    let read = api.read(token, document).await;
    let path = format!("/documents/{document}/tools/open_decisions");
    let mut revision = read.revision;
    let mut stored = 0;
    while stored < count {
        let n = margin_decisions::limits::BATCH.min(count - stored);
        let cards: Vec<Value> = (stored..stored + n)
            .map(|i| {
                json!({
                    "key": format!("stored-{i}"),
                    "question": format!("Is paragraph {i} right?"),
                    "response": "yes_no",
                    "passages": [{ "index": i, "digest": read.outline[i].digest }],
                })
            })
            .collect();
        let opened = api
            .post(
                token,
                &path,
                &json!({ "revision": revision, "cards": cards }),
            )
            .await;
        revision = opened["revision"]
            .as_i64()
            .unwrap_or_else(|| panic!("open_decisions refused: {opened}"));
        stored += n;
    }
    stored
}

/// `read_document` in a closed loop, `count` times: each round trip, and
/// the result's size.
async fn read_loop(link: &Link, turn: &Turn, count: usize) -> (Vec<Duration>, usize) {
    // Warm: the outline's wire form and the first result.
    let mut bytes = 0;
    for k in 0..3 {
        bytes = link.read(turn, &format!("warm-{k}")).await;
    }
    let mut samples = Vec::with_capacity(count);
    for k in 0..count {
        let id = format!("{}-read-{k}", turn.prefix);
        let sent = link.send_call(turn, &id, "read_document", json!({}));
        let (arrived, _) = link.wait(&id).await;
        samples.push(arrived - sent);
    }
    (samples, bytes)
}

/// `read_document` as call `id`: its round trip, as [`read_loop`] times
/// it, and its output.
async fn read_over(link: &Link, turn: &Turn, id: &str) -> (Duration, Value) {
    let id = format!("{}-{id}", turn.prefix);
    let sent = link.send_call(turn, &id, "read_document", json!({}));
    let (arrived, frame) = link.wait(&id).await;
    let mut result: Value = serde_json::from_str(&frame).expect("a tool-result");
    (arrived - sent, result["output"].take())
}
