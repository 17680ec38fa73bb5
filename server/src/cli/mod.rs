//! The command line (SPEC O2): `serve`, `planner demo|acp`, `mcp`, `account add|list`,
//! `token add|list|revoke`, `machine pair|list|revoke`. Every environment
//! variable it reads starts with `MARGIN_`; the few older names are still
//! read, with a warning ([`read_old_environment_names`]).
//!
//! Here: the command line's shape and its dispatch; `serve` runs the
//! server (and the demo Planner beside it), `planner` a Planner on this
//! machine (the demo, or an ACP agent), `admin` the account, token and
//! machine commands.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use margin_sdk::ConnectError;

use crate::auth;
use crate::demo::DemoError;
use crate::serve::ServeError;
use crate::storage::{Deadlines, StorageError, Store};
use crate::telemetry::LogFormat;

mod admin;
mod planner;
mod serve;

use admin::{AccountCommand, MachineCommand, TokenCommand};
use planner::PlannerCommand;
use serve::ServeArgs;

/// Margin: a collaborative planning-document server.
#[derive(Debug, Parser)]
#[command(name = "margin", version)]
pub struct Cli {
    /// Log line format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Threads running the server's tasks (sockets, documents, sessions);
    /// by default one fewer than the machine's cores, at least one.
    #[arg(long, global = true, env = "MARGIN_WORKERS")]
    workers: Option<NonZeroUsize>,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// How many threads run the server's tasks: `--workers`, else
    /// [`default_workers`] of the machine's cores.
    pub fn workers(&self) -> NonZeroUsize {
        self.workers.unwrap_or_else(|| {
            default_workers(std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN))
        })
    }
}

/// One worker fewer than `cores`: the store's writer thread (SQLite's
/// statements and fsyncs) and the blocking pool (compaction, large frames)
/// are busy beside the workers, and each worker more than the cores left
/// for them is woken only to hand tasks across cores: on 2 cores, one
/// worker spent less CPU per delivered edit than two did, at a low edit
/// rate and a high one alike (server/benches/results/).
fn default_workers(cores: NonZeroUsize) -> NonZeroUsize {
    NonZeroUsize::new(cores.get() - 1).unwrap_or(NonZeroUsize::MIN)
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server.
    Serve(ServeArgs),
    /// Run a Planner on this machine, linked to a server.
    Planner {
        #[command(subcommand)]
        command: PlannerCommand,
    },
    /// Manage accounts.
    Account {
        #[command(subcommand)]
        command: AccountCommand,
    },
    /// Manage bearer tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Manage the machines Planners run on.
    Machine {
        #[command(subcommand)]
        command: MachineCommand,
    },
    /// Margin's MCP server over stdio, for a desktop client that starts a
    /// command: relayed to a server's /mcp with your token (SPEC O4).
    Mcp {
        /// The server, e.g. `http://127.0.0.1:7070`.
        #[arg(long, env = "MARGIN_SERVER", default_value = "http://127.0.0.1:7070")]
        server: String,
        /// A file holding your bearer token (from `margin account add` or
        /// `margin token add`).
        #[arg(long, value_name = "FILE")]
        token_file: PathBuf,
    },
}

/// Where the data lives.
#[derive(Debug, Args)]
pub(super) struct Database {
    /// Data folder: the embedded SQLite database, and the demo Planner's
    /// credential and held sessions (also with `--database-url`).
    #[arg(long, default_value = "margin-data")]
    pub(super) data: PathBuf,
    /// `postgres://…` (or `sqlite://…`) instead of the data folder.
    #[arg(long, env = "MARGIN_DATABASE_URL")]
    database_url: Option<String>,
}

impl Database {
    pub(super) async fn open(&self) -> Result<Store, CliError> {
        self.open_with(None).await
    }

