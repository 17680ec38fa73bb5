//! Reconnect storm: N machines with one session each drop at once and
//! resume. How long until all have `resumed`, and how much memory the server
//! holds while they are away; with a peer figure from the same run: the same
//! N machines opening fresh (non-resume) links at once, so the resume
//! overhead is a ratio. Results and how to read them:
//! `server/benches/results/reconnect.md`.
//!
//! ```sh
//! cargo build --release -p margin-server --bin margin   # the server under test
//! ulimit -n 8192                                         # N client + N server sockets
//! cargo bench -p margin-server --bench reconnect
//! MACHINES=200 ROUNDS=1 cargo bench -p margin-server --bench reconnect
//! ```
//!
//! What it does, over loopback, against the real release `margin` binary:
//!
//! 1. Sets up N accounts, each with a token, a document and a paired machine
//!    (one account per machine: a document's Planner binds to its owner's
//!    machine), through `margin_server::storage::Store` and
//!    `margin_server::auth` on a fresh SQLite data dir, then starts
//!    `margin serve --data DIR --listen 127.0.0.1:0` and reads the address it
//!    prints.
//! 2. Links all N machines at once (`hello` with `resumable-sessions`),
//!    then gives each one session in use: `@planner go` in its document's
//!    Chat; the machine gets `invoke`, reports a run `running` and replies.
//!    Every link answers heartbeats throughout.
//! 3. Each round: records the server's VmRSS, aborts all N links at once
//!    (TCP RST: `SO_LINGER` 0 and drop, no close frame), waits until every
//!    document's Planner shows `disconnected` and its Chat says so, records
//!    VmRSS, waits `AWAY_SECS`, records VmRSS again; then the peer figure:
//!    N fresh links at once (`hello`, no `resume`), time to N `welcome`s,
//!    aborted again; then the storm: N links at once, each `hello` then
//!    `resume` naming its session, time to N `resumed`. Then it checks that
//!    every session carried on (none in `ended`), every run card is back
//!    (`connected`, `running`), Chat said "disconnected" and "reconnected"
//!    exactly once per round, and no machine got an extra `invoke`.
//!
//! Times are per machine from the moment the storm is released (every
//! client task is parked at a gate first); "wall" is to the last machine.
//! Each machine's time is split into TCP connect, `welcome` and the resume
//! step (`welcome` → `resumed`). A connect of 1 s or more means the kernel
//! dropped the first SYN (a full accept queue) and the client retried; the
//! machine-wide `ListenOverflows` / `TCPSynRetrans` counters of
//! `/proc/net/netstat` over each storm are printed beside it.
//! The clients run in this process on the same cores as the server, so every
//! figure includes their work; the ratio resume/fresh cancels most of it.
//! Server CPU is utime+stime of the `margin` process (`/proc/PID/stat`);
//! "other CPU" is what every other process on the machine used meanwhile
//! (shown only for windows of a second or more). Memory is the server's
//! VmRSS, with its open descriptors to show when links are really closed.
//!
//! `cargo bench` builds the package's binaries for its benches, so it
//! refreshes `target/release/margin` itself (bench profile = release
//! settings, features unified with the dev-dependencies). To measure one
//! exact `cargo build --release` binary, copy it away and set `MARGIN_BIN`.
//!
//! Settings (env vars):
//!
//! | var | default | meaning |
//! |---|---|---|
//! | `MACHINES` | 1000 | machines, each with its own account, document and session |
//! | `ROUNDS` | 3 | drop / fresh / resume rounds on the same server |
//! | `AWAY_SECS` | 5 | how long the machines stay away once the server noticed |
//! | `MARGIN_BIN` | `target/release/margin` | the server binary (relative paths are from the workspace root; `$CARGO_TARGET_DIR/release/margin` when that is set) |
//! | `HTTP_CONCURRENCY` | 32 | concurrent HTTP requests (setup posts, status polls) |
//! | `PHASE_TIMEOUT_SECS` | 120 | bound on every phase; a phase that overruns fails the run |
//! | `SERVER_LOG` | `warn` | `RUST_LOG` for the server; WARN/ERROR lines are counted |
//! | `JSON` | unset | also write every figure as JSON to this file |
//! | `HOLD_SECS` | 0 | at the end, keep the links open this long (to inspect the server) |
//!
//! Only `cargo bench` runs it (it is not a test; `cargo test --benches` skips
//! it).

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

// This file owns the knobs (`Config`), the run (setup, first link-up,
// sessions, the rounds, the report) and the final checks; the storm, a
// round and the report are modules of their own.
mod report;
mod rounds;
mod storm;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};
use margin_protocol::link::RunStatus;

use support::cpu::settle_process;
use support::knobs::{env_or, require_open_files, under_cargo_bench};
use support::margin::{margin_bin, Margin};
use support::peers;
use support::planner::Api;
use support::process::{loadavg, status_kib};

use report::Figures;
use rounds::{run_round, sample, Stage, Views};
use storm::{set_up, storm};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = Error> = std::result::Result<T, E>;

/// Chat's lines when a kept session's machine drops and comes back.
const DISCONNECTED: &str =
    "The Planner disconnected. Its runs and questions are kept until it reconnects; answers wait for it.";
const RECONNECTED: &str = "The Planner reconnected.";
const RUN_ID: &str = "storm";

// ---------------------------------------------------------------- settings

struct Config {
    machines: usize,
    rounds: usize,
    away: Duration,
    bin: PathBuf,
    http_concurrency: usize,
    timeout: Duration,
    server_log: String,
    json: Option<PathBuf>,
    hold: Duration,
}

