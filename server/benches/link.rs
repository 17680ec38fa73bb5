//! Machine-link benchmark (issue #4, Performance): the real `margin` binary
//! over loopback, with a peer figure from the same run. Results and how to
//! read them: `server/benches/results/link.md`.
//!
//! ```sh
//! cargo build --release -p margin-server --bin margin   # -> target/release/margin
//! ulimit -n 8192                                        # LINKS client sockets + as many in the server
//! cargo bench -p margin-server --bench link
//! LINKS=200 SECONDS=5 PARTS=rtt cargo bench -p margin-server --bench link
//! ```
//!
//! `cargo bench` builds `target/release/margin` itself (with the bench
//! profile, which is the release profile), so by default the server is this
//! checkout's. With `MARGIN_BIN`, mind that the bench writes accounts with
//! this checkout's `margin_server` storage code: a binary from other source
//! may not know the schema (it then fails to start, and the bench says so).
//!
//! Each part runs against a fresh `margin serve` (fresh temp data dir,
//! SQLite, `--listen 127.0.0.1:0`, `RUST_LOG=warn`, defaults otherwise):
//!
//! 1. **Tool-call round trip** (`PARTS` contains `rtt`): a machine with a
//!    live turn (`@planner` in Chat → `invoke`) calls `read_document` on a
//!    document of a heading and `PARAGRAPHS` paragraphs; round trip =
//!    `tool-call` written → its `tool-result` read, on the machine's side.
//!    Two Margin cases, each its own account, machine and document: the
//!    document open in nobody's editor (the server rebuilds it from storage
//!    for every read), and open in one (a sync client keeps it loaded). Each
//!    case runs paced (open loop: `RATE` calls/s for `SECONDS`; calls do not
//!    wait for results) and unpaced (closed loop: one call in flight, for
//!    `SECONDS`). The **peer** (`support::link_peer`) is a minimal
//!    tokio-tungstenite server in this process (its own runtime, as many
//!    worker threads as CPUs, like `margin`'s) that parses each
//!    `ClientMessage` and answers a `tool-call` with a `tool-result`
//!    carrying the `read_document` output Margin gave, so both send the
//!    same bytes: the floor cost of a WebSocket JSON round trip on this
//!    machine. The client code is the same for all three, and the runs
//!    alternate (every paced run, then every closed loop).
//! 2. **Memory per idle machine with one session** and 3. **concurrent
//!    links** (`PARTS` contains `links`): `LINKS` accounts, each with a paired
//!    machine and a document, are written to the store before the server
//!    starts (through `margin_server::storage::Store` and
//!    `margin_server::auth`, as `margin account add` / `machine pair` do).
//!    Then all `LINKS` machines connect at once (time to every `welcome`),
//!    each document gets `@planner …` in Chat (`HTTP_CONCURRENCY` posts in
//!    flight) and each machine answers its `invoke` with a reply, so every
//!    machine holds one session. The links then stay idle, answering
//!    heartbeats (every 15 s), for `HOLD_SECONDS`; at the end the bench
//!    checks no link closed, client side and server side
//!    (`GET /documents/{id}/planner` says `connected`). The server's memory
//!    (`/proc/PID/status` VmRSS and RssAnon, `/proc/PID/smaps_rollup` Pss)
//!    is read before the links, after them, after the sessions, after the
//!    hold, after every machine detached, after the detached sessions'
//!    leases ended, and with the same links opened and detached again
//!    (`RELINKS` times). Then the same
//!    burst of idle links goes to the peer, run as a child process (this
//!    binary with `LINK_BENCH_PEER=serve`), for its memory and open times.
//!
//! Knobs (env vars):
//!
//! | var | default | what |
//! |---|---|---|
//! | `MARGIN_BIN` | `target/release/margin` | the server binary |
//! | `PARTS` | `rtt,links` | which parts to run |
//! | `RATE` | `1000` | paced tool calls per second |
//! | `SECONDS` | `10` | length of the paced run and of the closed-loop run |
//! | `WARMUP` | `500` | closed-loop calls before measuring, per server |
//! | `PARAGRAPHS` | `20` | paragraphs (under one heading) in the document `read_document` reads, 1–63 |
//! | `REPEAT` | `1` | how many times the four round-trip runs are repeated |
//! | `LINKS` | `1000` | machines linked at once in parts 2 and 3 |
//! | `HOLD_SECONDS` | `35` | how long the links stay idle (≥ 2 heartbeats at 35 s) |
//! | `HTTP_CONCURRENCY` | `16` | Chat posts / planner checks in flight |
//! | `AFTER_DETACH_SECONDS` | `65` | after every machine detached, wait this long (the sessions' 60 s lease) before reading memory again |
//! | `RELINKS` | `1` | then open and detach the same `LINKS` links this many times more (no sessions), reading memory each time |
//! | `PEER_NODELAY` | `0` | `1` sets TCP_NODELAY on the peer's sockets (Margin's are left with Nagle on, axum's default) |
//! | `QUIET_WAIT_SECONDS` | `60` | before each measured run, wait up to this long for the machine to be idle (< ¼ core busy for 1 s) |
//!
//! Needs `LINKS` + 256 open files (`ulimit -n`); the bench says so and stops
//! when the limit is lower. CPU figures are from `/proc` (100 ticks/s): the
//! server's (Margin's process, or the peer runtime's threads), the client's
//! (this process minus the peer's threads) and other processes' ("other").
//! Only `cargo bench` runs it (it is not a test; `cargo test --benches` skips
//! it).

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use margin_protocol::decisions::{EditInput, EditPlanInput, ReadDocumentOutput};
use margin_protocol::link::{ClientMessage, ServerMessage};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use support::accounts::{planners, Member};
use support::cpu::{settle, CpuSnap, CpuUse, ServerCpu};
use support::knobs::{env_or, require_open_files, under_cargo_bench, Parts};
use support::link_peer;
use support::machine::{
    call, connect, frame, hello, keep_alive, next_message, send, tool_call, Frame, Ws, PATIENCE,
};
use support::margin::{margin_bin, Margin};
use support::peers::{self, PeerProcess};
use support::planner::Api;
use support::process::{loadavg, Mem, TcpCounters, ACCEPT_QUEUE};
use support::report::{ms, paired, percentile, print_summary, ratio, table_head, ReportFrame};
use support::schedule::Schedule;

