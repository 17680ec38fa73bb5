//! Compaction benchmark (SPEC S3: the stored update log is compacted into
//! snapshots in the background without blocking editors): an editor's edit
//! latency on a large document while the server compacts that document's
//! update log, against the same editor's latency, in the same run, while no
//! compaction runs. Results and how to read them:
//! `server/benches/results/compaction.md`.
//!
//! ```sh
//! cargo bench -p margin-server --bench compaction
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/empty_db cargo bench -p margin-server --bench compaction
//! PARAGRAPHS=50000 SECONDS=90 REPEAT=1 cargo bench -p margin-server --bench compaction
//! ```
//!
//! How the server compacts (`server/src/sync/compaction.rs`): a loaded
//! document's task compacts at once when 512 changes wait since the last
//! snapshot (`max_pending`) whose bytes weigh a quarter of the snapshot's
//! (`snapshot_share`), or when 4,096 wait however small (`max_rows`), and
//! otherwise 2 s after the last change (`debounce`); none is a flag of
//! `margin serve`, and nothing else forces one. On this bench's large
//! document (`PARAGRAPHS` of 10,000 or more) typed words never weigh a
//! quarter of the snapshot first, so `max_rows` is the trigger the bench
//! expects; with a small document compactions come sooner than it
//! expects, and its report says so. The document task only names the
//! revision (`DocumentTask::start_compaction`); a spawned task rebuilds
//! the state at it from storage on the background thread (nice 19),
//! encodes and checks it there, and writes it as the snapshot, deleting
//! the log rows it covers, in one transaction (`Store::compact`).
//!
//! The scenario, over loopback against the real `margin` binary: one
//! `margin serve` (fresh temp data dir; SQLite there, or `DATABASE_URL`), on
//! a store holding one account, its token and one empty document, written
//! through `margin_server::storage::Store` before the server starts. Editor
//! **E**, a `yrs` y-websocket client, fills the document with `PARAGRAPHS`
//! paragraphs (100 an update); the 2 s debounce then compacts them, and the
//! bench waits until the log is empty. Each run, E appends a short word to
//! a paragraph (stepping through the whole document) `RATE` times a second
//! for `SECONDS`, open loop: one `update` a frame, so one change and one log
//! row each. A second connection, **O** (the same editor's other tab),
//! times each edit from E's send to the server's broadcast of it reaching O.
//! Margin broadcasts a change only once it is committed (S3) and sends E
//! nothing back for its own update, so that broadcast is the edit's
//! acknowledgement. E is the only writer, so the 4,096-change trigger fires
//! every 4,096 edits: a compaction every 4,096/`RATE` seconds, always while E
//! types, and never a debounce one (E never pauses 2 s inside a run).
//!
//! A poller reads the document's snapshot revision from the database every
//! `POLL_MS` (a one-connection pool of its own): each new value is a
//! compaction that really ran, with the revision it covers (so which edit
//! triggered it) and when it became visible (its duration: from the
//! triggering edit's acknowledgement, ± `POLL_MS`). The windows are anchored
//! on them: **compacting** = the edits sent in the `WINDOW_MS` after the
//! triggering one; **idle** = as many edits starting 2,048 edits later,
//! half-way to the next compaction (the bench counts the idle windows that
//! began before their compaction was visible, and says so). Both come from
//! the same minutes and the same edit stream, so a drift in the disk's
//! commit latency weighs on both alike and they differ by the compaction.
//! The figure of merit is compacting p99 / idle p99. The bench also times
//! encoding the document's whole state in its own process — part of the
//! work the server's background thread does for each compaction.
//!
//! Knobs (env vars): `MARGIN_BIN` (default `target/release/margin`),
//! `DATABASE_URL` (unset: SQLite in the temp dir; `postgres://…`: that
//! database, which should be empty),
//! `PARAGRAPHS` (10000: the document's size), `RATE` (100 edits/s),
//! `SECONDS` (120 a run), `WINDOW_MS` (1000; at most 2,048 edits' worth),
//! `REPEAT` (2 runs), `POLL_MS` (10), `DETAIL` (1: a line a compaction,
//! with the slowest edit of its two windows),
//! `QUIET_WAIT_SECONDS` (60: before each run, wait up to this long for the
//! machine to be idle). A compaction counts only when its idle window ends
//! inside the run, so a run needs about (6,144 + window) / `RATE` seconds
//! for one (the defaults: 2 a run). The defaults take about 5 minutes.

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use margin_decisions::FRAGMENT_NAME;
use margin_server::storage::Store;
use margin_server::sync::Compaction;
use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;
use sqlx::Row;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use yrs::encoding::read::Cursor;
use yrs::sync::{Message, MessageReader, SyncMessage};
use yrs::types::xml::{XmlElementPrelim, XmlTextPrelim, XmlTextRef};
use yrs::updates::decoder::{Decode, DecoderV1};
use yrs::updates::encoder::Encode;
use yrs::{ClientID, Doc, ReadTxn, StateVector, Text, Transact, Update, XmlFragment};

