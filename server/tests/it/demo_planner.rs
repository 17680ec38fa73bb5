//! The demo Planner (`margin_server::demo`), built on the Rust connector
//! SDK, against a real server: its cards and their replay, the plan it
//! keeps, and `margin serve --demo-planner` as the README runs it, across a
//! restart. Its scene and Chat helpers are the connector tests'.

use std::time::Duration;

use margin_protocol::chat::{ChatKind, ChatList};
use margin_protocol::link::RunStatus;
use margin_sdk::Connector;
use margin_server::demo::DemoPlanner;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::connector::{chat_until, decisions, planner_replies, Scene};
use crate::harness::Server;
use crate::on_both_backends;

on_both_backends! {
    async fn connector_serves_the_demo_planner_which_opens_cards_and_replays_them_on_the_next_turn(db) {
        let s = Scene::new(&db, &["We launch in March.", "Which region first?", "Pricing: TBD."]).await;
        let _detach = s.link(DemoPlanner).await;

        s.say("@planner please review").await;
        let replies = chat_until(&s.server, &s.token, &s.doc, 1, planner_replies).await;
        assert_eq!(replies[0], "I read the plan and found 2 open questions: added 2 decisions.");
        let cards = decisions(&s.server, &s.token, &s.doc).await.decisions;
        let mut questions: Vec<_> = cards.iter().map(|c| (c.question.as_str(), c.state.as_str())).collect();
        questions.sort();
        assert_eq!(questions, [("Decide what is still TBD: Pricing: TBD.", "open"), ("Which region first?", "open")]);
        let view = s.planner_view().await;
        assert_eq!(view.runs.len(), 1);
        assert_eq!(view.runs[0].status, RunStatus::Completed);

        // The same text again: its keys replay the cards (SPEC D3), no twins.
        s.say("@planner once more").await;
        let replies = chat_until(&s.server, &s.token, &s.doc, 2, planner_replies).await;
        assert_eq!(replies[1], "I read the plan and found 2 open questions: 2 decisions already in the document.");
        assert_eq!(decisions(&s.server, &s.token, &s.doc).await.decisions.len(), 2);
    }

    async fn the_demo_planner_keeps_a_plan_it_marks_as_it_goes(db) {
        let s = Scene::new(&db, &["Which region first?"]).await;
        let linked = Connector::new(format!("http://{}", s.server.addr), &s.credential)
            .planning(true)
            .connect()
            .await
            .expect("the connector links");
        let detach = CancellationToken::new();
        tokio::spawn(linked.serve(DemoPlanner, detach.clone().cancelled_owned()));
        s.say("@planner please review").await;
        chat_until(&s.server, &s.token, &s.doc, 1, planner_replies).await;
        let session = s.planner_view().await.session.expect("the view names the session");
        let (status, body) = s.server.get(Some(&s.token), &format!("/sessions/{session}")).await;
        assert_eq!(status, 200, "{body}");
        let snapshot: margin_protocol::sessions::SessionSnapshot = serde_json::from_value(body).unwrap();
        let plan = snapshot.plan.flatten().expect("the demo made a plan");
        // Read, capturing, done: three accepted updates in one turn.
        assert_eq!(plan.revision, 3);
        let marks: Vec<_> = plan.steps.iter().map(|s| (s.id.as_str(), s.status)).collect();
        use margin_protocol::sessions::StepStatus::{Completed, Pending};
        assert_eq!(marks, [("read", Completed), ("capture", Completed), ("answers", Pending)]);
        assert_eq!(plan.steps[2].description, "People answer the decisions beside their paragraphs");
        detach.cancel();
    }

    async fn serve_with_demo_planner_pairs_links_and_opens_cards_in_its_sample_plan(db) {
        let (server, token) = Server::start_with_demo(&db, "ada").await;
        let (status, body) = server.get(Some(&token), "/documents").await;
        assert_eq!(status, 200, "{body}");
        let doc = body["documents"][0]["id"].as_str().expect("a sample document").to_owned();
        server.say(&token, &doc, "@planner review the plan").await;
        let replies = chat_until(&server, &token, &doc, 1, planner_replies).await;
        assert_eq!(replies[0], "I read the plan and found 3 open questions: added 3 decisions.");
        let cards = decisions(&server, &token, &doc).await.decisions;
        let mut kinds: Vec<_> = cards.iter().map(|c| (c.question.as_str(), c.response.as_str())).collect();
        kinds.sort();
        assert_eq!(kinds, [
            ("Decide what is still TBD: Pricing for the team plan: TBD.", "free_text"),
            ("Should the beta be invite-only?", "yes_no"),
            ("Which region do we launch in first?", "free_text"),
        ]);
    }

    async fn a_restarted_demo_planner_keeps_its_machine_resumes_its_session_and_says_nothing_false(db) {
        let (mut server, token) = Server::start_with_demo(&db, "ada").await;
        let (_, body) = server.get(Some(&token), "/documents").await;
        let doc = body["documents"][0]["id"].as_str().expect("a sample document").to_owned();
        server.say(&token, &doc, "@planner review the plan").await;
        chat_until(&server, &token, &doc, 1, planner_replies).await;
        let planner = format!("/documents/{doc}/planner");
        let (_, view) = server.get(Some(&token), &planner).await;
        let session = view["session"].as_str().expect("a session").to_owned();
        let (_, machines) = server.get(Some(&token), "/machines").await;
        server.restart().await;
        // The same machine links again and resumes the same session.
        let mut view = serde_json::Value::Null;
        for _ in 0..500 {
            view = server.get(Some(&token), &planner).await.1;
            if view["connected"] == json!(true) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!((view["connected"].as_bool(), view["session"].as_str()), (Some(true), Some(session.as_str())), "{view}");
        assert_eq!(server.get(Some(&token), "/machines").await.1, machines, "no machine paired or revoked");
        server.say(&token, &doc, "@planner again").await;
        chat_until(&server, &token, &doc, 2, planner_replies).await;
        let (_, body) = server.get(Some(&token), &format!("/documents/{doc}/chat")).await;
        let lines: ChatList = serde_json::from_value(body).unwrap();
        let system: Vec<_> = lines.messages.iter().filter(|m| m.kind == ChatKind::System).map(|m| m.text.as_str()).collect();
        assert!(system.is_empty(), "a restart says nothing in Chat: {system:?}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let credential = db.data_dir().join("demo-planner-ada.credential");
            let mode = std::fs::metadata(&credential).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "the demo's credential is private");
        }
    }
}