/// Row labels.
const MARGIN_CLOSED: &str = "margin, doc not open";
const MARGIN_OPEN: &str = "margin, doc open";
const PEER: &str = "peer";

fn main() {
    if !under_cargo_bench("link") {
        return;
    }
    if std::env::var("LINK_BENCH_PEER").is_ok_and(|v| v == "serve") {
        link_peer::serve_as_child();
        return;
    }
    let config = Config::from_env();
    peers::client_runtime().block_on(run(config));
}

// ---------------------------------------------------------------- config

struct Config {
    bin: PathBuf,
    rtt: bool,
    links: bool,
    rate: u64,
    seconds: f64,
    warmup: usize,
    paragraphs: usize,
    repeat: usize,
    link_count: usize,
    hold_seconds: u64,
    http_concurrency: usize,
    quiet_wait: Duration,
    after_detach: Duration,
    relinks: usize,
}

impl Config {
    fn from_env() -> Config {
        let bin = margin_bin("link");
        let parts = Parts::from_env("rtt,links");
        let config = Config {
            bin,
            rtt: parts.has("rtt"),
            links: parts.has("links"),
            rate: env_or("RATE", 1000u64).max(1),
            seconds: env_or("SECONDS", 10.0f64).max(0.1),
            warmup: env_or("WARMUP", 500usize),
            paragraphs: env_or("PARAGRAPHS", 20usize).clamp(1, 63),
            repeat: env_or("REPEAT", 1usize).max(1),
            link_count: env_or("LINKS", 1000usize).max(1),
            hold_seconds: env_or("HOLD_SECONDS", 35u64),
            http_concurrency: env_or("HTTP_CONCURRENCY", 16usize).max(1),
            quiet_wait: Duration::from_secs(env_or("QUIET_WAIT_SECONDS", 60u64)),
            after_detach: Duration::from_secs(env_or("AFTER_DETACH_SECONDS", 65u64)),
            relinks: env_or("RELINKS", 1usize),
        };
        if config.links {
            require_open_files(
                "link",
                config.link_count as u64 + 256,
                &format!("LINKS={}", config.link_count),
            );
        }
        config
    }
}

// ---------------------------------------------------------------- main flow

async fn run(config: Config) {
    let mut report = Report::default();
    report.environment(&config);
    if config.rtt {
        round_trips(&config, &mut report).await;
    }
    if config.links {
        many_links(&config, &mut report).await;
    }
    print_summary(&report.render());
}

/// Waits (up to `budget`) until the machine has been nearly idle for a
/// second ([`settle`]); meanwhile `turns` answer their heartbeats
/// (a link left silent for three is closed, rightly). Returns the last
/// second's busy share, in cores.
async fn quiet(budget: Duration, turns: &mut [Turn]) -> f64 {
    let heartbeats = async {
        futures_util::future::join_all(turns.iter_mut().map(|turn| async {
            let why = keep_alive(&mut turn.ws).await;
            println!("  {} closed the link while idle: {why}", turn.server);
        }))
        .await;
        std::future::pending::<()>().await
    };
    tokio::select! {
        busy = settle(budget.as_secs_f64()) => busy,
        () = heartbeats => unreachable!("answering heartbeats never ends"),
    }
}

// ---------------------------------------------------------------- part 1: round trips

/// One measured run of tool calls.
#[derive(Clone, Debug, Default)]
struct RttRun {
    server: String,
    mode: String,
    rep: usize,
    sent: usize,
    results: usize,
    refused: usize,
    missing: usize,
    sent_rate: f64,
    achieved_rate: f64,
    rtt_sorted: Vec<Duration>,
    lag_p99: Duration,
    lag_max: Duration,
    result_bytes: usize,
    cpu: CpuUse,
    load: String,
}

impl RttRun {
    fn p(&self, p: f64) -> Duration {
        percentile(&self.rtt_sorted, p)
    }

    fn mean(&self) -> Duration {
        let n = u32::try_from(self.rtt_sorted.len()).unwrap_or(u32::MAX);
        self.rtt_sorted.iter().sum::<Duration>() / n.max(1)
    }

    fn server_us_per_call(&self) -> f64 {
        1e6 * self.cpu.server / self.results.max(1) as f64
    }

    /// p50, p90, p99, p99.9, max and mean round trip, in ms.
    fn latencies(&self) -> [String; 6] {
        let [p50, p90, p99, p999, max] =
            [50.0, 90.0, 99.0, 99.9, 100.0].map(|p| format!("{:.3}", ms(self.p(p))));
        [p50, p90, p99, p999, max, format!("{:.3}", ms(self.mean()))]
    }

    fn line(&self) -> String {
        let [p50, p90, p99, p999, max, mean] = self.latencies();
        format!(
            "{} {:<14} rep {}: sent {} ({:.0}/s), results {} ({:.0}/s), refused {}, missing {}; \
             rtt p50 {} p90 {} p99 {} p99.9 {} max {} mean {} ms; schedule lag p99 {:.3} max {:.3} ms; \
             server CPU {:.0}% ({:.1} µs/call), client {:.0}%, other {:.0}%; result frame {} B; load {}",
            self.server,
            self.mode,
            self.rep,
            self.sent,
            self.sent_rate,
            self.results,
            self.achieved_rate,
            self.refused,
            self.missing,
            p50,
            p90,
            p99,
            p999,
            max,
            mean,
            ms(self.lag_p99),
            ms(self.lag_max),
            self.cpu.pct(self.cpu.server),
            self.server_us_per_call(),
            self.cpu.pct(self.cpu.client),
            self.cpu.pct(self.cpu.other),
            self.result_bytes,
            self.load,
        )
    }
}

/// A link with a live turn to call tools in.
struct Turn {
    ws: Ws,
    session: String,
    turn: String,
    cpu: ServerCpu,
    server: String,
}

/// Every call id of this process is new: the server answers an id it has
/// seen from its journal, without running the call again (SPEC W1).
static CALLS: AtomicU64 = AtomicU64::new(0);

/// A run's call ids: `r{run}-c{k}`.
fn call_id(run: u64, k: usize) -> String {
    format!("r{run}-c{k}")
}

