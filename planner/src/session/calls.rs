//! Tool calls (SPEC W1, U1–U5, T2, P1): each call of the running turn is
//! journaled before it runs and its result as it finishes; a call id seen
//! before is answered from the journal and never run again. `update_plan`
//! is decided here, against the session's own plan; the document tools
//! run in the driver, which reports back with
//! [`PlannerSession::handle_tool_finished`].

use margin_protocol::decisions::{AnswerBody, ToolRefusal};
use margin_protocol::link::ServerMessage;
use margin_protocol::sessions::{SessionEvent, UpdatePlanInput, UpdatePlanOutput, ENFORCEMENT};
use margin_protocol::tools::{ToolCall, ToolName, ToolOutput};
use margin_protocol::RefusalCode;

use super::effect::{Effect, Step};
use super::journal::{Entry, StoredResult, KEPT_READ_BYTES};
use super::state::CallState;
use super::PlannerSession;
use crate::ids::{CallId, CardId, Millis, RequestId};

/// What a document tool call came to, as the driver reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutcome {
    /// Its output, or its refusal.
    pub result: Result<ToolOutput, ToolRefusal>,
    /// For `ask`: replayed questions people had already answered, with the
    /// answer and who gave it — delivered at once, nobody is asked twice
    /// (SPEC D3).
    pub answered: Vec<(RequestId, AnswerBody, String)>,
    /// The output's size as sent, in bytes.
    pub bytes: usize,
}

impl PlannerSession {
    /// A `tool-call` of `turn` named `call` (SPEC W1): refused unless
    /// `turn` is running; answered from the journal when `call` was seen
    /// before; parsed against the tools the session offers (U1); then
    /// `update_plan` is decided at once, and a document tool is journaled
    /// as started and handed to the driver ([`Effect::RunTool`]).
    pub fn handle_tool_call(
        &mut self,
        turn: &str,
        call: CallId,
        name: &str,
        arguments: serde_json::Value,
        now: Millis,
    ) -> Step {
        self.step(|session, step| {
            let Some(current) = session.state.turn.as_ref().filter(|t| t.id.0 == turn) else {
                step.send(session.unknown_turn(turn, Some(call.0)));
                return;
            };
            if let Some(known) = current.call(&call).map(|c| (c.tool, c.state)) {
                session.answer_again(step, call, known, now);
                return;
            }
            match ToolCall::parse(name, arguments, session.state.planning) {
                Err(refusal) => step.send(session.tool_result(&call, Err(refusal))),
                Ok(ToolCall::UpdatePlan(input)) => session.update_plan(step, call, input, now),
                Ok(tool) => {
                    let entry = Entry::CallStarted {
                        call: call.clone(),
                        tool: tool.name(),
                    };
                    session.record(step, now, entry);
                    step.effects.push(Effect::RunTool { call, tool });
                }
            }
        })
    }

    /// A document tool call the driver ran has finished: its result is
    /// journaled (kept whole, but for a read too large to keep) and sent;
    /// what it captured counts toward the turn's repair (T2); the questions
    /// `ask` opened wait on people (P1), and answers already given to the
    /// ones it replayed go to the machine at once.
    pub fn handle_tool_finished(
        &mut self,
        call: CallId,
        outcome: ToolOutcome,
        now: Millis,
    ) -> Step {
        self.step(|session, step| {
            let tool = session
                .state
                .turn
                .as_ref()
                .and_then(|turn| turn.call(&call))
                .filter(|known| known.state == CallState::Pending)
                .map(|known| known.tool);
            let Some(tool) = tool else {
                // Not a call of the running turn: nothing to record.
                step.send(session.tool_result(&call, outcome.result));
                return;
            };
            let ToolOutcome {
                result,
                answered,
                bytes,
            } = outcome;
            let (cards, opened) = match &result {
                Ok(ToolOutput::Decisions(output)) => {
                    let cards: Vec<CardId> = output
                        .captures
                        .iter()
                        .filter(|capture| capture.captured)
                        .map(|capture| CardId(capture.card_id.clone()))
                        .collect();
                    let opened = if tool == ToolName::Ask {
                        cards.iter().map(RequestId::from).collect()
                    } else {
                        Vec::new()
                    };
                    (cards, opened)
                }
                _ => (Vec::new(), Vec::new()),
            };
            let stored = match &result {
                Ok(_) if !tool.writes() && bytes > KEPT_READ_BYTES => {
                    StoredResult::NotKept { bytes }
                }
                Ok(output) => StoredResult::Output(output.clone()),
                Err(refusal) => StoredResult::Refused(refusal.clone()),
            };
            let entry = Entry::CallFinished {
                call: call.clone(),
                tool,
                result: stored,
                cards,
                opened,
            };
            session.record(step, now, entry);
            step.send(session.tool_result(&call, result));
            for (request, answer, by) in answered {
                session.answered(step, request, answer, by, now);
            }
        })
    }

