//! The machine link at `/machine` (SPEC L1, A1, A2): JSON text frames, each
//! an object with a kebab-case `type` tag and snake_case fields.
//!
//! A machine authenticates with its credential (`Authorization: Bearer`),
//! then opens the link with `hello`; the server answers `welcome`, or a
//! `refusal` and a close. The server sends `heartbeat`s; a machine answers
//! each with `heartbeat-ack`, and one that stays silent for several is closed
//! as unresponsive. `detach` ends the link on purpose. Credentials are
//! short-lived: right after `welcome`, and again well before it expires, the
//! server sends a fresh one in `credential` (SPEC L8).
//!
//! ```
//! use margin_protocol::link::{ClientMessage, ServerMessage, PROTOCOL_VERSION};
//! let hello: ClientMessage = serde_json::from_str(
//!     r#"{"type":"hello","protocol_version":1,"features":["resumable-sessions"]}"#,
//! ).unwrap();
//! assert_eq!(hello, ClientMessage::Hello {
//!     protocol_version: PROTOCOL_VERSION,
//!     features: vec!["resumable-sessions".into()],
//!     run_capacity: None,
//!     manifest: None,
//! });
//! let ack = serde_json::to_string(&ServerMessage::Heartbeat { seq: 7 }).unwrap();
//! assert_eq!(ack, r#"{"type":"heartbeat","seq":7}"#);
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The protocol version this server speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest frame a machine may send on its link, in bytes.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;

/// Largest frame the server sends on a link, in bytes. A tool's result
/// carries a whole outline (`read_document`, `edit_plan`), which for a
/// large document is more than a machine's 1 MiB (10,000 paragraphs take
/// megabytes); a result that would be larger is not sent, and the call
/// gets `too_large` instead.
pub const MAX_SERVER_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// Most features a `hello` may list, and the longest feature name.
pub const MAX_FEATURES: usize = 32;
/// Longest feature name, in bytes.
pub const MAX_FEATURE_BYTES: usize = 64;

/// Largest run capacity a `hello` may declare.
pub const MAX_RUN_CAPACITY: u32 = 64;

/// The feature that keeps a session's work through a dropped link (SPEC L1).
pub const RESUMABLE_SESSIONS: &str = "resumable-sessions";
/// Most sessions a `resume` may name.
pub const MAX_RESUME_SESSIONS: usize = 256;
/// Most questions a `resume` may name per session.
pub const MAX_HELD_QUESTIONS: usize = 256;
/// Most calls a `resume` may name per session.
pub const MAX_HELD_CALLS: usize = 64;

/// Every `type` a machine may send, so a receiver can tell an unknown type
/// from a malformed known one.
pub const CLIENT_MESSAGE_TYPES: [&str; 9] = [
    "hello",
    "heartbeat-ack",
    "detach",
    "tool-call",
    "run",
    "stopped",
    "resume",
    "input-received",
    "reply",
];