use support::accounts::owner;
use support::cpu::{settle, CpuSnap, CpuUse, ServerCpu};
use support::knobs::{env_or, under_cargo_bench};
use support::margin::{margin_bin, Margin, Storage};
use support::report::{describe, percentile, table_head};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Changes that make the server compact a large document at once.
fn compact_every() -> usize {
    Compaction::default().max_rows as usize
}
/// Paragraphs in one update of the fill.
const FILL_CHUNK: usize = 100;
/// Longest wait for an acknowledgement or for the log to empty.
const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() {
    if under_cargo_bench("compaction") {
        bench().await;
    }
}

/// The knobs of the header, read from the environment.
struct Knobs {
    paragraphs: usize,
    rate: u64,
    seconds: f64,
    window_ms: u64,
    repeat: usize,
    poll: Duration,
    detail: bool,
    quiet_wait: f64,
}

impl Knobs {
    fn from_env() -> Knobs {
        Knobs {
            paragraphs: env_or("PARAGRAPHS", 10_000),
            rate: env_or("RATE", 100),
            seconds: env_or("SECONDS", 120.0),
            window_ms: env_or("WINDOW_MS", 1000),
            repeat: env_or("REPEAT", 2),
            poll: Duration::from_millis(env_or("POLL_MS", 10)),
            detail: env_or::<u8>("DETAIL", 0) == 1,
            quiet_wait: env_or("QUIET_WAIT_SECONDS", 60.0),
        }
    }

    /// Edits in a window.
    fn window(&self) -> usize {
        let window = (self.rate * self.window_ms / 1000) as usize;
        assert!(
            (1..=compact_every() / 2).contains(&window),
            "WINDOW_MS × RATE must be 1 to {} edits (half the way between two compactions), not {window}",
            compact_every() / 2
        );
        window
    }
}

