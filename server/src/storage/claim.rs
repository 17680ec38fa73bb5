//! The server's claim on its database (SPEC W3, C4). A server outside a
//! cluster must be the only one on its database: a second would load the
//! same documents and overwrite the first's writes, so it is refused at
//! start, with a message naming the server that holds the claim. Nodes of a
//! cluster (PostgreSQL only) share the database with each other and with
//! no server outside it.
//!
//! PostgreSQL: an advisory lock keyed by database and schema, held on a
//! connection of its own for the server's life — exclusive for a server
//! alone, shared for a cluster node, so either kind refuses the other; the
//! lone holder's description sits in `server_claim`, the nodes' in
//! `cluster_nodes`. SQLite: an exclusive lock on a file beside the
//! database, which holds the description. Both locks die with the process
//! that holds them, so a crashed server never blocks the next.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use sqlx::{AnyConnection, Connection, Row};

use super::{now_ms, Backend, StorageError, Store};

/// How a server shares its database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimMode {
    /// The only server on the database.
    Alone,
    /// A node of a cluster (`serve --cluster`, PostgreSQL only).
    Cluster,
}

/// What a server alone is told when another holds its database.
const STOP_IT: &str = "Stop it first, or run every server with --cluster (PostgreSQL only)";
/// What a server alone is told when a cluster holds its database.
const JOIN_IT: &str = "Start this server with --cluster to join them";
/// What a cluster node is told when a server alone holds its database.
const STOP_IT_FOR_CLUSTER: &str =
    "Stop it first, or restart it with --cluster: a cluster shares its database with no server outside it";

/// A held claim; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct Claim {
    /// SQLite: the locked file, held for its lock (none for a database in
    /// memory, which nobody else can open).
    _file: Option<File>,
    /// PostgreSQL: the session holding the advisory lock.
    session: Option<AnyConnection>,
}

impl Claim {
    /// Releases the claim now (a graceful stop).
    pub async fn release(self) {
        if let Some(conn) = self.session {
            // Closing the session releases its advisory locks.
            let _ = conn.close().await;
        }
    }
}

impl Store {
    /// Claims the database for one server (or, in [`ClaimMode::Cluster`],
    /// for one node of a cluster), described by `holder` (who runs it and
    /// where), or says who holds it ([`StorageError::Claimed`]).
    pub async fn claim(&self, holder: &str, mode: ClaimMode) -> Result<Claim, StorageError> {
        Ok(match self.backend {
            Backend::Sqlite if mode == ClaimMode::Cluster => {
                return Err(StorageError::Claim(
                    "cluster mode needs PostgreSQL (--database-url postgres://…); SQLite serves one server"
                        .into(),
                ))
            }
            Backend::Sqlite => Claim {
                _file: match &self.lock_path {
                    Some(path) => Some(claim_file(path, holder)?),
                    None => None,
                },
                session: None,
            },
            Backend::Postgres => Claim {
                _file: None,
                session: Some(self.claim_postgres(holder, mode).await?),
            },
        })
    }

    async fn claim_postgres(
        &self,
        holder: &str,
        mode: ClaimMode,
    ) -> Result<AnyConnection, StorageError> {
        // Out of the pool: the lock lives as long as this one session.
        let mut conn = self.pool.acquire().await?.detach();
        let scope: String = sqlx::query("SELECT current_database() || '.' || current_schema()")
            .fetch_one(&mut conn)
            .await?
            .try_get(0)?;
        let function = match mode {
            ClaimMode::Alone => "pg_try_advisory_lock",
            ClaimMode::Cluster => "pg_try_advisory_lock_shared",
        };
        let got: bool = sqlx::query(&format!("SELECT {function}($1)"))
            .bind(lock_key(&scope))
            .fetch_one(&mut conn)
            .await?
            .try_get(0)?;
        let what = format!("PostgreSQL database {scope}");
        if !got {
            let nodes = sqlx::query(
                "SELECT advertise FROM cluster_nodes \
                 WHERE expires_at >= (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT \
                 ORDER BY started_at",
            )
            .fetch_all(&mut conn)
            .await?
            .iter()
            .map(|row| row.try_get::<String, _>("advertise"))
            .collect::<Result<Vec<_>, _>>()?;
            let lone = sqlx::query("SELECT holder FROM server_claim WHERE id = 1")
                .fetch_optional(&mut conn)
                .await?
                .map(|row| row.try_get::<String, _>("holder"))
                .transpose()?;
            return Err(match mode {
                ClaimMode::Alone if !nodes.is_empty() => StorageError::Claimed {
                    what,
                    holder: format!(
                        "a cluster of {} node(s) ({})",
                        nodes.len(),
                        nodes.join(", ")
                    ),
                    remedy: JOIN_IT,
                },
                ClaimMode::Alone => StorageError::Claimed {
                    what,
                    holder: lone.unwrap_or_else(|| UNNAMED.to_owned()),
                    remedy: STOP_IT,
                },
                ClaimMode::Cluster => StorageError::Claimed {
                    what,
                    holder: lone.unwrap_or_else(|| UNNAMED.to_owned()),
                    remedy: STOP_IT_FOR_CLUSTER,
                },
            });
        }
        if mode == ClaimMode::Alone {
            sqlx::query(
                "INSERT INTO server_claim (id, holder, claimed_at) VALUES (1, $1, $2) \
                 ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, claimed_at = excluded.claimed_at",
            )
            .bind(holder)
            .bind(now_ms())
            .execute(&mut conn)
            .await?;
        }
        Ok(conn)
    }
}

/// How a holder that has not described itself yet is named.
const UNNAMED: &str = "a server that has not said who it is";

/// The advisory lock key of `scope`: its first 8 bytes of `blake3`.
fn lock_key(scope: &str) -> i64 {
    let hash = blake3::hash(format!("margin serve {scope}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&hash.as_bytes()[..8]);
    i64::from_le_bytes(bytes)
}

/// The file of the SQLite database at `url`; `None` for one in memory.
pub(super) fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" {
        return None;
    }
    Some(PathBuf::from(path))
}

/// The lock file of the SQLite database at `url`; `None` for one in memory.
pub(super) fn sqlite_lock_path(url: &str) -> Option<PathBuf> {
    let mut lock = sqlite_file(url)?.into_os_string();
    lock.push(".lock");
    Some(lock.into())
}

/// Locks the file at `path` and writes `holder` into it, or reads who
/// holds it.
fn claim_file(path: &Path, holder: &str) -> Result<File, StorageError> {
    let failed = |e: std::io::Error| StorageError::Claim(format!("{}: {e}", path.display()));
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(failed)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut named = String::new();
            // A holder caught between locking and writing has said nothing yet.
            let _ = file.read_to_string(&mut named);
            return Err(StorageError::Claimed {
                what: format!("SQLite database {}", path.with_extension("").display()),
                holder: match named.trim() {
                    "" => UNNAMED.to_owned(),
                    named => named.to_owned(),
                },
                remedy: STOP_IT,
            });
        }
        Err(TryLockError::Error(e)) => return Err(failed(e)),
    }
    file.set_len(0).map_err(failed)?;
    file.rewind().map_err(failed)?;
    file.write_all(holder.as_bytes()).map_err(failed)?;
    file.flush().map_err(failed)?;
    Ok(file)
}
