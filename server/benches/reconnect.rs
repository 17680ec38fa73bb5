//! Reconnect storm (issue #5, performance): N machines with one session
//! each drop at once and resume. How long until all have `resumed`, and how
//! much memory the server holds while they are away; with a peer figure from
//! the same run: the same N machines opening fresh (non-resume) links at
//! once, so the resume overhead is a ratio. Results and how to read them:
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

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};
use margin_protocol::chat::{ChatKind, ChatList};
use margin_protocol::link::{
    ClientMessage, HeldSession, PlannerView, ResumedSession, RunStatus, ServerMessage,
    RESUMABLE_SESSIONS,
};
use serde_json::json;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_tungstenite::MaybeTlsStream;
use tokio_util::sync::CancellationToken;

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
mod support;

use support::accounts::planners;
use support::cpu::{settle_process, CpuSnap, CpuUse, ServerCpu};
use support::knobs::{env_or, require_open_files, under_cargo_bench};
use support::machine::{frame, hello, next_message, request, send, Frame, Ws};
use support::margin::{margin_bin, Margin};
use support::peers;
use support::planner::Api;
use support::process::{loadavg, open_fds, rss_kib, status_kib, TcpCounters, ACCEPT_QUEUE};
use support::report::{ms, percentile_ms, ratio, table_head};

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

// ---------------------------------------------------------------- machines

/// What one machine saw across all its links.
#[derive(Default)]
struct Seen {
    invokes: AtomicUsize,
    session: Mutex<Option<String>>,
    /// Anything a Planner in use should not get: refusals, closes, errors.
    unexpected: Mutex<Vec<String>>,
}

impl Seen {
    fn note(&self, what: String) {
        self.unexpected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what);
    }

    fn session(&self) -> Option<String> {
        self.session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

struct Machine {
    token: String,
    credential: String,
    document: String,
    seen: Arc<Seen>,
}

/// N accounts, each with a token, a document and a paired machine, written
/// straight into the store the server will open.
async fn set_up(data: &std::path::Path, n: usize) -> Result<Vec<Machine>> {
    Ok(planners(data, "storm-", n)
        .await
        .into_iter()
        .map(|m| Machine {
            token: m.token,
            credential: m.credential.expect("a paired machine"),
            document: m.document.expect("a document"),
            seen: Arc::default(),
        })
        .collect())
}

// ---------------------------------------------------------------- links

/// A TCP connection that a drop aborts (RST, no FIN, no close frame), with
/// the machine link's upgrade done; when TCP connected and the upgrade was
/// answered, since `t0`.
async fn connect(
    addr: SocketAddr,
    credential: &str,
    t0: Instant,
) -> Result<(Ws, Duration, Duration)> {
    let tcp = TcpStream::connect(addr).await?;
    let connected = t0.elapsed();
    tcp.set_zero_linger()?;
    tcp.set_nodelay(true)?;
    let request = request(addr, Some(credential))?;
    let (ws, _) = tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(tcp)).await?;
    Ok((ws, connected, t0.elapsed()))
}

/// A machine's Planner on an open link until `cut`: answers heartbeats; for
/// an `invoke` reports a live run and replies; notes anything else. On
/// `cut` it drops the socket without a close frame.
async fn planner(mut ws: Ws, seen: Arc<Seen>, cut: CancellationToken) {
    loop {
        let next = tokio::select! {
            _ = cut.cancelled() => return,
            next = ws.next() => next,
        };
        let answered = match frame(next) {
            Frame::Message(ServerMessage::Heartbeat { seq }, _) => {
                send(&mut ws, &ClientMessage::HeartbeatAck { seq }).await
            }
            Frame::Message(ServerMessage::Invoke { session, turn, .. }, _) => {
                seen.invokes.fetch_add(1, Ordering::SeqCst);
                {
                    let mut held = seen.session.lock().unwrap_or_else(|e| e.into_inner());
                    match held.as_deref() {
                        Some(s) if s != session => {
                            seen.note(format!("an invoke for another session {session}"))
                        }
                        _ => *held = Some(session.clone()),
                    }
                }
                let run = ClientMessage::Run {
                    session: session.clone(),
                    run: RUN_ID.into(),
                    name: "Storm run".into(),
                    status: RunStatus::Running,
                    attempt: None,
                };
                let reply = ClientMessage::Reply {
                    session,
                    turn,
                    text: "Working on it.".into(),
                };
                match send(&mut ws, &run).await {
                    Ok(()) => send(&mut ws, &reply).await,
                    Err(e) => Err(e),
                }
            }
            Frame::Message(ServerMessage::Credential { .. }, _) | Frame::Other => Ok(()),
            Frame::Message(other, _) => {
                seen.note(format!("unexpected: {other:?}"));
                Ok(())
            }
            Frame::Closed(why) => {
                seen.note(format!("the link closed: {why}"));
                return;
            }
        };
        if let Err(e) = answered {
            seen.note(format!("send failed: {e}"));
            return;
        }
    }
}

