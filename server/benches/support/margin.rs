//! The `margin` binary under test and a `margin serve` process of it:
//! found (`MARGIN_BIN` or the release build), started on a prepared store,
//! its log tallied, stopped with SIGTERM (or killed, as in a crash).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The workspace root: relative `MARGIN_BIN` paths are from here, as is
/// the default `target/`.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `margin` binary under test: `MARGIN_BIN` (relative to the workspace
/// root), else `release/margin` under `CARGO_TARGET_DIR` or the
/// workspace's `target/` (which `cargo bench` builds with the bench
/// profile); exits with how to build it when there is none.
pub(crate) fn margin_bin(bench: &str) -> PathBuf {
    let bin = match std::env::var_os("MARGIN_BIN") {
        Some(bin) => workspace().join(bin),
        None => std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace().join("target"))
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

/// How many WARN/ERROR lines are kept to show.
const KEPT_LINES: usize = 10;

#[derive(Default)]
struct LogSummary {
    lines: u64,
    warn: u64,
    error: u64,
    first: Vec<String>,
    /// The first lines of all, for a server that fails to start.
    head: Vec<String>,
}

/// Where a bench's server keeps its data: a fresh temp data dir, and the
/// database `DATABASE_URL` names (give it an empty one), else SQLite in
/// that dir.
pub(crate) struct Storage {
    pub(crate) data: tempfile::TempDir,
    /// `DATABASE_URL`, when set.
    database_url: Option<String>,
}

impl Storage {
    pub(crate) fn from_env() -> Storage {
        Storage {
            data: tempfile::tempdir().expect("a temp data dir"),
            database_url: std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()),
        }
    }

    /// What `margin serve` is given besides `--data` ([`Margin::start`]
    /// passes that).
    pub(crate) fn serve_args(&self) -> Vec<String> {
        match &self.database_url {
            Some(url) => vec!["--database-url".to_owned(), url.clone()],
            None => Vec::new(),
        }
    }

    /// What another `margin` command (`account add`) is given.
    pub(crate) fn cli_args(&self) -> Vec<String> {
        let mut args = vec!["--data".to_owned(), self.data.path().display().to_string()];
        args.extend(self.serve_args());
        args
    }

    /// The store's URL, for a bench that writes to it directly.
    pub(crate) fn url(&self) -> String {
        match &self.database_url {
            Some(url) => url.clone(),
            None => margin_server::storage::Store::sqlite_url_in(self.data.path())
                .expect("the bench's data folder"),
        }
    }

    /// `PostgreSQL` or `SQLite`, for the report.
    pub(crate) fn name(&self) -> &'static str {
        match self.database_url {
            Some(_) => "PostgreSQL",
            None => "SQLite",
        }
    }
}

/// A `margin serve` process of the bench, with what it logs tallied.
pub(crate) struct Margin {
    child: Child,
    pub(crate) pid: u32,
    pub(crate) addr: SocketAddr,
    log: Arc<Mutex<LogSummary>>,
    rust_log: String,
}

impl Margin {
    /// Starts `bin serve` on the SQLite store in `data`, on a free port,
    /// with `args`, and waits until it listens; it logs at `warn`.
    pub(crate) async fn start(bin: &Path, data: &Path, args: &[String]) -> Margin {
        Margin::start_logging(bin, data, args, "warn").await
    }

    /// [`Margin::start`] with `RUST_LOG=rust_log`.
    pub(crate) async fn start_logging(
        bin: &Path,
        data: &Path,
        args: &[String],
        rust_log: &str,
    ) -> Margin {
        let mut child = Command::new(bin)
            .arg("serve")
            .arg("--data")
            .arg(data)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", rust_log)
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
                let error = line.contains("ERROR");
                if error || line.contains("WARN") {
                    if error {
                        log.error += 1;
                    } else {
                        log.warn += 1;
                    }
                    if log.first.len() < KEPT_LINES {
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
        // Keep draining stdout so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Margin {
            child,
            pid,
            addr,
            log,
            rust_log: rust_log.to_owned(),
        }
    }

    /// WARN and ERROR lines so far, and the first few of them: a bench
    /// that reports before it stops the server.
    pub(crate) fn logged(&self) -> (u64, u64, Vec<String>) {
        let log = self.log.lock().expect("log summary lock");
        (log.warn, log.error, log.first.clone())
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
        let mut ok = false;
        let status = if sent {
            match tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await {
                Ok(Ok(status)) => {
                    ok = status.success();
                    status.to_string()
                }
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
            ok,
            lines: log.lines,
            warn: log.warn,
            error: log.error,
            first: log.first.clone(),
            rust_log: self.rust_log.clone(),
        }
    }
}

/// How a server stopped, and what it logged.
pub(crate) struct Stopped {
    /// From SIGTERM to exit.
    pub(crate) took: Duration,
    /// Its exit status, or what went wrong.
    pub(crate) status: String,
    /// It exited by itself, with status 0.
    pub(crate) ok: bool,
    /// Lines it logged.
    pub(crate) lines: u64,
    /// Of which WARN, and ERROR.
    pub(crate) warn: u64,
    pub(crate) error: u64,
    /// The first few of those.
    pub(crate) first: Vec<String>,
    rust_log: String,
}

impl Stopped {
    /// `stopped in 0.1 s (exit status: 0); N log lines …`.
    pub(crate) fn summary(&self) -> String {
        format!(
            "stopped in {:.1} s ({}); {}",
            self.took.as_secs_f64(),
            self.status,
            self.log_line()
        )
    }

    /// `N log lines at RUST_LOG=warn, M WARN/ERROR[: first | …]`.
    pub(crate) fn log_line(&self) -> String {
        format!(
            "{} log lines at RUST_LOG={}, {} WARN/ERROR{}",
            self.lines,
            self.rust_log,
            self.warn + self.error,
            if self.first.is_empty() {
                String::new()
            } else {
                format!(": {}", self.first.join(" | "))
            }
        )
    }
}
