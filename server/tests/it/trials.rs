//! Crash trials (SPEC W1, W2, W2a): a scripted Planner — turns, reads,
//! edits, questions people answer, plan updates, runs — against the real
//! binary, killed with SIGKILL at a random moment of each trial, restarted,
//! and resumed. After every restart the trial checks that nothing it was
//! told is lost and nothing ran twice:
//!
//! - every acknowledged edit is in the document exactly once;
//! - every acknowledged question still waits (or its answer comes);
//! - every answer people were given a 2xx for reaches the machine;
//! - the plan is at the last acknowledged revision (or one past it, when an
//!   update in flight was committed);
//! - every call in flight at the kill gets exactly one answer after
//!   `resume`: its stored result, `interrupted`, or `unknown_call` (never
//!   recorded, so never run) — and an edit's text is there exactly when
//!   that answer says it ran.
//!
//! The last kill is checked like the others: the trials end with a resume.
//! Losses and duplicates are counted, not stopped at, so the tally says
//! how many of each; the test fails unless both are 0.
//!
//! `CRASH_TRIALS` (default 3) and `CRASH_TRIALS_PG` (default 2) set the
//! number of trials; `CRASH_SEED` replays a run. Each check's tally and the
//! total are printed as JSON lines (`--no-capture` shows them);
//! `server/benches/results/` records long runs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use margin_protocol::link::{ClientMessage, HeldSession, ServerMessage};
use margin_protocol::sessions::SessionSnapshot;
use serde_json::{json, Value};

use crate::harness::{LinkClient, Server, TestDb};
use crate::on_both_backends;

/// A small deterministic generator, so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var("CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos() as u64
                    | 1
            });
        eprintln!("crash trials: CRASH_SEED={seed}");
        Rng(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// What the trials checked after each kill, and what they found lost or
/// twice. Each "checked" field counts items checked at one check, summed
/// over the checks (an edit acknowledged in the first trial is checked
/// after every kill that follows).
#[derive(Debug, Default, Clone, serde::Serialize)]
struct Tally {
    trials: usize,
    /// Resumes after a kill whose state was checked: one per trial.
    checks: usize,
    /// Tool results the Planner was given (acknowledged calls).
    calls_acknowledged: usize,
    /// Acknowledged edits found in the document exactly once.
    edits_checked: usize,
    edits_lost: usize,
    /// Acknowledged questions found waiting, or answered and delivered.
    questions_checked: usize,
    questions_lost: usize,
    /// Answers people were given a 2xx for.
    answers_acknowledged: usize,
    /// Of those, delivered to the machine (`input-result`).
    answers_delivered: usize,
    /// Delivered after a kill, on the link that resumed.
    answers_delivered_after_resume: usize,
    /// Acknowledged at a check and not delivered within its deadline.
    answers_lost: usize,
    /// Checks of the plan against its last acknowledged revision.
    plan_checked: usize,
    /// The plan behind its last acknowledged revision.
    plan_lost: usize,
    /// Calls in flight at a kill, and how each was settled after resume.
    calls_in_flight: usize,
    settled_stored: usize,
    settled_stored_refusal: usize,
    settled_interrupted: usize,
    settled_never_recorded: usize,
    /// In flight at a kill and given no answer after resume.
    calls_unanswered: usize,
    /// An answer sent again after a kill cut off its acknowledgement's
    /// commit: allowed (SPEC L5: held until acknowledged).
    answers_redelivered: usize,
    /// A second result for one call, a second `input-result` for one
    /// request on one server's life, or an edit there twice.
    duplicates: usize,
}

impl Tally {
    fn lost(&self) -> usize {
        self.edits_lost
            + self.questions_lost
            + self.answers_lost
            + self.plan_lost
            + self.calls_unanswered
    }
}

/// What the Planner was told, and what it still waits on.
#[derive(Default)]
struct Planner {
    session: Option<String>,
    turn: Option<String>,
    /// Calls sent and not answered: id → what it was.
    in_flight: BTreeMap<String, Op>,
    /// Edit texts acknowledged.
    edits: BTreeSet<String>,
    /// Questions acknowledged and not yet answered to the machine.
    questions: BTreeSet<String>,
    /// Questions people were told they answered, not yet delivered.
    answered: BTreeSet<String>,
    /// Requests whose `input-result` came, ever and on this server's life.
    delivered_ever: BTreeSet<String>,
    delivered_now: BTreeSet<String>,
    /// The last plan revision acknowledged.
    plan: u64,
    /// The document revision the next write is addressed at.
    revision: i64,
    /// A refusal said to read again: the next call is a read.
    read_first: bool,
    next: u64,
}

impl Planner {
    /// An answer arrived: acknowledged, and the question no longer waits.
    async fn delivered(
        &mut self,
        link: &mut LinkClient,
        session: String,
        request: String,
        tally: &mut Tally,
    ) {
        link.send_message(&ClientMessage::InputReceived {
            session,
            request: request.clone(),
        })
        .await;
        if !self.delivered_now.insert(request.clone()) {
            tally.duplicates += 1;
        } else if !self.delivered_ever.insert(request.clone()) {
            tally.answers_redelivered += 1;
        }
        if self.answered.remove(&request) {
            tally.answers_delivered += 1;
        }
        self.questions.remove(&request);
    }

    /// The server was killed: what was delivered on its life may come again.
    fn restarted(&mut self) {
        self.delivered_now.clear();
    }
}

#[derive(Clone, Debug)]
enum Op {
    Read,
    Edit(String),
    Ask,
    Plan,
}

struct Trial {
    server: Server,
    token: String,
    doc: String,
    credential: String,
}

async fn post(server: &Server, token: &str, path: &str, body: Value) -> Option<(u16, Value)> {
    let response = reqwest::Client::new()
        .post(server.url(path))
        .bearer_auth(token)
        .json(&body)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.json().await.unwrap_or(Value::Null)))
}

