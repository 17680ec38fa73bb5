//! The acts that end a Planner session in use (SPEC P3) — sign-out,
//! unpairing, revoking, a Planner reset — and `invoke_planner` (T1), over
//! a real link on both backends.

use std::time::Duration;

use margin_protocol::chat::ChatKind;
use margin_protocol::link::RunStatus::Running;
use margin_protocol::link::{ClientMessage, ServerMessage};
use serde_json::{json, Value};

use crate::harness::LinkClient;
use crate::on_both_backends;
use crate::resume::Away;
use crate::turns::{ask_first_paragraph, invoked, reply, report, Scene};

/// A machine of the scene's account, linked (resumable), with a session in
/// use: a live run and an open question.
struct InUse {
    s: Scene,
    /// `None` once dropped.
    link: Option<LinkClient>,
    machine: String,
    credential: String,
    session: String,
}

impl InUse {
    async fn new(db: &crate::harness::TestDb) -> InUse {
        let away = Away::new(db).await;
        let mut link = away.link().await;
        let s = away.s;
        s.say("@planner build it").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        report(&mut link, &session, "build", 1, Running).await;
        ask_first_paragraph(&mut link, &session, &turn).await;
        reply(&mut link, &session, &turn, "Building; one question open.").await;
        s.chat_len(2).await;
        InUse {
            s,
            link: Some(link),
            machine: away.machine,
            credential: away.credential,
            session,
        }
    }

    async fn view(&self) -> Value {
        let path = format!("/documents/{}/planner", self.s.doc);
        self.s.server.get(Some(&self.s.token), &path).await.1
    }

