//! A session's journal (SPEC W1, W2, W2a): the domain events its state is
//! the fold of, each numbered and timed.
//!
//! A [`Record`] is committed before anything it reports is revealed; a
//! restarted server folds a domain snapshot and the records after it back
//! into the same session ([`super::PlannerSession::restore`]). Records are
//! facts, never intentions: `call_started` is written before a tool runs
//! (so an interrupted call is known), `call_finished` holds the result it
//! returned.

use margin_protocol::chat::ChatMessageView;
use margin_protocol::decisions::{AnswerBody, ToolRefusal};
use margin_protocol::tools::{ToolName, ToolOutput};
use serde::{Deserialize, Serialize};

use super::{LinkLoss, ReleaseReason, RunStatus, Start};
use crate::ids::{CallId, CardId, Millis, RequestId, RunId, TurnId};
use crate::plan::Plan;

/// Results of read-only tools larger than this are not kept in the
/// journal: after a restart such a call is answered `result_not_kept`
/// (reading again changes nothing). A writing tool's result is always
/// kept, so a write is never ambiguous (SPEC W1).
pub const KEPT_READ_BYTES: usize = 64 * 1024;

/// One entry of the journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Its place: contiguous per session, from 1.
    pub seq: u64,
    /// When it happened, on the caller's clock.
    pub at: Millis,
    /// What happened.
    pub entry: Entry,
}

/// What happened to a session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// The session began (always the first record).
    Started(Start),
    /// A Chat message for the Planner waits for the next turn (SPEC T3).
    MessageQueued {
        /// The message.
        message: ChatMessageView,
    },
    /// A turn began: it takes every waiting message, unless it is a repair
    /// turn, which takes none and carries the questions to move (SPEC T2).
    TurnStarted {
        /// The turn.
        turn: TurnId,
        /// The withheld questions, for a repair turn.
        repair: Vec<String>,
    },
    /// The turn ended.
    TurnEnded {
        /// The turn.
        turn: TurnId,
        /// How.
        end: TurnEnd,
    },
    /// A document tool call is about to run (write-ahead, SPEC W1).
    CallStarted {
        /// The call.
        call: CallId,
        /// Its tool.
        tool: ToolName,
    },
    /// A call returned this result (committed with the call's own writes
    /// when it wrote).
    CallFinished {
        /// The call.
        call: CallId,
        /// Its tool.
        tool: ToolName,
        /// What it returned.
        result: StoredResult,
        /// Cards that now hold the turn's questions, new or replayed (SPEC
        /// T2). Earlier journals kept only a count, which a replay of a
        /// card the turn had just opened counted twice.
        #[serde(default)]
        cards: Vec<CardId>,
        /// Questions `ask` opened or replayed: host requests (SPEC P1).
        opened: Vec<RequestId>,
    },
    /// A call that was running when the server stopped: it gets
    /// `interrupted`, and is never run again (SPEC W1).
    CallInterrupted {
        /// The call.
        call: CallId,
    },
    /// `update_plan` replaced the plan (SPEC U2–U5).
    PlanUpdated {
        /// The plan now.
        plan: Plan,
    },
    /// The Planner reported a run (SPEC R1, R2).
    RunReported {
        /// The run.
        run: RunId,
        /// Its name, kept from its first report.
        name: String,
        /// The attempt reported.
        attempt: u32,
        /// Its status.
        status: RunStatus,
    },
    /// A member answered a question; the answer waits for the machine's
    /// acknowledgement (SPEC L5).
    Answered {
        /// The question.
        request: RequestId,
        /// The answer.
        answer: AnswerBody,
        /// Who answered.
        by: String,
    },
    /// A question no longer waits: discarded by people, or withdrawn by the
    /// machine while away.
    RequestSettled {
        /// The question.
        request: RequestId,
    },
    /// People discarded a card the running turn had captured: it no longer
    /// holds its question, so it no longer counts (SPEC T2).
    CardDiscarded {
        /// The card.
        card: CardId,
    },
    /// The machine acknowledged an answer (`input-received`).
    AnswerReceived {
        /// The question.
        request: RequestId,
    },
    /// The last person viewing the document left: the idle period counts
    /// from here (SPEC P3). How many view it is not journaled: a
    /// restarted server counts again.
    Unviewed,
    /// A member pressed Stop.
    StopRequested,
    /// A member pressed Resume before the Stop was confirmed.
    StopWithdrawn,
    /// The link went away and the session is kept (SPEC L2, L7).
    LinkLost {
        /// How.
        loss: LinkLoss,
        /// When a lease ends the session; none: kept with no deadline.
        until: Option<Millis>,
    },
    /// The machine is back (`resume`).
    LinkBack,
    /// Another machine of the account took the session over (`resume`).
    MachineChanged {
        /// Its id.
        machine: String,
        /// Its name.
        name: String,
    },
    /// The session ended; nothing follows.
    Released {
        /// Why.
        reason: ReleaseReason,
    },
}

/// How a turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnEnd {
    /// Its reply was posted.
    Replied,
    /// Its reply asked in prose: withheld, and a repair turn follows.
    Withheld,
    /// The repair moved the questions into decisions.
    Repaired,
    /// The repair did not; the reply was never posted.
    Refused,
    /// Its machine came back without it.
    Abandoned,
}

/// A call's result as the journal keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredResult {
    /// Its output.
    Output(ToolOutput),
    /// Its refusal.
    Refused(ToolRefusal),
    /// A read's output of this many bytes, too large to keep.
    NotKept {
        /// Its size when sent.
        bytes: usize,
    },
}
