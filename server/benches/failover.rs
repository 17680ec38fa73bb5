//! Crash trials over a cluster (SPEC C1, C3, S3): `NODES`
//! `margin serve --cluster` processes on one PostgreSQL, editors writing
//! to `DOCUMENTS` documents through random nodes, and `TRIALS` times a
//! random node killed with SIGKILL mid-edit and started again. It prints
//! the tally of acknowledged updates lost (must be 0) and how long each
//! document owned by the killed node took to be served again (failover:
//! from the kill to a fresh client's completed handshake on another node).
//! Results and how to read them: `server/benches/results/cluster.md`.
//!
//! ```sh
//! cargo build --release -p margin-server --bin margin
//! cargo bench -p margin-server --bench failover
//! TRIALS=60 DOCUMENTS=12 cargo bench -p margin-server --bench failover
//! ```
//!
//! Each document has a writer and a reader, y-websocket clients on `yrs`
//! that connect to a random live node and, whenever their connection ends,
//! to another. The writer appends a paragraph `RATE` times a second. The
//! reader counts as **acknowledged** every paragraph it was sent: the
//! server broadcasts a change only once it is committed. Both start each
//! connection from an empty document, so a client never hands the server
//! back a change it lost (a real editor would; here that would hide a
//! loss). At the end, a fresh client reads each document and every
//! acknowledged paragraph must be in it.
//!
//! Knobs (env vars): `MARGIN_BIN` (default `target/release/margin`),
//! `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`; the
//! bench works in a schema of its own there and drops it at the end),
//! `NODES` (3), `DOCUMENTS` (6), `TRIALS` (30), `RATE` (20 edits/s a
//! document), `PAUSE_MS` (700: load between two kills), `LEASE_TTL_MS`
//! (1500) and `LEASE_RENEW_MS` (500), `SEED` (1: which nodes die).

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
mod support;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use margin_server::storage::Store;

use support::accounts::owner;
use support::knobs::{env_or, under_cargo_bench};
use support::margin::{margin_bin, Margin};
use support::postgres::Scratch;
use support::report::{describe, percentile};
use support::sync::SyncSocket;

/// How long a client waits for a node to serve it before trying another.
const PATIENCE: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() {
    if under_cargo_bench("failover") {
        bench().await;
    }
}

/// The live nodes' addresses, by slot; a killed node's slot is empty
/// until it is started again.
#[derive(Clone, Default)]
struct Live(Arc<Mutex<Vec<Option<SocketAddr>>>>);

impl Live {
    fn pick(&self, rng: &mut Rng) -> Option<SocketAddr> {
        let live: Vec<SocketAddr> = self
            .0
            .lock()
            .expect("live")
            .iter()
            .flatten()
            .copied()
            .collect();
        (!live.is_empty()).then(|| live[rng.below(live.len())])
    }

