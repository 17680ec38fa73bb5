//! Many Planners at once (SPEC O5): machines, each with one session on its
//! own small document, calling tools in a closed loop. Results and how to
//! read them: `server/benches/results/planners.md`.
//!
//! ```sh
//! cargo bench -p margin-server --bench planners
//! LEVELS=1,10 SECONDS=3 cargo bench -p margin-server --bench planners
//! ```
//!
//! One `margin serve` (fresh temp data dir, SQLite, defaults). `max(LEVELS)`
//! accounts, each with a paired machine and a document of `BLOCKS`
//! paragraphs, written before the server starts (the document filled
//! through `edit_plan` over HTTP after). Every machine links and
//! `@planner` starts a turn on its document. Then, for each level `N` of
//! `LEVELS`, `N` machines of its own (so every level starts on documents
//! with no cards) loop, one call in flight each, the way a Planner works:
//! `read_document`, then `edit_plan` (paragraph 0's text replaced, at the
//! revision read), then `open_decisions` (one yes/no card on the next
//! paragraph, at the revision the edit made) — `PASSES` times or for
//! `SECONDS`, whichever ends first, so that no document holds more cards
//! than a long planning session would (each card is also an entry of the
//! document's mirror, which grows its state). Round trip = `tool-call`
//! written → its `tool-result` read, on the machine's side; every call
//! must succeed.
//!
//! Per level: calls a second, each tool's p50 / p99, the server's CPU per
//! call, and commits per call — `margin_write_transactions_total` over
//! the level, a call's write-ahead record and its result or writes each
//! needing one alone; group commit shares them between machines. The
//! figure of merit is each tool's p99 at the largest level against its
//! p50 at one machine ("idle").
//!
//! Knobs (env vars): `MARGIN_BIN` (default `target/release/margin`),
//! `LEVELS` (`1,10,50,200`), `SECONDS` (10), `PASSES` (200), `BLOCKS` (20),
//! `THINK_MS` (0: a machine starts its next pass at once; a Planner
//! waiting on its model between passes is `THINK_MS` > 0),
//! `QUIET_WAIT_SECONDS` (60: before each level, wait up to this long for
//! the machine to be idle).

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{json, Value};

use support::accounts::{planners, Member};
use support::cpu::{settle, CpuSnap, ServerCpu};
use support::knobs::{env_list, env_or, require_open_files, under_cargo_bench};
use support::margin::{margin_bin, Margin};
use support::planner::{Api, Link, Turn};
use support::report::{percentile_ms, table_head, ReportFrame};

const TOOLS: [&str; 3] = ["read_document", "edit_plan", "open_decisions"];

#[tokio::main]
async fn main() {
    if under_cargo_bench("planners") {
        bench().await;
    }
}

/// One machine: its link and its turn.
struct Planner {
    link: Link,
    turn: Turn,
}

/// What one machine's loop measured: each tool's round trips.
#[derive(Default)]
struct Timed {
    calls: [Vec<Duration>; 3],
}

