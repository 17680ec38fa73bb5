//! Part 1 of the link bench, the tool-call round trip: a machine with a
//! live turn calls `read_document`, paced (open loop) and unpaced (closed
//! loop), against Margin with the document closed and open, and the peer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use margin_protocol::decisions::{EditInput, EditPlanInput, ReadDocumentOutput};
use margin_protocol::link::{ClientMessage, ServerMessage};
use serde_json::{json, Value};

use crate::support::accounts::{planners, Member};
use crate::support::cpu::{CpuSnap, CpuUse, ServerCpu};
use crate::support::link_peer;
use crate::support::machine::{
    call, connect, frame, hello, next_message, send, tool_call, Frame, Ws,
};
use crate::support::margin::Margin;
use crate::support::planner::Api;
use crate::support::process::{loadavg, Mem};
use crate::support::report::{ms, percentile};
use crate::support::schedule::Schedule;

use crate::report::Report;
use crate::{quiet, Config, MARGIN_CLOSED, MARGIN_OPEN, PEER};

/// One measured run of tool calls.
#[derive(Clone, Debug, Default)]
pub(crate) struct RttRun {
    pub(crate) server: String,
    pub(crate) mode: String,
    pub(crate) rep: usize,
    pub(crate) sent: usize,
    pub(crate) results: usize,
    pub(crate) refused: usize,
    pub(crate) missing: usize,
    pub(crate) sent_rate: f64,
    pub(crate) achieved_rate: f64,
    rtt_sorted: Vec<Duration>,
    pub(crate) lag_p99: Duration,
    pub(crate) lag_max: Duration,
    result_bytes: usize,
    pub(crate) cpu: CpuUse,
    pub(crate) load: String,
}

impl RttRun {
    pub(crate) fn p(&self, p: f64) -> Duration {
        percentile(&self.rtt_sorted, p)
    }

    fn mean(&self) -> Duration {
        let n = u32::try_from(self.rtt_sorted.len()).unwrap_or(u32::MAX);
        self.rtt_sorted.iter().sum::<Duration>() / n.max(1)
    }

    pub(crate) fn server_us_per_call(&self) -> f64 {
        1e6 * self.cpu.server / self.results.max(1) as f64
    }

    /// p50, p90, p99, p99.9, max and mean round trip, in ms.
    pub(crate) fn latencies(&self) -> [String; 6] {
        let [p50, p90, p99, p999, max] =
            [50.0, 90.0, 99.0, 99.9, 100.0].map(|p| format!("{:.3}", ms(self.p(p))));
        [p50, p90, p99, p999, max, format!("{:.3}", ms(self.mean()))]
    }

    fn line(&self) -> String {
        let [p50, p90, p99, p999, max, mean] = self.latencies();
        format!(
            "{} {:<14} rep {}: sent {} ({:.0}/s), results {} ({:.0}/s), refused {}, missing {}; \
             rtt p50 {} p90 {} p99 {} p99.9 {} max {} mean {} ms; schedule lag p99 {:.3} max {:.3} ms; \
             server CPU {:.0}% ({:.1} µs/call), client {:.0}%, other {:.0}%; result frame {} B; load {}",
            self.server,
            self.mode,
            self.rep,
            self.sent,
            self.sent_rate,
            self.results,
            self.achieved_rate,
            self.refused,
            self.missing,
            p50,
            p90,
            p99,
            p999,
            max,
            mean,
            ms(self.lag_p99),
            ms(self.lag_max),
            self.cpu.pct(self.cpu.server),
            self.server_us_per_call(),
            self.cpu.pct(self.cpu.client),
            self.cpu.pct(self.cpu.other),
            self.result_bytes,
            self.load,
        )
    }
}

/// A link with a live turn to call tools in.
pub(crate) struct Turn {
    pub(crate) ws: Ws,
    pub(crate) session: String,
    pub(crate) turn: String,
    pub(crate) cpu: ServerCpu,
    pub(crate) server: String,
}

/// Every call id of this process is new: the server answers an id it has
/// seen from its journal, without running the call again (SPEC W1).
static CALLS: AtomicU64 = AtomicU64::new(0);

