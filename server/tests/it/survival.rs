//! What survives `kill -9` of the real `margin` binary (SPEC W2, W2a):
//! decision cards in every state people put them in, their answers, the
//! questions a Planner asked with `ask` (answered while it was away, or
//! still open), and its run cards with their statuses and true ages — and
//! a machine's `resume` after the restart gets them back.
//!
//! And the planning choice of a session (SPEC U1): nothing an application
//! or a machine does switches it on for a Planner that did not declare it,
//! a later link with another manifest changes nothing for a session it
//! resumes, and the reserved name `update_plan` cannot be bound to anything
//! else.

use std::time::{Duration, Instant};

use margin_protocol::decisions::{AnswerBody, DecisionList};
use margin_protocol::link::{
    ClientMessage, HeldSession, PlannerView, ResumedSession, RunStatus, ServerMessage,
};
use margin_protocol::sessions::{SessionEvent, SessionState};
use serde_json::{json, Value};

use crate::crash::{scene, snapshot};
use crate::harness::{LinkClient, Server, SyncClient};
use crate::on_both_backends;
use crate::plans::Planning;
use crate::turns::{call, invoked, reply};

/// How often a bounded poll looks again, and how many times.
const POLL: Duration = Duration::from_millis(10);
const POLLS: usize = 2_000;

/// Pairs a machine to `token`'s account; its credential.
async fn pair(server: &crate::harness::Api, token: &str, name: &str) -> String {
    let (status, paired) = server
        .post(Some(token), "/machines", json!({ "name": name }))
        .await;
    assert_eq!(status, 201, "{paired}");
    paired["credential"].as_str().unwrap().to_owned()
}

/// A link of the machine holding `credential`, welcomed after a `hello`
/// whose manifest declares `planning`.
async fn linked(server: &crate::harness::Api, credential: &str, planning: bool) -> LinkClient {
    let mut link = LinkClient::connect(server.addr, credential).await.unwrap();
    let welcome = hello_with(&mut link, json!({ "planning": planning })).await;
    let ServerMessage::Welcome { capabilities, .. } = welcome else {
        panic!("no welcome: {welcome:?}")
    };
    assert!(capabilities.durable_plans);
    link
}

/// Sends a resumable `hello` carrying `manifest`; the answer.
async fn hello_with(link: &mut LinkClient, manifest: Value) -> ServerMessage {
    let hello = json!({"type": "hello", "protocol_version": 1,
        "features": ["resumable-sessions"], "manifest": manifest});
    link.send_text(&hello.to_string()).await;
    link.next().await.expect("an answer to hello")
}

/// `resume` naming `held`; what `resumed` carries on (nothing ended).
async fn resume(link: &mut LinkClient, held: HeldSession) -> Vec<ResumedSession> {
    link.send_message(&ClientMessage::Resume {
        sessions: vec![held],
    })
    .await;
    match link.next_work().await {
        Some(ServerMessage::Resumed { sessions, ended }) => {
            assert!(ended.is_empty(), "the server lost sessions: {ended:?}");
            sessions
        }
        other => panic!("expected resumed, got {other:?}"),
    }
}

fn held(session: &str, questions: &[&str], turn: Option<&str>) -> HeldSession {
    HeldSession {
        session: session.to_owned(),
        questions: questions.iter().map(|q| (*q).to_owned()).collect(),
        turn: turn.map(str::to_owned),
        calls: vec![],
    }
}

/// `GET /documents/{doc}/planner`.
async fn view(server: &crate::harness::Api, token: &str, doc: &str) -> PlannerView {
    let (status, body) = server
        .get(Some(token), &format!("/documents/{doc}/planner"))
        .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).unwrap()
}

