//! Session feed benchmark (SPEC E2; issue #6, performance): one Planner
//! session's events fanned out as Server-Sent Events by the real `margin`
//! binary over loopback, and replayed from a cursor, with a peer figure from
//! the same run. Results and how to read them:
//! `server/benches/results/feed.md`.
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
mod support;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use margin_protocol::link::{ClientMessage, RunStatus, ServerMessage};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use support::accounts::planners;
use support::cpu::{settle, CpuSnap, CpuUse, ServerCpu};
use support::feed_peer;
use support::knobs::{env_or, require_open_files, under_cargo_bench, Parts};
use support::machine::{Machine, PATIENCE};
use support::margin::{margin_bin, Margin};
use support::peers;
use support::planner::Api;
use support::process::{loadavg, rss_kib};
use support::report::{ms, paired, percentile, print_summary, ratio, table_head, ReportFrame};
use support::schedule::Schedule;
use support::sse::Sse;

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

// ---------------------------------------------------------------- the generator

/// When each report was written: nanoseconds since `epoch`, plus one (0:
/// not yet).
struct Sent {
    epoch: Instant,
    at: Vec<AtomicU64>,
}

impl Sent {
    fn new(count: usize) -> Arc<Sent> {
        Arc::new(Sent {
            epoch: Instant::now(),
            at: (0..count).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    fn mark(&self, k: usize) {
        let ns = self.epoch.elapsed().as_nanos() as u64 + 1;
        self.at[k].store(ns, Ordering::Release);
    }

    fn at(&self, k: usize) -> Option<Instant> {
        match self.at.get(k)?.load(Ordering::Acquire) {
            0 => None,
            ns => Some(self.epoch + Duration::from_nanos(ns - 1)),
        }
    }
}

/// How the generator wrote its reports.
struct Generated {
    sent_rate: f64,
    lag_p99: Duration,
    lag_max: Duration,
    last_sent: Instant,
}

/// Writes `sent.at.len()` run reports on `session`: report `k` is due at
/// `start + k / rate`, or at once without a rate.
async fn generate(machine: &Machine, session: &str, sent: &Sent, rate: Option<u64>) -> Generated {
    let report = |status| -> Utf8Bytes {
        serde_json::to_string(&ClientMessage::Run {
            session: session.into(),
            run: "r1".into(),
            name: "Nightly".into(),
            status,
            attempt: None,
        })
        .expect("run report")
        .into()
    };
    let reports = [report(RunStatus::Running), report(RunStatus::Paused)];
    let total = sent.at.len();
    let mut lag = (Duration::ZERO, Duration::ZERO);
    match rate {
        None => {
            for (k, report) in reports.iter().cycle().take(total).enumerate() {
                sent.mark(k);
                machine.send_text(report.clone()).await;
            }
        }
        Some(rate) => {
            let mut schedule = Schedule::new(rate, total, Duration::from_millis(2));
            while !schedule.done() {
                tokio::time::sleep_until(schedule.due().into()).await;
                let now = Instant::now();
                while let Some(k) = schedule.take(now) {
                    sent.mark(k);
                    machine.send_text(reports[k % 2].clone()).await;
                }
            }
            lag = schedule.lag();
        }
    }
    let last_sent = Instant::now();
    let first = sent.at(0).unwrap_or(last_sent);
    Generated {
        sent_rate: total.saturating_sub(1).max(1) as f64
            / (last_sent - first).as_secs_f64().max(1e-9),
        lag_p99: lag.0,
        lag_max: lag.1,
        last_sent,
    }
}

// ---------------------------------------------------------------- servers under test

/// A server with one session to follow, and its generator.
struct Target {
    server: &'static str,
    addr: SocketAddr,
    api: Api,
    /// The account's token (the peer checks none).
    token: String,
    session: String,
    /// The cursor before the first report.
    base: u64,
    machine: Machine,
    cpu: ServerCpu,
    /// A Margin server and its data folder (removed when dropped).
    margin: Option<(Margin, tempfile::TempDir)>,
}

impl Target {
    /// A fresh `margin serve` with `args`, a linked machine, and its
    /// session from `@planner go`.
    async fn margin(config: &Config, args: &[String]) -> Target {
        let data = tempfile::Builder::new()
            .prefix("margin-feed-")
            .tempdir()
            .expect("cannot make a temp dir");
        // The account, its machine and its document, written before the
        // server opens the store (as `margin account add` and `margin
        // machine pair` do).
        let account = planners(data.path(), "feed", 1).await.remove(0);
        let credential = account.credential.expect("a machine");
        let document = account.document.expect("a document");
        let margin = Margin::start(&config.bin, data.path(), args).await;
        let mut machine = Machine::connect(margin.addr, Some(&credential)).await;
        machine.hello().await;
        let api = Api::new(margin.addr);
        api.chat(&account.token, &document, "@planner go")
            .await
            .unwrap_or_else(|e| panic!("chat post: {e}"));
        let session = loop {
            if let ServerMessage::Invoke { session, .. } = machine.next().await {
                break session;
            }
        };
        let mut target = Target {
            server: MARGIN,
            addr: margin.addr,
            api,
            token: account.token,
            session,
            base: 0,
            machine,
            cpu: ServerCpu::Process(margin.pid),
            margin: Some((margin, data)),
        };
        target.base = target.cursor(1, true).await;
        target
    }

    /// The peer, on a session of its own.
    async fn peer(addr: SocketAddr, session: String) -> Target {
        Target {
            server: PEER,
            addr,
            api: Api::new(addr),
            token: "peer".into(),
            session,
            base: 0,
            machine: Machine::connect(addr, None).await,
            cpu: ServerCpu::Peer,
            margin: None,
        }
    }

    /// The snapshot's cursor once it is at least `at_least` and, when
    /// `settle`, the same on two reads 100 ms apart (polled every 10 ms).
    async fn cursor(&self, at_least: u64, settle: bool) -> u64 {
        let path = format!("/sessions/{}", self.session);
        let deadline = Instant::now() + PATIENCE;
        let mut last = None;
        loop {
            let snapshot = self.api.get::<Value>(&self.token, &path).await;
            let cursor = snapshot.ok().and_then(|v| v["cursor"].as_u64());
            if let Some(cursor) = cursor.filter(|c| *c >= at_least) {
                if !settle || last == Some(cursor) {
                    return cursor;
                }
                last = Some(cursor);
            }
            assert!(
                Instant::now() < deadline,
                "{}: session {} never reached cursor {at_least} (last {last:?})",
                self.server,
                self.session
            );
            let pause = if settle { 100 } else { 10 };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.margin.as_ref()?.0.pid)
    }

    /// Stops a Margin server; what it logged goes to the report.
    async fn finish(mut self, report: &mut Report) {
        let refusals = self.machine.refusals();
        if !refusals.is_empty() {
            report.frame.logs.push(format!(
                "{} refused {} run reports, first: {}",
                self.server,
                refusals.len(),
                refusals[0]
            ));
        }
        drop(self.machine);
        if let Some((margin, _data)) = self.margin.take() {
            let stopped = margin.terminate().await;
            report.frame.logs.push(format!(
                "margin (session {}): shutdown {} in {} ms; {}",
                self.session,
                stopped.status,
                stopped.took.as_millis(),
                stopped.log_line()
            ));
        }
    }
}

// ---------------------------------------------------------------- the subscribers

/// What a subscriber expects: ids `first..=last`; with `sent`, the id
/// `base + 1 + k` is report `k`, checked and timed.
#[derive(Clone)]
struct Expect {
    first: u64,
    last: u64,
    base: u64,
    sent: Option<Arc<Sent>>,
}

/// What one subscriber read.
#[derive(Default)]
struct Tally {
    /// Distinct events in order (a gap skips some; they are missing).
    received: u64,
    gaps: u64,
    duplicates: u64,
    /// Not a `run_updated`, or not the status report `k` had.
    wrong: u64,
    /// Read before its send time was recorded.
    untimed: u64,
    delays_us: Vec<u32>,
    bytes: u64,
    first_read: Option<Instant>,
    last_event: Option<Instant>,
    error: Option<String>,
}

/// Reads `sse` until it has `expect.last`, or it ends, or `PATIENCE`
/// passes with nothing to read.
async fn follow(mut sse: Sse, expect: Expect) -> Tally {
    let mut tally = Tally::default();
    if expect.sent.is_some() {
        tally
            .delays_us
            .reserve((expect.last + 1 - expect.first) as usize);
    }
    let mut next = expect.first;
    // Body bytes that came with the response head are read first.
    let mut now = Instant::now();
    if sse.buffered() > 0 {
        tally.first_read = Some(now);
        tally.bytes = sse.buffered() as u64;
    }
    loop {
        let mut resync = None;
        let read = sse.frames(|id, event, data| {
            let Some(id) = id else {
                if event == b"resync" {
                    resync = Some(String::from_utf8_lossy(data).into_owned());
                }
                return;
            };
            if id < next {
                tally.duplicates += 1;
                return;
            }
            tally.gaps += id - next;
            tally.received += 1;
            tally.last_event = Some(now);
            next = id + 1;
            let Some(sent) = expect.sent.as_ref().filter(|_| id > expect.base) else {
                return;
            };
            let k = (id - expect.base - 1) as usize;
            // Report `k` said `running` for even `k`, `paused` for odd.
            let status = [b"\"running\"}}".as_slice(), b"\"paused\"}}"][k % 2];
            if event != b"run_updated" || !data.ends_with(status) {
                tally.wrong += 1;
            }
            match sent.at(k) {
                Some(at) => tally.delays_us.push(
                    u32::try_from(now.saturating_duration_since(at).as_micros())
                        .unwrap_or(u32::MAX),
                ),
                None => tally.untimed += 1,
            }
        });
        if let Err(e) = read {
            tally.error = Some(e);
            break;
        }
        if let Some(reason) = resync {
            tally.error = Some(format!("told to resync: {reason}"));
            break;
        }
        if next > expect.last {
            break;
        }
        if sse.ended() {
            tally.error = Some("the stream ended".into());
            break;
        }
        match tokio::time::timeout(PATIENCE, sse.fill()).await {
            Ok(Ok(0)) => {
                tally.error = Some("the server closed the stream".into());
                break;
            }
            Ok(Ok(n)) => tally.bytes += n as u64,
            Ok(Err(e)) => {
                tally.error = Some(format!("read: {e}"));
                break;
            }
            Err(_) => {
                tally.error = Some(format!("nothing read for {} s", PATIENCE.as_secs()));
                break;
            }
        }
        now = Instant::now();
        tally.first_read.get_or_insert(now);
    }
    tally
}

// ---------------------------------------------------------------- part 1: fan-out

/// One fan-out run.
#[derive(Default)]
struct FanRun {
    rep: usize,
    server: &'static str,
    mode: String,
    subscribers: usize,
    opened: usize,
    open_all: Duration,
    events: usize,
    sent_rate: f64,
    lag_p99: Duration,
    lag_max: Duration,
    deliveries: u64,
    /// First report written → last event read by anyone.
    wall: Duration,
    /// Last report written → last event read by anyone.
    drain: Duration,
    /// Delay percentiles (µs): p50, p90, p99, p99.9, max; and the mean.
    delay: [u32; 5],
    mean_us: f64,
    complete: usize,
    missing: u64,
    gaps: u64,
    duplicates: u64,
    wrong: u64,
    untimed: u64,
    frame_bytes: f64,
    errors: Vec<String>,
    cpu: CpuUse,
    rss_kib: Option<u64>,
    load: String,
}

impl FanRun {
    fn delivery_rate(&self) -> f64 {
        self.deliveries as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    fn server_us(&self) -> f64 {
        1e6 * self.cpu.server / self.deliveries.max(1) as f64
    }

    fn line(&self) -> String {
        let d = |us: u32| format!("{:.1}", f64::from(us) / 1e3);
        format!(
            "{} {} rep {}: {} of {} subscribed in {:.1} ms; sent {:.0}/s (lag p99 {:.1} max {:.1} ms); {} deliveries in {:.1} ms = {:.0}/s ({:.0} events/s to all), drain {:.1} ms; delay p50 {} p90 {} p99 {} p99.9 {} max {} mean {:.1} ms; complete {} of {}, missing {}, gaps {}, duplicates {}, wrong {}, untimed {}; {:.0} B/event; server CPU {:.0}% ({:.2} µs/delivery), client {:.0}%, other {}; server RSS {} KiB; load {}",
            self.server, self.mode, self.rep, self.opened, self.subscribers, ms(self.open_all),
            self.sent_rate, ms(self.lag_p99), ms(self.lag_max), self.deliveries, ms(self.wall),
            self.delivery_rate(), self.delivery_rate() / self.subscribers.max(1) as f64, ms(self.drain),
            d(self.delay[0]), d(self.delay[1]), d(self.delay[2]), d(self.delay[3]), d(self.delay[4]), self.mean_us / 1e3,
            self.complete, self.subscribers, self.missing, self.gaps, self.duplicates, self.wrong, self.untimed,
            self.frame_bytes, self.cpu.pct(self.cpu.server), self.server_us(), self.cpu.pct(self.cpu.client),
            self.cpu.other_pct(), self.rss_kib.map_or("—".into(), |k| k.to_string()), self.load,
        )
    }
}

async fn fan_out(config: &Config, peer: SocketAddr, report: &mut Report) {
    println!(
        "\n== part 1: {} subscribers, {} events ==",
        config.subscribers, config.events
    );
    let mut modes = vec![Some(config.rate)];
    if config.burst {
        modes.push(None);
    }
    let mut sessions = 0;
    for rep in 1..=config.repeat {
        for &rate in &modes {
            for server in [MARGIN, PEER] {
                let target = if server == MARGIN {
                    Target::margin(config, &[]).await
                } else {
                    sessions += 1;
                    Target::peer(peer, format!("fanout-{sessions}")).await
                };
                let mut run = fan_out_run(config, &target, rate).await;
                run.rep = rep;
                println!("  {}", run.line());
                target.finish(report).await;
                report.fan.push(run);
            }
        }
    }
}

async fn fan_out_run(config: &Config, target: &Target, rate: Option<u64>) -> FanRun {
    let n = config.subscribers;
    let sent = Sent::new(config.events);
    let expect = Expect {
        first: target.base + 1,
        last: target.base + config.events as u64,
        base: target.base,
        sent: Some(sent.clone()),
    };
    let path = format!("/sessions/{}/events?after={}", target.session, target.base);
    let began = Instant::now();
    let opened = futures_util::future::join_all(
        (0..n).map(|_| Sse::open(target.addr, &path, &target.token)),
    )
    .await;
    let open_all = began.elapsed();
    let mut errors = Vec::new();
    let mut followers = Vec::with_capacity(n);
    for sse in opened {
        match sse {
            Ok(sse) => followers.push(tokio::spawn(follow(sse, expect.clone()))),
            Err(e) => errors.push(format!("subscribe: {e}")),
        }
    }
    settle(config.quiet_wait.as_secs_f64()).await;
    let snap = CpuSnap::take(target.cpu);
    let generated = generate(&target.machine, &target.session, &sent, rate).await;
    let mut tallies = Vec::with_capacity(followers.len());
    for follower in followers {
        tallies.push(follower.await.expect("a subscriber panicked"));
    }
    let cpu = snap.since(target.cpu);
    let rss_kib = target.rss_kib();
    let first_sent = sent.at(0).unwrap_or(generated.last_sent);
    let last_event = tallies
        .iter()
        .filter_map(|t| t.last_event)
        .max()
        .unwrap_or(first_sent);
    let expected = config.events as u64;
    let mut delays: Vec<u32> = Vec::with_capacity(tallies.iter().map(|t| t.delays_us.len()).sum());
    let mut run = FanRun {
        server: target.server,
        mode: rate.map_or("burst".into(), |r| format!("paced {r}/s")),
        subscribers: n,
        opened: tallies.len(),
        open_all,
        events: config.events,
        sent_rate: generated.sent_rate,
        lag_p99: generated.lag_p99,
        lag_max: generated.lag_max,
        wall: last_event.saturating_duration_since(first_sent),
        drain: last_event.saturating_duration_since(generated.last_sent),
        missing: expected * (n - tallies.len()) as u64,
        cpu,
        rss_kib,
        load: loadavg(),
        ..FanRun::default()
    };
    let mut bytes = 0;
    for tally in tallies {
        run.deliveries += tally.received;
        run.missing += expected - tally.received.min(expected);
        run.gaps += tally.gaps;
        run.duplicates += tally.duplicates;
        run.wrong += tally.wrong;
        run.untimed += tally.untimed;
        bytes += tally.bytes;
        let whole = tally.received == expected && tally.gaps == 0 && tally.duplicates == 0;
        if whole && tally.wrong == 0 && tally.error.is_none() {
            run.complete += 1;
        }
        if let Some(e) = tally.error {
            errors.push(e);
        }
        delays.extend_from_slice(&tally.delays_us);
    }
    delays.sort_unstable();
    run.delay = [50.0, 90.0, 99.0, 99.9, 100.0].map(|p| percentile(&delays, p));
    run.mean_us = delays.iter().map(|&d| f64::from(d)).sum::<f64>() / delays.len().max(1) as f64;
    run.frame_bytes = bytes as f64 / run.deliveries.max(1) as f64;
    errors.sort();
    errors.dedup();
    run.errors = errors.into_iter().take(5).collect();
    run
}

// ---------------------------------------------------------------- part 2: replay

/// Writing the replay's events.
struct Generation {
    server: &'static str,
    events: usize,
    sent: Duration,
    committed: Duration,
    cpu: CpuUse,
}

/// Readers replaying at once from one cursor to the last id.
struct ReplayRun {
    rep: usize,
    server: &'static str,
    reader: &'static str,
    readers: usize,
    after: u64,
    /// Events read, over all readers.
    received: u64,
    /// Request → first body bytes, p50 over the readers.
    first_byte: Duration,
    /// Request → last event, p50 over the readers, and for all of them.
    each: Duration,
    total: Duration,
    bytes: u64,
    complete: usize,
    missing: u64,
    gaps: u64,
    duplicates: u64,
    errors: Vec<String>,
    cpu: CpuUse,
}

impl ReplayRun {
    fn rate(&self) -> f64 {
        self.received as f64 / self.total.as_secs_f64().max(1e-9)
    }

    fn line(&self) -> String {
        format!(
            "{} {} (after {}) rep {}: {} reader(s), {} events in {:.1} ms = {:.0}/s, {:.1} MB/s; per reader p50 {:.1} ms, first byte p50 {:.1} ms; complete {}, missing {}, gaps {}, duplicates {}{}; server CPU {:.0} ms",
            self.server, self.reader, self.after, self.rep, self.readers, self.received, ms(self.total), self.rate(),
            self.bytes as f64 / 1e6 / self.total.as_secs_f64().max(1e-9), ms(self.each), ms(self.first_byte),
            self.complete, self.missing, self.gaps, self.duplicates,
            if self.errors.is_empty() { String::new() } else { format!(", errors: {:?}", self.errors) },
            self.cpu.server * 1e3,
        )
    }
}

async fn replays(config: &Config, peer: SocketAddr, report: &mut Report) {
    let n = config.replay_events;
    println!(
        "\n== part 2: replay of {n} events (margin with --session-events-retained {}) ==",
        config.retained
    );
    let args = [
        "--session-events-retained".into(),
        config.retained.to_string(),
    ];
    let mut targets = vec![
        Target::margin(config, &args).await,
        Target::peer(peer, "replay".into()).await,
    ];
    let mut lasts = Vec::new();
    for target in &targets {
        settle(config.quiet_wait.as_secs_f64()).await;
        let snap = CpuSnap::take(target.cpu);
        let began = Instant::now();
        generate(&target.machine, &target.session, &Sent::new(n), None).await;
        let sent = began.elapsed();
        let last = target.cursor(target.base + n as u64, false).await;
        let committed = began.elapsed();
        let generation = Generation {
            server: target.server,
            events: n,
            sent,
            committed,
            cpu: snap.since(target.cpu),
        };
        println!(
            "  {}: {n} reports written in {:.1} ms, all committed in {:.1} ms ({:.0} events/s), last id {last}; server CPU {:.0} ms",
            target.server,
            ms(sent),
            ms(committed),
            n as f64 / committed.as_secs_f64().max(1e-9),
            generation.cpu.server * 1e3,
        );
        if last != target.base + n as u64 {
            report.frame.logs.push(format!(
                "{}: the log ended at {last}, not {} + {n}: other events were written",
                target.server, target.base
            ));
        }
        lasts.push(last);
        report.generation.push(generation);
    }
    for rep in 1..=config.replay_reads {
        for (target, &last) in targets.iter().zip(&lasts) {
            for (reader, readers, behind) in [
                ("from cursor 0", 1, last),
                ("near the edge", 1, config.edge),
                ("catch-up", config.catch_up, config.behind),
            ] {
                if readers == 0 {
                    continue;
                }
                settle(config.quiet_wait.as_secs_f64()).await;
                let from = (last.saturating_sub(behind), last);
                let run = replay_run(target, reader, readers, from, rep).await;
                println!("  {}", run.line());
                report.replay.push(run);
            }
        }
    }
    for target in targets.drain(..) {
        target.finish(report).await;
    }
}

/// `readers` subscribers at once, each from `after` until it has `last`.
async fn replay_run(
    target: &Target,
    reader: &'static str,
    readers: usize,
    (after, last): (u64, u64),
    rep: usize,
) -> ReplayRun {
    let path = format!("/sessions/{}/events?after={after}", target.session);
    let expect = Expect {
        first: after + 1,
        last,
        base: u64::MAX,
        sent: None,
    };
    let snap = CpuSnap::take(target.cpu);
    let began = Instant::now();
    let tasks: Vec<_> = (0..readers)
        .map(|_| {
            let (addr, path, token) = (target.addr, path.clone(), target.token.clone());
            let expect = expect.clone();
            tokio::spawn(async move {
                match Sse::open(addr, &path, &token).await {
                    Ok(sse) => follow(sse, expect).await,
                    Err(e) => Tally {
                        error: Some(e),
                        ..Tally::default()
                    },
                }
            })
        })
        .collect();
    let mut tallies = Vec::with_capacity(readers);
    for task in tasks {
        tallies.push(task.await.expect("a reader panicked"));
    }
    let cpu = snap.since(target.cpu);
    let since = |at: Option<Instant>| at.map_or(Duration::ZERO, |at| at - began);
    let mut each: Vec<Duration> = tallies.iter().map(|t| since(t.last_event)).collect();
    let mut first: Vec<Duration> = tallies.iter().map(|t| since(t.first_read)).collect();
    each.sort_unstable();
    first.sort_unstable();
    let expected = last - after;
    let mut errors: Vec<String> = tallies.iter().filter_map(|t| t.error.clone()).collect();
    errors.dedup();
    errors.truncate(5);
    ReplayRun {
        rep,
        server: target.server,
        reader,
        readers,
        after,
        received: tallies.iter().map(|t| t.received).sum(),
        first_byte: percentile(&first, 50.0),
        each: percentile(&each, 50.0),
        total: percentile(&each, 100.0),
        bytes: tallies.iter().map(|t| t.bytes).sum(),
        complete: tallies
            .iter()
            .filter(|t| t.received == expected && t.gaps + t.duplicates == 0 && t.error.is_none())
            .count(),
        missing: tallies
            .iter()
            .map(|t| expected.saturating_sub(t.received))
            .sum(),
        gaps: tallies.iter().map(|t| t.gaps).sum(),
        duplicates: tallies.iter().map(|t| t.duplicates).sum(),
        errors,
        cpu,
    }
}

// ---------------------------------------------------------------- report

#[derive(Default)]
struct Report {
    frame: ReportFrame,
    fan: Vec<FanRun>,
    generation: Vec<Generation>,
    replay: Vec<ReplayRun>,
}

impl Report {
    fn environment(&mut self, config: &Config) {
        self.frame = ReportFrame::start(
            &config.bin,
format!(
            "config: SUBSCRIBERS={} EVENTS={} RATE={} BURST={} REPEAT={} REPLAY_EVENTS={} RETAINED={} EDGE={} REPLAY_READS={} CATCH_UP={} BEHIND={} QUIET_WAIT_SECONDS={} PEER_NODELAY={} parts:{}{}",
            config.subscribers,
            config.events,
            config.rate,
            u8::from(config.burst),
            config.repeat,
            config.replay_events,
            config.retained,
            config.edge,
            config.replay_reads,
            config.catch_up,
            config.behind,
            config.quiet_wait.as_secs(),
            std::env::var("PEER_NODELAY").unwrap_or_else(|_| "0".into()),
            if config.fanout { " fanout" } else { "" },
            if config.replay { " replay" } else { "" },
        ),
        );
    }

    fn render(&self) -> String {
        let mut out = String::new();
        self.frame.open(&mut out);
        self.render_fan(&mut out);
        self.render_replay(&mut out);
        self.frame.close(&mut out);
        out
    }

    fn render_fan(&self, out: &mut String) {
        let Some(first) = self.fan.first() else {
            return;
        };
        let d = |us: u32| format!("{:.1}", f64::from(us) / 1e3);
        let _ = writeln!(
            out,
            "\n### Fan-out: {} SSE subscribers on one session, {} events\n",
            first.subscribers, first.events
        );
        let _ = writeln!(out, "{}", table_head("| rep | server | mode | subscribed in ms | sent/s | deliveries/s | events/s to all | first send → last delivery ms | drain ms | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | mean ms | complete | missing | gaps | dups | wrong | server CPU | server µs/delivery | client CPU | other CPU | server RSS KiB |"));
        for r in &self.fan {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {:.1} | {} / {} | {} | {} | {} | {} | {:.0}% | {:.2} | {:.0}% | {} | {} |",
                r.rep, r.server, r.mode, ms(r.open_all), r.sent_rate, r.delivery_rate(),
                r.delivery_rate() / r.subscribers.max(1) as f64, ms(r.wall), ms(r.drain),
                d(r.delay[0]), d(r.delay[1]), d(r.delay[2]), d(r.delay[3]), d(r.delay[4]), r.mean_us / 1e3,
                r.complete, r.subscribers, r.missing, r.gaps, r.duplicates, r.wrong,
                r.cpu.pct(r.cpu.server), r.server_us(), r.cpu.pct(r.cpu.client), r.cpu.other_pct(),
                r.rss_kib.map_or("—".into(), |k| k.to_string()),
            );
        }
        let frame = self
            .fan
            .iter()
            .map(|r| format!("{} {} {:.0} B", r.server, r.mode, r.frame_bytes));
        let _ = writeln!(
            out,
            "\nBytes read per event (frames and chunk framing): {}.",
            frame.collect::<Vec<_>>().join(", ")
        );
        for r in self
            .fan
            .iter()
            .filter(|r| !r.errors.is_empty() || r.untimed > 0)
        {
            let _ = writeln!(
                out,
                "\n{} {} rep {}: {} untimed; errors: {:?}",
                r.server, r.mode, r.rep, r.untimed, r.errors
            );
        }
        let _ = writeln!(out, "\n{}", table_head("| rep | mode | Margin/peer deliveries/s | Margin/peer p50 | Margin/peer p99 | Margin/peer max | Margin/peer server µs/delivery |"));
        let pairs = paired(
            &self.fan,
            |r| r.server == MARGIN,
            |m, p| p.server == PEER && p.mode == m.mode && p.rep == m.rep,
        );
        for (m, p) in pairs {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                m.rep,
                m.mode,
                ratio(m.delivery_rate(), p.delivery_rate()),
                ratio(f64::from(m.delay[0]), f64::from(p.delay[0])),
                ratio(f64::from(m.delay[2]), f64::from(p.delay[2])),
                ratio(f64::from(m.delay[4]), f64::from(p.delay[4])),
                ratio(m.server_us(), p.server_us()),
            );
        }
    }

    fn render_replay(&self, out: &mut String) {
        if self.generation.is_empty() {
            return;
        }
        let _ = writeln!(out, "\n### Replay\n");
        let _ = writeln!(out, "{}", table_head("| server | reports written unpaced | written in ms | all committed in ms | committed events/s | server CPU s |"));
        for g in &self.generation {
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {:.1} | {:.0} | {:.2} |",
                g.server,
                g.events,
                ms(g.sent),
                ms(g.committed),
                g.events as f64 / g.committed.as_secs_f64().max(1e-9),
                g.cpu.server
            );
        }
        let _ = writeln!(out, "\n{}", table_head("| rep | server | reader | readers | after | events read | first byte ms (p50) | per reader ms (p50) | all done ms | events/s | MB/s | complete | missing | gaps | dups | server CPU ms | other CPU |"));
        for r in &self.replay {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {} / {} | {} | {} | {} | {:.0} | {} |",
                r.rep,
                r.server,
                r.reader,
                r.readers,
                r.after,
                r.received,
                ms(r.first_byte),
                ms(r.each),
                ms(r.total),
                r.rate(),
                r.bytes as f64 / 1e6 / r.total.as_secs_f64().max(1e-9),
                r.complete,
                r.readers,
                r.missing,
                r.gaps,
                r.duplicates,
                r.cpu.server * 1e3,
                r.cpu.other_pct(),
            );
        }
        for r in self.replay.iter().filter(|r| !r.errors.is_empty()) {
            let _ = writeln!(
                out,
                "\n{} {} rep {}: {:?}",
                r.server, r.reader, r.rep, r.errors
            );
        }
        let _ = writeln!(out, "\n{}", table_head("| rep | reader | Margin/peer events/s | Margin/peer all done | Margin/peer first byte |"));
        let pairs = paired(
            &self.replay,
            |r| r.server == MARGIN,
            |m, p| p.server == PEER && p.reader == m.reader && p.rep == m.rep,
        );
        for (m, p) in pairs {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                m.rep,
                m.reader,
                ratio(m.rate(), p.rate()),
                ratio(m.total.as_secs_f64(), p.total.as_secs_f64()),
                ratio(m.first_byte.as_secs_f64(), p.first_byte.as_secs_f64()),
            );
        }
    }
}