    /// A connection to `path` on a live node, trying another until one
    /// serves it.
    async fn connect(&self, path: &str, rng: &mut Rng) -> SyncSocket {
        loop {
            if let Some(addr) = self.pick(rng) {
                let url = format!("ws://{addr}{path}");
                if let Ok(socket) = SyncSocket::connect(&url, PATIENCE).await {
                    return socket;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn set(&self, slot: usize, addr: Option<SocketAddr>) {
        self.0.lock().expect("live")[slot] = addr;
    }
}

/// A small xorshift generator: the trials repeat for one `SEED`.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// What the editors did.
#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    connections: AtomicU64,
}

async fn bench() {
    let bin = margin_bin("failover");
    for line in describe(&bin) {
        println!("{line}");
    }
    let nodes: usize = env_or("NODES", 3);
    let documents: usize = env_or("DOCUMENTS", 6);
    let trials: usize = env_or("TRIALS", 30);
    let rate: u64 = env_or("RATE", 20);
    let pause = Duration::from_millis(env_or("PAUSE_MS", 700));
    let ttl: u64 = env_or("LEASE_TTL_MS", 1500);
    let renew: u64 = env_or("LEASE_RENEW_MS", 500);
    let mut rng = Rng(env_or::<u64>("SEED", 1).max(1));

    let scratch = Scratch::new("failover").await;
    let url = scratch.url.clone();
    let store = Store::open(&url).await.expect("the bench's store");
    let owner = owner(&store, "failover", None).await;
    let (account, token) = (owner.account, owner.token);
    let mut ids = Vec::new();
    for d in 0..documents {
        let doc = store
            .create_document(&account, &format!("Plan {d}"))
            .await
            .expect("a document");
        ids.push(doc.id);
    }
    let data = tempfile::tempdir().expect("a temp data dir");
    let args: Vec<String> = [
        "--database-url",
        &url,
        "--cluster",
        "--lease-ttl-ms",
        &ttl.to_string(),
        "--lease-renew-ms",
        &renew.to_string(),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let live = Live(Arc::new(Mutex::new(vec![None; nodes])));
    let mut running = Vec::new();
    for slot in 0..nodes {
        let node = Margin::start(&bin, data.path(), &args).await;
        live.set(slot, Some(node.addr));
        running.push(Some(node));
    }
    println!(
        "cluster: {nodes} nodes on PostgreSQL, lease TTL {ttl} ms renewed every {renew} ms; \
         {documents} documents, each with a writer at {rate} edits/s and a reader, on random nodes"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let mut acked = Vec::new();
    let mut editors = Vec::new();
    for (d, id) in ids.iter().enumerate() {
        let seen = Arc::new(Mutex::new(HashSet::new()));
        acked.push(seen.clone());
        let path = format!("/documents/{id}/sync?token={token}");
        editors.push(tokio::spawn(writer(
            live.clone(),
            path.clone(),
            d,
            rate,
            stop.clone(),
            tally.clone(),
            2 * d as u64 + 7,
        )));
        editors.push(tokio::spawn(reader(
            live.clone(),
            path,
            seen,
            stop.clone(),
            tally.clone(),
            2 * d as u64 + 8,
        )));
    }

    let mut failovers = Vec::new();
    let mut unowned = 0;
    let started = Instant::now();
    for trial in 0..trials {
        tokio::time::sleep(pause).await;
        let slot = rng.below(nodes);
        let Some(victim) = running[slot].take() else {
            continue;
        };
        let mut owned = Vec::new();
        for id in &ids {
            if let Ok(Some(holder)) = store.lease_holder(id).await {
                if holder.node.advertise == format!("http://{}", victim.addr) {
                    owned.push(id.clone());
                }
            }
        }
        live.set(slot, None);
        victim.kill().await;
        let killed = Instant::now();
        let probes: Vec<_> = owned
            .iter()
            .map(|id| {
                let (live, path) = (live.clone(), format!("/documents/{id}/sync?token={token}"));
                let mut rng = Rng(trial as u64 * 7919 + 13);
                tokio::spawn(async move {
                    let socket = live.connect(&path, &mut rng).await;
                    let took = killed.elapsed();
                    socket.close().await;
                    took
                })
            })
            .collect();
        let mut worst = Duration::ZERO;
        for probe in probes {
            let took = probe.await.expect("a probe");
            worst = worst.max(took);
            failovers.push(took);
        }
        if owned.is_empty() {
            unowned += 1;
        }
        println!(
            "trial {:>2}: killed node {slot}, which owned {} document(s); served again after {} ms",
            trial + 1,
            owned.len(),
            worst.as_millis()
        );
        let node = Margin::start(&bin, data.path(), &args).await;
        live.set(slot, Some(node.addr));
        running[slot] = Some(node);
    }
    let load_for = started.elapsed();

    stop.store(true, Ordering::Relaxed);
    for editor in editors {
        let _ = editor.await;
    }
    let mut lost = 0;
    let mut acknowledged = 0;
    let mut rng_final = Rng(99);
    for (id, seen) in ids.iter().zip(&acked) {
        let addr = live.pick(&mut rng_final).expect("a live node");
        let socket = SyncSocket::connect(
            &format!("ws://{addr}/documents/{id}/sync?token={token}"),
            PATIENCE,
        )
        .await
        .expect("the final read");
        let stored: HashSet<String> = socket.texts().into_iter().collect();
        socket.close().await;
        let seen = seen.lock().expect("acknowledged");
        acknowledged += seen.len();
        lost += seen.iter().filter(|text| !stored.contains(*text)).count();
    }
    failovers.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!();
    println!(
        "{trials} kill -9s in {:.0} s: {} documents failed over ({unowned} kills hit a node that owned none)",
        load_for.as_secs_f64(),
        failovers.len()
    );
    println!(
        "edits sent {}, acknowledged (seen by a reader) {acknowledged}, lost {lost}; {} connections made",
        tally.sent.load(Ordering::Relaxed),
        tally.connections.load(Ordering::Relaxed)
    );
    println!(
        "failover (kill -9 to a fresh client served): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        ms(percentile(&failovers, 50.0)),
        ms(percentile(&failovers, 99.0)),
        ms(failovers.last().copied().unwrap_or_default())
    );
    for node in running.into_iter().flatten() {
        let stopped = node.terminate().await;
        if !stopped.first.is_empty() {
            println!(
                "a node stopped ({}); {}",
                stopped.status,
                stopped.log_line()
            );
        }
    }
    drop(store);
    scratch.drop_schema().await;
    assert_eq!(lost, 0, "acknowledged updates were lost");
}

/// Appends a paragraph to document `d` `rate` times a second through
/// whichever node it reaches, reconnecting whenever its connection ends.
async fn writer(
    live: Live,
    path: String,
    d: usize,
    rate: u64,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    seed: u64,
) {
    let mut rng = Rng(seed);
    let period = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut socket = live.connect(&path, &mut rng).await;
        tally.connections.fetch_add(1, Ordering::Relaxed);
        let mut tick = tokio::time::interval(period);
        while !stop.load(Ordering::Relaxed) {
            tokio::select! {
                _ = tick.tick() => {
                    if socket.append(&format!("document {d} edit {k}")).await.is_err() {
                        break;
                    }
                    k += 1;
                    tally.sent.fetch_add(1, Ordering::Relaxed);
                }
                read = socket.next() => if !matches!(read, Ok(Some(_))) { break },
            }
        }
    }
}

/// Records every paragraph the server sends for the document, reading
/// through whichever node it reaches.
async fn reader(
    live: Live,
    path: String,
    seen: Arc<Mutex<HashSet<String>>>,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    seed: u64,
) {
    let mut rng = Rng(seed);
    while !stop.load(Ordering::Relaxed) {
        let mut socket = live.connect(&path, &mut rng).await;
        tally.connections.fetch_add(1, Ordering::Relaxed);
        loop {
            seen.lock().expect("acknowledged").extend(socket.texts());
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let read = tokio::time::timeout(Duration::from_millis(200), socket.next()).await;
            if matches!(read, Ok(Ok(None) | Err(_))) {
                break;
            }
        }
    }
}
