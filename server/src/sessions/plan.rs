//! `update_plan` judged against a session's snapshot (SPEC U1–U5): the
//! rules are `margin_planner::plan`'s; this converts between its types and
//! the wire's and decides which event a call commits.

use margin_planner::plan::{Plan, PlanRefusal, PlanUpdate, Step, StepStatus};
use margin_protocol::decisions::ToolRefusal;
use margin_protocol::sessions::{
    PlanStep, PlanView, SessionEvent, SessionSnapshot, SessionState, StepStatus as WireStatus,
    UpdatePlanInput, UpdatePlanOutput, ENFORCEMENT, UPDATE_PLAN,
};
use margin_protocol::RefusalCode;

/// What a call does to the session.
pub enum Judged {
    /// Accepted: commit `event` (`plan_updated`) and answer `output`.
    Accepted {
        event: SessionEvent,
        output: UpdatePlanOutput,
    },
    /// A rule refused it: commit `event` (`tool_finished`), answer `refusal`.
    Rejected {
        event: SessionEvent,
        refusal: ToolRefusal,
    },
    /// Its turn is over or cancelled: answer `refusal`, commit nothing.
    Late(ToolRefusal),
}

/// Judges `input`, called as `call_id` in `turn`, against `snapshot`.
pub fn judge(
    snapshot: &SessionSnapshot,
    turn: &str,
    call_id: &str,
    input: UpdatePlanInput,
) -> Judged {
    let late = |code: RefusalCode, message: String| {
        Judged::Late(ToolRefusal {
            code,
            message,
            read_again: false,
            retry: false,
        })
    };
    let Some(held) = &snapshot.plan else {
        return late(
            RefusalCode::UnknownTool,
            "this Planner did not declare planning: true; update_plan is not offered".into(),
        );
    };
    if snapshot.state == SessionState::Ended || snapshot.turn.as_deref() != Some(turn) {
        return late(
            RefusalCode::TurnEnded,
            format!("turn {turn:?} is over or was cancelled; the plan is unchanged"),
        );
    }
    if snapshot.stop_pending {
        return late(
            RefusalCode::StopRequested,
            "a Stop was asked for; the plan is unchanged".into(),
        );
    }
    let mut plan = held.as_ref().map(from_view).unwrap_or_default();
    match plan.handle_update(to_update(input), turn, call_id) {
        Ok(accepted) => {
            let view = to_view(accepted, turn, call_id);
            let result = format!(
                "The plan is at revision {} with {} step(s).",
                view.revision,
                view.steps.len()
            );
            Judged::Accepted {
                event: SessionEvent::PlanUpdated {
                    name: UPDATE_PLAN.into(),
                    call_id: call_id.to_owned(),
                    plan: view.clone(),
                    result: result.clone(),
                    enforcement: ENFORCEMENT.into(),
                },
                output: UpdatePlanOutput { plan: view, result },
            }
        }
        Err(refused) => {
            let refusal = ToolRefusal {
                code: match refused {
                    PlanRefusal::StaleRevision { .. } => RefusalCode::StaleRevision,
                    _ => RefusalCode::InvalidPlan,
                },
                message: refused.to_string(),
                read_again: false,
                retry: false,
            };
            Judged::Rejected {
                event: SessionEvent::ToolFinished {
                    name: UPDATE_PLAN.into(),
                    call_id: call_id.to_owned(),
                    error: refusal.clone(),
                },
                refusal,
            }
        }
    }
}

fn to_update(input: UpdatePlanInput) -> PlanUpdate {
    PlanUpdate {
        expected_revision: input.expected_revision,
        explanation: input.explanation,
        steps: input.steps.into_iter().map(step_in).collect(),
    }
}

fn from_view(view: &PlanView) -> Plan {
    Plan {
        revision: view.revision,
        turn_id: Some(view.turn_id.clone()),
        call_id: Some(view.call_id.clone()),
        explanation: view.explanation.clone(),
        steps: view.steps.iter().cloned().map(step_in).collect(),
    }
}

fn step_in(step: PlanStep) -> Step {
    Step {
        id: step.id,
        description: step.description,
        status: match step.status {
            WireStatus::Pending => StepStatus::Pending,
            WireStatus::InProgress => StepStatus::InProgress,
            WireStatus::Completed => StepStatus::Completed,
        },
    }
}

fn to_view(plan: &Plan, turn: &str, call_id: &str) -> PlanView {
    PlanView {
        revision: plan.revision,
        turn_id: plan.turn_id.clone().unwrap_or_else(|| turn.to_owned()),
        call_id: plan.call_id.clone().unwrap_or_else(|| call_id.to_owned()),
        explanation: plan.explanation.clone(),
        steps: plan
            .steps
            .iter()
            .map(|step| PlanStep {
                id: step.id.clone(),
                description: step.description.clone(),
                status: match step.status {
                    StepStatus::Pending => WireStatus::Pending,
                    StepStatus::InProgress => WireStatus::InProgress,
                    StepStatus::Completed => WireStatus::Completed,
                },
            })
            .collect(),
    }
}
