//! A session's durable plan (SPEC U2, U3): a bounded checklist the Planner
//! replaces whole with `update_plan`, revisioned so a late or replayed
//! update never replaces a newer one. Progress reporting only: a step the
//! Planner marked complete is its word, not proof.
//!
//! [`Plan::handle_update`] checks every bound and rule first and changes
//! nothing when one fails, naming the rule; an accepted list replaces the
//! old one and advances the revision (also for `[]`, which clears it).

use std::collections::BTreeSet;
use std::fmt;

use margin_protocol::sessions::{PlanStep, PlanView, StepStatus as WireStatus, UpdatePlanInput};
use margin_protocol::RefusalCode;
use serde::{Deserialize, Serialize};

/// Most steps a plan holds.
pub const MAX_STEPS: usize = 32;
/// Longest step id, in bytes (ASCII).
pub const MAX_STEP_ID_BYTES: usize = 64;
/// Longest step description, in UTF-8 bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 240;
/// Longest explanation, in UTF-8 bytes.
pub const MAX_EXPLANATION_BYTES: usize = 500;

/// A step's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StepStatus {
    /// Not started.
    Pending,
    /// Being worked on; at most one step at a time.
    InProgress,
    /// The Planner marked it complete.
    Completed,
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Stable ASCII id, 1–64 bytes, unique in the plan.
    pub id: String,
    /// Non-blank, at most 240 UTF-8 bytes.
    pub description: String,
    /// Its status.
    pub status: StepStatus,
}

/// An `update_plan` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanUpdate {
    /// The revision the Planner last saw.
    pub expected_revision: u64,
    /// Why, at most 500 UTF-8 bytes.
    pub explanation: Option<String>,
    /// The whole new list.
    pub steps: Vec<Step>,
}

/// The plan as accepted: what snapshots and `plan_updated` carry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// 0 before the first update; +1 per accepted replacement.
    pub revision: u64,
    /// The turn of the accepted update.
    pub turn_id: Option<String>,
    /// The tool call of the accepted update.
    pub call_id: Option<String>,
    /// The update's explanation.
    pub explanation: Option<String>,
    /// The steps, in the Planner's order.
    pub steps: Vec<Step>,
}

/// Why an update was refused; the plan is unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanRefusal {
    /// `expected_revision` is not the current revision.
    StaleRevision {
        /// What the Planner sent.
        expected: u64,
        /// The plan's revision.
        current: u64,
    },
    /// More than [`MAX_STEPS`] steps.
    TooManySteps(usize),
    /// A step id is empty, over 64 bytes, or not ASCII.
    BadStepId(String),
    /// Two steps share an id.
    DuplicateStepId(String),
    /// A description is blank or over 240 bytes.
    BadDescription(String),
    /// The explanation is over 500 bytes.
    ExplanationTooLong(usize),
    /// More than one step is in progress.
    SeveralInProgress(Vec<String>),
    /// Text holds a control character.
    ControlCharacter {
        /// Where: `explanation` or a step id.
        field: String,
    },
}

impl fmt::Display for PlanRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanRefusal::StaleRevision { expected, current } => write!(
                f,
                "stale revision: expected_revision is {expected} but the plan is at revision {current}; nothing changed"
            ),
            PlanRefusal::TooManySteps(n) => {
                write!(f, "a plan has at most {MAX_STEPS} steps; this one has {n}")
            }
            PlanRefusal::BadStepId(id) => write!(
                f,
                "step id {id:?} must be 1 to {MAX_STEP_ID_BYTES} ASCII bytes"
            ),
            PlanRefusal::DuplicateStepId(id) => write!(f, "step id {id:?} is used twice"),
            PlanRefusal::BadDescription(id) => write!(
                f,
                "step {id:?} needs a non-blank description of at most {MAX_DESCRIPTION_BYTES} bytes"
            ),
            PlanRefusal::ExplanationTooLong(n) => write!(
                f,
                "the explanation is at most {MAX_EXPLANATION_BYTES} bytes; this one has {n}"
            ),
            PlanRefusal::SeveralInProgress(ids) => write!(
                f,
                "at most one step is in progress; these are: {}",
                ids.join(", ")
            ),
            PlanRefusal::ControlCharacter { field } => {
                write!(f, "{field} holds a control character")
            }
        }
    }
}

