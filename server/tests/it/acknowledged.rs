//! What a machine sends that changes state survives a link that died
//! silently (SPEC L10): a `reply` is answered with `reply-received` once
//! committed, a `run` report with `run-received`, and a copy sent again
//! after `resume` is posted at most once and never revives an ended run.

use margin_protocol::chat::ChatKind;
use margin_protocol::link::RunStatus::{Completed, Running};
use margin_protocol::link::{RunStatus, ServerMessage};
use margin_protocol::RefusalCode;
use serde_json::json;

use crate::harness::LinkClient;
use crate::on_both_backends;
use crate::resume::Away;
use crate::turns::{invoked, reply, report};

/// Reads `link` until `wanted` is among its acknowledgements.
async fn until_ack(link: &mut LinkClient, wanted: &ServerMessage) {
    for _ in 0..200 {
        if link.acks.contains(wanted) {
            return;
        }
        let other = link.work_within(std::time::Duration::from_millis(25)).await;
        assert!(
            other.is_none() || link.acks.contains(wanted),
            "expected {wanted:?}, got {other:?}"
        );
    }
    panic!("never acknowledged: {wanted:?}; acks {:?}", link.acks);
}

/// Reads `link` until `resumed`, and on until it is quiet, passing over
/// invokes of `turn` in `session` (sent again to a machine that never
/// answered in it, SPEC L10) and failing on anything else.
async fn resumed_past_invokes_of(link: &mut LinkClient, session: &str, turn: &str) {
    let same_turn = |message: &ServerMessage| matches!(message, ServerMessage::Invoke { session: s, turn: t, .. } if s == session && t == turn);
    loop {
        match link.next_work().await {
            Some(ServerMessage::Resumed { ended, .. }) => {
                assert!(ended.is_empty(), "{ended:?}");
                break;
            }
            Some(message) if same_turn(&message) => {}
            other => panic!("expected resumed, got {other:?}"),
        }
    }
    while let Some(message) = link
        .work_within(std::time::Duration::from_millis(200))
        .await
    {
        assert!(same_turn(&message), "{message:?}");
    }
}

fn reply_received(session: &str, turn: &str) -> ServerMessage {
    ServerMessage::ReplyReceived {
        session: session.into(),
        turn: turn.into(),
    }
}

fn run_received(session: &str, run: &str, status: RunStatus) -> ServerMessage {
    ServerMessage::RunReceived {
        session: session.into(),
        run: run.into(),
        attempt: 1,
        status,
    }
}

/// The Planner's lines in Chat.
async fn planner_lines(a: &Away) -> Vec<String> {
    a.s.chat()
        .await
        .into_iter()
        .filter(|(kind, _)| *kind == ChatKind::Planner)
        .map(|(_, text)| text)
        .collect()
}

