//! The durable plan's rules (SPEC U2, U3): every bound at and just past its
//! limit, with multi-byte text; stale revisions; clearing with `[]`. A
//! refused update changes nothing.

use margin_planner::plan::{Plan, PlanRefusal, PlanUpdate, Step, StepStatus};
use pretty_assertions::assert_eq;

fn step(id: &str, status: StepStatus) -> Step {
    Step {
        id: id.into(),
        description: format!("Do {id}"),
        status,
    }
}

fn update(revision: u64, steps: Vec<Step>) -> PlanUpdate {
    PlanUpdate {
        expected_revision: revision,
        explanation: None,
        steps,
    }
}

/// A plan at revision 1 with one step, to show refusals change nothing.
fn planned() -> Plan {
    let mut plan = Plan::default();
    plan.handle_update(update(0, vec![step("a", StepStatus::Pending)]), "t1", "c1")
        .unwrap();
    plan
}

fn refused(update: PlanUpdate) -> PlanRefusal {
    let mut plan = planned();
    let before = plan.clone();
    let refusal = plan.handle_update(update, "t2", "c2").unwrap_err();
    assert_eq!(plan, before, "a refused update changes nothing");
    refusal
}

fn accepted(update: PlanUpdate) -> Plan {
    let mut plan = planned();
    plan.handle_update(update, "t2", "c2").unwrap().clone()
}

#[test]
fn an_accepted_update_replaces_the_list_advances_the_revision_and_records_turn_and_call() {
    let plan = accepted(update(
        1,
        vec![
            step("inspect", StepStatus::InProgress),
            step("verify", StepStatus::Pending),
        ],
    ));
    assert_eq!(plan.revision, 2);
    assert_eq!(
        (plan.turn_id.as_deref(), plan.call_id.as_deref()),
        (Some("t2"), Some("c2"))
    );
    assert_eq!(
        plan.steps.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        ["inspect", "verify"]
    );
}

#[test]
fn an_empty_list_clears_the_plan_and_still_advances_the_revision() {
    let plan = accepted(update(1, vec![]));
    assert_eq!((plan.revision, plan.steps.len()), (2, 0));
}

#[test]
fn a_stale_revision_is_refused() {
    assert_eq!(
        refused(update(0, vec![])),
        PlanRefusal::StaleRevision {
            expected: 0,
            current: 1
        }
    );
    assert_eq!(
        refused(update(7, vec![])),
        PlanRefusal::StaleRevision {
            expected: 7,
            current: 1
        }
    );
}

#[test]
fn thirty_two_steps_pass_and_thirty_three_do_not() {
    let steps = |n: usize| {
        (0..n)
            .map(|i| step(&format!("s{i}"), StepStatus::Pending))
            .collect()
    };
    assert_eq!(accepted(update(1, steps(32))).steps.len(), 32);
    assert_eq!(refused(update(1, steps(33))), PlanRefusal::TooManySteps(33));
}

#[test]
fn step_ids_are_1_to_64_ascii_bytes_and_unique() {
    let id64 = "x".repeat(64);
    assert_eq!(
        accepted(update(1, vec![step(&id64, StepStatus::Pending)])).steps[0].id,
        id64
    );
    let id65 = "x".repeat(65);
    assert_eq!(
        refused(update(1, vec![step(&id65, StepStatus::Pending)])),
        PlanRefusal::BadStepId(id65)
    );
    assert_eq!(
        refused(update(1, vec![step("", StepStatus::Pending)])),
        PlanRefusal::BadStepId(String::new())
    );
    assert_eq!(
        refused(update(1, vec![step("étape", StepStatus::Pending)])),
        PlanRefusal::BadStepId("étape".into())
    );
    assert_eq!(
        refused(update(
            1,
            vec![
                step("a", StepStatus::Pending),
                step("a", StepStatus::Completed)
            ]
        )),
        PlanRefusal::DuplicateStepId("a".into())
    );
}

#[test]
fn descriptions_are_non_blank_and_at_most_240_bytes_counting_multi_byte_characters() {
    // 'é' is 2 bytes: 120 of them is 240 bytes, 120 plus one 'x' is 241.
    let at = "é".repeat(120);
    let past = format!("{at}x");
    let with = |description: &str| {
        update(
            1,
            vec![Step {
                id: "d".into(),
                description: description.into(),
                status: StepStatus::Pending,
            }],
        )
    };
    assert_eq!(accepted(with(&at)).steps[0].description, at);
    assert_eq!(
        refused(with(&past)),
        PlanRefusal::BadDescription("d".into())
    );
    assert_eq!(
        refused(with("   ")),
        PlanRefusal::BadDescription("d".into())
    );
}

#[test]
fn the_explanation_is_at_most_500_bytes() {
    let with = |explanation: String| PlanUpdate {
        explanation: Some(explanation),
        ..update(1, vec![])
    };
    let at = "€".repeat(166) + "xx"; // 3 × 166 + 2 = 500 bytes
    assert_eq!(at.len(), 500);
    assert_eq!(accepted(with(at.clone())).explanation, Some(at.clone()));
    assert_eq!(
        refused(with(at + "x")),
        PlanRefusal::ExplanationTooLong(501)
    );
}

#[test]
fn at_most_one_step_is_in_progress() {
    assert_eq!(
        refused(update(
            1,
            vec![
                step("a", StepStatus::InProgress),
                step("b", StepStatus::InProgress)
            ]
        )),
        PlanRefusal::SeveralInProgress(vec!["a".into(), "b".into()])
    );
}

#[test]
fn control_characters_are_refused_anywhere() {
    let with_description = update(
        1,
        vec![Step {
            id: "a".into(),
            description: "line\nbreak".into(),
            status: StepStatus::Pending,
        }],
    );
    assert!(matches!(
        refused(with_description),
        PlanRefusal::ControlCharacter { .. }
    ));
    assert!(matches!(
        refused(update(1, vec![step("a\u{7}", StepStatus::Pending)])),
        PlanRefusal::ControlCharacter { .. }
    ));
    let with_explanation = PlanUpdate {
        explanation: Some("why\u{0}".into()),
        ..update(1, vec![])
    };
    assert!(matches!(
        refused(with_explanation),
        PlanRefusal::ControlCharacter { .. }
    ));
}

#[test]
fn every_refusal_names_its_rule() {
    let message = refused(update(1, vec![step(&"x".repeat(65), StepStatus::Pending)])).to_string();
    assert!(message.contains("1 to 64 ASCII bytes"), "{message}");
    let message = refused(update(0, vec![])).to_string();
    assert!(message.starts_with("stale revision"), "{message}");
}
