//! Every refusal code a Planner can be given, once (SPEC A2, L6, W1): the
//! `code` of a tool call's [`ToolRefusal`](crate::decisions::ToolRefusal)
//! and of a link [`Refusal`](crate::link::ServerMessage::Refusal).
//!
//! Codes are stable snake_case strings on the wire. A code this build does
//! not know (a newer server's) reads as [`RefusalCode::Other`], so an older
//! machine still reads the refusal's message instead of failing the call.

use crate::codes::wire_codes;

wire_codes! {
    /// A stable refusal code.
    pub enum RefusalCode, unknown: Other {
        // A batch or edit addressed the document wrongly (SPEC D5–D9).
        /// The server no longer has the read the batch was written from.
        ReadEvicted = "read_evicted",
        /// An address does not match the block at that position.
        AddressMismatch = "address_mismatch",
        /// The paragraph appeared more than once when it was read.
        RepeatedWhenRead = "repeated_when_read",
        /// The block read was rewritten since.
        BlockRewritten = "block_rewritten",
        /// The block read was removed or moved since.
        BlockRemovedOrMoved = "block_removed_or_moved",
        /// An identical paragraph now stands beside the one read.
        TwinNow = "twin_now",
        /// The key already holds a different decision (SPEC D2, D8).
        DifferentDecision = "different_decision",
        /// The revision is not the current one (documents: D9; plans: U3).
        StaleRevision = "stale_revision",
        /// The Planner has no access to the document (D10).
        NoAccess = "no_access",
        /// The arguments break a rule or do not parse; nothing changed.
        InvalidInput = "invalid_input",
        /// A write to an archived document (SPEC P3).
        Archived = "archived",
        /// The server failed and could not decide; `retry` is set (SPEC L6).
        Internal = "internal",

        // Session tools (SPEC U1–U5, W1).
        /// The session offers no tool of that name.
        UnknownTool = "unknown_tool",
        /// `update_plan`'s list breaks a rule of U2.
        InvalidPlan = "invalid_plan",
        /// A Stop was asked for; the call changes nothing.
        StopRequested = "stop_requested",
        /// The call was in flight when the server stopped: it may have partly
        /// run. Verify the document before retrying (SPEC W1).
        Interrupted = "interrupted",
        /// A read's result was too large to keep across a restart; read again
        /// (a read changes nothing).
        ResultNotKept = "result_not_kept",
        /// The call's result is larger than a link frame may carry
        /// (`MAX_SERVER_FRAME_BYTES`), so it was not sent. A read changed
        /// nothing; a write was made, and reading the document shows it.
        TooLarge = "too_large",
        /// The session has too much waiting; nothing changed, send it again
        /// shortly (a tool call's refusal has `retry` set).
        SessionBusy = "session_busy",

        // The link (SPEC L1, A2).
        /// `hello` named a protocol version this server does not speak.
        UnsupportedVersion = "unsupported_version",
        /// The first message was not `hello`.
        HelloExpected = "hello_expected",
        /// `hello` does not fit its shape (an unknown or mistyped field), or
        /// broke a bound.
        InvalidHello = "invalid_hello",
        /// A message that does not parse, or breaks a bound.
        MalformedMessage = "malformed_message",
        /// A message type the protocol does not have.
        UnknownMessage = "unknown_message",
        /// A message that makes no sense now (a second `hello`, …).
        UnexpectedMessage = "unexpected_message",
        /// The turn named is not running on this machine.
        UnknownTurn = "unknown_turn",
        /// The session named is not running on this machine.
        UnknownSession = "unknown_session",
        /// A `resume` named a call this session never saw.
        UnknownCall = "unknown_call",
        /// Another run attempt would exceed the declared capacity (SPEC R2).
        RunCapacity = "run_capacity",
        /// A report about an older attempt than the run's newest (SPEC T4).
        SupersededAttempt = "superseded_attempt",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_from_a_newer_server_reads_as_other() {
        let code: RefusalCode = serde_json::from_str("\"rate_limited\"").unwrap();
        assert_eq!(code, RefusalCode::Other);
    }
}