    /// Waits until the document has no session, its question is withdrawn
    /// and Chat says why the session ended.
    async fn until_ended(&self, because: &str) {
        let line = format!("The Planner's session ended: {because}.");
        for _ in 0..300 {
            let (_, cards) = self
                .s
                .server
                .get(
                    Some(&self.s.token),
                    &format!("/documents/{}/decisions", self.s.doc),
                )
                .await;
            let cancelled = cards["decisions"][0]["state"] == "cancelled";
            let said = self
                .s
                .chat()
                .await
                .iter()
                .any(|(kind, text)| *kind == ChatKind::System && *text == line);
            if cancelled && said && self.view().await["session"].is_null() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let path = format!("/documents/{}/decisions", self.s.doc);
        panic!(
            "the session did not end ({line:?}): view {}, chat {:?}, cards {}",
            self.view().await,
            self.s.chat().await,
            self.s.server.get(Some(&self.s.token), &path).await.1
        );
    }

    /// The machine is told to stop the session.
    async fn told_to_stop(&mut self) {
        match self.link.as_mut().expect("linked").next_work().await {
            Some(ServerMessage::Stop { session }) => assert_eq!(session, self.session),
            other => panic!("expected stop, got {other:?}"),
        }
    }
}

on_both_backends! {
    async fn signing_out_ends_the_sessions_of_the_accounts_machines_and_the_token_signs_nobody_in(db) {
        let mut u = InUse::new(&db).await;
        let (status, body) = u.s.server.post(Some(&u.s.token), "/me/sign-out", json!(null)).await;
        assert_eq!(status, 204, "{body}");
        u.told_to_stop().await;
        let (status, _) = u.s.server.get(Some(&u.s.token), "/me").await;
        assert_eq!(status, 401, "the token signs nobody in");
        // Read as another token of the same account.
        let token = margin_server::auth::issue_token(u.s.server.store(), &u.s.server.store().account_by_name("ada").await.unwrap()).await.unwrap();
        u.s.token = token;
        u.until_ended("the owner signed out").await;
    }

    async fn unpairing_a_machine_ends_its_sessions_and_its_credential_opens_no_link(db) {
        let mut u = InUse::new(&db).await;
        let (status, body) = u.s.server.delete(Some(&u.credential), "/machine").await;
        assert_eq!(status, 204, "{body}");
        u.told_to_stop().await;
        u.until_ended("the machine was unpaired").await;
        assert!(LinkClient::connect(u.s.server.addr, &u.credential).await.is_err(), "an unpaired machine links no more");
    }

    async fn revoking_a_machine_while_it_is_away_ends_its_sessions(db) {
        let mut u = InUse::new(&db).await;
        let machine = u.machine.clone();
        drop(u.link.take());
        for _ in 0..300 {
            if u.view().await["disconnected"] == json!(true) { break; }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(u.view().await["disconnected"], json!(true), "kept while away (L2)");
        let (status, body) = u.s.server.delete(Some(&u.s.token), &format!("/machines/{machine}")).await;
        assert_eq!(status, 204, "{body}");
        u.until_ended("the machine was revoked").await;
    }

    async fn revoking_the_machine_a_session_moved_to_ends_it_also_after_a_restart(db) {
        let mut u = InUse::new(&db).await;
        drop(u.link.take());
        let (status, paired) = u.s.server.post(Some(&u.s.token), "/machines", json!({"name": "desktop"})).await;
        assert_eq!(status, 201, "{paired}");
        let desktop = paired["machine"]["id"].as_str().unwrap().to_owned();
        let mut link = LinkClient::connect(u.s.server.addr, paired["credential"].as_str().unwrap()).await.unwrap();
        assert!(matches!(link.hello().await, ServerMessage::Welcome { .. }));
        link.send_text(&json!({"type": "resume", "sessions": [{"session": u.session, "questions": []}]}).to_string()).await;
        match link.next_work().await {
            Some(ServerMessage::Resumed { sessions, .. }) => assert_eq!(sessions.len(), 1, "{sessions:?}"),
            other => panic!("expected resumed, got {other:?}"),
        }
        assert_eq!(u.view().await["machine"], "desktop", "people see the machine that runs it");
        let (_, snapshot) = u.s.server.get(Some(&u.s.token), &format!("/sessions/{}", u.session)).await;
        assert_eq!(snapshot["machine"], "desktop", "and so does its feed (E2)");
        drop(link);
        u.s.server.restart().await;
        let (status, body) = u.s.server.delete(Some(&u.s.token), &format!("/machines/{desktop}")).await;
        assert_eq!(status, 204, "{body}");
        u.until_ended("the machine was revoked").await;
    }

    async fn a_planner_reset_ends_a_session_in_use_and_the_next_message_starts_a_new_one(db) {
        let mut u = InUse::new(&db).await;
        let reset = format!("/documents/{}/planner/reset", u.s.doc);
        let (status, body) = u.s.server.post(Some(&u.s.token), &reset, json!(null)).await;
        assert_eq!(status, 204, "{body}");
        u.told_to_stop().await;
        u.until_ended("the Planner was reset").await;
        let link = u.link.as_mut().expect("linked");
        link.send_message(&ClientMessage::Stopped { session: u.session.clone() }).await;
        u.s.say("@planner start over").await;
        let (session, _, messages, _) = invoked(link).await;
        assert_ne!(session, u.session, "a new session");
        assert_eq!(messages, vec!["@planner start over".to_owned()]);
        // Nothing left to reset is a clear refusal.
        let (status, _) = u.s.server.post(Some(&u.s.token), &reset, json!(null)).await;
        assert_eq!(status, 204);
        let link = u.link.as_mut().expect("linked");
        assert!(matches!(link.next_work().await, Some(ServerMessage::Stop { .. })));
        link.send_message(&ClientMessage::Stopped { session }).await;
        let (status, body) = u.s.server.post(Some(&u.s.token), &reset, json!(null)).await;
        assert_eq!((status, body["error"]["code"].as_str()), (409, Some("no_planner_session")), "{body}");
    }

    async fn invoke_planner_hands_a_message_to_the_planner_without_a_mention_and_viewers_cannot(db) {
        let s = Scene::new(&db).await;
        let mut planner = s.planner().await;
        let invoke = format!("/documents/{}/planner/invoke", s.doc);
        let (status, posted) = s.server.post(Some(&s.token), &invoke, json!({"text": "draft the launch plan"})).await;
        assert_eq!(status, 201, "{posted}");
        assert_eq!(posted["text"], "draft the launch plan");
        let (_, _, messages, _) = invoked(&mut planner).await;
        assert_eq!(messages, vec!["draft the launch plan".to_owned()]);
        let chat = s.chat_len(1).await;
        assert_eq!(chat[0], (ChatKind::Member, "draft the launch plan".to_owned()));
        // Bad input changes nothing; a viewer cannot call the Planner.
        let (status, body) = s.server.post(Some(&s.token), &invoke, json!({"text": ""})).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_message")), "{body}");
        let (_, vic) = s.server.account("vic").await;
        let members = format!("/documents/{}/members", s.doc);
        let (status, _) = s.server.post(Some(&s.token), &members, json!({"account": "vic", "role": "viewer"})).await;
        assert_eq!(status, 200);
        let (status, _) = s.server.post(Some(&vic), &invoke, json!({"text": "hello"})).await;
        assert_eq!(status, 403);
        assert_eq!(s.chat().await.len(), 1);
    }
}

on_both_backends! {
    async fn a_reset_whose_end_is_not_committed_fails_and_the_session_carries_on(db) {
        // SPEC P3: a session ends when its end is committed; until then
        // whoever asked is told it failed, never that it is done.
        let mut u = InUse::new(&db).await;
        db.refuse_journal_writes().await;
        let reset = format!("/documents/{}/planner/reset", u.s.doc);
        let (status, body) = u.s.server.post(Some(&u.s.token), &reset, json!(null)).await;
        assert_eq!((status, body["error"]["code"].as_str()), (500, Some("internal")), "{body}");
        assert_eq!(u.view().await["session"], json!(u.session), "the session carries on");
        db.accept_journal_writes().await;
        let (status, body) = u.s.server.post(Some(&u.s.token), &reset, json!(null)).await;
        assert_eq!(status, 204, "{body}");
        u.told_to_stop().await;
        u.until_ended("the Planner was reset").await;
    }

    async fn archiving_whose_session_end_is_not_committed_fails_and_finishes_when_repeated(db) {
        let mut u = InUse::new(&db).await;
        db.refuse_journal_writes().await;
        let archive = format!("/documents/{}/archive", u.s.doc);
        let (status, body) = u.s.server.post(Some(&u.s.token), &archive, json!(null)).await;
        assert_eq!((status, body["error"]["code"].as_str()), (500, Some("internal")), "{body}");
        assert_eq!(u.view().await["session"], json!(u.session), "the session carries on");
        db.accept_journal_writes().await;
        let (status, body) = u.s.server.post(Some(&u.s.token), &archive, json!(null)).await;
        assert_eq!(status, 200, "{body}");
        u.told_to_stop().await;
        u.until_ended("the document was archived").await;
    }
}
