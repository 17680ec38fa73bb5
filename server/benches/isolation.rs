//! Session isolation benchmark (issue #11): one session's slow tool calls
//! must not hold up another session of the same machine. Results and how
//! to read them: `server/benches/results/isolation.md`.
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
//! `REPEAT` (2),
//! `QUIET_WAIT_SECONDS` (60: before each run, wait up to this long for the
//! machine to be idle).

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use margin_protocol::chat::PostChat;
use margin_protocol::decisions::{EditInput, EditPlanInput, ReadDocumentOutput};
use margin_protocol::link::{ClientMessage, ServerMessage, PROTOCOL_VERSION};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use support::cpu::{settle, CpuSnap, CpuUse, ServerCpu};
use support::knobs::env_or;
use support::margin::{margin_bin, Margin};
use support::report::{describe, percentile, table_head};
use support::sync::viewer;

/// Most edits one `edit_plan` takes.
const EDITS_PER_CALL: usize = 64;

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
    let seconds: f64 = env_or("SECONDS", 20.0);
    let repeat: usize = env_or("REPEAT", 2);
    for line in describe(&bin) {
        println!("{line}");
    }
    let data = tempfile::tempdir().expect("a temp data dir");
    // `DATABASE_URL=postgres://…/db` runs it on PostgreSQL (give it an empty
    // database).
    let url = std::env::var("DATABASE_URL").ok();
    let mut args = vec!["--data".to_owned(), data.path().display().to_string()];
    if let Some(url) = &url {
        args.extend(["--database-url".to_owned(), url.clone()]);
    }
    // `SEPARATE=1` (a diagnostic): A's document belongs to another account,
    // so A runs on another machine's link and B's link carries none of A's
    // results.
    let separate = env_or::<u8>("SEPARATE", 0) == 1;
    let token = account(&bin, &args, "iso");
    let other = separate.then(|| account(&bin, &args, "iso2"));
    let margin = Margin::start(&bin, data.path(), &args[2..]).await;
    println!(
        "storage: {}",
        if url.is_some() {
            "PostgreSQL"
        } else {
            "SQLite"
        }
    );
    let http = reqwest::Client::new();
    let base = format!("http://{}", margin.addr);
    let setup = prepare(&http, &base, token, other).await;
    let filled = Instant::now();
    fill(&http, &base, &setup, blocks).await;
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
    let a = Arc::new(
        link_a
            .turn(&http, &base, &setup.big_token, &setup.big, "a")
            .await,
    );
    let b = link
        .turn(&http, &base, &setup.token, &setup.small, "b")
        .await;
    println!(
        "A's session on {} link",
        if separate {
            "another machine's"
        } else {
            "B's machine's"
        }
    );
    // Warm both reads (document A loaded, its outline cached).
    link_a.call(&a, "a-warm").await;
    let bytes = link.call(&b, "b-warm").await;
    println!(
        "B's result: {bytes} bytes; A's: {} bytes",
        link_a.call(&a, "a-warm2").await
    );
    let cpu = ServerCpu::Process(margin.pid);
    let window: f64 = env_or("WINDOW_SECONDS", 1.0);
    let mut idle = Vec::new();
    let mut loaded = Vec::new();
    for rep in 0..repeat {
        settle(env_or("QUIET_WAIT_SECONDS", 60.0)).await;
        let run = measure((&link_a, &a), (&link, &b), rate, seconds, window, cpu).await;
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
    for (name, v) in [
        ("A idle", &idle),
        (&*format!("A reading {blocks} blocks in a loop"), &loaded),
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

/// An account and its token, made with the binary's own CLI (so any
/// build of `margin` can be benched, whatever its schema).
fn account(bin: &std::path::Path, args: &[String], name: &str) -> String {
    let output = std::process::Command::new(bin)
        .args(["account", "add", name])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("margin account add");
    assert!(
        output.status.success(),
        "account add failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The accounts' machines and documents, made over HTTP on the running
/// server.
async fn prepare(
    http: &reqwest::Client,
    base: &str,
    token: String,
    other: Option<String>,
) -> Setup {
    // POST `path` with `body` as `token`; the answer's string `field`.
    let made = |token: String, path: &'static str, body: serde_json::Value, field: &'static str| {
        let http = http.clone();
        let base = base.to_owned();
        async move {
            let made: serde_json::Value = http
                .post(format!("{base}{path}"))
                .bearer_auth(&token)
                .json(&body)
                .send()
                .await
                .unwrap_or_else(|e| panic!("POST {path}: {e}"))
                .json()
                .await
                .unwrap_or_else(|e| panic!("POST {path}'s answer: {e}"));
            made[field]
                .as_str()
                .unwrap_or_else(|| panic!("POST {path}: no {field}"))
                .to_owned()
        }
    };
    let pair = |token: String, name: &'static str| {
        made(token, "/machines", json!({"name": name}), "credential")
    };
    let document = |token: String, title: &'static str| {
        made(token, "/documents", json!({"title": title}), "id")
    };
    let credential = pair(token.clone(), "laptop").await;
    let small = document(token.clone(), "B").await;
    let (big_token, big_credential) = match other {
        Some(other) => (other.clone(), pair(other, "desktop").await),
        None => (token.clone(), credential.clone()),
    };
    let big = document(big_token.clone(), "A").await;
    Setup {
        token,
        credential,
        big_token,
        big_credential,
        big,
        small,
    }
}

/// Writes `blocks` paragraphs into A and one into B, through the tools'
/// HTTP routes.
async fn fill(http: &reqwest::Client, base: &str, setup: &Setup, blocks: usize) {
    let parts = [
        (&setup.big, &setup.big_token, blocks),
        (&setup.small, &setup.token, 1),
    ];
    for (document, token, count) in parts {
        let read: ReadDocumentOutput = http
            .post(format!("{base}/documents/{document}/tools/read_document"))
            .bearer_auth(token)
            .send()
            .await
            .expect("read_document")
            .json()
            .await
            .expect("a read");
        let mut revision = read.revision;
        let mut written = 0;
        while written < count {
            let n = EDITS_PER_CALL.min(count - written);
            let edits = (0..n)
                .map(|i| EditInput::Insert {
                    after: None,
                    kind: "paragraph".into(),
                    level: None,
                    text: format!(
                        "Paragraph {} of the plan, with a sentence of ordinary length.",
                        written + i
                    ),
                })
                .collect();
            let edited: serde_json::Value = http
                .post(format!("{base}/documents/{document}/tools/edit_plan"))
                .bearer_auth(token)
                .json(&EditPlanInput { revision, edits })
                .send()
                .await
                .expect("edit_plan")
                .json()
                .await
                .expect("an edit");
            revision = edited["revision"]
                .as_i64()
                .unwrap_or_else(|| panic!("edit_plan refused: {edited}"));
            written += n;
        }
    }
}

/// A session's running turn.
struct Turn {
    session: String,
    turn: String,
    /// Its calls' ids start with this.
    prefix: &'static str,
}

/// Results by call id: when each arrived and its size.
type Arrivals = Arc<Mutex<std::collections::HashMap<String, (Instant, usize)>>>;

/// One machine link: a writer task, and a reader that answers heartbeats
/// and files each result under its call id without parsing A's.
struct Link {
    out: mpsc::UnboundedSender<ClientMessage>,
    arrivals: Arrivals,
    invokes: Arc<Mutex<Vec<(String, String, String)>>>,
    woken: Arc<tokio::sync::Notify>,
}

impl Link {
    async fn open(addr: SocketAddr, credential: &str) -> Link {
        let mut request = format!("ws://{addr}/machine")
            .into_client_request()
            .expect("a link URL");
        request.headers_mut().insert(
            "Authorization",
            format!("Bearer {credential}").parse().expect("a header"),
        );
        let (ws, _) = tokio_tungstenite::connect_async_with_config(request, None, true)
            .await
            .expect("the link opens");
        let (mut sink, mut stream) = ws.split();
        let (out, mut outgoing) = mpsc::unbounded_channel::<ClientMessage>();
        tokio::spawn(async move {
            while let Some(message) = outgoing.recv().await {
                let text = serde_json::to_string(&message).expect("a frame");
                if sink.send(Message::text(text)).await.is_err() {
                    return;
                }
            }
        });
        let link = Link {
            out: out.clone(),
            arrivals: Arrivals::default(),
            invokes: Arc::default(),
            woken: Arc::default(),
        };
        let (arrivals, invokes, woken) = (
            link.arrivals.clone(),
            link.invokes.clone(),
            link.woken.clone(),
        );
        tokio::spawn(async move {
            while let Some(Ok(frame)) = stream.next().await {
                let Message::Text(text) = frame else { continue };
                let at = Instant::now();
                let text = text.as_str();
                if let Some(call) = call_id_of(text) {
                    arrivals
                        .lock()
                        .expect("arrivals")
                        .insert(call.to_owned(), (at, text.len()));
                    woken.notify_waiters();
                    continue;
                }
                match serde_json::from_str::<ServerMessage>(text) {
                    Ok(ServerMessage::Heartbeat { seq }) => {
                        let _ = out.send(ClientMessage::HeartbeatAck { seq });
                    }
                    Ok(ServerMessage::Invoke {
                        session,
                        turn,
                        document,
                        ..
                    }) => {
                        invokes
                            .lock()
                            .expect("invokes")
                            .push((document, session, turn));
                        woken.notify_waiters();
                    }
                    _ => {}
                }
            }
        });
        link.out
            .send(ClientMessage::Hello {
                protocol_version: PROTOCOL_VERSION,
                features: vec!["resumable-sessions".into()],
                run_capacity: None,
                manifest: None,
            })
            .expect("hello");
        tokio::time::sleep(Duration::from_millis(200)).await;
        link
    }

    /// `@planner` on `document`, and the turn it starts.
    async fn turn(
        &self,
        http: &reqwest::Client,
        base: &str,
        token: &str,
        document: &str,
        prefix: &'static str,
    ) -> Turn {
        let posted = http
            .post(format!("{base}/documents/{document}/chat"))
            .bearer_auth(token)
            .json(&PostChat {
                text: "@planner read".into(),
            })
            .send()
            .await
            .expect("chat");
        assert_eq!(posted.status().as_u16(), 201);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let notified = self.woken.notified();
            if let Some((_, session, turn)) = self
                .invokes
                .lock()
                .expect("invokes")
                .iter()
                .find(|(d, _, _)| d == document)
                .cloned()
            {
                return Turn {
                    session,
                    turn,
                    prefix,
                };
            }
            assert!(Instant::now() < deadline, "no invoke for {document}");
            let _ = tokio::time::timeout(Duration::from_millis(100), notified).await;
        }
    }

    fn send_call(&self, turn: &Turn, id: &str) -> Instant {
        let at = Instant::now();
        let _ = self.out.send(ClientMessage::ToolCall {
            session: turn.session.clone(),
            turn: turn.turn.clone(),
            call_id: id.to_owned(),
            name: "read_document".into(),
            arguments: json!({}),
        });
        at
    }

    /// Waits for call `id`'s result; its size in bytes.
    async fn wait(&self, id: &str) -> (Instant, usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let notified = self.woken.notified();
            if let Some(arrived) = self.arrivals.lock().expect("arrivals").remove(id) {
                return arrived;
            }
            assert!(Instant::now() < deadline, "no result for {id}");
            let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
        }
    }

    async fn call(&self, turn: &Turn, id: &str) -> usize {
        let id = format!("{}-{id}", turn.prefix);
        self.send_call(turn, &id);
        self.wait(&id).await.1
    }
}

/// The `call_id` of a `tool-result` frame, found without parsing it: the
/// server writes `"type":"tool-result","session":…,"turn":…,"call_id":…`
/// first, so it is near the start.
fn call_id_of(text: &str) -> Option<&str> {
    let head = &text[..text.len().min(512)];
    if !head.starts_with(r#"{"type":"tool-result""#) {
        return None;
    }
    let start = head.find(r#""call_id":""#)? + r#""call_id":""#.len();
    let len = head[start..].find('"')?;
    Some(&head[start..start + len])
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

/// B paced for `seconds` while A loops its reads in every other window
/// of `window` seconds: idle and loaded samples come from the same minutes,
/// so a drift in the disk's commit latency weighs on both alike.
async fn measure(
    (link_a, a): (&Arc<Link>, &Arc<Turn>),
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
            while !stop.load(Ordering::Relaxed) {
                if !looping.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                let id = format!("a-{}", NEXT.fetch_add(1, Ordering::Relaxed));
                link.send_call(&a, &id);
                link.wait(&id).await;
                reads.fetch_add(1, Ordering::Relaxed);
            }
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
        let sent_at = link.send_call(b, &id);
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
