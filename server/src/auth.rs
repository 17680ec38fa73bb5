//! Bearer tokens (SPEC A1): issued once in plain, stored only as hashes.

use crate::storage::{Account, StorageError, Store};

const TOKEN_PREFIX: &str = "mgn_";

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

/// Issues a new token for `account` and returns it in plain; only its hash
/// is kept.
pub async fn issue_token(store: &Store, account: &Account) -> Result<String, IssueError> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret)?;
    let mut token = String::with_capacity(TOKEN_PREFIX.len() + 64);
    token.push_str(TOKEN_PREFIX);
    for byte in secret {
        token.push_str(&format!("{byte:02x}"));
    }
    store.add_token(account, &hash_token(&token)).await?;
    Ok(token)
}

/// The account `token` belongs to; `NotFound` for an unknown token.
pub async fn authenticate(store: &Store, token: &str) -> Result<Account, StorageError> {
    // Reject obvious garbage before touching storage.
    if !token.starts_with(TOKEN_PREFIX) || token.len() > 128 {
        return Err(StorageError::NotFound("token"));
    }
    store.account_by_token(&hash_token(token)).await
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
