//! Session feed benchmark (SPEC E2): one Planner session's events fanned out
//! as Server-Sent Events by the real `margin` binary over loopback, and
//! replayed from a cursor, with a peer figure from the same run. Results and
//! how to read them: `server/benches/results/feed.md`.
//!
//! ```sh
//! cargo build --release -p margin-server --bin margin   # -> target/release/margin
//! ulimit -n 8192                                        # 2 × SUBSCRIBERS sockets here (the peer is in process)
//! cargo bench -p margin-server --bench feed
//! SUBSCRIBERS=200 EVENTS=2000 PARTS=fanout cargo bench -p margin-server --bench feed
//! ```
//!
//! `cargo bench` builds the package's binaries for its benches, so it
//! refreshes `target/release/margin` itself (`$CARGO_TARGET_DIR/release/margin`
//! when that is set); `MARGIN_BIN` points at another binary built from this
//! checkout (the bench writes the account with this checkout's storage code).
//!
//! Every Margin run starts a fresh `margin serve` (fresh temp data dir,
//! SQLite, `--listen 127.0.0.1:0`, `RUST_LOG=warn`) on a store holding one
//! account with a token, a paired machine and a document, written before
//! the server starts (through `margin_server::storage::Store` and
//! `margin_server::auth`, as `margin account add` / `machine pair` do). The
//! machine links (`hello` with `resumable-sessions`), `@planner go` in the
//! document's Chat gives it an `invoke`, and the session's snapshot
//! (`GET /sessions/{sid}`, polled until its cursor holds still) gives the
//! cursor `base` to follow from. That machine is the generator: its `k`-th
//! run report (`run` `r1` "Nightly", `running` for even `k` and `paused` for
//! odd, so each is a change) becomes event `base + 1 + k`, a `run_updated`;
//! an event's delay is the time a subscriber read it minus the time its
//! report was written.
//!
//! 1. **Fan-out** (`PARTS` contains `fanout`): `SUBSCRIBERS` SSE clients
//!    open `GET /sessions/{sid}/events?after=base` at once (time to every
//!    response head), the machine is left to go quiet, then the generator
//!    writes `EVENTS` reports paced at `RATE`/s and, with `BURST=1`, again
//!    unpaced (as fast as it can write) against a fresh server. Every
//!    subscriber must read every event exactly once, ids contiguous:
//!    missing events, gaps, duplicates and events of the wrong kind or status
//!    are counted, and a subscriber missing any is not "complete".
//! 2. **Replay** (`PARTS` contains `replay`): a server started with
//!    `--session-events-retained RETAINED`; the generator writes
//!    `REPLAY_EVENTS` reports unpaced (time to the last one committed, from
//!    the snapshot's cursor), then one reader replays from cursor 0 until it
//!    has the last id, one from `EDGE` events before the end (inside the
//!    server's 1,024-event ring), and a catch-up storm: `CATCH_UP` readers
//!    at once, each from `BEHIND` events before the end (behind the ring,
//!    so each reads storage), `REPLAY_READS` times each.
//!
//! **The peer** (`support::feed_peer`) is a minimal axum server in this process (its own runtime,
//! as many worker threads as CPUs like `margin`'s, thread name
//! `peer-server`; Nagle left on as `axum::serve` leaves it, unless
//! `PEER_NODELAY=1`): `/machine` takes the same `run` reports over a
//! WebSocket and renders each as the `run_updated` frame Margin sends (the
//! same bytes bar the ids), appended to a list in memory and sent on a tokio
//! broadcast channel of pre-rendered frames; `/sessions/{sid}/events?after=`
//! sends the list from the cursor in batches of 1,000 events, then live,
//! each wake-up writing every frame waiting (up to 1,000) at once, as
//! Margin's reader does. No storage, no auth: the floor. The runs alternate
//! Margin, peer; the SSE client (`support::sse`: raw tokio `TcpStream`,
//! HTTP/1.1, chunked decoding, a small line parser) and the generator are
//! the same code for both.
//!
//! Knobs (env vars):
//!
//! | var | default | what |
//! |---|---|---|
//! | `MARGIN_BIN` | `target/release/margin` | the server binary |
//! | `PARTS` | `fanout,replay` | which parts to run |
//! | `SUBSCRIBERS` | `1000` | SSE clients on the one session (fan-out) |
//! | `EVENTS` | `10000` | run reports per fan-out run |
//! | `RATE` | `2000` | paced reports per second |
//! | `BURST` | `1` | also an unpaced fan-out run (`0`: paced only) |
//! | `REPEAT` | `1` | how many times the fan-out runs are repeated |
//! | `REPLAY_EVENTS` | `100000` | reports written before the replays |
//! | `RETAINED` | `200000` | `--session-events-retained` of the replay server |
//! | `EDGE` | `500` | the near-the-edge reader starts this many events before the end |
//! | `REPLAY_READS` | `2` | replays of each kind, per server |
//! | `CATCH_UP` | `100` | readers in the catch-up storm (`0`: none) |
//! | `BEHIND` | `10000` | how far behind the end each of them starts |
//! | `PEER_NODELAY` | `0` | `1` sets TCP_NODELAY on the peer's sockets (Margin's are left with Nagle on) |
//! | `QUIET_WAIT_SECONDS` | `10` | before each measured run, wait up to this long for the machine to be idle (< ¼ core busy for 1 s) |
//!
//! CPU figures are from `/proc` (100 ticks/s): the server's (the `margin`
//! process, or the peer runtime's threads), the client's (this process
//! minus the peer's threads) and other processes' ("other"). Only `cargo
//! bench` runs it (`cargo test --benches` skips it).

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