/// A message from a machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ClientMessage {
    /// Opens the link.
    Hello {
        /// Must be [`PROTOCOL_VERSION`].
        protocol_version: u32,
        /// Features the machine asks for (e.g. `resumable-sessions`);
        /// unknown ones are ignored and not echoed back.
        #[serde(default)]
        features: Vec<String>,
        /// Most run attempts each session keeps live at once (1–64;
        /// default 8, SPEC R2). A `run` that would start one more is refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_capacity: Option<u32>,
        /// What the Planner declares about itself (SPEC U1); absent means
        /// every capability off. Pinned for the life of each session this
        /// link starts.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        manifest: Option<crate::sessions::Manifest>,
    },
    /// Answers a `heartbeat`.
    HeartbeatAck {
        /// The heartbeat's `seq`.
        seq: u64,
    },
    /// Ends the link on purpose.
    Detach {},
    /// Calls a document tool within a turn. The session's document and
    /// account are the server's record, never taken from the machine.
    ToolCall {
        /// The session, as `invoke` named it.
        session: String,
        /// The turn, as `invoke` named it.
        turn: String,
        /// The machine's id for this call, echoed in the result (1–128 bytes).
        call_id: String,
        /// `read_document`, `edit_plan`, `open_decisions`, `open_decision`,
        /// `ask`, or `update_plan` when the manifest declared `planning`.
        name: String,
        /// The tool's input (see `docs/decisions.md`); `{}` for
        /// `read_document`.
        #[serde(default)]
        #[schemars(with = "serde_json::Value")]
        arguments: serde_json::Value,
    },
    /// Reports a workflow run of the session (SPEC R1).
    Run {
        /// The session.
        session: String,
        /// The machine's id for the run (1–128 bytes).
        run: String,
        /// What people see (1–200 bytes).
        name: String,
        /// Its status now.
        status: RunStatus,
        /// Which attempt of the run this is about, from 1 (default 1). A
        /// higher number starts a new attempt; a report about an older
        /// attempt than the newest never repaints the run (SPEC R2, T4).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
    },
    /// Confirms a `stop`: the session's work has stopped.
    Stopped {
        /// The session.
        session: String,
    },
    /// Sent first on a new link, after `welcome`, by a machine that asked
    /// for `resumable-sessions`: the sessions and questions it still holds
    /// (SPEC L3). The server answers `resumed`. A session this machine ran
    /// that the list leaves out has ended on the machine, and ends here —
    /// unless the machine has answered nothing in it yet: then its
    /// `invoke` may have been lost unread, and it is carried on and
    /// invoked again (SPEC L10).
    Resume {
        /// At most 256 sessions.
        sessions: Vec<HeldSession>,
    },
    /// Acknowledges an `input-result` (SPEC L5): until it arrives, the answer
    /// stays with the session and is sent again after the next `resumed`.
    InputReceived {
        /// The session.
        session: String,
        /// The request the answer was for.
        request: String,
    },
    /// The turn's reply, for Chat (subject to the reply policy, SPEC T2).
    Reply {
        /// The session.
        session: String,
        /// The turn.
        turn: String,
        /// The reply, ≤ 4000 bytes.
        text: String,
    },
}