async fn bench() {
    let bin = margin_bin("compaction");
    let knobs = Knobs::from_env();
    let (paragraphs, window) = (knobs.paragraphs, knobs.window());
    for line in describe(&bin) {
        println!("{line}");
    }
    let storage = Storage::from_env();
    let url = storage.url();
    let store = Store::open(&url).await.expect("the bench's store");
    let owner = owner(&store, "compaction", Some("Compaction plan")).await;
    let (token, document) = (owner.token, owner.document.expect("a document"));
    let margin = Margin::start(&bin, storage.data.path(), &storage.serve_args()).await;
    println!("storage: {}", storage.name());
    let sync = format!(
        "ws://{}/documents/{document}/sync?token={token}",
        margin.addr
    );
    let mut editor = Editor::connect(&sync).await;
    let observer = Observer::connect(&sync, editor.client).await;
    let cpu = ServerCpu::Process(margin.pid);
    let (started, snap) = (Instant::now(), CpuSnap::take(cpu));
    let clock = editor.fill(paragraphs).await;
    observer.until(clock).await;
    let (written, used) = (started.elapsed(), snap.since(cpu));
    let snapshot = emptied(&store, &document).await;
    println!(
        "document: {paragraphs} paragraphs in {} updates (sent and broadcast in {:.1} s, \
         CPU {:.1} s the server's, {:.1} s this process's); the debounce compacted them \
         into a snapshot at revision {snapshot} after {:.1} s",
        paragraphs.div_ceil(FILL_CHUNK),
        written.as_secs_f64(),
        used.server,
        used.client,
        started.elapsed().as_secs_f64()
    );
    let (bytes, encode_ms) = editor.encode_state();
    println!(
        "its state: {bytes} bytes; encoding it here takes {encode_ms:.1} ms \
         (the server's background thread does the same for each compaction)"
    );
    let poller = Poller::start(&url, &document, knobs.poll).await;
    let mut all = Windows::default();
    let mut seen = 0;
    for rep in 0..knobs.repeat {
        settle(knobs.quiet_wait).await;
        emptied(&store, &document).await;
        let base = store.revision(&document).await.expect("the revision");
        let run = editor.run(&observer, &poller, &knobs, base, cpu).await;
        let windows = run.windows(window, knobs.detail);
        run.print(rep, &windows);
        let after = store.revision(&document).await.expect("the revision");
        assert_eq!(
            after - base,
            run.sent.len() as i64,
            "another writer moved the document: the trigger count is off"
        );
        seen += run.compactions.len();
        all.extend(windows);
    }
    let (bytes, encode_ms) = editor.encode_state();
    let stored = store
        .load_state(&document, None)
        .await
        .expect("the stored state");
    println!(
        "at the end: state {bytes} bytes (encoded here in {encode_ms:.1} ms); stored snapshot {} bytes at revision {}, {} log rows after it",
        stored.snapshot.as_ref().map_or(0, |(_, s)| s.len()),
        stored.snapshot.as_ref().map_or(0, |(r, _)| *r),
        stored.updates.len()
    );
    all.summary(paragraphs, seen, knobs.window_ms);
    poller.stop().await;
    drop(editor);
    drop(observer);
    let stopped = margin.terminate().await;
    println!("margin {}", stopped.summary());
}

/// Waits until the document's log is empty (every change is in the
/// snapshot: the debounce compacted it); returns the revision.
async fn emptied(store: &Store, document: &str) -> i64 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let rows = store.log_len(document).await.expect("the log's length");
        if rows == 0 {
            return store.revision(document).await.expect("the revision");
        }
        assert!(
            Instant::now() < deadline,
            "the log still holds {rows} rows after {} s: no debounce compaction",
            PATIENCE.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens a sync connection that takes frames of any size.
async fn open(url: &str) -> Ws {
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(None)
        .max_frame_size(None);
    let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), true)
        .await
        .expect("a sync connection");
    ws
}

/// The editor that types: its own copy of the document, and the text of
/// every paragraph it made.
struct Editor {
    doc: Doc,
    client: ClientID,
    texts: Vec<XmlTextRef>,
    sink: SplitSink<Ws, WsMessage>,
}

impl Editor {
    async fn connect(url: &str) -> Editor {
        let (sink, mut stream) = open(url).await.split();
        // The server sends E its step 1 and nothing for E's own changes;
        // read (and so answer pings) until it closes.
        tokio::spawn(async move { while let Some(Ok(_)) = stream.next().await {} });
        let doc = Doc::new();
        Editor {
            client: doc.client_id(),
            doc,
            texts: Vec::new(),
            sink,
        }
    }

    /// Sends one update; returns when it was written and E's clock after it.
    async fn send(&mut self, update: Vec<u8>) -> (Instant, u32) {
        let clock = self.doc.transact().state_vector().get(&self.client);
        let frame = Message::Sync(SyncMessage::Update(update)).encode_v1();
        let at = Instant::now();
        self.sink
            .send(WsMessage::Binary(frame.into()))
            .await
            .expect("the editor's connection");
        (at, clock)
    }

    /// Writes `paragraphs` paragraphs, `FILL_CHUNK` an update, last first:
    /// each goes in at the front, which costs yrs no walk along the
    /// document (appending walks it every time). E's clock after the last.
    async fn fill(&mut self, paragraphs: usize) -> u32 {
        let fragment = self.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        let mut clock = 0;
        for end in (1..=paragraphs).rev().step_by(FILL_CHUNK) {
            let update = {
                let mut txn = self.doc.transact_mut();
                for i in (end.saturating_sub(FILL_CHUNK)..end).rev() {
                    let paragraph =
                        fragment.insert(&mut txn, 0, XmlElementPrelim::empty("paragraph"));
                    let text =
                        format!("Paragraph {i} of the plan, with a sentence of ordinary length.");
                    self.texts
                        .push(paragraph.insert(&mut txn, 0, XmlTextPrelim::new(text)));
                }
                txn.encode_update_v1()
            };
            clock = self.send(update).await.1;
        }
        clock
    }

