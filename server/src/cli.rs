//! The command line: `serve`, `account add`, `token add`.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::auth;
use crate::serve::{serve, ServeError, ServeOptions};
use crate::storage::{StorageError, Store};
use crate::telemetry::LogFormat;

/// Margin: a collaborative planning-document server.
#[derive(Debug, Parser)]
#[command(name = "margin", version)]
pub struct Cli {
    /// Log line format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server.
    Serve {
        #[command(flatten)]
        database: Database,
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, env = "MARGIN_LISTEN", default_value = "127.0.0.1:7070")]
        listen: SocketAddr,
        /// How long an idle Planner session with nobody viewing is kept, in ms
        /// (SPEC P3).
        #[arg(long, env = "PLANNER_IDLE_MS", default_value_t = margin_planner::DEFAULT_IDLE.0)]
        planner_idle_ms: u64,
        /// How many Planner reads each document remembers (SPEC S5).
        #[arg(long, env = "MARGIN_REMEMBERED_READS", default_value_t = NonZeroUsize::new(margin_decisions::DEFAULT_READS).unwrap_or(NonZeroUsize::MIN))]
        remembered_reads: NonZeroUsize,
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
}

#[derive(Debug, Subcommand)]
enum MachineCommand {
    /// Pair a machine to an account; prints its credential as the last line.
    Pair {
        /// The owner's account name.
        account: String,
        /// A name for the machine.
        name: String,
        #[command(flatten)]
        database: Database,
    },
}

#[derive(Debug, Subcommand)]
enum AccountCommand {
    /// Create an account; prints a new bearer token as the last line.
    Add {
        /// Account name: letters, digits, '.', '_', '-'.
        name: String,
        #[command(flatten)]
        database: Database,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Issue another token for an account; prints it as the last line.
    Add {
        /// Account name.
        name: String,
        #[command(flatten)]
        database: Database,
    },
}

/// Where the data lives.
#[derive(Debug, Args)]
struct Database {
    /// Data folder for the embedded SQLite database.
    #[arg(long, default_value = "margin-data", conflicts_with = "database_url")]
    data: PathBuf,
    /// `postgres://…` (or `sqlite://…`) instead of the data folder.
    #[arg(long, env = "MARGIN_DATABASE_URL")]
    database_url: Option<String>,
}

impl Database {
    async fn open(&self) -> Result<Store, CliError> {
        let url = match &self.database_url {
            Some(url) => url.clone(),
            None => Store::sqlite_url_in(&self.data).map_err(|source| CliError::DataDir {
                path: self.data.clone(),
                source,
            })?,
        };
        Ok(Store::open(&url).await?)
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
    /// A bad machine name.
    #[error("invalid machine name: {0}")]
    MachineName(String),
    /// A token could not be issued.
    #[error(transparent)]
    Issue(#[from] auth::IssueError),
    /// The server failed.
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Serve {
            database,
            listen,
            planner_idle_ms,
            remembered_reads,
        } => {
            let store = database.open().await?;
            let mut options = ServeOptions::new(listen);
            options.hub.read_capacity = remembered_reads;
            options.planner_idle = std::time::Duration::from_millis(planner_idle_ms);
            serve(store, options).await?;
        }
        Command::Account {
            command: AccountCommand::Add { name, database },
        } => {
            auth::valid_account_name(&name).map_err(CliError::AccountName)?;
            let store = database.open().await?;
            let account = store.create_account(&name).await?;
            let token = auth::issue_token(&store, &account).await?;
            println!("created account {}", account.name);
            println!("{token}");
            store.close().await;
        }
        Command::Token {
            command: TokenCommand::Add { name, database },
        } => {
            let store = database.open().await?;
            let account = store.account_by_name(&name).await?;
            let token = auth::issue_token(&store, &account).await?;
            println!("new token for {}", account.name);
            println!("{token}");
            store.close().await;
        }
        Command::Machine {
            command:
                MachineCommand::Pair {
                    account,
                    name,
                    database,
                },
        } => {
            auth::valid_machine_name(&name).map_err(CliError::MachineName)?;
            let store = database.open().await?;
            let owner = store.account_by_name(&account).await?;
            let (machine, credential) = auth::pair_machine(&store, &owner, name.trim()).await?;
            println!(
                "paired machine {} ({}) to {}",
                machine.name, machine.id, owner.name
            );
            println!("{credential}");
            store.close().await;
        }
    }
    Ok(())
}
