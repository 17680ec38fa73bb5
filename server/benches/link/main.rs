//! Machine-link benchmark: the real `margin` binary over loopback, with a
//! peer figure from the same run. Results and how to read them:
//! `server/benches/results/link.md`.
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
#[path = "../support/mod.rs"]
mod support;

// This file owns the knobs (`Config`), the order the parts run in and the
// wait for a quiet machine; each part and the report are modules of their own.
mod many_links;
mod report;
mod round_trips;

use std::path::PathBuf;
use std::time::Duration;

use many_links::many_links;
use report::Report;
use round_trips::{round_trips, Turn};
use support::cpu::settle;
use support::knobs::{env_or, require_open_files, under_cargo_bench, Parts};
use support::link_peer;
use support::machine::keep_alive;
use support::margin::margin_bin;
use support::peers;
use support::report::print_summary;

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
