//! Restart time against what is stored (SPEC O5, W2): how long a server
//! killed with data of a given size takes to answer `/readyz` and to sync
//! its first editor, and whether that grows with what is live or with
//! history. Results and how to read them:
//! `server/benches/results/2026-12-06-planners-restart.md` (0.1×–10×) and
//! `2026-12-06-cold-load-and-restart.md` (100×).
//!
//! ```sh
//! cargo bench -p margin-server --bench restart
//! SCALES=0.1,1 REPEAT=2 cargo bench -p margin-server --bench restart
//! ```
//!
//! For each scale `x` of `SCALES`, a fresh SQLite data folder holds, at
//! `x` times the base sizes: `DOCUMENTS` documents (2,000), `BIG` of them
//! (100) of `BIG_PARAGRAPHS` paragraphs (10,000 each, stored
//! as one update as a compacted document is), and `SESSIONS` journaled
//! Planner sessions (1,000) — each a machine of its own whose `@planner`
//! turn was invoked and replied to — of which `LIVE` (50, not scaled:
//! what is live does not grow with history) were left open when the
//! server was killed (SIGKILL), their machines' links gone. Accounts,
//! machines, documents and the big documents' updates are written to the
//! store before a server runs; the sessions are made through a running
//! server, over real links.
//!
//! Then, `REPEAT` times: the server is started on that folder and timed
//! from the spawn to `/readyz` answering 200 (every open session has been
//! taken back by then: restore runs before the server listens), and to a
//! y-websocket client's sync step 2 on one of the big documents (the
//! first editor synced, the document loaded cold); the gauge of sessions
//! taken back is checked, then the server is killed again.
//!
//! Knobs (env vars): `MARGIN_BIN` (default `target/release/margin`),
//! `SCALES` (`0.1,1,10`), `REPEAT` (3), `DOCUMENTS` (2000), `BIG` (100),
//! `BIG_PARAGRAPHS` (10000), `SESSIONS` (1000), `LIVE` (50).

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use margin_protocol::link::{ClientMessage, PROTOCOL_VERSION};
use margin_server::storage::Store;

use support::accounts::{owner, planners, Member};
use support::knobs::{env_list, env_or, require_open_files, under_cargo_bench};
use support::margin::{margin_bin, Margin};
use support::planner::{Api, Link};
use support::report::{ms, table_head, ReportFrame};
use support::sync::{paragraphs, SyncSocket};

#[tokio::main]
async fn main() {
    if under_cargo_bench("restart") {
        bench().await;
    }
}

/// The base sizes, scaled.
#[derive(Clone, Copy)]
struct Sizes {
    documents: usize,
    big: usize,
    sessions: usize,
    live: usize,
}

impl Sizes {
    fn at(scale: f64) -> Sizes {
        let scaled = |name: &str, base: usize| (env_or(name, base) as f64 * scale).round() as usize;
        let live = env_or("LIVE", 50usize);
        let sessions = scaled("SESSIONS", 1000).max(live);
        Sizes {
            documents: scaled("DOCUMENTS", 2000).max(sessions + 1),
            big: scaled("BIG", 100).max(1),
            sessions,
            live,
        }
    }
}

/// One restart's times from the spawn.
struct Restart {
    ready: Duration,
    synced: Duration,
    taken_back: u64,
}

async fn bench() {
    let bin = margin_bin("restart");
    let scales: Vec<f64> = env_list("SCALES", "0.1,1,10");
    let repeat: usize = env_or("REPEAT", 3);
    let big_paragraphs: usize = env_or("BIG_PARAGRAPHS", 10_000);
    require_open_files("restart", 1024, "the sessions' links, a few at a time");
    let frame = ReportFrame::start(
        &bin,
        format!("SCALES={scales:?} REPEAT={repeat} BIG_PARAGRAPHS={big_paragraphs}"),
    );
    let update = paragraphs(big_paragraphs, |i| {
        format!("Paragraph {i} of a long plan, with a sentence or two of ordinary length in it.")
    });
    let mut out = String::new();
    frame.open(&mut out);
    out.push('\n');
    out.push_str(&table_head(
        "| scale | documents (1 MB) | sessions (open) | data on disk | seeded in | to `/readyz` 200, median (runs) | to the first editor synced, median (runs) | sessions taken back |",
    ));
    out.push('\n');
    for scale in scales {
        let sizes = Sizes::at(scale);
        let data = tempfile::tempdir().expect("a temp data dir");
        let started = Instant::now();
        let big = seed(&bin, data.path(), sizes, &update).await;
        let seeded = started.elapsed();
        let bytes = folder_bytes(data.path());
        let mut runs = Vec::new();
        for _ in 0..repeat {
            runs.push(restart(&bin, data.path(), &big).await);
        }
        let median = |of: fn(&Restart) -> Duration| {
            let mut times: Vec<Duration> = runs.iter().map(of).collect();
            times.sort();
            let listed = times
                .iter()
                .map(|t| format!("{:.0}", ms(*t)))
                .collect::<Vec<_>>()
                .join(", ");
            format!("{:.0} ms ({listed})", ms(times[times.len() / 2]))
        };
        let taken_back: Vec<String> = runs.iter().map(|r| r.taken_back.to_string()).collect();
        out.push_str(&format!(
            "| {scale}× | {} ({}) | {} ({}) | {:.0} MiB | {:.0} s | {} | {} | {} |\n",
            sizes.documents,
            sizes.big,
            sizes.sessions,
            sizes.live,
            bytes as f64 / (1024.0 * 1024.0),
            seeded.as_secs_f64(),
            median(|r| r.ready),
            median(|r| r.synced),
            taken_back.join(", "),
        ));
        println!("{out}");
    }
    out.push_str(&format!(
        "\nA big document: {big_paragraphs} paragraphs, one stored update of {} bytes.\n",
        update.len()
    ));
    frame.close(&mut out);
    support::report::print_summary(&out);
}

