//! Dropped links end nothing (SPEC L1–L7): a resumable link's sessions in
//! use are kept with no deadline while the machine is away; `resume` and
//! `resumed`; held answers until acknowledged; held Stops and their
//! wording; hand-over; withdrawal while down; leases for a detach. Over
//! real sockets, with a test Planner speaking the link's JSON, on both
//! backends.

use std::time::Duration;

use margin_protocol::chat::ChatKind;
use margin_protocol::link::RunStatus::Running;
use margin_protocol::link::{close, ClientMessage, ServerMessage};
use serde_json::json;

use crate::harness::{LinkClient, SyncClient, TestDb};
use crate::on_both_backends;
use crate::turns::{ask_first_paragraph, call, invoked, reply, report, Scene};

const DISCONNECTED: &str =
    "The Planner disconnected. Its runs and questions are kept until it reconnects; answers wait for it.";
const RECONNECTED: &str = "The Planner reconnected.";

/// A Scene with a paired machine whose credential links again and again.
pub(crate) struct Away {
    pub s: Scene,
    pub credential: String,
    /// The machine's id.
    pub machine: String,
}

impl Away {
    pub async fn new(db: &TestDb) -> Away {
        Self::with(db, |_| {}).await
    }

    pub async fn with(
        db: &TestDb,
        adjust: impl FnOnce(&mut margin_server::serve::ServeOptions),
    ) -> Away {
        let s = Scene::with(db, adjust).await;
        let (status, paired) = s
            .server
            .post(Some(&s.token), "/machines", json!({"name": "laptop"}))
            .await;
        assert_eq!(status, 201);
        let credential = paired["credential"].as_str().unwrap().to_owned();
        let machine = paired["machine"]["id"].as_str().unwrap().to_owned();
        Away {
            s,
            credential,
            machine,
        }
    }

    /// A resumable link, welcomed.
    pub async fn link(&self) -> LinkClient {
        let mut link = LinkClient::connect(self.s.server.addr, &self.credential)
            .await
            .unwrap();
        assert!(matches!(link.hello().await, ServerMessage::Welcome { .. }));
        link
    }

    /// A new link that resumes `sessions` (session, questions) and gets
    /// `resumed`.
    pub(crate) async fn resume(&self, sessions: serde_json::Value) -> (LinkClient, ServerMessage) {
        let mut link = self.link().await;
        link.send_text(&json!({"type": "resume", "sessions": sessions}).to_string())
            .await;
        let resumed = link.next_work().await.expect("resumed");
        assert!(
            matches!(resumed, ServerMessage::Resumed { .. }),
            "{resumed:?}"
        );
        (link, resumed)
    }

    /// A session with a live run, after its first turn.
    pub(crate) async fn session_with_a_run(&self) -> (LinkClient, String) {
        let mut link = self.link().await;
        self.s.say("@planner build it").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        report(&mut link, &session, "build", 1, Running).await;
        reply(&mut link, &session, &turn, "Building.").await;
        self.s.chat_len(2).await;
        (link, session)
    }