fn call_index(run: u64, call_id: &str) -> Option<usize> {
    call_id.strip_prefix(&format!("r{run}-c"))?.parse().ok()
}

/// Open loop: call `k` is due at `start + k / rate`, sent then whatever
/// came back; round trip = write → matching result read.
async fn paced(turn: &mut Turn, rate: u64, seconds: f64) -> RttRun {
    let total = ((rate as f64) * seconds).round().max(1.0) as usize;
    let mut sent_at: Vec<Option<Instant>> = vec![None; total];
    let mut rtt = Vec::with_capacity(total);
    let (mut results, mut refused, mut result_bytes) = (0usize, 0usize, 0usize);
    let run = CALLS.fetch_add(1, Ordering::Relaxed);
    let mut last_result = Instant::now();
    let snap = CpuSnap::take(turn.cpu);
    let mut schedule = Schedule::new(rate, total, Duration::from_millis(5));
    let start = schedule.start();
    let mut last_sent = start;
    while results + refused < total {
        let next_due = schedule.due();
        tokio::select! {
            biased;
            next_frame = turn.ws.next() => match frame(next_frame) {
                Frame::Message(ServerMessage::ToolResult { call_id, output, error, .. }, bytes) => {
                    let now = Instant::now();
                    let Some(sent) = call_index(run, &call_id).and_then(|k| sent_at.get(k).copied().flatten()) else {
                        continue;
                    };
                    rtt.push(now - sent);
                    last_result = now;
                    result_bytes = bytes;
                    if output.is_some() && error.is_none() { results += 1 } else { refused += 1 }
                }
                Frame::Message(ServerMessage::Heartbeat { seq }, _) => {
                    send(&mut turn.ws, &ClientMessage::HeartbeatAck { seq }).await.expect("heartbeat-ack");
                }
                Frame::Message(other, _) => println!("  unexpected during paced run: {other:?}"),
                Frame::Closed(why) => panic!("{} closed the link during the paced run: {why}", turn.server),
                Frame::Other => {}
            },
            _ = tokio::time::sleep_until(next_due.into()), if !schedule.done() => {
                let now = Instant::now();
                while let Some(k) = schedule.take(now) {
                    let message = tool_call(&turn.session, &turn.turn, call_id(run, k), "read_document", json!({}));
                    sent_at[k] = Some(Instant::now());
                    send(&mut turn.ws, &message).await.expect("tool-call write");
                    last_sent = Instant::now();
                }
            }
            _ = tokio::time::sleep(Duration::from_secs(30)), if schedule.done() => {
                println!("  {}: no result for 30 s; {} missing", turn.server, total - results - refused);
                break;
            }
        }
    }
    let cpu = snap.since(turn.cpu);
    rtt.sort_unstable();
    let (lag_p99, lag_max) = schedule.lag();
    let (first, next) = (start, schedule.sent());
    RttRun {
        server: turn.server.clone(),
        mode: format!("paced {rate}/s"),
        rep: 0,
        sent: next,
        results,
        refused,
        missing: total - results - refused,
        sent_rate: (next as f64 - 1.0).max(1.0) / (last_sent - first).as_secs_f64().max(1e-9),
        achieved_rate: (results + refused) as f64 / (last_result - first).as_secs_f64().max(1e-9),
        rtt_sorted: rtt,
        lag_p99,
        lag_max,
        result_bytes,
        cpu,
        load: loadavg(),
    }
}

/// Closed loop: one call in flight, the next written when the last result
/// is read, for `seconds` (or `count` calls when given).
async fn closed_loop(turn: &mut Turn, seconds: f64, count: Option<usize>) -> RttRun {
    let snap = CpuSnap::take(turn.cpu);
    let start = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    let mut rtt = Vec::new();
    let (mut sent, mut results, mut refused, mut result_bytes) = (0usize, 0usize, 0usize, 0usize);
    let run = CALLS.fetch_add(1, Ordering::Relaxed);
    loop {
        match count {
            Some(count) if sent >= count => break,
            None if start.elapsed() >= budget => break,
            _ => {}
        }
        let id = call_id(run, sent);
        let message = tool_call(
            &turn.session,
            &turn.turn,
            id.clone(),
            "read_document",
            json!({}),
        );
        let at = Instant::now();
        send(&mut turn.ws, &message).await.expect("tool-call write");
        sent += 1;
        loop {
            match frame(turn.ws.next().await) {
                Frame::Message(
                    ServerMessage::ToolResult {
                        call_id,
                        output,
                        error,
                        ..
                    },
                    bytes,
                ) if call_id == id => {
                    rtt.push(at.elapsed());
                    result_bytes = bytes;
                    if output.is_some() && error.is_none() {
                        results += 1
                    } else {
                        refused += 1
                    }
                    break;
                }
                Frame::Message(ServerMessage::Heartbeat { seq }, _) => {
                    send(&mut turn.ws, &ClientMessage::HeartbeatAck { seq })
                        .await
                        .expect("heartbeat-ack");
                }
                Frame::Message(other, _) => println!("  unexpected during closed loop: {other:?}"),
                Frame::Closed(why) => panic!(
                    "{} closed the link during the closed loop: {why}",
                    turn.server
                ),
                Frame::Other => {}
            }
        }
    }
    let wall = start.elapsed().as_secs_f64().max(1e-9);
    let cpu = snap.since(turn.cpu);
    rtt.sort_unstable();
    RttRun {
        server: turn.server.clone(),
        mode: "closed loop".into(),
        rep: 0,
        sent,
        results,
        refused,
        missing: 0,
        sent_rate: sent as f64 / wall,
        achieved_rate: (results + refused) as f64 / wall,
        rtt_sorted: rtt,
        lag_p99: Duration::ZERO,
        lag_max: Duration::ZERO,
        result_bytes,
        cpu,
        load: loadavg(),
    }
}

/// A new id for a setup call of `name`.
fn setup_call_id(name: &str) -> String {
    format!("setup-{name}-{}", CALLS.fetch_add(1, Ordering::Relaxed))
}

/// `read_document` in turn `live`, waited for: its output and frame size.
async fn read_document(ws: &mut Ws, live: (&str, &str)) -> (Value, usize) {
    let id = setup_call_id("read_document");
    let (output, bytes) = call(ws, live, id, "read_document", json!({}))
        .await
        .expect("read_document");
    (output.expect("read_document refused"), bytes)
}