impl std::error::Error for PlanRefusal {}

impl Plan {
    /// Applies `update` from `call_id` in `turn_id`: the whole list is
    /// replaced and the revision advances, or nothing changes.
    pub fn handle_update(
        &mut self,
        update: PlanUpdate,
        turn_id: &str,
        call_id: &str,
    ) -> Result<&Plan, PlanRefusal> {
        if update.expected_revision != self.revision {
            return Err(PlanRefusal::StaleRevision {
                expected: update.expected_revision,
                current: self.revision,
            });
        }
        check(&update)?;
        *self = Plan {
            revision: self.revision + 1,
            turn_id: Some(turn_id.to_owned()),
            call_id: Some(call_id.to_owned()),
            explanation: update.explanation,
            steps: update.steps,
        };
        Ok(self)
    }
}

/// Every rule of U2, in a fixed order so the first broken one is named.
fn check(update: &PlanUpdate) -> Result<(), PlanRefusal> {
    if let Some(explanation) = &update.explanation {
        if explanation.len() > MAX_EXPLANATION_BYTES {
            return Err(PlanRefusal::ExplanationTooLong(explanation.len()));
        }
        if has_control(explanation) {
            return Err(PlanRefusal::ControlCharacter {
                field: "the explanation".into(),
            });
        }
    }
    if update.steps.len() > MAX_STEPS {
        return Err(PlanRefusal::TooManySteps(update.steps.len()));
    }
    let mut seen = BTreeSet::new();
    for step in &update.steps {
        if has_control(&step.id) || has_control(&step.description) {
            return Err(PlanRefusal::ControlCharacter {
                field: format!("step {:?}", step.id),
            });
        }
        if step.id.is_empty() || step.id.len() > MAX_STEP_ID_BYTES || !step.id.is_ascii() {
            return Err(PlanRefusal::BadStepId(step.id.clone()));
        }
        if !seen.insert(step.id.as_str()) {
            return Err(PlanRefusal::DuplicateStepId(step.id.clone()));
        }
        if step.description.trim().is_empty() || step.description.len() > MAX_DESCRIPTION_BYTES {
            return Err(PlanRefusal::BadDescription(step.id.clone()));
        }
    }
    let in_progress: Vec<String> = update
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::InProgress)
        .map(|s| s.id.clone())
        .collect();
    if in_progress.len() > 1 {
        return Err(PlanRefusal::SeveralInProgress(in_progress));
    }
    Ok(())
}

fn has_control(text: &str) -> bool {
    text.chars().any(char::is_control)
}

impl PlanRefusal {
    /// Its stable code: `stale_revision`, else `invalid_plan`.
    pub fn code(&self) -> RefusalCode {
        match self {
            PlanRefusal::StaleRevision { .. } => RefusalCode::StaleRevision,
            _ => RefusalCode::InvalidPlan,
        }
    }
}

impl Plan {
    /// The plan as the wire shows it; none before the first update.
    pub fn view(&self) -> Option<PlanView> {
        Some(PlanView {
            revision: self.revision,
            turn_id: self.turn_id.clone()?,
            call_id: self.call_id.clone()?,
            explanation: self.explanation.clone(),
            steps: self
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
        })
    }
}

impl From<UpdatePlanInput> for PlanUpdate {
    fn from(input: UpdatePlanInput) -> Self {
        PlanUpdate {
            expected_revision: input.expected_revision,
            explanation: input.explanation,
            steps: input
                .steps
                .into_iter()
                .map(|step| Step {
                    id: step.id,
                    description: step.description,
                    status: match step.status {
                        WireStatus::Pending => StepStatus::Pending,
                        WireStatus::InProgress => StepStatus::InProgress,
                        WireStatus::Completed => StepStatus::Completed,
                    },
                })
                .collect(),
        }
    }
}