/// The big document the first editor opens, and its owner's token.
struct Big {
    document: String,
    token: String,
}

/// Writes `sizes` into the store in `data`, makes the sessions through a
/// server and kills it; what the first editor will open.
async fn seed(bin: &Path, data: &Path, sizes: Sizes, update: &[u8]) -> Big {
    let machines = planners(data, "planner", sizes.sessions).await;
    let url = Store::sqlite_url_in(data).expect("the data folder");
    let store = Store::open(&url).await.expect("the bench store opens");
    let author = owner(&store, "author", None).await;
    let extra = sizes.documents - sizes.sessions;
    let documents: Vec<String> = futures_util::stream::iter(0..extra)
        .map(|i| {
            let (store, account) = (store.clone(), author.account.clone());
            async move {
                store
                    .create_document(&account, &format!("Plan {i}"))
                    .await
                    .expect("a document")
                    .id
            }
        })
        .buffered(8)
        .collect()
        .await;
    // The big ones: among the author's, and then the machines' (when the
    // author has too few), so some have sessions.
    let bigs: Vec<String> = documents
        .iter()
        .cloned()
        .chain(machines.iter().filter_map(|m| m.document.clone()))
        .take(sizes.big)
        .collect();
    for document in &bigs {
        let epoch = store.claim_document(document).await.expect("a claim");
        store
            .append_updates(document, epoch, 0, &[update.to_vec()])
            .await
            .expect("the big document's update");
    }
    store.close().await;

    let margin = Margin::start(bin, data, &[]).await;
    let api = Api::new(margin.addr);
    let (live, ended) = machines.split_at(sizes.live);
    futures_util::stream::iter(ended)
        .for_each_concurrent(16, |m| async { session(&api, m, false).await.close() })
        .await;
    // Their links stay until the kill: the sessions are open, mid-turn.
    let open: Vec<Link> = futures_util::stream::iter(live)
        .map(|m| session(&api, m, true))
        .buffer_unordered(16)
        .collect()
        .await;
    margin.kill().await;
    drop(open);
    let document = bigs.first().cloned().expect("a big document");
    let token = if documents.contains(&document) {
        author.token
    } else {
        machines
            .iter()
            .find(|m| m.document.as_deref() == Some(document.as_str()))
            .map(|m| m.token.clone())
            .expect("the big document's owner")
    };
    Big { document, token }
}

/// Machine `m`'s session and its link: a turn invoked and, unless `live`
/// (the turn left running on a resumable link), replied to on a link
/// whose sessions end with it.
async fn session(api: &Api, m: &Member, live: bool) -> Link {
    let document = m.document.as_deref().expect("a machine's document");
    let credential = m.credential.as_deref().expect("a machine");
    let link = if live {
        Link::open(api.addr(), credential).await
    } else {
        let hello = ClientMessage::Hello {
            protocol_version: PROTOCOL_VERSION,
            features: Vec::new(),
            run_capacity: None,
            manifest: None,
        };
        Link::open_with(api.addr(), credential, hello).await
    };
    let turn = link.turn(api, &m.token, document, "s").await;
    if live {
        return link;
    }
    link.reply(&turn, "Read it.");
    // The reply is posted once committed; then the link may go.
    for _ in 0..500 {
        if let Ok(planner) = api.planner(&m.token, document).await {
            if !planner.replying {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    link
}

/// Starts the server on `data`, times it, and kills it.
async fn restart(bin: &Path, data: &Path, big: &Big) -> Restart {
    let spawned = Instant::now();
    let margin = Margin::start(bin, data, &[]).await;
    let api = Api::new(margin.addr);
    let ready = loop {
        let answer = api
            .http
            .get(format!("{}/readyz", api.base))
            .send()
            .await
            .map(|r| r.status().is_success());
        if answer.unwrap_or(false) {
            break spawned.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let url = format!(
        "ws://{}/documents/{}/sync?token={}",
        margin.addr, big.document, big.token
    );
    let editor = SyncSocket::connect(&url, Duration::from_secs(120))
        .await
        .expect("the first editor syncs");
    let synced = spawned.elapsed();
    let taken_back = sessions_gauge(&api).await;
    editor.close().await;
    margin.kill().await;
    Restart {
        ready,
        synced,
        taken_back,
    }
}

/// The Planner sessions running, summed over their states.
async fn sessions_gauge(api: &Api) -> u64 {
    api.metrics()
        .await
        .lines()
        .filter(|line| line.starts_with("margin_planner_sessions{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Bytes in the files of `folder`.
fn folder_bytes(folder: &Path) -> u64 {
    std::fs::read_dir(folder)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