/// One machine's part in a storm, in time since the storm was released.
struct Arrival {
    /// TCP connected (a SYN the kernel dropped is retried after 1 s).
    connected: Duration,
    /// The WebSocket upgrade answered (the credential checked).
    upgraded: Duration,
    welcome: Duration,
    /// `resumed` (resume storm) or `welcome` (fresh storm).
    done: Duration,
    resumed: Option<(Vec<ResumedSession>, Vec<String>)>,
}

/// Connects, says `hello` and, with `resume`, resumes the held session.
async fn handshake(
    addr: SocketAddr,
    credential: &str,
    resume: Option<String>,
    t0: Instant,
) -> Result<(Ws, Arrival)> {
    let (mut ws, connected, upgraded) = connect(addr, credential, t0).await?;
    let granted = hello(&mut ws).await?;
    if !granted.features.iter().any(|f| f == RESUMABLE_SESSIONS) {
        return Err(format!("expected a resumable welcome, got {granted:?}").into());
    }
    let welcome = t0.elapsed();
    let Some(session) = resume else {
        return Ok((
            ws,
            Arrival {
                connected,
                upgraded,
                welcome,
                done: welcome,
                resumed: None,
            },
        ));
    };
    let resume = ClientMessage::Resume {
        sessions: vec![HeldSession {
            session,
            questions: Vec::new(),
            turn: None,
            calls: Vec::new(),
        }],
    };
    send(&mut ws, &resume).await?;
    match next_message(&mut ws).await? {
        (ServerMessage::Resumed { sessions, ended }, _) => {
            let done = t0.elapsed();
            Ok((
                ws,
                Arrival {
                    connected,
                    upgraded,
                    welcome,
                    done,
                    resumed: Some((sessions, ended)),
                },
            ))
        }
        (other, _) => Err(format!("expected resumed, got {other:?}").into()),
    }
}

