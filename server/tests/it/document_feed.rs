//! A document's feed for the people watching it, `GET /documents/{id}/events`
//! (SPEC B1, B1a, T1, L2, E3): its Chat lines pushed as they are committed,
//! resumed after the last one a client got, and the Planner's status pushed
//! as it changes, driven by a real machine link — on both backends.

use std::time::Duration;

use margin_protocol::link::{ClientMessage, PlannerState, PlannerView, RunStatus};
use margin_protocol::Role;

use crate::harness::{LinkClient, Sse, SseEvent};
use crate::on_both_backends;
use crate::turns::{invoked, Scene};

fn events_path(s: &Scene) -> String {
    format!("/documents/{}/events", s.doc)
}

/// Opens the feed; its first event, the document as the caller sees it,
/// is checked and taken.
async fn open(s: &Scene, token: &str, last_event_id: Option<&str>) -> Sse {
    let mut feed = Sse::open(s.server.addr, token, &events_path(s), last_event_id)
        .await
        .unwrap_or_else(|(status, body)| panic!("the feed did not open: {status} {body}"));
    let first = feed.next().await.expect("the document first");
    assert_eq!(
        (first.event.as_str(), first.id),
        ("document", None),
        "{first:?}"
    );
    let doc: serde_json::Value = serde_json::from_str(&first.data).unwrap();
    assert_eq!(doc["id"], s.doc.as_str());
    feed
}

/// The next `document` event's body, skipping others.
async fn next_document(feed: &mut Sse) -> serde_json::Value {
    loop {
        let event = feed.next().await.expect("a document event");
        if event.event == "document" {
            return serde_json::from_str(&event.data).unwrap();
        }
    }
}

fn planner(event: &SseEvent) -> PlannerView {
    assert_eq!(
        (event.event.as_str(), event.id),
        ("planner", None),
        "{event:?}"
    );
    serde_json::from_str(&event.data).unwrap()
}

/// The next Chat line's (seq, text), skipping Planner views.
async fn next_chat(feed: &mut Sse) -> (u64, String) {
    loop {
        let event = feed.next().await.expect("a Chat line");
        if event.event == "chat" {
            let line: serde_json::Value = serde_json::from_str(&event.data).unwrap();
            assert_eq!(event.id, line["seq"].as_u64(), "a line's SSE id is its seq");
            return (
                line["seq"].as_u64().unwrap(),
                line["text"].as_str().unwrap().to_owned(),
            );
        }
    }
}

/// Planner views until one is in `state`; panics if the feed goes quiet.
async fn until_state(feed: &mut Sse, state: PlannerState) -> PlannerView {
    loop {
        let event = feed
            .next()
            .await
            .unwrap_or_else(|| panic!("no Planner view in state {state:?}"));
        if event.event == "planner" {
            let view = planner(&event);
            if view.state == state {
                return view;
            }
        }
    }
}