/// A run's call ids: `r{run}-c{k}`.
fn call_id(run: u64, k: usize) -> String {
    format!("r{run}-c{k}")
}

fn call_index(run: u64, call_id: &str) -> Option<usize> {
    call_id.strip_prefix(&format!("r{run}-c"))?.parse().ok()
}

/// Open loop: call `k` is due at `start + k / rate`, sent then whatever
/// came back; round trip = write → matching result read.
async fn paced(turn: &mut Turn, rate: u64, seconds: f64) -> RttRun {
    let total = ((rate as f64) * seconds).round().max(1.0) as usize;
    let mut sent_at: Vec<Option<Instant>> = vec![None; total];
    let mut rtt = Vec::with_capacity(total);
    let (mut results, mut refused, mut result_bytes) = (0usize, 0usize, 0usize);
    let run = CALLS.fetch_add(1, Ordering::Relaxed);
    let mut last_result = Instant::now();
    let snap = CpuSnap::take(turn.cpu);
    let mut schedule = Schedule::new(rate, total, Duration::from_millis(5));
    let start = schedule.start();
    let mut last_sent = start;
    while results + refused < total {
        let next_due = schedule.due();
        tokio::select! {
            biased;
            next_frame = turn.ws.next() => match frame(next_frame) {
                Frame::Message(ServerMessage::ToolResult { call_id, output, error, .. }, bytes) => {
                    let now = Instant::now();
                    let Some(sent) = call_index(run, &call_id).and_then(|k| sent_at.get(k).copied().flatten()) else {
                        continue;
                    };
                    rtt.push(now - sent);
                    last_result = now;
                    result_bytes = bytes;
                    if output.is_some() && error.is_none() { results += 1 } else { refused += 1 }
                }
                Frame::Message(ServerMessage::Heartbeat { seq }, _) => {
                    send(&mut turn.ws, &ClientMessage::HeartbeatAck { seq }).await.expect("heartbeat-ack");
                }
                Frame::Message(other, _) => println!("  unexpected during paced run: {other:?}"),
                Frame::Closed(why) => panic!("{} closed the link during the paced run: {why}", turn.server),
                Frame::Other => {}
            },
            _ = tokio::time::sleep_until(next_due.into()), if !schedule.done() => {
                let now = Instant::now();
                while let Some(k) = schedule.take(now) {
                    let message = tool_call(&turn.session, &turn.turn, call_id(run, k), "read_document", json!({}));
                    sent_at[k] = Some(Instant::now());
                    send(&mut turn.ws, &message).await.expect("tool-call write");
                    last_sent = Instant::now();
                }
            }
            _ = tokio::time::sleep(Duration::from_secs(30)), if schedule.done() => {
                println!("  {}: no result for 30 s; {} missing", turn.server, total - results - refused);
                break;
            }
        }
    }
    let cpu = snap.since(turn.cpu);
    rtt.sort_unstable();
    let (lag_p99, lag_max) = schedule.lag();
    let (first, next) = (start, schedule.sent());
    RttRun {
        server: turn.server.clone(),
        mode: format!("paced {rate}/s"),
        rep: 0,
        sent: next,
        results,
        refused,
        missing: total - results - refused,
        sent_rate: (next as f64 - 1.0).max(1.0) / (last_sent - first).as_secs_f64().max(1e-9),
        achieved_rate: (results + refused) as f64 / (last_result - first).as_secs_f64().max(1e-9),
        rtt_sorted: rtt,
        lag_p99,
        lag_max,
        result_bytes,
        cpu,
        load: loadavg(),
    }
}