    /// A call of the running turn asked about again — sent again, or listed
    /// in `resume` — gets the answer it had and never runs again (SPEC W1):
    /// its stored result, or `interrupted`. A driver finishes each call
    /// before it takes the next input, so a call still pending when asked
    /// about lost its result (it could not be recorded): it is
    /// `interrupted` from now on.
    pub(super) fn answer_again(
        &mut self,
        step: &mut Step,
        call: CallId,
        (tool, state): (ToolName, CallState),
        now: Millis,
    ) {
        match state {
            CallState::Finished { seq } => {
                let turn = self.state.turn.as_ref().map(|t| t.id.clone());
                if let Some(turn) = turn {
                    step.effects.push(Effect::Redeliver { turn, call, seq });
                }
            }
            CallState::Pending => {
                let entry = Entry::CallInterrupted { call: call.clone() };
                self.record(step, now, entry);
                step.send(self.tool_result(&call, Err(interrupted(tool))));
            }
            CallState::Interrupted => {
                step.send(self.tool_result(&call, Err(interrupted(tool))));
            }
        }
    }

    /// `update_plan` (SPEC U2–U5): refused with nothing recorded once a
    /// Stop is pending; otherwise the new plan (or the rule it broke) is
    /// journaled with the call's result and its feed event, in one step.
    fn update_plan(&mut self, step: &mut Step, call: CallId, input: UpdatePlanInput, now: Millis) {
        let turn = self.state.turn.as_ref().map(|t| t.id.0.clone());
        let (Some(turn), Some(held)) = (turn, self.state.plan.clone()) else {
            // `handle_tool_call` offers `update_plan` only to a planning
            // session's running turn.
            let refusal = refused(RefusalCode::UnknownTool, "update_plan is not offered here");
            step.send(self.tool_result(&call, Err(refusal)));
            return;
        };
        if self.state.stop_pending {
            let refusal = refused(
                RefusalCode::StopRequested,
                "a Stop was asked for; the plan is unchanged",
            );
            step.send(self.tool_result(&call, Err(refusal)));
            return;
        }
        let mut plan = held;
        let result = match plan.handle_update(input.into(), &turn, &call.0) {
            Ok(accepted) => {
                let accepted = accepted.clone();
                let view = accepted.view();
                self.record(step, now, Entry::PlanUpdated { plan: accepted });
                match view {
                    Some(view) => {
                        let output = UpdatePlanOutput {
                            result: format!(
                                "The plan is at revision {} with {} step(s).",
                                view.revision,
                                view.steps.len()
                            ),
                            plan: view,
                        };
                        step.events.push(SessionEvent::PlanUpdated {
                            name: ToolName::UpdatePlan.as_str().into(),
                            call_id: call.0.clone(),
                            plan: output.plan.clone(),
                            result: output.result.clone(),
                            enforcement: ENFORCEMENT.into(),
                        });
                        Ok(ToolOutput::UpdatePlan(output))
                    }
                    // An accepted plan always names its turn and call.
                    None => Err(refused(RefusalCode::Internal, "the plan has no revision")),
                }
            }
            Err(broken) => {
                let refusal = refused(broken.code(), broken.to_string());
                step.events.push(SessionEvent::ToolFinished {
                    name: ToolName::UpdatePlan.as_str().into(),
                    call_id: call.0.clone(),
                    error: refusal.clone(),
                });
                Err(refusal)
            }
        };
        let stored = match &result {
            Ok(output) => StoredResult::Output(output.clone()),
            Err(refusal) => StoredResult::Refused(refusal.clone()),
        };
        let entry = Entry::CallFinished {
            call: call.clone(),
            tool: ToolName::UpdatePlan,
            result: stored,
            cards: Vec::new(),
            opened: Vec::new(),
        };
        self.record(step, now, entry);
        step.send(self.tool_result(&call, result));
    }

    /// The `tool-result` of `call` in the running turn.
    pub(super) fn tool_result(
        &self,
        call: &CallId,
        result: Result<ToolOutput, ToolRefusal>,
    ) -> ServerMessage {
        let turn = self
            .state
            .turn
            .as_ref()
            .map(|t| t.id.0.clone())
            .unwrap_or_default();
        let (output, error) = match result {
            Ok(output) => (Some(output), None),
            Err(refusal) => (None, Some(refusal)),
        };
        ServerMessage::ToolResult {
            session: self.state.id.clone(),
            turn,
            call_id: call.0.clone(),
            output,
            error,
        }
    }

    /// The `tool-result` a call's stored result sends again: its output or
    /// refusal, or — for a read too large to keep — `result_not_kept`.
    pub fn stored_result(&self, call: &CallId, stored: StoredResult) -> ServerMessage {
        let result = match stored {
            StoredResult::Output(output) => Ok(output),
            StoredResult::Refused(refusal) => Err(refusal),
            StoredResult::NotKept { bytes } => Err(refused(
                RefusalCode::ResultNotKept,
                format!("the read finished, but its {bytes}-byte result was too large to keep; read again (a read changes nothing)"),
            )),
        };
        self.tool_result(call, result)
    }
}

/// The result of a call in flight when the server stopped (SPEC W1).
pub(super) fn interrupted(tool: ToolName) -> ToolRefusal {
    ToolRefusal {
        code: RefusalCode::Interrupted,
        message: format!(
            "interrupted: {} was in flight when the server stopped and may have partly run; verify state before retrying",
            tool.as_str()
        ),
        read_again: tool.writes(),
        retry: false,
    }
}

fn refused(code: RefusalCode, message: impl Into<String>) -> ToolRefusal {
    ToolRefusal {
        code,
        message: message.into(),
        read_again: false,
        retry: false,
    }
}