on_both_backends! {
    async fn a_reply_whose_acknowledgement_was_lost_is_refused_when_sent_again_and_posted_once(db) {
        let a = Away::new(&db).await;
        let mut link = a.link().await;
        a.s.say("@planner draft it").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        reply(&mut link, &session, &turn, "Drafted.").await;
        until_ack(&mut link, &reply_received(&session, &turn)).await;
        // The machine never read the acknowledgement: it still names the
        // turn and sends its reply again.
        drop(link);
        a.until_disconnected().await;
        let mut back = a.link().await;
        back.send_text(&json!({"type": "resume", "sessions": [{"session": session, "turn": turn}]}).to_string())
            .await;
        // The machine never answered in the session, so it may be carried on
        // to the new link at once (SPEC L10) and its invoke come again before
        // `resumed`: the same turn, which a machine runs once.
        resumed_past_invokes_of(&mut back, &session, &turn).await;
        reply(&mut back, &session, &turn, "Drafted.").await;
        match back.next_work().await {
            Some(ServerMessage::Refusal { code: RefusalCode::UnknownTurn, session: Some(s), turn: Some(t), call_id: None, .. }) => {
                assert_eq!((s, t), (session.clone(), turn.clone()));
            }
            other => panic!("expected unknown_turn naming the turn, got {other:?}"),
        }
        assert_eq!(planner_lines(&a).await, ["Drafted."], "posted once");
        let system = a.s.chat().await;
        assert!(!system.iter().any(|(_, t)| t.contains("without the turn")), "{system:?}");
    }

    async fn a_reply_that_never_arrived_is_posted_once_when_sent_again_after_resume(db) {
        let a = Away::new(&db).await;
        let mut link = a.link().await;
        a.s.say("@planner draft it").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        // The reply was written into a link that had already died.
        drop(link);
        a.until_disconnected().await;
        let mut back = a.link().await;
        back.send_text(&json!({"type": "resume", "sessions": [{"session": session, "turn": turn}]}).to_string())
            .await;
        // The machine never answered in the session, so it may be carried on
        // to the new link at once (SPEC L10) and its invoke come again before
        // `resumed`: the same turn, which a machine runs once.
        resumed_past_invokes_of(&mut back, &session, &turn).await;
        reply(&mut back, &session, &turn, "Drafted.").await;
        until_ack(&mut back, &reply_received(&session, &turn)).await;
        assert_eq!(planner_lines(&a).await, ["Drafted."]);
    }

    async fn a_run_report_sent_again_after_resume_is_answered_and_revives_no_ended_run(db) {
        let a = Away::new(&db).await;
        let mut link = a.link().await;
        a.s.say("@planner build it").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        report(&mut link, &session, "build", 1, Running).await;
        until_ack(&mut link, &run_received(&session, "build", Running)).await;
        report(&mut link, &session, "build", 1, Completed).await;
        until_ack(&mut link, &run_received(&session, "build", Completed)).await;
        reply(&mut link, &session, &turn, "Built.").await;
        until_ack(&mut link, &reply_received(&session, &turn)).await;
        drop(link);
        let (mut back, _) = a.resume(json!([{"session": session}])).await;
        for status in [Completed, Running] {
            report(&mut back, &session, "build", 1, status).await;
            until_ack(&mut back, &run_received(&session, "build", status)).await;
        }
        let view = a.view().await;
        assert_eq!(view["runs"][0]["status"], json!("completed"), "{view}");
    }

    async fn an_invoke_lost_with_the_link_is_sent_again_to_a_machine_that_never_answered_in_its_session(db) {
        let a = Away::new(&db).await;
        let link = a.link().await;
        a.s.say("@planner draft it").await;
        // The invoke went into a link that died before the machine read it:
        // the machine knows nothing of the session, and resumes without it.
        drop(link);
        a.until_disconnected().await;
        let mut back = a.link().await;
        back.send_text(&json!({"type": "resume", "sessions": []}).to_string()).await;
        // The invoke may come before `resumed`: a link that opens while the
        // old one's loss is still being handled has the session carried on
        // to it at once (L10), and the resume, sent before the machine saw
        // that invoke, may send it again. A machine runs a turn it runs
        // already once (the SDKs ignore the second); it is the same turn.
        let (mut invoke, mut resumed) = (None, false);
        while invoke.is_none() || !resumed {
            match back.next_work().await {
                Some(ServerMessage::Resumed { ended, .. }) if !resumed => {
                    assert!(ended.is_empty(), "{ended:?}");
                    resumed = true;
                }
                Some(ServerMessage::Invoke { session, turn, messages, .. }) => {
                    let texts: Vec<String> = messages.into_iter().map(|m| m.text).collect();
                    assert!(invoke.as_ref().is_none_or(|(s, t, _)| (s, t) == (&session, &turn)));
                    invoke = Some((session, turn, texts));
                }
                other => panic!("expected resumed and the invoke, got {other:?}"),
            }
        }
        let Some((session, turn, messages)) = invoke else { unreachable!() };
        assert_eq!((turn.as_str(), messages), ("t1", vec!["@planner draft it".to_owned()]));
        // An invoke of the same turn still on its way is no answer to wait.
        while let Some(message) = back.work_within(std::time::Duration::from_millis(200)).await {
            assert!(matches!(&message, ServerMessage::Invoke { turn: t, .. } if *t == turn), "{message:?}");
        }
        reply(&mut back, &session, &turn, "Drafted.").await;
        until_ack(&mut back, &reply_received(&session, &turn)).await;
        assert_eq!(planner_lines(&a).await, ["Drafted."]);
    }

    async fn an_invoke_lost_with_a_link_not_yet_noticed_dead_is_sent_again_on_the_link_that_resumed(db) {
        let a = Away::new(&db).await;
        let old = a.link().await;
        a.s.say("@planner draft it").await;
        // The machine came back on a new link and resumed before the server
        // noticed the old one was dead: the session was not away then.
        let (mut back, resumed) = a.resume(json!([])).await;
        let ServerMessage::Resumed { ended, .. } = resumed else { unreachable!() };
        assert!(ended.is_empty(), "{ended:?}");
        drop(old);
        // Once it notices, the invoke goes again, on the link that resumed.
        let (session, turn, messages, _) = invoked(&mut back).await;
        assert_eq!((turn.as_str(), messages), ("t1", vec!["@planner draft it".to_owned()]));
        reply(&mut back, &session, &turn, "Drafted.").await;
        until_ack(&mut back, &reply_received(&session, &turn)).await;
        assert_eq!(planner_lines(&a).await, ["Drafted."]);
    }

    async fn an_invoke_left_on_a_link_a_resume_took_over_is_sent_again_on_the_new_link(db) {
        let a = Away::new(&db).await;
        let (_old, first) = a.session_with_a_run().await;
        // A second document's @planner goes to the same link, whose invoke
        // the machine never reads.
        let other = a.s.server.create_document(&a.s.token, "Other").await;
        let (status, _) = a.s.server
            .post(Some(&a.s.token), &format!("/documents/{other}/chat"), json!({"text": "@planner draft it"}))
            .await;
        assert_eq!(status, 201);
        // The machine comes back naming only the session it knows: its new
        // link takes the old one over, and the left-out session with it.
        let (mut back, _) = a.resume(json!([{"session": first}])).await;
        let (session, turn, messages, _) = invoked(&mut back).await;
        assert_ne!(session, first);
        assert_eq!((turn.as_str(), messages), ("t1", vec!["@planner draft it".to_owned()]));
    }

    async fn a_session_the_machine_answered_in_and_left_out_of_resume_still_ends(db) {
        let a = Away::new(&db).await;
        let mut link = a.link().await;
        a.s.say("@planner build it").await;
        let (session, _, _, _) = invoked(&mut link).await;
        report(&mut link, &session, "build", 1, Running).await;
        until_ack(&mut link, &run_received(&session, "build", Running)).await;
        drop(link);
        a.until_disconnected().await;
        let (mut back, _) = a.resume(json!([])).await;
        assert!(back.work_within(std::time::Duration::from_millis(300)).await.is_none());
        for _ in 0..500 {
            if a.view().await["session"].is_null() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("a session left out of resume did not end: {}", a.view().await);
    }
}
