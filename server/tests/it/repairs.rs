//! Repair turns end to end (SPEC T2, D3, D4): what a repair's decision calls
//! count toward the questions a withheld reply asked, over a real link, on
//! both backends.

use margin_protocol::chat::ChatKind;
use margin_protocol::link::ServerMessage;
use serde_json::{json, Value};

use crate::harness::LinkClient;
use crate::on_both_backends;
use crate::turns::{call, invoked, reply, Scene};

/// The turn's ids: session, turn.
type Turn = (String, String);

/// Reads the document and opens a card per `(key, question)` on its first
/// paragraph; returns the tool's output.
async fn open(planner: &mut LinkClient, (session, turn): &Turn, cards: &[(&str, &str)]) -> Value {
    let ServerMessage::ToolResult {
        output: Some(read), ..
    } = call(planner, session, turn, "read_document", json!({})).await
    else {
        panic!("read_document failed")
    };
    let read = serde_json::to_value(&read).unwrap();
    let cards: Vec<Value> = cards
        .iter()
        .map(|(key, question)| {
            json!({"key": key, "question": question, "response": "yes_no",
                "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]})
        })
        .collect();
    let batch = json!({"revision": read["revision"], "cards": cards});
    match call(planner, session, turn, "open_decisions", batch).await {
        ServerMessage::ToolResult {
            output: Some(opened),
            error: None,
            ..
        } => serde_json::to_value(&opened).unwrap(),
        other => panic!("open_decisions failed: {other:?}"),
    }
}

/// A turn whose reply asked `questions` was withheld: the repair turn.
async fn withheld(s: &Scene, planner: &mut LinkClient, questions: &str) -> Turn {
    s.say("@planner what is missing").await;
    let (session, turn, _, _) = invoked(planner).await;
    reply(planner, &session, &turn, questions).await;
    let (session, repair, _, asked) = invoked(planner).await;
    assert!(!asked.is_empty(), "a repair turn carries the questions");
    (session, repair)
}

/// An earlier turn opened two cards; returns their ids.
async fn earlier_turn_opened_two(s: &Scene, planner: &mut LinkClient) -> Vec<String> {
    s.say("@planner open the questions").await;
    let (session, turn, _, _) = invoked(planner).await;
    let opened = open(
        planner,
        &(session.clone(), turn.clone()),
        &[("eu", "Launch in the EU?"), ("us", "Launch in the US?")],
    )
    .await;
    reply(planner, &session, &turn, "Opened two decisions.").await;
    s.chat_len(2).await;
    opened["captures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["card_id"].as_str().unwrap().to_owned())
        .collect()
}

on_both_backends! {
    async fn a_repair_that_replays_cards_an_earlier_turn_opened_succeeds_and_says_they_are_already_in_the_document(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        earlier_turn_opened_two(&s, &mut planner).await;
        let repair = withheld(&s, &mut planner, "Launch in the EU? Launch in the US?").await;
        let replayed = open(&mut planner, &repair, &[("eu", "Launch in the EU?"), ("us", "Launch in the US?")]).await;
        assert_eq!(replayed["captured"], 2);
        assert_eq!(replayed["summary"], "2 decisions already in the document");
        reply(&mut planner, &repair.0, &repair.1, "Both are open beside the plan.").await;
        let chat = s.chat_len(5).await;
        assert_eq!(chat[3], (ChatKind::System, "The Planner opened its 2 question(s) as decisions.".to_owned()));
        assert_eq!(chat[4], (ChatKind::Planner, "Both are open beside the plan.".to_owned()));
    }

    async fn a_repair_fails_when_one_of_the_cards_it_replays_was_discarded(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        let ids = earlier_turn_opened_two(&s, &mut planner).await;
        let (status, body) = s.server.post(Some(&s.token), &format!("/documents/{}/decisions/{}/discard", s.doc, ids[1]), json!(null)).await;
        assert_eq!(status, 200, "{body}");
        let repair = withheld(&s, &mut planner, "Launch in the EU? Launch in the US?").await;
        let replayed = open(&mut planner, &repair, &[("eu", "Launch in the EU?"), ("us", "Launch in the US?")]).await;
        assert_eq!(replayed["captured"], 1);
        reply(&mut planner, &repair.0, &repair.1, "Launch in the US?").await;
        let chat = s.chat_len(4).await;
        assert_eq!(chat[3], (ChatKind::System, "The Planner's reply was withheld: it asked 2 question(s) in Chat and opened 1 as decisions.".to_owned()));
        assert!(!chat.iter().any(|(kind, text)| *kind == ChatKind::Planner && text == "Launch in the US?"));
    }

    async fn a_repair_whose_replay_asks_another_question_under_the_same_key_is_refused_and_fails(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        earlier_turn_opened_two(&s, &mut planner).await;
        let repair = withheld(&s, &mut planner, "Launch in the EU? Launch in the US?").await;
        let ServerMessage::ToolResult { output: Some(read), .. } = call(&mut planner, &repair.0, &repair.1, "read_document", json!({})).await else {
            panic!("read_document failed")
        };
        let read = serde_json::to_value(&read).unwrap();
        let changed = json!({"revision": read["revision"], "cards": [{"key": "eu", "question": "Launch in Europe first?", "response": "yes_no",
            "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]}]});
        match call(&mut planner, &repair.0, &repair.1, "open_decisions", changed).await {
            ServerMessage::ToolResult { output: None, error: Some(refusal), .. } => assert_eq!(refusal.code.to_string(), "different_decision"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        reply(&mut planner, &repair.0, &repair.1, "Both are open.").await;
        let chat = s.chat_len(4).await;
        assert_eq!(chat[3], (ChatKind::System, "The Planner's reply was withheld: it asked 2 question(s) in Chat and opened 0 as decisions.".to_owned()));
    }

    async fn a_repair_that_opens_a_card_and_replays_its_key_counts_the_card_once(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        let repair = withheld(&s, &mut planner, "Launch in the EU? Launch in the US?").await;
        let first = open(&mut planner, &repair, &[("eu", "Launch in the EU?")]).await;
        assert_eq!(first["captured"], 1);
        let again = open(&mut planner, &repair, &[("eu", "Launch in the EU?")]).await;
        assert_eq!(again["summary"], "1 decision already in the document");
        reply(&mut planner, &repair.0, &repair.1, "Done.").await;
        let chat = s.chat_len(2).await;
        assert_eq!(chat[1], (ChatKind::System, "The Planner's reply was withheld: it asked 2 question(s) in Chat and opened 1 as decisions.".to_owned()));
    }

    async fn a_card_discarded_during_the_repair_no_longer_counts(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        let repair = withheld(&s, &mut planner, "Launch in the EU? Launch in the US?").await;
        let opened = open(&mut planner, &repair, &[("eu", "Launch in the EU?"), ("us", "Launch in the US?")]).await;
        assert_eq!(opened["captured"], 2);
        let us = opened["captures"][1]["card_id"].as_str().unwrap().to_owned();
        let (status, body) = s.server.post(Some(&s.token), &format!("/documents/{}/decisions/{us}/discard", s.doc), json!(null)).await;
        assert_eq!(status, 200, "{body}");
        reply(&mut planner, &repair.0, &repair.1, "Done.").await;
        let chat = s.chat_len(2).await;
        assert_eq!(chat[1], (ChatKind::System, "The Planner's reply was withheld: it asked 2 question(s) in Chat and opened 1 as decisions.".to_owned()));
    }
}
