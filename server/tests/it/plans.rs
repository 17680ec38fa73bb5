//! Durable session plans over the machine link (SPEC U1–U6), with a
//! scripted Planner speaking the link's JSON, on both backends.

use std::time::Duration;

use margin_protocol::link::{ClientMessage, ServerMessage};
use margin_protocol::sessions::{SessionEvent, SessionSnapshot};
use serde_json::{json, Value};

use crate::harness::{LinkClient, Sse, TestDb};
use crate::on_both_backends;
use crate::turns::{invoked, reply, Scene};

/// A document, a linked Planner and its first turn.
pub(crate) struct Planning {
    pub s: Scene,
    pub link: LinkClient,
    pub session: String,
    pub turn: String,
    calls: u32,
}

impl Planning {
    /// A Planner that declared `planning: true`, in its first turn.
    pub async fn new(db: &TestDb) -> Planning {
        Self::with(db, true, |_| {}).await
    }

    pub async fn with(
        db: &TestDb,
        planning: bool,
        adjust: impl FnOnce(&mut margin_server::serve::ServeOptions),
    ) -> Planning {
        let s = Scene::with(db, adjust).await;
        let mut link = s.machine().await;
        let welcome = if planning {
            link.hello_planning().await
        } else {
            link.hello().await
        };
        let ServerMessage::Welcome { capabilities, .. } = welcome else {
            panic!("no welcome: {welcome:?}")
        };
        assert!(
            capabilities.durable_plans,
            "the server advertises durable plans (U1)"
        );
        s.say("@planner plan the launch").await;
        let (session, turn, _, _) = invoked(&mut link).await;
        Planning {
            s,
            link,
            session,
            turn,
            calls: 0,
        }
    }

    /// Calls `name` in the current turn with a fresh call id.
    pub async fn call(&mut self, name: &str, arguments: Value) -> ServerMessage {
        self.calls += 1;
        let call_id = format!("call-{}", self.calls);
        self.call_in(&self.turn.clone(), &call_id, name, arguments)
            .await
    }

    pub async fn call_in(
        &mut self,
        turn: &str,
        call_id: &str,
        name: &str,
        arguments: Value,
    ) -> ServerMessage {
        self.link
            .send_message(&ClientMessage::ToolCall {
                session: self.session.clone(),
                turn: turn.into(),
                call_id: call_id.into(),
                name: name.into(),
                arguments,
            })
            .await;
        self.link.next_work().await.expect("a tool result")
    }

    /// `update_plan`: the output, or the refusal's code and message.
    pub async fn update(&mut self, arguments: Value) -> Result<Value, (String, String)> {
        match self.call("update_plan", arguments).await {
            ServerMessage::ToolResult {
                output: Some(output),
                error: None,
                ..
            } => Ok(serde_json::to_value(&output).unwrap()),
            ServerMessage::ToolResult {
                error: Some(refusal),
                ..
            } => Err((refusal.code.to_string(), refusal.message)),
            other => panic!("expected a tool result, got {other:?}"),
        }
    }

    /// `GET /sessions/{sid}` as the document's owner.
    pub async fn snapshot(&self) -> SessionSnapshot {
        self.snapshot_as(&self.s.token).await
    }

