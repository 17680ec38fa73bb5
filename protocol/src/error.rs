//! The one error body every HTTP endpoint returns (SPEC A2), and every code
//! it can carry, once.
//!
//! ```
//! use margin_protocol::{ErrorBody, ErrorCode};
//! let body = ErrorBody::new(ErrorCode::DocumentNotFound, "no document with id d9");
//! assert_eq!(
//!     serde_json::to_string(&body).unwrap(),
//!     r#"{"error":{"code":"document_not_found","message":"no document with id d9"}}"#
//! );
//! ```

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::codes::wire_codes;
use crate::RefusalCode;

/// `{"error":{"code","message"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// A stable machine-readable code and a human message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    /// Stable, snake_case; clients branch on this.
    pub code: Code,
    /// For people; never contains internals.
    pub message: String,
}

impl ErrorBody {
    /// Builds an error body.
    pub fn new(code: impl Into<Code>, message: impl Into<String>) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code: code.into(),
                message: message.into(),
            },
        }
    }
}

/// An error body's code: the HTTP API's own, or the refusal of a Planner
/// tool called over HTTP. A code this build does not know reads as
/// [`RefusalCode::Other`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Code {
    /// The HTTP API's own.
    Error(ErrorCode),
    /// A tool's refusal (`POST /documents/{id}/tools/…`).
    Refusal(RefusalCode),
}

impl Code {
    /// The code as the wire spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Error(code) => code.as_str(),
            Code::Refusal(code) => code.as_str(),
        }
    }
}

impl From<ErrorCode> for Code {
    fn from(code: ErrorCode) -> Self {
        Code::Error(code)
    }
}

impl From<RefusalCode> for Code {
    fn from(code: RefusalCode) -> Self {
        Code::Refusal(code)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

wire_codes! {
    /// A stable code of the HTTP API's errors (docs/protocol.md lists
    /// each with its status).
    pub enum ErrorCode {
        // Who is asking (SPEC A1, A3b, L8).
        /// No credential, or one that matches no account or machine.
        Unauthenticated = "unauthenticated",
        /// The machine was revoked: all its credentials are refused.
        MachineRevoked = "machine_revoked",
        /// The machine credential's lifetime is over.
        CredentialExpired = "credential_expired",
        /// Signed in, but the role does not allow it.
        Forbidden = "forbidden",
        /// Too many failed sign-ins from this address or with this credential.
        TooManyAttempts = "too_many_attempts",

        // What is asked for does not exist, or the caller may not know it does.
        /// Something not found.
        NotFound = "not_found",
        /// No document the caller can see.
        DocumentNotFound = "document_not_found",
        /// No such account.
        AccountNotFound = "account_not_found",
        /// No such revision of the document.
        RevisionNotFound = "revision_not_found",
        /// The account is not a member of the document.
        MemberNotFound = "member_not_found",
        /// No such machine of the account.
        MachineNotFound = "machine_not_found",
        /// No such decision card in the document.
        DecisionNotFound = "decision_not_found",
        /// No such Planner session, or not one the caller may read.
        SessionNotFound = "session_not_found",
        /// No such file of the editor.
        AssetNotFound = "asset_not_found",
        /// No such route.
        RouteNotFound = "route_not_found",

        // The request breaks a rule.
        /// The body is not the JSON the route takes.
        InvalidBody = "invalid_body",
        /// The query string is not what the route takes.
        InvalidQuery = "invalid_query",
        /// A document title that is empty or too long.
        InvalidTitle = "invalid_title",
        /// A name that breaks the naming rules.
        InvalidName = "invalid_name",
        /// A Chat message that is empty or too long.
        InvalidMessage = "invalid_message",
        /// A cluster-internal request without what forwarding needs.
        InvalidForward = "invalid_forward",
        /// An event cursor that is not one.
        InvalidCursor = "invalid_cursor",
        /// A member added by a name no account has.
        UnknownAccount = "unknown_account",
        /// The request's body did not arrive in time.
        RequestTimeout = "request_timeout",
        /// The body is over the route's size limit.
        BodyTooLarge = "body_too_large",

        // A person's act on a decision card (SPEC D): the card is unchanged.
        /// An answer the card does not take (an option it lacks, a bad scale).
        InvalidAnswer = "invalid_answer",
        /// The card's state does not allow the act (answering a discarded
        /// card).
        InvalidTransition = "invalid_transition",
        /// The act's input breaks a rule (an empty option).
        InvalidInput = "invalid_input",

        // The state of things does not allow it.
        /// The request conflicts with what exists.
        Conflict = "conflict",
        /// The document is archived: read-only until its owner unarchives it.
        Archived = "archived",
        /// The document has no Planner session.
        NoPlannerSession = "no_planner_session",
        /// Resume asked for with no Stop pending.
        NoStopPending = "no_stop_pending",
        /// The Planner's machine is away.
        PlannerDisconnected = "planner_disconnected",
        /// The revision asked for was compacted away.
        RevisionCompacted = "revision_compacted",

        // The server.
        /// This server cannot serve the request now; retry.
        Unavailable = "unavailable",
        /// The server holds as many connections as it may; retry shortly.
        TooManyConnections = "too_many_connections",
        /// The server failed; the error was logged.
        Internal = "internal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_reads_back_from_a_body() {
        for &code in ErrorCode::ALL {
            let body = ErrorBody::new(code, "m");
            let json = serde_json::to_string(&body).unwrap();
            let back: ErrorBody = serde_json::from_str(&json).unwrap();
            assert_eq!(back.error.code.as_str(), code.as_str());
        }
    }

    #[test]
    fn a_tools_refusal_is_an_error_code_too_and_an_unknown_one_reads_as_other() {
        let body = ErrorBody::new(RefusalCode::StaleRevision, "m");
        let json = serde_json::to_string(&body).unwrap();
        assert_eq!(json, r#"{"error":{"code":"stale_revision","message":"m"}}"#);
        let back: ErrorBody = serde_json::from_str(&json).unwrap();
        assert_eq!(back.error.code, Code::Refusal(RefusalCode::StaleRevision));
        let newer: ErrorBody =
            serde_json::from_str(r#"{"error":{"code":"from_the_future","message":"m"}}"#).unwrap();
        assert_eq!(newer.error.code, Code::Refusal(RefusalCode::Other));
    }
}
