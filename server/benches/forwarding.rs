//! The cost of forwarding in a cluster (SPEC C2): edit-to-all latency for
//! receivers connected to a node that does not own the document (their
//! sockets forwarded to the owner) against receivers on the owner itself,
//! in the same run and for the same edits; the CPU each node spends; and
//! what a node's lease upkeep costs per document it owns; and the fan-out
//! through a forwarder in a closed loop. Results and how
//! to read them: `server/benches/results/cluster.md`.
//!
//! ```sh
//! cargo build --release -p margin-server --bin margin
//! cargo bench -p margin-server --bench forwarding
//! RECEIVERS=50 RATE=100 cargo bench -p margin-server --bench forwarding
//! ```
//!
//! Two `margin serve --cluster` nodes on one PostgreSQL. A first client on
//! node **A** makes A the document's owner. A writer on A appends a
//! paragraph `RATE` times a second for `SECONDS` (open loop); `RECEIVERS`
//! y-websocket clients on A and as many on node **B** (forwarded to A,
//! frame for frame) time each edit from its send to its arrival. For each
//! edit and each side, the slowest receiver's arrival is that side's
//! edit-to-all latency; the figure of merit is forwarded p99 / direct p99.
//!
//! Closed loop, on a second document A owns: `RECEIVERS` fresh receivers
//! on A only, then as many on B only; its writer keeps at most `WINDOW` edits not yet at every one of
//! them, `CLOSED_EDITS` edits -> edits/s fanned out to all, and each
//! node's CPU a delivery, direct against forwarded.
//!
//! Lease upkeep: node A is then left to own `OWNED` documents (a client
//! joins each, then stays idle) and the database's commits are counted
//! over `QUIET_SECONDS` with none and with all of them owned; a node
//! renews one row, so the difference per document is the upkeep.
//!
//! Memory: `IDLE_CONNECTIONS` idle clients join on A, then as many on B;
//! the nodes' `VmRSS` before and after each gives what a direct and a
//! forwarded connection cost where.
//!
//! Knobs (env vars): `MARGIN_BIN` (default `target/release/margin`),
//! `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`; a
//! schema of the bench's own, dropped at the end), `RECEIVERS` (20 a
//! side), `RATE` (50 edits/s), `SECONDS` (20), `IDLE_CONNECTIONS` (300 a
//! side), `WINDOW` (64), `CLOSED_EDITS` (3000), `OWNED` (200),
//! `QUIET_SECONDS` (5).

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use margin_server::storage::Store;
use sqlx::Row;
use tokio::sync::watch;
use yrs::{ClientID, ReadTxn, Transact};

use support::accounts::owner;
use support::cpu::{CpuSnap, ServerCpu};
use support::knobs::{env_or, under_cargo_bench};
use support::margin::{margin_bin, Margin};
use support::postgres::Scratch;
use support::process::rss_kib;
use support::report::{describe, percentile};
use support::sync::SyncSocket;

const PATIENCE: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() {
    if under_cargo_bench("forwarding") {
        bench().await;
    }
}