    /// Edit `k`: a word appended to a paragraph, striding through the
    /// document so edits land all over it.
    async fn edit(&mut self, k: usize) -> (Instant, u32) {
        let update = {
            let text = &self.texts[(k * 7919) % self.texts.len()];
            let mut txn = self.doc.transact_mut();
            let end = text.len(&txn);
            text.insert(&mut txn, end, &format!(" e{k}"));
            txn.encode_update_v1()
        };
        self.send(update).await
    }

    /// The whole state as a compaction encodes it: its size, and how long
    /// encoding it takes in this process, in ms.
    fn encode_state(&self) -> (usize, f64) {
        let started = Instant::now();
        let state = self
            .doc
            .transact()
            .encode_state_as_update_v1(&StateVector::default());
        (state.len(), started.elapsed().as_secs_f64() * 1e3)
    }

    /// One paced run: edits at `RATE` for `SECONDS`, each timed to its
    /// broadcast, with the compactions the poller saw meanwhile.
    async fn run(
        &mut self,
        observer: &Observer,
        poller: &Poller,
        knobs: &Knobs,
        base: i64,
        cpu: ServerCpu,
    ) -> Run {
        let rate = knobs.rate;
        let total = (rate as f64 * knobs.seconds) as usize;
        let period = Duration::from_secs_f64(1.0 / rate as f64);
        observer.arrivals.lock().expect("arrivals").clear();
        poller.seen.lock().expect("compactions").clear();
        let snap = CpuSnap::take(cpu);
        let start = tokio::time::Instant::now() + Duration::from_millis(5);
        let mut sent = Vec::with_capacity(total);
        for k in 0..total {
            tokio::time::sleep_until(start + period * k as u32).await;
            sent.push(self.edit(k).await);
        }
        if let Some((_, last)) = sent.last() {
            observer.until(*last).await;
        }
        let cpu = snap.since(cpu);
        // The poller sees a compaction at most `POLL_MS` after it commits.
        tokio::time::sleep(poller.every * 3).await;
        let arrivals = std::mem::take(&mut *observer.arrivals.lock().expect("arrivals"));
        let compactions = std::mem::take(&mut *poller.seen.lock().expect("compactions"));
        // Arrivals come in clock order: each edit is acknowledged by the
        // first broadcast that reaches its clock.
        let mut next = 0;
        let mut acked = Vec::with_capacity(sent.len());
        for (_, clock) in &sent {
            while arrivals[next].1 < *clock {
                next += 1;
            }
            acked.push(arrivals[next].0);
        }
        Run {
            sent: sent.into_iter().map(|(at, _)| at).collect(),
            acked,
            compactions: compactions
                .into_iter()
                .filter(|(_, revision)| *revision > base)
                .map(|(at, revision)| (at, (revision - base) as usize))
                .collect(),
            rate,
            cpu,
        }
    }
}

/// The editor's other connection: when each broadcast arrived and the
/// editor's clock it reached.
struct Observer {
    arrivals: Arc<Mutex<Vec<(Instant, u32)>>>,
    clock: watch::Receiver<u32>,
}