/// Links `member`'s machine to Margin, starts a turn on its document with
/// `@planner`, and fills the document with a heading and `paragraphs`
/// paragraphs. With `viewer`, a sync client keeps the document open (as an
/// editor tab would) until the returned guard is dropped. Returns the turn
/// and the output of a `read_document` with its frame size.
async fn margin_turn(
    margin: &Margin,
    api: &Api,
    member: &Member,
    label: &str,
    paragraphs: usize,
    viewer: bool,
) -> (Turn, Value, usize, Option<tokio::task::JoinHandle<()>>) {
    let document = member.document.clone().expect("document made");
    let viewer = if viewer {
        Some(support::sync::viewer(margin.addr, &document, &member.token).await)
    } else {
        None
    };
    let mut ws = connect(margin.addr, member.credential.as_deref())
        .await
        .expect("link to margin");
    hello(&mut ws).await.expect("margin's welcome");
    api.chat(
        &member.token,
        &document,
        "@planner benchmark the tools, please",
    )
    .await
    .expect("chat post");
    let (session, turn) = loop {
        match next_message(&mut ws).await.expect("an invoke") {
            (ServerMessage::Invoke { session, turn, .. }, _) => break (session, turn),
            (other, _) => println!("  before invoke: {other:?}"),
        }
    };
    let live = (session.as_str(), turn.as_str());
    let (read, _) = read_document(&mut ws, live).await;
    let read: ReadDocumentOutput = serde_json::from_value(read).expect("read_document output");
    let mut edits = vec![EditInput::Insert {
        after: None,
        kind: "heading".into(),
        level: Some(1),
        text: "Q3 launch plan".into(),
    }];
    for i in 1..=paragraphs {
        edits.push(EditInput::Insert {
            after: None,
            kind: "paragraph".into(),
            level: None,
            text: format!(
                "Step {i}: agree the launch region, the budget line and the owner of this workstream before the review on Thursday."
            ),
        });
    }
    let edit = EditPlanInput {
        revision: read.revision,
        edits,
    };
    let (edited, _) = call(
        &mut ws,
        live,
        setup_call_id("edit_plan"),
        "edit_plan",
        serde_json::to_value(&edit).expect("edit input"),
    )
    .await
    .expect("edit_plan");
    edited.unwrap_or_else(|r| panic!("edit_plan refused: {r}"));
    let (output, bytes) = read_document(&mut ws, live).await;
    let turn = Turn {
        ws,
        session,
        turn,
        cpu: ServerCpu::Process(margin.pid),
        server: label.into(),
    };
    (turn, output, bytes, viewer)
}

