//! The document tools as the MCP server an ACP agent is handed (SPEC O4).
//!
//! ACP has the client name MCP servers in `session/new`, and stdio is the
//! one transport every agent must support, so the agent starts a process:
//! `margin planner acp-tools --socket S --session ID` ([`relay`]), which
//! joins its stdio to the bridge's Unix socket after one header line naming
//! the Margin session. The bridge ([`serve`]) answers MCP on each such
//! connection; a call becomes the session's running turn's tool call on the
//! link, journaled like any other (W1), and outside a turn it is refused.
//! The socket lives in a folder only its owner can enter.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use margin_protocol::mcp::{is_id, refusal, unknown_tool, DOCUMENT_TOOLS};
use margin_protocol::tools::ToolName;
use margin_sdk::ToolError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::live::Live;

/// Longest header line a tool connection may send.
const MAX_HEADER_BYTES: u64 = 128;
/// How long a tool connection has to send its header.
const HEADER_WAIT: Duration = Duration::from_secs(10);

/// Most tool connections answered at once (an agent opens one per
/// session); more wait for one to close.
const MAX_CONNECTIONS: usize = 64;

/// Answers MCP on every connection to `listener` until it fails.
pub(crate) async fn serve(listener: UnixListener, live: Live) {
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&open).acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                let live = live.clone();
                tokio::spawn(async move {
                    answer(stream, live).await;
                    drop(permit);
                });
            }
            Err(error) => {
                tracing::error!(%error, "the tools socket stopped accepting");
                return;
            }
        }
    }
}

/// One agent's MCP connection for one session.
async fn answer(stream: UnixStream, live: Live) {
    let (read, write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut header = String::new();
    let heard = tokio::time::timeout(
        HEADER_WAIT,
        (&mut read).take(MAX_HEADER_BYTES).read_line(&mut header),
    )
    .await;
    let session = match heard {
        Ok(Ok(_)) => match session_of(&header) {
            Some(session) => session.to_owned(),
            None => {
                tracing::warn!("a tools connection named no session; closed");
                return;
            }
        },
        _ => {
            tracing::warn!("a tools connection sent no header in time; closed");
            return;
        }
    };
    let tools = SessionTools {
        session: session.clone(),
        live,
    };
    match tools.serve((read, write)).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(error) => tracing::warn!(%session, %error, "an agent's MCP connection failed to start"),
    }
}

/// The session a header line names: `session ID`.
fn session_of(header: &str) -> Option<&str> {
    let id = header.trim_end_matches('\n').strip_prefix("session ")?;
    is_id(id).then_some(id)
}

/// `margin planner acp-tools`: joins this process's stdio to the bridge's
/// tools socket for `session`, until either side closes.
pub async fn relay(socket: &Path, session: &str) -> std::io::Result<()> {
    let stream = UnixStream::connect(socket).await?;
    let (mut from_bridge, mut to_bridge) = stream.into_split();
    to_bridge
        .write_all(format!("session {session}\n").as_bytes())
        .await?;
    let mut stdin = tokio::io::stdin();
    let mut stdout = tokio::io::stdout();
    let up = async {
        tokio::io::copy(&mut stdin, &mut to_bridge).await?;
        to_bridge.shutdown().await
    };
    let down = async {
        tokio::io::copy(&mut from_bridge, &mut stdout).await?;
        stdout.flush().await
    };
    // Either side closing ends the relay: the agent closed its MCP server,
    // or the bridge went away.
    tokio::select! {
        done = up => done,
        done = down => done,
    }
}

/// The tools of one Margin session, for its agent.
#[derive(Clone)]
struct SessionTools {
    session: String,
    live: Live,
}

impl ServerHandler for SessionTools {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("margin", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Margin: the shared planning document this conversation is about. \
                 read_document before editing (edits name the revision and the paragraphs' \
                 digests you read); open_decisions turns open questions into decision cards \
                 people answer in the document. Ask people through decisions, never in your reply.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = DOCUMENT_TOOLS
            .into_iter()
            .map(|tool| {
                let schema = match tool.spec().input.to_value() {
                    Value::Object(object) => object,
                    _ => serde_json::Map::new(),
                };
                Tool::new(tool.as_str(), tool.description(), Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(tool) = ToolName::parse(&request.name).filter(|t| DOCUMENT_TOOLS.contains(t))
        else {
            let offered: Vec<&str> = DOCUMENT_TOOLS.iter().map(|t| t.as_str()).collect();
            return Err(McpError::invalid_params(
                unknown_tool(&request.name, &offered),
                None,
            ));
        };
        let Some(turn) = self.live.turn_of(&self.session) else {
            return Ok(refused(
                "no_turn",
                "no turn of this session is running: the tools act within a turn".into(),
            )
            .into());
        };
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let result = match turn.call_tool(tool, arguments).await {
            Ok(output @ Value::Object(_)) => CallToolResult::structured(output),
            Ok(output) => CallToolResult::structured(serde_json::json!({ "result": output })),
            Err(ToolError::Refused(refusal)) => refused(refusal.code.as_str(), refusal.message),
            Err(error @ ToolError::LinkClosed) => refused("link_closed", error.to_string()),
            Err(error @ ToolError::Output(_)) => refused("internal", error.to_string()),
        };
        Ok(result.into())
    }
}

/// A refused call, in the shape `/mcp` gives one, so an agent reads both
/// doors alike.
fn refused(code: &str, message: String) -> CallToolResult {
    CallToolResult::structured_error(refusal(code, &message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tools_connection_names_its_session_in_one_fit_header() {
        assert_eq!(session_of("session s-1_a\n"), Some("s-1_a"));
        assert_eq!(session_of("session \n"), None);
        assert_eq!(session_of("session ../x\n"), None);
        assert_eq!(session_of("sessions x\n"), None);
        assert_eq!(session_of(&format!("session {}\n", "s".repeat(65))), None);
    }
}
