//! A real `margin serve` process on a free loopback port.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{Api, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_margin");

/// A running server; killed when dropped.
pub struct Server {
    child: Child,
    args: Vec<String>,
    api: Api,
    /// What it printed after its address.
    printed: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    pub async fn start(db: &TestDb) -> Server {
        Self::start_with(db.cli_args()).await
    }

    /// Starts with `margin serve --demo-planner ACCOUNT`; returns the server
    /// and the token it printed for the account (its last line, as the
    /// README tells a newcomer).
    pub async fn start_with_demo(db: &TestDb, account: &str) -> (Server, String) {
        let mut args = db.cli_args();
        args.extend(["--demo-planner".to_owned(), account.to_owned()]);
        let server = Self::start_with(args).await;
        let token = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let seen = server.printed.lock().unwrap().clone();
                if let Some(at) = seen
                    .iter()
                    .position(|l| l.starts_with("demo Planner linked"))
                {
                    if let Some(token) = seen[at..].iter().find(|l| l.starts_with("mgn_")) {
                        return token.clone();
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the demo Planner's token was not printed within 30 s");
        (server, token)
    }

    /// Starts with `extra` arguments after the database's, under a
    /// file-descriptor limit of `fds` when given (`ulimit -n`).
    pub async fn start_limited(db: &TestDb, fds: Option<u32>, extra: &[&str]) -> Server {
        let mut args = db.cli_args();
        args.extend(extra.iter().map(|a| a.to_string()));
        match fds {
            Some(fds) => {
                let mut wrapped = vec![
                    "-c".to_owned(),
                    format!("ulimit -n {fds} && exec \"$0\" serve \"$@\""),
                    BIN.to_owned(),
                ];
                wrapped.extend(args.iter().cloned());
                // A restart runs without the limit.
                Self::spawn(Command::new("sh").args(&wrapped), args).await
            }
            None => Self::start_with(args).await,
        }
    }

    pub async fn start_with(args: Vec<String>) -> Server {
        let mut command = Command::new(BIN);
        command.arg("serve").args(&args);
        Self::spawn(&mut command, args).await
    }

    async fn spawn(command: &mut Command, args: Vec<String>) -> Server {
        let mut child = command
            .args(["--listen", "127.0.0.1:0"])
            // MARGIN_TEST_LOG=info (say) shows a failing test's servers.
            .env(
                "RUST_LOG",
                std::env::var("MARGIN_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let addr = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(url) = line.strip_prefix("margin listening on http://") {
                    return url.parse::<SocketAddr>().unwrap();
                }
            }
            panic!("margin exited before listening");
        })
        .await
        .expect("margin did not start listening within 30 s");
        // Keep draining stdout so the process never blocks on a full pipe.
        let printed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = printed.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                keep.lock().unwrap().push(line);
            }
        });
        Server {
            child,
            args,
            api: Api::new(addr),
            printed,
        }
    }

    /// Creates an account through the CLI and returns its token.
    pub async fn account(db: &TestDb, name: &str) -> String {
        let output = Command::new(BIN)
            .args(["account", "add", name])
            .args(db.cli_args())
            .env("RUST_LOG", "warn")
            .output()
            .await
            .unwrap();
        assert!(
            output.status.success(),
            "account add failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8(output.stdout).unwrap();
        stdout.lines().last().unwrap().trim().to_owned()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// SIGKILL: no shutdown path runs.
    pub async fn kill(&mut self) {
        self.child.kill().await.unwrap();
    }

    /// SIGTERM, then waits for a clean exit.
    pub async fn terminate(&mut self) {
        self.signal_term().await;
        self.exits_cleanly().await;
    }

    /// Sends SIGTERM and returns at once: the server drains, then stops.
    pub async fn signal_term(&self) {
        let pid = self.child.id().unwrap().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit, which it must do cleanly.
    pub async fn exits_cleanly(&mut self) {
        let exit = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("margin did not stop within 30 s of SIGTERM")
            .unwrap();
        assert!(exit.success(), "margin exited with {exit}");
    }

    /// Starts a new process on the same database (a new port).
    pub async fn restart(&mut self) {
        let _ = self.child.kill().await;
        *self = Self::start_with(self.args.clone()).await;
    }
}

impl std::ops::Deref for Server {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.api
    }
}
