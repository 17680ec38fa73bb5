//! The ACP agent: its process, the ACP connection to it as a client, and
//! what the agent sends unasked — session updates (its words, plan and tool
//! calls) and permission requests — carried to the Margin session they
//! belong to (SPEC O4).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Weak};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    ContentBlock, Implementation, InitializeRequest, PermissionOptionId, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionNotification, SessionUpdate, ToolCallStatus,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{ByteStreams, Client};
use margin_protocol::decisions::{AnswerBody, OpenDecisionInput, PassageAddress};
use margin_protocol::link::RunStatus;
use margin_protocol::sessions::{PlanStep, UpdatePlanInput};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::held::Asked;
use crate::live::{Live, Session, Waiting};
use crate::{mapping, BridgeError};

/// The agent, as the ACP side of it.
pub(crate) type AgentConnection = ConnectionTo<agent_client_protocol::Agent>;

/// A running agent.
pub(crate) struct Agent {
    /// The connection, for requests the bridge makes.
    pub connection: AgentConnection,
    /// Whether it can load a session again (`session/load`).
    pub loads: bool,
    /// Its process; killed when dropped.
    pub child: Child,
    /// Ends when the connection does (the agent exited or broke ACP).
    pub ended: JoinHandle<Result<(), agent_client_protocol::Error>>,
}

