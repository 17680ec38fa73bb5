//! The tool journal on a virtual clock (SPEC W1, W2a, U1–U5, P1, D3): calls
//! are journaled before they run and as they finish, none runs twice, and
//! a call in flight at a restart is interrupted.

mod support;

use margin_planner::{
    CallId, Effect, Entry, Held, LinkLoss, StoredResult, TurnId, KEPT_READ_BYTES,
};
use margin_protocol::decisions::{AnswerBody, CaptureStatus};
use margin_protocol::link::ServerMessage;
use margin_protocol::tools::{ToolCall, ToolOutput};
use pretty_assertions::assert_eq;
use support::{decisions, read_output, result_of, Sim};

#[test]
fn a_document_tool_call_is_journaled_as_started_before_it_runs() {
    let mut sim = Sim::new();
    sim.say("@planner read");
    let step = sim.call("c1", "read_document", serde_json::json!({}));
    assert!(matches!(
        step.journal.as_slice(),
        [margin_planner::Record {
            entry: Entry::CallStarted { .. },
            ..
        }]
    ));
    assert_eq!(
        step.effects,
        [Effect::RunTool {
            call: CallId::from("c1"),
            tool: ToolCall::ReadDocument(Default::default())
        }]
    );
    let finished = sim.finish("c1", Ok(read_output(3)));
    assert!(matches!(
        &finished.journal[0].entry,
        Entry::CallFinished {
            result: StoredResult::Output(_),
            ..
        }
    ));
    let [Effect::Send(result)] = finished.effects.as_slice() else {
        panic!("{:?}", finished.effects)
    };
    assert_eq!(result_of(result), ("c1".into(), Ok(read_output(3))));
}

#[test]
fn a_call_id_seen_before_is_answered_from_the_journal_and_never_run_again() {
    let mut sim = Sim::new();
    sim.say("@planner ask");
    sim.ask("c1", "card-1");
    let seq = sim.journal.len() as u64;
    let again = sim.call("c1", "ask", support::ask_arguments("card-1"));
    assert!(again.journal.is_empty(), "nothing new is recorded");
    assert_eq!(
        again.effects,
        [Effect::Redeliver {
            turn: TurnId::from("t1"),
            call: CallId::from("c1"),
            seq
        }]
    );
    assert!(matches!(
        sim.stored(seq),
        StoredResult::Output(ToolOutput::Decisions(_))
    ));
}

#[test]
fn an_acknowledged_ask_is_a_host_request_in_the_same_record_as_its_result() {
    let mut sim = Sim::new();
    sim.say("@planner ask");
    let step = sim.ask("c1", "card-1");
    // One record holds both: a crash cannot leave the card asked but the
    // session not waiting on it.
    assert!(matches!(
        &step.journal[..],
        [margin_planner::Record { entry: Entry::CallFinished { opened, .. }, .. }]
            if opened == &[margin_planner::RequestId::from("card-1")]
    ));
    assert_eq!(sim.event_kinds().last(), Some(&"host_request_opened"));
    assert!(sim.session.in_use());
    let questions: Vec<_> = sim.session.questions().cloned().collect();
    assert_eq!(questions, [margin_planner::RequestId::from("card-1")]);
}

#[test]
fn an_ask_replaying_an_answered_question_delivers_its_answer_at_once() {
    let mut sim = Sim::new();
    sim.say("@planner ask");
    sim.call("c1", "ask", support::ask_arguments("card-1"));
    let outcome = margin_planner::ToolOutcome {
        result: Ok(decisions(&[("card-1", CaptureStatus::AlreadyInDocument)])),
        answered: vec![(
            margin_planner::RequestId::from("card-1"),
            AnswerBody::Yes(true),
            "bo".into(),
        )],
        bytes: 100,
    };
    let step = sim
        .session
        .handle_tool_finished(CallId::from("c1"), outcome, sim.now);
    let step = sim.take(step);
    assert!(matches!(
        step.effects.as_slice(),
        [
            Effect::Send(ServerMessage::ToolResult { .. }),
            Effect::Send(ServerMessage::InputResult { request, answered_by, .. })
        ] if request == "card-1" && answered_by == "bo"
    ));
}