    /// Opens the store with `deadlines` on every PostgreSQL session.
    pub(super) async fn open_with(&self, deadlines: Option<Deadlines>) -> Result<Store, CliError> {
        let url = match &self.database_url {
            Some(url) => url.clone(),
            None => Store::sqlite_url_in(&self.data).map_err(|source| CliError::DataDir {
                path: self.data.clone(),
                source,
            })?,
        };
        Ok(Store::open_with(&url, deadlines).await?)
    }
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The data folder could not be created.
    #[error("cannot use data folder {path:?}: {source}")]
    DataDir {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A bad account name.
    #[error("invalid account name: {0}")]
    AccountName(String),
    /// A bad account name for the demo Planner.
    #[error("invalid account name for --demo-planner {name:?}: {why}")]
    DemoAccount {
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// No account has this name.
    #[error("no account named {0:?}")]
    NoAccount(String),
    /// The account has no token with this id.
    #[error("{account} has no token {id} (see `margin token list {account}`)")]
    NoToken {
        /// The account.
        account: String,
        /// The id given.
        id: String,
    },
    /// The account has no machine with this id.
    #[error("{account} has no machine {id} (see `margin machine list {account}`)")]
    NoMachine {
        /// The account.
        account: String,
        /// The id given.
        id: String,
    },
    /// A listing could not be written as JSON.
    #[error("cannot write JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A bad machine name.
    #[error("invalid machine name: {0}")]
    MachineName(String),
    /// A token could not be issued.
    #[error(transparent)]
    Issue(#[from] auth::IssueError),
    /// The server failed.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The demo Planner could not be set up.
    #[error("demo Planner: {0}")]
    Demo(#[from] DemoError),
    /// The Planner has no usable credential (its file is missing or
    /// empty).
    #[error(transparent)]
    Credential(#[from] ConnectError),
    /// `margin mcp` stopped or could not start.
    #[error("margin mcp: {0}")]
    McpStdio(#[from] crate::mcp_stdio::McpStdioError),
    /// The ACP bridge stopped or could not start.
    #[error("ACP bridge: {0}")]
    Bridge(#[from] margin_acp::BridgeError),
    /// SIGINT and SIGTERM could not be listened for: the server could not
    /// be stopped cleanly, so it does not start.
    #[error("cannot listen for SIGINT and SIGTERM: {0}")]
    Signals(#[source] std::io::Error),
    /// The working folder or this program's path could not be found.
    #[error("cannot find {what}: {source}")]
    Locate {
        /// What was looked for.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The tools relay failed.
    #[error("cannot reach the ACP bridge's tools socket {path:?}: {source}")]
    Relay {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The credential file could not be written (the machine is paired;
    /// its unused credential expires on its own).
    #[error("cannot write the credential file {path:?}: {source}; the machine was paired, but its credential is lost: revoke it and pair again")]
    CredentialFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Serve(args) => serve::serve(args).await,
        Command::Planner { command } => planner::planner(command).await,
        Command::Account { command } => admin::account(command).await,
        Command::Token { command } => admin::token(command).await,
        Command::Machine { command } => admin::machine(command).await,
        Command::Mcp { server, token_file } => {
            Ok(crate::mcp_stdio::run(&server, &token_file).await?)
        }
    }
}

/// The environment variables renamed to carry `MARGIN_`: (old, new).
const RENAMED: [(&str, &str); 3] = [
    ("PLANNER_IDLE_MS", "MARGIN_PLANNER_IDLE_MS"),
    ("PLANNER_ATTACH_GRACE_MS", "MARGIN_PLANNER_ATTACH_GRACE_MS"),
    ("SESSION_EVENTS_RETAINED", "MARGIN_SESSION_EVENTS_RETAINED"),
];

/// Reads the older environment names under their new ones, and says so:
/// the warnings to print. Call before any thread starts (it sets
/// environment variables).
pub fn read_old_environment_names() -> Vec<String> {
    let mut warnings = Vec::new();
    for (old, new) in RENAMED {
        let Some(value) = std::env::var_os(old) else {
            continue;
        };
        if std::env::var_os(new).is_some() {
            warnings.push(format!("{old} is deprecated and ignored: {new} is set too"));
        } else {
            std::env::set_var(new, value);
            warnings.push(format!(
                "{old} is deprecated; set {new} instead (read this time)"
            ));
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_leaves_a_core_to_the_store_unless_told_otherwise() {
        let cores = |n| NonZeroUsize::new(n).unwrap();
        assert_eq!(default_workers(cores(1)), cores(1));
        assert_eq!(default_workers(cores(2)), cores(1));
        assert_eq!(default_workers(cores(8)), cores(7));
        let told = Cli::try_parse_from(["margin", "--workers", "3", "account", "list"]).unwrap();
        assert_eq!(told.workers(), cores(3));
        let refused = Cli::try_parse_from(["margin", "--workers", "0", "account", "list"]);
        assert!(refused.unwrap_err().to_string().contains("--workers"));
    }
}