/// Polls the planner view until `done` holds.
async fn view_until(
    server: &crate::harness::Api,
    token: &str,
    doc: &str,
    done: impl Fn(&PlannerView) -> bool,
) -> PlannerView {
    for _ in 0..POLLS {
        let seen = view(server, token, doc).await;
        if done(&seen) {
            return seen;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!(
        "the planner view never got there: {:?}",
        view(server, token, doc).await
    );
}

/// `GET /documents/{doc}/decisions`.
async fn decisions(server: &crate::harness::Api, token: &str, doc: &str) -> DecisionList {
    let (status, body) = server
        .get(Some(token), &format!("/documents/{doc}/decisions"))
        .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).unwrap()
}

/// `GET /sessions/{sid}` as raw JSON, once the session's first event is
/// committed (it may trail `invoke`).
async fn raw_snapshot(server: &crate::harness::Api, token: &str, session: &str) -> Value {
    for _ in 0..POLLS {
        let (status, body) = server
            .get(Some(token), &format!("/sessions/{session}"))
            .await;
        if status == 200 {
            return body;
        }
        assert_eq!(status, 404, "{body}");
        tokio::time::sleep(POLL).await;
    }
    panic!("no snapshot of session {session}");
}

/// A person's act on a card (`answer`, `discard`, `reopen`); its new state.
async fn act(
    server: &Server,
    token: &str,
    doc: &str,
    card: &str,
    verb: &str,
    body: Value,
) -> String {
    let path = format!("/documents/{doc}/decisions/{card}/{verb}");
    let (status, changed) = server.post(Some(token), &path, body).await;
    assert_eq!(status, 200, "{verb} {card}: {changed}");
    changed["state"].as_str().unwrap().to_owned()
}

/// The document's decision mirror as a freshly synced editor sees it.
async fn mirror(server: &Server, token: &str, doc: &str) -> Vec<(String, String)> {
    let editor = SyncClient::connect(&server.sync_url(doc, token)).await;
    let cards = editor.projected_cards();
    editor.close().await;
    cards
}

/// The output of a tool call that must succeed, as JSON.
fn output(result: ServerMessage) -> Value {
    match result {
        ServerMessage::ToolResult {
            output: Some(output),
            error: None,
            ..
        } => serde_json::to_value(&output).unwrap(),
        other => panic!("expected a tool output, got {other:?}"),
    }
}

/// The refusal's code and message of a tool call that must be refused.
fn refusal(result: ServerMessage) -> (String, String) {
    match result {
        ServerMessage::ToolResult {
            error: Some(refusal),
            output: None,
            ..
        } => (refusal.code.to_string(), refusal.message),
        other => panic!("expected a refused tool call, got {other:?}"),
    }
}

fn card(
    key: &str,
    question: &str,
    response: &str,
    choices: &[&str],
    read: &Value,
    index: usize,
) -> Value {
    json!({"key": key, "question": question, "response": response, "choices": choices,
        "passages": [{"index": index, "digest": read["outline"][index]["digest"]}]})
}

fn run(link_session: &str, run: &str, status: RunStatus) -> ClientMessage {
    ClientMessage::Run {
        session: link_session.to_owned(),
        run: run.to_owned(),
        name: format!("{run} job"),
        status,
        attempt: None,
    }
}

on_both_backends! {
    async fn decision_cards_open_answered_reopened_and_discarded_and_their_answers_survive_sigkill(db) {
        let (mut server, token, doc) = scene(&db).await;
        let mut person = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        person.append_paragraph("Budget is 40k").await;
        person.append_paragraph("Owner to be named").await;
        for _ in 0..POLLS {
            if server.block_texts(&token, &doc).await.1.len() == 3 { break; }
            tokio::time::sleep(POLL).await;
        }
        assert_eq!(server.block_texts(&token, &doc).await.1.len(), 3);
        person.close().await;
        let credential = pair(&server, &token, "laptop").await;
        let mut link = linked(&server, &credential, true).await;
        server.say(&token, &doc, "@planner open the decisions").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        let read = output(call(&mut link, &session, &turn, "read_document", json!({})).await);
        let batch = json!({"revision": read["revision"], "cards": [
            card("launch-region", "Which region launches first?", "single_choice", &["EU", "US"], &read, 0),
            card("budget-cap", "What is the budget cap?", "free_text", &[], &read, 1),
            card("launch-date", "Ship on March 3?", "yes_no", &[], &read, 0),
            card("owner", "Who owns the launch?", "single_choice", &["Ada", "Bo"], &read, 2),
            card("risk-review", "Hold a risk review?", "yes_no", &[], &read, 1),
        ]});
        let opened = output(call(&mut link, &session, &turn, "open_decisions", batch.clone()).await);
        assert_eq!(opened["captured"], 5, "{opened}");
        let id = |key: &str| {
            opened["captures"].as_array().unwrap().iter().find(|c| c["key"] == key).unwrap()["card_id"].as_str().unwrap().to_owned()
        };
        // People answer two, answer and reopen one, discard one; one stays open.
        assert_eq!(act(&server, &token, &doc, &id("launch-region"), "answer", json!({"choices": ["c2"]})).await, "answered");
        assert_eq!(act(&server, &token, &doc, &id("budget-cap"), "answer", json!({"text": "Up to 45k"})).await, "answered");
        assert_eq!(act(&server, &token, &doc, &id("launch-date"), "answer", json!({"yes": false})).await, "answered");
        assert_eq!(act(&server, &token, &doc, &id("launch-date"), "reopen", json!({})).await, "reopened");
        assert_eq!(act(&server, &token, &doc, &id("risk-review"), "discard", json!({})).await, "discarded");
        let before = decisions(&server, &token, &doc).await;
        let mut states: Vec<(&str, &str)> = before.decisions.iter().map(|c| (c.key.as_str(), c.state.as_str())).collect();
        states.sort();
        assert_eq!(states, [("budget-cap", "answered"), ("launch-date", "reopened"), ("launch-region", "answered"), ("owner", "open"), ("risk-review", "discarded")]);
        let mirrored = mirror(&server, &token, &doc).await;
        assert_eq!(mirrored.len(), 5, "{mirrored:?}");
        let texts = server.block_texts(&token, &doc).await.1;

        server.kill().await;
        server.restart().await;

        // Every card, its state, its answer and who gave it are as people
        // were told; so are the document's text and its live mirror.
        let after = decisions(&server, &token, &doc).await;
        assert_eq!(after, before);
        let region = after.decisions.iter().find(|c| c.key == "launch-region").unwrap();
        assert_eq!((region.answer.clone(), region.answered_by.as_deref()), (Some(AnswerBody::Choices(vec!["c2".into()])), Some("ada")));
        let budget = after.decisions.iter().find(|c| c.key == "budget-cap").unwrap();
        assert_eq!(budget.answer, Some(AnswerBody::Text("Up to 45k".into())));
        assert_eq!(server.block_texts(&token, &doc).await.1, texts);
        assert_eq!(mirror(&server, &token, &doc).await, mirrored);

        // The Planner's record of them survived too: back on a new link, a
        // replay of the batch finds every card that holds its question
        // already in the document, and the discarded one is not recreated.
        let mut back = linked(&server, &credential, true).await;
        let carried = resume(&mut back, held(&session, &[], Some(&turn))).await;
        assert_eq!(carried.len(), 1);
        let read = output(call(&mut back, &session, &turn, "read_document", json!({})).await);
        let mut replay = batch;
        replay["revision"] = read["revision"].clone();
        for (i, index) in [0, 1, 0, 2, 1].into_iter().enumerate() {
            replay["cards"][i]["passages"][0]["digest"] = read["outline"][index]["digest"].clone();
        }
        let replayed = output(call(&mut back, &session, &turn, "open_decisions", replay).await);
        let statuses: Vec<(&str, &str)> = replayed["captures"].as_array().unwrap().iter()
            .map(|c| (c["key"].as_str().unwrap(), c["status"].as_str().unwrap())).collect();
        assert_eq!(statuses, [("launch-region", "already_in_document"), ("budget-cap", "already_in_document"),
            ("launch-date", "already_in_document"), ("owner", "already_in_document"), ("risk-review", "not_captured")]);
        assert_eq!(decisions(&server, &token, &doc).await, before, "the replay changed no card");
        // The card still open is still answerable.
        assert_eq!(act(&server, &token, &doc, &id("owner"), "answer", json!({"choices": ["c1"]})).await, "answered");
        reply(&mut back, &session, &turn, "Opened.").await;
    }

    async fn asked_questions_survive_sigkill_answers_given_before_are_delivered_and_the_open_one_stays_answerable(db) {
        let (mut server, token, doc) = scene(&db).await;
        let credential = pair(&server, &token, "laptop").await;
        let mut link = linked(&server, &credential, true).await;
        server.say(&token, &doc, "@planner ask about the launch").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        let read = output(call(&mut link, &session, &turn, "read_document", json!({})).await);
        let mut revision = read["revision"].clone();
        let mut ids = Vec::new();
        for question in [card("launch-date", "Ship on March 3?", "yes_no", &[], &read, 0),
            card("launch-region", "Which region first?", "single_choice", &["EU", "US"], &read, 0),
            card("launch-owner", "Who owns the launch?", "free_text", &[], &read, 0)] {
            let asked = output(call(&mut link, &session, &turn, "ask", json!({"revision": revision, "card": question})).await);
            assert_eq!(asked["captures"][0]["status"], "created", "{asked}");
            ids.push(asked["captures"][0]["card_id"].as_str().unwrap().to_owned());
            revision = asked["revision"].clone();
        }
        let [date, region, owner] = <[String; 3]>::try_from(ids).unwrap();
        // One is answered while the machine is linked: it gets the answer
        // but has not acknowledged it when the server dies.
        let (status, answered) = server.post(Some(&token), &format!("/documents/{doc}/decisions/{owner}/answer"), json!({"text": "Ada"})).await;
        assert_eq!(status, 200, "{answered}");
        match link.next_work().await {
            Some(ServerMessage::InputResult { request, .. }) => assert_eq!(request, owner),
            other => panic!("expected the answer, got {other:?}"),
        }
        reply(&mut link, &session, &turn, "Asked three.").await;
        view_until(&server, &token, &doc, |v| !v.replying).await;
        // The machine drops; a person answers another while it is away
        // (the answer is held), then the server is killed.
        drop(link);
        view_until(&server, &token, &doc, |v| v.disconnected).await;
        let (status, answered) = server.post(Some(&token), &format!("/documents/{doc}/decisions/{date}/answer"), json!({"yes": true})).await;
        assert_eq!(status, 200, "{answered}");
        let before = snapshot(&server, &token, &session).await;
        assert_eq!(before.host_requests, std::slice::from_ref(&region), "only the unanswered one waits on people");

        server.kill().await;
        server.restart().await;

        let after = snapshot(&server, &token, &session).await;
        assert_eq!((after.state, after.turn.as_deref(), &after.host_requests), (SessionState::Disconnected, None, &before.host_requests));
        let mut states: Vec<(String, String)> = decisions(&server, &token, &doc).await.decisions.into_iter().map(|c| (c.id, c.state)).collect();
        states.sort();
        let mut expected = vec![(date.clone(), "answered".to_owned()), (region.clone(), "open".to_owned()), (owner.clone(), "answered".to_owned())];
        expected.sort();
        assert_eq!(states, expected);
        // The machine's resume names the session and its questions: the
        // session is back, nothing is withdrawn, and both answers given
        // before the kill come as input-result.
        let mut back = linked(&server, &credential, true).await;
        let carried = resume(&mut back, held(&session, &[&date, &region, &owner], None)).await;
        assert_eq!(carried, [ResumedSession { session: session.clone(), document: doc.clone(), withdrawn: vec![] }]);
        let mut delivered = std::collections::BTreeMap::new();
        while delivered.len() < 2 {
            match back.next_work().await {
                Some(ServerMessage::InputResult { session: s, request, answer, answered_by }) => {
                    assert_eq!((s.as_str(), answered_by.as_str()), (session.as_str(), "ada"));
                    back.send_message(&ClientMessage::InputReceived { session: session.clone(), request: request.clone() }).await;
                    assert!(delivered.insert(request.clone(), answer).is_none(), "{request} delivered twice");
                }
                other => panic!("expected the held answers, got {other:?} after {delivered:?}"),
            }
        }
        let expected = std::collections::BTreeMap::from([(date.clone(), AnswerBody::Yes(true)), (owner.clone(), AnswerBody::Text("Ada".into()))]);
        assert_eq!(delivered, expected);
        let live = view_until(&server, &token, &doc, |v| v.connected).await;
        assert_eq!(live.questions, 1, "the unanswered question still waits: {live:?}");
        // Answered after the restart, the open question reaches the machine
        // next (and the acknowledged answers are not sent again).
        let (status, answered) = server.post(Some(&token), &format!("/documents/{doc}/decisions/{region}/answer"), json!({"choices": ["c2"]})).await;
        assert_eq!(status, 200, "{answered}");
        match back.next_work().await {
            Some(ServerMessage::InputResult { session: s, request, answer, .. }) => {
                assert_eq!((s.as_str(), request.as_str(), answer), (session.as_str(), region.as_str(), AnswerBody::Choices(vec!["c2".into()])));
            }
            other => panic!("expected the answer given after the restart, got {other:?}"),
        }
        back.send_message(&ClientMessage::InputReceived { session: session.clone(), request: region.clone() }).await;
        let settled = snapshot(&server, &token, &session).await;
        assert!(settled.host_requests.is_empty(), "{settled:?}");
    }

    async fn run_cards_keep_their_status_and_true_age_through_sigkill_and_carry_on_after_resume(db) {
        let (mut server, token, doc) = scene(&db).await;
        let credential = pair(&server, &token, "laptop").await;
        let mut link = linked(&server, &credential, true).await;
        server.say(&token, &doc, "@planner run the checks").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        let reported = Instant::now();
        for (name, status) in [("build", RunStatus::Running), ("review", RunStatus::Paused), ("deploy", RunStatus::Running),
            ("lint", RunStatus::Running), ("sync", RunStatus::Running)] {
            link.send_message(&run(&session, name, status)).await;
        }
        // Let the runs that will end get some age first.
        view_until(&server, &token, &doc, |v| v.runs.len() == 5 && v.runs.iter().all(|r| r.age_ms >= 200)).await;
        for (name, status) in [("deploy", RunStatus::Completed), ("lint", RunStatus::Failed), ("sync", RunStatus::Stopped)] {
            link.send_message(&run(&session, name, status)).await;
        }
        let expected = [("build", RunStatus::Running), ("review", RunStatus::Paused), ("deploy", RunStatus::Completed),
            ("lint", RunStatus::Failed), ("sync", RunStatus::Stopped)];
        let cards = |v: &PlannerView| {
            let mut cards: Vec<_> = v.runs.iter().map(|r| (r.run.clone(), r.status)).collect();
            cards.sort_by(|a, b| a.0.cmp(&b.0));
            cards
        };
        let mut want: Vec<(String, RunStatus)> = expected.iter().map(|(r, s)| ((*r).to_owned(), *s)).collect();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        let before = view_until(&server, &token, &doc, |v| cards(v) == want).await;
        let seen_before = Instant::now();
        let feed_before = snapshot(&server, &token, &session).await;

        server.kill().await;
        server.restart().await;

        let asked_after = Instant::now();
        let after = view(&server, &token, &doc).await;
        let true_age_bound = reported.elapsed().as_millis() as u64;
        assert_eq!(cards(&after), want, "every run keeps its last status: {after:?}");
        let order = |v: &PlannerView| v.runs.iter().map(|r| r.run.clone()).collect::<Vec<_>>();
        assert_eq!(order(&after), order(&before), "the cards are listed as before");
        assert!(after.disconnected && after.replying, "the session and its turn are kept, waiting for the machine: {after:?}");
        let gap = asked_after.duration_since(seen_before).as_millis() as u64;
        for (was, now) in before.runs.iter().zip(&after.runs) {
            assert_eq!(now.name, format!("{} job", now.run));
            assert!(now.disconnected, "{now:?}");
            if now.status.is_live() {
                // Its age runs on from its first report, across the kill.
                assert!(now.age_ms + 2 >= was.age_ms + gap, "{}: {} ms before, {} ms after a {gap} ms gap", now.run, was.age_ms, now.age_ms);
                assert!(now.age_ms <= true_age_bound + 5, "{}: {} ms, older than its report ({true_age_bound} ms)", now.run, now.age_ms);
            } else {
                // An ended run's age stopped when it ended.
                assert_eq!(now.age_ms, was.age_ms, "{}: its age froze when it ended", now.run);
                assert!(now.age_ms >= 200, "{now:?}");
            }
        }
        let feed_after = snapshot(&server, &token, &session).await;
        assert_eq!((&feed_after.runs, feed_after.turn.as_deref()), (&feed_before.runs, Some(turn.as_str())));
        // Back on a new link, the runs carry on from where they were.
        let mut back = linked(&server, &credential, true).await;
        resume(&mut back, held(&session, &[], Some(&turn))).await;
        let live = view_until(&server, &token, &doc, |v| v.connected).await;
        assert!(live.runs.iter().all(|r| !r.disconnected), "{live:?}");
        back.send_message(&run(&session, "build", RunStatus::Completed)).await;
        back.send_message(&run(&session, "review", RunStatus::Running)).await;
        let card = |v: &PlannerView, run: &str| v.runs.iter().find(|r| r.run == run).cloned().unwrap();
        let done = view_until(&server, &token, &doc, |v| card(v, "build").status == RunStatus::Completed && card(v, "review").status == RunStatus::Running).await;
        assert!(card(&done, "build").age_ms >= card(&after, "build").age_ms, "{done:?}");
        assert!(card(&done, "review").age_ms >= card(&after, "review").age_ms, "a paused run resumed keeps its start: {done:?}");
        let frozen = card(&done, "build").age_ms;
        assert_eq!(card(&view(&server, &token, &doc).await, "build").age_ms, frozen, "completed: its age stopped");
        reply(&mut back, &session, &turn, "Checks done.").await;
    }
}

/// A body with a `planning` field is refused as malformed, naming it.
fn refused_for_planning(status: u16, answer: &Value, path: &str) {
    assert_eq!(status, 400, "POST {path}: {answer}");
    assert_eq!(
        answer["error"]["code"], "invalid_body",
        "POST {path}: {answer}"
    );
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("planning"), "POST {path}: {message}");
}