/// Starts `command` (program and arguments) and initializes ACP with it.
pub(crate) async fn start(command: &[String], live: Live) -> Result<Agent, BridgeError> {
    let Some((program, args)) = command.split_first() else {
        return Err(BridgeError::NoAgent);
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| BridgeError::Spawn {
            program: PathBuf::from(program),
            source,
        })?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(BridgeError::Handshake(
            "the agent's stdio is not at hand".into(),
        ));
    };
    let transport = ByteStreams::new(stdin.compat_write(), stdout.compat());
    let (ready, connected) = oneshot::channel();
    let updates = live.clone();
    let permissions = live;
    let ended = tokio::spawn(async move {
        Client
            .v1()
            .name("margin")
            .on_receive_notification(
                async move |notification: SessionNotification, _connection| {
                    route(&updates, notification).await;
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .on_receive_request(
                async move |request: RequestPermissionRequest, responder, _connection| {
                    ask(&permissions, request, responder);
                    Ok(())
                },
                agent_client_protocol::on_receive_request!(),
            )
            .connect_with(transport, async move |connection: AgentConnection| {
                let initialized = connection
                    .send_request(
                        InitializeRequest::new(ProtocolVersion::V1)
                            .client_info(Implementation::new("margin", env!("CARGO_PKG_VERSION"))),
                    )
                    .block_task()
                    .await;
                let loads = match &initialized {
                    Ok(response) => response.agent_capabilities.load_session,
                    Err(_) => false,
                };
                let failed = initialized.as_ref().err().map(ToString::to_string);
                let _ = ready.send((connection.clone(), loads, failed));
                // The connection lives until the agent ends it.
                std::future::pending::<()>().await;
                Ok(())
            })
            .await
    });
    match connected.await {
        Ok((connection, loads, None)) => Ok(Agent {
            connection,
            loads,
            child,
            ended,
        }),
        Ok((_, _, Some(error))) => Err(BridgeError::Handshake(error)),
        Err(_) => Err(BridgeError::Handshake(match ended.await {
            Ok(Err(error)) => error.to_string(),
            _ => "the agent closed its stdio before initializing".into(),
        })),
    }
}

/// What a session's worker does, in the order the agent said it.
pub(crate) enum Work {
    /// Replace the session's plan.
    Plan(Vec<PlanStep>),
    /// Report a tool call as a run: its (id, name) and status.
    Run((String, String), RunStatus),
    /// Say when everything queued before is done: a turn waits for it
    /// before it ends, so a plan the agent sent in it is kept in it.
    Flush(oneshot::Sender<()>),
}

/// Most pieces of work queued for one session; the agent waits beyond.
pub(crate) const MAX_QUEUED: usize = 256;

/// Carries a session update to its Margin session: words into the running
/// turn's reply at once (so a prompt's answer finds them all), plans and
/// tool calls to the session's worker, in order.
async fn route(live: &Live, notification: SessionNotification) {
    let Some(session) = live.by_acp(&notification.session_id.0) else {
        tracing::debug!(acp_session = %notification.session_id, "an update for no session of this bridge");
        return;
    };
    let work = match notification.update {
        SessionUpdate::AgentMessageChunk(chunk) => {
            if let ContentBlock::Text(text) = chunk.content {
                session.say(&text.text);
            }
            return;
        }
        SessionUpdate::Plan(plan) => Work::Plan(mapping::steps(&plan.entries)),
        SessionUpdate::ToolCall(call) => {
            let title = session.title(&call.tool_call_id.0, Some(&call.title));
            run_work(&call.tool_call_id.0, &title, call.status)
        }
        SessionUpdate::ToolCallUpdate(update) => {
            let title = session.title(&update.tool_call_id.0, update.fields.title.as_deref());
            let Some(status) = update.fields.status else {
                return;
            };
            run_work(&update.tool_call_id.0, &title, status)
        }
        _ => return,
    };
    if session.work(work).await.is_err() {
        tracing::warn!(session = %session.margin, "the session's worker is gone; an update was dropped");
    }
}

fn run_work(tool_call: &str, title: &str, status: ToolCallStatus) -> Work {
    Work::Run(mapping::run(tool_call, title), mapping::run_status(status))
}

/// Runs a session's work in order until the session is gone.
pub(crate) async fn work(session: Weak<Session>, mut queue: mpsc::Receiver<Work>) {
    while let Some(work) = queue.recv().await {
        let Some(session) = session.upgrade() else {
            return;
        };
        match work {
            Work::Plan(steps) => plan(&session, steps).await,
            Work::Flush(done) => {
                let _ = done.send(());
            }
            Work::Run(run, status) => report(&session, &run, status).await,
        }
    }
}

/// The agent's plan as the session's (SPEC U2): written in the running turn
/// against the revision last accepted.
async fn plan(session: &Arc<Session>, steps: Vec<PlanStep>) {
    let Some(turn) = session.turn() else {
        tracing::debug!(session = %session.margin, "a plan outside a turn is not kept");
        return;
    };
    let input = UpdatePlanInput {
        expected_revision: session.plan_revision(),
        explanation: None,
        steps,
    };
    match turn.update_plan(&input).await {
        Ok(output) => session.planned(output.plan.revision),
        Err(error) => {
            tracing::warn!(session = %session.margin, turn = %turn.id, %error, "the agent's plan was not kept")
        }
    }
}

/// A permission request becomes a question card in the running turn
/// (`ask`); its answer comes back through [`answer`]. With no turn
/// running, or no card possible, the request is answered `cancelled`.
fn ask(
    live: &Live,
    request: RequestPermissionRequest,
    responder: Responder<RequestPermissionResponse>,
) {
    let live = live.clone();
    tokio::spawn(async move {
        let session = live.by_acp(&request.session_id.0);
        let turn = session.as_ref().and_then(|session| session.turn());
        let (Some(session), Some(turn)) = (session, turn) else {
            tracing::warn!(acp_session = %request.session_id, "a permission request outside a turn; cancelled");
            cancel(responder);
            return;
        };
        let read = match turn.read_document().await {
            Ok(read) => read,
            Err(error) => {
                tracing::warn!(session = %session.margin, %error, "the document could not be read to ask; cancelled");
                cancel(responder);
                return;
            }
        };
        // Anchored to the document's first block: a permission is about the
        // Planner's work, not one paragraph of it.
        let Some(first) = read.outline.first() else {
            tracing::warn!(session = %session.margin, "an empty document holds no card; the permission request is cancelled");
            cancel(responder);
            return;
        };
        let passage = PassageAddress {
            index: first.index,
            digest: first.digest.clone(),
        };
        let title = request.tool_call.fields.title.as_deref();
        let tool_call = &request.tool_call.tool_call_id.0;
        let Some(card) = mapping::permission_card(tool_call, title, &request.options, passage)
        else {
            tracing::warn!(session = %session.margin, "a permission request with fewer than two options; cancelled");
            cancel(responder);
            return;
        };
        let input = OpenDecisionInput {
            revision: read.revision,
            card,
        };
        let run = mapping::waiting_run(tool_call, title);
        match turn.ask(&input).await {
            Ok(asked) => match asked.captures.into_iter().find(|c| c.captured) {
                Some(capture) => {
                    let asked = Asked {
                        card: capture.card_id.clone(),
                        session: session.margin.clone(),
                        action: title.unwrap_or("a tool call").to_owned(),
                        options: request.options.iter().map(|o| o.name.clone()).collect(),
                        answer: None,
                        told: false,
                    };
                    if let Err(error) = live.held().ask(asked) {
                        tracing::warn!(session = %session.margin, %error, "a permission request was not written down; a restart forgets it");
                    }
                    let waiting = Waiting {
                        card: capture.card_id,
                        session: session.margin.clone(),
                        run,
                        options: request.options,
                        responder,
                    };
                    // People see why the turn does not go on: a paused run
                    // until the card is answered.
                    report(&session, &waiting.run, RunStatus::Paused).await;
                    if let Some((waiting, answer)) = live.wait(waiting) {
                        settle(&live, &session, waiting, Some(&answer)).await;
                    }
                }
                None => cancel(responder),
            },
            Err(error) => {
                tracing::warn!(session = %session.margin, turn = %turn.id, %error, "the permission card was not opened; cancelled");
                cancel(responder);
            }
        }
    });
}

/// Answers a waiting permission request with the option `answer` picked,
/// or `cancelled` when there is no answer (a Stop withdrew it), and ends
/// the run that showed the wait.
pub(crate) async fn settle(
    live: &Live,
    session: &Session,
    waiting: Waiting,
    answer: Option<&AnswerBody>,
) {
    if let Err(error) = live.held().settled(&waiting.card) {
        tracing::warn!(session = %session.margin, %error, "a settled permission request was not written down");
    }
    let picked = answer
        .and_then(|answer| mapping::chosen(answer, &waiting.options))
        .map(|option| option.option_id.clone());
    let run = waiting.run.clone();
    self::answer(waiting, picked);
    let status = match answer {
        Some(_) => RunStatus::Completed,
        None => RunStatus::Stopped,
    };
    report(session, &run, status).await;
}

/// Reports `run` (id, name) of `session` as `status`: a tool call's, or
/// the wait of a permission request. Nothing before the session's first
/// turn, which brings its handle.
async fn report(session: &Session, run: &(String, String), status: RunStatus) {
    let Some(handle) = session.handle() else {
        return;
    };
    if let Err(error) = handle.run(&run.0, &run.1, status).await {
        tracing::warn!(session = %session.margin, run = %run.0, %error, "a run was not reported");
    }
}

/// Answers a permission request with the option `picked`, or `cancelled`.
fn answer(waiting: Waiting, picked: Option<PermissionOptionId>) {
    let outcome = match picked {
        Some(option) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(option)),
        None => RequestPermissionOutcome::Cancelled,
    };
    if let Err(error) = waiting
        .responder
        .respond(RequestPermissionResponse::new(outcome))
    {
        tracing::warn!(session = %waiting.session, %error, "the agent no longer waits on its permission request");
    }
}

fn cancel(responder: Responder<RequestPermissionResponse>) {
    let _ = responder.respond(RequestPermissionResponse::new(
        RequestPermissionOutcome::Cancelled,
    ));
}
