//! What `/metrics` reports, in the Prometheus text format (SPEC O1):
//! counters and histograms the server's parts add to as they work, and
//! gauges read from the live registries when scraped.
//!
//! The counters are process-wide, as a Prometheus client's default
//! registry is: one server runs per process (tests run each case in a
//! process of its own). Adding to one is an atomic add; nothing here takes
//! a lock on a hot path but the per-label maps, which are written once per
//! new label and read at scrape.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram with fixed buckets.
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// The sum of observations, in microseconds.
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Counts one observation of `took`.
    pub fn observe(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        for (bucket, bound) in self.buckets.iter().zip(BUCKETS) {
            if seconds <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bucket, bound) in self.buckets.iter().zip(BUCKETS) {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = |labels: &str| {
            if labels.is_empty() {
                String::new()
            } else {
                format!("{{{labels}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {count}", braces(labels));
    }
}

/// What the server's parts count as they work.
#[derive(Default)]
pub struct Counters {
    /// Document updates committed (each published change, SPEC S3).
    pub updates_committed: AtomicU64,
    /// Transactions begun on the write connection (on SQLite the one
    /// writer's; each costs a commit's flush): with the calls and edits of
    /// a run, what group commit saves.
    pub write_transactions: AtomicU64,
    /// How long a document's batch commit took.
    pub document_commit: Histogram,
    /// How long a Planner session's step commit took.
    pub session_commit: Histogram,
    /// Planner session steps whose commit failed (nothing of them shown).
    pub session_commits_failed: AtomicU64,
    /// Bytes waiting in every sync connection's outbox (the fan-out queue).
    pub outbox_bytes: AtomicI64,
    /// Session event streams open (`GET /sessions/{sid}/events`).
    pub session_streams: AtomicI64,
    /// Sync connections closed, by close code.
    closes: Mutex<BTreeMap<u16, u64>>,
    /// Tool calls by (tool, outcome), with their latency.
    tools: Mutex<BTreeMap<(&'static str, &'static str), Histogram>>,
}

/// The process's counters.
pub static COUNTERS: LazyLock<Counters> = LazyLock::new(Counters::default);

impl Counters {
    /// A sync connection was closed with `code`.
    pub fn closed(&self, code: u16) {
        let mut closes = self.closes.lock().unwrap_or_else(PoisonError::into_inner);
        *closes.entry(code).or_default() += 1;
    }

    /// A transaction was begun on the write connection.
    pub fn write_transaction(&self) {
        self.write_transactions.fetch_add(1, Ordering::Relaxed);
    }

    /// A tool call of `tool` ended with `outcome` (`ok`, `refused`,
    /// `failed`) after `took`.
    pub fn tool_call(&self, tool: &'static str, outcome: &'static str, took: Duration) {
        let mut tools = self.tools.lock().unwrap_or_else(PoisonError::into_inner);
        tools.entry((tool, outcome)).or_default().observe(took);
    }
}

/// The gauges read from the live registries at a scrape.
#[derive(Clone, Debug, Default)]
pub struct Gauges {
    /// Documents with a task on this server.
    pub documents_loaded: usize,
    /// Open sync connections served here.
    pub sync_connections: usize,
    /// Sync connections this node took and carries to another node.
    pub sync_connections_forwarded: usize,
    /// Open machine links (relayed ones included, in a cluster).
    pub machine_links: usize,
    /// Planner sessions running here, by the state their view names.
    pub sessions: BTreeMap<&'static str, usize>,
    /// Decision cards still waiting on an answer (open or reopened).
    pub open_decisions: i64,
    /// Document feeds open (`GET /documents/{id}/events`).
    pub document_streams: usize,
    /// Connections of the storage pool idle, and lent out.
    pub storage_connections: (usize, usize),
}

/// The whole exposition: `gauges`, then every counter.
pub fn render(gauges: &Gauges) -> String {
    let c = &*COUNTERS;
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: String| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    };
    gauge(
        "margin_documents_loaded",
        "Documents with a task on this server.",
        gauges.documents_loaded.to_string(),
    );
    gauge(
        "margin_sync_connections",
        "Open sync (y-websocket) connections served on this node's documents.",
        gauges.sync_connections.to_string(),
    );
    gauge(
        "margin_sync_connections_forwarded",
        "Sync connections this node took and carries to the document's owner (counted in the owner's margin_sync_connections).",
        gauges.sync_connections_forwarded.to_string(),
    );
    gauge(
        "margin_machine_links",
        "Open machine links of Planners.",
        gauges.machine_links.to_string(),
    );
    gauge(
        "margin_open_decisions",
        "Decision cards waiting on an answer (open or reopened).",
        gauges.open_decisions.to_string(),
    );
    gauge(
        "margin_sync_outbox_bytes",
        "Bytes waiting in sync connections' outboxes (the fan-out queue).",
        c.outbox_bytes.load(Ordering::Relaxed).max(0).to_string(),
    );
    let _ = writeln!(
        out,
        "# HELP margin_planner_sessions Planner sessions running here, by state.\n# TYPE margin_planner_sessions gauge"
    );
    for state in [
        "available",
        "working",
        "waiting",
        "disconnected",
        "stopping",
    ] {
        let count = gauges.sessions.get(state).copied().unwrap_or(0);
        let _ = writeln!(out, "margin_planner_sessions{{state=\"{state}\"}} {count}");
    }
    let (idle, lent) = gauges.storage_connections;
    let _ = writeln!(
        out,
        "# HELP margin_storage_connections Connections of the storage pool that serves reads (on PostgreSQL, writes too), by state.\n# TYPE margin_storage_connections gauge\nmargin_storage_connections{{state=\"idle\"}} {}\nmargin_storage_connections{{state=\"lent\"}} {}",
        idle, lent
    );
    let _ = writeln!(
        out,
        "# HELP margin_event_streams Open Server-Sent Events streams, by feed.\n# TYPE margin_event_streams gauge"
    );
    let _ = writeln!(
        out,
        "margin_event_streams{{feed=\"document\"}} {}",
        gauges.document_streams
    );
    let _ = writeln!(
        out,
        "margin_event_streams{{feed=\"session\"}} {}",
        c.session_streams.load(Ordering::Relaxed).max(0)
    );
    let _ = writeln!(
        out,
        "# HELP margin_updates_committed_total Document updates committed.\n# TYPE margin_updates_committed_total counter\nmargin_updates_committed_total {}",
        c.updates_committed.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP margin_write_transactions_total Transactions begun on the write connection.\n# TYPE margin_write_transactions_total counter\nmargin_write_transactions_total {}",
        c.write_transactions.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP margin_commit_seconds How long commits took, by what was committed.\n# TYPE margin_commit_seconds histogram"
    );
    c.document_commit
        .write(&mut out, "margin_commit_seconds", "of=\"document\"");
    c.session_commit
        .write(&mut out, "margin_commit_seconds", "of=\"session\"");
    let _ = writeln!(
        out,
        "# HELP margin_commits_failed_total Commits that failed, by what was committed; nothing of them was shown.\n# TYPE margin_commits_failed_total counter\nmargin_commits_failed_total{{of=\"session\"}} {}",
        c.session_commits_failed.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP margin_sync_closes_total Sync connections closed by the server, by close code.\n# TYPE margin_sync_closes_total counter"
    );
    for (code, count) in c
        .closes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
    {
        let _ = writeln!(out, "margin_sync_closes_total{{code=\"{code}\"}} {count}");
    }
    let _ = writeln!(
        out,
        "# HELP margin_tool_call_seconds Planner tool calls, by tool and outcome.\n# TYPE margin_tool_call_seconds histogram"
    );
    for ((tool, outcome), histogram) in c
        .tools
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
    {
        histogram.write(
            &mut out,
            "margin_tool_call_seconds",
            &format!("tool=\"{tool}\",outcome=\"{outcome}\""),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_each_observation_in_every_bucket_above_it() {
        let histogram = Histogram::default();
        histogram.observe(Duration::from_millis(3));
        histogram.observe(Duration::from_millis(300));
        let mut out = String::new();
        histogram.write(&mut out, "t", "");
        assert!(out.contains("t_bucket{le=\"0.0025\"} 0\n"), "{out}");
        assert!(out.contains("t_bucket{le=\"0.005\"} 1\n"), "{out}");
        assert!(out.contains("t_bucket{le=\"0.5\"} 2\n"), "{out}");
        assert!(out.contains("t_bucket{le=\"+Inf\"} 2\n"), "{out}");
        assert!(
            out.contains("t_count 2\n") && out.contains("t_sum 0.303\n"),
            "{out}"
        );
    }
}