/// A message from the server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ServerMessage {
    /// The link is open.
    Welcome {
        /// The protocol version in use.
        protocol_version: u32,
        /// The machine, as the server knows it.
        machine: String,
        /// What the server offers.
        capabilities: Capabilities,
    },
    /// Proof of life; answer with `heartbeat-ack` carrying `seq`.
    Heartbeat {
        /// Increases by one per heartbeat.
        seq: u64,
    },
    /// Starts a turn: reply to `messages` (or, for a repair turn, move
    /// `repair` into decisions), then send `reply`.
    Invoke {
        /// The session (one per document and machine).
        session: String,
        /// This turn.
        turn: String,
        /// The document the turn is about.
        document: String,
        /// The Chat lines that started it, in order (steering included).
        messages: Vec<crate::chat::ChatMessageView>,
        /// A repair turn: the questions the last reply asked in prose, to
        /// open as decisions (`open_decisions` with stable keys) instead.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        repair: Vec<String>,
        /// The session's plan, when the Planner declared `planning` and has
        /// made one (SPEC U6): its own earlier words, handed back as
        /// agent-authored data — not instructions from people.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plan: Option<Box<crate::sessions::PlanView>>,
    },
    /// A tool call's result: exactly one of `output` and `error`.
    ToolResult {
        /// The session.
        session: String,
        /// The turn.
        turn: String,
        /// The call's id.
        call_id: String,
        /// The tool's output (its tool's output type).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<crate::tools::ToolOutput>,
        /// The refusal; nothing changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<crate::decisions::ToolRefusal>,
    },
    /// A member answered a question the session asked with `ask` (a host
    /// request): the answer, delivered once.
    InputResult {
        /// The session that asked.
        session: String,
        /// The request: the decision card's id `ask` returned.
        request: String,
        /// The answer.
        answer: crate::decisions::AnswerBody,
        /// Who answered.
        answered_by: String,
    },
    /// Answers `resume` (SPEC L3, W1): what carries on and what ended.
    /// After it come, per session and in order: a held `stop`, every
    /// unacknowledged `input-result`, and a `tool-result` for each call the
    /// `resume` listed (a call still running gets its result when it
    /// finishes).
    Resumed {
        /// Sessions that carry on, on this link.
        sessions: Vec<ResumedSession>,
        /// Sessions the machine named that the server no longer has (a
        /// restart, or an end while away): settle their questions.
        ended: Vec<String>,
    },
    /// Stop the session's work, then send `stopped`: a member pressed Stop,
    /// or the document was archived or deleted — then the session has
    /// already ended, and `stopped` is accepted without effect.
    Stop {
        /// The session.
        session: String,
    },
    /// A member pressed Resume before the Stop was confirmed: the Stop is
    /// withdrawn, carry on if the work still can (SPEC L4). A `stopped` sent
    /// anyway is still taken as true.
    StopWithdrawn {
        /// The session.
        session: String,
    },
    /// A fresh credential for this machine (SPEC L8), sent right after
    /// `welcome` and again well before it expires (every third of its
    /// lifetime: every 5 minutes for the default 15). Keep the newest one
    /// privately (the SDK writes it to its credential file, mode 0600) and
    /// present it at the next connect. Earlier credentials stay valid until
    /// their own `expires_at`; an open link is never closed because a
    /// credential expired, and a renewal changes nothing else on the link.
    Credential {
        /// The new bearer credential for `/machine` (`mgm_…`).
        credential: String,
        /// When it stops opening links, in milliseconds since the Unix
        /// epoch.
        expires_at: i64,
    },
    /// A message was refused. The link stays open unless the server also
    /// closes it (bad `hello`, unresponsive, revoked).
    Refusal {
        /// Stable code (see [`RefusalCode`](crate::RefusalCode)):
        /// `unsupported_version`, `hello_expected`, `invalid_hello`,
        /// `malformed_message`, `unknown_message`, `unexpected_message`,
        /// `unknown_turn`, `unknown_session`, `unknown_call`,
        /// `run_capacity`, `superseded_attempt`, `session_busy`.
        code: crate::RefusalCode,
        /// Names the problem.
        message: String,
        /// The `tool-call` this refusal answers, when it answers one (so a
        /// connector can fail that call instead of waiting for a result).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// The session of the `reply` or `run` report this refusal answers,
        /// when it answers one (SPEC L10).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        /// The turn whose `reply` this refusal answers: the machine stops
        /// sending that reply, unless the code is `session_busy`, which
        /// asks it to send it again shortly (SPEC L10).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn: Option<String>,
        /// The run whose report this refusal answers (SPEC L10).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run: Option<String>,
    },
    /// The turn's `reply` is committed (SPEC L10): posted, withheld for a
    /// repair turn, or judged as the reply policy says — the machine stops
    /// sending it and stops naming the turn in `resume`. A reply sent again
    /// after this is refused `unknown_turn` (naming the turn), never posted
    /// twice.
    ReplyReceived {
        /// The session.
        session: String,
        /// The turn the reply ended.
        turn: String,
    },
    /// A `run` report is taken (SPEC L10, R1): committed, or it changed
    /// nothing because the run already had that status or had ended — a
    /// report sent again never revives an ended run. Each report gets
    /// exactly one answer, this or a refusal naming the run.
    RunReceived {
        /// The session.
        session: String,
        /// The run.
        run: String,
        /// The attempt the report was about.
        attempt: u32,
        /// The status it reported.
        status: RunStatus,
    },
}

impl ServerMessage {
    /// This refusal, naming the `reply` of `session`'s `turn` it answers
    /// (SPEC L10); any other message is returned as it is.
    pub fn answering_reply(self, session: &str, turn: &str) -> Self {
        self.answering(session, Some(turn), None)
    }