impl Trial {
    async fn link(&self) -> LinkClient {
        let mut link = LinkClient::connect(self.server.addr, &self.credential)
            .await
            .unwrap();
        assert!(matches!(
            link.hello_planning().await,
            ServerMessage::Welcome { .. }
        ));
        link
    }

    async fn snapshot(&self, session: &str) -> SessionSnapshot {
        crate::crash::snapshot(&self.server, &self.token, session).await
    }

    async fn texts(&self) -> Vec<String> {
        self.server.block_texts(&self.token, &self.doc).await.1
    }
}

/// Runs `trials` trials against `db`.
async fn trials(db: &TestDb, trials: usize) {
    let mut rng = Rng::new();
    let (server, token, doc) = crate::crash::scene(db).await;
    let (status, paired) = server
        .post(Some(&token), "/machines", json!({"name": "laptop"}))
        .await;
    assert_eq!(status, 201);
    let mut trial = Trial {
        server,
        token,
        doc,
        credential: paired["credential"].as_str().unwrap().to_owned(),
    };
    let mut planner = Planner::default();
    let mut tally = Tally::default();
    let backend = if db.is_postgres() {
        "postgres"
    } else {
        "sqlite"
    };
    let mut link = trial.link().await;
    for round in 0..trials {
        script(&mut trial, link, &mut planner, &mut rng, &mut tally, round).await;
        trial.server.restart().await;
        planner.restarted();
        tally.trials += 1;
        // Every kill is checked, the last one's too.
        let before = tally.clone();
        link = trial.link().await;
        let session = planner.session.clone().expect("a trial starts a session");
        resume_and_check(&trial, &mut link, &mut planner, &session, &mut tally).await;
        tally.checks += 1;
        let check = json!({"backend": backend, "trial": round, "lost": tally.lost() - before.lost(),
            "duplicates": tally.duplicates - before.duplicates, "tally": &tally});
        eprintln!("crash trial: {check}");
    }
    eprintln!(
        "crash trials total: {}",
        json!({"backend": backend, "tally": &tally})
    );
    assert_eq!(
        (tally.lost(), tally.duplicates),
        (0, 0),
        "lost or run twice: {tally:?}"
    );
}

