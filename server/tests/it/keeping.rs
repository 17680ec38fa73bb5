//! What keeps a session (SPEC P1, P2, P3, L2, L7): a session in use — one
//! replying, owning a live run or holding an open question — is not let go
//! by a refused reply, by a reply that takes longer than the idle period,
//! by a link the server closed for missed heartbeats, nor by a detach its
//! machine comes back from within the attach grace; idle time counts from
//! the end of the reply. Real server in-process, real machine links, both
//! backends.

use std::time::Duration;

use margin_protocol::chat::ChatKind;
use margin_protocol::link::RunStatus::Running;
use margin_protocol::link::{close, ClientMessage, ServerMessage};
use margin_protocol::sessions::SessionEvent;
use serde_json::json;
use tokio::time::Instant;

use crate::harness::{LinkClient, Sse, TestDb};
use crate::on_both_backends;
use crate::resume::Away;
use crate::turns::{ask_first_paragraph, call, invoked, reply, report, Scene};

const DISCONNECTED: &str =
    "The Planner disconnected. Its runs and questions are kept until it reconnects; answers wait for it.";
/// A reply that asks two questions in Chat: withheld for a repair turn.
const ASKING: &str = "Should we launch in the EU? Or the US?";
/// A repair turn's reply that opens no decision: refused.
const EXCUSE: &str = "Sorry.";
/// How the refusal is announced.
const WITHHELD: &str = "The Planner's reply was withheld: ";

/// What keeps a session in use between its turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    /// A live run, `build`.
    Run,
    /// One question asked with `ask`, and no run.
    Question,
}

/// Gives the session `work` in its running turn: reports a live run, or
/// asks a question; the question's card.
async fn take_on(link: &mut LinkClient, session: &str, turn: &str, work: Work) -> Option<String> {
    if work == Work::Run {
        report(link, session, "build", 1, Running).await;
        return None;
    }
    Some(ask_first_paragraph(link, session, turn).await)
}

/// Checks the Planner view still shows `work`.
fn shows(view: &serde_json::Value, work: Work) {
    match work {
        Work::Run => {
            let runs = view["runs"].as_array().unwrap();
            assert_eq!(runs.len(), 1, "{view}");
            assert_eq!(
                (runs[0]["run"].as_str(), runs[0]["status"].as_str()),
                (Some("build"), Some("running")),
                "{view}"
            );
        }
        Work::Question => {
            assert_eq!(view["questions"], json!(1), "{view}");
            assert_eq!(view["runs"], json!([]), "{view}");
        }
    }
}

async fn view(s: &Scene) -> serde_json::Value {
    s.server
        .get(Some(&s.token), &format!("/documents/{}/planner", s.doc))
        .await
        .1
}

