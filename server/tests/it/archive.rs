//! Archiving and deleting a document (SPEC P3's release triggers, A1): who
//! may, what an archived document still allows, what a delete removes, and
//! the Planner session each one ends — on both backends.

use std::time::Duration;

use margin_protocol::chat::{ChatKind, ChatList};
use margin_protocol::link::{ClientMessage, ServerMessage};
use margin_protocol::sync::close;
use margin_protocol::Role;
use serde_json::json;

use crate::harness::{InProcess, LinkClient, SyncClient};
use crate::on_both_backends;
use crate::turns::call;

/// A document ada owns with one paragraph, shared with bo (editor) and vic
/// (viewer); cy is a stranger to it.
struct Scene {
    server: InProcess,
    ada: String,
    bo: String,
    vic: String,
    cy: String,
    doc: String,
    person: SyncClient,
}

impl Scene {
    async fn new(db: &crate::harness::TestDb) -> Scene {
        let server = InProcess::start(db).await;
        let (_, ada) = server.account("ada").await;
        let (bo_account, bo) = server.account("bo").await;
        let (vic_account, vic) = server.account("vic").await;
        let (_, cy) = server.account("cy").await;
        let doc = server.create_document(&ada, "Plan").await;
        let store = server.store();
        store
            .set_member(&doc, &bo_account, Role::Editor)
            .await
            .unwrap();
        store
            .set_member(&doc, &vic_account, Role::Viewer)
            .await
            .unwrap();
        let mut person = SyncClient::connect(&server.sync_url(&doc, &ada)).await;
        person.append_paragraph("Pick a region").await;
        let s = Scene {
            server,
            ada,
            bo,
            vic,
            cy,
            doc,
            person,
        };
        s.settle(1).await;
        s
    }

    fn path(&self, rest: &str) -> String {
        format!("/documents/{}{rest}", self.doc)
    }

    async fn revision(&self) -> i64 {
        self.server.block_texts(&self.ada, &self.doc).await.0
    }

