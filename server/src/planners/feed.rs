//! What the Planners tell applications about their sessions (SPEC E1, E2,
//! U1–U6): each change to a session is published as events to its log,
//! under the Planners' lock so the log's order is the order things
//! happened; `update_plan` is judged and committed by the log.

use margin_planner::{Millis, ReleaseReason, ReleaseTrigger, RunStatus};
use margin_protocol::decisions::ToolRefusal;
use margin_protocol::link::RunStatus as LinkRunStatus;
use margin_protocol::sessions::{SessionEvent, SessionRun, UpdatePlanInput, UPDATE_PLAN};
use tracing::{error, info};

use super::{DocumentPlanner, Planners};
use crate::sessions::{Owner, PlanDecision, Published, SessionLog};
use crate::tools::ToolError;
use margin_protocol::tools::ToolOutput;
use margin_protocol::RefusalCode;

impl DocumentPlanner {
    /// Opens this new session's log (SPEC E1).
    pub(super) fn begin(&self, log: &SessionLog, document: &str) {
        log.begin(
            &self.session,
            Owner {
                document: document.to_owned(),
                account: self.link.machine.account.id.clone(),
                machine: self.link.machine.id.clone(),
            },
            SessionEvent::SessionStarted {
                document: document.to_owned(),
                machine: self.link.machine.name.clone(),
                planning: self.planning,
            },
        );
    }

    /// Publishes what changed since the last call, as events.
    pub(super) fn publish(&mut self, log: &SessionLog, now: Millis) {
        let next = Published {
            away: self.lifecycle.is_away(),
            turn: self.turn.as_ref().map(|turn| turn.id.clone()),
            stop_pending: self.lifecycle.stop_pending(),
            runs: self
                .lifecycle
                .runs(now)
                .into_iter()
                .map(|card| SessionRun {
                    name: self.run_name(&card.run.0),
                    run: card.run.0,
                    status: link_status(card.status),
                })
                .collect(),
            host_requests: self.requests.iter().cloned().collect(),
        };
        log.append(&self.session, self.published.diff(&next));
        self.published = next;
    }

    /// A run's name as the machine reported it (its id if it gave none).
    pub(super) fn run_name(&self, run: &str) -> String {
        self.run_names
            .get(run)
            .cloned()
            .unwrap_or_else(|| run.to_owned())
    }

    /// Publishes the session's end; no event follows it.
    pub(super) fn publish_end(&self, log: &SessionLog, reason: ReleaseReason) {
        if reason == ReleaseReason::Trigger(ReleaseTrigger::DocumentDeleted) {
            // The session's log went with the document.
            return;
        }
        log.append(
            &self.session,
            vec![SessionEvent::SessionEnded {
                reason: ended_because(reason).to_owned(),
            }],
        );
    }
}

/// Why a session ended, in words for applications.
fn ended_because(reason: ReleaseReason) -> &'static str {
    match reason {
        ReleaseReason::Idle => "idle: nothing to do and nobody viewing",
        ReleaseReason::LinkClosed => "the Planner's link closed",
        ReleaseReason::Trigger(trigger) => match trigger {
            ReleaseTrigger::Stop => "stopped",
            ReleaseTrigger::SignOut => "the owner signed out",
            ReleaseTrigger::MachineUnpaired => "the machine was unpaired",
            ReleaseTrigger::MachineRevoked => "the machine was revoked",
            ReleaseTrigger::BindingEnded => "the Planner binding ended",
            ReleaseTrigger::PlannerReset => "the Planner was reset",
            ReleaseTrigger::DocumentArchived => "the document was archived",
            ReleaseTrigger::DocumentClosed => "the document was closed",
            ReleaseTrigger::DocumentDeleted => "the document was deleted",
        },
    }
}

/// A run status as a machine reports it.
pub(super) fn planner_status(status: LinkRunStatus) -> RunStatus {
    match status {
        LinkRunStatus::Running => RunStatus::Running,
        LinkRunStatus::Paused => RunStatus::Paused,
        LinkRunStatus::Completed => RunStatus::Completed,
        LinkRunStatus::Failed => RunStatus::Failed,
        LinkRunStatus::Stopped => RunStatus::Stopped,
    }
}

/// A run status as the wire shows it.
pub(super) fn link_status(status: RunStatus) -> LinkRunStatus {
    match status {
        RunStatus::Running => LinkRunStatus::Running,
        RunStatus::Paused => LinkRunStatus::Paused,
        RunStatus::Completed => LinkRunStatus::Completed,
        RunStatus::Failed => LinkRunStatus::Failed,
        RunStatus::Stopped => LinkRunStatus::Stopped,
    }
}

impl Planners {
    /// `update_plan` from `turn` of `session` on `document` (SPEC U2–U5):
    /// judged after every event the session published before it, and
    /// committed with its event before the Planner hears of it.
    pub(super) async fn update_plan(
        &self,
        document: &str,
        session: &str,
        turn: &str,
        call_id: &str,
        input: UpdatePlanInput,
    ) -> Result<ToolOutput, ToolError> {
        match self
            .inner
            .log
            .update_plan(session, turn, call_id, input)
            .await
        {
            Ok(PlanDecision::Updated(output)) => {
                info!(
                    document,
                    session,
                    turn,
                    revision = output.plan.revision,
                    "plan updated"
                );
                if let Some(planner) = self
                    .lock()
                    .get_mut(document)
                    .filter(|p| p.session == session)
                {
                    // Handed back with each later turn (U6).
                    planner.plan = Some(output.plan.clone());
                }
                Ok(ToolOutput::UpdatePlan(output))
            }
            Ok(PlanDecision::Refused(refusal)) => {
                if refusal.code == RefusalCode::StaleRevision {
                    self.refresh_plan(document, session).await;
                }
                Err(ToolError::Refused(refusal))
            }
            Err(failed) => {
                error!(document, session, turn, call_id, error = %failed, "plan update not committed");
                // Whether it landed is not known here: the next turn is
                // handed what storage holds, not what this call hoped.
                self.refresh_plan(document, session).await;
                Err(ToolError::Internal(failed.to_string()))
            }
        }
    }

    /// Re-reads the session's plan from storage into what each turn is
    /// handed back (U6).
    async fn refresh_plan(&self, document: &str, session: &str) {
        let stored = match self.inner.log.snapshot(session).await {
            Ok(Some((_, snapshot))) => snapshot.plan.flatten(),
            Ok(None) => return,
            Err(error) => {
                error!(document, session, %error, "plan not re-read");
                return;
            }
        };
        if let Some(planner) = self
            .lock()
            .get_mut(document)
            .filter(|p| p.session == session)
        {
            planner.plan = stored;
        }
    }
}

/// The tools a session offers, for an unknown tool's refusal.
pub(super) fn unknown_tool(name: &str, planning: bool) -> ToolError {
    let plan = if planning {
        format!(", {UPDATE_PLAN}")
    } else {
        String::new()
    };
    ToolError::Refused(ToolRefusal {
        code: RefusalCode::UnknownTool,
        message: format!(
            "no tool named {name:?}; tools: read_document, edit_plan, open_decisions, open_decision, ask{plan}"
        ),
        read_again: false,
        retry: false,
    })
}