/// N open links, each served by [`planner`] until `cut` fires.
struct Links {
    cut: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Links {
    /// Drops every link at once, without a close frame; returns when every
    /// socket is closed.
    async fn abort(self) -> Instant {
        let at = Instant::now();
        self.cut.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
        at
    }
}

/// What a storm measured.
#[derive(Clone, Debug, Default)]
struct StormFigures {
    machines: usize,
    failed: usize,
    errors: Vec<String>,
    /// Per machine: time to TCP connected, to the upgrade, to `welcome`,
    /// and to done (`resumed`, or `welcome`).
    connected: Vec<Duration>,
    upgraded: Vec<Duration>,
    welcome: Vec<Duration>,
    done: Vec<Duration>,
    cpu: CpuUse,
    /// The machine-wide [`ACCEPT_QUEUE`] counters over the storm.
    tcp: Option<TcpCounters<{ ACCEPT_QUEUE.len() }>>,
}

impl StormFigures {
    /// Machines whose TCP connect took a SYN retry (≥ 1 s).
    fn retried(&self) -> usize {
        self.connected
            .iter()
            .filter(|d| **d >= Duration::from_millis(1000))
            .count()
    }
}

impl StormFigures {
    fn wall(&self) -> Duration {
        self.done.iter().max().copied().unwrap_or_default()
    }
}

/// Every machine links at once (each client task waits at a gate until
/// all are spawned); with `resume`, each then resumes its session.
async fn storm(
    server: &Margin,
    machines: &[Machine],
    resume: bool,
    timeout: Duration,
) -> Result<(Links, StormFigures, Vec<Option<Arrival>>)> {
    let (go, gate) = watch::channel(None::<Instant>);
    let cut = CancellationToken::new();
    let mut tasks = Vec::with_capacity(machines.len());
    for machine in machines {
        let mut gate = gate.clone();
        let addr = server.addr;
        let credential = machine.credential.clone();
        let seen = machine.seen.clone();
        let held = if resume {
            Some(seen.session().ok_or("a machine has no session to resume")?)
        } else {
            None
        };
        let cut = cut.clone();
        tasks.push(tokio::spawn(async move {
            let t0 = match gate.wait_for(Option::is_some).await {
                Ok(t0) => t0.unwrap_or_else(Instant::now),
                Err(_) => return Err::<_, Error>("the storm was never released".into()),
            };
            let (ws, arrival) =
                tokio::time::timeout(timeout, handshake(addr, &credential, held, t0))
                    .await
                    .map_err(|_| format!("no answer within {timeout:?}"))??;
            let serving = tokio::spawn(planner(ws, seen, cut));
            Ok((arrival, serving))
        }));
    }
    // Let every task reach the gate before releasing them together.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cpu = ServerCpu::Process(server.pid);
    let mark = CpuSnap::take(cpu);
    let tcp = TcpCounters::now(ACCEPT_QUEUE);
    let _ = go.send(Some(Instant::now()));
    let mut figures = StormFigures {
        machines: machines.len(),
        ..Default::default()
    };
    let mut arrivals = Vec::with_capacity(machines.len());
    let mut serving = Vec::with_capacity(machines.len());
    for task in tasks {
        match task.await {
            Ok(Ok((arrival, link))) => {
                figures.connected.push(arrival.connected);
                figures.upgraded.push(arrival.upgraded);
                figures.welcome.push(arrival.welcome);
                figures.done.push(arrival.done);
                arrivals.push(Some(arrival));
                serving.push(link);
            }
            Ok(Err(e)) => {
                figures.failed += 1;
                if figures.errors.len() < 5 {
                    figures.errors.push(e.to_string());
                }
                arrivals.push(None);
            }
            Err(e) => {
                figures.failed += 1;
                figures.errors.push(format!("a client task failed: {e}"));
                arrivals.push(None);
            }
        }
    }
    figures.cpu = mark.since(cpu);
    figures.tcp = Some(tcp.since());
    Ok((
        Links {
            cut,
            tasks: serving,
        },
        figures,
        arrivals,
    ))
}

// ---------------------------------------------------------------- HTTP

/// What the server shows of the machines, over its HTTP API,
/// `concurrency` requests at a time.
struct Views {
    api: Api,
    concurrency: usize,
}

impl Views {
    async fn view(&self, machine: &Machine) -> Result<PlannerView> {
        Ok(self.api.planner(&machine.token, &machine.document).await?)
    }

    /// (DISCONNECTED, RECONNECTED, other system lines) in the document's Chat.
    async fn system_lines(&self, machine: &Machine) -> Result<(usize, usize, Vec<String>)> {
        let path = format!("/documents/{}/chat", machine.document);
        let chat: ChatList = self.api.get(&machine.token, &path).await?;
        let (mut down, mut back, mut other) = (0, 0, Vec::new());
        for message in chat.messages {
            if message.kind != ChatKind::System {
                continue;
            }
            match message.text.as_str() {
                DISCONNECTED => down += 1,
                RECONNECTED => back += 1,
                _ => other.push(message.text),
            }
        }
        Ok((down, back, other))
    }

    async fn say(&self, machine: &Machine, text: &str) -> Result<()> {
        self.api
            .chat(&machine.token, &machine.document, text)
            .await?;
        Ok(())
    }

