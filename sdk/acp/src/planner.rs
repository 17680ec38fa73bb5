//! The Planner the bridge links as (SPEC O4): each Margin session runs on
//! one ACP session of the agent (created with `session/new`, or loaded
//! again with `session/load` after a restart where the agent can), a turn
//! is a `session/prompt` whose words make the reply, an answer to a
//! permission card is the permission request's outcome, and Stop is
//! `session/cancel`.

use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, LoadSessionRequest, McpServer, McpServerStdio,
    NewSessionRequest, PromptRequest, SessionId, TextContent,
};
use margin_sdk::{Answer, Handler, SessionHandle, ToolError, Turn};
use tokio::sync::oneshot;

use crate::agent::{self, AgentConnection, Work};
use crate::live::{Live, Session};
use crate::mapping;

/// The bridge's Planner.
pub(crate) struct Planner {
    pub live: Live,
    pub connection: AgentConnection,
    /// Whether the agent loads sessions again.
    pub loads: bool,
    /// The program and leading arguments that start the tools relay.
    pub tools: Vec<String>,
    /// The bridge's tools socket.
    pub socket: PathBuf,
    /// The agent's working folder for every session.
    pub cwd: PathBuf,
    /// One session opened at a time, so a session is opened once.
    pub opening: tokio::sync::Mutex<()>,
}

impl Handler for Planner {
    async fn turn(&self, turn: Turn) -> Result<String, ToolError> {
        let session = match self.open(turn.session.id()).await {
            Ok(session) => session,
            Err(why) => {
                tracing::warn!(session = %turn.session.id(), turn = %turn.id, %why, "the agent could not open the session");
                return Ok(format!("(The agent could not take this turn: {why}.)"));
            }
        };
        // Answers its agent was owed when it was restarted (see `held`).
        let told = match self.live.held().untold(session.margin.as_str()) {
            Ok(told) => told,
            Err(error) => {
                tracing::warn!(session = %session.margin, %error, "owed answers could not be read back");
                Vec::new()
            }
        };
        let prompt = mapping::prompt(&turn.messages, &turn.repair, &told);
        let turn = Arc::new(turn);
        let running = session.begin(Arc::clone(&turn));
        // The prompt runs in a task of its own: a Stop aborts this turn,
        // not the agent's work, which ends when the agent says so.
        let asked = self.connection.send_request(PromptRequest::new(
            SessionId::new(session.acp.as_str()),
            vec![ContentBlock::Text(TextContent::new(prompt))],
        ));
        let prompting = session.prompting();
        let (margin, turn_id) = (session.margin.clone(), turn.id.clone());
        let prompt = tokio::spawn(async move {
            let answered = asked.block_task().await;
            if let Ok(response) = &answered {
                tracing::info!(session = %margin, turn = %turn_id, stop_reason = ?response.stop_reason, "the agent ended its prompt");
            }
            drop(prompting);
            answered
        });
        let answered = match prompt.await {
            Ok(answered) => answered,
            Err(error) => {
                Err(agent_client_protocol::Error::internal_error().data(error.to_string()))
            }
        };
        // What the agent queued in the turn (its plan) is done in the turn.
        let (done, flushed) = oneshot::channel();
        if session.work(Work::Flush(done)).await.is_ok() {
            let _ = flushed.await;
        }
        let words = session.take_reply();
        drop(running);
        Ok(match answered {
            Ok(response) => mapping::reply(&words, response.stop_reason),
            Err(error) => {
                tracing::warn!(session = %session.margin, turn = %turn.id, %error, "the agent failed the prompt");
                mapping::failed(&words, &error.to_string())
            }
        })
    }

    async fn answered(&self, answer: Answer) {
        let Some(waiting) =
            self.live
                .answered(&answer.request, answer.session.id(), &answer.answer)
        else {
            tracing::info!(session = %answer.session.id(), card = %answer.request, "an answer no permission request waits on yet; kept for when the agent asks again");
            return;
        };
        match self.live.session(&waiting.session) {
            Some(session) => {
                agent::settle(&self.live, &session, waiting, Some(&answer.answer)).await
            }
            None => {
                tracing::warn!(card = %answer.request, "a permission request of a session this bridge no longer runs")
            }
        }
    }

    async fn stop(&self, session: SessionHandle) {
        let Some(running) = self.live.session(session.id()) else {
            return;
        };
        // ACP: the client answers every permission request it holds for the
        // session as cancelled, and the agent ends its prompt.
        for waiting in self.live.withdrawn(session.id()) {
            agent::settle(&self.live, &running, waiting, None).await;
        }
        if let Err(error) =
            self.connection
                .send_notification(CancelNotification::new(SessionId::new(
                    running.acp.as_str(),
                )))
        {
            tracing::warn!(session = %session.id(), %error, "session/cancel could not be sent");
            return;
        }
        // "Stopped" only once it stopped (SPEC P4): ACP has the agent end
        // its prompt, `cancelled`, when told to; until then the session is
        // stopping, and people can take the Stop back.
        running.idle().await;
    }
}

impl Planner {
    /// The session `margin` runs on, opened the first time it is asked for.
    async fn open(&self, margin: &str) -> Result<Arc<Session>, String> {
        let _one = self.opening.lock().await;
        if let Some(session) = self.live.session(margin) {
            return Ok(session);
        }
        let servers = vec![self.tools_server(margin)];
        let held = self.live.held().acp_of(margin).map(str::to_owned);
        if let (Some(acp), true) = (held, self.loads) {
            // Routed before loading: the history the agent replays is
            // nobody's reply (no turn runs yet).
            let session = self.live.insert(margin, &acp);
            let loaded = self
                .connection
                .send_request(
                    LoadSessionRequest::new(SessionId::new(acp.as_str()), self.cwd.clone())
                        .mcp_servers(servers.clone()),
                )
                .block_task()
                .await;
            match loaded {
                Ok(_) => return Ok(session),
                Err(error) => {
                    tracing::warn!(session = margin, acp_session = %acp, %error, "the agent could not load the session; starting a new one")
                }
            }
        }
        let created = self
            .connection
            .send_request(NewSessionRequest::new(self.cwd.clone()).mcp_servers(servers))
            .block_task()
            .await
            .map_err(|error| format!("session/new failed: {error}"))?;
        let acp = created.session_id.0.to_string();
        let session = self.live.insert(margin, &acp);
        let kept = self.live.held().keep(margin, &acp);
        if let Err(error) = kept {
            tracing::warn!(session = margin, %error, "the ACP session was not written down; a restart starts it blank");
        }
        Ok(session)
    }

    /// The MCP server the agent starts for `margin`'s tools.
    fn tools_server(&self, margin: &str) -> McpServer {
        let (program, leading) = match self.tools.split_first() {
            Some((program, leading)) => (program.clone(), leading.to_vec()),
            None => (
                String::from("margin"),
                vec!["planner".into(), "acp-tools".into()],
            ),
        };
        let mut args = leading;
        args.extend([
            "--socket".into(),
            self.socket.display().to_string(),
            "--session".into(),
            margin.to_owned(),
        ]);
        McpServer::Stdio(McpServerStdio::new("margin", program).args(args))
    }
}
