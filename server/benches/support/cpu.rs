//! CPU time from `/proc`: this process, a named thread group (the
//! in-process peer), another process (the server), the whole machine;
//! this process's CPU clock, to the nanosecond; and waiting for the
//! machine or a server to go quiet before a measured run.
//! Every bench's "server CPU", "client CPU" and "other CPU" come from here,
//! so they mean the same in every report.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::peers::PEER_THREAD;
use super::process::loadavg;

/// `/proc` CPU times are in USER_HZ ticks; `getconf CLK_TCK` says how many
/// a second (100 on every Linux we run on, the fallback).
pub(crate) fn ticks_per_second() -> f64 {
    static HZ: OnceLock<f64> = OnceLock::new();
    *HZ.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|hz| *hz > 0.0)
            .unwrap_or(100.0)
    })
}

fn seconds(ticks: u64) -> f64 {
    ticks as f64 / ticks_per_second()
}

/// utime + stime of a `/proc/.../stat` line, in ticks. The fields are
/// counted after the `(comm)`, which may itself hold spaces.
pub(crate) fn stat_ticks(stat: &str) -> u64 {
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    get(11).unwrap_or(0) + get(12).unwrap_or(0)
}

/// CPU ticks of process `pid` (`"self"` for this one).
pub(crate) fn process_ticks(pid: &str) -> u64 {
    stat_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
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

/// CPU time of this process in nanoseconds (`CLOCK_PROCESS_CPUTIME_ID`):
/// finer than [`process_ticks`]' clock ticks, for a figure per item, and
/// counting the threads that ended meanwhile too (a blocking pool's idle
/// threads end on their own, taking their time out of any sum over
/// `/proc/self/task`).
pub(crate) fn process_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// Busy ticks of the whole machine: user + nice + system + irq + softirq.
/// Steal is left out: it is time the hypervisor gave to other guests, not
/// work of any process here.
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
        let d = |a: u64, b: u64| seconds(a.saturating_sub(b));
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

    /// Other processes' CPU in % of a core, never below 0 (tick rounding
    /// can make it so); `None` for a window under a second, where the
    /// 10 ms ticks make it noise.
    pub(crate) fn other_share(&self) -> Option<f64> {
        (self.wall >= Duration::from_secs(1)).then(|| self.pct(self.other).max(0.0))
    }

    /// [`CpuUse::other_share`] for a table: `12%`, or `—`.
    pub(crate) fn other_pct(&self) -> String {
        self.other_share()
            .map_or_else(|| "—".into(), |pct| format!("{pct:.0}%"))
    }
}

/// Waits (up to `budget` seconds) until the machine has been nearly idle
/// for a second: under a quarter of a core busy. Returns the last second's
/// busy share, in cores. The caller's own tasks keep running meanwhile, so
/// a bench can keep its links answering heartbeats while it waits.
pub(crate) async fn settle(budget: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(budget);
    loop {
        let before = machine_busy_ticks();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let busy = seconds(machine_busy_ticks().saturating_sub(before));
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

/// Waits until process `pid` used at most 10 ms of CPU in 500 ms (2 % of
/// a core), at most 15 s: the server has finished the last step's work
/// (a storm's tail, its writes) before memory is read.
pub(crate) async fn settle_process(pid: u32) {
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(15) {
        let before = process_ticks(&pid.to_string());
        tokio::time::sleep(Duration::from_millis(500)).await;
        if seconds(process_ticks(&pid.to_string()).saturating_sub(before)) <= 0.010 {
            return;
        }
    }
}