/// The events of `p`'s session that say how it started.
async fn starts(p: &Planning) -> Vec<bool> {
    p.events()
        .await
        .into_iter()
        .filter_map(|(_, e)| match e {
            SessionEvent::SessionStarted { planning, .. } => Some(planning),
            _ => None,
        })
        .collect()
}

/// A credential of `p`'s own machine: the one its link was sent after
/// `welcome` (SPEC L8).
fn same_machine(p: &Planning) -> String {
    p.link
        .credentials
        .last()
        .expect("a credential arrives right after welcome")
        .0
        .clone()
}

/// A new link of `p`'s machine declaring `planning`, which takes `p`'s
/// session (and its running turn) over; the old link is closed as
/// superseded.
async fn take_over(p: &mut Planning, planning: bool) {
    let credential = same_machine(p);
    let mut later = linked(&p.s.server, &credential, planning).await;
    let carried = resume(&mut later, held(&p.session, &[], Some(&p.turn))).await;
    assert_eq!(carried.len(), 1);
    let mut earlier = std::mem::replace(&mut p.link, later);
    let (code, _) = earlier.wait_closed().await;
    assert_eq!(code, margin_protocol::link::close::SUPERSEDED);
}

/// A new session on another document, started by `p`'s current link: the
/// session id and its turn.
async fn another_session(p: &mut Planning) -> (String, String) {
    let other = p.s.server.create_document(&p.s.token, "Other").await;
    p.s.server
        .say(&p.s.token, &other, "@planner start here")
        .await;
    let (session, turn, _, _) = invoked(&mut p.link).await;
    assert_ne!(session, p.session);
    (session, turn)
}