    /// This refusal, naming the `run` report of `session` it answers (SPEC
    /// L10); any other message is returned as it is.
    pub fn answering_run(self, session: &str, run: &str) -> Self {
        self.answering(session, None, Some(run))
    }

    fn answering(mut self, of: &str, reply: Option<&str>, report: Option<&str>) -> Self {
        if let ServerMessage::Refusal {
            session, turn, run, ..
        } = &mut self
        {
            *session = Some(of.to_owned());
            *turn = reply.map(str::to_owned);
            *run = report.map(str::to_owned);
        }
        self
    }
}

/// A session a machine holds, in `resume`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeldSession {
    /// The session's id.
    pub session: String,
    /// The questions (`ask` card ids) it still waits on; at most 256. One
    /// the server has open that is not listed was withdrawn by the machine.
    #[serde(default)]
    pub questions: Vec<String>,
    /// The turn it still runs, if any: the server hands it back, so its
    /// calls go on and its reply is judged as usual. A running turn the
    /// machine does not name has ended on the machine (SPEC W2a).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
    /// The calls of that turn still waiting for a result; at most 64. After
    /// `resumed` each gets exactly one answer: the result the server
    /// committed, `interrupted` when it was in flight as the server stopped,
    /// or a refusal `unknown_call` (naming it) when the server has no record
    /// of it — it never ran. None is run again (SPEC W1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<String>,
}

/// A session that carries on, in `resumed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResumedSession {
    /// The session's id.
    pub session: String,
    /// Its document.
    pub document: String,
    /// Questions the machine listed that no longer wait (people discarded
    /// them, or the server withdrew them): settle them. Answered ones come
    /// as `input-result` instead.
    pub withdrawn: Vec<String>,
}

/// A run's status as a machine reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Working.
    Running,
    /// Waiting; still owned by the session.
    Paused,
    /// Finished well.
    Completed,
    /// Finished badly.
    Failed,
    /// Stopped.
    Stopped,
}

impl RunStatus {
    /// Whether the run still belongs to its session: running or paused.
    pub fn is_live(self) -> bool {
        matches!(self, RunStatus::Running | RunStatus::Paused)
    }
}

/// What a document's Planner is doing, in one word: the state its status
/// shows (SPEC B1a, L2, L4). One state at a time; the first that holds wins,
/// in this order: disconnected, stopping, working, waiting, available (a
/// session bound and idle); with no session, stopped, then available or
/// unlinked by whether a machine is linked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlannerState {
    /// No machine of the document owner's is linked and no session is
    /// kept: `@planner` is answered that the Planner is not connected.
    #[default]
    Unlinked,
    /// A machine is linked and nothing runs: `@planner` starts a turn.
    Available,
    /// A turn is running, or a run is.
    Working,
    /// Nothing runs, but the Planner holds work that waits: questions it
    /// asked that wait on people, or a paused run.
    Waiting,
    /// The session's machine dropped its link; its work is kept with no
    /// deadline until it comes back (SPEC L2).
    Disconnected,
    /// A Stop was sent and the machine has not confirmed it (SPEC L4).
    Stopping,
    /// The document's last session ended with a confirmed Stop, and none
    /// has started since: `@planner` starts a new one (on the machine in
    /// `machine`, when one is linked).
    Stopped,
}

impl PlannerState {
    /// Its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PlannerState::Unlinked => "unlinked",
            PlannerState::Available => "available",
            PlannerState::Working => "working",
            PlannerState::Waiting => "waiting",
            PlannerState::Disconnected => "disconnected",
            PlannerState::Stopping => "stopping",
            PlannerState::Stopped => "stopped",
        }
    }
}

