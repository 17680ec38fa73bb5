//! What each input to a session comes to: stepped with the others of its
//! batch, or handled alone, and who waits on its commit.

use margin_planner::{Millis, PlannerSession, Step};
use margin_protocol::link::ServerMessage;
use margin_protocol::RefusalCode;

use super::calls::refusal_of;
use super::Driver;
use crate::sessions::input::Input;
use crate::storage::StorageError;
use crate::tools::ToolError;

impl Driver {
    /// Tells whoever waits on an input whose step was not committed: a
    /// member's request fails; the machine hears that nothing changed and
    /// the same message may succeed later (SPEC L6). An answer or discard
    /// not recorded is still on its card, and a restart takes it from
    /// there; an acknowledgement not recorded is asked for again.
    pub(super) fn not_committed(&mut self, answer: Answer, error: &StorageError) {
        let failed = || StorageError::Durability(error.to_string());
        match answer {
            Answer::Commit(done) => {
                let _ = done.send(Err(failed()));
            }
            Answer::Unit(done) => {
                let _ = done.send(());
            }
            Answer::Call { turn, call } => {
                let message = ServerMessage::ToolResult {
                    session: self.session.id().to_owned(),
                    turn,
                    call_id: call,
                    output: None,
                    error: Some(refusal_of(
                        ToolError::Internal(format!("its start was not recorded: {error}")),
                        "tool-call",
                    )),
                };
                self.send(&message);
            }
            Answer::Machine => {
                let message = ServerMessage::Refusal {
                    code: RefusalCode::Internal,
                    message: "the server could not record this and changed nothing; send it again"
                        .into(),
                    call_id: None,
                    session: None,
                    turn: None,
                    run: None,
                };
                self.send(&message);
            }
            Answer::Nobody => {}
        }
    }
}

/// Most inputs stepped into one commit.
pub(super) const BATCH: usize = 256;

/// What an input came to.
pub(super) enum Planned {
    /// Its step, and who to tell once it is committed.
    Step(Step, Answer),
    /// It must be handled on its own.
    Alone(Input),
}

/// Who waits on an input's commit.
pub(super) enum Answer {
    /// A caller that hears whether it committed.
    Commit(crate::sessions::input::Done<Result<(), StorageError>>),
    /// A caller that hears only that it was done.
    Unit(crate::sessions::input::Done<()>),
    /// The machine, for this call.
    Call { turn: String, call: String },
    /// The machine, for what it sent.
    Machine,
    /// Nobody.
    Nobody,
}

impl Answer {
    pub(super) fn committed(self) {
        match self {
            Answer::Commit(done) => {
                let _ = done.send(Ok(()));
            }
            Answer::Unit(done) => {
                let _ = done.send(());
            }
            Answer::Call { .. } | Answer::Machine | Answer::Nobody => {}
        }
    }
}

/// Steps `input` on `next`, when it only changes the session.
pub(super) fn plan(next: &mut PlannerSession, input: Input, now: Millis) -> Planned {
    match input {
        Input::Message { done, .. } if next.released().is_some() => {
            // A released session takes no more messages: `done` dropped
            // unanswered tells the caller to start a new session (SPEC T1).
            drop(done);
            Planned::Step(Step::default(), Answer::Nobody)
        }
        Input::Message { message, done } => {
            Planned::Step(next.handle_message(message, now), Answer::Commit(done))
        }
        Input::ToolCall {
            turn,
            call,
            name,
            arguments,
        } => {
            let answer = Answer::Call {
                turn: turn.clone(),
                call: call.0.clone(),
            };
            Planned::Step(
                next.handle_tool_call(&turn, call, &name, arguments, now),
                answer,
            )
        }
        Input::Reply { turn, text } => {
            Planned::Step(next.handle_reply(&turn, text, now), Answer::Machine)
        }
        Input::Run {
            run,
            name,
            status,
            attempt,
        } => Planned::Step(
            next.handle_run(run, name, status, attempt, now),
            Answer::Machine,
        ),
        Input::Stopped => Planned::Step(next.handle_stopped(now), Answer::Machine),
        Input::AnswerReceived { request } => {
            Planned::Step(next.handle_answer_received(request, now), Answer::Nobody)
        }
        Input::Answered {
            request,
            answer,
            by,
            done,
        } => Planned::Step(
            next.handle_answered(request, answer, by, now),
            Answer::Unit(done),
        ),
        Input::Discarded { card, done } => {
            Planned::Step(next.handle_discarded(card, now), Answer::Unit(done))
        }
        Input::StopRequested { done } => {
            Planned::Step(next.handle_stop_requested(now), Answer::Commit(done))
        }
        alone => Planned::Alone(alone),
    }
}
