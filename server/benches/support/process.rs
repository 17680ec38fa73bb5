//! What `/proc` says of a process and of the machine besides CPU: memory
//! (VmRSS, RssAnon, VmHWM, Pss), threads, open descriptors, the kernel's
//! TCP counters, the load average and this process's open-files limit.

/// A `NAME:  value kB` field of a `/proc` status or smaps file.
fn field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// A field of `/proc/PID/status` (`"VmRSS:"`, `"VmHWM:"`, …), in KiB.
pub(crate) fn status_kib(pid: u32, name: &str) -> Option<u64> {
    field(
        &std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        name,
    )
}

/// Resident memory of process `pid` (`VmRSS`), in KiB.
pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// A process's memory at one instant, in KiB (0 where `/proc` had none).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Mem {
    pub(crate) rss_kib: u64,
    pub(crate) anon_kib: u64,
    /// Proportional set size, from `smaps_rollup`: shared pages split.
    pub(crate) pss_kib: u64,
    /// Peak resident memory so far.
    pub(crate) hwm_kib: u64,
    pub(crate) threads: u64,
}

impl Mem {
    pub(crate) fn of(pid: u32) -> Mem {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rollup =
            std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        let get = |text: &str, name: &str| field(text, name).unwrap_or(0);
        Mem {
            rss_kib: get(&status, "VmRSS:"),
            anon_kib: get(&status, "RssAnon:"),
            hwm_kib: get(&status, "VmHWM:"),
            threads: get(&status, "Threads:"),
            pss_kib: get(&rollup, "Pss:"),
        }
    }
}

/// Open file descriptors of a process (its sockets, mostly): how a bench
/// sees that links are really closed.
pub(crate) fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The counters that show a full accept queue during a burst of
/// connections: a SYN dropped (retried by the client a second later) or
/// answered with a cookie.
pub(crate) const ACCEPT_QUEUE: [&str; 4] = [
    "ListenOverflows",
    "ListenDrops",
    "TCPReqQFullDoCookies",
    "TCPSynRetrans",
];

/// Machine-wide `TcpExt` counters of `/proc/net/netstat` (such as
/// `ListenOverflows`, `TCPSynRetrans`): a full accept queue shows there,
/// not in any client's error.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TcpCounters<const N: usize> {
    names: [&'static str; N],
    pub(crate) values: [u64; N],
}

impl<const N: usize> TcpCounters<N> {
    pub(crate) fn now(names: [&'static str; N]) -> TcpCounters<N> {
        let netstat = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
        let lines: Vec<&str> = netstat.lines().collect();
        let mut values = [0; N];
        // The file is pairs of lines: names, then values, per group.
        for pair in lines.chunks(2) {
            let [names_line, values_line] = pair else {
                continue;
            };
            if !names_line.starts_with("TcpExt:") {
                continue;
            }
            for (name, value) in names_line
                .split_whitespace()
                .zip(values_line.split_whitespace())
            {
                if let Some(i) = names.iter().position(|n| *n == name) {
                    values[i] = value.parse().unwrap_or(0);
                }
            }
        }
        TcpCounters { names, values }
    }

    /// How much each counter grew since `self`.
    pub(crate) fn since(&self) -> TcpCounters<N> {
        let now = TcpCounters::now(self.names);
        let mut values = now.values;
        for (v, before) in values.iter_mut().zip(self.values) {
            *v = v.saturating_sub(before);
        }
        TcpCounters { values, ..now }
    }

    pub(crate) fn get(&self, name: &str) -> u64 {
        self.names
            .iter()
            .position(|n| *n == name)
            .map_or(0, |i| self.values[i])
    }
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` has them.
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