impl Config {
    fn from_env() -> Result<Config> {
        let bin = margin_bin("reconnect");
        let config = Config {
            machines: env_or("MACHINES", 1000),
            rounds: env_or("ROUNDS", 3),
            away: Duration::from_secs_f64(env_or("AWAY_SECS", 5.0)),
            bin,
            http_concurrency: env_or("HTTP_CONCURRENCY", 32),
            timeout: Duration::from_secs(env_or("PHASE_TIMEOUT_SECS", 120)),
            server_log: env_or("SERVER_LOG", "warn".to_owned()),
            json: std::env::var_os("JSON").map(PathBuf::from),
            hold: Duration::from_secs_f64(env_or("HOLD_SECS", 0.0)),
        };
        if config.machines == 0 || config.http_concurrency == 0 {
            return Err("MACHINES and HTTP_CONCURRENCY must be at least 1".into());
        }
        Ok(config)
    }
}

fn main() {
    if !under_cargo_bench("reconnect") {
        return;
    }
    match peers::client_runtime().block_on(run()) {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("reconnect storm: FAILED checks (see above)");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("reconnect storm: {e}");
            std::process::exit(2);
        }
    }
}

async fn run() -> Result<bool> {
    let config = Config::from_env()?;
    let n = config.machines;
    // The machines' sockets, then as many in the server.
    require_open_files("reconnect", 2 * n as u64 + 256, &format!("MACHINES={n}"));
    let load_start = loadavg();
    eprintln!(
        "reconnect storm: {n} machines, {} rounds, away {:?}; server {}; load average {load_start}; {} CPUs",
        config.rounds,
        config.away,
        config.bin.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let data = tempfile::Builder::new().prefix("margin-storm-").tempdir()?;
    let began = Instant::now();
    let machines = set_up(data.path(), n).await?;
    let setup = began.elapsed();
    eprintln!("set up {n} accounts, documents and machines in {setup:.1?}");

    let server = Margin::start_logging(&config.bin, data.path(), &[], &config.server_log).await;
    let api = Views {
        api: Api::new(server.addr),
        concurrency: config.http_concurrency,
    };
    let api = &api;
    let mut problems: Vec<String> = Vec::new();
    eprintln!("margin pid {} at {}", server.pid, server.addr);
    let mut memory = vec![sample(&server, "server started, idle")];

    // First link-up: N fresh links at once, no sessions anywhere yet.
    let (mut links, first, _) = storm(&server, &machines, false, config.timeout).await?;
    first.print("first link-up (no sessions yet)");
    if first.failed > 0 {
        problems.push(format!("first link-up: {} links failed", first.failed));
        return finish(server, &problems).await;
    }
    settle_process(server.pid).await;
    memory.push(sample(&server, format!("{n} links open, no sessions")));

    // One session in use per machine: `@planner go`, invoke, a live run, a reply.
    let began = Instant::now();
    let posted: Vec<Result<()>> = stream::iter(&machines)
        .map(|m| api.say(m, "@planner go"))
        .buffer_unordered(config.http_concurrency)
        .collect()
        .await;
    for e in posted.into_iter().filter_map(Result::err).take(5) {
        problems.push(format!("posting @planner: {e}"));
    }
    let sessions = api
        .until_all(
            &machines,
            began,
            config.timeout,
            "sessions in use",
            |m| async move {
                if m.seen.invokes.load(Ordering::SeqCst) == 0 {
                    return Ok(false);
                }
                let view = api.view(m).await?;
                Ok(view.connected
                    && !view.replying
                    && view.runs.len() == 1
                    && view.runs[0].status == RunStatus::Running)
            },
        )
        .await?;
    eprintln!("{n} sessions in use (run `running`, reply posted) after {sessions:.1?}");
    settle_process(server.pid).await;
    memory.push(sample(&server, format!("{n} links, {n} sessions in use")));

    let stage = Stage {
        config: &config,
        server: &server,
        machines: &machines,
        api,
    };
    let mut rounds = Vec::new();
    for round in 1..=config.rounds {
        let (resumed, figures) =
            run_round(round, &stage, links, &mut memory, &mut problems).await?;
        links = resumed;
        rounds.push(figures);
    }
    let peak = status_kib(server.pid, "VmHWM:").unwrap_or(0) as f64 / 1024.0;
    let log = server.logged();
    if config.hold > Duration::ZERO {
        eprintln!(
            "holding the {n} links open for {:?}: margin pid {}",
            config.hold, server.pid
        );
        tokio::time::sleep(config.hold).await;
    }
    links.abort().await;
    let load_end = loadavg();

    report::print(
        &config,
        &Figures {
            load_start,
            load_end,
            setup,
            sessions,
            first,
            rounds,
            memory,
            peak,
            log,
        },
        &problems,
    )?;
    finish(server, &problems).await
}

/// Stops the server and reports the checks; true when all passed.
async fn finish(server: Margin, problems: &[String]) -> Result<bool> {
    let stopped = server.terminate().await;
    if stopped.ok {
        println!("server stopped gracefully in {:.1?}", stopped.took);
    } else {
        println!("server stop: {}", stopped.status);
    }
    if problems.is_empty() {
        println!("checks: every session carried on (none ended), every run card back, Chat said disconnected/reconnected once per round, no extra invoke, no refusal or close");
        Ok(true)
    } else {
        println!("checks FAILED ({}):", problems.len());
        for problem in problems.iter().take(30) {
            println!("  {problem}");
        }
        Ok(false)
    }
}
