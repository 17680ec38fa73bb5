//! What a report is made of: its first lines (the machine, the binary under
//! test), percentiles, ratios and Markdown table heads. One nearest-rank
//! percentile for every bench, so a p99 in one report is a p99 in another.

use std::path::Path;
use std::time::Duration;

use super::process::loadavg;

/// Nearest-rank percentile (`p` in 0–100) of sorted values.
pub(crate) fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// [`percentile`] of durations in any order, in ms.
pub(crate) fn percentile_ms(samples: &[Duration], p: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    ms(percentile(&sorted, p))
}

/// A duration in milliseconds, for a figure printed to any precision.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `a / b` to two places, `—` when `b` is not positive.
pub(crate) fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "—".into()
    }
}

/// A Markdown table's head: `head` (`| a | b |`) and its `|---|---|` rule.
pub(crate) fn table_head(head: &str) -> String {
    let columns = head.matches('|').count().saturating_sub(1);
    format!("{head}\n|{}", "---|".repeat(columns))
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    std::process::Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

/// The report's first lines: the machine (CPUs, model, load) and the
/// binary under test (how old, from which checkout), so a figure can be
/// traced to what produced it.
pub(crate) fn describe(bin: &Path) -> [String; 2] {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "?".into());
    let built = std::fs::metadata(bin)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .map_or("?".into(), |age| format!("{} s ago", age.as_secs()));
    let commit = match command_output("git", &["rev-parse", "--short", "HEAD"]) {
        Some(commit) => {
            let dirty = command_output("git", &["status", "--porcelain", "--untracked-files=no"])
                .map_or(0, |s| s.lines().count());
            format!("checkout at {commit} with {dirty} changed tracked files")
        }
        None => "not a git checkout".into(),
    };
    [
        format!("machine: {cpus} CPUs ({model}), load average {}", loadavg()),
        format!(
            "margin: {} (built {built}); bench source: {commit}",
            bin.display()
        ),
    ]
}

/// What opens and closes a report: the machine, the binary and the knobs
/// first (printed at the start too, so a run that dies still says what it
/// measured), the servers' log lines last; the bench's tables go between.
#[derive(Default)]
pub(crate) struct ReportFrame {
    pub(crate) head: Vec<String>,
    pub(crate) logs: Vec<String>,
}

impl ReportFrame {
    /// [`describe`]'s lines and `knobs` (the bench's settings), printed.
    pub(crate) fn start(bin: &Path, knobs: String) -> ReportFrame {
        let [machine, margin] = describe(bin);
        let frame = ReportFrame {
            head: vec![machine, margin, knobs],
            logs: Vec::new(),
        };
        println!("{}", frame.head.join("\n"));
        frame
    }

    /// The head, as Markdown lines (two trailing spaces break a line).
    pub(crate) fn open(&self, out: &mut String) {
        for line in &self.head {
            out.push_str(line);
            out.push_str("  \n");
        }
    }

    /// The log lines after a blank line, if there are any.
    pub(crate) fn close(&self, out: &mut String) {
        if !self.logs.is_empty() {
            out.push('\n');
            for line in &self.logs {
                out.push_str(line);
                out.push_str("  \n");
            }
        }
    }
}

/// Prints the summary under its banner, after the run's running log.
pub(crate) fn print_summary(summary: &str) {
    println!("\n==================== summary ====================\n");
    println!("{summary}");
}

/// Each of `runs` that `mine` picks (Margin's), with the first other run
/// that `peer_of` says is the peer's run of the same case: the pairs a
/// ratio table is made of. A run with no peer run is left out.
pub(crate) fn paired<T>(
    runs: &[T],
    mine: impl Fn(&T) -> bool,
    peer_of: impl Fn(&T, &T) -> bool,
) -> Vec<(&T, &T)> {
    runs.iter()
        .filter(|m| mine(m))
        .filter_map(|m| Some((m, runs.iter().find(|p| peer_of(m, p))?)))
        .collect()
}
