//! `margin planner acp -- AGENT…`: any Agent Client Protocol agent as a
//! Margin Planner (SPEC O4). The bridge links as a machine with the Rust
//! connector SDK, so every link rule holds as for any Planner (W1, L2–L10),
//! and runs the agent as a subprocess, speaking ACP to it as its client:
//!
//! | Margin | ACP |
//! |---|---|
//! | a session | one ACP session (`session/new`; `session/load` after a restart where the agent can) |
//! | a turn's Chat lines | `session/prompt` |
//! | the document tools | an MCP server handed in `session/new` (stdio, [`relay`]) |
//! | the reply | the agent's `agent_message_chunk`s, and its `stopReason` when not `end_turn` |
//! | `update_plan` | the agent's `plan` |
//! | a question card (`ask`) and its answer | `session/request_permission` and its outcome |
//! | runs | the agent's `tool_call` / `tool_call_update` |
//! | Stop | `session/cancel` |
//!
//! Each rule is a function of `mapping`; `agent` carries the agent's side,
//! `planner` the link's, `tools` the MCP server, `live` what they share and
//! `held` the file of ACP sessions.
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod agent;
mod held;
mod live;
mod mapping;
mod planner;
mod tools;

pub use tools::relay;

use std::future::Future;
use std::path::PathBuf;

use margin_sdk::{Connector, Ended};
use tokio::net::UnixListener;

use crate::held::Held;
use crate::live::Live;
use crate::planner::Planner;

/// What the bridge runs and where it keeps things.
#[derive(Clone, Debug)]
pub struct Bridge {
    /// The agent: its program and arguments.
    pub agent: Vec<String>,
    /// The program and leading arguments that start the tools relay
    /// (`margin planner acp-tools`); the bridge adds `--socket` and
    /// `--session`.
    pub tools: Vec<String>,
    /// The file of ACP sessions (see `held`).
    pub held: PathBuf,
    /// The agent's working folder.
    pub cwd: PathBuf,
}

/// Why the bridge stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// No agent command was given.
    #[error("no agent command: give it after `--`")]
    NoAgent,
    /// The agent could not be started.
    #[error("cannot start the agent {program:?}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The agent did not complete ACP's `initialize`.
    #[error("the agent did not initialize ACP: {0}")]
    Handshake(String),
    /// The agent's connection ended while the bridge ran.
    #[error("the agent ended: {0}")]
    AgentEnded(String),
    /// The tools socket could not be made.
    #[error("cannot make the tools socket: {0}")]
    Socket(#[from] std::io::Error),
}

/// Runs `bridge`'s agent as the Planner of `connector`'s machine until
/// `until` completes, the link ends for good, or the agent ends.
pub async fn run(
    connector: Connector,
    bridge: Bridge,
    until: impl Future<Output = ()>,
) -> Result<Ended, BridgeError> {
    // A folder only this user can enter holds the socket: whoever reaches
    // it acts in the sessions' turns.
    let folder = tempfile::Builder::new().prefix("margin-acp-").tempdir()?;
    let socket = folder.path().join("tools.sock");
    let listener = UnixListener::bind(&socket)?;
    let live = Live::new(Held::open(&bridge.held));
    let mut agent = agent::start(&bridge.agent, live.clone()).await?;
    tracing::info!(agent = %bridge.agent.join(" "), loads_sessions = agent.loads, "the agent is ready");
    let serving = tokio::spawn(tools::serve(listener, live.clone()));
    let planner = Planner {
        live,
        connection: agent.connection.clone(),
        loads: agent.loads,
        tools: bridge.tools,
        socket,
        cwd: bridge.cwd,
        opening: tokio::sync::Mutex::new(()),
    };
    let ended = tokio::select! {
        ended = connector.run(planner, until) => Ok(ended),
        ended = &mut agent.ended => Err(BridgeError::AgentEnded(match ended {
            Ok(Ok(())) => "it closed the connection".into(),
            Ok(Err(error)) => error.to_string(),
            Err(error) => error.to_string(),
        })),
    };
    serving.abort();
    let _ = agent.child.start_kill();
    ended
}
