//! The command line: `serve`, `planner demo`, `account add`, `token add`,
//! `machine pair`.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::admission::Limits;
use crate::auth;
use crate::cluster::ClusterSettings;
use margin_sdk::{write_credential_file, ConnectError, Connector};
use tokio_util::sync::CancellationToken;

use crate::demo::{self, Demo, DemoError};
use crate::serve::{start, wait_for_signal, Running, ServeError, ServeOptions};
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
        /// How long a detached link's Planner sessions (or a dropped link's
        /// with nothing to keep) wait for the machine, in ms (SPEC L7).
        #[arg(long, env = "PLANNER_ATTACH_GRACE_MS", default_value_t = margin_planner::DEFAULT_ATTACH_GRACE.0)]
        planner_attach_grace_ms: u64,
        /// How many events each Planner session keeps behind its snapshot
        /// for applications to replay; a cursor further back resyncs (SPEC
        /// E2).
        #[arg(long, env = "SESSION_EVENTS_RETAINED", default_value_t = crate::sessions::DEFAULT_RETAINED, value_parser = clap::value_parser!(u64).range(1..))]
        session_events_retained: u64,
        /// How many Planner reads each document remembers (SPEC S5).
        #[arg(long, env = "MARGIN_REMEMBERED_READS", default_value_t = NonZeroUsize::new(margin_decisions::DEFAULT_READS).unwrap_or(NonZeroUsize::MIN))]
        remembered_reads: NonZeroUsize,
        /// Open HTTP connections in all; lowered to what the process's
        /// file-descriptor limit leaves room for (SPEC A2).
        #[arg(long, env = "MARGIN_MAX_CONNECTIONS", default_value_t = Limits::default().connections as u32, value_parser = clap::value_parser!(u32).range(1..))]
        max_connections: u32,
        /// Open HTTP connections from one IP address.
        #[arg(long, env = "MARGIN_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = Limits::default().per_address as u32, value_parser = clap::value_parser!(u32).range(1..))]
        max_connections_per_address: u32,
        /// How long a request head may take to arrive, in ms.
        #[arg(long, env = "MARGIN_HEADER_TIMEOUT_MS", default_value_t = Limits::default().header_timeout.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
        header_timeout_ms: u64,
        /// How long a request body may take to arrive, in ms.
        #[arg(long, env = "MARGIN_BODY_TIMEOUT_MS", default_value_t = Limits::default().body_timeout.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
        body_timeout_ms: u64,
        /// Run as one node of a cluster sharing this PostgreSQL database
        /// with other `--cluster` nodes (SPEC C1–C4; docs/operations.md,
        /// "Running several servers").
        #[arg(long, env = "MARGIN_CLUSTER", conflicts_with = "demo_planner")]
        cluster: bool,
        /// In a cluster: the URL the other nodes reach this one at
        /// (`http://HOST:PORT`); by default the address it listens on,
        /// which must then not be 0.0.0.0 or [::].
        #[arg(
            long,
            env = "MARGIN_ADVERTISE",
            value_name = "URL",
            requires = "cluster"
        )]
        advertise: Option<String>,
        /// In a cluster: how long a node owns its documents after its last
        /// lease renewal, in ms; another node takes them once it passes.
        #[arg(long, env = "MARGIN_LEASE_TTL_MS", default_value_t = ClusterSettings::default().lease_ttl.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
        lease_ttl_ms: u64,
        /// In a cluster: how often a node renews its lease, in ms (at most
        /// a third of the TTL).
        #[arg(long, env = "MARGIN_LEASE_RENEW_MS", default_value_t = ClusterSettings::default().renew_every.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
        lease_renew_ms: u64,
        /// Also run the demo Planner for ACCOUNT (created if missing; default
        /// `demo`): pairs a machine, links it over a real socket, prints a
        /// token for the editor and adds a sample document.
        #[arg(long, value_name = "ACCOUNT", num_args = 0..=1, default_missing_value = "demo")]
        demo_planner: Option<String>,
    },
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
}

#[derive(Debug, Subcommand)]
enum PlannerCommand {
    /// The scripted demo Planner: opens a decision card for every block
    /// that ends in `?` or is marked `TBD`, reports a run, and replies.
    Demo {
        /// The server, e.g. `http://127.0.0.1:7070`.
        #[arg(long, env = "MARGIN_SERVER", default_value = "http://127.0.0.1:7070")]
        server: String,
        /// A file holding the machine's credential (from `margin machine
        /// pair --credential-file` or `POST /machines`). It is read at each
        /// connect and replaced (mode 0600) with each fresh credential the
        /// link sends, so it stays current while linked (SPEC L8).
        #[arg(long, value_name = "FILE")]
        credential: PathBuf,
        /// Do not ask for resumable sessions (SPEC L1).
        #[arg(long)]
        no_resume: bool,
    },
}

