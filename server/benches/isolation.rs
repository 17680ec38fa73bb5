//! Session isolation benchmark: one session's slow tool calls must not
//! hold up another session of the same machine. Results and how to read
//! them: `server/benches/results/isolation.md`.
//!
//! ```sh
//! cargo bench -p margin-server --bench isolation
//! BLOCKS=2000 SECONDS=3 cargo bench -p margin-server --bench isolation
//! ```
//!
//! One `margin serve` (fresh temp data dir, SQLite, defaults) and one
//! machine on one link with two sessions: **A** on a document of `BLOCKS`
//! paragraphs, **B** on a document of one. B calls `read_document` paced
//! (`RATE` calls/s, open loop) for `SECONDS`; round trip = `tool-call`
//! written → its `tool-result` read. Meanwhile A alternates, a window of
//! `WINDOW_SECONDS` at a time: **idle** (it does nothing), then **loaded**
//! (it calls `read_document` in a closed loop, one call in flight). Each of
//! B's calls counts for the window it was sent in (the first tenth of each
//! window is left out), so idle and loaded are sampled over the same
//! minutes and a drift in the disk's commit latency weighs on both alike.
//! With `A_RATE` set, A's reads are paced instead (open loop, that many a
//! second, at most 64 in flight): a load that leaves the machine's cores
//! room, so what B's figures show is blocking, not a saturated machine.
//! The client reads every frame but parses only B's, so A's large results
//! cost it no JSON decoding. The figure of merit is B's p99 loaded against
//! its p99 idle (the target: within 2 ms).
//!
//! Knobs (env vars): `MARGIN_BIN` (default `target/release/margin`),
//! `OPEN` (1: an editor keeps document A loaded; 0: every read rebuilds
//! it from storage),
//! `DATABASE_URL` (unset: SQLite in the temp dir; `postgres://…`: that
//! database, which should be empty),
//! `BLOCKS` (10000), `RATE` (100), `SECONDS` (20), `WINDOW_SECONDS` (1),
//! `REPEAT` (2), `A_RATE` (0: A reads in a closed loop),
//! `QUIET_WAIT_SECONDS` (60: before each run, wait up to this long for the
//! machine to be idle).

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use support::cpu::{settle, CpuSnap, CpuUse, ServerCpu};
use support::knobs::env_or;
use support::margin::{margin_bin, Margin, Storage};
use support::planner::{account, Api, Link, Turn};
use support::report::{describe, percentile, table_head};
use support::sync::viewer;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("cannot build the bench runtime");
    runtime.block_on(bench());
}

struct Setup {
    token: String,
    credential: String,
    /// Document A's owner's token and machine credential: the same as
    /// above, or another account's with `SEPARATE=1`.
    big_token: String,
    big_credential: String,
    big: String,
    small: String,
}

