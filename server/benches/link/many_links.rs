//! Parts 2 and 3 of the link bench, many idle links: `LINKS` machines
//! link at once, each holds one session, idle through `HOLD_SECONDS`,
//! then detach and relink; server memory at each step, and the peer
//! under the same burst.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use margin_protocol::link::{ClientMessage, ServerMessage};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::support::accounts::planners;
use crate::support::cpu::{CpuSnap, CpuUse, ServerCpu};
use crate::support::machine::{connect, frame, hello, send, Frame, PATIENCE};
use crate::support::margin::Margin;
use crate::support::peers::PeerProcess;
use crate::support::planner::Api;
use crate::support::process::{loadavg, Mem, TcpCounters, ACCEPT_QUEUE};
use crate::support::report::{ms, percentile};

use crate::report::Report;
use crate::{quiet, Config};

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
pub(crate) struct Burst {
    pub(crate) opened: usize,
    pub(crate) failed: usize,
    pub(crate) failures: BTreeMap<String, usize>,
    /// Burst start → the last `welcome`.
    pub(crate) all_welcomed: Duration,
    /// Connect → `welcome` per link, sorted.
    pub(crate) open_sorted: Vec<Duration>,
    /// The kernel's [`ACCEPT_QUEUE`] counters during the burst
    /// (machine-wide).
    pub(crate) tcp: [u64; ACCEPT_QUEUE.len()],
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
pub(crate) struct PeerLinks {
    pub(crate) burst: Burst,
    pub(crate) mem_start: Mem,
    pub(crate) mem_links: Mem,
    pub(crate) closed: u64,
}

/// What part 2/3 measured.
#[derive(Default)]
pub(crate) struct LinksResult {
    pub(crate) links: usize,
    pub(crate) setup: Duration,
    pub(crate) burst: Burst,
    pub(crate) peer: PeerLinks,
    pub(crate) sessions: Duration,
    invokes: u64,
    pub(crate) replies: u64,
    pub(crate) hold: Duration,
    pub(crate) hold_cpu: CpuUse,
    pub(crate) heartbeats: u64,
    refusals: u64,
    pub(crate) closed_during: u64,
    pub(crate) close_reasons: BTreeMap<String, usize>,
    pub(crate) connected: usize,
    pub(crate) replying: usize,
    pub(crate) check_errors: usize,
    pub(crate) still_open: usize,
    pub(crate) detach: Duration,
    pub(crate) mem_start: Mem,
    pub(crate) mem_links: Mem,
    pub(crate) mem_sessions: Mem,
    pub(crate) mem_hold: Mem,
    pub(crate) mem_detached: Mem,
    pub(crate) mem_released: Mem,
    /// Per relink cycle: links opened, memory with them open, after detach.
    pub(crate) relinks: Vec<(usize, Mem, Mem)>,
    pub(crate) shutdown: Duration,
    pub(crate) shutdown_status: String,
    pub(crate) load_start: String,
    pub(crate) load_end: String,
}

pub(crate) async fn many_links(config: &Config, report: &mut Report) {
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