    /// Polls every machine until `check` holds for all of them; the time
    /// from `since` until it did. Machines already done are not asked again.
    async fn until_all<'m, F, Fut>(
        &self,
        machines: &'m [Machine],
        since: Instant,
        timeout: Duration,
        what: &str,
        check: F,
    ) -> Result<Duration>
    where
        F: Fn(&'m Machine) -> Fut,
        Fut: Future<Output = Result<bool>>,
    {
        let mut left: Vec<usize> = (0..machines.len()).collect();
        let mut last_error = None;
        loop {
            let results: Vec<(usize, Result<bool>)> = stream::iter(left.iter().copied())
                .map(|i| {
                    let fut = check(&machines[i]);
                    async move { (i, fut.await) }
                })
                .buffer_unordered(self.concurrency)
                .collect()
                .await;
            left.clear();
            for (i, result) in results {
                match result {
                    Ok(true) => {}
                    Ok(false) => left.push(i),
                    Err(e) => {
                        last_error = Some(e.to_string());
                        left.push(i);
                    }
                }
            }
            if left.is_empty() {
                return Ok(since.elapsed());
            }
            if since.elapsed() > timeout {
                return Err(format!(
                    "{what}: {} of {} machines still not there after {timeout:?} (last error: {last_error:?})",
                    left.len(),
                    machines.len()
                )
                .into());
            }
            left.sort_unstable();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl StormFigures {
    /// Per machine: from `welcome` to done (the `resume` step alone).
    fn step(&self) -> Vec<Duration> {
        self.done
            .iter()
            .zip(&self.welcome)
            .map(|(done, welcome)| done.saturating_sub(*welcome))
            .collect()
    }

    fn json(&self) -> serde_json::Value {
        let mut figures = json!({
            "machines": self.machines,
            "failed": self.failed,
            "errors": self.errors,
            "syn_retried": self.retried(),
            "wall_ms": ms(self.wall()),
            "server_cpu_ms": self.cpu.server * 1e3,
            "bench_cpu_ms": self.cpu.client * 1e3,
            "other_cpu_pct": self.cpu.other_share(),
            "listen_overflows": self.tcp("ListenOverflows"),
            "listen_drops": self.tcp("ListenDrops"),
            "syn_retransmits": self.tcp("TCPSynRetrans"),
        });
        let steps = self.step();
        for (name, samples) in [
            ("connect", &self.connected),
            ("upgrade", &self.upgraded),
            ("welcome", &self.welcome),
            ("done", &self.done),
            ("step", &steps),
        ] {
            for p in [50, 99] {
                figures[format!("{name}_p{p}_ms")] = json!(percentile_ms(samples, f64::from(p)));
            }
        }
        figures
    }

    /// Counter `name` of [`ACCEPT_QUEUE`] over the storm.
    fn tcp(&self, name: &str) -> u64 {
        self.tcp.map_or(0, |tcp| tcp.get(name))
    }

    /// The figures the running log and the table both show, formatted:
    /// ok, failed, TCP connect, SYN retried, `welcome`, the resume step,
    /// done (each of those four p50 / p99 ms), all done ms, server CPU
    /// ms, bench CPU ms, other CPU, listen overflows.
    fn cells(&self) -> [String; 12] {
        let [connect, welcome, step, done] =
            [&self.connected, &self.welcome, &self.step(), &self.done].map(|s| {
                format!(
                    "{:.1} / {:.1}",
                    percentile_ms(s, 50.0),
                    percentile_ms(s, 99.0)
                )
            });
        [
            (self.machines - self.failed).to_string(),
            self.failed.to_string(),
            connect,
            self.retried().to_string(),
            welcome,
            step,
            done,
            format!("{:.1}", ms(self.wall())),
            format!("{:.0}", self.cpu.server * 1e3),
            format!("{:.0}", self.cpu.client * 1e3),
            self.cpu.other_pct(),
            self.tcp("ListenOverflows").to_string(),
        ]
    }

    fn print(&self, label: &str) {
        let [ok, failed, connect, retried, welcome, step, done, wall, server, bench, other, overflows] =
            self.cells();
        eprintln!(
            "  {label}: {ok} ok, {failed} failed; TCP connect p50 / p99 {connect} ms ({retried} took a SYN retry); welcome {welcome} ms; resume step {step} ms; done {done} ms; all done {wall} ms; server CPU {server} ms, bench CPU {bench} ms, other {other}; listen overflows {overflows}, SYN retransmits {}",
            self.tcp("TCPSynRetrans"),
        );
        for e in &self.errors {
            eprintln!("    error: {e}");
        }
    }

    fn row(&self, round: &str, label: &str) {
        println!("| {round} | {label} | {} |", self.cells().join(" | "));
    }
}

/// The server's memory and open descriptors at one point.
struct Sample {
    label: String,
    rss: f64,
    fds: usize,
}

fn sample(server: &Margin, label: impl Into<String>) -> Sample {
    let sample = Sample {
        label: label.into(),
        rss: rss_kib(server.pid).unwrap_or(0) as f64 / 1024.0,
        fds: open_fds(server.pid),
    };
    eprintln!(
        "  memory: {} — VmRSS {:.1} MiB, {} fds",
        sample.label, sample.rss, sample.fds
    );
    sample
}

struct Round {
    noticed: Duration,
    chat_said: Duration,
    fresh: StormFigures,
    resume: StormFigures,
    cards_back: Duration,
    cpu: CpuUse,
}

// ---------------------------------------------------------------- the run

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

    let mut rounds = Vec::new();
    for round in 1..=config.rounds {
        eprintln!("round {round}:");
        let round_cpu = CpuSnap::take(ServerCpu::Process(server.pid));
        memory.push(sample(&server, format!("round {round}: before the drop")));
        let cut_at = links.abort().await;
        let noticed = api
            .until_all(
                &machines,
                cut_at,
                config.timeout,
                "server noticed the drop",
                |m| async move {
                    let view = api.view(m).await?;
                    Ok(view.disconnected && !view.connected)
                },
            )
            .await?;
        memory.push(sample(
            &server,
            format!("round {round}: all shown disconnected"),
        ));
        let chat_said = api
            .until_all(
                &machines,
                cut_at,
                config.timeout,
                "Chat says disconnected",
                |m| async move { Ok(api.system_lines(m).await?.0 == round) },
            )
            .await?;
        eprintln!(
            "  all {n} shown disconnected after {noticed:.1?}, Chat said so after {chat_said:.1?}"
        );
        tokio::time::sleep(config.away).await;
        memory.push(sample(
            &server,
            format!("round {round}: away, {:?} later", config.away),
        ));

        // Peer: the same N machines, fresh links, no resume.
        let (fresh_links, fresh, _) = storm(&server, &machines, false, config.timeout).await?;
        fresh.print("fresh links (peer)");
        if fresh.failed > 0 {
            problems.push(format!(
                "round {round}: {} fresh links failed: {:?}",
                fresh.failed, fresh.errors
            ));
        }
        memory.push(sample(
            &server,
            format!("round {round}: {n} fresh links open, sessions away"),
        ));
        fresh_links.abort().await;
        settle_process(server.pid).await;
        memory.push(sample(
            &server,
            format!("round {round}: fresh links cut, sessions away"),
        ));

        // The storm: every machine comes back and resumes its session.
        let (resumed_links, resume, arrivals) =
            storm(&server, &machines, true, config.timeout).await?;
        links = resumed_links;
        resume.print("resume");
        if resume.failed > 0 {
            problems.push(format!(
                "round {round}: {} resumes failed: {:?}",
                resume.failed, resume.errors
            ));
        }
        for (machine, arrival) in machines.iter().zip(&arrivals) {
            let Some(Arrival {
                resumed: Some((sessions, ended)),
                ..
            }) = arrival
            else {
                continue;
            };
            let session = machine.seen.session().unwrap_or_default();
            let carried = sessions.len() == 1
                && sessions[0].session == session
                && sessions[0].document == machine.document
                && sessions[0].withdrawn.is_empty();
            if !carried || !ended.is_empty() {
                problems.push(format!(
                    "round {round}: document {} resumed {sessions:?}, ended {ended:?}",
                    machine.document
                ));
            }
        }
        let checked = Instant::now();
        let cards_back = api
            .until_all(
                &machines,
                checked,
                config.timeout,
                "run cards back",
                |m| async move {
                    let view = api.view(m).await?;
                    Ok(view.connected
                        && !view.disconnected
                        && view.runs.len() == 1
                        && view.runs[0].status == RunStatus::Running
                        && !view.runs[0].disconnected)
                },
            )
            .await;
        let cards_back = match cards_back {
            Ok(d) => d,
            Err(e) => {
                problems.push(format!("round {round}: {e}"));
                Duration::ZERO
            }
        };
        let said = api
            .until_all(
                &machines,
                checked,
                config.timeout,
                "Chat says reconnected",
                |m| async move {
                    let (down, back, other) = api.system_lines(m).await?;
                    if !other.is_empty() {
                        return Err(format!("unexpected Chat lines: {other:?}").into());
                    }
                    Ok(down == round && back == round)
                },
            )
            .await;
        if let Err(e) = said {
            problems.push(format!("round {round}: {e}"));
        }
        // Give a stray invoke time to arrive before counting.
        settle_process(server.pid).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        for machine in &machines {
            let invokes = machine.seen.invokes.load(Ordering::SeqCst);
            if invokes != 1 {
                problems.push(format!(
                    "round {round}: document {} got {invokes} invokes",
                    machine.document
                ));
            }
            let unexpected = std::mem::take(
                &mut *machine
                    .seen
                    .unexpected
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
            );
            if !unexpected.is_empty() {
                problems.push(format!(
                    "round {round}: document {}: {unexpected:?}",
                    machine.document
                ));
            }
        }
        memory.push(sample(&server, format!("round {round}: all resumed")));
        eprintln!("  run cards back {cards_back:.1?} after the check began");
        rounds.push(Round {
            noticed,
            chat_said,
            fresh,
            resume,
            cards_back,
            cpu: round_cpu.since(ServerCpu::Process(server.pid)),
        });
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

    // ------------------------------------------------------------ report
    println!();
    println!(
        "Reconnect storm: {n} machines, {} rounds, away {:?} after the server noticed; load average {load_start} at start, {load_end} at end; setup {setup:.1?}; first {n} sessions in use after {sessions:.1?}",
        config.rounds, config.away
    );
    println!();
    println!("Times in ms from the storm's release, per machine (p50 / p99). \"resume step\" is from `welcome` to `resumed` on the same link; \"done\" is `resumed` (resume) or `welcome` (fresh).");
    println!();
    println!("{}", table_head("| round | storm | ok | failed | TCP connect p50 / p99 | SYN retried (≥ 1 s) | welcome p50 / p99 | resume step p50 / p99 | done p50 / p99 | all done (wall) | server CPU ms | bench CPU ms | other CPU | listen overflows |"));
    first.row("0", "first link-up (no sessions)");
    for (i, r) in rounds.iter().enumerate() {
        r.fresh.row(&(i + 1).to_string(), "fresh links (peer)");
        r.resume.row(&(i + 1).to_string(), "resume");
    }
    println!();
    println!("{}", table_head("| round | resume/fresh all done | resume/fresh p50 | resume/fresh p99 | resume/fresh server CPU | drop noticed (all disconnected) ms | Chat said disconnected ms | run cards back ms | other CPU over the round |"));
    for (i, r) in rounds.iter().enumerate() {
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {} |",
            i + 1,
            ratio(ms(r.resume.wall()), ms(r.fresh.wall())),
            ratio(
                percentile_ms(&r.resume.done, 50.0),
                percentile_ms(&r.fresh.done, 50.0)
            ),
            ratio(
                percentile_ms(&r.resume.done, 99.0),
                percentile_ms(&r.fresh.done, 99.0)
            ),
            ratio(r.resume.cpu.server, r.fresh.cpu.server),
            ms(r.noticed),
            ms(r.chat_said),
            ms(r.cards_back),
            r.cpu.other_pct(),
        );
    }
    println!();
    println!("{}", table_head("| server | VmRSS MiB | open fds |"));
    for s in &memory {
        println!("| {} | {:.1} | {} |", s.label, s.rss, s.fds);
    }
    println!("| peak (VmHWM) | {peak:.1} | |");
    println!();
    println!(
        "server log: {} WARN, {} ERROR lines{}",
        log.0,
        log.1,
        if log.2.is_empty() { "" } else { ":" }
    );
    for line in &log.2 {
        println!("  {line}");
    }

    if let Some(path) = &config.json {
        let value = json!({
            "machines": n,
            "rounds": config.rounds,
            "away_secs": config.away.as_secs_f64(),
            "load_average": {"start": load_start, "end": load_end},
            "setup_ms": ms(setup),
            "sessions_in_use_ms": ms(sessions),
            "first_link_up": first.json(),
            "rounds_figures": rounds.iter().map(|r| json!({
                "fresh": r.fresh.json(),
                "resume": r.resume.json(),
                "noticed_ms": ms(r.noticed),
                "chat_said_ms": ms(r.chat_said),
                "cards_back_ms": ms(r.cards_back),
                "round_other_cpu_pct": r.cpu.other_share(),
            })).collect::<Vec<_>>(),
            "memory": memory.iter().map(|s| json!({"at": s.label, "rss_mib": s.rss, "fds": s.fds})).collect::<Vec<_>>(),
            "peak_mib": peak,
            "server_log": {"warn": log.0, "error": log.1, "samples": log.2},
            "problems": problems,
        });
        std::fs::write(path, serde_json::to_string_pretty(&value)?)?;
    }
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
