//! A `margin serve` process under a bench: started on a prepared store,
//! its log tallied, stopped with SIGTERM (or killed, as in a crash).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

#[derive(Default)]
struct LogSummary {
    lines: u64,
    warn_error: u64,
    first: Vec<String>,
    /// The first lines of all, for a server that fails to start.
    head: Vec<String>,
}

/// A `margin serve` process of the bench, with what it logs tallied.
pub(crate) struct Margin {
    child: Child,
    pub(crate) pid: u32,
    pub(crate) addr: SocketAddr,
    log: Arc<Mutex<LogSummary>>,
}

impl Margin {
    /// Starts `bin serve` on the SQLite store in `data`, on a free port,
    /// with `args`, and waits until it listens.
    pub(crate) async fn start(bin: &Path, data: &Path, args: &[String]) -> Margin {
        let mut child = Command::new(bin)
            .arg("serve")
            .arg("--data")
            .arg(data)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let pid = child.id().expect("margin exited at once");
        let stdout = child.stdout.take().expect("margin's stdout is piped");
        let stderr = child.stderr.take().expect("margin's stderr is piped");
        let log = Arc::new(Mutex::new(LogSummary::default()));
        let sink = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut log = sink.lock().expect("log summary lock");
                log.lines += 1;
                if log.head.len() < 20 {
                    log.head.push(line.clone());
                }
                if line.contains("WARN") || line.contains("ERROR") {
                    log.warn_error += 1;
                    if log.first.len() < 8 {
                        log.first.push(line);
                    }
                }
            }
        });
        let mut lines = BufReader::new(stdout).lines();
        let addr = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("margin listening on http://") {
                    return url.trim().parse::<SocketAddr>().ok();
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        let Some(addr) = addr else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let head = log.lock().expect("log summary lock").head.join("\n  ");
            panic!(
                "{} did not start listening; its log:\n  {head}\n\
                 The bench writes the accounts with this checkout's margin_server, so the binary \
                 must be built from the same source (a schema it does not know stops it): \
                 cargo build --release -p margin-server --bin margin",
                bin.display()
            );
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Margin {
            child,
            pid,
            addr,
            log,
        }
    }

    /// SIGKILL, as in a crash: no shutdown path runs.
    pub(crate) async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// SIGTERM; how the graceful shutdown went and what the server logged.
    pub(crate) async fn terminate(mut self) -> Stopped {
        let started = Instant::now();
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await
            .map(|s| s.success())
            .unwrap_or(false);
        let status = if sent {
            match tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await {
                Ok(Ok(status)) => status.to_string(),
                Ok(Err(e)) => format!("wait failed: {e}"),
                Err(_) => {
                    let _ = self.child.kill().await;
                    "did not exit within 60 s; killed".into()
                }
            }
        } else {
            let _ = self.child.kill().await;
            "SIGTERM failed; killed".into()
        };
        let took = started.elapsed();
        let log = self.log.lock().expect("log summary lock");
        Stopped {
            took,
            status,
            lines: log.lines,
            warn_error: log.warn_error,
            first: log.first.clone(),
        }
    }
}

/// How a server stopped, and its log at `RUST_LOG=warn`.
pub(crate) struct Stopped {
    /// From SIGTERM to exit.
    pub(crate) took: Duration,
    /// Its exit status, or what went wrong.
    pub(crate) status: String,
    /// Lines it logged.
    pub(crate) lines: u64,
    /// Of which WARN or ERROR.
    pub(crate) warn_error: u64,
    /// The first few of those.
    pub(crate) first: Vec<String>,
}

impl Stopped {
    /// `N log lines at RUST_LOG=warn, M WARN/ERROR[: first | …]`.
    pub(crate) fn log_line(&self) -> String {
        format!(
            "{} log lines at RUST_LOG=warn, {} WARN/ERROR{}",
            self.lines,
            self.warn_error,
            if self.first.is_empty() {
                String::new()
            } else {
                format!(": {}", self.first.join(" | "))
            }
        )
    }
}
