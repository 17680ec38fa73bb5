//! Turns (SPEC T1–T3, U6): Chat messages start a turn or wait for the next
//! one, `invoke` hands the turn to the machine, and its reply is judged by
//! the reply policy — posted, withheld for a repair turn, or refused.

use margin_protocol::chat::{ChatKind, ChatMessageView, MAX_CHAT_BYTES};
use margin_protocol::link::ServerMessage;
use margin_protocol::RefusalCode;

use super::effect::Step;
use super::journal::{Entry, TurnEnd};
use super::PlannerSession;
use crate::ids::{Millis, TurnId};
use crate::reply::{judge, repaired, Verdict};
use crate::wording;

impl PlannerSession {
    /// A Chat message called the Planner (SPEC T1, T3): it starts a turn,
    /// or waits behind the running one, or — the machine being away —
    /// waits for the machine, and the sender is told so at once.
    pub fn handle_message(&mut self, message: ChatMessageView, now: Millis) -> Step {
        self.step(|session, step| {
            if session.state.released.is_some() {
                return;
            }
            session.record(step, now, Entry::MessageQueued { message });
            if session.is_away() {
                step.say(ChatKind::System, wording::MESSAGE_WAITS);
            } else if session.state.turn.is_none() {
                session.start_turn(step, Vec::new(), now);
            }
        })
    }

    /// The turn's reply (SPEC T2): posted when it asks nothing; withheld
    /// for a repair turn when it asks in prose; after a repair, posted only
    /// if the questions were captured as decisions, else the turn fails
    /// visibly. A refused reply never releases the session (P2).
    pub fn handle_reply(&mut self, turn: &str, text: String, now: Millis) -> Step {
        self.step(|session, step| {
            let of = session.state.id.clone();
            if text.len() > MAX_CHAT_BYTES {
                step.send(
                    refusal(
                        RefusalCode::MalformedMessage,
                        format!("a reply is at most {MAX_CHAT_BYTES} bytes"),
                    )
                    .answering_reply(&of, turn),
                );
                return;
            }
            let Some(current) = session.state.turn.as_ref().filter(|t| t.id.0 == turn) else {
                // Also a reply sent again after it was committed: its turn
                // has ended, and it is never posted twice (L10).
                step.send(session.unknown_turn(turn, None).answering_reply(&of, turn));
                return;
            };
            // Acknowledged before the next turn's `invoke`, once committed
            // (L10); every verdict below ends this turn.
            step.send(ServerMessage::ReplyReceived {
                session: of,
                turn: turn.to_owned(),
            });
            let id = current.id.clone();
            let (withheld, captured) = (current.repair.len(), current.cards.len());
            if withheld == 0 {
                match judge(&text) {
                    Verdict::Publish => {
                        step.say(ChatKind::Planner, text);
                        session.end_turn(step, id, TurnEnd::Replied, now);
                    }
                    Verdict::Withhold { questions } => {
                        // A repair turn: same session, a new turn. The
                        // text is never posted.
                        session.record(
                            step,
                            now,
                            Entry::TurnEnded {
                                turn: id,
                                end: TurnEnd::Withheld,
                            },
                        );
                        session.start_turn(step, questions, now);
                    }
                }
            } else if repaired(withheld, captured) {
                step.say(ChatKind::System, wording::repaired(withheld));
                if judge(&text) == Verdict::Publish && !text.trim().is_empty() {
                    step.say(ChatKind::Planner, text);
                }
                session.end_turn(step, id, TurnEnd::Repaired, now);
            } else {
                step.say(ChatKind::System, wording::withheld(withheld, captured));
                session.end_turn(step, id, TurnEnd::Refused, now);
            }
        })
    }

    /// Ends the running turn `turn` and starts the next with the messages
    /// that waited, if any (SPEC T3).
    pub(super) fn end_turn(&mut self, step: &mut Step, turn: TurnId, end: TurnEnd, now: Millis) {
        self.record(step, now, Entry::TurnEnded { turn, end });
        self.start_next_turn(step, now);
    }

    /// Starts a turn for the messages that waited, when one can start.
    pub(super) fn start_next_turn(&mut self, step: &mut Step, now: Millis) {
        let state = &self.state;
        if state.turn.is_none()
            && state.away.is_none()
            && state.released.is_none()
            && !state.waiting.is_empty()
        {
            self.start_turn(step, Vec::new(), now);
        }
    }

    /// Starts a turn — a repair turn when `repair` names questions — and
    /// hands it to the machine.
    fn start_turn(&mut self, step: &mut Step, repair: Vec<String>, now: Millis) {
        let turn = TurnId(format!("t{}", self.state.turns + 1));
        self.record(step, now, Entry::TurnStarted { turn, repair });
        if let Some(invoke) = self.invoke() {
            step.send(invoke);
        }
    }

    /// The `invoke` of the running turn: its messages or questions, and the
    /// plan as agent-authored data when the Planner plans (SPEC U6).
    pub(super) fn invoke(&self) -> Option<ServerMessage> {
        let turn = self.state.turn.as_ref()?;
        Some(ServerMessage::Invoke {
            session: self.state.id.clone(),
            turn: turn.id.0.clone(),
            document: self.state.document.clone(),
            messages: turn.messages.clone(),
            repair: turn.repair.clone(),
            plan: self
                .state
                .plan
                .as_ref()
                .and_then(|plan| plan.view())
                .map(Box::new),
        })
    }

    /// Refuses work for a turn that is not running; `call` names the
    /// `tool-call` refused, so the machine can fail that call.
    pub(super) fn unknown_turn(&self, turn: &str, call: Option<String>) -> ServerMessage {
        ServerMessage::Refusal {
            code: RefusalCode::UnknownTurn,
            message: format!(
                "turn {turn:?} of session {:?} is not running on this machine",
                self.state.id
            ),
            call_id: call,
            session: None,
            turn: None,
            run: None,
        }
    }
}

/// A refusal that answers no particular call.
pub(super) fn refusal(code: RefusalCode, message: impl Into<String>) -> ServerMessage {
    ServerMessage::Refusal {
        code,
        message: message.into(),
        call_id: None,
        session: None,
        turn: None,
        run: None,
    }
}
