//! What the benches share: reading CPU time from `/proc` (this process,
//! a named thread group such as the in-process peer, another process, the
//! whole machine), the machine's description, environment knobs and
//! percentiles. Each bench binary includes this file as `mod support` and
//! uses part of it.

pub(crate) mod margin;
pub(crate) mod postgres;
pub(crate) mod sync;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Linux's USER_HZ: `/proc` CPU times are in these ticks.
pub(crate) const TICKS_PER_SECOND: f64 = 100.0;

/// Thread name of the peer server's runtime (its CPU is told apart by it).
pub(crate) const PEER_THREAD: &str = "peer-server";

/// Which server's CPU to count.
#[derive(Clone, Copy)]
pub(crate) enum ServerCpu {
    Process(u32),
    Peer,
}

/// CPU counters at one instant; [`CpuSnap::since`] turns two into use.
pub(crate) struct CpuSnap {
    at: Instant,
    server: u64,
    peer: u64,
    bench: u64,
    busy: u64,
}

impl CpuSnap {
    pub(crate) fn take(server: ServerCpu) -> CpuSnap {
        let peer = thread_ticks(PEER_THREAD);
        CpuSnap {
            at: Instant::now(),
            server: match server {
                ServerCpu::Process(pid) => process_ticks(&pid.to_string()),
                ServerCpu::Peer => peer,
            },
            peer,
            bench: process_ticks("self"),
            busy: machine_busy_ticks(),
        }
    }

    pub(crate) fn since(&self, server: ServerCpu) -> CpuUse {
        let now = CpuSnap::take(server);
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / TICKS_PER_SECOND;
        let (server_s, bench_s, peer_s) = (
            d(now.server, self.server),
            d(now.bench, self.bench),
            d(now.peer, self.peer),
        );
        let busy = d(now.busy, self.busy);
        CpuUse {
            wall: now.at - self.at,
            server: server_s,
            client: bench_s - peer_s,
            other: match server {
                ServerCpu::Process(_) => busy - server_s - bench_s,
                ServerCpu::Peer => busy - bench_s,
            },
        }
    }
}

/// CPU seconds over a window: the server's, the client's (this process
/// but the peer) and every other process's.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuUse {
    pub(crate) wall: Duration,
    pub(crate) server: f64,
    pub(crate) client: f64,
    pub(crate) other: f64,
}

impl CpuUse {
    pub(crate) fn pct(&self, seconds: f64) -> f64 {
        100.0 * seconds / self.wall.as_secs_f64().max(1e-9)
    }

    /// Other processes' CPU in % of a core; "—" for a window under a
    /// second, where the 10 ms ticks make it noise.
    pub(crate) fn other_pct(&self) -> String {
        if self.wall < Duration::from_secs(1) {
            "—".into()
        } else {
            format!("{:.0}%", self.pct(self.other))
        }
    }
}

/// utime + stime of a `/proc/.../stat` line, in ticks.
pub(crate) fn stat_ticks(stat: &str) -> u64 {
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    get(11).unwrap_or(0) + get(12).unwrap_or(0)
}

pub(crate) fn process_ticks(pid: &str) -> u64 {
    stat_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}

/// Busy ticks of the whole machine: user + nice + system + irq + softirq.
pub(crate) fn machine_busy_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    [0, 1, 2, 5, 6].iter().filter_map(|&i| v.get(i)).sum()
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The soft `Max open files` of this process (inherited by the server).
pub(crate) fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
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

/// Waits (up to `budget` seconds) until the machine has been nearly idle
/// for a second: under a quarter of a core busy. Returns the last second's
/// busy share, in cores. The caller's own tasks keep running meanwhile.
pub(crate) async fn settle(budget: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(budget);
    loop {
        let before = machine_busy_ticks();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let busy = machine_busy_ticks().saturating_sub(before) as f64 / TICKS_PER_SECOND;
        if busy < 0.25 || Instant::now() >= deadline {
            if busy >= 0.25 {
                println!(
                    "  (machine still busy: {busy:.2} cores; going ahead; load {})",
                    loadavg()
                );
            }
            return busy;
        }
    }
}

pub(crate) fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a valid value")),
        _ => default,
    }
}

/// Nearest-rank percentile of sorted values.
pub(crate) fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// CPU ticks of this process's threads named `name` (the peer's runtime).
pub(crate) fn thread_ticks(name: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .map(|t| stat_ticks(&std::fs::read_to_string(t.path().join("stat")).unwrap_or_default()))
        .sum()
}

/// The `margin` binary under test: `MARGIN_BIN`, else the release build in
/// the target folder; exits with how to build it when there is none.
pub(crate) fn margin_bin(bench: &str) -> PathBuf {
    let bin = match std::env::var_os("MARGIN_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
            .join("release/margin"),
    };
    if !bin.is_file() {
        eprintln!(
            "{bench} bench: no margin binary at {}\n\
             build it first:  cargo build --release -p margin-server --bin margin\n\
             (or point MARGIN_BIN at one)",
            bin.display()
        );
        std::process::exit(2);
    }
    bin
}

/// The report's first lines: the machine (CPUs, model, load) and the
/// binary under test (how old, from which checkout).
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

/// Resident memory of process `pid` (`VmRSS`), in KiB.
pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
