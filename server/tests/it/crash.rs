//! Durability across `kill -9` (SPEC S3, W1, W2, W2a, U6): once any client
//! has seen an update broadcast, it is committed; a Planner session and its
//! plan carry on after the kill; a question the Planner was told it asked
//! is still asked; a call in flight gets its result or `interrupted`; a
//! turn in flight, the messages waiting for the next and runs' true ages
//! survive.

use std::time::Duration;

use margin_protocol::link::{ClientMessage, HeldSession, ServerMessage};
use margin_protocol::sessions::{SessionSnapshot, SessionState};
use serde_json::json;

use crate::harness::{LinkClient, Server, SyncClient};
use crate::on_both_backends;
use crate::turns::{call, fresh_call_id, invoked, reply};

/// A server with account `ada`, a document holding one paragraph, and the
/// account's token.
pub(crate) async fn scene(db: &crate::harness::TestDb) -> (Server, String, String) {
    let server = Server::start(db).await;
    let token = Server::account(db, "ada").await;
    let doc = server.create_document(&token, "Plan").await;
    let mut person = SyncClient::connect(&server.sync_url(&doc, &token)).await;
    person.append_paragraph("Ship on March 3").await;
    person.close().await;
    (server, token, doc)
}

/// `resume` naming `held`, and the sessions `resumed` carries on.
async fn resume(
    link: &mut LinkClient,
    held: HeldSession,
) -> Vec<margin_protocol::link::ResumedSession> {
    link.send_message(&ClientMessage::Resume {
        sessions: vec![held],
    })
    .await;
    match link.next_work().await {
        Some(ServerMessage::Resumed { sessions, .. }) => sessions,
        other => panic!("expected resumed, got {other:?}"),
    }
}

pub(crate) async fn snapshot(server: &Server, token: &str, session: &str) -> SessionSnapshot {
    let (status, body) = server
        .get(Some(token), &format!("/sessions/{session}"))
        .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).unwrap()
}