    async fn settle(&self, revision: i64) {
        for _ in 0..400 {
            if self.revision().await >= revision {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("revision {revision} never arrived");
    }

    async fn act(&self, token: &str, action: &str) -> (u16, serde_json::Value) {
        self.server
            .post(Some(token), &self.path(&format!("/{action}")), json!(null))
            .await
    }

    /// `read_document` over HTTP, as ada.
    async fn read(&self) -> serde_json::Value {
        let (status, read) = self
            .server
            .post(
                Some(&self.ada),
                &self.path("/tools/read_document"),
                json!(null),
            )
            .await;
        assert_eq!(status, 200, "{read}");
        read
    }

    /// A card spec beside the first paragraph of `read`.
    fn card(read: &serde_json::Value, key: &str) -> serde_json::Value {
        json!({"key": key, "question": "Which region first?", "response": "single_choice",
               "choices": ["EU", "US"],
               "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]})
    }

    /// Opens a card over HTTP and returns its id.
    async fn open_card(&self, key: &str) -> String {
        let read = self.read().await;
        let batch = json!({"revision": read["revision"], "cards": [Self::card(&read, key)]});
        let (status, opened) = self
            .server
            .post(Some(&self.ada), &self.path("/tools/open_decisions"), batch)
            .await;
        assert_eq!(status, 200, "{opened}");
        opened["captures"][0]["card_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn say(&self, token: &str, text: &str) -> (u16, serde_json::Value) {
        self.server
            .post(Some(token), &self.path("/chat"), json!({ "text": text }))
            .await
    }

    async fn chat(&self) -> Vec<(ChatKind, String)> {
        let (status, body) = self.server.get(Some(&self.ada), &self.path("/chat")).await;
        assert_eq!(status, 200, "{body}");
        let list: ChatList = serde_json::from_value(body).unwrap();
        list.messages
            .into_iter()
            .map(|m| (m.kind, m.text))
            .collect()
    }

    async fn card_state(&self, card: &str) -> String {
        let (status, cards) = self
            .server
            .get(Some(&self.ada), &self.path("/decisions"))
            .await;
        assert_eq!(status, 200, "{cards}");
        cards["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == card)
            .map(|c| c["state"].as_str().unwrap().to_owned())
            .expect("the card is listed")
    }

    /// A Planner on ada's machine that took a turn, reported a running run
    /// and asked a question with `ask`: (link, session, turn, card id).
    async fn planner_waiting_on_a_question(&self) -> (LinkClient, String, String, String) {
        let (status, paired) = self
            .server
            .post(Some(&self.ada), "/machines", json!({"name": "laptop"}))
            .await;
        assert_eq!(status, 201);
        let mut link =
            LinkClient::connect(self.server.addr, paired["credential"].as_str().unwrap())
                .await
                .unwrap();
        assert!(matches!(link.hello().await, ServerMessage::Welcome { .. }));
        assert_eq!(self.say(&self.ada, "@planner plan the launch").await.0, 201);
        let (session, turn) = match link.next_work().await {
            Some(ServerMessage::Invoke { session, turn, .. }) => (session, turn),
            other => panic!("expected invoke, got {other:?}"),
        };
        let ServerMessage::ToolResult {
            output: Some(read), ..
        } = call(&mut link, &session, &turn, "read_document", json!({})).await
        else {
            panic!("read_document failed")
        };
        let read = serde_json::to_value(&read).unwrap();
        link.send_message(&ClientMessage::Run {
            session: session.clone(),
            run: "r1".into(),
            name: "plan-review".into(),
            status: margin_protocol::link::RunStatus::Running,
            attempt: None,
        })
        .await;
        let question = json!({"revision": read["revision"], "card": {"key": "launch-date",
            "question": "Ship on March 3?", "response": "yes_no",
            "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]}});
        let ServerMessage::ToolResult {
            output: Some(asked),
            error: None,
            ..
        } = call(&mut link, &session, &turn, "ask", question).await
        else {
            panic!("ask failed")
        };
        let asked = serde_json::to_value(&asked).unwrap();
        let card = asked["captures"][0]["card_id"].as_str().unwrap().to_owned();
        link.send_message(&ClientMessage::Reply {
            session: session.clone(),
            turn: turn.clone(),
            text: "I asked about the date.".into(),
        })
        .await;
        for _ in 0..500 {
            if self.chat().await.len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (_, view) = self
            .server
            .get(Some(&self.ada), &self.path("/planner"))
            .await;
        assert_eq!(
            (view["connected"].as_bool(), view["questions"].as_u64()),
            (Some(true), Some(1)),
            "{view}"
        );
        (link, session, turn, card)
    }
}

fn code(body: &serde_json::Value) -> Option<&str> {
    body["error"]["code"].as_str()
}

on_both_backends! {
    async fn only_the_owner_archives_unarchives_and_deletes(db) {
        let s = Scene::new(&db).await;
        for (token, status, expected) in [(&s.bo, 403, "forbidden"), (&s.vic, 403, "forbidden"), (&s.cy, 404, "document_not_found")] {
            for action in ["archive", "unarchive"] {
                let (got, body) = s.act(token, action).await;
                assert_eq!((got, code(&body)), (status, Some(expected)), "{action}: {body}");
            }
            let (got, body) = s.server.delete(Some(token), &s.path("")).await;
            assert_eq!((got, code(&body)), (status, Some(expected)), "delete: {body}");
        }
        let (status, _) = s.act("mgn_unknown", "archive").await;
        assert_eq!(status, 401);
        let (_, shown) = s.server.get(Some(&s.ada), &s.path("")).await;
        assert_eq!(shown["archived"], false);

        let (status, archived) = s.act(&s.ada, "archive").await;
        assert_eq!(status, 200, "{archived}");
        assert_eq!(archived, json!({"id": s.doc, "title": "Plan", "revision": 1, "role": "owner", "archived": true,
            "created_at": shown["created_at"], "edited_at": shown["edited_at"], "edited_by": "ada"}));
        assert!(shown["edited_at"].is_i64(), "{shown}");
        // Every member sees it archived, in the document and in the list.
        let (_, shown) = s.server.get(Some(&s.bo), &s.path("")).await;
        assert_eq!((shown["archived"].as_bool(), shown["role"].as_str()), (Some(true), Some("editor")));
        let (_, listed) = s.server.get(Some(&s.vic), "/documents").await;
        assert_eq!(listed["documents"][0]["archived"], true);
        // Archiving twice is harmless; unarchiving restores it.
        assert_eq!(s.act(&s.ada, "archive").await.1["archived"], true);
        let (status, restored) = s.act(&s.ada, "unarchive").await;
        assert_eq!((status, restored["archived"].as_bool()), (200, Some(false)));
        assert_eq!(s.act(&s.ada, "unarchive").await.1["archived"], false);
        let (status, body) = s.server.post(Some(&s.ada), "/documents/no-such-document/archive", json!(null)).await;
        assert_eq!((status, code(&body)), (404, Some("document_not_found")));
    }

    async fn an_archived_document_stays_readable_and_refuses_every_write(db) {
        let s = Scene::new(&db).await;
        let card = s.open_card("region").await;
        assert_eq!(s.say(&s.bo, "before the archive").await.0, 201);
        let mut editor = SyncClient::connect(&s.server.sync_url(&s.doc, &s.bo)).await;
        let (status, _) = s.act(&s.ada, "archive").await;
        assert_eq!(status, 200);
        let revision = s.revision().await;
        let chat = s.chat().await;

        // Reads work for every member.
        for token in [&s.ada, &s.bo, &s.vic] {
            for rest in ["", "/outline", "/decisions", "/chat", "/planner"] {
                let (status, body) = s.server.get(Some(token), &s.path(rest)).await;
                assert_eq!(status, 200, "{rest}: {body}");
            }
        }
        let read = s.read().await;
        assert_eq!(read["outline"][0]["text"], "Pick a region");
        // A new sync connection receives the document.
        let mut late = SyncClient::connect(&s.server.sync_url(&s.doc, &s.ada)).await;
        assert_eq!(late.texts(), vec!["Pick a region"]);

        // Edits over sync are refused the way a viewer's are, on connections
        // opened before the archive and after it.
        for client in [&mut editor, &mut late] {
            client.append_paragraph("an edit").await;
            let (code, reason) = client.wait_closed().await;
            assert_eq!(code, close::READ_ONLY);
            assert!(reason.contains("archived"), "{reason}");
        }

        // The Planner's writes are refused, naming the archive.
        let address = json!({"index": 0, "digest": read["outline"][0]["digest"]});
        for (tool, body) in [
            ("edit_plan", json!({"revision": read["revision"], "edits": [{"op": "replace", "at": address, "text": "Changed"}]})),
            ("open_decisions", json!({"revision": read["revision"], "cards": [Scene::card(&read, "budget")]})),
            ("open_decision", json!({"revision": read["revision"], "card": Scene::card(&read, "budget")})),
            ("ask", json!({"revision": read["revision"], "card": Scene::card(&read, "budget")})),
        ] {
            let (status, refused) = s.server.post(Some(&s.ada), &s.path(&format!("/tools/{tool}")), body).await;
            assert_eq!((status, code(&refused)), (409, Some("archived")), "{tool}: {refused}");
            assert!(refused["error"]["message"].as_str().unwrap().contains("archived"), "{refused}");
        }

        // People's writes are refused: Chat (so @planner starts nothing) and
        // every card action.
        for text in ["hello", "@planner draft the risks"] {
            let (status, refused) = s.say(&s.bo, text).await;
            assert_eq!((status, code(&refused)), (409, Some("archived")), "{refused}");
        }
        for (action, body) in [
            ("answer", json!({"choices": ["c1"]})),
            ("discard", json!(null)),
            ("reopen", json!(null)),
            ("options", json!({"label": "Both"})),
            ("criteria", json!({"text": "cost"})),
        ] {
            let (status, refused) = s.server.post(Some(&s.bo), &s.path(&format!("/decisions/{card}/{action}")), body).await;
            assert_eq!((status, code(&refused)), (409, Some("archived")), "{action}: {refused}");
        }

        // Nothing changed.
        assert_eq!(s.server.block_texts(&s.ada, &s.doc).await, (revision, vec!["Pick a region".to_owned()]));
        assert_eq!(s.card_state(&card).await, "open");
        assert_eq!(s.chat().await, chat);
        let (_, cards) = s.server.get(Some(&s.ada), &s.path("/decisions")).await;
        assert_eq!(cards["decisions"].as_array().unwrap().len(), 1);
    }

    async fn unarchiving_restores_every_write(db) {
        let s = Scene::new(&db).await;
        let card = s.open_card("region").await;
        assert_eq!(s.act(&s.ada, "archive").await.0, 200);
        assert_eq!(s.act(&s.ada, "unarchive").await.0, 200);
        let revision = s.revision().await;
        let mut editor = SyncClient::connect(&s.server.sync_url(&s.doc, &s.bo)).await;
        editor.append_paragraph("Budget").await;
        s.settle(revision + 1).await;
        assert!(editor.stays_open(Duration::from_millis(100)).await);
        let read = s.read().await;
        let address = json!({"index": 0, "digest": read["outline"][0]["digest"]});
        let (status, edited) = s.server.post(Some(&s.ada), &s.path("/tools/edit_plan"),
            json!({"revision": read["revision"], "edits": [{"op": "replace", "at": address, "text": "Pick two regions"}]})).await;
        assert_eq!(status, 200, "{edited}");
        assert_eq!(s.say(&s.bo, "back to work").await.0, 201);
        let (status, answered) = s.server.post(Some(&s.bo), &s.path(&format!("/decisions/{card}/answer")), json!({"choices": ["c1"]})).await;
        assert_eq!((status, answered["state"].as_str()), (200, Some("answered")), "{answered}");
    }

    async fn deleting_removes_everything_closes_sync_and_later_requests_get_404(db) {
        let mut s = Scene::new(&db).await;
        s.open_card("region").await;
        assert_eq!(s.say(&s.bo, "hello").await.0, 201);
        let mut editor = SyncClient::connect(&s.server.sync_url(&s.doc, &s.bo)).await;
        let other = s.server.create_document(&s.ada, "Other").await;

        let (status, body) = s.server.delete(Some(&s.ada), &s.path("")).await;
        assert_eq!(status, 204, "{body}");
        // Its live sync connections are closed for good.
        for client in [&mut s.person, &mut editor] {
            let (code, reason) = client.wait_closed().await;
            assert_eq!(code, close::DELETED);
            assert!(reason.contains("deleted"), "{reason}");
        }
        // Later requests get 404, from every member, on every route.
        for token in [&s.ada, &s.bo, &s.vic] {
            for rest in ["", "/outline", "/decisions", "/chat", "/planner"] {
                let (status, body) = s.server.get(Some(token), &s.path(rest)).await;
                assert_eq!((status, code(&body)), (404, Some("document_not_found")), "{rest}: {body}");
            }
            let (status, _) = s.say(token, "anyone?").await;
            assert_eq!(status, 404);
        }
        for action in ["archive", "unarchive"] {
            assert_eq!(s.act(&s.ada, action).await.0, 404);
        }
        assert_eq!(s.server.delete(Some(&s.ada), &s.path("")).await.0, 404);
        let refused = tokio_tungstenite::connect_async(s.server.sync_url(&s.doc, &s.ada)).await;
        assert!(matches!(refused, Err(tokio_tungstenite::tungstenite::Error::Http(ref r)) if r.status() == 404), "{refused:?}");
        // Nothing of it is left in storage; the other document is untouched.
        let store = s.server.store();
        assert!(store.cards(&s.doc).await.unwrap().is_empty());
        assert!(store.chat(&s.doc, 0, 10).await.unwrap().is_empty());
        assert_eq!(store.log_len(&s.doc).await.unwrap(), 0);
        let (_, listed) = s.server.get(Some(&s.bo), "/documents").await;
        assert_eq!(listed["documents"], json!([]));
        let (_, listed) = s.server.get(Some(&s.ada), "/documents").await;
        assert_eq!(listed["documents"][0]["id"], other.as_str());
    }

    async fn archiving_ends_the_planner_session_and_withdraws_its_question(db) {
        let s = Scene::new(&db).await;
        let (mut planner, session, turn, card) = s.planner_waiting_on_a_question().await;
        let before = s.chat().await.len();
        let (status, _) = s.act(&s.ada, "archive").await;
        assert_eq!(status, 200);
        // The machine is told to stop the session's work.
        match planner.next_work().await {
            Some(ServerMessage::Stop { session: stopping }) => assert_eq!(stopping, session),
            other => panic!("expected stop, got {other:?}"),
        }
        // The question is withdrawn and the session is gone.
        assert_eq!(s.card_state(&card).await, "cancelled");
        let (_, view) = s.server.get(Some(&s.ada), &s.path("/planner")).await;
        assert_eq!(view, json!({"state": "unlinked", "connected": false, "disconnected": false, "replying": false, "stop_pending": false, "questions": 0, "runs": []}));
        // Chat says only what is true: the session ended, its run was asked
        // to stop (not that it stopped).
        let chat = s.chat().await;
        assert_eq!(chat[before..].to_vec(), vec![
            (ChatKind::System, "The Planner's session ended: the document was archived.".to_owned()),
            (ChatKind::System, "plan-review was asked to stop.".to_owned()),
        ]);
        // The machine's confirmation is accepted quietly; the old turn is gone.
        planner.send_message(&ClientMessage::Stopped { session: session.clone() }).await;
        assert_eq!(planner.collect_for(Duration::from_millis(300)).await, vec![]);
        assert_eq!(s.chat().await.len(), chat.len());
        let refused = call(&mut planner, &session, &turn, "read_document", json!({})).await;
        assert!(matches!(refused, ServerMessage::Refusal { ref code, .. } if code == "unknown_turn"), "{refused:?}");
        // @planner starts nothing while archived, and a new session after.
        assert_eq!(s.say(&s.ada, "@planner are you there").await.0, 409);
        assert_eq!(planner.collect_for(Duration::from_millis(200)).await, vec![]);
        assert_eq!(s.act(&s.ada, "unarchive").await.0, 200);
        assert_eq!(s.say(&s.ada, "@planner welcome back").await.0, 201);
        match planner.next_work().await {
            Some(ServerMessage::Invoke { session: new, .. }) => assert_ne!(new, session),
            other => panic!("expected invoke, got {other:?}"),
        }
    }

    async fn deleting_ends_the_planner_session(db) {
        let s = Scene::new(&db).await;
        let (mut planner, session, turn, _) = s.planner_waiting_on_a_question().await;
        let (status, _) = s.server.delete(Some(&s.ada), &s.path("")).await;
        assert_eq!(status, 204);
        match planner.next_work().await {
            Some(ServerMessage::Stop { session: stopping }) => assert_eq!(stopping, session),
            other => panic!("expected stop, got {other:?}"),
        }
        let refused = call(&mut planner, &session, &turn, "read_document", json!({})).await;
        assert!(matches!(refused, ServerMessage::Refusal { ref code, .. } if code == "unknown_turn"), "{refused:?}");
        planner.send_message(&ClientMessage::Stopped { session: session.clone() }).await;
        assert_eq!(planner.collect_for(Duration::from_millis(300)).await, vec![]);
        assert_eq!(s.server.get(Some(&s.ada), &s.path("/planner")).await.0, 404);
        // The machine stays linked and serves the owner's other documents.
        let other = s.server.create_document(&s.ada, "Other").await;
        let (status, _) = s.server.post(Some(&s.ada), &format!("/documents/{other}/chat"), json!({"text": "@planner hi"})).await;
        assert_eq!(status, 201);
        match planner.next_work().await {
            Some(ServerMessage::Invoke { session: new, document, .. }) => {
                assert_ne!(new, session);
                assert_eq!(document, other);
            }
            other => panic!("expected invoke, got {other:?}"),
        }
    }
}