// This file owns the knobs (`Config`) and the order the parts run in; the
// servers under test, the subscribers, each part and the report are
// modules of their own.
mod fan_out;
mod replay;
mod report;
mod subscribers;
mod target;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fan_out::fan_out;
use replay::replays;
use report::Report;
use support::feed_peer;
use support::knobs::{env_or, require_open_files, under_cargo_bench, Parts};
use support::margin::margin_bin;
use support::peers;
use support::report::print_summary;

const MARGIN: &str = "margin";
const PEER: &str = "peer";

fn main() {
    if !under_cargo_bench("feed") {
        return;
    }
    let config = Config::from_env();
    peers::client_runtime().block_on(run(config));
}

// ---------------------------------------------------------------- config

struct Config {
    bin: PathBuf,
    fanout: bool,
    replay: bool,
    subscribers: usize,
    events: usize,
    rate: u64,
    burst: bool,
    repeat: usize,
    replay_events: usize,
    retained: u64,
    edge: u64,
    replay_reads: usize,
    catch_up: usize,
    behind: u64,
    quiet_wait: Duration,
}

impl Config {
    fn from_env() -> Config {
        let bin = margin_bin("feed");
        let parts = Parts::from_env("fanout,replay");
        let part = |name: &str| parts.has(name);
        let config = Config {
            bin,
            fanout: part("fanout"),
            replay: part("replay"),
            subscribers: env_or("SUBSCRIBERS", 1000usize).max(1),
            events: env_or("EVENTS", 10_000usize).max(1),
            rate: env_or("RATE", 2000u64).max(1),
            burst: env_or("BURST", 1u8) != 0,
            repeat: env_or("REPEAT", 1usize).max(1),
            replay_events: env_or("REPLAY_EVENTS", 100_000usize).max(1),
            retained: env_or("RETAINED", 200_000u64).max(1),
            edge: env_or("EDGE", 500u64).max(1),
            replay_reads: env_or("REPLAY_READS", 2usize).max(1),
            catch_up: env_or("CATCH_UP", 100usize),
            behind: env_or("BEHIND", 10_000u64).max(1),
            quiet_wait: Duration::from_secs(env_or("QUIET_WAIT_SECONDS", 10u64)),
        };
        // The subscribers' sockets, and as many again when the peer (in
        // this process) serves them.
        if config.fanout {
            require_open_files(
                "feed",
                2 * config.subscribers as u64 + 256,
                &format!("SUBSCRIBERS={}", config.subscribers),
            );
        }
        config
    }
}

// ---------------------------------------------------------------- main flow

async fn run(config: Config) {
    let mut report = Report::default();
    report.environment(&config);
    let (peer, peer_state) = feed_peer::start();
    if config.fanout {
        fan_out(&config, peer, &mut report).await;
    }
    if config.replay {
        replays(&config, peer, &mut report).await;
    }
    report.frame.logs.push(format!(
        "peer: {} frames lost by lagging subscribers (broadcast overrun)",
        peer_state.lagged.load(Ordering::Relaxed)
    ));
    print_summary(&report.render());
}
