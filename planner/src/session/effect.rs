//! What one input to a session asks of its driver: a [`Step`].
//!
//! A step is carried out in order: its journal records, feed events and
//! Chat lines are committed in one transaction, and only then are its
//! effects carried out — so nothing reaches a machine, a reader or Chat
//! before what it reports is committed (SPEC W2a).

use margin_protocol::chat::ChatKind;
use margin_protocol::link::ServerMessage;
use margin_protocol::sessions::SessionEvent;
use margin_protocol::tools::ToolCall;

use super::journal::Record;
use super::ReleaseReason;
use crate::ids::{CallId, RequestId, TurnId};

/// The outcome of one input.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    /// New journal records, to commit first.
    pub journal: Vec<Record>,
    /// The events applications see (SPEC E1, E2), committed with them.
    pub events: Vec<SessionEvent>,
    /// Lines for the document's Chat, committed with them.
    pub chat: Vec<ChatLine>,
    /// What to do once that is committed, in order.
    pub effects: Vec<Effect>,
}

impl Step {
    /// This step followed by `next`, as one: a caller that feeds several
    /// inputs before committing commits them together.
    pub fn and(mut self, next: Step) -> Step {
        self.journal.extend(next.journal);
        self.events.extend(next.events);
        self.chat.extend(next.chat);
        self.effects.extend(next.effects);
        self
    }

    /// Whether there is nothing to commit.
    pub fn commits_nothing(&self) -> bool {
        self.journal.is_empty() && self.events.is_empty() && self.chat.is_empty()
    }

    pub(super) fn send(&mut self, message: ServerMessage) {
        self.effects.push(Effect::Send(message));
    }

    pub(super) fn say(&mut self, kind: ChatKind, text: impl Into<String>) {
        self.chat.push(ChatLine {
            kind,
            text: text.into(),
        });
    }
}

/// One line for Chat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatLine {
    /// The server's own line, or the Planner's reply.
    pub kind: ChatKind,
    /// Its text.
    pub text: String,
}

/// Something for the driver to carry out.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Send this to the machine on the session's link.
    Send(ServerMessage),
    /// Run a document tool for the session's document and account; its
    /// outcome goes to [`super::PlannerSession::handle_tool_finished`].
    RunTool {
        /// The call.
        call: CallId,
        /// The tool and its arguments.
        tool: ToolCall,
    },
    /// Send `call`'s stored result again: it is in the journal record
    /// `seq` (a `call_finished`).
    Redeliver {
        /// The call's turn.
        turn: TurnId,
        /// The call.
        call: CallId,
        /// The record holding its result.
        seq: u64,
    },
    /// Withdraw a question nobody will read the answer of: cancel its card.
    Withdraw(RequestId),
    /// The session ended; the driver stops.
    Released(ReleaseReason),
}