async fn bench() {
    let bin = margin_bin("isolation");
    let blocks: usize = env_or("BLOCKS", 10_000);
    let rate: u64 = env_or("RATE", 100);
    let a_rate: u64 = env_or("A_RATE", 0);
    let seconds: f64 = env_or("SECONDS", 20.0);
    let repeat: usize = env_or("REPEAT", 2);
    for line in describe(&bin) {
        println!("{line}");
    }
    // `DATABASE_URL=postgres://…/db` runs it on PostgreSQL (give it an empty
    // database).
    let storage = Storage::from_env();
    let args = storage.cli_args();
    // `SEPARATE=1` (a diagnostic): A's document belongs to another account,
    // so A runs on another machine's link and B's link carries none of A's
    // results.
    let separate = env_or::<u8>("SEPARATE", 0) == 1;
    let token = account(&bin, &args, "iso");
    let other = separate.then(|| account(&bin, &args, "iso2"));
    let margin = Margin::start(&bin, storage.data.path(), &storage.serve_args()).await;
    println!("storage: {}", storage.name());
    let api = Api::new(margin.addr);
    let setup = prepare(&api, token, other).await;
    let filled = Instant::now();
    api.fill(&setup.big_token, &setup.big, blocks).await;
    api.fill(&setup.token, &setup.small, 1).await;
    println!(
        "document A: {blocks} paragraphs (written in {:.1} s); document B: 1",
        filled.elapsed().as_secs_f64()
    );
    // `OPEN=1` (the default): an editor has document A open, so the server
    // keeps it loaded; `OPEN=0`: nobody does, and each read rebuilds it
    // from storage.
    let open: u8 = env_or("OPEN", 1);
    let _viewer = if open == 1 {
        Some(viewer(margin.addr, &setup.big, &setup.big_token).await)
    } else {
        None
    };
    println!(
        "document A open in an editor: {}",
        if open == 1 { "yes" } else { "no" }
    );
    let link = Arc::new(Link::open(margin.addr, &setup.credential).await);
    let link_a = if separate {
        Arc::new(Link::open(margin.addr, &setup.big_credential).await)
    } else {
        link.clone()
    };
    let a = Arc::new(link_a.turn(&api, &setup.big_token, &setup.big, "a").await);
    let b = link.turn(&api, &setup.token, &setup.small, "b").await;
    println!(
        "A's session on {} link",
        if separate {
            "another machine's"
        } else {
            "B's machine's"
        }
    );
    // Warm both reads (document A loaded, its outline cached).
    link_a.read(&a, "warm").await;
    let bytes = link.read(&b, "warm").await;
    println!(
        "B's result: {bytes} bytes; A's: {} bytes",
        link_a.read(&a, "warm2").await
    );
    let cpu = ServerCpu::Process(margin.pid);
    let window: f64 = env_or("WINDOW_SECONDS", 1.0);
    let mut idle = Vec::new();
    let mut loaded = Vec::new();
    for rep in 0..repeat {
        settle(env_or("QUIET_WAIT_SECONDS", 60.0)).await;
        let run = measure(
            (&link_a, &a, a_rate),
            (&link, &b),
            rate,
            seconds,
            window,
            cpu,
        )
        .await;
        run.print(rep);
        idle.extend(run.idle);
        loaded.extend(run.loaded);
    }
    idle.sort_unstable();
    loaded.sort_unstable();
    let p = |v: &[u64], q: f64| percentile(v, q) as f64 / 1e6;
    let delta = p(&loaded, 99.0) - p(&idle, 99.0);
    println!();
    println!(
        "{}",
        table_head("| B's read_document, all runs | calls | p50 ms | p99 ms | max ms |")
    );
    let how = match a_rate {
        0 => "in a loop".to_owned(),
        a_rate => format!("{a_rate} times a second"),
    };
    for (name, v) in [
        ("A idle", &idle),
        (&*format!("A reading {blocks} blocks {how}"), &loaded),
    ] {
        println!(
            "| {name} | {} | {:.2} | {:.2} | {:.2} |",
            v.len(),
            p(v, 50.0),
            p(v, 99.0),
            p(v, 100.0)
        );
    }
    println!(
        "p99 loaded − idle: {delta:+.2} ms (target: within 2 ms) — {}",
        if delta <= 2.0 { "met" } else { "NOT met" }
    );
    let stopped = margin.terminate().await;
    println!("margin {}", stopped.summary());
}