/// A document's Planner as people see it: `GET /documents/{id}/planner`,
/// and the `planner` events of `GET /documents/{id}/events`. The default is
/// a document with no Planner session and no machine linked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlannerView {
    /// What it is doing (SPEC B1a).
    #[serde(default)]
    pub state: PlannerState,
    /// Whether a Planner session is bound to a linked machine.
    pub connected: bool,
    /// Whether the session's machine dropped its link and its work is kept
    /// until it reconnects (SPEC L2).
    #[serde(default)]
    pub disconnected: bool,
    /// The machine's name: the session's machine while a session is
    /// bound, else the linked machine a `@planner` would start one on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// The Planner session's id, while one is bound (connected or
    /// disconnected): what applications pass to `GET /sessions/{sid}` and
    /// `GET /sessions/{sid}/events` to follow its plan and runs (SPEC E1).
    /// A new id means a new session, with a plan of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Whether a turn is running.
    pub replying: bool,
    /// Whether a Stop was sent and not yet confirmed.
    pub stop_pending: bool,
    /// Questions the session asked (`ask`) that wait on a person.
    pub questions: usize,
    /// The session's runs, in the order first reported.
    pub runs: Vec<RunView>,
}

/// A run card.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunView {
    /// The machine's id for it.
    pub run: String,
    /// Its name.
    pub name: String,
    /// Its last reported status.
    pub status: RunStatus,
    /// Its true age: since first reported, to now or to when it ended.
    pub age_ms: u64,
    /// When it was first reported, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub started_at: u64,
    /// When it ended (completed, failed or stopped), in milliseconds since
    /// the Unix epoch; absent while it is live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<u64>,
    /// The Planner is disconnected: `status` is the last one reported.
    #[serde(default)]
    pub disconnected: bool,
}

/// What the server offers a machine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Capabilities {
    /// The server keeps Planner plans (`update_plan`, SPEC U1).
    pub durable_plans: bool,
    /// The features of the `hello` the server granted.
    pub features: Vec<String>,
}

/// `POST /machines` body: pair a machine to the caller's account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PairMachine {
    /// A name the owner recognises, 1–64 bytes.
    pub name: String,
}

/// A paired machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MachineInfo {
    /// Opaque id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Whether its credential was revoked.
    pub revoked: bool,
}

/// `POST /machines` response: the credential is shown only here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PairedMachine {
    /// The machine.
    pub machine: MachineInfo,
    /// Its bearer credential for `/machine`. It is short-lived (SPEC L8):
    /// open a link before `expires_at`, and the link then renews it.
    pub credential: String,
    /// When the credential stops opening links, in milliseconds since the
    /// Unix epoch (15 minutes after pairing by default).
    pub expires_at: i64,
}

/// `GET /machines` response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MachineList {
    /// The caller's machines, newest first.
    pub machines: Vec<MachineInfo>,
}

/// The codes of a `401` refusing the upgrade at `/machine` (an
/// [`ErrorBody`](crate::ErrorBody), SPEC L8).
pub mod refused {
    use crate::ErrorCode;

    /// No credential, or one the server does not know (never issued, or
    /// expired more than a day ago and pruned).
    pub const UNAUTHENTICATED: &str = ErrorCode::Unauthenticated.as_str();
    /// The machine was revoked: all its credentials are refused.
    pub const MACHINE_REVOKED: &str = ErrorCode::MachineRevoked.as_str();
    /// The credential's lifetime is over; use a newer one the link sent, or
    /// pair the machine again.
    pub const CREDENTIAL_EXPIRED: &str = ErrorCode::CredentialExpired.as_str();
}

/// Close codes on the machine link.
pub mod close {
    /// The machine detached.
    pub const DETACHED: u16 = 1000;
    /// The server is shutting down.
    pub const GOING_AWAY: u16 = 1001;
    /// A frame over [`super::MAX_FRAME_BYTES`].
    pub const TOO_BIG: u16 = 1009;
    /// Missed heartbeats: the server stopped waiting.
    pub const UNRESPONSIVE: u16 = 4002;
    /// The first message was not a valid `hello` (or came too late).
    pub const BAD_HELLO: u16 = 4400;
    /// The machine's credential was revoked while linked.
    pub const REVOKED: u16 = 4403;
    /// Another link of the same account took this link's work over with
    /// `resume` (SPEC L3).
    pub const SUPERSEDED: u16 = 4409;
}

#[cfg(test)]
mod tests;
