//! Durability across `kill -9` (SPEC S3, W2, U6): once any client has seen
//! an update broadcast, it is committed; a Planner session and its plan
//! carry on after the kill.

use margin_protocol::link::{ClientMessage, HeldSession, ServerMessage};
use margin_protocol::sessions::{SessionSnapshot, SessionState};
use serde_json::json;

use crate::harness::{LinkClient, Server, SyncClient};
use crate::on_both_backends;
use crate::turns::invoked;

async fn linked_planner(server: &Server, token: &str) -> LinkClient {
    let (status, paired) = server
        .post(Some(token), "/machines", json!({"name": "laptop"}))
        .await;
    assert_eq!(status, 201);
    let mut link = LinkClient::connect(server.addr, paired["credential"].as_str().unwrap())
        .await
        .unwrap();
    assert!(matches!(
        link.hello_planning().await,
        ServerMessage::Welcome { .. }
    ));
    link
}

on_both_backends! {
    async fn broadcast_update_survives_sigkill(db) {
        let mut server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut writer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut reader = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        for i in 0..20 {
            writer.append_paragraph(&format!("line {i}")).await;
        }
        assert!(reader.until(|c| c.texts().len() == 20).await);
        let seen = reader.texts();
        server.kill().await;
        server.restart().await;
        let after = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert_eq!(after.texts(), seen);
        assert_eq!(after.state_vector(), reader.state_vector());
    }

    async fn compaction_keeps_content_and_shrinks_the_log(db) {
        let mut server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut writer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        for i in 0..5 {
            writer.append_paragraph(&format!("line {i}")).await;
        }
        let mut reader = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert!(reader.until(|c| c.texts().len() == 5).await);
        let expected = reader.texts();
        // Closing the last connection unloads the document, which compacts.
        writer.close().await;
        reader.close().await;
        let store = db.open().await;
        let mut log_len = store.log_len(&doc).await.unwrap();
        for _ in 0..200 {
            if log_len == 0 { break; }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            log_len = store.log_len(&doc).await.unwrap();
        }
        assert_eq!(log_len, 0);
        server.kill().await;
        server.restart().await;
        let after = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert_eq!(after.texts(), expected);
        assert_eq!(server.block_texts(&token, &doc).await.0, 5);
    }

    async fn a_planning_session_and_its_plan_carry_on_after_sigkill(db) {
        let mut server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut link = linked_planner(&server, &token).await;
        let (status, _) = server.post(Some(&token), &format!("/documents/{doc}/chat"), json!({"text": "@planner plan"})).await;
        assert_eq!(status, 201);
        let (session, turn, _, _) = invoked(&mut link).await;
        link.send_message(&ClientMessage::ToolCall { session: session.clone(), turn, call_id: "c1".into(), name: "update_plan".into(),
            arguments: json!({"expected_revision": 0, "steps": [{"id": "a", "description": "Draft", "status": "in_progress"}]}) }).await;
        // Acknowledged to the Planner: committed.
        assert!(matches!(link.next_work().await, Some(ServerMessage::ToolResult { error: None, .. })));
        server.kill().await;
        server.restart().await;
        let (status, body) = server.get(Some(&token), &format!("/sessions/{session}")).await;
        assert_eq!(status, 200, "{body}");
        let snapshot: SessionSnapshot = serde_json::from_value(body).unwrap();
        assert_eq!((snapshot.state, snapshot.plan.flatten().map(|p| p.revision)), (SessionState::Disconnected, Some(1)));
        let mut back = linked_planner(&server, &token).await;
        back.send_message(&ClientMessage::Resume { sessions: vec![HeldSession { session: session.clone(), questions: vec![], turn: None, calls: vec![] }] }).await;
        let Some(ServerMessage::Resumed { sessions, .. }) = back.next_work().await else { panic!("no resumed") };
        assert_eq!(sessions.len(), 1);
        let (status, _) = server.post(Some(&token), &format!("/documents/{doc}/chat"), json!({"text": "@planner go on"})).await;
        assert_eq!(status, 201);
        let Some(ServerMessage::Invoke { session: same, plan: Some(plan), .. }) = back.next_work().await else {
            panic!("the turn after the kill carries the plan")
        };
        assert_eq!((same, plan.revision), (session, 1));
    }
}