on_both_backends! {
    async fn the_feed_pushes_chat_lines_as_they_are_committed_and_resumes_after_the_last_id(db) {
        let s = Scene::new(&db).await;
        s.say("first").await;
        let mut feed = open(&s, &s.token, None).await;
        let first = feed.next().await.unwrap();
        assert_eq!(planner(&first).state, PlannerState::Unlinked, "the Planner's status comes first");
        assert_eq!(next_chat(&mut feed).await, (1, "first".into()), "then the lines so far");
        s.say("second").await;
        assert_eq!(next_chat(&mut feed).await, (2, "second".into()), "then each new line, live");
        drop(feed);

        s.say("third").await;
        let mut again = open(&s, &s.token, Some("2")).await;
        assert_eq!(planner(&again.next().await.unwrap()).state, PlannerState::Unlinked);
        assert_eq!(next_chat(&mut again).await, (3, "third".into()), "only lines after Last-Event-ID");
        assert_eq!(again.within(Duration::from_millis(300)).await, None, "and nothing else");
    }

    async fn the_feed_tells_a_member_of_a_rename_an_archive_and_a_new_role_and_ends_on_removal(db) {
        let s = Scene::new(&db).await;
        let (bo_account, bo) = s.server.account("bo").await;
        s.server.store().set_member(&s.doc, &bo_account, Role::Editor).await.unwrap();
        let mut feed = open(&s, &bo, None).await;
        let doc = format!("/documents/{}", s.doc);
        let (status, _) = s.server.patch(Some(&s.token), &doc, serde_json::json!({"title": "Launch"})).await;
        assert_eq!(status, 200);
        assert_eq!(next_document(&mut feed).await["title"], "Launch");
        let (status, _) = s.server.post(Some(&s.token), &format!("{doc}/archive"), serde_json::json!({})).await;
        assert_eq!(status, 200);
        assert_eq!(next_document(&mut feed).await["archived"], true);
        let (status, _) = s.server.post(Some(&s.token), &format!("{doc}/unarchive"), serde_json::json!({})).await;
        assert_eq!(status, 200);
        assert_eq!(next_document(&mut feed).await["archived"], false);
        let (status, _) = s.server.post(Some(&s.token), &format!("{doc}/members"), serde_json::json!({"account": "bo", "role": "viewer"})).await;
        assert_eq!(status, 200);
        assert_eq!(next_document(&mut feed).await["role"], "viewer");
        let (status, _) = s.server.delete(Some(&s.token), &format!("{doc}/members/bo")).await;
        assert_eq!(status, 204);
        assert!(feed.ends().await, "a removed member's feed ends");
        let (status, _) = Sse::open(s.server.addr, &bo, &events_path(&s), None).await.err().unwrap();
        assert_eq!(status, 404, "and does not open again");
    }

    async fn the_feed_is_for_members_and_refuses_a_bad_cursor(db) {
        let s = Scene::new(&db).await;
        let (viewer, vic) = s.server.account("vic").await;
        s.server.store().set_member(&s.doc, &viewer, Role::Viewer).await.unwrap();
        let (_, cy) = s.server.account("cy").await;
        s.say("hello").await;
        let mut feed = open(&s, &vic, None).await;
        assert_eq!(next_chat(&mut feed).await, (1, "hello".into()), "a viewer follows Chat");
        let (status, body) = Sse::open(s.server.addr, &cy, &events_path(&s), None).await.err().unwrap();
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("document_not_found")));
        let (status, body) = Sse::open(s.server.addr, &s.token, &events_path(&s), Some("x1")).await.err().unwrap();
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_cursor")));
    }

    async fn the_feed_follows_the_planner_through_a_real_link(db) {
        let s = Scene::new(&db).await;
        let mut feed = open(&s, &s.token, None).await;
        assert_eq!(planner(&feed.next().await.unwrap()).state, PlannerState::Unlinked);

        let mut link: LinkClient = s.planner().await;
        let available = until_state(&mut feed, PlannerState::Available).await;
        assert_eq!(available.machine.as_deref(), Some("laptop"), "linked, before any session");
        assert_eq!(available.session, None);

        s.say("@planner build it").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        let working = until_state(&mut feed, PlannerState::Working).await;
        assert_eq!(working.session.as_deref(), Some(session.as_str()));
        // A session is named only once its start is committed: its snapshot
        // reads at once (W2a).
        let (status, _) = s.server.get(Some(&s.token), &format!("/sessions/{session}")).await;
        assert_eq!(status, 200);
        link.send_message(&ClientMessage::Run {
            session: session.clone(),
            run: "r1".into(),
            name: "Build".into(),
            status: RunStatus::Running,
            attempt: None,
        })
        .await;
        link.send_message(&ClientMessage::Reply {
            session: session.clone(),
            turn,
            text: "Building.".into(),
        })
        .await;
        let (_, line) = next_chat_skipping(&mut feed, "Building.").await;
        assert_eq!(line, "Building.", "the Planner's reply is pushed");

        link.send_message(&ClientMessage::Run {
            session: session.clone(),
            run: "r1".into(),
            name: "Build".into(),
            status: RunStatus::Completed,
            attempt: None,
        })
        .await;
        let done = until_state(&mut feed, PlannerState::Available).await;
        assert!(done.runs[0].ended_at.is_some(), "the run card says when it ended");

        drop(link);
        let away = until_state(&mut feed, PlannerState::Disconnected).await;
        assert!(away.disconnected, "the machine dropped its link");
    }

    async fn a_confirmed_stop_shows_as_stopped_until_the_next_session(db) {
        let s = Scene::new(&db).await;
        let mut link = s.planner().await;
        s.say("@planner build it").await;
        let (session, _, _, _) = invoked(&mut link).await;
        let mut feed = open(&s, &s.token, None).await;
        until_state(&mut feed, PlannerState::Working).await;
        let (status, body) = s.server.post(Some(&s.token), &format!("/documents/{}/planner/stop", s.doc), serde_json::json!({})).await;
        assert_eq!(status, 202, "{body}");
        until_state(&mut feed, PlannerState::Stopping).await;
        assert!(matches!(link.next_work().await, Some(margin_protocol::link::ServerMessage::Stop { .. })));
        link.send_message(&ClientMessage::Stopped { session }).await;
        let stopped = until_state(&mut feed, PlannerState::Stopped).await;
        assert_eq!(stopped.machine.as_deref(), Some("laptop"));
        // It stays stopped once the session has left the registry.
        while let Some(event) = feed.within(Duration::from_millis(500)).await {
            if event.event == "planner" {
                assert_eq!(planner(&event).state, PlannerState::Stopped, "{event:?}");
            }
        }
        let (_, view) = s.server.get(Some(&s.token), &format!("/documents/{}/planner", s.doc)).await;
        assert_eq!((view["state"].as_str(), view.get("session")), (Some("stopped"), None));
        s.say("@planner again").await;
        invoked(&mut link).await;
        until_state(&mut feed, PlannerState::Working).await;
    }
}

/// The next Chat line whose text is `text`.
async fn next_chat_skipping(feed: &mut Sse, text: &str) -> (u64, String) {
    loop {
        let line = next_chat(feed).await;
        if line.1 == text {
            return line;
        }
    }
}