/// Closed loop: one call in flight, the next written when the last result
/// is read, for `seconds` (or `count` calls when given).
async fn closed_loop(turn: &mut Turn, seconds: f64, count: Option<usize>) -> RttRun {
    let snap = CpuSnap::take(turn.cpu);
    let start = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    let mut rtt = Vec::new();
    let (mut sent, mut results, mut refused, mut result_bytes) = (0usize, 0usize, 0usize, 0usize);
    let run = CALLS.fetch_add(1, Ordering::Relaxed);
    loop {
        match count {
            Some(count) if sent >= count => break,
            None if start.elapsed() >= budget => break,
            _ => {}
        }
        let id = call_id(run, sent);
        let message = tool_call(
            &turn.session,
            &turn.turn,
            id.clone(),
            "read_document",
            json!({}),
        );
        let at = Instant::now();
        send(&mut turn.ws, &message).await.expect("tool-call write");
        sent += 1;
        loop {
            match frame(turn.ws.next().await) {
                Frame::Message(
                    ServerMessage::ToolResult {
                        call_id,
                        output,
                        error,
                        ..
                    },
                    bytes,
                ) if call_id == id => {
                    rtt.push(at.elapsed());
                    result_bytes = bytes;
                    if output.is_some() && error.is_none() {
                        results += 1
                    } else {
                        refused += 1
                    }
                    break;
                }
                Frame::Message(ServerMessage::Heartbeat { seq }, _) => {
                    send(&mut turn.ws, &ClientMessage::HeartbeatAck { seq })
                        .await
                        .expect("heartbeat-ack");
                }
                Frame::Message(other, _) => println!("  unexpected during closed loop: {other:?}"),
                Frame::Closed(why) => panic!(
                    "{} closed the link during the closed loop: {why}",
                    turn.server
                ),
                Frame::Other => {}
            }
        }
    }
    let wall = start.elapsed().as_secs_f64().max(1e-9);
    let cpu = snap.since(turn.cpu);
    rtt.sort_unstable();
    RttRun {
        server: turn.server.clone(),
        mode: "closed loop".into(),
        rep: 0,
        sent,
        results,
        refused,
        missing: 0,
        sent_rate: sent as f64 / wall,
        achieved_rate: (results + refused) as f64 / wall,
        rtt_sorted: rtt,
        lag_p99: Duration::ZERO,
        lag_max: Duration::ZERO,
        result_bytes,
        cpu,
        load: loadavg(),
    }
}

/// A new id for a setup call of `name`.
fn setup_call_id(name: &str) -> String {
    format!("setup-{name}-{}", CALLS.fetch_add(1, Ordering::Relaxed))
}

/// `read_document` in turn `live`, waited for: its output and frame size.
async fn read_document(ws: &mut Ws, live: (&str, &str)) -> (Value, usize) {
    let id = setup_call_id("read_document");
    let (output, bytes) = call(ws, live, id, "read_document", json!({}))
        .await
        .expect("read_document");
    (output.expect("read_document refused"), bytes)
}

/// Links `member`'s machine to Margin, starts a turn on its document with
/// `@planner`, and fills the document with a heading and `paragraphs`
/// paragraphs. With `viewer`, a sync client keeps the document open (as an
/// editor tab would) until the returned guard is dropped. Returns the turn
/// and the output of a `read_document` with its frame size.
async fn margin_turn(
    margin: &Margin,
    api: &Api,
    member: &Member,
    label: &str,
    paragraphs: usize,
    viewer: bool,
) -> (Turn, Value, usize, Option<tokio::task::JoinHandle<()>>) {
    let document = member.document.clone().expect("document made");
    let viewer = if viewer {
        Some(crate::support::sync::viewer(margin.addr, &document, &member.token).await)
    } else {
        None
    };
    let mut ws = connect(margin.addr, member.credential.as_deref())
        .await
        .expect("link to margin");
    hello(&mut ws).await.expect("margin's welcome");
    api.chat(
        &member.token,
        &document,
        "@planner benchmark the tools, please",
    )
    .await
    .expect("chat post");
    let (session, turn) = loop {
        match next_message(&mut ws).await.expect("an invoke") {
            (ServerMessage::Invoke { session, turn, .. }, _) => break (session, turn),
            (other, _) => println!("  before invoke: {other:?}"),
        }
    };
    let live = (session.as_str(), turn.as_str());
    let (read, _) = read_document(&mut ws, live).await;
    let read: ReadDocumentOutput = serde_json::from_value(read).expect("read_document output");
    let mut edits = vec![EditInput::Insert {
        after: None,
        kind: "heading".into(),
        level: Some(1),
        text: "Q3 launch plan".into(),
    }];
    for i in 1..=paragraphs {
        edits.push(EditInput::Insert {
            after: None,
            kind: "paragraph".into(),
            level: None,
            text: format!(
                "Step {i}: agree the launch region, the budget line and the owner of this workstream before the review on Thursday."
            ),
        });
    }
    let edit = EditPlanInput {
        revision: read.revision,
        edits,
    };
    let (edited, _) = call(
        &mut ws,
        live,
        setup_call_id("edit_plan"),
        "edit_plan",
        serde_json::to_value(&edit).expect("edit input"),
    )
    .await
    .expect("edit_plan");
    edited.unwrap_or_else(|r| panic!("edit_plan refused: {r}"));
    let (output, bytes) = read_document(&mut ws, live).await;
    let turn = Turn {
        ws,
        session,
        turn,
        cpu: ServerCpu::Process(margin.pid),
        server: label.into(),
    };
    (turn, output, bytes, viewer)
}