/// The new link resumes the session: every call in flight gets exactly one
/// answer, and what was acknowledged is all there.
async fn resume_and_check(
    trial: &Trial,
    link: &mut LinkClient,
    planner: &mut Planner,
    session: &str,
    tally: &mut Tally,
) {
    let held = HeldSession {
        session: session.to_owned(),
        questions: planner.questions.iter().cloned().collect(),
        turn: planner.turn.clone(),
        calls: planner.in_flight.keys().cloned().collect(),
    };
    link.send_message(&ClientMessage::Resume {
        sessions: vec![held],
    })
    .await;
    let Some(ServerMessage::Resumed { sessions, ended }) = link.next_work().await else {
        panic!("no resumed")
    };
    assert!(ended.is_empty(), "the session was ended: {ended:?}");
    let withdrawn: BTreeSet<_> = sessions[0].withdrawn.iter().cloned().collect();
    let lost = planner.questions.intersection(&withdrawn).count();
    tally.questions_lost += lost;
    if lost > 0 {
        eprintln!("crash trial: acknowledged questions withdrawn: {withdrawn:?}");
    }
    tally.calls_in_flight += planner.in_flight.len();
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    let mut outcome: BTreeMap<String, &'static str> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while outcome.len() < planner.in_flight.len() || !planner.answered.is_empty() {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Some(message) = link.work_within(left).await else {
            eprintln!(
                "crash trial: after resume, calls unanswered {:?}, answers undelivered {:?}",
                planner
                    .in_flight
                    .keys()
                    .filter(|c| !outcome.contains_key(*c))
                    .collect::<Vec<_>>(),
                planner.answered
            );
            tally.answers_lost += planner.answered.len();
            planner.answered.clear();
            break;
        };
        match message {
            ServerMessage::ToolResult { call_id, .. } if outcome.contains_key(&call_id) => {
                tally.duplicates += 1;
            }
            ServerMessage::ToolResult {
                call_id,
                output,
                error,
                ..
            } if planner.in_flight.contains_key(&call_id) => {
                *answers.entry(call_id.clone()).or_default() += 1;
                let kind = match (&output, &error) {
                    (Some(_), None) => "stored",
                    (None, Some(e)) if e.code == "interrupted" => "interrupted",
                    (None, Some(_)) => "stored refusal",
                    _ => panic!("a result with neither output nor error"),
                };
                if kind != "interrupted" {
                    acknowledge(planner, &call_id, output, error.is_none(), tally);
                }
                outcome.insert(call_id, kind);
            }
            ServerMessage::Refusal {
                code,
                call_id: Some(call_id),
                ..
            } if planner.in_flight.contains_key(&call_id) => {
                assert_eq!(code, "unknown_call", "call {call_id}");
                if outcome.insert(call_id, "never recorded").is_some() {
                    tally.duplicates += 1;
                }
            }
            ServerMessage::ToolResult { call_id, .. } => {
                // A result for a call answered before the kill.
                eprintln!("crash trial: a second result for {call_id}");
                tally.duplicates += 1;
            }
            ServerMessage::InputResult {
                session, request, ..
            } => {
                if planner.answered.contains(&request) {
                    tally.answers_delivered_after_resume += 1;
                }
                planner.delivered(link, session, request, tally).await;
            }
            ServerMessage::Invoke { turn, .. } => planner.turn = Some(turn),
            other => panic!("after resume, unexpected {other:?}"),
        }
    }
    tally.duplicates += answers.values().filter(|n| **n > 1).count();
    // Each edit in flight: its text is there exactly when it ran.
    let texts = trial.texts().await;
    let count = |text: &str| texts.iter().filter(|t| t.as_str() == text).count();
    for (call, op) in std::mem::take(&mut planner.in_flight) {
        let Some(kind) = outcome.get(&call).copied() else {
            tally.calls_unanswered += 1;
            continue;
        };
        match kind {
            "stored" => tally.settled_stored += 1,
            "stored refusal" => tally.settled_stored_refusal += 1,
            "interrupted" => tally.settled_interrupted += 1,
            _ => tally.settled_never_recorded += 1,
        }
        if let Op::Edit(text) = op {
            let n = count(&text);
            match kind {
                "stored" => assert_eq!(n, 1, "{text}: stored but not there once"),
                "stored refusal" => assert_eq!(n, 0, "{text}: refused but there"),
                "never recorded" => assert_eq!(n, 0, "{text}: never recorded but there"),
                _ => assert!(n <= 1, "{text}: interrupted, there {n} times"),
            }
            if n == 1 {
                planner.edits.insert(text);
            }
        }
    }
    for text in &planner.edits {
        match count(text) {
            1 => tally.edits_checked += 1,
            0 => {
                eprintln!("crash trial: acknowledged edit {text:?} lost");
                tally.edits_lost += 1;
            }
            _ => {
                eprintln!("crash trial: acknowledged edit {text:?} there twice");
                tally.duplicates += 1;
            }
        }
    }
    let snapshot = trial.snapshot(session).await;
    // A question that no longer waits was answered — by a request whose
    // response the kill cut off — and its answer must come.
    let waiting = planner
        .questions
        .iter()
        .filter(|q| snapshot.host_requests.contains(*q))
        .count();
    let mut answered_meanwhile: BTreeSet<String> = planner
        .questions
        .iter()
        .filter(|q| !snapshot.host_requests.contains(*q))
        .cloned()
        .collect();
    tally.questions_checked += waiting;
    while !answered_meanwhile.is_empty() {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match link.work_within(left).await {
            Some(ServerMessage::InputResult {
                session, request, ..
            }) => {
                if answered_meanwhile.remove(&request) {
                    tally.questions_checked += 1;
                    tally.answers_delivered_after_resume += 1;
                }
                planner.delivered(link, session, request, tally).await;
            }
            Some(ServerMessage::Invoke { turn, .. }) => planner.turn = Some(turn),
            Some(ServerMessage::ToolResult { call_id, .. }) => {
                eprintln!("crash trial: a second result for {call_id}");
                tally.duplicates += 1;
            }
            Some(other) => panic!("after resume, unexpected {other:?}"),
            None => {
                eprintln!("crash trial: acknowledged questions neither wait nor were answered: {answered_meanwhile:?}; {snapshot:?}");
                tally.questions_lost += answered_meanwhile.len();
                for lost in std::mem::take(&mut answered_meanwhile) {
                    planner.questions.remove(&lost);
                }
            }
        }
    }
    let revision = snapshot.plan.flatten().map_or(0, |p| p.revision);
    tally.plan_checked += 1;
    if revision < planner.plan {
        eprintln!(
            "crash trial: the plan is at {revision}, behind {}",
            planner.plan
        );
        tally.plan_lost += 1;
    }
    assert!(
        revision <= planner.plan,
        "the plan is at {revision}, past the last acknowledged revision {}",
        planner.plan
    );
}

