//! Planner turns over the machine link (SPEC T1, T2, T3, A1), with a
//! scripted test Planner speaking the link's JSON, on both backends.

use margin_protocol::chat::{ChatKind, ChatList};
use margin_protocol::link::{ClientMessage, ServerMessage};
use serde_json::json;

use crate::harness::{InProcess, LinkClient, SyncClient};
use crate::on_both_backends;

pub(crate) struct Scene {
    pub server: InProcess,
    pub token: String,
    pub doc: String,
}

impl Scene {
    pub async fn new(db: &crate::harness::TestDb) -> Scene {
        Self::with(db, |_| {}).await
    }

    pub async fn with(
        db: &crate::harness::TestDb,
        adjust: impl FnOnce(&mut margin_server::serve::ServeOptions),
    ) -> Scene {
        let server = InProcess::start_with(db, adjust).await;
        let (_, token) = server.account("ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut person = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        person.append_paragraph("Pick a region").await;
        Scene { server, token, doc }
    }

    pub async fn planner(&self) -> LinkClient {
        let mut link = self.machine().await;
        assert!(matches!(link.hello().await, ServerMessage::Welcome { .. }));
        link
    }

    /// A Planner whose link does not ask for resumable sessions.
    pub async fn planner_without_resume(&self) -> LinkClient {
        let mut link = self.machine().await;
        assert!(matches!(
            link.hello_without_resume().await,
            ServerMessage::Welcome { .. }
        ));
        link
    }

    pub async fn machine(&self) -> LinkClient {
        let (status, paired) = self
            .server
            .post(Some(&self.token), "/machines", json!({"name": "laptop"}))
            .await;
        assert_eq!(status, 201);
        LinkClient::connect(self.server.addr, paired["credential"].as_str().unwrap())
            .await
            .unwrap()
    }

    pub async fn say(&self, text: &str) {
        let (status, body) = self
            .server
            .post(
                Some(&self.token),
                &format!("/documents/{}/chat", self.doc),
                json!({"text": text}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }

    pub async fn chat(&self) -> Vec<(ChatKind, String)> {
        let (status, body) = self
            .server
            .get(Some(&self.token), &format!("/documents/{}/chat", self.doc))
            .await;
        assert_eq!(status, 200, "{body}");
        let list: ChatList = serde_json::from_value(body).unwrap();
        list.messages
            .into_iter()
            .map(|m| (m.kind, m.text))
            .collect()
    }

    /// Waits until Chat has `count` lines.
    pub async fn chat_len(&self, count: usize) -> Vec<(ChatKind, String)> {
        for _ in 0..500 {
            let chat = self.chat().await;
            if chat.len() >= count {
                return chat;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("chat never reached {count} lines: {:?}", self.chat().await);
    }
}

pub(crate) async fn invoked(link: &mut LinkClient) -> (String, String, Vec<String>, Vec<String>) {
    match link.next_work().await {
        Some(ServerMessage::Invoke {
            session,
            turn,
            messages,
            repair,
            ..
        }) => (
            session,
            turn,
            messages.into_iter().map(|m| m.text).collect(),
            repair,
        ),
        other => panic!("expected invoke, got {other:?}"),
    }
}

/// A call id no other call of these tests uses: a call id seen before is
/// answered with its first result, never run again (SPEC W1).
pub(crate) fn fresh_call_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    format!(
        "c{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

pub(crate) async fn call(
    link: &mut LinkClient,
    session: &str,
    turn: &str,
    name: &str,
    arguments: serde_json::Value,
) -> ServerMessage {
    link.send_message(&ClientMessage::ToolCall {
        session: session.into(),
        turn: turn.into(),
        call_id: fresh_call_id(),
        name: name.into(),
        arguments,
    })
    .await;
    link.next_work().await.expect("a tool result")
}

/// Reads the document and asks "Ship on March 3?" on its first paragraph
/// with `ask` in `turn`; the question's card.
pub(crate) async fn ask_first_paragraph(
    link: &mut LinkClient,
    session: &str,
    turn: &str,
) -> String {
    let ServerMessage::ToolResult {
        output: Some(read),
        error: None,
        ..
    } = call(link, session, turn, "read_document", json!({})).await
    else {
        panic!("read_document failed")
    };
    let read = serde_json::to_value(&read).unwrap();
    let question = json!({"revision": read["revision"], "card": {"key": "launch-date", "question": "Ship on March 3?",
        "response": "yes_no", "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]}});
    let ServerMessage::ToolResult {
        output: Some(asked),
        error: None,
        ..
    } = call(link, session, turn, "ask", question).await
    else {
        panic!("ask failed")
    };
    let asked = serde_json::to_value(&asked).unwrap();
    asked["captures"][0]["card_id"].as_str().unwrap().to_owned()
}

pub(crate) async fn reply(link: &mut LinkClient, session: &str, turn: &str, text: &str) {
    link.send_message(&ClientMessage::Reply {
        session: session.into(),
        turn: turn.into(),
        text: text.into(),
    })
    .await;
}

on_both_backends! {
    async fn at_planner_with_no_machine_linked_is_told_at_once(db) {
        let s = Scene::new(&db).await;
        s.say("@planner draft the launch plan").await;
        let chat = s.chat().await;
        assert_eq!(chat.len(), 2);
        assert_eq!(chat[1].0, ChatKind::System);
        assert!(chat[1].1.starts_with("The Planner is not connected"), "{}", chat[1].1);
        // A message that does not mention the Planner gets no answer.
        s.say("lunch at noon?").await;
        assert_eq!(s.chat().await.len(), 3);
    }

    async fn a_linked_planner_is_invoked_works_on_its_document_and_its_reply_is_posted(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        s.say("@planner summarise the plan").await;
        let (session, turn, messages, repair) = invoked(&mut planner).await;
        assert_eq!((messages, repair), (vec!["@planner summarise the plan".to_owned()], vec![]));
        // The view names the session, for GET /sessions/{sid} (SPEC E1, B1).
        let (_, view) = s.server.get(Some(&s.token), &format!("/documents/{}/planner", s.doc)).await;
        assert_eq!((view["connected"].as_bool(), view["session"].as_str()), (Some(true), Some(session.as_str())));
        let ServerMessage::ToolResult { output: Some(read), error: None, .. } = call(&mut planner, &session, &turn, "read_document", json!({})).await else {
            panic!("read_document failed")
        };
        let read = serde_json::to_value(&read).unwrap();
        assert_eq!(read["outline"][0]["text"], "Pick a region");
        reply(&mut planner, &session, &turn, "The plan has one open item: the region.").await;
        let chat = s.chat_len(2).await;
        assert_eq!(chat[1], (ChatKind::Planner, "The plan has one open item: the region.".to_owned()));
    }

    // A machine's frames are at most 1 MiB; a read of a large document is
    // more, and arrives whole, within the server's own frame limit
    // (SPEC S4, A2).
    async fn a_read_larger_than_a_machine_frame_arrives_whole(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        // An editor keeps the document loaded while it fills.
        let _editor = SyncClient::connect(&s.server.sync_url(&s.doc, &s.token)).await;
        // 64 paragraphs an edit, 6,400 in all: more than a mebibyte of outline.
        let text = "A paragraph of the plan long enough that six thousand of them make more than a mebibyte of outline.";
        let path = format!("/documents/{}/tools/edit_plan", s.doc);
        let mut revision = s.server.post(Some(&s.token), &format!("/documents/{}/tools/read_document", s.doc), json!({})).await.1["revision"].as_i64().unwrap();
        for _ in 0..100 {
            let edits: Vec<_> = (0..64).map(|_| json!({"op": "insert", "kind": "paragraph", "text": text})).collect();
            let (status, edited) = s.server.post(Some(&s.token), &path, json!({"revision": revision, "edits": edits})).await;
            assert_eq!(status, 200, "{edited}");
            revision = edited["revision"].as_i64().unwrap();
        }
        s.say("@planner read it all").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        let result = call(&mut planner, &session, &turn, "read_document", json!({})).await;
        let frame = serde_json::to_string(&result).unwrap();
        assert!(frame.len() > margin_protocol::link::MAX_FRAME_BYTES, "{} bytes", frame.len());
        let ServerMessage::ToolResult { output: Some(read), error: None, .. } = result else {
            panic!("read_document failed: {result:?}")
        };
        let read = serde_json::to_value(&read).unwrap();
        assert_eq!(read["revision"], json!(revision));
        let outline = read["outline"].as_array().unwrap();
        assert_eq!(outline.len(), 6401);
        assert_eq!(outline[6400]["text"], "Pick a region");
        assert_eq!(outline[6400]["index"], json!(6400));
    }

    async fn a_reply_asking_questions_is_withheld_and_a_repair_that_opens_them_succeeds(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        s.say("@planner what is missing").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        reply(&mut planner, &session, &turn, "Which region launches first?").await;
        let (same, repair_turn, messages, repair) = invoked(&mut planner).await;
        assert_eq!((same, messages, repair), (session.clone(), vec![], vec!["Which region launches first?".to_owned()]));
        let ServerMessage::ToolResult { output: Some(read), .. } = call(&mut planner, &session, &repair_turn, "read_document", json!({})).await else { panic!() };
        let read = serde_json::to_value(&read).unwrap();
        let batch = json!({"revision": read["revision"], "cards": [{"key": "launch-region", "question": "Which region launches first?",
            "response": "single_choice", "choices": ["EU", "US"], "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]}]});
        let ServerMessage::ToolResult { output: Some(opened), error: None, .. } = call(&mut planner, &session, &repair_turn, "open_decisions", batch).await else { panic!() };
        let opened = serde_json::to_value(&opened).unwrap();
        assert_eq!(opened["captured"], 1);
        reply(&mut planner, &session, &repair_turn, "I opened the region question beside its paragraph.").await;
        let chat = s.chat_len(3).await;
        assert_eq!(chat[1], (ChatKind::System, "The Planner opened its 1 question(s) as decisions.".to_owned()));
        assert_eq!(chat[2].0, ChatKind::Planner);
        // The withheld text was never posted.
        assert!(!chat.iter().any(|(_, text)| text == "Which region launches first?"));
    }

    async fn a_repair_that_opens_nothing_fails_visibly_and_posts_nothing_of_the_reply(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        s.say("@planner what is missing").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        reply(&mut planner, &session, &turn, "Should we launch in the EU? Or the US?").await;
        let (_, repair_turn, _, repair) = invoked(&mut planner).await;
        assert_eq!(repair.len(), 2);
        reply(&mut planner, &session, &repair_turn, "Sorry.").await;
        let chat = s.chat_len(2).await;
        assert_eq!(chat.len(), 2);
        assert_eq!(chat[1].0, ChatKind::System);
        assert!(chat[1].1.contains("withheld") && chat[1].1.contains("opened 0"), "{}", chat[1].1);
    }

    async fn messages_during_a_turn_arrive_in_order_at_the_next_turn(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        s.say("@planner start").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        s.say("@planner also the budget").await;
        s.say("@planner and the date").await;
        reply(&mut planner, &session, &turn, "Started.").await;
        let (_, _, messages, _) = invoked(&mut planner).await;
        assert_eq!(messages, vec!["@planner also the budget", "@planner and the date"]);
    }

    async fn a_machine_cannot_act_in_a_turn_that_is_not_its_own(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        s.say("@planner go").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        for (session, turn) in [(session.as_str(), "made-up"), ("made-up", turn.as_str())] {
            let refused = call(&mut planner, session, turn, "read_document", json!({})).await;
            assert!(matches!(refused, ServerMessage::Refusal { ref code, .. } if code == "unknown_turn"), "{refused:?}");
        }
        // Another account's machine gets nothing of ada's session.
        let (_, bo) = s.server.account("bo").await;
        let (_, paired) = s.server.post(Some(&bo), "/machines", json!({"name": "bo's"})).await;
        let mut stranger = LinkClient::connect(s.server.addr, paired["credential"].as_str().unwrap()).await.unwrap();
        stranger.hello().await;
        let refused = call(&mut stranger, &session, &turn, "read_document", json!({})).await;
        assert!(matches!(refused, ServerMessage::Refusal { ref code, .. } if code == "unknown_turn"), "{refused:?}");
        // Bad arguments and unknown tools are refusals; the turn carries on.
        let bad = call(&mut planner, &session, &turn, "open_decisions", json!({"revision": "x"})).await;
        assert!(matches!(bad, ServerMessage::ToolResult { error: Some(ref e), .. } if e.code == "invalid_input"), "{bad:?}");
        let unknown = call(&mut planner, &session, &turn, "delete_everything", json!({})).await;
        assert!(matches!(unknown, ServerMessage::ToolResult { error: Some(ref e), .. } if e.code == "unknown_tool"), "{unknown:?}");
        reply(&mut planner, &session, &turn, "Done.").await;
        assert_eq!(s.chat_len(2).await[1].1, "Done.");
    }

    async fn chat_refuses_bad_messages_and_viewers(db) {
        let s = Scene::new(&db).await;
        let path = format!("/documents/{}/chat", s.doc);
        for text in ["", "   ", &"x".repeat(4001)] {
            let (status, body) = s.server.post(Some(&s.token), &path, json!({"text": text})).await;
            assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_message")));
        }
        let (viewer, token) = s.server.account("vic").await;
        s.server.store().set_member(&s.doc, &viewer, margin_protocol::Role::Viewer).await.unwrap();
        let (status, _) = s.server.post(Some(&token), &path, json!({"text": "hi"})).await;
        assert_eq!(status, 403);
        let (status, _) = s.server.get(Some(&token), &path).await;
        assert_eq!(status, 200);
        assert!(s.chat().await.is_empty());
    }
}

on_both_backends! {
    async fn reported_runs_show_as_cards_with_their_status_and_a_stop_confirmed_says_their_true_age(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        let planner_path = format!("/documents/{}/planner", s.doc);
        let (_, view) = s.server.get(Some(&s.token), &planner_path).await;
        assert_eq!(view["connected"], false);
        s.say("@planner review the plan").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        planner.send_message(&ClientMessage::Run {
            session: session.clone(),
            run: "r1".into(),
            name: "plan-review".into(),
            status: margin_protocol::link::RunStatus::Running,
            attempt: None,
        })
        .await;
        reply(&mut planner, &session, &turn, "Reviewing.").await;
        s.chat_len(2).await;
        let (status, view) = s.server.get(Some(&s.token), &planner_path).await;
        assert_eq!(status, 200);
        assert_eq!((view["connected"].as_bool(), view["machine"].as_str()), (Some(true), Some("laptop")));
        assert_eq!(view["runs"][0]["name"], "plan-review");
        assert_eq!(view["runs"][0]["status"], "running");
        // Stop: Chat says it was asked, not that it stopped.
        let (status, _) = s.server.post(Some(&s.token), &format!("{planner_path}/stop"), json!(null)).await;
        assert_eq!(status, 202);
        let Some(ServerMessage::Stop { session: stopping }) = planner.next_work().await else { panic!("expected stop") };
        assert_eq!(stopping, session);
        let chat = s.chat_len(3).await;
        assert!(chat[2].1.starts_with("Stop was sent"), "{}", chat[2].1);
        assert!(!chat.iter().any(|(_, t)| t.contains("stopped after")));
        let (_, view) = s.server.get(Some(&s.token), &planner_path).await;
        assert_eq!(view["stop_pending"], true);
        // Confirmed: now it is true that the run stopped, after its real age.
        planner.send_message(&ClientMessage::Stopped { session: session.clone() }).await;
        let chat = s.chat_len(5).await;
        assert_eq!(chat[3].1, "The Planner stopped.");
        assert_eq!(chat[4].1, "plan-review was stopped after 0 min.");
        let (_, view) = s.server.get(Some(&s.token), &planner_path).await;
        assert_eq!(view["connected"], false);
        let (status, _) = s.server.post(Some(&s.token), &format!("{planner_path}/stop"), json!(null)).await;
        assert_eq!(status, 409);
    }

    async fn runs_and_stops_for_a_session_not_on_this_machine_are_refused(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        planner.send_message(&ClientMessage::Run {
            session: "made-up".into(),
            run: "r1".into(),
            name: "x".into(),
            status: margin_protocol::link::RunStatus::Running,
            attempt: None,
        })
        .await;
        let refused = planner.next_work().await;
        assert!(matches!(refused, Some(ServerMessage::Refusal { ref code, .. }) if code == "unknown_session"), "{refused:?}");
        planner.send_message(&ClientMessage::Stopped { session: "made-up".into() }).await;
        let refused = planner.next_work().await;
        assert!(matches!(refused, Some(ServerMessage::Refusal { ref code, .. }) if code == "unknown_session"), "{refused:?}");
    }
}

on_both_backends! {
    async fn a_question_asked_with_ask_waits_on_a_person_and_the_answer_reaches_the_machine(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        s.say("@planner plan the launch").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        let ServerMessage::ToolResult { output: Some(read), .. } = call(&mut planner, &session, &turn, "read_document", json!({})).await else { panic!() };
        let read = serde_json::to_value(&read).unwrap();
        let question = json!({"revision": read["revision"], "card": {"key": "launch-date", "question": "Ship on March 3?",
            "response": "yes_no", "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]}});
        let ServerMessage::ToolResult { output: Some(asked), error: None, .. } = call(&mut planner, &session, &turn, "ask", question).await else { panic!() };
        let asked = serde_json::to_value(&asked).unwrap();
        let card = asked["captures"][0]["card_id"].as_str().unwrap().to_owned();
        reply(&mut planner, &session, &turn, "I asked about the date beside its paragraph.").await;
        s.chat_len(2).await;
        let planner_path = format!("/documents/{}/planner", s.doc);
        let (_, view) = s.server.get(Some(&s.token), &planner_path).await;
        assert_eq!((view["questions"].as_u64(), view["replying"].as_bool()), (Some(1), Some(false)));
        let (status, _) = s.server.post(Some(&s.token), &format!("/documents/{}/decisions/{card}/answer", s.doc), json!({"yes": true})).await;
        assert_eq!(status, 200);
        match planner.next_work().await {
            Some(ServerMessage::InputResult { session: answered, request, answer, answered_by }) => {
                assert_eq!((answered, request, answered_by), (session, card, "ada".to_owned()));
                assert_eq!(answer, margin_protocol::decisions::AnswerBody::Yes(true));
            }
            other => panic!("expected input-result, got {other:?}"),
        }
        let (_, view) = s.server.get(Some(&s.token), &planner_path).await;
        assert_eq!(view["questions"], 0);
    }
}

/// Asks a question in a turn, ends the session by `ending` ("stop" or
/// "detach"), and checks the question's card is cancelled.
async fn question_is_withdrawn_when(db: crate::harness::TestDb, ending: &str) {
    let s = Scene::new(&db).await;
    let mut planner = s.planner_without_resume().await;
    s.say("@planner plan the launch").await;
    let (session, turn, _, _) = invoked(&mut planner).await;
    let ServerMessage::ToolResult {
        output: Some(read), ..
    } = call(&mut planner, &session, &turn, "read_document", json!({})).await
    else {
        panic!()
    };
    let read = serde_json::to_value(&read).unwrap();
    let question = json!({"revision": read["revision"], "card": {"key": "launch-date", "question": "Ship on March 3?",
        "response": "yes_no", "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]}});
    call(&mut planner, &session, &turn, "ask", question).await;
    reply(&mut planner, &session, &turn, "Asked.").await;
    s.chat_len(2).await;
    if ending == "stop" {
        s.server
            .post(
                Some(&s.token),
                &format!("/documents/{}/planner/stop", s.doc),
                json!(null),
            )
            .await;
        assert!(matches!(
            planner.next_work().await,
            Some(ServerMessage::Stop { .. })
        ));
        planner
            .send_message(&ClientMessage::Stopped {
                session: session.clone(),
            })
            .await;
    } else {
        planner.send_message(&ClientMessage::Detach {}).await;
    }
    let mut state = String::new();
    for _ in 0..200 {
        let (_, cards) = s
            .server
            .get(Some(&s.token), &format!("/documents/{}/decisions", s.doc))
            .await;
        state = cards["decisions"][0]["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if state == "cancelled" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(state, "cancelled", "{ending}");
}

on_both_backends! {
    async fn a_confirmed_stop_withdraws_the_sessions_questions(db) {
        question_is_withdrawn_when(db, "stop").await;
    }

    async fn a_closed_link_withdraws_the_sessions_questions(db) {
        question_is_withdrawn_when(db, "detach").await;
    }
}

/// Whether the document's Planner session is still bound, polling until it
/// is `expected` or `patience` passes.
async fn bound_becomes(s: &Scene, expected: bool, patience: std::time::Duration) -> bool {
    let path = format!("/documents/{}/planner", s.doc);
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let (_, view) = s.server.get(Some(&s.token), &path).await;
        if view["connected"].as_bool() == Some(expected) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

on_both_backends! {
    async fn an_idle_session_with_nobody_viewing_is_released_and_a_viewer_keeps_it(db) {
        let s = Scene::with(&db, |o| o.planner_idle = std::time::Duration::from_millis(300)).await;
        let mut planner = s.planner().await;
        let mut viewer = SyncClient::connect(&s.server.sync_url(&s.doc, &s.token)).await;
        s.say("@planner hello").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        reply(&mut planner, &session, &turn, "Hello.").await;
        s.chat_len(2).await;
        // Someone is viewing: well past the idle period, it is kept.
        assert!(!bound_becomes(&s, false, std::time::Duration::from_millis(1200)).await);
        assert!(viewer.stays_open(std::time::Duration::from_millis(10)).await);
        viewer.close().await;
        // Nobody viewing: released after the idle period.
        assert!(bound_becomes(&s, false, std::time::Duration::from_secs(10)).await);
    }

    async fn a_session_waiting_on_a_question_is_never_released_for_idleness(db) {
        let s = Scene::with(&db, |o| o.planner_idle = std::time::Duration::from_millis(200)).await;
        let mut planner = s.planner().await;
        s.say("@planner plan").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        let ServerMessage::ToolResult { output: Some(read), .. } = call(&mut planner, &session, &turn, "read_document", json!({})).await else { panic!() };
        let read = serde_json::to_value(&read).unwrap();
        let question = json!({"revision": read["revision"], "card": {"key": "date", "question": "Ship on March 3?",
            "response": "yes_no", "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]}});
        call(&mut planner, &session, &turn, "ask", question).await;
        reply(&mut planner, &session, &turn, "Asked.").await;
        s.chat_len(2).await;
        assert!(!bound_becomes(&s, false, std::time::Duration::from_millis(1500)).await);
    }
}

/// Reports `attempt` of `run` with `status`.
pub(crate) async fn report(
    link: &mut LinkClient,
    session: &str,
    run: &str,
    attempt: u32,
    status: margin_protocol::link::RunStatus,
) {
    link.send_message(&ClientMessage::Run {
        session: session.into(),
        run: run.into(),
        name: format!("{run} job"),
        status,
        attempt: Some(attempt),
    })
    .await;
}

/// The planner view's runs as (run, status) pairs.
pub(crate) async fn run_cards(s: &Scene) -> Vec<(String, String)> {
    let (_, view) = s
        .server
        .get(Some(&s.token), &format!("/documents/{}/planner", s.doc))
        .await;
    view["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run"].as_str().unwrap().to_owned(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

on_both_backends! {
    async fn a_run_beyond_the_capacity_the_machine_declared_is_refused_and_not_shown(db) {
        use margin_protocol::link::RunStatus::*;
        let s = Scene::new(&db).await;
        let (_, paired) = s.server.post(Some(&s.token), "/machines", json!({"name": "laptop"})).await;
        let mut planner = LinkClient::connect(s.server.addr, paired["credential"].as_str().unwrap()).await.unwrap();
        planner.send_text(r#"{"type":"hello","protocol_version":1,"features":[],"run_capacity":1}"#).await;
        assert!(matches!(planner.next().await, Some(ServerMessage::Welcome { .. })));
        s.say("@planner build both").await;
        let (session, _, _, _) = invoked(&mut planner).await;
        report(&mut planner, &session, "a", 1, Running).await;
        report(&mut planner, &session, "b", 1, Running).await;
        let refused = planner.next_work().await;
        assert!(matches!(refused, Some(ServerMessage::Refusal { ref code, ref message, .. })
            if code == "run_capacity" && message.contains("\"b\"")), "{refused:?}");
        assert_eq!(run_cards(&s).await, [("a".to_owned(), "running".to_owned())]);
        // When a ends, b has room.
        report(&mut planner, &session, "a", 1, Completed).await;
        report(&mut planner, &session, "b", 1, Running).await;
        for _ in 0..500 {
            if run_cards(&s).await.len() == 2 { break; }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(run_cards(&s).await, [("a".to_owned(), "completed".to_owned()), ("b".to_owned(), "running".to_owned())]);
    }

    async fn a_late_result_of_an_older_attempt_never_repaints_the_run_card(db) {
        use margin_protocol::link::RunStatus::*;
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        s.say("@planner deploy").await;
        let (session, _, _, _) = invoked(&mut planner).await;
        report(&mut planner, &session, "deploy", 1, Running).await;
        report(&mut planner, &session, "deploy", 2, Running).await;
        report(&mut planner, &session, "deploy", 1, Failed).await;
        let refused = planner.next_work().await;
        assert!(matches!(refused, Some(ServerMessage::Refusal { ref code, .. }) if code == "superseded_attempt"), "{refused:?}");
        assert_eq!(run_cards(&s).await, [("deploy".to_owned(), "running".to_owned())]);
    }

    async fn hello_with_a_run_capacity_out_of_bounds_is_refused(db) {
        let s = Scene::new(&db).await;
        let (_, paired) = s.server.post(Some(&s.token), "/machines", json!({"name": "laptop"})).await;
        for capacity in [0, 65] {
            let mut planner = LinkClient::connect(s.server.addr, paired["credential"].as_str().unwrap()).await.unwrap();
            planner.send_text(&format!(r#"{{"type":"hello","protocol_version":1,"run_capacity":{capacity}}}"#)).await;
            let refused = planner.next().await;
            assert!(matches!(refused, Some(ServerMessage::Refusal { ref code, ref message, .. })
                if code == "invalid_hello" && message.contains("run_capacity")), "{refused:?}");
        }
    }

    async fn a_malformed_hello_is_refused_as_invalid_hello_not_hello_expected(db) {
        let s = Scene::new(&db).await;
        let (_, paired) = s.server.post(Some(&s.token), "/machines", json!({"name": "laptop"})).await;
        for hello in [
            r#"{"type":"hello","protocol_version":1,"manifest":{"planning":true,"colour":"blue"}}"#,
            r#"{"type":"hello","protocol_version":"one"}"#,
        ] {
            let mut planner = LinkClient::connect(s.server.addr, paired["credential"].as_str().unwrap()).await.unwrap();
            planner.send_text(hello).await;
            let refused = planner.next().await;
            assert!(matches!(refused, Some(ServerMessage::Refusal { ref code, ref message, .. })
                if code == "invalid_hello" && message.contains("malformed hello")), "{hello}: {refused:?}");
        }
        // Something else first is still hello_expected.
        let mut planner = LinkClient::connect(s.server.addr, paired["credential"].as_str().unwrap()).await.unwrap();
        planner.send_text(r#"{"type":"heartbeat"}"#).await;
        let refused = planner.next().await;
        assert!(matches!(refused, Some(ServerMessage::Refusal { ref code, .. }) if code == "hello_expected"), "{refused:?}");
    }

    async fn a_link_that_closes_under_a_live_run_says_its_state_is_unknown_not_stopped(db) {
        use margin_protocol::link::RunStatus::*;
        let s = Scene::new(&db).await;
        let mut planner = s.planner_without_resume().await;
        s.say("@planner build").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        report(&mut planner, &session, "build", 1, Running).await;
        reply(&mut planner, &session, &turn, "Building.").await;
        s.chat_len(2).await;
        drop(planner);
        let chat = s.chat_len(3).await;
        assert_eq!(chat[2], (ChatKind::System, "build job was live when the Planner disconnected; whether it stopped is not known.".to_owned()));
        assert!(!chat.iter().any(|(_, text)| text.contains("stopped after")), "{chat:?}");
    }
}

on_both_backends! {
    async fn asking_again_a_question_people_already_answered_delivers_their_answer_and_keeps_it(db) {
        let s = Scene::new(&db).await;
        // Not resumable: its detach ends the session at once.
        let mut planner = s.planner_without_resume().await;
        s.say("@planner ask about the date").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        let ServerMessage::ToolResult { output: Some(read), .. } = call(&mut planner, &session, &turn, "read_document", json!({})).await else { panic!() };
        let read = serde_json::to_value(&read).unwrap();
        let question = json!({"revision": read["revision"], "card": {"key": "launch-date", "question": "Ship on March 3?",
            "response": "yes_no", "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]}});
        let ServerMessage::ToolResult { output: Some(asked), .. } = call(&mut planner, &session, &turn, "ask", question.clone()).await else { panic!() };
        let asked = serde_json::to_value(&asked).unwrap();
        let card = asked["captures"][0]["card_id"].as_str().unwrap().to_owned();
        reply(&mut planner, &session, &turn, "Asked.").await;
        s.chat_len(2).await;
        let (status, _) = s.server.post(Some(&s.token), &format!("/documents/{}/decisions/{card}/answer", s.doc), json!({"yes": true})).await;
        assert_eq!(status, 200);
        assert!(matches!(planner.next_work().await, Some(ServerMessage::InputResult { .. })));
        planner.send_message(&ClientMessage::InputReceived { session: session.clone(), request: card.clone() }).await;

        // The next turn asks the same question again (a replay, SPEC D3).
        s.say("@planner and the date?").await;
        let (_, turn, _, _) = invoked(&mut planner).await;
        let ServerMessage::ToolResult { output: Some(read), .. } = call(&mut planner, &session, &turn, "read_document", json!({})).await else { panic!() };
        let read = serde_json::to_value(&read).unwrap();
        let mut question = question;
        question["revision"] = read["revision"].clone();
        let result = call(&mut planner, &session, &turn, "ask", question).await;
        assert!(matches!(result, ServerMessage::ToolResult { error: None, .. }), "{result:?}");
        // Its answer comes at once; nobody is asked twice.
        match planner.next_work().await {
            Some(ServerMessage::InputResult { request, answer, .. }) => {
                assert_eq!((request, answer), (card.clone(), margin_protocol::decisions::AnswerBody::Yes(true)));
            }
            other => panic!("expected the answer, got {other:?}"),
        }
        planner.send_message(&ClientMessage::InputReceived { session: session.clone(), request: card.clone() }).await;
        reply(&mut planner, &session, &turn, "Noted.").await;
        s.chat_len(4).await;
        // The session ends; the answer a person gave is kept.
        planner.send_message(&ClientMessage::Detach {}).await;
        drop(planner);
        assert!(bound_becomes(&s, false, std::time::Duration::from_secs(5)).await);
        let (_, cards) = s.server.get(Some(&s.token), &format!("/documents/{}/decisions", s.doc)).await;
        assert_eq!(cards["decisions"][0]["state"], "answered");
    }
}

on_both_backends! {
    async fn a_tool_refusal_carries_retry_only_when_the_server_could_not_decide(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        s.say("@planner plan").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        let ServerMessage::ToolResult { output: Some(read), .. } = call(&mut planner, &session, &turn, "read_document", json!({})).await else { panic!() };
        let read = serde_json::to_value(&read).unwrap();
        let batch = |revision: serde_json::Value| json!({"revision": revision, "cards": [{"key": "k", "question": "Ship on March 3?",
            "response": "yes_no", "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]}]});
        // A decision: a revision the document never had.
        match call(&mut planner, &session, &turn, "open_decisions", batch(json!(999))).await {
            ServerMessage::ToolResult { error: Some(refusal), .. } => assert!(!refusal.retry, "{refusal:?}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        // The database goes away: the server cannot decide.
        s.server.store().close().await;
        match call(&mut planner, &session, &turn, "open_decisions", batch(read["revision"].clone())).await {
            ServerMessage::ToolResult { error: Some(refusal), .. } => {
                assert_eq!((refusal.code.as_str(), refusal.retry), ("internal", true), "{refusal:?}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
