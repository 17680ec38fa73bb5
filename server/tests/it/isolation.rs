//! One session's slow call holds up no other session on its link (SPEC A2), shown
//! with no timing: a tool call of session A is held at a barrier — a row
//! lock the test takes on A's document in PostgreSQL, which A's commit
//! waits on — while session B, on the same machine link, reads and edits
//! its own document to the end. SQLite has one write lock for the whole
//! database, so a barrier for one document there holds every writer; the
//! test runs on PostgreSQL only (the `sqlite-only` nextest profile skips
//! it).

use margin_protocol::link::{ClientMessage, ServerMessage};
use serde_json::json;
use sqlx::Connection;

use crate::harness::TestDb;
use crate::turns::{call, fresh_call_id, invoked, Scene};

mod a_call_held_in_storage_holds_up_no_other_session {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let db = TestDb::postgres_or_fail().await;
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        let other = s.server.create_document(&s.token, "Other").await;
        s.say("@planner edit this one").await;
        let (a, a_turn, _, _) = invoked(&mut planner).await;
        s.server
            .say(&s.token, &other, "@planner and that one")
            .await;
        let (b, b_turn, _, _) = invoked(&mut planner).await;
        let ServerMessage::ToolResult {
            output: Some(read), ..
        } = call(&mut planner, &a, &a_turn, "read_document", json!({})).await
        else {
            panic!("A could not read")
        };
        let a_revision = serde_json::to_value(&read).unwrap()["revision"].clone();

        // The barrier: A's document row, locked by a transaction the test
        // keeps open.
        let mut barrier = sqlx::PgConnection::connect(&db.url()).await.unwrap();
        let holder: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut barrier)
            .await
            .unwrap();
        sqlx::query("BEGIN").execute(&mut barrier).await.unwrap();
        sqlx::query("SELECT id FROM documents WHERE id = $1 FOR UPDATE")
            .bind(&s.doc)
            .execute(&mut barrier)
            .await
            .unwrap();
        let held = fresh_call_id();
        planner
            .send_message(&ClientMessage::ToolCall {
                session: a.clone(),
                turn: a_turn.clone(),
                call_id: held.clone(),
                name: "edit_plan".into(),
                arguments: json!({"revision": a_revision, "edits": [{"op": "insert", "kind": "paragraph", "text": "A's edit"}]}),
            })
            .await;
        // A's commit waits on the barrier: a backend that the barrier's
        // own blocks (other tests' lock waits do not count).
        let mut watcher = sqlx::PgConnection::connect(&db.url()).await.unwrap();
        let mut waiting = 0i64;
        for _ in 0..1000 {
            waiting = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
            )
            .bind(holder)
            .fetch_one(&mut watcher)
            .await
            .unwrap();
            if waiting > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(waiting > 0, "A's call never reached the barrier");

        // B reads and edits its own document to the end meanwhile.
        let ServerMessage::ToolResult {
            call_id: _,
            output: Some(read),
            error: None,
            ..
        } = call(&mut planner, &b, &b_turn, "read_document", json!({})).await
        else {
            panic!("B's read was held up")
        };
        let b_revision = serde_json::to_value(&read).unwrap()["revision"].clone();
        let edited = call(&mut planner, &b, &b_turn, "edit_plan",
            json!({"revision": b_revision, "edits": [{"op": "insert", "kind": "paragraph", "text": "B's edit"}]})).await;
        assert!(
            matches!(
                &edited,
                ServerMessage::ToolResult {
                    output: Some(_),
                    error: None,
                    ..
                }
            ),
            "{edited:?}"
        );
        assert_eq!(
            s.server.block_texts(&s.token, &other).await.1,
            ["B's edit".to_owned()]
        );

        // Only then does A's call go through: it was held all along.
        sqlx::query("ROLLBACK").execute(&mut barrier).await.unwrap();
        match planner.next_work().await {
            Some(ServerMessage::ToolResult {
                call_id,
                output: Some(_),
                error: None,
                ..
            }) => assert_eq!(call_id, held),
            other => panic!("A's call after the barrier: {other:?}"),
        }
        assert_eq!(
            s.server.block_texts(&s.token, &s.doc).await.1,
            ["A's edit".to_owned(), "Pick a region".to_owned()]
        );
    }
}
