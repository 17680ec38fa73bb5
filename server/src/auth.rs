//! Bearer secrets (SPEC A1, L8): member tokens and machine credentials,
//! issued once in plain and stored only as hashes. Machine credentials are
//! short-lived: each opens links for [`MACHINE_CREDENTIAL_TTL`], and a
//! linked machine is sent fresh ones before the last expires.

use std::time::Duration;

use crate::storage::{now_ms, Account, Machine, StorageError, Store};

const TOKEN_PREFIX: &str = "mgn_";
const CREDENTIAL_PREFIX: &str = "mgm_";

/// How long a machine credential opens links (SPEC L8): 15 minutes. A link
/// is sent a fresh one every third of it; `LinkSettings::credential_ttl`
/// overrides it (tests use milliseconds).
pub const MACHINE_CREDENTIAL_TTL: Duration = Duration::from_secs(15 * 60);

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

/// A machine credential in plain (shown once; only its hash is kept) and
/// when it stops opening links.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedCredential {
    /// The bearer credential, `mgm_…`.
    pub secret: String,
    /// Milliseconds since the Unix epoch.
    pub expires_at: i64,
}

impl std::fmt::Debug for IssuedCredential {
    /// Never shows the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedCredential")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// Why a machine credential opens no link.
#[derive(Debug, thiserror::Error)]
pub enum MachineRefusal {
    /// Not a credential the server knows (never issued, or expired more
    /// than a day ago and pruned).
    #[error("unknown machine credential")]
    Unknown,
    /// The machine was revoked: none of its credentials opens a link.
    #[error("machine {name:?} was revoked")]
    Revoked {
        /// The machine's name.
        name: String,
    },
    /// The credential's lifetime is over.
    #[error("the machine credential expired {}", ago(*expired_at, *now))]
    Expired {
        /// When it expired (ms since the Unix epoch).
        expired_at: i64,
        /// When it was presented.
        now: i64,
    },
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// The stored form of `token`.
pub fn hash_token(token: &str) -> String {
    blake3::hash(token.as_bytes()).to_hex().to_string()
}

/// A new random secret: `prefix` and 64 hex digits.
pub(crate) fn new_secret(prefix: &str) -> Result<String, getrandom::Error> {
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

/// Signs `token` out: it authenticates nobody from now on.
pub async fn sign_out(store: &Store, token: &str) -> Result<(), StorageError> {
    store.remove_token(&hash_token(token)).await
}

/// `ttl` from now, in milliseconds since the Unix epoch.
fn expiry(now: i64, ttl: Duration) -> i64 {
    now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

/// Pairs a machine named `name` to `account`; returns it and its first
/// credential, which opens links for `ttl` (SPEC L8).
pub async fn pair_machine(
    store: &Store,
    account: &Account,
    name: &str,
    ttl: Duration,
) -> Result<(Machine, IssuedCredential), IssueError> {
    let secret = new_secret(CREDENTIAL_PREFIX)?;
    let expires_at = expiry(now_ms(), ttl);
    let machine = store
        .pair_machine(account, name, &hash_token(&secret), expires_at)
        .await?;
    Ok((machine, IssuedCredential { secret, expires_at }))
}

/// A fresh credential for `machine`, valid for `ttl`; its earlier ones stay
/// valid until their own expiry. `NotFound` once the machine is revoked.
pub async fn renew_machine_credential(
    store: &Store,
    machine: &Machine,
    ttl: Duration,
) -> Result<IssuedCredential, IssueError> {
    let secret = new_secret(CREDENTIAL_PREFIX)?;
    let expires_at = expiry(now_ms(), ttl);
    store
        .add_machine_credential(&machine.id, &hash_token(&secret), expires_at)
        .await?;
    Ok(IssuedCredential { secret, expires_at })
}

/// The machine `credential` opens a link for, or why it opens none. A
/// revoked machine is refused before an expired credential is: revoking
/// refuses every credential of the machine. A credential paired before
/// credentials expired (no expiry stored) starts its `ttl` now.
pub async fn authenticate_machine(
    store: &Store,
    credential: &str,
    ttl: Duration,
) -> Result<Machine, MachineRefusal> {
    if !plausible(credential, CREDENTIAL_PREFIX) {
        return Err(MachineRefusal::Unknown);
    }
    let hash = hash_token(credential);
    let stored = match store.machine_by_credential(&hash).await {
        Ok(stored) => stored,
        Err(StorageError::NotFound(_)) => return Err(MachineRefusal::Unknown),
        Err(other) => return Err(other.into()),
    };
    if stored.machine.revoked {
        return Err(MachineRefusal::Revoked {
            name: stored.machine.name,
        });
    }
    let now = now_ms();
    let expires_at = match stored.expires_at {
        Some(expires_at) => expires_at,
        None => {
            let started = store
                .start_credential_lifetime(&hash, expiry(now, ttl))
                .await?;
            tracing::info!(machine = %stored.machine.id, expires_at = started, "a credential paired before credentials expired started its lifetime");
            started
        }
    };
    if expires_at <= now {
        return Err(MachineRefusal::Expired {
            expired_at: expires_at,
            now,
        });
    }
    Ok(stored.machine)
}

/// A lifetime for people: "15 minutes", "1 minute", "90 s", "300 ms".
pub fn describe(duration: Duration) -> String {
    let secs = duration.as_secs();
    let minutes = secs / 60;
    if minutes >= 1 && Duration::from_secs(minutes * 60) == duration {
        return format!("{minutes} minute{}", if minutes == 1 { "" } else { "s" });
    }
    if secs >= 1 {
        return format!("{secs} s");
    }
    format!("{} ms", duration.as_millis())
}

/// How long ago `at` was, seen from `now`, for people.
pub fn ago(at: i64, now: i64) -> String {
    let ms = u64::try_from(now.saturating_sub(at)).unwrap_or(0);
    let duration = Duration::from_millis(ms);
    if ms >= 60_000 {
        // Whole minutes read better than "5423 s".
        return format!("{} ago", describe(Duration::from_secs(ms / 60_000 * 60)));
    }
    format!("{} ago", describe(duration))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_read_as_people_say_them() {
        assert_eq!(describe(MACHINE_CREDENTIAL_TTL), "15 minutes");
        assert_eq!(describe(Duration::from_secs(60)), "1 minute");
        assert_eq!(describe(Duration::from_secs(90)), "90 s");
        assert_eq!(describe(Duration::from_millis(300)), "300 ms");
        assert_eq!(ago(0, 3_725_000), "62 minutes ago");
        assert_eq!(ago(1_000, 1_250), "250 ms ago");
    }

    #[test]
    fn an_issued_credential_never_shows_its_secret_in_debug() {
        let issued = IssuedCredential {
            secret: "mgm_secret".into(),
            expires_at: 5,
        };
        assert!(!format!("{issued:?}").contains("mgm_secret"));
    }
}