#[derive(Debug, Subcommand)]
enum MachineCommand {
    /// Pair a machine to an account; prints its credential as the last line,
    /// or writes it to a private file. The credential lasts 15 minutes;
    /// once the Planner links with it, the link keeps it renewed.
    Pair {
        /// The owner's account name.
        account: String,
        /// A name for the machine.
        name: String,
        /// Write the credential to PATH (mode 0600, replacing the file
        /// atomically) instead of printing it: the file a Planner reads,
        /// e.g. `margin planner demo --credential PATH`.
        #[arg(long, value_name = "PATH")]
        credential_file: Option<PathBuf>,
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
    /// Data folder: the embedded SQLite database, and the demo Planner's
    /// credential and held sessions (also with `--database-url`).
    #[arg(long, default_value = "margin-data")]
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
    /// The demo Planner could not be set up.
    #[error("demo Planner: {0}")]
    Demo(#[from] DemoError),
    /// The Planner has no usable credential (its file is missing or
    /// empty).
    #[error(transparent)]
    Credential(#[from] ConnectError),
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

/// Prints how to watch the demo Planner; the token is the last line.
fn announce(running: &Running, demo: Demo) -> Demo {
    println!(
        "demo Planner linked for account {}; open http://{}/ with this token",
        demo.account.name, running.addr
    );
    if demo.document.is_some() {
        println!("then open \"Beta launch (demo)\" and write @planner in its Chat");
    }
    println!("{}", demo.token);
    demo
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Serve {
            database,
            listen,
            planner_idle_ms,
            planner_attach_grace_ms,
            session_events_retained,
            remembered_reads,
            max_connections,
            max_connections_per_address,
            header_timeout_ms,
            body_timeout_ms,
            cluster,
            advertise,
            lease_ttl_ms,
            lease_renew_ms,
            demo_planner,
        } => {
            let store = database.open().await?;
            let mut options = ServeOptions::new(listen);
            options.hub.read_capacity = remembered_reads;
            options.planner_idle = std::time::Duration::from_millis(planner_idle_ms);
            options.attach_grace = std::time::Duration::from_millis(planner_attach_grace_ms);
            options.session_events_retained = session_events_retained;
            options.limits = Limits {
                connections: max_connections as usize,
                per_address: max_connections_per_address as usize,
                header_timeout: std::time::Duration::from_millis(header_timeout_ms),
                body_timeout: std::time::Duration::from_millis(body_timeout_ms),
            };
            options.cluster = cluster.then(|| ClusterSettings {
                advertise,
                lease_ttl: std::time::Duration::from_millis(lease_ttl_ms),
                renew_every: std::time::Duration::from_millis(lease_renew_ms),
            });
            let running = start(store, options).await?;
            // Tests and scripts read the bound address (useful with port 0).
            println!("margin listening on http://{}", running.addr);
            let demo = match demo_planner {
                Some(account) => match Demo::start(&running, &account, &database.data).await {
                    Ok(demo) => Some(announce(&running, demo)),
                    Err(e) => {
                        running.stop().await?;
                        return Err(e.into());
                    }
                },
                None => None,
            };
            wait_for_signal().await;
            if let Some(demo) = demo {
                demo.stop().await;
            }
            running.stop().await?;
        }
        Command::Planner {
            command:
                PlannerCommand::Demo {
                    server,
                    credential,
                    no_resume,
                },
        } => {
            // The file is read at each connect and kept current by each
            // renewal, so the Planner relinks hours later (SPEC L8).
            // Beside it, the sessions it holds: restarted, it resumes them.
            let held = credential.with_extension("sessions.json");
            let connector = Connector::with_credential_file(server, &credential)
                .held_file(held)
                .resumable(!no_resume)
                .planning(true);
            connector.check_credential()?;
            let shutdown = CancellationToken::new();
            let linked = tokio::spawn(demo::keep_linked(connector, shutdown.clone(), None));
            wait_for_signal().await;
            shutdown.cancel();
            let _ = linked.await;
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
                    credential_file,
                    database,
                },
        } => {
            auth::valid_machine_name(&name).map_err(CliError::MachineName)?;
            let store = database.open().await?;
            let owner = store.account_by_name(&account).await?;
            let ttl = auth::MACHINE_CREDENTIAL_TTL;
            let (machine, credential) =
                auth::pair_machine(&store, &owner, name.trim(), ttl).await?;
            store.close().await;
            println!(
                "paired machine {} ({}) to {}",
                machine.name, machine.id, owner.name
            );
            println!(
                "the credential lasts {}: link the Planner with it before then; while linked it is renewed",
                auth::describe(ttl)
            );
            match credential_file {
                Some(path) => {
                    write_credential_file(&path, &credential.secret).map_err(|source| {
                        CliError::CredentialFile {
                            path: path.clone(),
                            source,
                        }
                    })?;
                    println!("wrote it to {} (mode 0600)", path.display());
                }
                None => println!("{}", credential.secret),
            }
        }
    }
    Ok(())
}