pub(crate) async fn round_trips(config: &Config, report: &mut Report) {
    println!("\n== part 1: tool-call round trip (read_document in a live turn) ==");
    let dir = tempfile::tempdir().expect("cannot make a temp dir");
    // Two accounts: one document nobody has open, one open in an "editor".
    let members = planners(dir.path(), "rtt", 2).await;
    let margin = Margin::start(&config.bin, dir.path(), &[]).await;
    println!(
        "margin {} listening on {} (pid {})",
        config.bin.display(),
        margin.addr,
        margin.pid
    );
    let api = Api::new(margin.addr);

    let (closed_doc, output, bytes, _) = margin_turn(
        &margin,
        &api,
        &members[0],
        MARGIN_CLOSED,
        config.paragraphs,
        false,
    )
    .await;
    let (open_doc, _, _, viewer) = margin_turn(
        &margin,
        &api,
        &members[1],
        MARGIN_OPEN,
        config.paragraphs,
        true,
    )
    .await;
    let blocks = output["outline"].as_array().map_or(0, Vec::len);
    println!(
        "each document has {blocks} blocks; a read_document tool-result frame is {bytes} bytes"
    );
    report.rtt_doc = format!("{blocks} blocks, tool-result frame {bytes} bytes");

    // The peer answers with the same output, so the same bytes.
    let peer_addr = link_peer::start(output);
    let mut peer_ws = connect(peer_addr, None).await.expect("link to the peer");
    hello(&mut peer_ws).await.expect("the peer's welcome");
    let peer = Turn {
        ws: peer_ws,
        session: closed_doc.session.clone(),
        turn: closed_doc.turn.clone(),
        cpu: ServerCpu::Peer,
        server: PEER.into(),
    };

    let mut turns = [closed_doc, open_doc, peer];
    for turn in turns.iter_mut() {
        let warm = closed_loop(turn, 0.0, Some(config.warmup)).await;
        println!(
            "{} warm-up: {} calls, p50 {:.3} ms",
            turn.server,
            warm.results,
            ms(warm.p(50.0))
        );
    }
    for rep in 1..=config.repeat {
        for i in 0..turns.len() {
            quiet(config.quiet_wait, &mut turns).await;
            let turn = &mut turns[i];
            let mut run = paced(turn, config.rate, config.seconds).await;
            run.rep = rep;
            println!("{}", run.line());
            report.rtt.push(run);
        }
        for i in 0..turns.len() {
            quiet(config.quiet_wait, &mut turns).await;
            let turn = &mut turns[i];
            let mut run = closed_loop(turn, config.seconds, None).await;
            run.rep = rep;
            println!("{}", run.line());
            report.rtt.push(run);
        }
    }

    // End the turns properly.
    for turn in turns.iter_mut() {
        if turn.server != PEER {
            let reply = ClientMessage::Reply {
                session: turn.session.clone(),
                turn: turn.turn.clone(),
                text: "Benchmarked the document tools.".into(),
            };
            send(&mut turn.ws, &reply).await.expect("reply");
        }
        let _ = send(&mut turn.ws, &ClientMessage::Detach {}).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    if let Some(viewer) = viewer {
        viewer.abort();
    }
    report.rtt_server_mem = Mem::of(margin.pid);
    let stopped = margin.terminate().await;
    report
        .frame
        .logs
        .push(format!("round-trip server: {}", stopped.log_line()));
    println!(
        "round-trip server stopped in {:?} ({})",
        stopped.took, stopped.status
    );
}