async fn bench() {
    let bin = margin_bin("planners");
    let levels: Vec<usize> = env_list("LEVELS", "1,10,50,200");
    let seconds: f64 = env_or("SECONDS", 10.0);
    let blocks: usize = env_or("BLOCKS", 20);
    let passes: usize = env_or("PASSES", 200);
    let think = Duration::from_millis(env_or("THINK_MS", 0));
    let machines: usize = levels.iter().sum();
    require_open_files("planners", 2 * machines as u64 + 256, "a link a machine");
    let frame = ReportFrame::start(
        &bin,
        format!(
            "LEVELS={} SECONDS={seconds} PASSES={passes} BLOCKS={blocks} THINK_MS={}",
            levels
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
            think.as_millis()
        ),
    );
    let data = tempfile::tempdir().expect("a temp data dir");
    let members = planners(data.path(), "planner", machines).await;
    let margin = Margin::start(&bin, data.path(), &[]).await;
    let api = Api::new(margin.addr);
    let started = Instant::now();
    let planners: Vec<Arc<Planner>> = join_all(members.iter().map(|m| join(&api, m, blocks)))
        .await
        .into_iter()
        .map(Arc::new)
        .collect();
    println!(
        "{machines} machines linked, each on a document of {blocks} paragraphs, in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let cpu = ServerCpu::Process(margin.pid);
    let mut out = String::new();
    frame.open(&mut out);
    out.push('\n');
    out.push_str(&table_head(
        "| machines | calls/s | `read_document` p50 / p99 ms | `edit_plan` p50 / p99 ms | `open_decisions` p50 / p99 ms | server CPU per call | commits per call | other CPU |",
    ));
    out.push('\n');
    let mut idle: Option<[f64; 3]> = None;
    let mut last: Option<[f64; 3]> = None;
    let mut first = 0;
    for (round, &n) in levels.iter().enumerate() {
        let level = &planners[first..first + n];
        first += n;
        settle(env_or("QUIET_WAIT_SECONDS", 60.0)).await;
        let commits = transactions(&api).await;
        let snap = CpuSnap::take(cpu);
        let until = Instant::now() + Duration::from_secs_f64(seconds);
        let began = Instant::now();
        let timed = join_all(level.iter().enumerate().map(|(i, p)| {
            let p = p.clone();
            let pass = Pass {
                round,
                i,
                of: n,
                blocks,
            };
            tokio::spawn(async move { work(&p, pass, passes, think, until).await })
        }))
        .await;
        let took = began.elapsed().as_secs_f64();
        let used = snap.since(cpu);
        let commits = transactions(&api).await - commits;
        let mut all = Timed::default();
        for t in timed.into_iter().map(|t| t.expect("a machine's loop")) {
            for (mine, tool) in all.calls.iter_mut().zip(t.calls) {
                mine.extend(tool);
            }
        }
        let calls: usize = all.calls.iter().map(Vec::len).sum();
        let p = |k: usize, q: f64| percentile_ms(&all.calls[k], q);
        if idle.is_none() {
            idle = Some([p(0, 50.0), p(1, 50.0), p(2, 50.0)]);
        }
        last = Some([p(0, 99.0), p(1, 99.0), p(2, 99.0)]);
        out.push_str(&format!(
            "| {n} | {:.0} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.0} µs | {:.2} | {} |\n",
            calls as f64 / took,
            p(0, 50.0),
            p(0, 99.0),
            p(1, 50.0),
            p(1, 99.0),
            p(2, 50.0),
            p(2, 99.0),
            used.server * 1e6 / calls.max(1) as f64,
            commits as f64 / calls.max(1) as f64,
            used.other_pct(),
        ));
    }
    if let (Some(idle), Some(last)) = (idle, last) {
        out.push_str(&format!(
            "\nAt {} machines each tool's p99 against its p50 at {} (the target: at most 4×): {}\n",
            levels.last().copied().unwrap_or(1),
            levels.first().copied().unwrap_or(1),
            TOOLS
                .iter()
                .zip(idle.iter().zip(last))
                .map(|(tool, (idle, last))| format!("`{tool}` {:.2}×", last / idle))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let stopped = margin.terminate().await;
    out.push_str(&format!("\nmargin {}\n", stopped.summary()));
    frame.close(&mut out);
    support::report::print_summary(&out);
}

/// Fills `member`'s document, links its machine and starts a turn there.
async fn join(api: &Api, member: &Member, blocks: usize) -> Planner {
    let document = member.document.as_deref().expect("a planner's document");
    let credential = member.credential.as_deref().expect("a planner's machine");
    api.fill(&member.token, document, blocks).await;
    let link = Link::open(api.addr(), credential).await;
    let turn = link.turn(api, &member.token, document, "p").await;
    Planner { link, turn }
}

/// Whose passes: machine `i` of the `of` of level `round`, on `blocks`
/// paragraphs.
#[derive(Clone, Copy)]
struct Pass {
    round: usize,
    i: usize,
    of: usize,
    blocks: usize,
}

/// A machine's loop, `passes` times or until `until`, `think` between
/// passes: read, edit, open.
async fn work(p: &Planner, pass: Pass, passes: usize, think: Duration, until: Instant) -> Timed {
    let Pass {
        round,
        i,
        of,
        blocks,
    } = pass;
    let mut timed = Timed::default();
    // Machines that think start spread over one thinking time, as agents
    // started at different moments would; all at once, they would stay in
    // step and every pass would be a burst.
    tokio::time::sleep(think.mul_f64(i as f64 / of.max(1) as f64)).await;
    let mut k = 0usize;
    while k < passes && Instant::now() < until {
        if k > 0 && !think.is_zero() {
            tokio::time::sleep(think).await;
        }
        let id = |tool: &str| format!("{}-{round}-{i}-{k}-{tool}", p.turn.prefix);
        let (took, read) = call(p, &id("read"), "read_document", json!({})).await;
        timed.calls[0].push(took);
        let first = &read["outline"][0];
        let edit = json!({
            "revision": read["revision"],
            "edits": [{"op": "replace", "at": {"index": 0, "digest": first["digest"]},
                       "text": format!("Machine {i}'s first paragraph, pass {round}.{k}.")}],
        });
        let (took, edited) = call(p, &id("edit"), "edit_plan", edit).await;
        timed.calls[1].push(took);
        let index = 1 + k % (blocks - 1).max(1);
        let open = json!({
            "revision": edited["revision"],
            "cards": [{
                "key": format!("pass-{round}-{k}"),
                "question": format!("Does pass {round}.{k} go ahead?"),
                "response": "yes_no",
                "passages": [{"index": index, "digest": read["outline"][index]["digest"]}],
            }],
        });
        let (took, opened) = call(p, &id("open"), "open_decisions", open).await;
        assert_eq!(
            opened["captures"][0]["status"], "created",
            "machine {i}: the card should be created: {opened}"
        );
        timed.calls[2].push(took);
        k += 1;
    }
    timed
}

/// Call `id` of `tool`: its round trip and its output; a refusal stops the
/// bench.
async fn call(p: &Planner, id: &str, tool: &str, arguments: Value) -> (Duration, Value) {
    let sent = p.link.send_call(&p.turn, id, tool, arguments);
    let (arrived, frame) = p.link.wait(id).await;
    let mut result: Value = serde_json::from_str(&frame).expect("a tool-result");
    assert!(result["error"].is_null(), "{tool} refused: {result}");
    (arrived - sent, result["output"].take())
}

/// `margin_write_transactions_total` now.
async fn transactions(api: &Api) -> u64 {
    api.metrics()
        .await
        .lines()
        .find_map(|line| line.strip_prefix("margin_write_transactions_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("margin_write_transactions_total in /metrics")
}
