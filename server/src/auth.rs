//! Bearer secrets (SPEC A1): member tokens and machine credentials, issued
//! once in plain and stored only as hashes.

use crate::storage::{Account, Machine, StorageError, Store};

const TOKEN_PREFIX: &str = "mgn_";
const CREDENTIAL_PREFIX: &str = "mgm_";

/// Why a token could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// The system's random source failed.
    #[error("no randomness available: {0}")]
    Random(#[from] getrandom::Error),
    /// Storage refused the token.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// The stored form of `token`.
pub fn hash_token(token: &str) -> String {
    blake3::hash(token.as_bytes()).to_hex().to_string()
}

/// A new random secret: `prefix` and 64 hex digits.
fn new_secret(prefix: &str) -> Result<String, getrandom::Error> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret)?;
    let mut text = String::with_capacity(prefix.len() + 64);
    text.push_str(prefix);
    for byte in secret {
        text.push_str(&format!("{byte:02x}"));
    }
    Ok(text)
}

/// Whether `secret` could be one of ours, before touching storage.
fn plausible(secret: &str, prefix: &str) -> bool {
    secret.starts_with(prefix) && secret.len() <= 128
}

/// Issues a new token for `account` and returns it in plain; only its hash
/// is kept.
pub async fn issue_token(store: &Store, account: &Account) -> Result<String, IssueError> {
    let token = new_secret(TOKEN_PREFIX)?;
    store.add_token(account, &hash_token(&token)).await?;
    Ok(token)
}

/// The account `token` belongs to; `NotFound` for an unknown token.
pub async fn authenticate(store: &Store, token: &str) -> Result<Account, StorageError> {
    if !plausible(token, TOKEN_PREFIX) {
        return Err(StorageError::NotFound("token"));
    }
    store.account_by_token(&hash_token(token)).await
}

/// Pairs a machine named `name` to `account`; returns it and its credential
/// in plain (shown once; only its hash is kept).
pub async fn pair_machine(
    store: &Store,
    account: &Account,
    name: &str,
) -> Result<(Machine, String), IssueError> {
    let credential = new_secret(CREDENTIAL_PREFIX)?;
    let machine = store
        .pair_machine(account, name, &hash_token(&credential))
        .await?;
    Ok((machine, credential))
}

/// The machine `credential` belongs to, revoked or not (the caller tells a
/// revoked machine why it is refused); `NotFound` for an unknown one.
pub async fn authenticate_machine(
    store: &Store,
    credential: &str,
) -> Result<Machine, StorageError> {
    if !plausible(credential, CREDENTIAL_PREFIX) {
        return Err(StorageError::NotFound("machine"));
    }
    store.machine_by_credential(&hash_token(credential)).await
}

/// Checks a machine name: 1–64 bytes, no control characters.
pub fn valid_machine_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() || name.len() > 64 {
        return Err("machine names are 1 to 64 bytes".into());
    }
    if name.chars().any(char::is_control) {
        return Err("machine names contain no control characters".into());
    }
    Ok(())
}

/// Checks an account name: 1–64 characters of letters, digits, `.`, `_`, `-`.
pub fn valid_account_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err("account names are 1 to 64 characters".into());
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err("account names use only letters, digits, '.', '_' and '-'".into());
    }
    Ok(())
}
