//! Short-lived machine credentials renewed over the link (SPEC L8, A1): the
//! refusals at `/machine` and their codes, renewal on the link, the
//! connector SDK's credential file, the CLI, and machines paired before
//! credentials expired — on both backends where storage is involved.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use margin_protocol::chat::{ChatKind, ChatList};
use margin_protocol::link::{refused, ClientMessage, ServerMessage};
use margin_protocol::ErrorCode;
use margin_sdk::{ConnectError, Connector, Ended, Handler, ToolError, Turn};
use margin_server::serve::ServeOptions;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::harness::{InProcess, LinkClient, Server, SyncClient, TestDb};
use crate::on_both_backends;

/// How long a test waits for something that should happen promptly.
const PATIENCE: Duration = Duration::from_secs(20);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A server whose machine credentials last `ttl`, an account and a
/// machine paired to it.
struct Paired {
    server: InProcess,
    token: String,
    machine: String,
    credential: String,
    expires_at: i64,
}

impl Paired {
    async fn new(db: &TestDb, ttl: Duration) -> Paired {
        Self::with(db, |o| o.links.credential_ttl = ttl).await
    }

    async fn with(db: &TestDb, adjust: impl FnOnce(&mut ServeOptions)) -> Paired {
        let server = InProcess::start_with(db, adjust).await;
        let (_, token) = server.account("ada").await;
        let before = now_ms();
        let (status, paired) = server
            .post(Some(&token), "/machines", json!({"name": "laptop"}))
            .await;
        assert_eq!(status, 201, "{paired}");
        let expires_at = paired["expires_at"].as_i64().expect("an expiry");
        assert!(expires_at > before, "{paired}");
        Paired {
            machine: paired["machine"]["id"].as_str().unwrap().to_owned(),
            credential: paired["credential"].as_str().unwrap().to_owned(),
            expires_at,
            server,
            token,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    /// Opens a link with `credential` and expects `welcome`.
    async fn link(&self, credential: &str) -> LinkClient {
        let mut link = LinkClient::connect(self.server.addr, credential)
            .await
            .unwrap_or_else(|status| panic!("the link was refused with {status}"));
        assert!(matches!(link.hello().await, ServerMessage::Welcome { .. }));
        link
    }
}

/// Sleeps until `at` (ms since the epoch) has passed, plus a little.
async fn sleep_past(at: i64) {
    let left = at - now_ms() + 50;
    if left > 0 {
        tokio::time::sleep(Duration::from_millis(left as u64)).await;
    }
}

/// Reads `link` (answering heartbeats) until it holds `count` credentials.
async fn credentials(link: &mut LinkClient, count: usize) -> Vec<(String, i64)> {
    tokio::time::timeout(PATIENCE, async {
        while link.credentials.len() < count {
            let got = link.collect_for(Duration::from_millis(20)).await;
            assert!(got.is_empty(), "unexpected messages: {got:?}");
            assert!(link.closed.is_none(), "the link closed: {:?}", link.closed);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("fewer than {count} credentials arrived"));
    link.credentials.clone()
}

/// A Planner that does nothing but reply.
struct Quiet;

impl Handler for Quiet {
    async fn turn(&self, _turn: Turn) -> Result<String, ToolError> {
        Ok("Done.".into())
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The file's credential once it differs from `old`.
async fn file_changes(path: &Path, old: &str) -> String {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let now = std::fs::read_to_string(path).unwrap_or_default();
            if !now.trim().is_empty() && now.trim() != old {
                return now.trim().to_owned();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the credential file was never renewed")
}

/// Writes a credential file the way a person might: readable by all.
fn world_readable_file(dir: &Path, credential: &str) -> std::path::PathBuf {
    let path = dir.join("laptop.credential");
    std::fs::write(&path, format!("{credential}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path
}

on_both_backends! {
    async fn an_expired_credential_is_refused_with_credential_expired(db) {
        let p = Paired::new(&db, Duration::from_millis(300)).await;
        sleep_past(p.expires_at).await;
        let refusal = LinkClient::refused(p.server.addr, &p.credential).await;
        assert_eq!((refusal.status, refusal.code.as_str()), (401, refused::CREDENTIAL_EXPIRED), "{refusal:?}");
        assert!(refusal.message.contains("expired"), "{}", refusal.message);
        // An unknown credential is told apart from an expired one.
        let unknown = LinkClient::refused(p.server.addr, &format!("mgm_{}", "0".repeat(64))).await;
        assert_eq!((unknown.status, unknown.code.as_str()), (401, refused::UNAUTHENTICATED), "{unknown:?}");
        assert!(unknown.message.contains("unknown"), "{}", unknown.message);
    }

    async fn every_credential_of_a_revoked_machine_is_refused_with_machine_revoked(db) {
        let p = Paired::new(&db, Duration::from_secs(60)).await;
        let mut link = p.link(&p.credential).await;
        let renewed = credentials(&mut link, 1).await.remove(0).0;
        let (status, _) = p.server.delete(Some(&p.token), &format!("/machines/{}", p.machine)).await;
        assert_eq!(status, 204);
        for credential in [&p.credential, &renewed] {
            let refusal = LinkClient::refused(p.server.addr, credential).await;
            assert_eq!((refusal.status, refusal.code.as_str()), (401, refused::MACHINE_REVOKED), "{refusal:?}");
            assert!(refusal.message.contains("revoked"), "{}", refusal.message);
        }
    }

    async fn the_link_sends_a_fresh_credential_after_welcome_and_again_before_it_expires(db) {
        // Long enough that a loaded CI machine's scheduling delay (hundreds
        // of ms seen) cannot push the renewal past the margin below.
        let ttl = Duration::from_millis(3000);
        let p = Paired::new(&db, ttl).await;
        assert!(p.expires_at <= now_ms() + 3000, "pairing gives the configured lifetime");
        let mut link = LinkClient::connect(p.server.addr, &p.credential).await.unwrap();
        link.send_text(r#"{"type":"hello","protocol_version":1,"features":[]}"#).await;
        assert!(matches!(link.next_raw().await, Some(ServerMessage::Welcome { .. })));
        let before = now_ms();
        let Some(ServerMessage::Credential { credential: first, expires_at: first_expiry }) = link.next_raw().await else {
            panic!("no credential right after welcome");
        };
        assert_ne!(first, p.credential);
        assert!(first.starts_with("mgm_"), "{first}");
        assert!(first_expiry >= before - 100 + 3000 && first_expiry <= now_ms() + 3000, "{first_expiry} vs {before}");
        // The next one comes well before the first expires (due a third of
        // the way, at 1 s; checked with a second to spare).
        let second = credentials(&mut link, 1).await.remove(0);
        let received = now_ms();
        assert!(received < first_expiry - 1000, "renewed at {received}, the first expires at {first_expiry}");
        assert!(second.0 != first && second.0 != p.credential);
        assert!(second.1 > first_expiry, "{second:?} vs {first_expiry}");
        // Each is a credential of the same machine: older ones stay valid.
        for credential in [&first, &second.0] {
            let mut other = p.link(credential).await;
            other.send_text(r#"{"type":"detach"}"#).await;
        }
        let (_, list) = p.server.get(Some(&p.token), "/machines").await;
        assert_eq!(list["machines"].as_array().unwrap().len(), 1, "{list}");
    }

    async fn a_renewed_credential_opens_a_new_link_after_the_original_expired(db) {
        let p = Paired::new(&db, Duration::from_millis(600)).await;
        let mut link = p.link(&p.credential).await;
        sleep_past(p.expires_at).await;
        let refusal = LinkClient::refused(p.server.addr, &p.credential).await;
        assert_eq!(refusal.code, refused::CREDENTIAL_EXPIRED);
        assert!(link.stays_open_answering(Duration::from_millis(50)).await);
        let newest = link.credentials.last().cloned().expect("renewed credentials");
        assert!(newest.1 > now_ms(), "{newest:?}");
        let mut again = p.link(&newest.0).await;
        assert!(again.stays_open_answering(Duration::from_millis(50)).await);
    }

    async fn renewal_neither_closes_nor_disturbs_an_open_link(db) {
        let p = Paired::with(&db, |o| {
            o.links.credential_ttl = Duration::from_millis(300);
            o.links.heartbeat = Duration::from_millis(100);
        }).await;
        let doc = p.server.create_document(&p.token, "Plan").await;
        let mut person = SyncClient::connect(&p.server.sync_url(&doc, &p.token)).await;
        person.append_paragraph("Pick a region").await;
        let mut link = p.link(&p.credential).await;
        let (status, _) = p.server.post(Some(&p.token), &format!("/documents/{doc}/chat"), json!({"text": "@planner read it"})).await;
        assert_eq!(status, 201);
        let Some(ServerMessage::Invoke { session, turn, .. }) = link.next_work().await else { panic!("no invoke") };
        // Several renewals, and the original credential's whole lifetime, go by mid-turn.
        let past_expiry = Duration::from_millis((p.expires_at - now_ms()).max(0) as u64 + 700);
        assert!(link.stays_open_answering(past_expiry).await, "closed: {:?}", link.closed);
        assert_eq!(LinkClient::refused(p.server.addr, &p.credential).await.code, refused::CREDENTIAL_EXPIRED);
        assert!(link.credentials.len() >= 3, "{:?}", link.credentials);
        // The turn carries on: a tool call, then the reply reaches Chat.
        link.send_message(&ClientMessage::ToolCall {
            session: session.clone(), turn: turn.clone(), call_id: "c1".into(),
            name: "read_document".into(), arguments: json!({}),
        }).await;
        let Some(ServerMessage::ToolResult { output: Some(output), .. }) = link.next_work().await else { panic!("no tool result") };
        let output = serde_json::to_value(&output).unwrap();
        assert_eq!(output["outline"][0]["text"], "Pick a region");
        link.send_message(&ClientMessage::Reply { session, turn, text: "Read it.".into() }).await;
        let chat = tokio::time::timeout(PATIENCE, async {
            loop {
                let (_, body) = p.server.get(Some(&p.token), &format!("/documents/{doc}/chat")).await;
                let list: ChatList = serde_json::from_value(body).unwrap();
                if list.messages.iter().any(|m| m.kind == ChatKind::Planner) {
                    return list.messages.into_iter().map(|m| (m.kind, m.text)).collect::<Vec<_>>();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }).await.expect("the reply reached Chat");
        assert_eq!(chat, [
            (ChatKind::Member, "@planner read it".to_owned()),
            (ChatKind::Planner, "Read it.".to_owned()),
        ]);
        let (_, view) = p.server.get(Some(&p.token), &format!("/documents/{doc}/planner")).await;
        assert_eq!(view["connected"], true, "{view}");
        assert!(link.stays_open_answering(Duration::from_millis(100)).await);
    }

    async fn connector_keeps_its_credential_file_current_and_private_and_relinks_after_the_first_expired(db) {
        let p = Paired::new(&db, Duration::from_millis(900)).await;
        let dir = tempfile::tempdir().unwrap();
        let path = world_readable_file(dir.path(), &p.credential);
        let connector = Connector::with_credential_file(p.url(), &path);
        let linked = connector.connect().await.expect("the connector links with the file's credential");
        let detach = CancellationToken::new();
        let serving = tokio::spawn(linked.serve(Quiet, detach.clone().cancelled_owned()));

        let renewed = file_changes(&path, &p.credential).await;
        assert!(renewed.starts_with("mgm_"), "{renewed}");
        assert_eq!(mode(&path), 0o600, "the renewed file is private");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [path.file_name().unwrap()], "no temporary file is left behind");

        sleep_past(p.expires_at).await;
        assert_eq!(LinkClient::refused(p.server.addr, &p.credential).await.code, refused::CREDENTIAL_EXPIRED);
        detach.cancel();
        assert_eq!(serving.await.unwrap(), Ended::Detached);
        let current = std::fs::read_to_string(&path).unwrap();
        assert_ne!(current.trim(), p.credential);
        let again = connector.connect().await.expect("it relinks with the renewed credential from its file");
        assert_eq!(again.welcome().machine, "laptop");
        assert_eq!(mode(&path), 0o600);
    }

    async fn connector_without_a_file_keeps_the_newest_credential_for_its_next_connect(db) {
        let p = Paired::new(&db, Duration::from_millis(600)).await;
        let connector = Connector::new(p.url(), &p.credential);
        let linked = connector.connect().await.unwrap();
        let detach = CancellationToken::new();
        let serving = tokio::spawn(linked.serve(Quiet, detach.clone().cancelled_owned()));
        sleep_past(p.expires_at).await;
        assert_eq!(LinkClient::refused(p.server.addr, &p.credential).await.code, refused::CREDENTIAL_EXPIRED);
        detach.cancel();
        assert_eq!(serving.await.unwrap(), Ended::Detached);
        connector.connect().await.expect("it relinks with the newest credential it was sent");
    }

    async fn connector_says_why_the_server_refused_its_credential(db) {
        let p = Paired::new(&db, Duration::from_millis(300)).await;
        sleep_past(p.expires_at).await;
        match Connector::new(p.url(), &p.credential).connect().await {
            Err(ConnectError::Refused { status: 401, code, message }) => {
                assert_eq!(code, Some(ErrorCode::CredentialExpired.into()));
                assert!(message.contains("expired"), "{message}");
            }
            other => panic!("expected a refusal, got {:?}", other.err()),
        }
    }

    async fn a_machine_paired_before_credentials_expired_still_links_then_renews(db) {
        // The database as it was before migration 0006: one credential per
        // machine, kept in `machines.credential_hash`.
        let legacy = format!("mgm_{}", "ab".repeat(32));
        {
            sqlx::any::install_default_drivers();
            let pool = sqlx::AnyPool::connect(&db.url()).await.unwrap();
            let backend = if db.url().starts_with("sqlite:") { "sqlite" } else { "postgres" };
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations").join(backend);
            let mut migrator = sqlx::migrate::Migrator::new(dir).await.unwrap();
            migrator.migrations = migrator.migrations.iter().filter(|m| m.version <= 5).cloned().collect::<Vec<_>>().into();
            migrator.run(&pool).await.unwrap();
            sqlx::query("INSERT INTO accounts (id, name, created_at) VALUES ('a1', 'ada', 0)").execute(&pool).await.unwrap();
            let hash = margin_server::auth::hash_token(&legacy);
            sqlx::query(&format!("INSERT INTO machines (id, account_id, name, credential_hash, created_at) VALUES ('m1', 'a1', 'old laptop', '{hash}', 0)"))
                .execute(&pool).await.unwrap();
            pool.close().await;
        }
        let server = InProcess::start_with(&db, |o| o.links.credential_ttl = Duration::from_millis(500)).await;
        let mut link = LinkClient::connect(server.addr, &legacy).await.expect("the old credential still links");
        assert!(matches!(link.hello().await, ServerMessage::Welcome { .. }));
        let welcomed = now_ms();
        let renewed = credentials(&mut link, 1).await.remove(0).0;
        // Its first link started its clock: it lasts one lifetime from then.
        sleep_past(welcomed + 500).await;
        assert_eq!(LinkClient::refused(server.addr, &legacy).await.code, refused::CREDENTIAL_EXPIRED);
        assert!(link.stays_open_answering(Duration::from_millis(50)).await);
        let newest = link.credentials.last().cloned().unwrap();
        assert_ne!(newest.0, renewed);
        let mut again = LinkClient::connect(server.addr, &newest.0).await.unwrap();
        assert!(matches!(again.hello().await, ServerMessage::Welcome { machine, .. } if machine == "old laptop"));
    }
}

#[tokio::test]
async fn a_missing_or_empty_credential_file_is_a_clear_connect_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.credential");
    match Connector::with_credential_file("http://127.0.0.1:9", &missing)
        .connect()
        .await
    {
        Err(error @ ConnectError::CredentialFile { .. }) => {
            assert!(error.to_string().contains("nowhere.credential"), "{error}");
        }
        other => panic!("expected a credential file error, got {:?}", other.err()),
    }
    let empty = dir.path().join("empty.credential");
    std::fs::write(&empty, "  \n").unwrap();
    match Connector::with_credential_file("http://127.0.0.1:9", &empty)
        .connect()
        .await
    {
        Err(error @ ConnectError::EmptyCredentialFile { .. }) => {
            assert!(error.to_string().contains("empty.credential"), "{error}");
            assert!(error.to_string().contains("empty"), "{error}");
        }
        other => panic!("expected an empty file error, got {:?}", other.err()),
    }
}

#[tokio::test]
async fn machine_pair_on_the_cli_says_the_credential_is_short_lived_and_can_write_a_private_file() {
    let db = TestDb::sqlite();
    Server::account(&db, "ada").await;
    let pair = |extra: Vec<String>| {
        let db_args = db.cli_args();
        async move {
            let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_margin"))
                .args(["machine", "pair", "ada", "build-box"])
                .args(db_args)
                .args(extra)
                .env("RUST_LOG", "warn")
                .output()
                .await
                .unwrap();
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8(output.stdout).unwrap()
        }
    };
    let printed = pair(Vec::new()).await;
    assert!(
        printed.contains("15 minutes") && printed.contains("renewed"),
        "{printed}"
    );
    assert!(
        printed.lines().last().unwrap().starts_with("mgm_"),
        "{printed}"
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("box.credential");
    let printed = pair(vec!["--credential-file".into(), path.display().to_string()]).await;
    assert!(
        !printed.contains("mgm_"),
        "the secret is not printed: {printed}"
    );
    assert!(printed.contains("box.credential"), "{printed}");
    assert_eq!(mode(&path), 0o600);
    let credential = std::fs::read_to_string(&path).unwrap();
    let server = Server::start(&db).await;
    let mut link = LinkClient::connect(server.addr, credential.trim())
        .await
        .unwrap();
    assert!(matches!(link.hello().await, ServerMessage::Welcome { .. }));
}

#[tokio::test]
async fn planner_demo_keeps_its_credential_file_renewed() {
    let db = TestDb::sqlite();
    let p = Paired::new(&db, Duration::from_millis(900)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = world_readable_file(dir.path(), &p.credential);
    let mut demo = tokio::process::Command::new(env!("CARGO_BIN_EXE_margin"))
        .args(["planner", "demo", "--server", &p.url(), "--credential"])
        .arg(&path)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let first = file_changes(&path, &p.credential).await;
    assert_eq!(mode(&path), 0o600);
    // It keeps renewing while linked, past the original's lifetime.
    sleep_past(p.expires_at).await;
    let later = file_changes(&path, &first).await;
    let mut link = p.link(&later).await;
    assert!(link.stays_open_answering(Duration::from_millis(50)).await);
    demo.kill().await.unwrap();
}