pub(crate) async fn linked_planner(server: &Server, token: &str) -> LinkClient {
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

on_both_backends! {
    async fn an_acknowledged_question_survives_sigkill_and_its_answer_reaches_the_machine(db) {
        let (mut server, token, doc) = scene(&db).await;
        let mut link = linked_planner(&server, &token).await;
        server.say(&token, &doc, "@planner ask about the date").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        let ServerMessage::ToolResult { output: Some(read), .. } = call(&mut link, &session, &turn, "read_document", json!({})).await else { panic!("no read") };
        let read = serde_json::to_value(&read).unwrap();
        let question = json!({"revision": read["revision"], "card": {"key": "launch-date", "question": "Ship on March 3?",
            "response": "yes_no", "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]}});
        let ServerMessage::ToolResult { output: Some(asked), error: None, .. } = call(&mut link, &session, &turn, "ask", question).await else { panic!("no ask") };
        let card = serde_json::to_value(&asked).unwrap()["captures"][0]["card_id"].as_str().unwrap().to_owned();
        // The Planner was told its question is asked: the kill loses nothing.
        server.kill().await;
        server.restart().await;
        assert_eq!(snapshot(&server, &token, &session).await.host_requests, std::slice::from_ref(&card));
        let mut back = linked_planner(&server, &token).await;
        let carried = resume(&mut back, HeldSession { session: session.clone(), questions: vec![card.clone()], turn: Some(turn), calls: vec![] }).await;
        assert_eq!(carried.len(), 1);
        assert!(carried[0].withdrawn.is_empty(), "the question still waits: {carried:?}");
        let (status, _) = server.post(Some(&token), &format!("/documents/{doc}/decisions/{card}/answer"), json!({"yes": true})).await;
        assert_eq!(status, 200);
        match back.next_work().await {
            Some(ServerMessage::InputResult { request, .. }) => assert_eq!(request, card),
            other => panic!("expected the answer, got {other:?}"),
        }
    }

    async fn a_call_in_flight_at_sigkill_gets_its_result_or_interrupted_after_resume_and_never_runs_twice(db) {
        // Three kills, each with a known moment: before the server read the
        // call (it is stopped, SIGSTOP), after its result was sent (the
        // machine lost it with the link), and a few milliseconds in, which
        // may fall anywhere. Whatever the moment, the call gets one answer
        // after `resume` that says truly whether the edit landed (W1).
        let (mut server, token, doc) = scene(&db).await;
        let mut link = linked_planner(&server, &token).await;
        for (round, moment) in [Moment::BeforeRead, Moment::AfterResult, Moment::Within(3)].into_iter().enumerate() {
            server.say(&token, &doc, "@planner edit").await;
            let (session, turn, _, _) = invoked(&mut link).await;
            let ServerMessage::ToolResult { output: Some(read), .. } = call(&mut link, &session, &turn, "read_document", json!({})).await else { panic!("no read") };
            let read = serde_json::to_value(&read).unwrap();
            let text = format!("Round {round}");
            let edits: Vec<_> = (0..16).map(|_| json!({"op": "insert", "kind": "paragraph", "text": text})).collect();
            let id = fresh_call_id();
            if moment == Moment::BeforeRead {
                signal(&server, "-STOP");
            }
            link.send_message(&ClientMessage::ToolCall { session: session.clone(), turn: turn.clone(), call_id: id.clone(),
                name: "edit_plan".into(), arguments: json!({"revision": read["revision"], "edits": edits}) }).await;
            match moment {
                Moment::BeforeRead => {}
                Moment::AfterResult => {
                    let sent = link.next_work().await;
                    assert!(matches!(&sent, Some(ServerMessage::ToolResult { call_id, .. }) if *call_id == id), "{sent:?}");
                }
                Moment::Within(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            }
            server.kill().await;
            server.restart().await;
            link = linked_planner(&server, &token).await;
            resume(&mut link, HeldSession { session: session.clone(), questions: vec![], turn: Some(turn.clone()), calls: vec![id.clone()] }).await;
            let answer = link.next_work().await;
            let landed = server.block_texts(&token, &doc).await.1.iter().filter(|t| **t == text).count();
            let outcome = match answer {
                Some(ServerMessage::ToolResult { call_id, output: Some(_), error: None, .. }) if call_id == id => {
                    assert_eq!(landed, 16, "a stored result means the edit landed whole");
                    "stored"
                }
                Some(ServerMessage::ToolResult { call_id, error: Some(error), .. }) if call_id == id && error.code == "interrupted" => {
                    assert!(landed == 0 || landed == 16, "all or nothing: {landed}");
                    "interrupted"
                }
                Some(ServerMessage::Refusal { code, call_id: Some(call_id), .. }) if call_id == id && code == "unknown_call" => {
                    assert_eq!(landed, 0, "a call the server never recorded never ran");
                    "never recorded"
                }
                other => panic!("round {round}: the call in flight got {other:?}"),
            };
            match moment {
                Moment::BeforeRead => assert_eq!(outcome, "never recorded", "killed before the call was read"),
                Moment::AfterResult => assert_eq!(outcome, "stored", "killed after its result was sent"),
                Moment::Within(_) => {}
            }
            if outcome != "never recorded" {
                // Sent again under the same id, it is answered as before and
                // never run again.
                link.send_message(&ClientMessage::ToolCall { session: session.clone(), turn: turn.clone(), call_id: id.clone(),
                    name: "edit_plan".into(), arguments: json!({"revision": read["revision"], "edits": []}) }).await;
                let again = link.next_work().await;
                assert!(matches!(&again, Some(ServerMessage::ToolResult { call_id, .. }) if *call_id == id), "{again:?}");
                let after = server.block_texts(&token, &doc).await.1.iter().filter(|t| **t == text).count();
                assert_eq!(after, landed, "round {round}: nothing ran twice");
            }
            reply(&mut link, &session, &turn, "Edited.").await;
        }
    }

    async fn a_turn_in_flight_its_queued_messages_and_run_ages_survive_sigkill(db) {
        let (mut server, token, doc) = scene(&db).await;
        let mut link = linked_planner(&server, &token).await;
        server.say(&token, &doc, "@planner first").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        link.send_message(&ClientMessage::Run { session: session.clone(), run: "r1".into(), name: "Review".into(),
            status: margin_protocol::link::RunStatus::Running, attempt: None }).await;
        server.say(&token, &doc, "@planner then this").await;
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        server.kill().await;
        server.restart().await;
        let (_, view) = server.get(Some(&token), &format!("/documents/{doc}/planner")).await;
        assert_eq!(view["replying"], json!(true), "the turn in flight is kept: {view}");
        assert!(view["runs"][0]["age_ms"].as_u64().unwrap() >= 1_200, "the run keeps its true age: {view}");
        let mut back = linked_planner(&server, &token).await;
        resume(&mut back, HeldSession { session: session.clone(), questions: vec![], turn: Some(turn.clone()), calls: vec![] }).await;
        reply(&mut back, &session, &turn, "First done.").await;
        match back.next_work().await {
            Some(ServerMessage::Invoke { messages, .. }) => {
                let texts: Vec<_> = messages.iter().map(|m| m.text.as_str()).collect();
                assert_eq!(texts, ["@planner then this"], "the queued message survived");
            }
            other => panic!("expected the next turn, got {other:?}"),
        }
    }
}

/// When a crash test kills the server, against a call it sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Moment {
    /// The server is stopped before the call reaches it.
    BeforeRead,
    /// The call's result was sent, and the machine lost it with the link.
    AfterResult,
    /// This many milliseconds after the call was sent.
    Within(u64),
}

/// Sends `signal` (`-STOP`, `-CONT`) to the server's process.
fn signal(server: &Server, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