    pub async fn snapshot_as(&self, token: &str) -> SessionSnapshot {
        for _ in 0..500 {
            let (status, body) = self
                .s
                .server
                .get(Some(token), &format!("/sessions/{}", self.session))
                .await;
            if status == 200 {
                return serde_json::from_value(body).unwrap();
            }
            // The session's first event commits just after `invoke`.
            assert_eq!(status, 404, "{body}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no snapshot of session {}", self.session);
    }

    /// Waits until the snapshot satisfies `done`.
    pub async fn snapshot_until(&self, done: impl Fn(&SessionSnapshot) -> bool) -> SessionSnapshot {
        for _ in 0..500 {
            let snapshot = self.snapshot().await;
            if done(&snapshot) {
                return snapshot;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the snapshot never got there: {:?}", self.snapshot().await);
    }

    /// Every event of the session so far, from cursor 0.
    pub async fn events(&self) -> Vec<(u64, SessionEvent)> {
        let cursor = self.snapshot().await.cursor;
        let mut sse = Sse::open(
            self.s.server.addr,
            &self.s.token,
            &format!("/sessions/{}/events", self.session),
            None,
        )
        .await
        .unwrap();
        sse.take(cursor as usize)
            .await
            .into_iter()
            .map(|e| (e.id.expect("an id"), e.session_event()))
            .collect()
    }

    /// The plan's revision, or `None` when there is none yet.
    pub async fn revision(&self) -> Option<u64> {
        self.snapshot()
            .await
            .plan
            .expect("planning is on")
            .map(|plan| plan.revision)
    }
}

fn step(id: &str, description: &str, status: &str) -> Value {
    json!({"id": id, "description": description, "status": status})
}

fn steps(count: usize) -> Vec<Value> {
    (0..count)
        .map(|i| step(&format!("s{i}"), &format!("Step {i}"), "pending"))
        .collect()
}

fn plan_events(events: &[(u64, SessionEvent)]) -> Vec<&SessionEvent> {
    events
        .iter()
        .map(|(_, e)| e)
        .filter(|e| {
            matches!(
                e,
                SessionEvent::PlanUpdated { .. } | SessionEvent::ToolFinished { .. }
            )
        })
        .collect()
}

on_both_backends! {
    async fn an_accepted_update_replaces_the_plan_records_turn_and_call_and_emits_plan_updated(db) {
        let mut p = Planning::new(&db).await;
        assert_eq!(p.snapshot().await.plan, Some(None), "null until the first update (E1)");
        let output = p.update(json!({"expected_revision": 0, "explanation": "Investigate first",
            "steps": [step("inspect", "Read the plan", "in_progress"), step("verify", "Run the tests", "pending")]})).await.unwrap();
        assert_eq!(output["plan"]["revision"], 1);
        assert!(output["result"].as_str().unwrap().contains("revision 1"));
        let plan = p.snapshot().await.plan.unwrap().unwrap();
        assert_eq!((plan.revision, plan.turn_id.as_str(), plan.call_id.as_str()), (1, p.turn.as_str(), "call-1"));
        assert_eq!(plan.explanation.as_deref(), Some("Investigate first"));
        assert_eq!(plan.steps.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["inspect", "verify"]);
        // The whole list is replaced, not merged.
        p.update(json!({"expected_revision": 1, "steps": [step("verify", "Run the tests", "in_progress")]})).await.unwrap();
        let plan = p.snapshot().await.plan.unwrap().unwrap();
        assert_eq!((plan.revision, plan.steps.len(), plan.explanation), (2, 1, None));
        // U4: the terminal event, with no tool_started or approval before it.
        let events = p.events().await;
        let SessionEvent::PlanUpdated { name, call_id, plan, result, enforcement } = plan_events(&events)[0].clone() else {
            panic!("expected plan_updated: {events:?}")
        };
        assert_eq!((name.as_str(), call_id.as_str(), plan.revision, enforcement.as_str()), ("update_plan", "call-1", 1, "session-metadata-only"));
        assert_eq!(result, output["result"].as_str().unwrap());
        let kinds: Vec<&str> = events.iter().map(|(_, e)| e.kind()).collect();
        assert!(!kinds.iter().any(|k| k.contains("tool_started") || k.contains("approval")), "{kinds:?}");
    }

    async fn an_empty_list_clears_the_plan_and_still_advances_the_revision(db) {
        let mut p = Planning::new(&db).await;
        p.update(json!({"expected_revision": 0, "steps": [step("a", "A", "pending")]})).await.unwrap();
        let output = p.update(json!({"expected_revision": 1, "steps": []})).await.unwrap();
        assert_eq!(output["plan"]["revision"], 2);
        let plan = p.snapshot().await.plan.unwrap().unwrap();
        assert_eq!((plan.revision, plan.steps.len()), (2, 0));
    }

    async fn a_stale_revision_is_refused_with_is_error_and_changes_nothing(db) {
        let mut p = Planning::new(&db).await;
        p.update(json!({"expected_revision": 0, "steps": [step("a", "A", "pending")]})).await.unwrap();
        let before = p.snapshot().await.plan;
        let (code, message) = p.update(json!({"expected_revision": 0, "steps": []})).await.unwrap_err();
        assert_eq!(code, "stale_revision");
        assert!(message.contains("expected_revision is 0") && message.contains("revision 1"), "{message}");
        assert_eq!(p.snapshot().await.plan, before);
        // U4: a semantic rejection is tool_finished with the error, and no plan_updated.
        let events = p.events().await;
        let last = plan_events(&events).last().cloned().cloned();
        let Some(SessionEvent::ToolFinished { name, call_id, error }) = last else { panic!("{events:?}") };
        assert_eq!((name.as_str(), call_id.as_str(), error.code.as_str()), ("update_plan", "call-2", "stale_revision"));
        assert_eq!(plan_events(&events).iter().filter(|e| matches!(e, SessionEvent::PlanUpdated { .. })).count(), 1);
    }

    async fn every_bound_holds_at_its_limit_and_is_refused_just_past_it(db) {
        let mut p = Planning::new(&db).await;
        let long = |bytes: usize| "é".repeat(bytes / 2) + &"x".repeat(bytes % 2);
        let mut two_in_progress = steps(2);
        two_in_progress[0]["status"] = json!("in_progress");
        two_in_progress[1]["status"] = json!("in_progress");
        let accepted = [
            ("32 steps", json!({"steps": steps(32)})),
            ("a 64-byte id", json!({"steps": [step(&"i".repeat(64), "A", "pending")]})),
            ("a 240-byte multi-byte description", json!({"steps": [step("a", &long(240), "pending")]})),
            ("a 500-byte explanation", json!({"explanation": long(500), "steps": []})),
            ("one step in progress", json!({"steps": [step("a", "A", "in_progress"), step("b", "B", "completed")]})),
        ];
        let refused = [
            ("33 steps", json!({"steps": steps(33)}), "at most 32 steps"),
            ("a 65-byte id", json!({"steps": [step(&"i".repeat(65), "A", "pending")]}), "1 to 64 ASCII bytes"),
            ("an empty id", json!({"steps": [step("", "A", "pending")]}), "1 to 64 ASCII bytes"),
            ("a non-ASCII id", json!({"steps": [step("étape", "A", "pending")]}), "1 to 64 ASCII bytes"),
            ("a 241-byte description", json!({"steps": [step("a", &long(241), "pending")]}), "at most 240 bytes"),
            ("a blank description", json!({"steps": [step("a", "  ", "pending")]}), "non-blank description"),
            ("a 501-byte explanation", json!({"explanation": long(501), "steps": []}), "at most 500 bytes"),
            ("two steps in progress", json!({"steps": two_in_progress}), "at most one step is in progress"),
            ("a duplicate id", json!({"steps": [step("a", "A", "pending"), step("a", "B", "pending")]}), "used twice"),
            ("a control character in a description", json!({"steps": [step("a", "A\u{7}", "pending")]}), "control character"),
            ("a newline in the explanation", json!({"explanation": "one\ntwo", "steps": []}), "control character"),
            ("a control character in an id", json!({"steps": [step("a\t", "A", "pending")]}), "control character"),
        ];
        for (what, mut arguments) in accepted {
            arguments["expected_revision"] = json!(p.revision().await.unwrap_or(0));
            assert!(p.update(arguments).await.is_ok(), "{what} is accepted");
        }
        let revision = p.revision().await;
        assert_eq!(revision, Some(5));
        for (what, mut arguments, rule) in refused {
            arguments["expected_revision"] = json!(5);
            let (code, message) = p.update(arguments).await.unwrap_err();
            assert_eq!(code, "invalid_plan", "{what}");
            assert!(message.contains(rule), "{what}: {message:?} names {rule:?}");
            assert_eq!(p.revision().await, revision, "{what} changed nothing");
        }
        // An unknown status or a missing field is a malformed argument: the
        // ordinary tool-argument error, with no event.
        let cursor = p.snapshot().await.cursor;
        for malformed in [
            json!({"expected_revision": 5, "steps": [step("a", "A", "done")]}),
            json!({"steps": []}),
            json!({"expected_revision": -1, "steps": []}),
            json!({"expected_revision": 5, "steps": [], "session": "another"}),
        ] {
            let (code, _) = p.update(malformed.clone()).await.unwrap_err();
            assert_eq!(code, "invalid_input", "{malformed}");
        }
        assert_eq!(p.snapshot().await.cursor, cursor);
    }

    async fn a_planner_that_did_not_declare_planning_is_not_offered_update_plan_and_its_snapshot_has_no_plan(db) {
        let mut p = Planning::with(&db, false, |_| {}).await;
        let ServerMessage::ToolResult { error: Some(refusal), .. } = p.call("update_plan", json!({"expected_revision": 0, "steps": []})).await else {
            panic!("update_plan must be refused")
        };
        assert_eq!(refusal.code, "unknown_tool");
        assert!(refusal.message.ends_with("tools: read_document, edit_plan, open_decisions, open_decision, ask"), "{}", refusal.message);
        let (status, body) = p.s.server.get(Some(&p.s.token), &format!("/sessions/{}", p.session)).await;
        assert_eq!(status, 200);
        assert!(body.get("plan").is_none(), "no plan field: {body}");
        assert_eq!(p.snapshot().await.plan, None);
    }

    async fn a_planning_planners_unknown_tool_refusal_lists_update_plan(db) {
        let mut p = Planning::new(&db).await;
        let ServerMessage::ToolResult { error: Some(refusal), .. } = p.call("update_plans", json!({})).await else { panic!() };
        assert!(refusal.message.ends_with(", ask, update_plan"), "{}", refusal.message);
    }

    async fn the_plan_is_handed_back_with_each_later_turn_and_survives_a_restart(db) {
        let mut p = Planning::new(&db).await;
        p.update(json!({"expected_revision": 0, "steps": [step("a", "Draft the launch", "in_progress")]})).await.unwrap();
        reply(&mut p.link, &p.session.clone(), &p.turn.clone(), "Drafting.").await;
        p.s.say("@planner carry on").await;
        let Some(ServerMessage::Invoke { plan: Some(plan), turn, .. }) = p.link.next_work().await else {
            panic!("the next turn carries the plan (U6)")
        };
        assert_eq!((plan.revision, plan.steps[0].description.as_str()), (1, "Draft the launch"));
        p.turn = turn;
        p.update(json!({"expected_revision": 1, "steps": [step("a", "Draft the launch", "completed")]})).await.unwrap();
        let turn = p.turn.clone();
        reply(&mut p.link, &p.session.clone(), &turn, "Drafted.").await;
        p.snapshot_until(|s| s.turn.is_none()).await;
        p.s.server.restart().await;
        // The session is taken back, waiting for its machine.
        let after = p.snapshot().await;
        assert_eq!(after.state, margin_protocol::sessions::SessionState::Disconnected);
        let plan = after.plan.unwrap().unwrap();
        assert_eq!((plan.revision, plan.steps[0].status), (2, margin_protocol::sessions::StepStatus::Completed));
        // The account's next link resumes it, and its next turn is handed
        // the plan that survived the restart (U6).
        p.link = p.s.machine().await;
        p.link.hello_planning().await;
        p.link.send_message(&ClientMessage::Resume { sessions: vec![margin_protocol::link::HeldSession { session: p.session.clone(), questions: vec![], turn: None, calls: vec![] }] }).await;
        let Some(ServerMessage::Resumed { sessions, .. }) = p.link.next_work().await else { panic!("no resumed") };
        assert_eq!(sessions.len(), 1);
        p.snapshot_until(|s| s.state == margin_protocol::sessions::SessionState::Active).await;
        p.s.say("@planner and now?").await;
        let Some(ServerMessage::Invoke { session, plan: Some(plan), turn, .. }) = p.link.next_work().await else {
            panic!("the turn after the restart carries the plan (U6)")
        };
        assert_eq!((session.as_str(), plan.revision), (p.session.as_str(), 2));
        p.turn = turn;
        let output = p.update(json!({"expected_revision": 2, "steps": []})).await.unwrap();
        assert_eq!(output["plan"]["revision"], 3);
    }

    async fn steps_never_complete_a_turn_and_a_finished_turn_completes_no_step(db) {
        let mut p = Planning::new(&db).await;
        p.update(json!({"expected_revision": 0, "steps": [step("a", "A", "completed"), step("b", "B", "completed")]})).await.unwrap();
        assert_eq!(p.snapshot().await.turn.as_deref(), Some(p.turn.as_str()), "every step completed; the turn still runs");
        p.update(json!({"expected_revision": 1, "steps": [step("a", "A", "completed"), step("b", "B", "in_progress")]})).await.unwrap();
        reply(&mut p.link, &p.session.clone(), &p.turn.clone(), "Done for now.").await;
        let snapshot = p.snapshot_until(|s| s.turn.is_none()).await;
        let plan = snapshot.plan.unwrap().unwrap();
        assert_eq!(plan.steps[1].status, margin_protocol::sessions::StepStatus::InProgress, "the turn's end marked nothing complete");
    }

    async fn an_update_from_a_finished_turn_or_after_a_stop_does_not_land(db) {
        let mut p = Planning::new(&db).await;
        p.update(json!({"expected_revision": 0, "steps": [step("a", "A", "in_progress")]})).await.unwrap();
        // After a Stop is asked for, a late update is refused; the update
        // committed before it stays visible.
        let (status, _) = p.s.server.post(Some(&p.s.token), &format!("/documents/{}/planner/stop", p.s.doc), json!({})).await;
        assert_eq!(status, 202);
        assert!(matches!(p.link.next_work().await, Some(ServerMessage::Stop { .. })));
        let (code, _) = p.update(json!({"expected_revision": 1, "steps": []})).await.unwrap_err();
        assert_eq!(code, "stop_requested");
        let snapshot = p.snapshot().await;
        assert!(snapshot.stop_pending);
        assert_eq!(snapshot.plan.unwrap().unwrap().revision, 1, "committed before the Stop: still shown");
        // Resume withdraws the Stop; the turn ends; an update naming it is late.
        let (status, _) = p.s.server.post(Some(&p.s.token), &format!("/documents/{}/planner/resume", p.s.doc), json!({})).await;
        assert_eq!(status, 202);
        assert!(matches!(p.link.next_work().await, Some(ServerMessage::StopWithdrawn { .. })));
        let old_turn = p.turn.clone();
        reply(&mut p.link, &p.session.clone(), &old_turn, "Paused.").await;
        p.snapshot_until(|s| s.turn.is_none()).await;
        let late = p.call_in(&old_turn, "late", "update_plan", json!({"expected_revision": 1, "steps": []})).await;
        assert!(matches!(late, ServerMessage::Refusal { ref code, .. } if code == "unknown_turn"), "{late:?}");
        assert_eq!(p.revision().await, Some(1));
    }

    async fn a_failed_commit_emits_nothing_and_changes_nothing(db) {
        let mut p = Planning::new(&db).await;
        p.update(json!({"expected_revision": 0, "steps": [step("a", "A", "pending")]})).await.unwrap();
        let before = p.snapshot().await;
        let mut sse = Sse::open(p.s.server.addr, &p.s.token, &format!("/sessions/{}/events", p.session), Some(&before.cursor.to_string())).await.unwrap();
        // A real storage failure: the database refuses plan_updated rows.
        crate::feed::refuse_plan_events(&db).await;
        let (code, _) = p.update(json!({"expected_revision": 1, "steps": []})).await.unwrap_err();
        assert_eq!(code, "internal", "the server could not decide; retry is allowed");
        assert_eq!(p.snapshot().await, before, "neither the plan nor the cursor moved");
        assert_eq!(sse.within(Duration::from_millis(300)).await, None, "no event was emitted");
        crate::feed::allow_plan_events(&db).await;
        // The same call succeeds once storage is back: nothing half-written.
        let output = p.update(json!({"expected_revision": 1, "steps": []})).await.unwrap();
        assert_eq!(output["plan"]["revision"], 2);
        let next = sse.next().await.unwrap();
        assert_eq!((next.id, next.event.as_str()), (Some(before.cursor + 1), "plan_updated"));
    }
}