impl Observer {
    async fn connect(url: &str, editor: ClientID) -> Observer {
        let (mut sink, mut stream) = open(url).await.split();
        // Its step 1: the server answers with everything it has, so the
        // editor's changes reach it whether or not they came before it
        // joined.
        let step1 = Message::Sync(SyncMessage::SyncStep1(StateVector::default())).encode_v1();
        sink.send(WsMessage::Binary(step1.into()))
            .await
            .expect("the observer's connection");
        let arrivals: Arc<Mutex<Vec<(Instant, u32)>>> = Arc::default();
        let (tx, clock) = watch::channel(0);
        let (joined, mut synced) = watch::channel(false);
        let filed = arrivals.clone();
        tokio::spawn(async move {
            // It sends nothing more, but the connection stays open.
            let _sink = sink;
            while let Some(Ok(frame)) = stream.next().await {
                let WsMessage::Binary(data) = frame else {
                    continue;
                };
                let at = Instant::now();
                let mut decoder = DecoderV1::new(Cursor::new(&data));
                for message in MessageReader::new(&mut decoder).flatten() {
                    let update = match message {
                        Message::Sync(SyncMessage::Update(update)) => update,
                        Message::Sync(SyncMessage::SyncStep2(update)) => {
                            joined.send_replace(true);
                            update
                        }
                        _ => continue,
                    };
                    let Ok(update) = Update::decode_v1(&update) else {
                        continue;
                    };
                    // Not `Update::state_vector`: it counts only a client's
                    // blocks from clock 0.
                    let insertions = update.insertions(true);
                    let reached = insertions
                        .iter()
                        .filter(|(client, _)| **client == editor)
                        .flat_map(|(_, ranges)| ranges.iter().map(|r| r.end).max())
                        .max()
                        .unwrap_or(0);
                    if reached > *tx.borrow() {
                        filed.lock().expect("arrivals").push((at, reached));
                        tx.send_replace(reached);
                    }
                }
            }
        });
        tokio::time::timeout(PATIENCE, synced.wait_for(|done| *done))
            .await
            .expect("no sync step 2 for the observer within the time allowed")
            .expect("the observer's connection closed");
        Observer { arrivals, clock }
    }

    /// Waits until a broadcast reached the editor's `clock`.
    async fn until(&self, clock: u32) {
        let mut seen = self.clock.clone();
        tokio::time::timeout(PATIENCE, seen.wait_for(|reached| *reached >= clock))
            .await
            .expect("no broadcast of the editor's change within the time allowed")
            .expect("the observer's connection closed");
    }
}

/// Reads the document's snapshot revision every `every`: each new one is a
/// compaction that ran, seen at that instant.
struct Poller {
    every: Duration,
    seen: Arc<Mutex<Vec<(Instant, i64)>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Poller {
    async fn start(url: &str, document: &str, every: Duration) -> Poller {
        let pool: AnyPool = AnyPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .expect("the poller's connection");
        let (seen, stop) = (
            Arc::<Mutex<Vec<(Instant, i64)>>>::default(),
            Arc::<AtomicBool>::default(),
        );
        let (filed, stopped, document) = (seen.clone(), stop.clone(), document.to_owned());
        let task = tokio::spawn(async move {
            let mut last = None;
            while !stopped.load(Ordering::Relaxed) {
                let row =
                    sqlx::query("SELECT revision FROM document_snapshots WHERE document_id = $1")
                        .bind(&document)
                        .fetch_optional(&pool)
                        .await;
                let revision = match row {
                    Ok(Some(row)) => row.try_get::<i64, _>(0).ok(),
                    // A busy database: try again next time.
                    _ => None,
                };
                if revision.is_some() && revision != last {
                    last = revision;
                    filed
                        .lock()
                        .expect("compactions")
                        .push((Instant::now(), revision.unwrap_or_default()));
                }
                tokio::time::sleep(every).await;
            }
            pool.close().await;
        });
        Poller {
            every,
            seen,
            stop,
            task,
        }
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
    }
}

/// One run: per edit (in order) when it was sent and acknowledged; the
/// compactions seen, as (when visible, edits it covers from the run's
/// start).
struct Run {
    sent: Vec<Instant>,
    acked: Vec<Instant>,
    compactions: Vec<(Instant, usize)>,
    rate: u64,
    cpu: CpuUse,
}

/// Edit latencies by window, in ns, and what the compactions took.
#[derive(Default)]
struct Windows {
    compacting: Vec<u64>,
    idle: Vec<u64>,
    /// From the triggering edit's acknowledgement to the snapshot seen.
    took: Vec<u64>,
    /// Idle windows that began before their compaction was seen.
    overlapped: usize,
}

impl Windows {
    fn extend(&mut self, other: Windows) {
        self.compacting.extend(other.compacting);
        self.idle.extend(other.idle);
        self.took.extend(other.took);
        self.overlapped += other.overlapped;
    }

