//! `margin account|token|machine …`: accounts, their bearer tokens and
//! their machines, straight against the database (SPEC O2, A1, L8).

use std::path::PathBuf;

use clap::Subcommand;
use margin_protocol::admin::{AccountSummary, TokenSummary};
use margin_protocol::link::MachineInfo;
use margin_sdk::write_credential_file;

use super::{CliError, Database};
use crate::auth;
use crate::storage::{Account, StorageError, Store};

#[derive(Debug, Subcommand)]
pub(super) enum MachineCommand {
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
pub(super) enum AccountCommand {
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
pub(super) enum TokenCommand {
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

/// Runs a `margin account` command.
pub(super) async fn account(command: AccountCommand) -> Result<(), CliError> {
    match command {
        AccountCommand::Add { name, database } => account_add(name, database).await,
        AccountCommand::List { json, database } => account_list(json, database).await,
    }
}

/// Runs a `margin token` command.
pub(super) async fn token(command: TokenCommand) -> Result<(), CliError> {
    match command {
        TokenCommand::Add { name, database } => token_add(name, database).await,
        TokenCommand::List {
            name,
            json,
            database,
        } => token_list(name, json, database).await,
        TokenCommand::Revoke { name, id, database } => token_revoke(name, id, database).await,
    }
}

/// Runs a `margin machine` command.
pub(super) async fn machine(command: MachineCommand) -> Result<(), CliError> {
    match command {
        MachineCommand::Pair {
            account,
            name,
            credential_file,
            database,
        } => machine_pair(account, name, credential_file, database).await,
        MachineCommand::List {
            account,
            json,
            database,
        } => machine_list(account, json, database).await,
        MachineCommand::Revoke {
            account,
            id,
            database,
        } => machine_revoke(account, id, database).await,
    }
}

/// Creates an account and prints its first token, last.
async fn account_add(name: String, database: Database) -> Result<(), CliError> {
    auth::valid_account_name(&name).map_err(CliError::AccountName)?;
    let store = database.open().await?;
    let account = store.create_account(&name).await?;
    let token = auth::issue_token(&store, &account).await?;
    println!("created account {}", account.name);
    println!("{token}");
    store.close().await;
    Ok(())
}

/// Lists every account.
async fn account_list(json: bool, database: Database) -> Result<(), CliError> {
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
    Ok(())
}

/// Issues another token for an account, printed last.
async fn token_add(name: String, database: Database) -> Result<(), CliError> {
    let store = database.open().await?;
    let account = account_named(&store, &name).await?;
    let token = auth::issue_token(&store, &account).await?;
    println!("new token for {}", account.name);
    println!("{token}");
    store.close().await;
    Ok(())
}

/// Lists an account's tokens by the start of their hash.
async fn token_list(name: String, json: bool, database: Database) -> Result<(), CliError> {
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
    Ok(())
}

/// Revokes one of an account's tokens.
async fn token_revoke(name: String, id: String, database: Database) -> Result<(), CliError> {
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
    Ok(())
}

/// Pairs a machine to an account: its credential printed last, or written to a private file.
async fn machine_pair(
    account: String,
    name: String,
    credential_file: Option<PathBuf>,
    database: Database,
) -> Result<(), CliError> {
    auth::valid_machine_name(&name).map_err(CliError::MachineName)?;
    let store = database.open().await?;
    let owner = account_named(&store, &account).await?;
    let ttl = auth::MACHINE_CREDENTIAL_TTL;
    let (machine, credential) = auth::pair_machine(&store, &owner, name.trim(), ttl).await?;
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
    Ok(())
}

/// Lists an account's machines.
async fn machine_list(account: String, json: bool, database: Database) -> Result<(), CliError> {
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
    Ok(())
}

/// Revokes a machine: its credentials are refused from now on.
async fn machine_revoke(account: String, id: String, database: Database) -> Result<(), CliError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_say_dates_in_utc() {
        assert_eq!(when(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(when(1_796_185_632_707), "2026-12-02 04:27:12 UTC");
        assert_eq!(when(951_782_400_000), "2000-02-29 00:00:00 UTC");
    }
}
