//! A real `margin serve` process on a free loopback port.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use margin_protocol::DocumentInfo;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::TestDb;

const BIN: &str = env!("CARGO_BIN_EXE_margin");

/// A running server; killed when dropped.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    args: Vec<String>,
    http: reqwest::Client,
}

impl Server {
    pub async fn start(db: &TestDb) -> Server {
        Self::start_with(db.cli_args()).await
    }

    async fn start_with(args: Vec<String>) -> Server {
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(&args)
            .args(["--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
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
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Server {
            child,
            addr,
            args,
            http: reqwest::Client::new(),
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

    /// SIGKILL: no shutdown path runs.
    pub async fn kill(&mut self) {
        self.child.kill().await.unwrap();
    }

    /// SIGTERM, then waits for a clean exit.
    pub async fn terminate(&mut self) {
        let pid = self.child.id().unwrap().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .unwrap();
        assert!(status.success());
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

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn sync_url(&self, document: &str, token: &str) -> String {
        format!("ws://{}/documents/{document}/sync?token={token}", self.addr)
    }

    pub async fn get(&self, token: Option<&str>, path: &str) -> (u16, serde_json::Value) {
        let mut request = self.http.get(self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        respond(request).await
    }

    pub async fn post(
        &self,
        token: Option<&str>,
        path: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let mut request = self.http.post(self.url(path)).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        respond(request).await
    }

    /// Creates a document and returns its id.
    pub async fn create_document(&self, token: &str, title: &str) -> String {
        let (status, body) = self
            .post(Some(token), "/documents", json!({ "title": title }))
            .await;
        assert_eq!(status, 201, "{body}");
        serde_json::from_value::<DocumentInfo>(body).unwrap().id
    }

    /// The texts of the document's blocks, from the outline endpoint.
    pub async fn block_texts(&self, token: &str, document: &str) -> (i64, Vec<String>) {
        let (status, body) = self
            .get(Some(token), &format!("/documents/{document}/outline"))
            .await;
        assert_eq!(status, 200, "{body}");
        let outline: margin_protocol::OutlineView = serde_json::from_value(body).unwrap();
        (
            outline.revision,
            outline.blocks.into_iter().map(|b| b.text).collect(),
        )
    }
}

async fn respond(request: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, body)
}
