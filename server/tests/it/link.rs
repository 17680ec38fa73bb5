//! The machine link at `/machine` (SPEC L1, A1, A2, P3), on both backends.

use std::time::Duration;

use margin_protocol::link::{close, Capabilities, ServerMessage};
use serde_json::json;

use crate::harness::{InProcess, LinkClient, Server};
use crate::on_both_backends;

/// A server with fast heartbeats, an account and a paired machine.
async fn paired(db: &crate::harness::TestDb) -> (InProcess, String, String, String) {
    let server = InProcess::start_with(db, |o| {
        o.links.heartbeat = Duration::from_millis(100);
        o.links.missed_heartbeats = 3;
        o.links.hello_timeout = Duration::from_millis(500);
    })
    .await;
    let (_, token) = server.account("ada").await;
    let (status, paired) = server
        .post(Some(&token), "/machines", json!({"name": "ada's laptop"}))
        .await;
    assert_eq!(status, 201, "{paired}");
    let credential = paired["credential"].as_str().unwrap().to_owned();
    let id = paired["machine"]["id"].as_str().unwrap().to_owned();
    (server, token, credential, id)
}

fn refusal_code(message: Option<ServerMessage>) -> String {
    match message {
        Some(ServerMessage::Refusal { code, .. }) => code.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

on_both_backends! {
    async fn a_paired_machine_links_with_hello_and_gets_welcome(db) {
        let (server, token, credential, id) = paired(&db).await;
        let mut link = LinkClient::connect(server.addr, &credential).await.unwrap();
        assert_eq!(
            link.hello().await,
            ServerMessage::Welcome {
                protocol_version: 1,
                machine: "ada's laptop".into(),
                // Resumable sessions are granted (SPEC L1); durable plans
                // are offered to any Planner that declares planning (U1).
                capabilities: Capabilities { durable_plans: true, features: vec!["resumable-sessions".into()] },
            }
        );
        // Unknown features are ignored and not granted; none asked, none granted.
        let mut plain = LinkClient::connect(server.addr, &credential).await.unwrap();
        plain.send_text(r#"{"type":"hello","protocol_version":1,"features":["telepathy"]}"#).await;
        assert!(matches!(plain.next().await,
            Some(ServerMessage::Welcome { capabilities: Capabilities { ref features, .. }, .. }) if features.is_empty()));
        let (status, list) = server.get(Some(&token), "/machines").await;
        assert_eq!((status, list["machines"][0]["id"].as_str(), list["machines"][0]["revoked"].as_bool()), (200, Some(id.as_str()), Some(false)));
    }

    async fn bad_credentials_are_refused_before_the_upgrade(db) {
        let (server, token, _, _) = paired(&db).await;
        for credential in ["mgm_unknown", "", token.as_str()] {
            assert_eq!(LinkClient::connect(server.addr, credential).await.err(), Some(401), "{credential:?}");
        }
    }

    async fn a_version_mismatch_is_refused_and_closed(db) {
        let (server, _, credential, _) = paired(&db).await;
        let mut link = LinkClient::connect(server.addr, &credential).await.unwrap();
        link.send_text(r#"{"type":"hello","protocol_version":2}"#).await;
        let Some(ServerMessage::Refusal { code, message, .. }) = link.next().await else { panic!("expected a refusal") };
        assert_eq!(code, "unsupported_version");
        assert!(message.contains("version 1") && message.contains("sent 2"), "{message}");
        assert_eq!(link.wait_closed().await.0, close::BAD_HELLO);
    }

    async fn the_first_message_must_be_a_hello_in_time(db) {
        let (server, _, credential, _) = paired(&db).await;
        let mut early = LinkClient::connect(server.addr, &credential).await.unwrap();
        early.send_text(r#"{"type":"heartbeat-ack","seq":1}"#).await;
        assert_eq!(refusal_code(early.next().await), "hello_expected");
        assert_eq!(early.wait_closed().await.0, close::BAD_HELLO);
        let mut silent = LinkClient::connect(server.addr, &credential).await.unwrap();
        let (code, reason) = silent.wait_closed().await;
        assert_eq!((code, reason.as_str()), (close::BAD_HELLO, "no hello in time"));
        let mut crowded = LinkClient::connect(server.addr, &credential).await.unwrap();
        let features: Vec<String> = (0..33).map(|i| format!("f{i}")).collect();
        crowded.send_text(&json!({"type": "hello", "protocol_version": 1, "features": features}).to_string()).await;
        assert_eq!(refusal_code(crowded.next().await), "invalid_hello");
    }

    async fn unknown_and_malformed_messages_are_refused_and_the_link_carries_on(db) {
        let (server, _, credential, _) = paired(&db).await;
        let mut link = LinkClient::connect(server.addr, &credential).await.unwrap();
        link.hello().await;
        link.send_text(r#"{"type":"shout","text":"hi"}"#).await;
        let Some(ServerMessage::Refusal { code, message, .. }) = link.next().await else { panic!("expected a refusal") };
        assert_eq!((code.as_str(), message.contains("\"shout\"")), ("unknown_message", true), "{message}");
        for bad in ["not json", r#"{"type":7}"#, r#"{"type":"detach","now":true}"#, r#"{"type":"hello","protocol_version":1}"#] {
            link.send_text(bad).await;
            let code = refusal_code(link.next().await);
            assert!(code == "malformed_message" || code == "unexpected_message", "{bad}: {code}");
        }
        link.send_binary(vec![1, 2, 3]).await;
        assert_eq!(refusal_code(link.next().await), "malformed_message");
        // Still open: heartbeats flow and are answered.
        assert!(link.stays_open_answering(Duration::from_millis(600)).await);
        link.send_text(r#"{"type":"detach"}"#).await;
        assert_eq!(link.wait_closed().await, (close::DETACHED, "detached".to_owned()));
    }

    async fn a_silent_machine_is_closed_as_unresponsive_and_an_answering_one_is_not(db) {
        let (server, _, credential, _) = paired(&db).await;
        let mut answering = LinkClient::connect(server.addr, &credential).await.unwrap();
        answering.hello().await;
        let mut silent = LinkClient::connect(server.addr, &credential).await.unwrap();
        silent.hello().await;
        assert!(answering.stays_open_answering(Duration::from_millis(800)).await);
        let mut heartbeats = 0;
        while let Some(message) = silent.next().await {
            assert!(matches!(message, ServerMessage::Heartbeat { .. }), "{message:?}");
            heartbeats += 1;
        }
        assert_eq!(heartbeats, 3);
        assert_eq!(silent.closed.clone().unwrap().0, close::UNRESPONSIVE);
    }

    async fn revoking_a_machine_closes_its_link_and_refuses_it_after(db) {
        let (server, token, credential, id) = paired(&db).await;
        let mut link = LinkClient::connect(server.addr, &credential).await.unwrap();
        link.hello().await;
        let (_, other) = server.account("bo").await;
        let (status, _) = server.delete(Some(&other), &format!("/machines/{id}")).await;
        assert_eq!(status, 404);
        let (status, _) = server.delete(Some(&token), &format!("/machines/{id}")).await;
        assert_eq!(status, 204);
        let (code, _) = link.wait_closed().await;
        assert_eq!(code, close::REVOKED);
        assert_eq!(LinkClient::connect(server.addr, &credential).await.err(), Some(401));
        let (_, list) = server.get(Some(&token), "/machines").await;
        assert_eq!(list["machines"][0]["revoked"], true);
    }

    async fn an_oversized_frame_closes_the_link(db) {
        let (server, _, credential, _) = paired(&db).await;
        let mut link = LinkClient::connect(server.addr, &credential).await.unwrap();
        link.hello().await;
        link.send_text(&"x".repeat(margin_protocol::link::MAX_FRAME_BYTES + 1)).await;
        assert_eq!(link.wait_closed().await.0, close::TOO_BIG);
    }
}

#[tokio::test]
async fn machine_pair_on_the_cli_prints_a_working_credential() {
    let db = crate::harness::TestDb::sqlite();
    Server::account(&db, "ada").await;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_margin"))
        .args(["machine", "pair", "ada", "build-box"])
        .args(db.cli_args())
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let credential = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .to_owned();
    let server = Server::start(&db).await;
    let mut link = LinkClient::connect(server.addr, &credential).await.unwrap();
    assert!(matches!(link.hello().await, ServerMessage::Welcome { .. }));
}