#[test]
fn a_large_read_is_not_kept_but_a_write_always_is() {
    let mut sim = Sim::new();
    sim.say("@planner read a lot");
    let big = 2_000;
    sim.read("c1", big);
    let bytes = serde_json::to_string(&read_output(big)).unwrap().len();
    assert!(bytes > KEPT_READ_BYTES);
    let read_seq = sim.journal.len() as u64;
    assert_eq!(sim.stored(read_seq), StoredResult::NotKept { bytes });
    sim.call(
        "c2",
        "edit_plan",
        serde_json::json!({"revision": 7, "edits": []}),
    );
    let edited = ToolOutput::EditPlan(margin_protocol::decisions::EditPlanOutput {
        revision: 8,
        outline: match read_output(big) {
            ToolOutput::ReadDocument(read) => read.outline,
            _ => unreachable!(),
        },
    });
    sim.finish("c2", Ok(edited.clone()));
    let edit_seq = sim.journal.len() as u64;
    assert_eq!(sim.stored(edit_seq), StoredResult::Output(edited));
    // Sent again, the read that was not kept says so; reading again is
    // the remedy.
    let message = sim
        .session
        .stored_result(&CallId::from("c1"), StoredResult::NotKept { bytes });
    assert_eq!(result_of(&message).1, Err("result_not_kept".into()));
}

