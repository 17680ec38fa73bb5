//! `margin planner demo` (the scripted demo Planner) and `margin planner
//! acp -- AGENT…` (an Agent Client Protocol agent as the Planner, SPEC O4),
//! each linked from this machine with its credential file; and `margin
//! planner acp-tools`, the relay an ACP agent starts for the document
//! tools.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use margin_sdk::{Connector, Ended};
use tokio_util::sync::CancellationToken;

use super::CliError;
use crate::demo;
use crate::serve::Signals;

/// How many tool calls of an ACP agent show as runs at once.
const ACP_RUN_CAPACITY: u32 = 32;

#[derive(Debug, Subcommand)]
pub(super) enum PlannerCommand {
    /// The scripted demo Planner: opens a decision card for every block
    /// that ends in `?` or is marked `TBD`, reports a run, and replies.
    Demo {
        #[command(flatten)]
        link: Link,
        /// Do not ask for resumable sessions (SPEC L1).
        #[arg(long)]
        no_resume: bool,
    },
    /// Runs an Agent Client Protocol agent as the Planner: each session is
    /// an ACP session of the agent, the document tools an MCP server it
    /// is handed, its permission requests question cards (SPEC O4).
    Acp {
        #[command(flatten)]
        link: Link,
        /// The agent's working folder (default: the current one).
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
        /// The agent's command and its arguments, after `--`, e.g.
        /// `-- npx @zed-industries/claude-code-acp`.
        #[arg(last = true, required = true, value_name = "AGENT")]
        agent: Vec<String>,
    },
    /// Joins stdio to an ACP bridge's tools socket; the bridge hands this
    /// command to its agent as an MCP server. Not for people to run.
    #[command(hide = true)]
    AcpTools {
        /// The bridge's socket.
        #[arg(long)]
        socket: PathBuf,
        /// The Margin session whose tools these are.
        #[arg(long)]
        session: String,
    },
}

/// Where a Planner links and with what.
#[derive(Debug, Args)]
pub(super) struct Link {
    /// The server, e.g. `http://127.0.0.1:7070`.
    #[arg(long, env = "MARGIN_SERVER", default_value = "http://127.0.0.1:7070")]
    server: String,
    /// A file holding the machine's credential (from `margin machine
    /// pair --credential-file` or `POST /machines`). It is read at each
    /// connect and replaced (mode 0600) with each fresh credential the
    /// link sends, so it stays current while linked (SPEC L8).
    #[arg(long, value_name = "FILE")]
    credential: PathBuf,
}

impl Link {
    /// The connector: the credential file is read at each connect and kept
    /// current by each renewal, so the Planner relinks hours later (SPEC
    /// L8); beside it, the sessions it holds, so a restart resumes them.
    fn connector(&self) -> Result<Connector, CliError> {
        let held = self.credential.with_extension("sessions.json");
        let connector =
            Connector::with_credential_file(self.server.clone(), &self.credential).held_file(held);
        connector.check_credential()?;
        Ok(connector)
    }
}

/// Runs a Planner command.
pub(super) async fn planner(command: PlannerCommand) -> Result<(), CliError> {
    match command {
        PlannerCommand::Demo { link, no_resume } => {
            let mut signals = Signals::listen().map_err(CliError::Signals)?;
            let connector = link.connector()?.resumable(!no_resume).planning(true);
            let shutdown = CancellationToken::new();
            let linked = tokio::spawn(demo::keep_linked(connector, shutdown.clone(), None));
            signals.recv().await;
            shutdown.cancel();
            let _ = linked.await;
            Ok(())
        }
        PlannerCommand::Acp { link, cwd, agent } => {
            let mut signals = Signals::listen().map_err(CliError::Signals)?;
            let connector = link
                .connector()?
                .planning(true)
                .run_capacity(ACP_RUN_CAPACITY)
                .on_link(|welcome| tracing::info!(machine = %welcome.machine, "ACP bridge linked"));
            let cwd = match cwd {
                Some(cwd) => cwd,
                None => std::env::current_dir().map_err(|source| CliError::Locate {
                    what: "the current folder",
                    source,
                })?,
            };
            // The agent starts the tools relay as this very program.
            let exe = std::env::current_exe().map_err(|source| CliError::Locate {
                what: "the margin program's path",
                source,
            })?;
            let bridge = margin_acp::Bridge {
                agent,
                tools: vec![
                    exe.display().to_string(),
                    "planner".into(),
                    "acp-tools".into(),
                ],
                held: link.credential.with_extension("acp-sessions.json"),
                cwd,
            };
            let ended =
                margin_acp::run(connector, bridge, async move { signals.recv().await }).await?;
            if ended != Ended::Detached {
                tracing::warn!(%ended, "the ACP bridge stopped linking");
            }
            Ok(())
        }
        PlannerCommand::AcpTools { socket, session } => margin_acp::relay(&socket, &session)
            .await
            .map_err(|source| CliError::Relay {
                path: socket,
                source,
            }),
    }
}