/// Files what an acknowledged result says.
fn acknowledge(
    planner: &mut Planner,
    call: &str,
    output: Option<margin_protocol::tools::ToolOutput>,
    ok: bool,
    tally: &mut Tally,
) {
    let Some(op) = planner.in_flight.get(call).cloned() else {
        return;
    };
    tally.calls_acknowledged += 1;
    let output = output.map(|o| serde_json::to_value(o).unwrap());
    match (op, output) {
        (Op::Read, Some(read)) => planner.revision = read["revision"].as_i64().unwrap(),
        (Op::Edit(text), Some(edited)) => {
            planner.revision = edited["revision"].as_i64().unwrap();
            planner.edits.insert(text);
        }
        (Op::Ask, Some(asked)) if ok => {
            planner.revision = asked["revision"].as_i64().unwrap();
            for capture in asked["captures"].as_array().unwrap() {
                if capture["captured"] == json!(true) {
                    planner
                        .questions
                        .insert(capture["card_id"].as_str().unwrap().to_owned());
                }
            }
        }
        (Op::Plan, Some(plan)) if ok => planner.plan = plan["plan"]["revision"].as_u64().unwrap(),
        _ => {}
    }
}

/// One trial's work until the kill: a turn, then random calls, answers by
/// people and run reports, while a timer kills the server.
async fn script(
    trial: &mut Trial,
    mut link: LinkClient,
    planner: &mut Planner,
    rng: &mut Rng,
    tally: &mut Tally,
    round: usize,
) {
    if let (Some(session), Some(turn)) = (planner.session.clone(), planner.turn.take()) {
        // The last trial's turn ends here, and a new one starts below.
        link.send_message(&ClientMessage::Reply {
            session,
            turn,
            text: "Done.".into(),
        })
        .await;
    }
    let started = post(
        &trial.server,
        &trial.token,
        &format!("/documents/{}/chat", trial.doc),
        json!({"text": format!("@planner trial {round}")}),
    )
    .await;
    assert_eq!(started.map(|(s, _)| s), Some(201));
    let (session, turn) = loop {
        match link.next_work().await {
            Some(ServerMessage::Invoke { session, turn, .. }) => break (session, turn),
            Some(ServerMessage::InputResult {
                session, request, ..
            }) => {
                planner.delivered(&mut link, session, request, tally).await;
            }
            other => panic!("expected invoke, got {other:?}"),
        }
    };
    planner.session = Some(session.clone());
    planner.turn = Some(turn.clone());
    // Kill at a random moment of the next 250 ms.
    let pid = trial.server.pid();
    planner.read_first = true;
    let delay = Duration::from_millis(rng.below(250));
    let killer = tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    });
    loop {
        planner.next += 1;
        let id = format!("t{round}-c{}", planner.next);
        let choice = if planner.read_first { 0 } else { rng.below(6) };
        let (op, name, arguments) = match choice {
            0 | 1 => (Op::Read, "read_document", json!({})),
            2 => {
                let text = format!("edit {id}");
                let edit = json!({"revision": planner.revision, "edits": [{"op": "insert", "kind": "paragraph", "text": text}]});
                (Op::Edit(text), "edit_plan", edit)
            }
            3 => {
                let texts = trial.texts_quick().await;
                let Some((index, digest)) = texts else { break };
                let key = format!("q-{id}");
                let ask = json!({"revision": planner.revision, "card": {"key": key, "question": format!("Decide {id}?"),
                    "response": "yes_no", "passages": [{"index": index, "digest": digest}]}});
                (Op::Ask, "ask", ask)
            }
            4 => {
                let steps = json!([{"id": "s", "description": format!("Step {id}"), "status": "in_progress"}]);
                (
                    Op::Plan,
                    "update_plan",
                    json!({"expected_revision": planner.plan, "steps": steps}),
                )
            }
            _ => {
                // People answer a question the Planner asked.
                let Some(card) = planner
                    .questions
                    .iter()
                    .find(|q| !planner.answered.contains(*q))
                    .cloned()
                else {
                    continue;
                };
                let path = format!("/documents/{}/decisions/{card}/answer", trial.doc);
                match post(&trial.server, &trial.token, &path, json!({"yes": true})).await {
                    Some((200, _)) => {
                        tally.answers_acknowledged += 1;
                        planner.answered.insert(card);
                    }
                    Some(_) => {}
                    None => break,
                }
                continue;
            }
        };
        planner.in_flight.insert(id.clone(), op);
        link.send_message(&ClientMessage::ToolCall {
            session: session.clone(),
            turn: turn.clone(),
            call_id: id.clone(),
            name: name.into(),
            arguments,
        })
        .await;
        let answered = loop {
            match link.next_raw().await {
                None => break false,
                Some(ServerMessage::ToolResult {
                    call_id,
                    output,
                    error,
                    ..
                }) if call_id == id => {
                    // A stale address is the script's own doing (people's
                    // answers move the document): read again.
                    planner.read_first = error.as_ref().is_some_and(|e| e.read_again);
                    acknowledge(planner, &id, output, error.is_none(), tally);
                    planner.in_flight.remove(&id);
                    break true;
                }
                Some(ServerMessage::InputResult {
                    session, request, ..
                }) => {
                    planner.delivered(&mut link, session, request, tally).await;
                }
                Some(ServerMessage::Heartbeat { seq }) => {
                    link.send_message(&ClientMessage::HeartbeatAck { seq })
                        .await;
                }
                Some(ServerMessage::ToolResult { call_id, .. }) => {
                    // One call is in flight at a time: this one was
                    // answered already.
                    eprintln!("crash trial: a second result for {call_id}");
                    tally.duplicates += 1;
                }
                Some(_) => {}
            }
        };
        if !answered {
            break;
        }
    }
    let _ = killer.await;
}

impl Trial {
    /// The first block's index and digest, or `None` once the server is
    /// gone.
    async fn texts_quick(&self) -> Option<(usize, String)> {
        let response = reqwest::Client::new()
            .get(self.server.url(&format!("/documents/{}/outline", self.doc)))
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        let outline: margin_protocol::OutlineView = response.json().await.ok()?;
        let block = outline.blocks.first()?;
        Some((block.index, block.digest.clone()))
    }
}

fn count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

on_both_backends! {
    async fn a_planner_killed_at_random_points_loses_nothing_acknowledged_and_runs_nothing_twice(db) {
        let n = if db.is_postgres() { count("CRASH_TRIALS_PG", 2) } else { count("CRASH_TRIALS", 3) };
        trials(&db, n).await;
    }
}