#[test]
fn malformed_arguments_and_unknown_tools_are_refused_without_a_record() {
    let mut sim = Sim::new();
    sim.say("@planner go");
    let bad = sim.call("c1", "edit_plan", serde_json::json!({"revision": "x"}));
    let unknown = sim.call("c2", "update_plan", serde_json::json!({}));
    assert!(bad.journal.is_empty() && unknown.journal.is_empty());
    let codes: Vec<_> = [bad, unknown]
        .iter()
        .map(|step| match step.effects.as_slice() {
            [Effect::Send(message)] => result_of(message).1.unwrap_err(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(codes, ["invalid_input", "unknown_tool"]);
}

#[test]
fn a_call_for_a_turn_that_is_not_running_is_refused_naming_the_call() {
    let mut sim = Sim::new();
    sim.say("@planner go");
    let step = sim.session.handle_tool_call(
        "t7",
        CallId::from("c1"),
        "read_document",
        serde_json::json!({}),
        sim.now,
    );
    let step = sim.take(step);
    assert!(matches!(
        step.effects.as_slice(),
        [Effect::Send(ServerMessage::Refusal { code, call_id: Some(call), .. })]
            if *code == "unknown_turn" && call == "c1"
    ));
}

#[test]
fn update_plan_commits_the_plan_its_result_and_its_event_in_one_step() {
    let mut sim = Sim::planning();
    sim.say("@planner plan");
    let plan = serde_json::json!({"expected_revision": 0,
        "steps": [{"id": "a", "description": "Draft", "status": "in_progress"}]});
    let step = sim.call("c1", "update_plan", plan.clone());
    let kinds: Vec<_> = step
        .journal
        .iter()
        .map(|r| match r.entry {
            Entry::PlanUpdated { .. } => "plan_updated",
            Entry::CallFinished { .. } => "call_finished",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["plan_updated", "call_finished"]);
    assert_eq!(
        step.events.iter().map(|e| e.kind()).collect::<Vec<_>>(),
        ["plan_updated"]
    );
    // The same list at the old revision: stale, recorded, no new plan.
    let stale = sim.call("c2", "update_plan", plan);
    assert_eq!(
        stale.events.iter().map(|e| e.kind()).collect::<Vec<_>>(),
        ["tool_finished"]
    );
    let [Effect::Send(result)] = stale.effects.as_slice() else {
        panic!()
    };
    assert_eq!(result_of(result).1, Err("stale_revision".into()));
}

#[test]
fn update_plan_after_a_stop_is_refused_and_changes_nothing() {
    let mut sim = Sim::planning();
    sim.say("@planner plan");
    let stop = sim.session.handle_stop_requested(sim.now);
    sim.take(stop);
    let step = sim.call(
        "c1",
        "update_plan",
        serde_json::json!({"expected_revision": 0, "steps": []}),
    );
    assert!(step.journal.is_empty() && step.events.is_empty());
    let [Effect::Send(result)] = step.effects.as_slice() else {
        panic!()
    };
    assert_eq!(result_of(result).1, Err("stop_requested".into()));
}

#[test]
fn a_call_in_flight_at_a_restart_is_interrupted_recorded_and_never_run_again() {
    let mut sim = Sim::new();
    sim.say("@planner edit");
    sim.call(
        "c1",
        "edit_plan",
        serde_json::json!({"revision": 7, "edits": []}),
    );
    // The server is killed while the edit runs.
    let restarted = sim.restart();
    assert!(matches!(
        restarted.journal.first().map(|r| &r.entry),
        Some(Entry::CallInterrupted { call }) if call == &CallId::from("c1")
    ));
    let before = sim.sent.len();
    let held = Held {
        questions: vec![],
        turn: Some(TurnId::from("t1")),
        calls: vec![CallId::from("c1")],
    };
    sim.resume(held);
    let results: Vec<_> = sim.sent_since(before).iter().map(result_of).collect();
    assert_eq!(results, [("c1".to_owned(), Err("interrupted".to_owned()))]);
    // Asked again, it is still interrupted: it never runs.
    let again = sim.call(
        "c1",
        "edit_plan",
        serde_json::json!({"revision": 7, "edits": []}),
    );
    assert!(!again
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RunTool { .. })));
    assert_eq!(
        again
            .effects
            .iter()
            .filter_map(|e| match e {
                Effect::Send(m) => Some(result_of(m).1),
                _ => None,
            })
            .collect::<Vec<_>>(),
        [Err("interrupted".to_owned())]
    );
}

#[test]
fn a_call_finished_before_a_drop_gets_its_stored_result_after_resume() {
    let mut sim = Sim::new();
    sim.say("@planner read");
    sim.read("c1", 2);
    let seq = sim.journal.len() as u64;
    sim.link_lost(LinkLoss::Dropped);
    let step = sim.resume(Held {
        questions: vec![],
        turn: Some(TurnId::from("t1")),
        calls: vec![CallId::from("c1"), CallId::from("c9")],
    });
    assert_eq!(
        step.effects[0],
        Effect::Redeliver {
            turn: TurnId::from("t1"),
            call: CallId::from("c1"),
            seq
        }
    );
    assert!(matches!(
        &step.effects[1],
        Effect::Send(ServerMessage::Refusal { code, call_id: Some(c), .. })
            if *code == "unknown_call" && c == "c9"
    ));
}

#[test]
fn a_call_whose_result_was_never_recorded_is_interrupted_when_asked_again() {
    let mut sim = Sim::new();
    sim.say("@planner read");
    // Started, run, but its result could not be committed: the session
    // still holds it pending, and its driver has moved on.
    sim.call("c1", "read_document", serde_json::json!({}));
    let again = sim.call("c1", "read_document", serde_json::json!({}));
    assert!(matches!(
        again.journal.as_slice(),
        [margin_planner::Record {
            entry: Entry::CallInterrupted { .. },
            ..
        }]
    ));
    let [Effect::Send(result)] = again.effects.as_slice() else {
        panic!("{:?}", again.effects)
    };
    assert_eq!(result_of(result), ("c1".into(), Err("interrupted".into())));
}
