//! What the document list says of each document: when it was created, when
//! its text last changed and by whom — a person's sync edit, an `edit_plan`
//! over HTTP or from a Planner session, never the server's own mirror of
//! decision cards — the list's order, and renaming. On both backends.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use margin_protocol::link::ServerMessage;
use margin_protocol::DocumentInfo;
use serde_json::json;

use crate::harness::{InProcess, SyncClient};
use crate::on_both_backends;
use crate::turns::{call, invoked};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn code(body: &serde_json::Value) -> Option<&str> {
    body["error"]["code"].as_str()
}

/// Document `doc` as `token` sees it.
async fn shown(server: &InProcess, token: &str, doc: &str) -> DocumentInfo {
    let (status, body) = server.get(Some(token), &format!("/documents/{doc}")).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).unwrap()
}

/// Waits until `doc` reaches `revision`.
async fn settled(server: &InProcess, token: &str, doc: &str, revision: i64) {
    for _ in 0..400 {
        if server.block_texts(token, doc).await.0 >= revision {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("revision {revision} never arrived");
}

/// ada's document shared with bo (editor) and cy (viewer).
async fn shared(db: &crate::harness::TestDb) -> (InProcess, String, String, String, String) {
    let server = InProcess::start(db).await;
    let (_, ada) = server.account("ada").await;
    let (_, bo) = server.account("bo").await;
    let (_, cy) = server.account("cy").await;
    let doc = server.create_document(&ada, "Plan").await;
    for (account, role) in [("bo", "editor"), ("cy", "viewer")] {
        let (status, body) = server
            .post(
                Some(&ada),
                &format!("/documents/{doc}/members"),
                json!({"account": account, "role": role}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    (server, ada, bo, cy, doc)
}

/// `read_document` over HTTP as `token`.
async fn read(server: &InProcess, token: &str, doc: &str) -> serde_json::Value {
    let (status, read) = server
        .post(
            Some(token),
            &format!("/documents/{doc}/tools/read_document"),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{read}");
    read
}

on_both_backends! {
    async fn a_new_document_says_when_it_was_created_and_that_nobody_edited_it(db) {
        let server = InProcess::start(&db).await;
        let (_, ada) = server.account("ada").await;
        let before = now_ms();
        let (status, created) = server.post(Some(&ada), "/documents", json!({"title": "Plan"})).await;
        let after = now_ms();
        assert_eq!(status, 201, "{created}");
        let info: DocumentInfo = serde_json::from_value(created.clone()).unwrap();
        assert!((before..=after).contains(&info.created_at), "{created}");
        assert_eq!(
            created,
            json!({"id": info.id, "title": "Plan", "revision": 0, "role": "owner", "archived": false,
                   "created_at": info.created_at, "edited_at": null, "edited_by": null})
        );
        assert_eq!(shown(&server, &ada, &info.id).await, info);
    }

    async fn a_persons_sync_edit_names_them_as_its_last_editor(db) {
        let (server, ada, bo, _, doc) = shared(&db).await;
        let before = now_ms();
        let mut bo_client = SyncClient::connect(&server.sync_url(&doc, &bo)).await;
        bo_client.append_paragraph("Ship in March").await;
        settled(&server, &ada, &doc, 1).await;
        let info = shown(&server, &ada, &doc).await;
        assert_eq!(info.edited_by.as_deref(), Some("bo"));
        let edited = info.edited_at.unwrap();
        assert!((before..=now_ms()).contains(&edited), "{info:?}");
        // Every member sees the same.
        assert_eq!(shown(&server, &bo, &doc).await.edited_by.as_deref(), Some("bo"));

        let mut ada_client = SyncClient::connect(&server.sync_url(&doc, &ada)).await;
        ada_client.append_paragraph("Or April").await;
        settled(&server, &ada, &doc, 2).await;
        let info = shown(&server, &bo, &doc).await;
        assert_eq!(info.edited_by.as_deref(), Some("ada"));
        assert!(info.edited_at.unwrap() >= edited, "{info:?}");
    }

    async fn an_edit_plan_over_http_names_its_caller(db) {
        let (server, ada, bo, _, doc) = shared(&db).await;
        let read = read(&server, &bo, &doc).await;
        let edits = json!({"revision": read["revision"], "edits": [{"op": "insert", "kind": "paragraph", "text": "From a script"}]});
        let (status, edited) = server.post(Some(&bo), &format!("/documents/{doc}/tools/edit_plan"), edits).await;
        assert_eq!(status, 200, "{edited}");
        let info = shown(&server, &ada, &doc).await;
        assert_eq!((info.revision, info.edited_by.as_deref()), (1, Some("bo")), "{info:?}");
        assert!(info.edited_at.is_some());
        // A refused edit_plan changes nothing, its caller included.
        let stale = json!({"revision": 0, "edits": [{"op": "insert", "kind": "paragraph", "text": "Late"}]});
        let (status, refused) = server.post(Some(&ada), &format!("/documents/{doc}/tools/edit_plan"), stale).await;
        assert_eq!((status, code(&refused)), (422, Some("stale_revision")), "{refused}");
        assert_eq!(shown(&server, &ada, &doc).await, info);
    }

    async fn an_edit_plan_from_a_planner_session_names_the_planner(db) {
        let s = crate::turns::Scene::new(&db).await;
        settled(&s.server, &s.token, &s.doc, 1).await;
        let mut link = s.planner().await;
        s.say("@planner tidy this up").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        let ServerMessage::ToolResult { output: Some(read), .. } =
            call(&mut link, &session, &turn, "read_document", json!({})).await
        else {
            panic!("read_document failed")
        };
        let read = serde_json::to_value(&read).unwrap();
        let address = json!({"index": 0, "digest": read["outline"][0]["digest"]});
        let edits = json!({"revision": read["revision"], "edits": [{"op": "replace", "at": address, "text": "Pick a region: EU"}]});
        let ServerMessage::ToolResult { error: None, .. } = call(&mut link, &session, &turn, "edit_plan", edits).await else {
            panic!("edit_plan failed")
        };
        let info = shown(&s.server, &s.token, &s.doc).await;
        assert_eq!((info.revision, info.edited_by.as_deref()), (2, Some("planner")), "{info:?}");
    }

    async fn the_servers_mirror_of_decision_cards_is_not_an_edit(db) {
        let (server, ada, bo, _, doc) = shared(&db).await;
        let mut bo_client = SyncClient::connect(&server.sync_url(&doc, &bo)).await;
        bo_client.append_paragraph("Which region first?").await;
        settled(&server, &ada, &doc, 1).await;
        let edited = shown(&server, &ada, &doc).await;
        assert_eq!(edited.edited_by.as_deref(), Some("bo"));

        // A new card is mirrored into the document: a revision, not an edit.
        let read = read(&server, &ada, &doc).await;
        let card = json!({"key": "region", "question": "Which region first?", "response": "single_choice",
            "choices": ["EU", "US"], "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}]});
        let (status, opened) = server
            .post(Some(&ada), &format!("/documents/{doc}/tools/open_decisions"),
                  json!({"revision": read["revision"], "cards": [card]}))
            .await;
        assert_eq!(status, 200, "{opened}");
        let after_card = shown(&server, &ada, &doc).await;
        assert_eq!(after_card.revision, 2, "{after_card:?}");
        assert_eq!((after_card.edited_at, after_card.edited_by), (edited.edited_at, edited.edited_by.clone()));

        // So is a person's answer, mirrored the same way.
        let id = opened["captures"][0]["card_id"].as_str().unwrap();
        let (_, listed) = server.get(Some(&ada), &format!("/documents/{doc}/decisions")).await;
        let choice = listed["decisions"][0]["choices"][0]["id"].clone();
        let (status, answered) = server
            .post(Some(&ada), &format!("/documents/{doc}/decisions/{id}/answer"), json!({"choices": [choice]}))
            .await;
        assert_eq!(status, 200, "{answered}");
        settled(&server, &ada, &doc, 3).await;
        let after_answer = shown(&server, &ada, &doc).await;
        assert_eq!((after_answer.edited_at, after_answer.edited_by), (edited.edited_at, edited.edited_by));
    }

    async fn documents_are_listed_most_recently_edited_first(db) {
        let server = InProcess::start(&db).await;
        let (_, ada) = server.account("ada").await;
        let mut docs = Vec::new();
        for title in ["First", "Second", "Third"] {
            docs.push(server.create_document(&ada, title).await);
            // Apart by a few milliseconds, so creation times differ.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let titles = || async {
            let (status, list) = server.get(Some(&ada), "/documents").await;
            assert_eq!(status, 200, "{list}");
            list["documents"].as_array().unwrap().iter().map(|d| d["title"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
        };
        assert_eq!(titles().await, ["Third", "Second", "First"]);
        let mut client = SyncClient::connect(&server.sync_url(&docs[0], &ada)).await;
        client.append_paragraph("Edited last").await;
        settled(&server, &ada, &docs[0], 1).await;
        assert_eq!(titles().await, ["First", "Third", "Second"]);
    }

    async fn owners_and_editors_rename_a_document_and_viewers_cannot(db) {
        let (server, ada, bo, cy, doc) = shared(&db).await;
        let path = format!("/documents/{doc}");
        let before = shown(&server, &ada, &doc).await;
        let (status, renamed) = server.patch(Some(&ada), &path, json!({"title": "  Q3 launch "})).await;
        assert_eq!(status, 200, "{renamed}");
        let expected = DocumentInfo { title: "Q3 launch".into(), ..before.clone() };
        assert_eq!(serde_json::from_value::<DocumentInfo>(renamed).unwrap(), expected);
        let (status, renamed) = server.patch(Some(&bo), &path, json!({"title": "Q4 launch"})).await;
        assert_eq!(status, 200, "{renamed}");
        // Each member sees it under the new name, with their own role; a
        // rename is not an edit of the text.
        let seen = shown(&server, &bo, &doc).await;
        assert_eq!((seen.title.as_str(), seen.role, seen.edited_at), ("Q4 launch", margin_protocol::Role::Editor, None));
        let (_, listed) = server.get(Some(&cy), "/documents").await;
        assert_eq!(listed["documents"][0]["title"], "Q4 launch");

        let (status, body) = server.patch(Some(&cy), &path, json!({"title": "Mine now"})).await;
        assert_eq!((status, code(&body)), (403, Some("forbidden")), "{body}");
        let (_, eve) = server.account("eve").await;
        let (status, body) = server.patch(Some(&eve), &path, json!({"title": "Mine now"})).await;
        assert_eq!((status, code(&body)), (404, Some("document_not_found")), "{body}");
        let (status, _) = server.patch(None, &path, json!({"title": "Mine now"})).await;
        assert_eq!(status, 401);
        assert_eq!(shown(&server, &ada, &doc).await.title, "Q4 launch");
    }

    async fn a_title_the_rules_refuse_renames_nothing(db) {
        let (server, ada, _, _, doc) = shared(&db).await;
        let path = format!("/documents/{doc}");
        for (body, expected) in [
            (json!({"title": ""}), "invalid_title"),
            (json!({"title": "   "}), "invalid_title"),
            (json!({"title": "x".repeat(201)}), "invalid_title"),
            (json!({"title": "a\u{7}b"}), "invalid_title"),
            (json!({"title": "a\nb"}), "invalid_title"),
            (json!({"title": "ok", "revision": 3}), "invalid_body"),
            (json!({"name": "ok"}), "invalid_body"),
            (json!(["ok"]), "invalid_body"),
        ] {
            let (status, refused) = server.patch(Some(&ada), &path, body.clone()).await;
            assert_eq!((status, code(&refused)), (400, Some(expected)), "{body}: {refused}");
            assert!(!refused["error"]["message"].as_str().unwrap().is_empty());
        }
        assert_eq!(shown(&server, &ada, &doc).await.title, "Plan");
        // 200 bytes of multi-byte characters is at the limit.
        let (status, renamed) = server.patch(Some(&ada), &path, json!({"title": "é".repeat(100)})).await;
        assert_eq!((status, renamed["title"].as_str().map(str::len)), (200, Some(200)), "{renamed}");
    }

    async fn an_archived_document_keeps_its_title(db) {
        let (server, ada, bo, _, doc) = shared(&db).await;
        let path = format!("/documents/{doc}");
        let (status, _) = server.post(Some(&ada), &format!("{path}/archive"), json!(null)).await;
        assert_eq!(status, 200);
        for token in [&ada, &bo] {
            let (status, refused) = server.patch(Some(token), &path, json!({"title": "Renamed"})).await;
            assert_eq!((status, code(&refused)), (409, Some("archived")), "{refused}");
        }
        assert_eq!(shown(&server, &ada, &doc).await.title, "Plan");
        let (status, _) = server.post(Some(&ada), &format!("{path}/unarchive"), json!(null)).await;
        assert_eq!(status, 200);
        let (status, renamed) = server.patch(Some(&bo), &path, json!({"title": "Renamed"})).await;
        assert_eq!((status, renamed["title"].as_str()), (200, Some("Renamed")), "{renamed}");
    }
}