    /// The control of a test that a timer spares a session: another
    /// document's session on `link`, its turn replied, nothing in use.
    async fn idle_session_on(&self, link: &mut LinkClient, other: &str) {
        self.s
            .server
            .say(&self.s.token, other, "@planner tidy up")
            .await;
        let (idle, turn, _, _) = invoked(link).await;
        reply(link, &idle, &turn, "Tidied.").await;
        let chat = format!("/documents/{other}/chat");
        for _ in 0..1000 {
            if self.s.server.get(Some(&self.s.token), &chat).await.1["messages"]
                .as_array()
                .map_or(0, Vec::len)
                == 2
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the control's reply never reached Chat");
    }

    /// Waits until `document` has no Planner session.
    async fn until_no_session(&self, document: &str) {
        let view = format!("/documents/{document}/planner");
        for _ in 0..1000 {
            if self.s.server.get(Some(&self.s.token), &view).await.1["session"].is_null() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let seen = self.s.server.get(Some(&self.s.token), &view).await.1;
        panic!("the session of {document} never ended: {seen}");
    }

    /// A session waiting on one question (no run), after its first turn.
    async fn session_with_a_question(&self) -> (LinkClient, String, String) {
        let mut link = self.link().await;
        self.s.say("@planner plan the launch").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        let card = ask_first_paragraph(&mut link, &session, &turn).await;
        reply(&mut link, &session, &turn, "Asked.").await;
        self.s.chat_len(2).await;
        (link, session, card)
    }

    pub(crate) async fn view(&self) -> serde_json::Value {
        self.s
            .server
            .get(
                Some(&self.s.token),
                &format!("/documents/{}/planner", self.s.doc),
            )
            .await
            .1
    }

    /// Waits until the Planner view says `disconnected`.
    pub(crate) async fn until_disconnected(&self) -> serde_json::Value {
        for _ in 0..500 {
            let view = self.view().await;
            if view["disconnected"] == json!(true) {
                return view;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "the Planner never showed as disconnected: {}",
            self.view().await
        );
    }

    async fn card_state(&self, card: &str) -> String {
        let (_, list) = self
            .s
            .server
            .get(
                Some(&self.s.token),
                &format!("/documents/{}/decisions", self.s.doc),
            )
            .await;
        list["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == card)
            .unwrap()["state"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn answer(&self, card: &str) {
        let (status, body) = self
            .s
            .server
            .post(
                Some(&self.s.token),
                &format!("/documents/{}/decisions/{card}/answer", self.s.doc),
                json!({"yes": true}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }

    async fn stop(&self) {
        let (status, body) = self
            .s
            .server
            .post(
                Some(&self.s.token),
                &format!("/documents/{}/planner/stop", self.s.doc),
                json!(null),
            )
            .await;
        assert_eq!(status, 202, "{body}");
    }

    async fn lines(&self) -> Vec<String> {
        self.s
            .chat()
            .await
            .into_iter()
            .filter(|(k, _)| *k == ChatKind::System)
            .map(|(_, t)| t)
            .collect()
    }

    /// Waits until a system line equal to `line` appears; all system lines.
    async fn until_line(&self, line: &str) -> Vec<String> {
        for _ in 0..500 {
            let lines = self.lines().await;
            if lines.iter().any(|l| l == line) {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("chat never said {line:?}: {:?}", self.lines().await);
    }
}

fn input_result_for(message: Option<ServerMessage>) -> String {
    match message {
        Some(ServerMessage::InputResult { request, .. }) => request,
        other => panic!("expected input-result, got {other:?}"),
    }
}

/// How many session steps could not be committed, as `/metrics` says.
async fn session_commits_failed(s: &Scene) -> u64 {
    let metrics = reqwest::get(format!("http://{}/metrics", s.server.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("margin_commits_failed_total{of=\"session\"} "))
        .map_or(0, |count| count.parse().unwrap())
}

on_both_backends! {
    async fn a_link_loss_not_committed_is_recorded_once_storage_is_back(db) {
        // SPEC L2: the session shows its machine away even when the loss
        // could not be written at first; the driver writes it once it can.
        let a = Away::new(&db).await;
        let (link, _session) = a.session_with_a_run().await;
        db.refuse_journal_writes().await;
        drop(link);
        for _ in 0..500 {
            if session_commits_failed(&a.s).await > 0 { break; }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(session_commits_failed(&a.s).await > 0, "the loss was tried while the journal refused it");
        assert_eq!(a.view().await["disconnected"], json!(false), "nothing not committed is shown");
        db.accept_journal_writes().await;
        let view = a.until_disconnected().await;
        assert_eq!(view["runs"][0]["status"], json!("running"));
        a.until_line(DISCONNECTED).await;
    }

    async fn a_dropped_link_keeps_a_session_with_a_live_run_and_resume_carries_it_on(db) {
        let a = Away::new(&db).await;
        let (link, session) = a.session_with_a_run().await;
        drop(link);
        let view = a.until_disconnected().await;
        assert_eq!((view["connected"].clone(), view["runs"][0]["status"].clone(), view["runs"][0]["disconnected"].clone()),
            (json!(false), json!("running"), json!(true)));
        a.until_line(DISCONNECTED).await;
        // @planner is told at once; the message waits for the machine.
        a.s.say("@planner status please").await;
        a.until_line("The Planner is disconnected. Your message waits for it and reaches it when it reconnects.").await;

        let (mut back, resumed) = a.resume(json!([{"session": session}])).await;
        let ServerMessage::Resumed { sessions, ended } = resumed else { unreachable!() };
        assert_eq!((sessions.len(), sessions[0].session.as_str(), ended.len()), (1, session.as_str(), 0));
        // The message that waited starts the next turn.
        let (again, _, messages, _) = invoked(&mut back).await;
        assert_eq!((again, messages), (session.clone(), vec!["@planner status please".to_owned()]));
        let lines = a.until_line(RECONNECTED).await;
        assert_eq!(lines.iter().filter(|l| *l == DISCONNECTED).count(), 1);
        assert_eq!(lines.iter().filter(|l| *l == RECONNECTED).count(), 1);
        let view = a.view().await;
        assert_eq!((view["connected"].clone(), view["disconnected"].clone(), view["runs"][0]["disconnected"].clone()), (json!(true), json!(false), json!(false)));
    }

    async fn no_timer_ends_a_disconnected_session_however_long_it_is_away(db) {
        // The idle period and the attach grace are tiny; neither applies.
        let a = Away::with(&db, |o| {
            o.planner_idle = Duration::from_millis(50);
            o.attach_grace = Duration::from_millis(50);
        }).await;
        let (mut link, session) = a.session_with_a_run().await;
        // The control: another document's session with nothing in use,
        // kept only while someone views that document.
        let other = a.s.server.create_document(&a.s.token, "Other").await;
        let viewer = SyncClient::connect(&a.s.server.sync_url(&other, &a.s.token)).await;
        a.idle_session_on(&mut link, &other).await;
        drop(link);
        a.until_disconnected().await;
        viewer.close().await;
        // Its idle timer ends the control; by then the session in use has
        // been away as long, past the idle period and the grace, and waits.
        a.until_no_session(&other).await;
        let kept = a.view().await;
        assert_eq!((kept["session"].clone(), kept["disconnected"].clone()), (json!(session), json!(true)));
        let (_, resumed) = a.resume(json!([{"session": session}])).await;
        let ServerMessage::Resumed { sessions, .. } = resumed else { unreachable!() };
        assert_eq!(sessions.len(), 1);
    }

    async fn an_answer_given_while_away_is_held_and_sent_again_until_acknowledged(db) {
        let a = Away::new(&db).await;
        let (link, session, card) = a.session_with_a_question().await;
        drop(link);
        a.until_disconnected().await;
        a.answer(&card).await;
        assert_eq!(a.card_state(&card).await, "answered", "decisions stay answerable while away");

        let (mut first, _) = a.resume(json!([{"session": session, "questions": [card]}])).await;
        assert_eq!(input_result_for(first.next_work().await), card);
        // Not acknowledged: the answer stays with the session.
        drop(first);
        a.until_disconnected().await;
        let (mut second, _) = a.resume(json!([{"session": session, "questions": [card]}])).await;
        assert_eq!(input_result_for(second.next_work().await), card);
        second.send_message(&ClientMessage::InputReceived { session: session.clone(), request: card.clone() }).await;
        assert!(second.work_within(Duration::from_millis(200)).await.is_none());
        drop(second);
        // Acknowledged, and nothing else keeps the session: only a lease.
        let (mut third, resumed) = a.resume(json!([{"session": session}])).await;
        let ServerMessage::Resumed { sessions, .. } = resumed else { unreachable!() };
        assert_eq!(sessions.len(), 1);
        assert!(third.work_within(Duration::from_millis(300)).await.is_none(), "an acknowledged answer is not sent again");
    }

    async fn a_restarted_server_keeps_a_session_waiting_on_a_question_and_delivers_an_answer_given_meanwhile(db) {
        let mut a = Away::new(&db).await;
        let (link, session, card) = a.session_with_a_question().await;
        drop(link);
        // The drop was announced; the restart then says nothing more (L9).
        a.until_line(DISCONNECTED).await;
        let before = a.lines().await;
        a.s.server.restart().await;
        let view = a.until_disconnected().await;
        assert_eq!(view["questions"], json!(1));
        assert_eq!(a.lines().await, before, "a restart announces nothing");
        a.answer(&card).await;
        let (mut back, resumed) = a.resume(json!([{"session": session, "questions": [card]}])).await;
        let ServerMessage::Resumed { sessions, ended } = resumed else { unreachable!() };
        assert_eq!((sessions.len(), ended.len()), (1, 0), "the session carries on across the restart");
        assert_eq!(input_result_for(back.next_work().await), card);
        // The machine that was said to disconnect is said to be back, once (L2).
        let after = a.until_line(RECONNECTED).await;
        assert_eq!(after[before.len()..], [RECONNECTED.to_owned()]);
    }

    async fn a_restarted_server_keeps_a_session_with_a_live_run_past_the_grace(db) {
        let mut a = Away::with(&db, |o| o.attach_grace = Duration::from_millis(300)).await;
        let (mut link, session) = a.session_with_a_run().await;
        // The control: another document's session with nothing in use,
        // which the grace ends after the restart.
        let other = a.s.server.create_document(&a.s.token, "Other").await;
        a.idle_session_on(&mut link, &other).await;
        drop(link);
        a.s.server.restart().await;
        let view = a.until_disconnected().await;
        assert_eq!((view["runs"][0]["run"].clone(), view["runs"][0]["disconnected"].clone()), (json!("build"), json!(true)));
        a.until_no_session(&other).await;
        // A live run is in use: the same grace did not end it (L2).
        assert_eq!(a.view().await["session"], json!(session));
        let (_, resumed) = a.resume(json!([{"session": session}])).await;
        let ServerMessage::Resumed { sessions, .. } = resumed else { unreachable!() };
        assert_eq!(sessions.len(), 1);
    }

    async fn a_restarted_server_ends_a_session_with_nothing_in_use_that_nobody_resumes_within_the_grace(db) {
        let mut a = Away::with(&db, |o| o.attach_grace = Duration::from_millis(300)).await;
        let mut link = a.link().await;
        a.s.say("@planner tidy up").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        reply(&mut link, &session, &turn, "Tidied.").await;
        a.s.chat_len(2).await;
        drop(link);
        a.s.server.restart().await;
        // Nothing to keep: the session is leased for the grace only (L7), and
        // then ends (P3 lists no other reason to hold it).
        let mut ended = false;
        for _ in 0..300 {
            if a.view().await["session"].is_null() {
                ended = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(ended, "the session never ended: {}", a.view().await);
        let (_, resumed) = a.resume(json!([{"session": session}])).await;
        let ServerMessage::Resumed { sessions, ended, .. } = resumed else { unreachable!() };
        assert!(sessions.is_empty(), "{sessions:?}");
        assert_eq!(ended, vec![session]);
    }

    async fn an_answer_written_to_a_dead_socket_is_kept_for_the_only_question_of_a_planner_with_no_run(db) {
        let a = Away::new(&db).await;
        let (mut link, session, card) = a.session_with_a_question().await;
        a.answer(&card).await;
        // Delivered while linked, but the machine never acknowledged it.
        assert_eq!(input_result_for(link.next_work().await), card);
        drop(link);
        a.until_disconnected().await;
        let (mut back, _) = a.resume(json!([{"session": session, "questions": [card]}])).await;
        assert_eq!(input_result_for(back.next_work().await), card);
    }

    async fn a_stop_pressed_while_away_is_held_delivered_first_and_chat_says_only_what_is_true(db) {
        let a = Away::new(&db).await;
        let (link, session) = a.session_with_a_run().await;
        drop(link);
        a.until_disconnected().await;
        a.stop().await;
        let lines = a.until_line("Stop was asked while the Planner is disconnected. The Stop is kept and reaches it first when it reconnects.").await;
        assert!(!lines.iter().any(|l| l.contains("stopped")), "{lines:?}");
        let (mut back, _) = a.resume(json!([{"session": session}])).await;
        assert!(matches!(back.next_work().await, Some(ServerMessage::Stop { session: ref s }) if *s == session));
        back.send_message(&ClientMessage::Stopped { session: session.clone() }).await;
        // Both lines are written one after the other: wait for the second.
        let lines = a.until_line("build job was stopped after 0 min.").await;
        assert!(lines.contains(&"The Planner stopped.".to_owned()), "{lines:?}");
    }

    async fn a_stop_unanswered_when_the_link_dropped_is_said_unconfirmed_and_sent_again(db) {
        let a = Away::new(&db).await;
        let (mut link, session) = a.session_with_a_run().await;
        a.stop().await;
        assert!(matches!(link.next_work().await, Some(ServerMessage::Stop { .. })));
        a.until_line("Stop was sent to the Planner; waiting for it to confirm.").await;
        drop(link);
        let lines = a.until_line("The Planner disconnected before confirming the Stop. The Stop is kept and reaches it first when it reconnects.").await;
        assert!(!lines.iter().any(|l| l.contains("stopped")), "{lines:?}");
        let (mut back, _) = a.resume(json!([{"session": session}])).await;
        assert!(matches!(back.next_work().await, Some(ServerMessage::Stop { .. })));
    }

    async fn a_new_link_takes_over_a_link_the_server_has_not_noticed_is_dead(db) {
        let a = Away::new(&db).await;
        let (mut old, session) = a.session_with_a_run().await;
        // The machine noticed its own drop first and came back at once.
        let (_new, resumed) = a.resume(json!([{"session": session}])).await;
        let ServerMessage::Resumed { sessions, .. } = resumed else { unreachable!() };
        assert_eq!(sessions[0].session, session);
        assert_eq!(old.wait_closed().await.0, close::SUPERSEDED);
        let view = a.view().await;
        assert_eq!((view["connected"].clone(), view["runs"][0]["status"].clone()), (json!(true), json!("running")));
        assert!(!a.lines().await.contains(&DISCONNECTED.to_owned()));
    }

    async fn a_question_the_machine_withdrew_while_down_is_withdrawn_on_resume(db) {
        let a = Away::new(&db).await;
        let (link, session, card) = a.session_with_a_question().await;
        drop(link);
        a.until_disconnected().await;
        // The machine no longer holds the question: it withdrew it while down.
        let (_back, resumed) = a.resume(json!([{"session": session, "questions": []}])).await;
        let ServerMessage::Resumed { sessions, .. } = resumed else { unreachable!() };
        assert!(sessions[0].withdrawn.is_empty());
        for _ in 0..200 {
            if a.card_state(&card).await == "cancelled" { break; }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(a.card_state(&card).await, "cancelled");
    }

    async fn a_question_people_discarded_while_the_machine_was_away_is_settled_on_resume(db) {
        let b = Away::new(&db).await;
        let (link, session, card) = b.session_with_a_question().await;
        drop(link);
        b.until_disconnected().await;
        let (status, _) = b.s.server.post(Some(&b.s.token), &format!("/documents/{}/decisions/{card}/discard", b.s.doc), json!(null)).await;
        assert_eq!(status, 200);
        let (_back, resumed) = b.resume(json!([{"session": session, "questions": [card]}])).await;
        let ServerMessage::Resumed { sessions, .. } = resumed else { unreachable!() };
        assert_eq!(sessions[0].withdrawn, vec![card]);
    }

    async fn a_resume_that_leaves_a_session_out_ends_it_and_an_unknown_one_is_ended(db) {
        let a = Away::new(&db).await;
        let (link, session, card) = a.session_with_a_question().await;
        drop(link);
        a.until_disconnected().await;
        let (_back, resumed) = a.resume(json!([{"session": "made-up"}])).await;
        let ServerMessage::Resumed { sessions, ended } = resumed else { unreachable!() };
        assert_eq!((sessions.len(), ended), (0, vec!["made-up".to_owned()]));
        a.until_line("The Planner came back without this session's work; the session ended.").await;
        // The line is posted once the end is committed; the question's card
        // is cancelled right after, as the driver carries the end out.
        for _ in 0..200 {
            if a.card_state(&card).await == "cancelled" { break; }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(a.card_state(&card).await, "cancelled");
        assert_eq!(a.view().await["connected"], json!(false));
        let _ = session;
    }

    async fn a_malformed_resume_is_refused_and_the_link_keeps_working(db) {
        let a = Away::new(&db).await;
        let mut link = a.link().await;
        let too_many: Vec<_> = (0..257).map(|i| json!({"session": format!("s{i}")})).collect();
        for bad in [json!({"type": "resume", "sessions": "all"}).to_string(),
                    json!({"type": "resume", "sessions": [{"session": ""}]}).to_string(),
                    json!({"type": "resume", "sessions": too_many}).to_string()] {
            link.send_text(&bad).await;
            let refused = link.next_work().await;
            assert!(matches!(refused, Some(ServerMessage::Refusal { ref code, .. }) if code == "malformed_message"), "{refused:?}");
        }
        link.send_text(r#"{"type":"resume","sessions":[]}"#).await;
        assert!(matches!(link.next_work().await, Some(ServerMessage::Resumed { .. })));
    }

    async fn a_message_right_after_a_resume_that_left_the_session_out_starts_a_new_session(db) {
        let a = Away::new(&db).await;
        let (link, old) = a.session_with_a_run().await;
        drop(link);
        a.until_disconnected().await;
        let (mut back, _) = a.resume(json!([])).await;
        // At once: the old session's release is committed, its driver may
        // still be on its way out (SPEC L3, T1).
        a.s.say("@planner second").await;
        let (session, _, messages, _) = invoked(&mut back).await;
        assert_ne!(session, old);
        assert_eq!(messages, vec!["@planner second".to_owned()]);
    }

    async fn a_detach_leases_the_session_for_the_attach_grace_then_it_ends(db) {
        let a = Away::with(&db, |o| o.attach_grace = Duration::from_millis(200)).await;
        let (mut link, _session) = a.session_with_a_run().await;
        link.send_message(&ClientMessage::Detach {}).await;
        a.until_line("build job was live when the Planner disconnected; whether it stopped is not known.").await;
        assert!(!a.lines().await.contains(&DISCONNECTED.to_owned()), "a detach is not announced as a drop");
        assert_eq!(a.view().await["connected"], json!(false));
    }

    async fn while_a_planner_is_disconnected_its_document_is_not_offered_to_another_machine(db) {
        let a = Away::new(&db).await;
        let (link, _session) = a.session_with_a_run().await;
        drop(link);
        a.until_disconnected().await;
        let mut other = a.s.planner().await;
        a.s.say("@planner anyone there").await;
        a.until_line("The Planner is disconnected. Your message waits for it and reaches it when it reconnects.").await;
        assert!(other.work_within(Duration::from_millis(300)).await.is_none(), "no invoke on another machine");
    }

    async fn resume_withdraws_a_stop_not_yet_confirmed_and_is_refused_while_away(db) {
        let a = Away::new(&db).await;
        let (mut link, session) = a.session_with_a_run().await;
        let resume = format!("/documents/{}/planner/resume", a.s.doc);
        let (status, body) = a.s.server.post(Some(&a.s.token), &resume, json!(null)).await;
        assert_eq!((status, body["error"]["code"].as_str()), (409, Some("no_stop_pending")));
        a.stop().await;
        assert!(matches!(link.next_work().await, Some(ServerMessage::Stop { .. })));
        let (status, _) = a.s.server.post(Some(&a.s.token), &resume, json!(null)).await;
        assert_eq!(status, 202);
        assert!(matches!(link.next_work().await, Some(ServerMessage::StopWithdrawn { session: ref s }) if *s == session));
        a.until_line("Resume was sent: the Stop is withdrawn.").await;
        assert_eq!(a.view().await["stop_pending"], json!(false));

        // A new Stop, then the machine goes away: a Resume is refused, not held.
        a.stop().await;
        drop(link);
        a.until_disconnected().await;
        let (status, body) = a.s.server.post(Some(&a.s.token), &resume, json!(null)).await;
        assert_eq!((status, body["error"]["code"].as_str()), (409, Some("planner_disconnected")));
        let (mut back, _) = a.resume(json!([{"session": session}])).await;
        assert!(matches!(back.next_work().await, Some(ServerMessage::Stop { .. })), "the Stop still comes first");
    }

    async fn a_drop_mid_turn_keeps_the_turn_and_its_reply_is_posted_after_resume(db) {
        let a = Away::new(&db).await;
        let mut link = a.link().await;
        a.s.say("@planner draft the risks").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        // Mid tool call: the call goes out, the link drops before the result.
        link.send_message(&ClientMessage::ToolCall { session: session.clone(), turn: turn.clone(), call_id: "in-flight".into(), name: "read_document".into(), arguments: json!({}) }).await;
        drop(link);
        let view = a.until_disconnected().await;
        assert_eq!(view["replying"], json!(true), "the turn is kept");
        a.until_line(DISCONNECTED).await;
        // The machine still runs the turn and waits on its call (SPEC W1).
        let (mut back, _) = a.resume(json!([{"session": session, "turn": turn, "calls": ["in-flight"]}])).await;
        let result = back.next_work().await;
        assert!(matches!(&result, Some(ServerMessage::ToolResult { call_id, error: None, output: Some(_), .. }) if call_id == "in-flight"),
            "the call in flight at the drop gets its result after resume: {result:?}");
        // The turn carries on: its calls work, and its reply is posted.
        let result = call(&mut back, &session, &turn, "read_document", json!({})).await;
        assert!(matches!(result, ServerMessage::ToolResult { error: None, .. }), "{result:?}");
        reply(&mut back, &session, &turn, "Drafted the risks.").await;
        let chat = a.s.chat_len(4).await;
        assert!(chat.iter().any(|(k, t)| *k == ChatKind::Planner && t == "Drafted the risks."), "{chat:?}");
        assert!(!chat.iter().any(|(_, t)| t.contains("its reply was not posted")), "{chat:?}");
    }

    async fn a_turn_the_machine_no_longer_runs_after_a_drop_ends_saying_so(db) {
        let a = Away::new(&db).await;
        let mut link = a.link().await;
        a.s.say("@planner draft the risks").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        let result = call(&mut link, &session, &turn, "read_document", json!({})).await;
        assert!(matches!(result, ServerMessage::ToolResult { error: None, .. }), "{result:?}");
        drop(link);
        a.until_disconnected().await;
        // Back without the turn: it ended on the machine.
        let (_back, _) = a.resume(json!([{"session": session}])).await;
        a.until_line("The Planner came back without the turn it was working on; that turn ended without a reply. Mention @planner again.").await;
        let view = a.view().await;
        assert_eq!(view["replying"], json!(false));
    }

    async fn a_graceful_shutdown_posts_no_chat_line_about_the_planner(db) {
        let mut a = Away::new(&db).await;
        let (_link, _session) = a.session_with_a_run().await;
        let before = a.lines().await;
        a.s.server.restart().await;
        // Nothing was stopped or dropped by the Planner: Chat says nothing (SPEC L9).
        assert_eq!(a.lines().await, before);
    }
}
