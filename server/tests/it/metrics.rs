//! `/metrics` as an operator's scraper reads it (SPEC O1): after a scripted
//! session — a person typing, a Planner linking, reading the document,
//! opening a decision and replying, a feed open — the gauges say what is
//! live and the counters have moved, on both backends.

use std::time::Duration;

use margin_protocol::link::{ClientMessage, ServerMessage};
use margin_protocol::tools::ToolOutput;
use serde_json::json;

use crate::harness::Sse;
use crate::on_both_backends;
use crate::turns::{call, invoked, Scene};

/// The exposition's value for `series` (name and labels, as printed).
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

async fn scrape(s: &Scene) -> String {
    let response = reqwest::get(format!("http://{}/metrics", s.server.addr))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let kind = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    response.text().await.unwrap()
}

/// Scrapes until `ok` holds of the exposition (gauges follow the work a
/// moment after it is acknowledged).
async fn scrape_until(s: &Scene, ok: impl Fn(&str) -> bool) -> String {
    for _ in 0..200 {
        let text = scrape(s).await;
        if ok(&text) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the metrics never got there:\n{}", scrape(s).await);
}

on_both_backends! {
    async fn metrics_follow_a_scripted_session(db) {
        // Scene::new types one paragraph through a live sync connection.
        let s = Scene::new(&db).await;
        let before = scrape_until(&s, |t| value(t, "margin_updates_committed_total") >= 1.0).await;
        assert!(value(&before, "margin_commit_seconds_count{of=\"document\"}") >= 1.0);
        assert_eq!(value(&before, "margin_machine_links"), 0.0);

        let mut link = s.planner().await;
        s.say("@planner look").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        let working = scrape_until(&s, |t| value(t, "margin_planner_sessions{state=\"working\"}") == 1.0).await;
        assert_eq!(value(&working, "margin_machine_links"), 1.0);
        assert!(value(&working, "margin_commit_seconds_count{of=\"session\"}") >= 1.0);

        let transactions = value(&working, "margin_write_transactions_total");
        assert!(transactions >= 1.0, "the session's start was written");
        let read = call(&mut link, &session, &turn, "read_document", json!({})).await;
        let ServerMessage::ToolResult { output: Some(ToolOutput::ReadDocument(read)), .. } = read else { panic!("{read:?}") };
        let digest = read.outline[0].digest.clone();
        let opened = call(&mut link, &session, &turn, "open_decisions", json!({
            "revision": read.revision,
            "cards": [{"key": "region", "question": "Which region?", "response": "free_text",
                       "passages": [{"index": 0, "digest": digest}]}],
        })).await;
        assert!(matches!(opened, ServerMessage::ToolResult { error: None, .. }), "{opened:?}");
        // At a stale revision `open_decision` is refused (SPEC D9).
        let refused = call(&mut link, &session, &turn, "open_decision", json!({
            "revision": 0,
            "card": {"key": "late", "question": "Late?", "response": "yes_no",
                     "passages": [{"index": 0, "digest": read.outline[0].digest}]},
        })).await;
        assert!(matches!(refused, ServerMessage::ToolResult { error: Some(_), .. }), "{refused:?}");

        let mut feed = Sse::open(s.server.addr, &s.token, &format!("/documents/{}/events", s.doc), None).await.unwrap();
        feed.next().await.unwrap();
        link.send_message(&ClientMessage::Reply { session, turn, text: "Asked.".into() }).await;
        let after = scrape_until(&s, |t| value(t, "margin_planner_sessions{state=\"available\"}") == 1.0).await;
        assert_eq!(value(&after, "margin_tool_call_seconds_count{tool=\"read_document\",outcome=\"ok\"}"), 1.0);
        assert_eq!(value(&after, "margin_tool_call_seconds_count{tool=\"open_decisions\",outcome=\"ok\"}"), 1.0);
        assert_eq!(value(&after, "margin_tool_call_seconds_count{tool=\"open_decision\",outcome=\"refused\"}"), 1.0);
        assert_eq!(value(&after, "margin_open_decisions"), 1.0);
        assert_eq!(value(&after, "margin_event_streams{feed=\"document\"}"), 1.0);
        assert_eq!(value(&after, "margin_planner_sessions{state=\"working\"}"), 0.0);
        assert!(value(&after, "margin_updates_committed_total") > value(&before, "margin_updates_committed_total"), "the card's mirror is committed too");
        // At least the call's write-ahead record and its writes (SPEC W1).
        assert!(value(&after, "margin_write_transactions_total") >= transactions + 2.0, "{after}");
        drop(feed);
        scrape_until(&s, |t| value(t, "margin_event_streams{feed=\"document\"}") == 0.0).await;
    }
}

on_both_backends! {
    // A Planner's tools on a document nobody has open: the document stays
    // loaded between calls instead of being rebuilt from storage for each.
    async fn a_document_nobody_has_open_stays_loaded_between_tool_calls(db) {
        let s = Scene::new(&db).await;
        let read = s.server.post(Some(&s.token), &format!("/documents/{}/tools/read_document", s.doc), json!({})).await.1;
        let edit = json!({"revision": read["revision"], "edits": [{"op": "insert", "kind": "paragraph", "text": "Budget"}]});
        let (status, edited) = s.server.post(Some(&s.token), &format!("/documents/{}/tools/edit_plan", s.doc), edit).await;
        assert_eq!(status, 200, "{edited}");
        // Nobody is connected, and the task that made the edit is still
        // there a while later.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let text = scrape(&s).await;
        assert_eq!(value(&text, "margin_sync_connections"), 0.0);
        assert_eq!(value(&text, "margin_documents_loaded"), 1.0);
    }
}

on_both_backends! {
    // SPEC W1: a call that writes is two commits — its write-ahead record,
    // then its writes with its result in their one transaction — never a
    // third that records the result after the writes landed.
    async fn a_writing_call_commits_its_result_in_the_transaction_of_its_writes(db) {
        let s = Scene::new(&db).await;
        let mut link = s.planner().await;
        s.say("@planner look").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        let read = call(&mut link, &session, &turn, "read_document", json!({})).await;
        let ServerMessage::ToolResult { output: Some(ToolOutput::ReadDocument(read)), .. } = read else { panic!("{read:?}") };
        let before = value(&scrape(&s).await, "margin_write_transactions_total");
        let opened = call(&mut link, &session, &turn, "open_decisions", json!({
            "revision": read.revision,
            "cards": [{"key": "region", "question": "Which region?", "response": "free_text",
                       "passages": [{"index": 0, "digest": read.outline[0].digest}]}],
        })).await;
        assert!(matches!(opened, ServerMessage::ToolResult { error: None, .. }), "{opened:?}");
        let after = value(&scrape(&s).await, "margin_write_transactions_total");
        assert_eq!(after - before, 2.0, "the write-ahead record, then the writes with the result");
    }
}

// SPEC O5: on SQLite the four reader connections are open before the first
// request; opened lazily, a start's first reads each paid for one.
#[tokio::test]
async fn a_started_server_has_its_sqlite_readers_open_before_the_first_request() {
    let db = crate::harness::TestDb::sqlite();
    let server = crate::harness::Server::start(&db).await;
    let text = reqwest::get(format!("http://{}/metrics", server.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let open = value(&text, "margin_storage_connections{state=\"idle\"}")
        + value(&text, "margin_storage_connections{state=\"lent\"}");
    assert_eq!(open, 4.0, "{text}");
}
