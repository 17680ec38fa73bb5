//! The feed bench's servers under test: a fresh `margin serve` or the
//! in-process peer, each with a linked machine and one session to follow,
//! and the generator that writes that session's run reports, paced or at once.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use margin_protocol::link::{ClientMessage, RunStatus, ServerMessage};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::support::accounts::planners;
use crate::support::cpu::ServerCpu;
use crate::support::machine::{Machine, PATIENCE};
use crate::support::margin::Margin;
use crate::support::planner::Api;
use crate::support::process::rss_kib;
use crate::support::schedule::Schedule;

use crate::report::Report;
use crate::{Config, MARGIN, PEER};

/// When each report was written: nanoseconds since `epoch`, plus one (0:
/// not yet).
pub(crate) struct Sent {
    epoch: Instant,
    pub(crate) at: Vec<AtomicU64>,
}

impl Sent {
    pub(crate) fn new(count: usize) -> Arc<Sent> {
        Arc::new(Sent {
            epoch: Instant::now(),
            at: (0..count).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    fn mark(&self, k: usize) {
        let ns = self.epoch.elapsed().as_nanos() as u64 + 1;
        self.at[k].store(ns, Ordering::Release);
    }

    pub(crate) fn at(&self, k: usize) -> Option<Instant> {
        match self.at.get(k)?.load(Ordering::Acquire) {
            0 => None,
            ns => Some(self.epoch + Duration::from_nanos(ns - 1)),
        }
    }
}

/// How the generator wrote its reports.
pub(crate) struct Generated {
    pub(crate) sent_rate: f64,
    pub(crate) lag_p99: Duration,
    pub(crate) lag_max: Duration,
    pub(crate) last_sent: Instant,
}

/// Writes `sent.at.len()` run reports on `session`: report `k` is due at
/// `start + k / rate`, or at once without a rate.
pub(crate) async fn generate(
    machine: &Machine,
    session: &str,
    sent: &Sent,
    rate: Option<u64>,
) -> Generated {
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

/// A server with one session to follow, and its generator.
pub(crate) struct Target {
    pub(crate) server: &'static str,
    pub(crate) addr: SocketAddr,
    api: Api,
    /// The account's token (the peer checks none).
    pub(crate) token: String,
    pub(crate) session: String,
    /// The cursor before the first report.
    pub(crate) base: u64,
    pub(crate) machine: Machine,
    pub(crate) cpu: ServerCpu,
    /// A Margin server and its data folder (removed when dropped).
    pub(crate) margin: Option<(Margin, tempfile::TempDir)>,
}

impl Target {
    /// A fresh `margin serve` with `args`, a linked machine, and its
    /// session from `@planner go`.
    pub(crate) async fn margin(config: &Config, args: &[String]) -> Target {
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
    pub(crate) async fn peer(addr: SocketAddr, session: String) -> Target {
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
    pub(crate) async fn cursor(&self, at_least: u64, settle: bool) -> u64 {
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

    pub(crate) fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.margin.as_ref()?.0.pid)
    }

    /// Stops a Margin server; what it logged goes to the report.
    pub(crate) async fn finish(mut self, report: &mut Report) {
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