/// Polls the Planner view until `done` holds of it.
async fn until_view(s: &Scene, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    for _ in 0..500 {
        let view = view(s).await;
        if done(&view) {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the Planner view never got there: {}", view(s).await);
}

/// Checks, for all of `period`, that the document's Planner session is
/// still `session`; the last view.
async fn kept_for(s: &Scene, session: &str, period: Duration) -> serde_json::Value {
    let deadline = Instant::now() + period;
    loop {
        let view = view(s).await;
        assert_eq!(
            view["session"].as_str(),
            Some(session),
            "the session was let go: {view}"
        );
        if Instant::now() >= deadline {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls until the document has no Planner session; when it was first
/// seen gone.
async fn until_released(s: &Scene, patience: Duration) -> Instant {
    let deadline = Instant::now() + patience;
    loop {
        let view = view(s).await;
        if view["session"].is_null() {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "the session was never released: {view}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The first `count` events of `session`'s feed.
async fn feed(s: &Scene, session: &str, count: usize) -> Vec<SessionEvent> {
    let path = format!("/sessions/{session}/events");
    let mut sse = Sse::open(s.server.addr, &s.token, &path, Some("0"))
        .await
        .unwrap();
    sse.take(count)
        .await
        .iter()
        .map(|event| event.session_event())
        .collect()
}

async fn answer(s: &Scene, card: &str) {
    let (status, body) = s
        .server
        .post(
            Some(&s.token),
            &format!("/documents/{}/decisions/{card}/answer", s.doc),
            json!({"yes": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

/// Expects the answer to `card` of `session` as the link's next work.
async fn answered(link: &mut LinkClient, session: &str, card: &str) {
    match link.next_work().await {
        Some(ServerMessage::InputResult {
            session: of,
            request,
            ..
        }) => assert_eq!((of.as_str(), request.as_str()), (session, card)),
        other => panic!("expected input-result, got {other:?}"),
    }
    link.send_message(&ClientMessage::InputReceived {
        session: session.into(),
        request: card.into(),
    })
    .await;
}

async fn system_lines(s: &Scene) -> Vec<String> {
    s.chat()
        .await
        .into_iter()
        .filter(|(kind, _)| *kind == ChatKind::System)
        .map(|(_, text)| text)
        .collect()
}

/// A Scene with a paired machine whose credential links again and again.
impl Away {
    /// A first turn that takes on `work` and replies; the session and the
    /// question's card.
    async fn first_turn(&self, link: &mut LinkClient, work: Work) -> (String, Option<String>) {
        self.s.say("@planner get going").await;
        let (session, turn, _, _) = invoked(link).await;
        let card = take_on(link, &session, &turn, work).await;
        reply(link, &session, &turn, "Going.").await;
        self.s.chat_len(2).await;
        (session, card)
    }

    /// A new link that resumes `session` holding `card`; the link and the
    /// ids of the sessions `resumed` hands back and ends.
    async fn resume_holding(
        &self,
        session: &str,
        card: &Option<String>,
    ) -> (LinkClient, Vec<String>, Vec<String>) {
        let mut link = self.link().await;
        let questions: Vec<&String> = card.iter().collect();
        link.send_text(
            &json!({"type": "resume", "sessions": [{"session": session, "questions": questions}]})
                .to_string(),
        )
        .await;
        match link.next_work().await {
            Some(ServerMessage::Resumed { sessions, ended }) => {
                let sessions = sessions.into_iter().map(|kept| kept.session).collect();
                (link, sessions, ended)
            }
            other => panic!("expected resumed, got {other:?}"),
        }
    }
}

/// A session holding `work` gets a reply that asks in Chat, then a repair
/// turn that opens nothing: the reply is refused, and the session is kept.
async fn a_refused_reply_keeps(db: TestDb, work: Work) {
    let idle = Duration::from_millis(200);
    let s = Scene::with(&db, |o| o.planner_idle = idle).await;
    let mut planner = s.planner().await;
    s.say("@planner what is missing").await;
    let (session, turn, _, _) = invoked(&mut planner).await;
    let card = take_on(&mut planner, &session, &turn, work).await;
    reply(&mut planner, &session, &turn, ASKING).await;
    let (same, repair_turn, _, repair) = invoked(&mut planner).await;
    assert_eq!((same.as_str(), repair.len()), (session.as_str(), 2));
    reply(&mut planner, &session, &repair_turn, EXCUSE).await;
    // The failure is announced.
    let chat = s.chat_len(2).await;
    assert_eq!(chat.len(), 2, "{chat:?}");
    assert_eq!(chat[1].0, ChatKind::System, "{chat:?}");
    assert!(
        chat[1].1.starts_with(WITHHELD) && chat[1].1.contains("opened 0"),
        "{}",
        chat[1].1
    );

    // Kept, well past the idle period: the same session, still with its work.
    let view = kept_for(&s, &session, idle * 5).await;
    assert_eq!(
        (view["connected"].clone(), view["replying"].clone()),
        (json!(true), json!(false)),
        "{view}"
    );
    shows(&view, work);
    // A later @planner reaches the same session.
    s.say("@planner carry on").await;
    let (again, turn, messages, repair) = invoked(&mut planner).await;
    assert_eq!(
        (again.as_str(), messages, repair),
        (
            session.as_str(),
            vec!["@planner carry on".to_owned()],
            vec![]
        )
    );
    reply(&mut planner, &session, &turn, "Carrying on.").await;
    let chat = s.chat_len(4).await;
    assert_eq!(chat[3], (ChatKind::Planner, "Carrying on.".to_owned()));
    // Its question still reaches the machine when answered.
    if let Some(card) = card {
        answer(&s, &card).await;
        answered(&mut planner, &session, &card).await;
    }
    // The withheld text was never posted.
    let chat = s.chat().await;
    assert!(
        !chat
            .iter()
            .any(|(_, text)| text.contains(ASKING) || text == EXCUSE),
        "{chat:?}"
    );
    assert_eq!(
        chat.iter()
            .filter(|(_, text)| text.starts_with(WITHHELD))
            .count(),
        1,
        "announced once: {chat:?}"
    );
}

/// A resumable link holding `work` is closed by the server for missed
/// heartbeats: a drop, so the session is kept with no deadline and a new
/// link resumes it.
async fn an_unresponsive_link_keeps(db: TestDb, work: Work) {
    // A lease or the idle period would end the session almost at once.
    let m = Away::with(&db, |o| {
        o.links.heartbeat = Duration::from_millis(100);
        o.links.missed_heartbeats = 4;
        o.attach_grace = Duration::from_millis(100);
        o.planner_idle = Duration::from_millis(100);
    })
    .await;
    let mut link = m.link().await;
    let (session, card) = m.first_turn(&mut link, work).await;
    // The machine stops answering heartbeats; the server closes the link.
    while let Some(message) = link.next().await {
        assert!(
            matches!(message, ServerMessage::Heartbeat { .. }),
            "{message:?}"
        );
    }
    assert_eq!(
        link.closed.clone().map(|(code, _)| code),
        Some(close::UNRESPONSIVE),
        "{:?}",
        link.closed
    );
    let view = until_view(&m.s, |v| v["disconnected"] == json!(true)).await;
    assert_eq!(
        (view["connected"].clone(), view["session"].as_str()),
        (json!(false), Some(session.as_str())),
        "{view}"
    );
    shows(&view, work);
    if work == Work::Run {
        assert_eq!(view["runs"][0]["disconnected"], json!(true), "{view}");
    }
    // No deadline: many graces and idle periods later it is still there.
    let view = kept_for(&m.s, &session, Duration::from_millis(800)).await;
    assert_eq!(view["disconnected"], json!(true), "{view}");
    shows(&view, work);
    let lines = system_lines(&m.s).await;
    assert_eq!(
        lines.iter().filter(|l| *l == DISCONNECTED).count(),
        1,
        "{lines:?}"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("was live when the Planner disconnected")),
        "{lines:?}"
    );
    // The question stays answerable; its answer is held for the machine.
    if let Some(card) = &card {
        answer(&m.s, card).await;
    }

    let (mut back, sessions, ended) = m.resume_holding(&session, &card).await;
    assert_eq!((sessions, ended), (vec![session.clone()], vec![]));
    if let Some(card) = &card {
        answered(&mut back, &session, card).await;
    }
    let view = until_view(&m.s, |v| v["connected"] == json!(true)).await;
    assert_eq!(view["session"].as_str(), Some(session.as_str()), "{view}");
    if work == Work::Run {
        shows(&view, work);
        assert_eq!(view["runs"][0]["disconnected"], json!(false), "{view}");
    }
}

/// A resumable link holding `work` detaches and its machine re-attaches
/// within the attach grace: the session is kept, past the end of the lease.
async fn a_reattach_within_the_grace_keeps(db: TestDb, work: Work) {
    let grace = Duration::from_millis(1500);
    let m = Away::with(&db, |o| o.attach_grace = grace).await;
    let mut link = m.link().await;
    let (session, card) = m.first_turn(&mut link, work).await;
    let detached = Instant::now();
    link.send_message(&ClientMessage::Detach {}).await;
    assert_eq!(link.wait_closed().await.0, close::DETACHED);
    // The server took the detach: the session is leased, away.
    let view = until_view(&m.s, |v| v["connected"] == json!(false)).await;
    assert_eq!(view["session"].as_str(), Some(session.as_str()), "{view}");

    let (mut back, sessions, ended) = m.resume_holding(&session, &card).await;
    assert!(
        detached.elapsed() < grace,
        "re-attached only after {:?}",
        detached.elapsed()
    );
    assert_eq!((sessions, ended), (vec![session.clone()], vec![]));
    let view = until_view(&m.s, |v| v["connected"] == json!(true)).await;
    assert_eq!(
        (view["session"].as_str(), view["disconnected"].clone()),
        (Some(session.as_str()), json!(false)),
        "{view}"
    );
    shows(&view, work);
    // Past the end of the lease the detach began: still the same session,
    // with its work.
    let left =
        (detached + grace + Duration::from_millis(500)).saturating_duration_since(Instant::now());
    let view = kept_for(&m.s, &session, left).await;
    assert_eq!(view["connected"], json!(true), "{view}");
    shows(&view, work);
    let lines = system_lines(&m.s).await;
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("disconnected") || l.contains("ended")),
        "nothing ended, nothing was dropped: {lines:?}"
    );
    // It carries on: its question's answer and the next turn reach it.
    if let Some(card) = &card {
        answer(&m.s, card).await;
        answered(&mut back, &session, card).await;
    }
    m.s.say("@planner status?").await;
    let (again, turn, messages, _) = invoked(&mut back).await;
    assert_eq!(
        (again.as_str(), messages),
        (session.as_str(), vec!["@planner status?".to_owned()])
    );
    reply(&mut back, &session, &turn, "All good.").await;
    let chat = m.s.chat_len(4).await;
    assert!(
        chat.iter()
            .any(|(kind, text)| *kind == ChatKind::Planner && text == "All good."),
        "{chat:?}"
    );
}

on_both_backends! {
    async fn a_refused_reply_keeps_a_session_that_owns_a_live_run(db) {
        a_refused_reply_keeps(db, Work::Run).await;
    }

    async fn a_refused_reply_keeps_a_session_that_holds_only_an_open_question(db) {
        a_refused_reply_keeps(db, Work::Question).await;
    }

    async fn a_reply_longer_than_the_idle_period_is_not_cut_off(db) {
        let idle = Duration::from_millis(200);
        let s = Scene::with(&db, |o| o.planner_idle = idle).await;
        let mut planner = s.planner().await;
        s.say("@planner write up the plan").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        // Nobody views the document; the turn runs for several idle periods.
        let view = kept_for(&s, &session, idle * 4).await;
        assert_eq!(view["replying"], json!(true), "{view}");
        let read = call(&mut planner, &session, &turn, "read_document", json!({})).await;
        assert!(matches!(read, ServerMessage::ToolResult { error: None, .. }), "{read:?}");
        let view = kept_for(&s, &session, idle * 4).await;
        assert_eq!(view["replying"], json!(true), "{view}");
        reply(&mut planner, &session, &turn, "Here is the write-up.").await;
        let chat = s.chat_len(2).await;
        assert_eq!(chat.len(), 2, "{chat:?}");
        assert_eq!(chat[1], (ChatKind::Planner, "Here is the write-up.".to_owned()));
        // In the session's own feed its one turn started and finished, and
        // nothing ended the session before it did.
        let events = feed(&s, &session, 3).await;
        assert!(matches!(events[0], SessionEvent::SessionStarted { .. }), "{events:?}");
        assert_eq!(events[1..], [SessionEvent::TurnStarted { turn: turn.clone() }, SessionEvent::TurnFinished { turn }]);
    }

    async fn idle_time_counts_from_the_end_of_the_reply(db) {
        let idle = Duration::from_millis(800);
        let s = Scene::with(&db, |o| o.planner_idle = idle).await;
        let mut planner = s.planner().await;
        s.say("@planner write up the plan").await;
        let (session, turn, _, _) = invoked(&mut planner).await;
        // The turn alone lasts two idle periods.
        kept_for(&s, &session, idle * 2).await;
        let replying = Instant::now();
        reply(&mut planner, &session, &turn, "Here is the write-up.").await;
        s.chat_len(2).await;
        // Shortly after the reply: still there, no longer replying.
        let view = until_view(&s, |v| v["replying"] == json!(false)).await;
        assert_eq!(view["session"].as_str(), Some(session.as_str()), "{view}");
        // Released for idleness, and only once the idle period has passed
        // since the reply (allowing the clock's millisecond rounding).
        let gone = until_released(&s, Duration::from_secs(10)).await;
        let after = gone.duration_since(replying);
        assert!(after + Duration::from_millis(20) >= idle, "released {after:?} after the reply");
        let events = feed(&s, &session, 4).await;
        assert_eq!(events[3], SessionEvent::SessionEnded { reason: "idle: nothing to do and nobody viewing".into() }, "{events:?}");
    }

    async fn a_link_closed_for_missed_heartbeats_keeps_a_session_that_owns_a_live_run(db) {
        an_unresponsive_link_keeps(db, Work::Run).await;
    }

    async fn a_link_closed_for_missed_heartbeats_keeps_a_session_that_holds_an_open_question(db) {
        an_unresponsive_link_keeps(db, Work::Question).await;
    }

    async fn a_detached_link_whose_machine_reattaches_within_the_grace_keeps_a_session_that_owns_a_live_run(db) {
        a_reattach_within_the_grace_keeps(db, Work::Run).await;
    }

    async fn a_detached_link_whose_machine_reattaches_within_the_grace_keeps_a_session_that_holds_an_open_question(db) {
        a_reattach_within_the_grace_keeps(db, Work::Question).await;
    }
}
