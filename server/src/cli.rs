//! The command line (SPEC O2): `serve`, `planner demo`, `account add|list`,
//! `token add|list|revoke`, `machine pair|list|revoke`. Every environment
//! variable it reads starts with `MARGIN_`; the few older names are still
//! read, with a warning ([`read_old_environment_names`]).

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
use crate::http::{Cidr, TrustedProxies};
use crate::serve::{start, wait_for_signal, Running, ServeError, ServeOptions};
use crate::storage::{Account, StorageError, Store};
use crate::telemetry::LogFormat;
use margin_protocol::admin::{AccountSummary, TokenSummary};
use margin_protocol::link::MachineInfo;

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
/// for them is woken only to hand tasks across cores. On 2 cores, one
/// worker used 14 µs of CPU per delivered edit at 200 edits/s against 18.6
/// for two, and 7.6 against 10.4 at 1,000 (issue #16).
fn default_workers(cores: NonZeroUsize) -> NonZeroUsize {
    NonZeroUsize::new(cores.get() - 1).unwrap_or(NonZeroUsize::MIN)
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
        #[arg(long, env = "MARGIN_PLANNER_IDLE_MS", default_value_t = margin_planner::DEFAULT_IDLE.0)]
        planner_idle_ms: u64,
        /// How long a detached link's Planner sessions (or a dropped link's
        /// with nothing to keep) wait for the machine, in ms (SPEC L7).
        #[arg(long, env = "MARGIN_PLANNER_ATTACH_GRACE_MS", default_value_t = margin_planner::DEFAULT_ATTACH_GRACE.0)]
        planner_attach_grace_ms: u64,
        /// How many events each Planner session keeps behind its snapshot
        /// for applications to replay; a cursor further back resyncs (SPEC
        /// E2).
        #[arg(long, env = "MARGIN_SESSION_EVENTS_RETAINED", default_value_t = crate::sessions::DEFAULT_RETAINED, value_parser = clap::value_parser!(u64).range(1..))]
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
        /// A reverse proxy in front of the server: an address or a block
        /// (`10.0.0.0/8`, `::1`); repeat the flag, or separate several with
        /// commas. When a request's peer is one of them, its failed sign-ins
        /// count against the client the proxy forwarded it for: the
        /// right-most address of `X-Forwarded-For` that is not itself a
        /// trusted proxy, or, without that header, of `Forwarded: for=`.
        /// From any other peer both headers are ignored (SPEC A3b).
        #[arg(
            long = "trusted-proxy",
            env = "MARGIN_TRUSTED_PROXY",
            value_name = "CIDR",
            value_delimiter = ','
        )]
        trusted_proxies: Vec<Cidr>,
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
    /// List an account's machines, newest first, and whether each is
    /// revoked.
    List {
        /// The owner's account name.
        account: String,
        /// Print a JSON array (`MachineInfo` objects) instead of lines.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        database: Database,
    },
    /// Revoke a machine: every credential of it is refused from now on. A
    /// server running now ends its sessions and closes its open link at
    /// the link's next credential renewal (within a third of a
    /// credential's lifetime, 5 minutes by default); `DELETE /machines/ID`
    /// over HTTP does so at once.
    Revoke {
        /// The owner's account name.
        account: String,
        /// The machine's id (from `margin machine list`).
        id: String,
        #[command(flatten)]
        database: Database,
    },
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
    /// List every account, by name.
    List {
        /// Print a JSON array (`AccountSummary` objects) instead of lines.
        #[arg(long)]
        json: bool,
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
    /// List an account's tokens, oldest first. Tokens are stored only as
    /// hashes, so none is shown: each is named by the start of its hash.
    List {
        /// Account name.
        name: String,
        /// Print a JSON array (`TokenSummary` objects) instead of lines.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        database: Database,
    },
    /// Revoke one of an account's tokens: it signs nobody in from now on.
    Revoke {
        /// Account name.
        name: String,
        /// The token's id (from `margin token list`).
        id: String,
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
            trusted_proxies,
            demo_planner,
        } => {
            // Everything that can be checked is checked before the port opens.
            if let Some(account) = &demo_planner {
                auth::valid_account_name(account).map_err(|why| CliError::DemoAccount {
                    name: account.clone(),
                    why,
                })?;
            }
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
            options.trusted_proxies = TrustedProxies::new(trusted_proxies);
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
        Command::Account {
            command: AccountCommand::List { json, database },
        } => {
            let store = database.open().await?;
            let accounts = store.accounts().await?;
            store.close().await;
            let listed: Vec<AccountSummary> = accounts
                .into_iter()
                .map(|(account, created_at)| AccountSummary {
                    name: account.name,
                    created_at,
                })
                .collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&listed)?);
            } else {
                for account in &listed {
                    println!("{}\tcreated {}", account.name, when(account.created_at));
                }
            }
        }
        Command::Token {
            command: TokenCommand::Add { name, database },
        } => {
            let store = database.open().await?;
            let account = account_named(&store, &name).await?;
            let token = auth::issue_token(&store, &account).await?;
            println!("new token for {}", account.name);
            println!("{token}");
            store.close().await;
        }
        Command::Token {
            command:
                TokenCommand::List {
                    name,
                    json,
                    database,
                },
        } => {
            let store = database.open().await?;
            let account = account_named(&store, &name).await?;
            let tokens = store.tokens_of(&account).await?;
            store.close().await;
            let listed: Vec<TokenSummary> = tokens
                .iter()
                .map(|(hash, created_at)| TokenSummary {
                    id: token_id(hash).to_owned(),
                    created_at: *created_at,
                })
                .collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&listed)?);
            } else {
                for token in &listed {
                    println!("{}\tissued {}", token.id, when(token.created_at));
                }
            }
        }
        Command::Token {
            command: TokenCommand::Revoke { name, id, database },
        } => {
            let store = database.open().await?;
            let account = account_named(&store, &name).await?;
            let no_token = || CliError::NoToken {
                account: account.name.clone(),
                id: id.clone(),
            };
            let tokens = store.tokens_of(&account).await?;
            let mut matching = tokens
                .iter()
                .filter(|(hash, _)| token_id(hash) == id.trim());
            let (hash, _) = matching.next().ok_or_else(no_token)?;
            match store.revoke_token(&account, hash).await {
                Ok(()) => {}
                // Revoked meanwhile by someone else: as if it never was.
                Err(StorageError::NotFound(_)) => return Err(no_token()),
                Err(other) => return Err(other.into()),
            }
            store.close().await;
            println!("revoked token {} of {}", token_id(hash), account.name);
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
            let owner = account_named(&store, &account).await?;
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
        Command::Machine {
            command:
                MachineCommand::List {
                    account,
                    json,
                    database,
                },
        } => {
            let store = database.open().await?;
            let owner = account_named(&store, &account).await?;
            let machines = store.machines_of(&owner).await?;
            store.close().await;
            let listed: Vec<MachineInfo> = machines
                .into_iter()
                .map(|m| MachineInfo {
                    id: m.id,
                    name: m.name,
                    revoked: m.revoked,
                })
                .collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&listed)?);
            } else {
                for machine in &listed {
                    let state = if machine.revoked { "revoked" } else { "paired" };
                    println!("{}\t{}\t{state}", machine.id, machine.name);
                }
            }
        }
        Command::Machine {
            command:
                MachineCommand::Revoke {
                    account,
                    id,
                    database,
                },
        } => {
            let store = database.open().await?;
            let owner = account_named(&store, &account).await?;
            match store.revoke_machine(&owner, &id).await {
                Ok(()) => {}
                Err(StorageError::NotFound(_)) => {
                    return Err(CliError::NoMachine {
                        account: owner.name,
                        id,
                    })
                }
                Err(other) => return Err(other.into()),
            }
            store.close().await;
            println!(
                "revoked machine {id} of {}: its credentials are refused from now on",
                owner.name
            );
        }
    }
    Ok(())
}

/// The account named `name`, or the error that names it.
async fn account_named(store: &Store, name: &str) -> Result<Account, CliError> {
    match store.account_by_name(name).await {
        Ok(account) => Ok(account),
        Err(StorageError::NotFound(_)) => Err(CliError::NoAccount(name.to_owned())),
        Err(other) => Err(other.into()),
    }
}

/// How a token is named in listings: the start of its hash.
fn token_id(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// A time for a listing: UTC, to the second.
fn when(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rest = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`), so listings need no date crate.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
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

    #[test]
    fn listings_say_dates_in_utc() {
        assert_eq!(when(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(when(1_796_185_632_707), "2026-12-02 04:27:12 UTC");
        assert_eq!(when(951_782_400_000), "2000-02-29 00:00:00 UTC");
    }
}
