//! Short-lived machine credentials renewed over the link (SPEC L8, A1): the
//! refusals at `/machine` and their codes, renewal on the link, and
//! machines paired before credentials expired — on both backends.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use margin_protocol::chat::{ChatKind, ChatList};
use margin_protocol::link::{refused, ClientMessage, ServerMessage};
use margin_server::serve::ServeOptions;
use serde_json::json;

use crate::harness::{InProcess, LinkClient, SyncClient, TestDb};
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
        let ttl = Duration::from_millis(900);
        let p = Paired::new(&db, ttl).await;
        assert!(p.expires_at <= now_ms() + 900, "pairing gives the configured lifetime");
        let mut link = LinkClient::connect(p.server.addr, &p.credential).await.unwrap();
        link.send_text(r#"{"type":"hello","protocol_version":1,"features":[]}"#).await;
        assert!(matches!(link.next_raw().await, Some(ServerMessage::Welcome { .. })));
        let before = now_ms();
        let Some(ServerMessage::Credential { credential: first, expires_at: first_expiry }) = link.next_raw().await else {
            panic!("no credential right after welcome");
        };
        assert_ne!(first, p.credential);
        assert!(first.starts_with("mgm_"), "{first}");
        assert!(first_expiry >= before - 100 + 900 && first_expiry <= now_ms() + 900, "{first_expiry} vs {before}");
        // The next one comes well before the first expires (a third of the way).
        let second = credentials(&mut link, 1).await.remove(0);
        let received = now_ms();
        assert!(received < first_expiry - 300, "renewed at {received}, the first expires at {first_expiry}");
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