async fn round_trips(config: &Config, report: &mut Report) {
    println!("\n== part 1: tool-call round trip (read_document in a live turn) ==");
    let dir = tempfile::tempdir().expect("cannot make a temp dir");
    // Two accounts: one document nobody has open, one open in an "editor".
    let members = planners(dir.path(), "rtt", 2).await;
    let margin = Margin::start(&config.bin, dir.path(), &[]).await;
    println!(
        "margin {} listening on {} (pid {})",
        config.bin.display(),
        margin.addr,
        margin.pid
    );
    let api = Api::new(margin.addr);

    let (closed_doc, output, bytes, _) = margin_turn(
        &margin,
        &api,
        &members[0],
        MARGIN_CLOSED,
        config.paragraphs,
        false,
    )
    .await;
    let (open_doc, _, _, viewer) = margin_turn(
        &margin,
        &api,
        &members[1],
        MARGIN_OPEN,
        config.paragraphs,
        true,
    )
    .await;
    let blocks = output["outline"].as_array().map_or(0, Vec::len);
    println!(
        "each document has {blocks} blocks; a read_document tool-result frame is {bytes} bytes"
    );
    report.rtt_doc = format!("{blocks} blocks, tool-result frame {bytes} bytes");

    // The peer answers with the same output, so the same bytes.
    let peer_addr = link_peer::start(output);
    let mut peer_ws = connect(peer_addr, None).await.expect("link to the peer");
    hello(&mut peer_ws).await.expect("the peer's welcome");
    let peer = Turn {
        ws: peer_ws,
        session: closed_doc.session.clone(),
        turn: closed_doc.turn.clone(),
        cpu: ServerCpu::Peer,
        server: PEER.into(),
    };

    let mut turns = [closed_doc, open_doc, peer];
    for turn in turns.iter_mut() {
        let warm = closed_loop(turn, 0.0, Some(config.warmup)).await;
        println!(
            "{} warm-up: {} calls, p50 {:.3} ms",
            turn.server,
            warm.results,
            ms(warm.p(50.0))
        );
    }
    for rep in 1..=config.repeat {
        for i in 0..turns.len() {
            quiet(config.quiet_wait, &mut turns).await;
            let turn = &mut turns[i];
            let mut run = paced(turn, config.rate, config.seconds).await;
            run.rep = rep;
            println!("{}", run.line());
            report.rtt.push(run);
        }
        for i in 0..turns.len() {
            quiet(config.quiet_wait, &mut turns).await;
            let turn = &mut turns[i];
            let mut run = closed_loop(turn, config.seconds, None).await;
            run.rep = rep;
            println!("{}", run.line());
            report.rtt.push(run);
        }
    }

    // End the turns properly.
    for turn in turns.iter_mut() {
        if turn.server != PEER {
            let reply = ClientMessage::Reply {
                session: turn.session.clone(),
                turn: turn.turn.clone(),
                text: "Benchmarked the document tools.".into(),
            };
            send(&mut turn.ws, &reply).await.expect("reply");
        }
        let _ = send(&mut turn.ws, &ClientMessage::Detach {}).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    if let Some(viewer) = viewer {
        viewer.abort();
    }
    report.rtt_server_mem = Mem::of(margin.pid);
    let stopped = margin.terminate().await;
    report
        .frame
        .logs
        .push(format!("round-trip server: {}", stopped.log_line()));
    println!(
        "round-trip server stopped in {:?} ({})",
        stopped.took, stopped.status
    );
}

// ---------------------------------------------------------------- parts 2 and 3: many links

#[derive(Default)]
struct LinkStats {
    heartbeats: AtomicU64,
    invokes: AtomicU64,
    replies: AtomicU64,
    refusals: AtomicU64,
    closed: AtomicU64,
    close_reasons: Mutex<BTreeMap<String, usize>>,
}

impl LinkStats {
    fn closed_because(&self, why: String) {
        self.closed.fetch_add(1, Ordering::Relaxed);
        *self
            .close_reasons
            .lock()
            .expect("close reasons lock")
            .entry(why)
            .or_default() += 1;
    }
}

/// One idle machine: opens its link, reports when `welcome` came, answers
/// heartbeats and `invoke`s, and detaches when `stop` fires. Returns
/// whether the link was still open when told to stop.
async fn idle_machine(
    addr: SocketAddr,
    credential: Option<String>,
    burst: Instant,
    stats: Arc<LinkStats>,
    opened: tokio::sync::mpsc::UnboundedSender<Result<(Duration, Duration), String>>,
    stop: CancellationToken,
) -> bool {
    let started = Instant::now();
    let mut ws = match connect(addr, credential.as_deref()).await {
        Ok(ws) => ws,
        Err(e) => {
            let _ = opened.send(Err(e));
            return false;
        }
    };
    if let Err(e) = hello(&mut ws).await {
        let _ = opened.send(Err(e));
        return false;
    }
    let now = Instant::now();
    let _ = opened.send(Ok((now - started, now - burst)));
    loop {
        tokio::select! {
            _ = stop.cancelled() => {
                let _ = send(&mut ws, &ClientMessage::Detach {}).await;
                // Wait for the server's close (1000), briefly.
                let _ = tokio::time::timeout(Duration::from_secs(10), async {
                    while let Some(Ok(message)) = ws.next().await {
                        if matches!(message, Message::Close(_)) { break; }
                    }
                }).await;
                return true;
            }
            next = ws.next() => match frame(next) {
                Frame::Message(ServerMessage::Heartbeat { seq }, _) => {
                    stats.heartbeats.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = send(&mut ws, &ClientMessage::HeartbeatAck { seq }).await {
                        stats.closed_because(e);
                        return false;
                    }
                }
                Frame::Message(ServerMessage::Invoke { session, turn, .. }, _) => {
                    stats.invokes.fetch_add(1, Ordering::Relaxed);
                    let reply = ClientMessage::Reply { session, turn, text: "Noted; nothing to change yet.".into() };
                    if let Err(e) = send(&mut ws, &reply).await {
                        stats.closed_because(e);
                        return false;
                    }
                    stats.replies.fetch_add(1, Ordering::Relaxed);
                }
                Frame::Message(ServerMessage::Refusal { .. }, _) => {
                    stats.refusals.fetch_add(1, Ordering::Relaxed);
                }
                Frame::Message(_, _) | Frame::Other => {}
                Frame::Closed(why) => {
                    stats.closed_because(why);
                    return false;
                }
            }
        }
    }
}

/// A burst of links opened at once.
#[derive(Default)]
struct Burst {
    opened: usize,
    failed: usize,
    failures: BTreeMap<String, usize>,
    /// Burst start → the last `welcome`.
    all_welcomed: Duration,
    /// Connect → `welcome` per link, sorted.
    open_sorted: Vec<Duration>,
    /// The kernel's [`ACCEPT_QUEUE`] counters during the burst
    /// (machine-wide).
    tcp: [u64; ACCEPT_QUEUE.len()],
}

/// Spawns one [`idle_machine`] per credential, all at once, and waits for
/// every `welcome` (or failure). The tasks keep running until `stop`.
async fn burst(
    addr: SocketAddr,
    credentials: Vec<Option<String>>,
    stats: &Arc<LinkStats>,
    stop: &CancellationToken,
) -> (Burst, Vec<tokio::task::JoinHandle<bool>>) {
    let n = credentials.len();
    let (opened_tx, mut opened_rx) = tokio::sync::mpsc::unbounded_channel();
    let tcp_before = TcpCounters::now(ACCEPT_QUEUE);
    let start = Instant::now();
    let tasks: Vec<_> = credentials
        .into_iter()
        .map(|credential| {
            tokio::spawn(idle_machine(
                addr,
                credential,
                start,
                stats.clone(),
                opened_tx.clone(),
                stop.clone(),
            ))
        })
        .collect();
    drop(opened_tx);
    let mut result = Burst::default();
    let mut open = Vec::with_capacity(n);
    for _ in 0..n {
        match tokio::time::timeout(PATIENCE, opened_rx.recv()).await {
            Ok(Some(Ok((took, since_start)))) => {
                open.push(took);
                result.all_welcomed = result.all_welcomed.max(since_start);
            }
            Ok(Some(Err(e))) => {
                result.failed += 1;
                *result.failures.entry(e).or_default() += 1;
            }
            Ok(None) => break,
            Err(_) => {
                println!("no welcome for 60 s; giving up waiting");
                break;
            }
        }
    }
    open.sort_unstable();
    result.opened = open.len();
    result.open_sorted = open;
    result.tcp = tcp_before.since().values;
    println!(
        "{} of {n} links welcomed ({} failed) in {:?}; open p50 {:.3} p99 {:.3} max {:.3} ms; TCP {:?}",
        result.opened,
        result.failed,
        result.all_welcomed,
        ms(percentile(&result.open_sorted, 50.0)),
        ms(percentile(&result.open_sorted, 99.0)),
        ms(percentile(&result.open_sorted, 100.0)),
        ACCEPT_QUEUE.iter().zip(result.tcp).collect::<Vec<_>>(),
    );
    if !result.failures.is_empty() {
        println!("  failures: {:?}", result.failures);
    }
    (result, tasks)
}

/// The peer process under the same burst of idle links.
#[derive(Default)]
struct PeerLinks {
    burst: Burst,
    mem_start: Mem,
    mem_links: Mem,
    closed: u64,
}

/// What part 2/3 measured.
#[derive(Default)]
struct LinksResult {
    links: usize,
    setup: Duration,
    burst: Burst,
    peer: PeerLinks,
    sessions: Duration,
    invokes: u64,
    replies: u64,
    hold: Duration,
    hold_cpu: CpuUse,
    heartbeats: u64,
    refusals: u64,
    closed_during: u64,
    close_reasons: BTreeMap<String, usize>,
    connected: usize,
    replying: usize,
    check_errors: usize,
    still_open: usize,
    detach: Duration,
    mem_start: Mem,
    mem_links: Mem,
    mem_sessions: Mem,
    mem_hold: Mem,
    mem_detached: Mem,
    mem_released: Mem,
    /// Per relink cycle: links opened, memory with them open, after detach.
    relinks: Vec<(usize, Mem, Mem)>,
    shutdown: Duration,
    shutdown_status: String,
    load_start: String,
    load_end: String,
}

async fn many_links(config: &Config, report: &mut Report) {
    let n = config.link_count;
    println!("\n== parts 2 and 3: {n} machines linked at once, one session each ==");
    let mut result = LinksResult {
        links: n,
        load_start: loadavg(),
        ..Default::default()
    };
    let dir = tempfile::tempdir().expect("cannot make a temp dir");
    let setup = Instant::now();
    let members = planners(dir.path(), "m", n).await;
    result.setup = setup.elapsed();
    println!(
        "{n} accounts, machines and documents written in {:?}",
        result.setup
    );

    let margin = Margin::start(&config.bin, dir.path(), &[]).await;
    let api = Arc::new(Api::new(margin.addr));
    // A request, so the HTTP path is warm before the baseline.
    let _: Value = api.get(&members[0].token, "/me").await.expect("GET /me");
    tokio::time::sleep(Duration::from_secs(2)).await;
    result.mem_start = Mem::of(margin.pid);
    println!("baseline: {:?}", result.mem_start);
    quiet(config.quiet_wait, &mut []).await;
    result.load_start = loadavg();

    // Part 3: every machine connects at once.
    let stats = Arc::new(LinkStats::default());
    let stop = CancellationToken::new();
    let credentials = members.iter().map(|m| m.credential.clone()).collect();
    let (opened, tasks) = burst(margin.addr, credentials, &stats, &stop).await;
    result.burst = opened;
    tokio::time::sleep(Duration::from_secs(2)).await;
    result.mem_links = Mem::of(margin.pid);
    println!("after links: {:?}", result.mem_links);

    // Part 2: one session per machine.
    let started = Instant::now();
    let posted = futures_util::stream::iter(members.iter().cloned())
        .map(|m| {
            let api = api.clone();
            async move {
                let document = m.document.expect("document made");
                api.chat(&m.token, &document, "@planner have a look at this plan")
                    .await
            }
        })
        .buffer_unordered(config.http_concurrency)
        .filter(|r| std::future::ready(r.is_err()))
        .collect::<Vec<_>>()
        .await;
    if !posted.is_empty() {
        println!("{} chat posts failed, first: {:?}", posted.len(), posted[0]);
    }
    let want = result.burst.opened as u64;
    let deadline = Instant::now() + PATIENCE;
    while stats.replies.load(Ordering::Relaxed) < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    result.sessions = started.elapsed();
    result.invokes = stats.invokes.load(Ordering::Relaxed);
    result.replies = stats.replies.load(Ordering::Relaxed);
    println!(
        "{} invokes answered with a reply in {:?} (chat posts → replies)",
        result.replies, result.sessions
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    result.mem_sessions = Mem::of(margin.pid);
    println!("after sessions: {:?}", result.mem_sessions);

    // Idle, answering heartbeats.
    println!(
        "holding {} links idle for {} s…",
        result.burst.opened, config.hold_seconds
    );
    let snap = CpuSnap::take(ServerCpu::Process(margin.pid));
    tokio::time::sleep(Duration::from_secs(config.hold_seconds)).await;
    result.hold_cpu = snap.since(ServerCpu::Process(margin.pid));
    result.hold = result.hold_cpu.wall;
    result.mem_hold = Mem::of(margin.pid);
    result.heartbeats = stats.heartbeats.load(Ordering::Relaxed);
    result.refusals = stats.refusals.load(Ordering::Relaxed);
    result.closed_during = stats.closed.load(Ordering::Relaxed);
    result.close_reasons = stats
        .close_reasons
        .lock()
        .expect("close reasons lock")
        .clone();

    // The server's view: every document's Planner is still connected.
    let views = futures_util::stream::iter(members.iter().cloned())
        .map(|m| {
            let api = api.clone();
            async move {
                let document = m.document.expect("document made");
                api.planner(&m.token, &document).await
            }
        })
        .buffer_unordered(config.http_concurrency)
        .collect::<Vec<_>>()
        .await;
    for view in views {
        match view {
            Ok(view) => {
                result.connected += usize::from(view.connected);
                result.replying += usize::from(view.replying);
            }
            Err(_) => result.check_errors += 1,
        }
    }
    println!(
        "after the hold: {} heartbeats answered, {} closed, {} refusals; server says {} of {n} Planners connected ({} still replying, {} check errors); {:?}",
        result.heartbeats,
        result.closed_during,
        result.refusals,
        result.connected,
        result.replying,
        result.check_errors,
        result.mem_hold
    );

    // Detach everyone, then stop the server.
    let detach = Instant::now();
    stop.cancel();
    for task in tasks {
        if let Ok(true) = task.await {
            result.still_open += 1;
        }
    }
    result.detach = detach.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    result.mem_detached = Mem::of(margin.pid);
    println!(
        "{} links were open at the end and detached in {:?}; after: {:?}",
        result.still_open, result.detach, result.mem_detached
    );
    // A detached session is leased for MARGIN_PLANNER_ATTACH_GRACE_MS (60 s by
    // default) before it ends; wait that out and look again.
    let released_at = detach + config.after_detach;
    println!(
        "waiting {} s after the detach for the sessions' leases to end…",
        config.after_detach.as_secs()
    );
    tokio::time::sleep_until(released_at.into()).await;
    result.mem_released = Mem::of(margin.pid);
    println!("leases over: {:?}", result.mem_released);
    // Is what the links held reused? The same burst again (no sessions),
    // then everyone detaches again; RELINKS times.
    for cycle in 1..=config.relinks {
        let stats = Arc::new(LinkStats::default());
        let stop = CancellationToken::new();
        let credentials = members.iter().map(|m| m.credential.clone()).collect();
        let (again, tasks) = burst(margin.addr, credentials, &stats, &stop).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let linked = Mem::of(margin.pid);
        stop.cancel();
        for task in tasks {
            let _ = task.await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let detached = Mem::of(margin.pid);
        println!(
            "relink {cycle}: {} linked, then detached: {linked:?} → {detached:?}",
            again.opened
        );
        result.relinks.push((again.opened, linked, detached));
    }
    let stopped = margin.terminate().await;
    report
        .frame
        .logs
        .push(format!("links server: {}", stopped.log_line()));
    result.shutdown = stopped.took;
    result.shutdown_status = stopped.status;
    println!(
        "links server stopped in {:?} ({})",
        result.shutdown, result.shutdown_status
    );

    // The peer process under the same burst: the floor of an idle link.
    println!("the same {n} links against the peer process:");
    let peer = PeerProcess::start("LINK_BENCH_PEER").await;
    quiet(config.quiet_wait, &mut []).await;
    result.peer.mem_start = Mem::of(peer.pid);
    let stats = Arc::new(LinkStats::default());
    let stop = CancellationToken::new();
    let (opened, tasks) = burst(peer.addr, vec![None; n], &stats, &stop).await;
    result.peer.burst = opened;
    tokio::time::sleep(Duration::from_secs(2)).await;
    result.peer.mem_links = Mem::of(peer.pid);
    result.peer.closed = stats.closed.load(Ordering::Relaxed);
    println!(
        "peer: {:?} → {:?}",
        result.peer.mem_start, result.peer.mem_links
    );
    stop.cancel();
    for task in tasks {
        let _ = task.await;
    }
    peer.stop().await;
    result.load_end = loadavg();
    report.links = Some(result);
}

// ---------------------------------------------------------------- report

#[derive(Default)]
struct Report {
    frame: ReportFrame,
    rtt_doc: String,
    rtt: Vec<RttRun>,
    rtt_server_mem: Mem,
    links: Option<LinksResult>,
}

impl Report {
    fn environment(&mut self, config: &Config) {
        self.frame = ReportFrame::start(
            &config.bin,
format!(
            "config: RATE={} SECONDS={} WARMUP={} PARAGRAPHS={} REPEAT={} LINKS={} HOLD_SECONDS={} HTTP_CONCURRENCY={} QUIET_WAIT_SECONDS={} AFTER_DETACH_SECONDS={} RELINKS={} PEER_NODELAY={} parts:{}{}",
            config.rate,
            config.seconds,
            config.warmup,
            config.paragraphs,
            config.repeat,
            config.link_count,
            config.hold_seconds,
            config.http_concurrency,
            config.quiet_wait.as_secs(),
            config.after_detach.as_secs(),
            config.relinks,
            std::env::var("PEER_NODELAY").unwrap_or_else(|_| "0".into()),
            if config.rtt { " rtt" } else { "" },
            if config.links { " links" } else { "" },
        ),
        );
    }

    fn render(&self) -> String {
        let mut out = String::new();
        self.frame.open(&mut out);
        if !self.rtt.is_empty() {
            let _ = writeln!(
                out,
                "\n### Tool-call round trip (`read_document`, {})\n",
                self.rtt_doc
            );
            let _ = writeln!(out, "{}", table_head("| rep | server | mode | calls | sent/s | results/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | mean ms | refused | missing | server CPU | server µs/call | client CPU | other CPU | load avg |"));
            for r in &self.rtt {
                let [p50, p90, p99, p999, max, mean] = r.latencies();
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0}% | {:.1} | {:.0}% | {:.0}% | {} |",
                    r.rep,
                    r.server,
                    r.mode,
                    r.sent,
                    r.sent_rate,
                    r.achieved_rate,
                    p50,
                    p90,
                    p99,
                    p999,
                    max,
                    mean,
                    r.refused,
                    r.missing,
                    r.cpu.pct(r.cpu.server),
                    r.server_us_per_call(),
                    r.cpu.pct(r.cpu.client),
                    r.cpu.pct(r.cpu.other),
                    r.load,
                );
            }
            let paced_lag: Vec<String> = self
                .rtt
                .iter()
                .filter(|r| r.mode.starts_with("paced"))
                .map(|r| {
                    format!(
                        "{} rep {}: p99 {:.3} ms, max {:.3} ms",
                        r.server,
                        r.rep,
                        ms(r.lag_p99),
                        ms(r.lag_max)
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "\nPaced schedule lag (send time − due time): {}.",
                paced_lag.join("; ")
            );
            let _ = writeln!(out, "\n{}", table_head("| rep | server | mode | Margin/peer p50 | Margin/peer p99 | Margin/peer max | Margin/peer results/s | Margin/peer server µs/call |"));
            let pairs = paired(
                &self.rtt,
                |r| r.server != PEER,
                |m, p| p.server == PEER && p.mode == m.mode && p.rep == m.rep,
            );
            for (m, p) in pairs {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    m.rep,
                    m.server,
                    m.mode,
                    ratio(ms(m.p(50.0)), ms(p.p(50.0))),
                    ratio(ms(m.p(99.0)), ms(p.p(99.0))),
                    ratio(ms(m.p(100.0)), ms(p.p(100.0))),
                    ratio(m.achieved_rate, p.achieved_rate),
                    ratio(m.server_us_per_call(), p.server_us_per_call()),
                );
            }
            let _ = writeln!(
                out,
                "\nRound-trip server at the end: RSS {} KiB (RssAnon {} KiB, peak {} KiB), {} threads.",
                self.rtt_server_mem.rss_kib,
                self.rtt_server_mem.anon_kib,
                self.rtt_server_mem.hwm_kib,
                self.rtt_server_mem.threads
            );
        }
        if let Some(l) = &self.links {
            let n = l.burst.opened.max(1) as f64;
            let pn = l.peer.burst.opened.max(1) as f64;
            let _ = writeln!(
                out,
                "\n### {} machine links at once, one session each\n",
                l.links
            );
            let _ = writeln!(
                out,
                "| links opened at once | Margin | peer | Margin/peer |\n|---|---|---|---|"
            );
            let _ = writeln!(
                out,
                "| welcomed / failed | {} / {} | {} / {} | |",
                l.burst.opened, l.burst.failed, l.peer.burst.opened, l.peer.burst.failed
            );
            let _ = writeln!(
                out,
                "| burst start → last `welcome` | {:.0} ms | {:.0} ms | {} |",
                l.burst.all_welcomed.as_secs_f64() * 1e3,
                l.peer.burst.all_welcomed.as_secs_f64() * 1e3,
                ratio(
                    l.burst.all_welcomed.as_secs_f64(),
                    l.peer.burst.all_welcomed.as_secs_f64()
                )
            );
            for (name, p) in [("p50", 50.0), ("p99", 99.0), ("max", 100.0)] {
                let (a, b) = (
                    percentile(&l.burst.open_sorted, p),
                    percentile(&l.peer.burst.open_sorted, p),
                );
                let _ = writeln!(
                    out,
                    "| link open (connect → `welcome`) {name} | {:.3} ms | {:.3} ms | {} |",
                    ms(a),
                    ms(b),
                    ratio(ms(a), ms(b))
                );
            }
            let per = |a: u64, b: u64, n: f64| (a as f64 - b as f64) * 1024.0 / n;
            let (m_link, p_link) = (
                per(l.mem_links.anon_kib, l.mem_start.anon_kib, n),
                per(l.peer.mem_links.anon_kib, l.peer.mem_start.anon_kib, pn),
            );
            let _ = writeln!(
                out,
                "| RssAnon per idle link (no session) | {m_link:.0} B | {p_link:.0} B | {} |",
                ratio(m_link, p_link)
            );
            let (m_rss, p_rss) = (
                per(l.mem_links.rss_kib, l.mem_start.rss_kib, n),
                per(l.peer.mem_links.rss_kib, l.peer.mem_start.rss_kib, pn),
            );
            let _ = writeln!(
                out,
                "| VmRSS per idle link (no session) | {m_rss:.0} B | {p_rss:.0} B | {} |",
                ratio(m_rss, p_rss)
            );
            let _ = writeln!(
                out,
                "| closed before the end | {} | {} | |",
                l.closed_during, l.peer.closed
            );
            for (i, name) in ACCEPT_QUEUE.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "| kernel `{name}` during the burst | {} | {} | |",
                    l.burst.tcp[i], l.peer.burst.tcp[i]
                );
            }
            if !l.burst.failures.is_empty() {
                let _ = writeln!(out, "| Margin failures | {:?} | | |", l.burst.failures);
            }
            let _ = writeln!(out, "\n| Margin, the rest | |\n|---|---|");
            let _ = writeln!(
                out,
                "| setup (accounts, machines, documents written to the store) | {:.1} s |",
                l.setup.as_secs_f64()
            );
            let _ = writeln!(
                out,
                "| sessions: `@planner` posts → every `invoke` answered | {} of {} in {:.1} s |",
                l.replies,
                l.links,
                l.sessions.as_secs_f64()
            );
            let _ = writeln!(
                out,
                "| idle hold | {:.1} s; {} heartbeats answered; server CPU {:.1}% of a core |",
                l.hold.as_secs_f64(),
                l.heartbeats,
                l.hold_cpu.pct(l.hold_cpu.server)
            );
            let _ = writeln!(
                out,
                "| links closed before the end | {} {:?} |",
                l.closed_during, l.close_reasons
            );
            let _ = writeln!(out, "| server says connected (`GET …/planner`) | {} of {} ({} replying, {} check errors) |", l.connected, l.links, l.replying, l.check_errors);
            let _ = writeln!(
                out,
                "| open at the end, then detached | {} in {:.0} ms |",
                l.still_open,
                l.detach.as_secs_f64() * 1e3
            );
            let _ = writeln!(
                out,
                "| graceful shutdown (SIGTERM) | {:.0} ms, {} |",
                l.shutdown.as_secs_f64() * 1e3,
                l.shutdown_status
            );
            let _ = writeln!(
                out,
                "| load average start → end | {} → {} |",
                l.load_start, l.load_end
            );
            let _ = writeln!(
                out,
                "\n{}",
                table_head("| server memory | VmRSS KiB | RssAnon KiB | Pss KiB | threads |")
            );
            for (name, m) in [
                ("Margin started, no links", l.mem_start),
                ("Margin, links open", l.mem_links),
                ("Margin, + one session each", l.mem_sessions),
                ("Margin, after the idle hold", l.mem_hold),
                (
                    "Margin, all detached (3 s later; sessions leased)",
                    l.mem_detached,
                ),
                ("Margin, after the leases ended", l.mem_released),
            ]
            .into_iter()
            .map(|(name, m)| (name.to_owned(), m))
            .chain(
                l.relinks
                    .iter()
                    .enumerate()
                    .flat_map(|(i, (n, linked, detached))| {
                        [
                            (
                                format!("Margin, relink {}: {n} links again (no sessions)", i + 1),
                                *linked,
                            ),
                            (format!("Margin, relink {}: all detached", i + 1), *detached),
                        ]
                    }),
            )
            .chain([
                ("peer started".to_owned(), l.peer.mem_start),
                ("peer, links open".to_owned(), l.peer.mem_links),
            ]) {
                let _ = writeln!(
                    out,
                    "| {name} | {} | {} | {} | {} |",
                    m.rss_kib, m.anon_kib, m.pss_kib, m.threads
                );
            }
            let _ = writeln!(out, "\n| Margin per machine (Δ ÷ {} linked) | VmRSS bytes | RssAnon bytes | Pss bytes |", l.burst.opened);
            let _ = writeln!(out, "|---|---|---|---|");
            for (name, a, b) in [
                ("link only", l.mem_links, l.mem_start),
                ("session on top of the link", l.mem_sessions, l.mem_links),
                ("link + session", l.mem_sessions, l.mem_start),
                ("link + session, after the hold", l.mem_hold, l.mem_start),
            ] {
                let _ = writeln!(
                    out,
                    "| {name} | {:.0} | {:.0} | {:.0} |",
                    per(a.rss_kib, b.rss_kib, n),
                    per(a.anon_kib, b.anon_kib, n),
                    per(a.pss_kib, b.pss_kib, n)
                );
            }
            let _ = writeln!(
                out,
                "\nMargin peak RSS (VmHWM): {} KiB.",
                l.mem_detached.hwm_kib
            );
        }
        self.frame.close(&mut out);
        out
    }
}