/// The accounts' machines and documents, made over HTTP on the running
/// server.
async fn prepare(api: &Api, token: String, other: Option<String>) -> Setup {
    let credential = api.pair(&token, "laptop").await;
    let small = api.document(&token, "B").await;
    let (big_token, big_credential) = match other {
        Some(other) => (other.clone(), api.pair(&other, "desktop").await),
        None => (token.clone(), credential.clone()),
    };
    let big = api.document(&big_token, "A").await;
    Setup {
        token,
        credential,
        big_token,
        big_credential,
        big,
        small,
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// B's round trips over one run, by whether A was looping when each was
/// sent.
struct Run {
    idle: Vec<u64>,
    loaded: Vec<u64>,
    a_reads: u64,
    seconds: f64,
    cpu: CpuUse,
}

impl Run {
    fn print(&self, rep: usize) {
        let line = |v: &[u64]| {
            let mut sorted = v.to_vec();
            sorted.sort_unstable();
            let p = |q: f64| percentile(&sorted, q) as f64 / 1e6;
            format!(
                "{} calls, p50 {:.2} ms, p99 {:.2} ms",
                sorted.len(),
                p(50.0),
                p(99.0)
            )
        };
        println!(
            "run {}: B idle {}; B loaded {}; A {} reads ({:.1}/s while looping); server CPU {:.0}%",
            rep + 1,
            line(&self.idle),
            line(&self.loaded),
            self.a_reads,
            2.0 * self.a_reads as f64 / self.seconds,
            self.cpu.pct(self.cpu.server),
        );
    }
}

/// B paced for `seconds` while A reads in every other window of `window`
/// seconds — in a closed loop, or `a_rate` a second: idle and loaded
/// samples come from the same minutes, so a drift in the disk's commit
/// latency weighs on both alike.
async fn measure(
    (link_a, a, a_rate): (&Arc<Link>, &Arc<Turn>, u64),
    (link, b): (&Arc<Link>, &Turn),
    rate: u64,
    seconds: f64,
    window: f64,
    cpu: ServerCpu,
) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let looping = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (link, a, stop, looping, reads) = (
            link_a.clone(),
            a.clone(),
            stop.clone(),
            looping.clone(),
            reads.clone(),
        );
        tokio::spawn(async move {
            let period = (a_rate > 0).then(|| Duration::from_secs_f64(1.0 / a_rate as f64));
            let mut next = tokio::time::Instant::now();
            let mut in_flight = tokio::task::JoinSet::new();
            while !stop.load(Ordering::Relaxed) {
                if !looping.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    next = tokio::time::Instant::now();
                    continue;
                }
                let id = format!("a-{}", NEXT.fetch_add(1, Ordering::Relaxed));
                let Some(period) = period else {
                    link.send_call(&a, &id, "read_document", json!({}));
                    link.wait(&id).await;
                    reads.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                tokio::time::sleep_until(next).await;
                next += period;
                while in_flight.len() >= 64 {
                    in_flight.join_next().await;
                }
                link.send_call(&a, &id, "read_document", json!({}));
                let (link, reads) = (link.clone(), reads.clone());
                in_flight.spawn(async move {
                    link.wait(&id).await;
                    reads.fetch_add(1, Ordering::Relaxed);
                });
            }
            while in_flight.join_next().await.is_some() {}
        })
    };
    let snap = CpuSnap::take(cpu);
    let total = (rate as f64 * seconds) as u64;
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let start = tokio::time::Instant::now() + Duration::from_millis(5);
    let mut sent = Vec::with_capacity(total as usize);
    for k in 0..total {
        let at = start + period * k as u32;
        tokio::time::sleep_until(at).await;
        let windows = (at - start).as_secs_f64() / window;
        let loaded = windows as u64 % 2 == 1;
        looping.store(loaded, Ordering::Relaxed);
        // The first tenth of a window is left out: a read A started in the
        // window before may still be running.
        let settled = windows.fract() > 0.1;
        let id = format!("b-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let sent_at = link.send_call(b, &id, "read_document", json!({}));
        sent.push((id, sent_at, loaded, settled));
    }
    let (mut idle, mut loaded) = (Vec::new(), Vec::new());
    for (id, at, was_loaded, settled) in &sent {
        let (arrived, _) = link.wait(id).await;
        let rtt = (arrived - *at).as_nanos() as u64;
        match (*settled, *was_loaded) {
            (false, _) => {}
            (true, true) => loaded.push(rtt),
            (true, false) => idle.push(rtt),
        }
    }
    let cpu = snap.since(cpu);
    stop.store(true, Ordering::Relaxed);
    let _ = reader.await;
    Run {
        idle,
        loaded,
        a_reads: reads.load(Ordering::Relaxed),
        seconds,
        cpu,
    }
}