async fn bench() {
    let bin = margin_bin("forwarding");
    for line in describe(&bin) {
        println!("{line}");
    }
    let receivers: usize = env_or("RECEIVERS", 20);
    let rate: u64 = env_or("RATE", 50);
    let seconds: f64 = env_or("SECONDS", 20.0);
    let owned: usize = env_or("OWNED", 200);
    let quiet = Duration::from_secs_f64(env_or("QUIET_SECONDS", 5.0));

    let mut scratch = Scratch::new("forwarding").await;
    let (url, schema) = (scratch.url.clone(), scratch.schema.clone());
    let store = Store::open(&url).await.expect("the bench's store");
    let owner = owner(&store, "forwarding", Some("Forwarded plan")).await;
    let (account, token) = (owner.account, owner.token);
    let doc = owner.document.expect("a document");
    let data = tempfile::tempdir().expect("a temp data dir");
    let args: Vec<String> = ["--database-url", &url, "--cluster"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    let a = Margin::start(&bin, data.path(), &args).await;
    let b = Margin::start(&bin, data.path(), &args).await;
    let sync =
        |node: &Margin, doc: &str| format!("ws://{}/documents/{doc}/sync?token={token}", node.addr);

    // The writer joins first: A owns the document.
    let mut writer = SyncSocket::connect(&sync(&a, &doc), PATIENCE)
        .await
        .expect("the writer");
    let client = writer.doc.client_id();
    let mut direct = Vec::new();
    let mut forwarded = Vec::new();
    for _ in 0..receivers {
        direct.push(Receiver::start(&sync(&a, &doc), client).await);
        forwarded.push(Receiver::start(&sync(&b, &doc), client).await);
    }
    println!(
        "cluster: 2 nodes on PostgreSQL; node A owns the document; a writer on A at {rate} edits/s \
         for {seconds} s; {receivers} receivers on A (direct) and {receivers} on B (forwarded to A)"
    );

    let total = (rate as f64 * seconds) as usize;
    let period = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let (cpu_a, cpu_b) = (ServerCpu::Process(a.pid), ServerCpu::Process(b.pid));
    let (snap_a, snap_b) = (CpuSnap::take(cpu_a), CpuSnap::take(cpu_b));
    let start = tokio::time::Instant::now() + Duration::from_millis(5);
    let mut sent = Vec::with_capacity(total);
    for k in 0..total {
        tokio::time::sleep_until(start + period * k as u32).await;
        let at = Instant::now();
        writer
            .append(&format!("edit {k}"))
            .await
            .expect("the writer's connection");
        let clock = writer.doc.transact().state_vector().get(&client);
        sent.push((at, clock));
    }
    let last = sent.last().map_or(0, |(_, clock)| *clock);
    for receiver in direct.iter_mut().chain(forwarded.iter_mut()) {
        receiver.until(last).await;
    }
    let (used_a, used_b) = (snap_a.since(cpu_a), snap_b.since(cpu_b));
    let direct_ms = edit_to_all(&sent, &direct);
    let forwarded_ms = edit_to_all(&sent, &forwarded);
    let row = |name: &str, ms: &[f64]| {
        println!(
            "{name:<24} p50 {:>6.2} ms   p99 {:>6.2} ms   max {:>6.2} ms",
            percentile(ms, 50.0),
            percentile(ms, 99.0),
            ms.last().copied().unwrap_or_default()
        )
    };
    println!();
    println!("edit to all receivers ({total} edits):");
    row("on the owner (direct)", &direct_ms);
    row("on B (forwarded)", &forwarded_ms);
    println!(
        "forwarded / direct: p50 ×{:.2}, p99 ×{:.2}",
        percentile(&forwarded_ms, 50.0) / percentile(&direct_ms, 50.0).max(1e-9),
        percentile(&forwarded_ms, 99.0) / percentile(&direct_ms, 99.0).max(1e-9)
    );
    let frames = (total * receivers) as f64;
    println!(
        "CPU over {:.1} s: node A (owner; serves {} connections) {:.2} s = {:.0}% of a core, \
         {:.1} µs a frame delivered; node B (forwards {receivers}) {:.2} s = {:.0}% of a core, \
         {:.1} µs a frame relayed",
        used_a.wall.as_secs_f64(),
        2 * receivers + 1,
        used_a.server,
        used_a.pct(used_a.server),
        used_a.server * 1e6 / (2.0 * frames),
        used_b.server,
        used_b.pct(used_b.server),
        used_b.server * 1e6 / frames
    );
    drop(direct);
    drop(forwarded);

    // Fan-out at a window: the same writer on A, receivers all on one side.
    let window: usize = env_or("WINDOW", 64);
    let closed_edits: usize = env_or("CLOSED_EDITS", 3000);
    println!();
    println!(
        "closed loop, window {window}: the writer on A keeps at most {window} edits not yet at \
         every receiver; {closed_edits} edits to {receivers} receivers on one side at a time"
    );
    // A document of its own, so the memory figures below see the same
    // document as before this phase existed; its writer joins first, so A
    // owns it.
    let looped = store
        .create_document(&account, "Closed loop")
        .await
        .expect("a document")
        .id;
    let mut looper = SyncSocket::connect(&sync(&a, &looped), PATIENCE)
        .await
        .expect("the closed loop's writer");
    let looper_client = looper.doc.client_id();
    for (side, node) in [("on the owner (direct)", &a), ("on B (forwarded)", &b)] {
        let mut side_receivers = Vec::new();
        for _ in 0..receivers {
            side_receivers.push(Receiver::start(&sync(node, &looped), looper_client).await);
        }
        let (snap_a, snap_b) = (CpuSnap::take(cpu_a), CpuSnap::take(cpu_b));
        let (edits, wall) = closed_loop(
            &mut looper,
            looper_client,
            &mut side_receivers,
            window,
            closed_edits,
        )
        .await;
        let (used_a, used_b) = (snap_a.since(cpu_a), snap_b.since(cpu_b));
        let deliveries = (edits * receivers) as f64;
        println!(
            "{side:<24} {:>7.0} edits/s to all   node A {:.1} µs, node B {:.1} µs of CPU a delivery{}",
            edits as f64 / wall.as_secs_f64(),
            used_a.server * 1e6 / deliveries,
            used_b.server * 1e6 / deliveries,
            if edits < closed_edits {
                format!("   (only {edits} edits reached every receiver within {PATIENCE:?})")
            } else {
                String::new()
            }
        );
    }
    looper.close().await;
    writer.close().await;

    // Memory: idle connections on A (direct) and on B (forwarded to A).
    let idle_connections: usize = env_or("IDLE_CONNECTIONS", 300);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (a0, b0) = (rss(&a), rss(&b));
    let idle_clients = |url: String| async move {
        let mut clients = Vec::new();
        for _ in 0..idle_connections {
            clients.push(
                SyncSocket::connect(&url, PATIENCE)
                    .await
                    .expect("an idle client"),
            );
        }
        clients
    };
    let mut idle = idle_clients(sync(&a, &doc)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (a1, b1) = (rss(&a), rss(&b));
    idle.extend(idle_clients(sync(&b, &doc)).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (a2, b2) = (rss(&a), rss(&b));
    let per = |kib: i64| kib as f64 * 1024.0 / idle_connections as f64 / 1024.0;
    println!();
    println!(
        "memory of {idle_connections} idle connections (VmRSS): direct on A {:+.1} KiB each on A; \
         forwarded through B {:+.1} KiB each on B and {:+.1} KiB each on A (A {a0} → {a1} → {a2} KiB, B {b0} → {b1} → {b2} KiB)",
        per(a1 as i64 - a0 as i64),
        per(b2 as i64 - b1 as i64),
        per(a2 as i64 - a1 as i64),
    );
    for socket in idle {
        socket.close().await;
    }

    // Lease upkeep: commits with no document owned, then with `owned`.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = commits(&mut scratch.admin, quiet).await;
    let mut holders = Vec::new();
    for k in 0..owned {
        let id = store
            .create_document(&account, &format!("Idle {k}"))
            .await
            .expect("a document")
            .id;
        holders.push(
            SyncSocket::connect(&sync(&a, &id), PATIENCE)
                .await
                .expect("an idle client"),
        );
    }
    // The database's counters lag its commits by up to a second or so.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = sqlx::query(&format!(
        "SELECT COUNT(*) AS n FROM {schema}.document_leases"
    ))
    .fetch_one(&mut scratch.admin)
    .await
    .map(|row| row.get::<i64, _>("n"))
    .expect("the leases held");
    let snap = CpuSnap::take(cpu_a);
    let busy = commits(&mut scratch.admin, quiet).await;
    let upkeep_cpu = snap.since(cpu_a);
    println!();
    println!(
        "lease upkeep over {:.0} s: {:.1} commits/s with no document owned, {:.1} commits/s with {held} owned \
         ({:+.3} commits/s a document); node A's CPU while owning them idle: {:.1}% of a core",
        quiet.as_secs_f64(),
        idle,
        busy,
        (busy - idle) / held.max(1) as f64,
        upkeep_cpu.pct(upkeep_cpu.server)
    );
    for holder in holders {
        holder.close().await;
    }
    for node in [a, b] {
        let stopped = node.terminate().await;
        println!("a node {}", stopped.summary());
    }
    drop(store);
    scratch.drop_schema().await;
}

/// `node`'s resident memory in KiB (0 when it cannot be read).
fn rss(node: &Margin) -> u64 {
    rss_kib(node.pid).unwrap_or(0)
}

/// For each edit, the latest arrival among `receivers`, in ms, sorted.
fn edit_to_all(sent: &[(Instant, u32)], receivers: &[Receiver]) -> Vec<f64> {
    let arrivals: Vec<Vec<(Instant, u32)>> = receivers
        .iter()
        .map(|r| r.arrivals.lock().expect("arrivals").clone())
        .collect();
    let mut ms: Vec<f64> = sent
        .iter()
        .map(|(at, clock)| {
            arrivals
                .iter()
                .map(|seen| {
                    let reached = seen
                        .iter()
                        .find(|(_, c)| c >= clock)
                        .map_or(*at, |(when, _)| *when);
                    reached.duration_since(*at).as_secs_f64() * 1e3
                })
                .fold(0.0, f64::max)
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    ms
}

/// Sends up to `edits` edits, each only once every receiver has the one
/// `window` before it; returns how many reached them all and the time
/// from the first send to the last arrival.
async fn closed_loop(
    writer: &mut SyncSocket,
    client: ClientID,
    receivers: &mut [Receiver],
    window: usize,
    edits: usize,
) -> (usize, Duration) {
    let reached_all = |receivers: &[Receiver]| {
        receivers
            .iter()
            .map(|r| *r.clock.borrow())
            .min()
            .unwrap_or(0)
    };
    let start = Instant::now();
    let mut clocks: Vec<u32> = Vec::with_capacity(edits);
    for k in 0..edits {
        if let Some(&due) = k.checked_sub(window).and_then(|back| clocks.get(back)) {
            for receiver in receivers.iter_mut() {
                receiver.until(due).await;
            }
            if reached_all(receivers) < due {
                return (k - window, start.elapsed());
            }
        }
        writer
            .append(&format!("closed {k}"))
            .await
            .expect("the writer's connection");
        clocks.push(writer.doc.transact().state_vector().get(&client));
    }
    let last = clocks.last().copied().unwrap_or(0);
    for receiver in receivers.iter_mut() {
        receiver.until(last).await;
    }
    let reached = reached_all(receivers);
    let done = clocks.iter().filter(|c| **c <= reached).count();
    (done, start.elapsed())
}

/// A receiver: when each frame arrived and the writer's clock it reached.
struct Receiver {
    arrivals: Arc<Mutex<Vec<(Instant, u32)>>>,
    clock: watch::Receiver<u32>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(url: &str, writer: ClientID) -> Receiver {
        let mut socket = SyncSocket::connect(url, PATIENCE)
            .await
            .expect("a receiver");
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let (tx, clock) = watch::channel(0);
        let log = arrivals.clone();
        let task = tokio::spawn(async move {
            while let Ok(Some(_)) = socket.next().await {
                let at = Instant::now();
                let reached = socket.doc.transact().state_vector().get(&writer);
                log.lock().expect("arrivals").push((at, reached));
                let _ = tx.send(reached);
            }
        });
        Receiver {
            arrivals,
            clock,
            task,
        }
    }

    async fn until(&mut self, clock: u32) {
        let _ = tokio::time::timeout(PATIENCE, self.clock.wait_for(|c| *c >= clock)).await;
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Commits per second the database made over `window`.
async fn commits(admin: &mut sqlx::PgConnection, window: Duration) -> f64 {
    let before = commit_count(admin).await;
    tokio::time::sleep(window).await;
    let after = commit_count(admin).await;
    // The second read is a commit of its own.
    (after - before - 1).max(0) as f64 / window.as_secs_f64()
}

/// The database's commits so far.
async fn commit_count(admin: &mut sqlx::PgConnection) -> i64 {
    sqlx::query("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        .fetch_one(admin)
        .await
        .map(|row| row.get(0))
        .unwrap_or(0)
}