    fn summary(self, paragraphs: usize, seen: usize, window_ms: u64) {
        let (idle, compacting, took) = (
            quantiles(&self.idle),
            quantiles(&self.compacting),
            quantiles(&self.took),
        );
        println!();
        println!("{}", table_head(&format!("| edit → acknowledgement, {paragraphs} paragraphs, all runs | edits | p50 ms | p99 ms | max ms |")));
        let compacting_name = format!("compacting (first {window_ms} ms after a trigger)");
        for (name, count, [p50, p99, max]) in [
            ("idle (no compaction)", self.idle.len(), idle),
            (&*compacting_name, self.compacting.len(), compacting),
        ] {
            println!("| {name} | {count} | {p50:.2} | {p99:.2} | {max:.2} |");
        }
        let [r50, r99, rmax] = [0, 1, 2].map(|i| compacting[i] / idle[i].max(1e-9));
        println!("| ratio compacting / idle | | {r50:.2} | {r99:.2} | {rmax:.2} |");
        println!(
            "compactions seen in the database: {seen} (windows from {}); each visible {:.1} ms p50, {:.1} ms max after its trigger; {} idle windows began before theirs was visible",
            self.took.len(),
            took[0],
            took[2],
            self.overlapped
        );
    }
}

/// p50, p99 and max of `ns`, in ms.
fn quantiles(ns: &[u64]) -> [f64; 3] {
    let mut sorted = ns.to_vec();
    sorted.sort_unstable();
    [50.0, 99.0, 100.0].map(|q| percentile(&sorted, q) as f64 / 1e6)
}

impl Run {
    /// Each compaction's window and its idle peer half-way to the next.
    fn windows(&self, window: usize, detail: bool) -> Windows {
        let latency = |k: usize| (self.acked[k] - self.sent[k]).as_nanos() as u64;
        let mut out = Windows::default();
        for (seen_at, covered) in &self.compactions {
            // Edit `covered - 1` (from 0) made the revision it covers; the
            // compaction started once that edit's batch committed.
            let first = *covered;
            let idle = first + compact_every() / 2;
            if idle + window > self.sent.len() {
                continue;
            }
            out.took.push(
                seen_at
                    .saturating_duration_since(self.acked[first - 1])
                    .as_nanos() as u64,
            );
            if *seen_at > self.sent[idle] {
                out.overlapped += 1;
            }
            out.compacting.extend((first..first + window).map(latency));
            out.idle.extend((idle..idle + window).map(latency));
            if detail {
                let worst = |from: usize| {
                    let k = (from..from + window)
                        .max_by_key(|&k| latency(k))
                        .unwrap_or(from);
                    let sent = self.sent[k].saturating_duration_since(self.acked[first - 1]);
                    format!(
                        "max {:.1} ms (edit sent {:.0} ms after the trigger)",
                        latency(k) as f64 / 1e6,
                        sent.as_secs_f64() * 1e3
                    )
                };
                println!(
                    "  compaction covering +{covered}: visible {:.1} ms after its trigger; compacting window {}; idle window {}",
                    seen_at.saturating_duration_since(self.acked[first - 1]).as_secs_f64() * 1e3,
                    worst(first),
                    worst(idle)
                );
            }
        }
        out
    }

    fn print(&self, rep: usize, windows: &Windows) {
        let line = |v: &[u64]| {
            let [p50, p99, max] = quantiles(v);
            format!(
                "{} edits, p50 {p50:.2} / p99 {p99:.2} / max {max:.2} ms",
                v.len()
            )
        };
        let covered: Vec<String> = self
            .compactions
            .iter()
            .map(|(_, c)| format!("+{c}"))
            .collect();
        let took = quantiles(&windows.took);
        println!(
            "run {}: {} edits at {}/s; {} compactions seen, covering the run's edits {} (expected every {}), visible {:.1} ms p50 / {:.1} ms max after their trigger; idle {}; compacting {}; server CPU {:.0}%, other {}",
            rep + 1,
            self.sent.len(),
            self.rate,
            self.compactions.len(),
            covered.join(" "),
            compact_every(),
            took[0],
            took[2],
            line(&windows.idle),
            line(&windows.compacting),
            self.cpu.pct(self.cpu.server),
            self.cpu.other_pct(),
        );
    }
}