on_both_backends! {
    async fn nothing_an_application_or_machine_tries_switches_planning_on_for_a_planner_that_did_not_declare_it(db) {
        let mut p = Planning::with(&db, false, |_| {}).await;
        let raw = raw_snapshot(&p.s.server, &p.s.token, &p.session).await;
        assert!(raw.get("plan").is_none(), "{raw}");
        let before = p.snapshot().await;
        // A second hello declaring planning on the same link is refused;
        // the link stays open.
        p.link.send_text(r#"{"type":"hello","protocol_version":1,"features":["resumable-sessions"],"manifest":{"planning":true}}"#).await;
        match p.link.next_work().await {
            Some(ServerMessage::Refusal { code, message, .. }) => assert_eq!(code.to_string(), "unexpected_message", "{message}"),
            other => panic!("a second hello must be refused, got {other:?}"),
        }
        // No HTTP route calls update_plan or switches planning on.
        let server = &p.s.server;
        let token = p.s.token.as_str();
        let update = json!({"expected_revision": 0, "steps": [{"id": "a", "description": "A", "status": "pending"}]});
        let tries = [
            (format!("/documents/{}/tools/update_plan", p.s.doc), update.clone(), 404),
            (format!("/sessions/{}/plan", p.session), update.clone(), 404),
            (format!("/sessions/{}", p.session), json!({"planning": true}), 405),
            (format!("/documents/{}/planner", p.s.doc), json!({"planning": true}), 405),
        ];
        for (path, body, expected) in tries {
            let (status, answer) = server.post(Some(token), &path, body).await;
            assert_eq!(status, expected, "POST {path}: {answer}");
            if status == 404 {
                assert_eq!(answer["error"]["code"], "route_not_found", "POST {path}: {answer}");
            }
        }
        // Nor can a message for the Planner carry a planning switch.
        let chat = p.s.chat().await;
        for path in [format!("/documents/{}/chat", p.s.doc), format!("/documents/{}/planner/invoke", p.s.doc)] {
            let (status, answer) = server.post(Some(token), &path, json!({"text": "@planner plan it", "planning": true})).await;
            refused_for_planning(status, &answer, &path);
        }
        assert_eq!(p.s.chat().await, chat, "nothing was posted");
        // Nor can a machine be paired with planning on.
        let (_, machines) = server.get(Some(token), "/machines").await;
        let (status, answer) = server.post(Some(token), "/machines", json!({"name": "planner", "planning": true})).await;
        refused_for_planning(status, &answer, "/machines");
        assert_eq!(server.get(Some(token), "/machines").await.1, machines, "no machine was paired");
        assert_eq!(p.snapshot().await, before, "nothing changed");
        let (code, message) = refusal(p.call("update_plan", update.clone()).await);
        assert_eq!(code, "unknown_tool", "{message}");
        // Another machine of the account that declares planning takes the
        // session over with resume: the session keeps planning off.
        let credential = pair(&p.s.server, &p.s.token, "desktop").await;
        let mut desktop = linked(&p.s.server, &credential, true).await;
        let carried = resume(&mut desktop, held(&p.session, &[], Some(&p.turn))).await;
        assert_eq!(carried.len(), 1);
        p.link = desktop;
        // It runs there now: its turn's calls are answered on this link.
        let read = output(p.call("read_document", json!({})).await);
        assert!(read["outline"].is_array(), "{read}");
        let moved = p.snapshot().await;
        assert_eq!((moved.plan, moved.turn.as_deref()), (None, Some(p.turn.as_str())));
        let (code, message) = refusal(p.call("update_plan", update).await);
        assert_eq!(code, "unknown_tool");
        assert!(!message.contains("update_plan,") && message.ends_with(", ask"), "{message}");
        let raw = raw_snapshot(&p.s.server, &p.s.token, &p.session).await;
        assert!(raw.get("plan").is_none(), "{raw}");
        assert_eq!(starts(&p).await, [false]);
    }

    async fn a_planning_session_keeps_planning_when_a_later_link_of_its_machine_declares_it_off(db) {
        let mut p = Planning::new(&db).await;
        let first = p.update(json!({"expected_revision": 0, "steps": [{"id": "a", "description": "Draft", "status": "in_progress"}]})).await.unwrap();
        assert_eq!(first["plan"]["revision"], 1);
        take_over(&mut p, false).await;
        // The plan is still there, and update_plan still offered, in the
        // running turn and in the next.
        assert_eq!(p.snapshot().await.plan.flatten().map(|plan| plan.revision), Some(1));
        let second = p.update(json!({"expected_revision": 1, "steps": [{"id": "a", "description": "Draft", "status": "completed"}]})).await.unwrap();
        assert_eq!(second["plan"]["revision"], 2);
        reply(&mut p.link, &p.session.clone(), &p.turn.clone(), "Drafted.").await;
        p.snapshot_until(|s| s.turn.is_none()).await;
        p.s.say("@planner carry on").await;
        let Some(ServerMessage::Invoke { session, turn, plan: Some(plan), .. }) = p.link.next_work().await else {
            panic!("the next turn carries the plan")
        };
        assert_eq!((session.as_str(), plan.revision), (p.session.as_str(), 2));
        p.turn = turn;
        assert_eq!(p.update(json!({"expected_revision": 2, "steps": []})).await.unwrap()["plan"]["revision"], 3);
        assert_eq!(starts(&p).await, [true]);
        // The later link's own choice holds for a session it starts.
        let (other, turn) = another_session(&mut p).await;
        let (code, _) = refusal(call(&mut p.link, &other, &turn, "update_plan", json!({"expected_revision": 0, "steps": []})).await);
        assert_eq!(code, "unknown_tool");
        let raw = raw_snapshot(&p.s.server, &p.s.token, &other).await;
        assert!(raw.get("plan").is_none(), "{raw}");
    }

    async fn a_session_without_planning_stays_without_it_when_a_later_link_of_its_machine_declares_it_on(db) {
        let mut p = Planning::with(&db, false, |_| {}).await;
        take_over(&mut p, true).await;
        let (code, message) = refusal(p.call("update_plan", json!({"expected_revision": 0, "steps": []})).await);
        assert_eq!(code, "unknown_tool");
        assert!(message.ends_with("tools: read_document, edit_plan, open_decisions, open_decision, ask"), "{message}");
        let raw = raw_snapshot(&p.s.server, &p.s.token, &p.session).await;
        assert!(raw.get("plan").is_none(), "{raw}");
        reply(&mut p.link, &p.session.clone(), &p.turn.clone(), "Done.").await;
        p.snapshot_until(|s| s.turn.is_none()).await;
        p.s.say("@planner again").await;
        let Some(ServerMessage::Invoke { session, turn, plan, .. }) = p.link.next_work().await else {
            panic!("no next turn")
        };
        assert_eq!((session.as_str(), plan), (p.session.as_str(), None));
        p.turn = turn;
        let (code, _) = refusal(p.call("update_plan", json!({"expected_revision": 0, "steps": []})).await);
        assert_eq!(code, "unknown_tool", "still refused in the next turn");
        assert_eq!(starts(&p).await, [false]);
        // The later link's own choice holds for a session it starts.
        let (other, turn) = another_session(&mut p).await;
        let accepted = output(call(&mut p.link, &other, &turn, "update_plan", json!({"expected_revision": 0, "steps": []})).await);
        assert_eq!(accepted["plan"]["revision"], 1);
    }

    async fn the_reserved_name_update_plan_cannot_be_bound_to_anything_else(db) {
        let mut p = Planning::new(&db).await;
        let credential = same_machine(&p);
        // A hello that declares a tool of its own named update_plan, in any
        // form, is refused with the field named, and the link closes.
        let tool = json!([{"name": "update_plan", "description": "my own plan store"}]);
        let hellos = [
            (json!({"type": "hello", "protocol_version": 1, "manifest": {"planning": true, "tools": tool}}), "tools"),
            (json!({"type": "hello", "protocol_version": 1, "manifest": {"planning": false, "tools": tool}}), "tools"),
            (json!({"type": "hello", "protocol_version": 1, "manifest": {"planning": true, "update_plan": {"binding": "mine"}}}), "update_plan"),
            (json!({"type": "hello", "protocol_version": 1, "manifest": {"planning": true}, "tools": tool}), "tools"),
        ];
        for (hello, field) in hellos {
            let mut link = LinkClient::connect(p.s.server.addr, &credential).await.unwrap();
            link.send_text(&hello.to_string()).await;
            match link.next().await {
                Some(ServerMessage::Refusal { code, message, .. }) => {
                    assert_eq!(code.to_string(), "invalid_hello", "{hello}: {message}");
                    assert!(message.contains(&format!("unknown field `{field}`")), "{hello}: {message}");
                }
                other => panic!("{hello}: expected a refusal, got {other:?}"),
            }
            assert_eq!(link.wait_closed().await.0, margin_protocol::link::close::BAD_HELLO, "{hello}");
        }
        // In the session, update_plan is the plan and only the plan: another
        // tool's arguments are malformed for it and change nothing.
        let before = p.snapshot().await;
        let texts = p.s.server.block_texts(&p.s.token, &p.s.doc).await;
        let (revision, _) = texts.clone();
        let edit = json!({"revision": revision, "edits": [{"op": "insert", "kind": "paragraph", "text": "Sneaked in"}]});
        let (code, message) = refusal(p.call("update_plan", edit).await);
        assert_eq!(code, "invalid_input");
        assert!(message.starts_with("malformed arguments for update_plan"), "{message}");
        // Look-alike names are no aliases of it.
        for name in ["Update_Plan", "UPDATE_PLAN", "update-plan", "update_plan ", " update_plan", "update_plan\u{0}"] {
            let (code, message) = refusal(p.call(name, json!({"expected_revision": 0, "steps": []})).await);
            assert_eq!(code, "unknown_tool", "{name:?}");
            assert!(message.ends_with("tools: read_document, edit_plan, open_decisions, open_decision, ask, update_plan"), "{name:?}: {message}");
        }
        assert_eq!(p.snapshot().await, before, "nothing changed");
        assert_eq!(p.s.server.block_texts(&p.s.token, &p.s.doc).await, texts);
        let accepted = p.update(json!({"expected_revision": 0, "steps": [{"id": "a", "description": "A", "status": "pending"}]})).await.unwrap();
        assert_eq!(accepted["plan"]["revision"], 1, "the session's own plan, still bound");
    }
}
