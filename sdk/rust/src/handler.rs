//! What a Planner writes: the [`Handler`] the SDK calls, and the handles it
//! gets — a [`Turn`] with typed tool calls, a [`SessionHandle`] for runs,
//! an [`Answer`] to a question it asked.

use std::future::Future;

use margin_protocol::chat::ChatMessageView;
use margin_protocol::decisions::{
    AnswerBody, EditPlanInput, EditPlanOutput, OpenDecisionInput, OpenDecisionsInput,
    OpenDecisionsOutput, ReadDocumentOutput, ToolRefusal,
};
use margin_protocol::link::{ClientMessage, RunStatus};
use margin_protocol::sessions::{PlanView, UpdatePlanInput, UpdatePlanOutput};
use margin_protocol::tools::ToolName;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::calls::Calls;

/// How many times a tool call the server could not decide is tried.
const TRIES: u32 = 4;
/// The pause before the first retry; it doubles after each.
const FIRST_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// A Planner: the SDK calls it for each turn, answer and Stop.
pub trait Handler: Send + Sync + 'static {
    /// Does a turn's work and returns the reply for Chat. Questions belong
    /// in decisions (`open_decisions`), not in the reply (SPEC T2): a reply
    /// that asks gets a repair turn, whose [`Turn::repair`] lists them.
    fn turn(&self, turn: Turn) -> impl Future<Output = Result<String, ToolError>> + Send;

    /// A member answered a question the session asked with [`Turn::ask`].
    /// Delivered once.
    fn answered(&self, answer: Answer) -> impl Future<Output = ()> + Send {
        let _ = answer;
        async {}
    }

    /// A member pressed Stop: stop the session's work. The running turn (if
    /// any) is already aborted; `stopped` is sent when this returns.
    fn stop(&self, session: SessionHandle) -> impl Future<Output = ()> + Send {
        let _ = session;
        async {}
    }

    /// A member pressed Resume before this machine confirmed the Stop: the
    /// Stop is withdrawn (SPEC L4). The turn it aborted stays aborted; carry
    /// on with what can be, or confirm `stopped` anyway if the work is gone
    /// (the SDK sends it when [`Handler::stop`] returns).
    fn stop_withdrawn(&self, session: SessionHandle) -> impl Future<Output = ()> + Send {
        let _ = session;
        async {}
    }
}

/// Why a tool call gave no output.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The server refused it; nothing changed.
    #[error("refused ({}): {}", .0.code, .0.message)]
    Refused(ToolRefusal),
    /// The link closed before the result came.
    #[error("the link closed before the result came")]
    LinkClosed,
    /// The result did not have the tool's output shape.
    #[error("unreadable tool output: {0}")]
    Output(#[from] serde_json::Error),
}

/// A session, for what outlives a turn: run reports.
#[derive(Clone, Debug)]
pub struct SessionHandle {
    pub(super) id: String,
    pub(super) calls: Calls,
}

impl SessionHandle {
    /// The session's id, as the server named it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Reports a run of this session and its status now (SPEC R1). A live
    /// (running or paused) run keeps the session in use. The server refuses
    /// a report that would exceed the declared run capacity (a `refusal`
    /// with code `run_capacity`, logged by the SDK).
    pub async fn run(&self, run: &str, name: &str, status: RunStatus) -> Result<(), ToolError> {
        self.report(run, None, name, status).await
    }

    /// Reports `attempt` (from 1) of a run: a higher number than before
    /// starts a new attempt, and a late report about an older one never
    /// repaints the run (SPEC R2, T4).
    pub async fn run_attempt(
        &self,
        run: &str,
        attempt: u32,
        name: &str,
        status: RunStatus,
    ) -> Result<(), ToolError> {
        self.report(run, Some(attempt), name, status).await
    }

    async fn report(
        &self,
        run: &str,
        attempt: Option<u32>,
        name: &str,
        status: RunStatus,
    ) -> Result<(), ToolError> {
        self.calls
            .send(ClientMessage::Run {
                session: self.id.clone(),
                run: run.to_owned(),
                name: name.to_owned(),
                status,
                attempt,
            })
            .await
    }
}

/// A turn: what started it, and the document tools for its session.
#[derive(Debug)]
pub struct Turn {
    /// The session.
    pub session: SessionHandle,
    /// This turn's id.
    pub id: String,
    /// The document the turn is about.
    pub document: String,
    /// The Chat lines that started it, in order (steering included).
    pub messages: Vec<ChatMessageView>,
    /// A repair turn's questions: the last reply asked them in prose; open
    /// them as decisions with stable keys and reply without asking.
    pub repair: Vec<String>,
    /// The session's plan, when the Planner declared `planning` and has
    /// made one (SPEC U6): its own earlier words, as data.
    pub plan: Option<Box<PlanView>>,
}

impl Turn {
    /// `update_plan` (SPEC U2, U3): replaces the session's plan whole.
    /// A stale `expected_revision` or a list that breaks a bound is
    /// refused, naming the rule, and changes nothing.
    pub async fn update_plan(
        &self,
        input: &UpdatePlanInput,
    ) -> Result<UpdatePlanOutput, ToolError> {
        self.call(ToolName::UpdatePlan, input).await
    }

    /// `read_document`: the outline at the current revision.
    pub async fn read_document(&self) -> Result<ReadDocumentOutput, ToolError> {
        self.call(ToolName::ReadDocument, serde_json::json!({}))
            .await
    }

    /// `edit_plan`: edits addressed at the current revision.
    pub async fn edit_plan(&self, input: &EditPlanInput) -> Result<EditPlanOutput, ToolError> {
        self.call(ToolName::EditPlan, input).await
    }

    /// `open_decisions`: a batch of cards, atomic (SPEC D1).
    pub async fn open_decisions(
        &self,
        input: &OpenDecisionsInput,
    ) -> Result<OpenDecisionsOutput, ToolError> {
        self.call(ToolName::OpenDecisions, input).await
    }

    /// `open_decision`: one card at the current revision.
    pub async fn open_decision(
        &self,
        input: &OpenDecisionInput,
    ) -> Result<OpenDecisionsOutput, ToolError> {
        self.call(ToolName::OpenDecision, input).await
    }

    /// `ask`: a question that waits on a member (a host request). The
    /// answer arrives later through [`Handler::answered`], naming the card.
    pub async fn ask(&self, input: &OpenDecisionInput) -> Result<OpenDecisionsOutput, ToolError> {
        let asked: OpenDecisionsOutput = self.call(ToolName::Ask, input).await?;
        // Named in the next `resume` until answered or withdrawn (SPEC L3).
        for capture in asked.captures.iter().filter(|c| c.captured) {
            self.session
                .calls
                .hold_question(&self.session.id, &capture.card_id);
        }
        Ok(asked)
    }

    /// Reports a run of the session (see [`SessionHandle::run`]).
    pub async fn run(&self, run: &str, name: &str, status: RunStatus) -> Result<(), ToolError> {
        self.session.run(run, name, status).await
    }

    /// Calls `tool` with JSON `arguments` and returns its JSON output, for
    /// a Planner that hands the tools on untyped (a bridge to an agent
    /// that calls them by name). Retried as the typed calls are.
    pub async fn call_tool(
        &self,
        tool: ToolName,
        arguments: serde_json::Value,
    ) -> Result<serde_json::Value, ToolError> {
        self.call(tool, arguments).await
    }

    /// Calls a tool. A refusal marked `retry` (the server could not decide,
    /// SPEC L6) is tried again after a pause, a few times; every other
    /// refusal is the server's decision and is returned at once.
    async fn call<T: DeserializeOwned>(
        &self,
        tool: ToolName,
        arguments: impl Serialize,
    ) -> Result<T, ToolError> {
        let name = tool.as_str();
        let arguments = serde_json::to_value(arguments)?;
        let mut pause = FIRST_RETRY;
        let mut tries = 1;
        loop {
            let result = self
                .session
                .calls
                .call(&self.session.id, &self.id, name, arguments.clone())
                .await;
            match result {
                Err(ToolError::Refused(refusal)) if refusal.retry && tries < TRIES => {
                    tracing::warn!(tool = name, code = %refusal.code, "the server could not decide; trying again");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                    tries += 1;
                }
                result => return Ok(serde_json::from_value(result?)?),
            }
        }
    }
}

/// A member's answer to a question the session asked.
#[derive(Debug)]
pub struct Answer {
    /// The session that asked.
    pub session: SessionHandle,
    /// The question: the card id `ask` returned.
    pub request: String,
    /// The answer.
    pub answer: AnswerBody,
    /// Who answered.
    pub answered_by: String,
}
