//! Durable storage: accounts, tokens, documents, members and each document's
//! update log and snapshot (SPEC S3, W3).
//!
//! One [`Store`] serves both backends through `sqlx`'s `Any` driver: the SQL
//! is written once in the dialect both accept, and what differs — DDL types
//! and connection pragmas — lives in `migrations/{sqlite,postgres}` and in
//! [`Store::open`]. Every write that touches more than one row runs in one
//! transaction.
//!
//! Writes go through [`Store::writes`], reads through the shared pool. On
//! SQLite that is one connection the store owns (`writer`): the database
//! takes one writer at a time anyway, and queueing writers here wakes the
//! next the moment the last commits, where writers racing for the file
//! lock would sleep in SQLite's busy handler for up to tens of
//! milliseconds — an editor's append waiting behind a compaction's
//! snapshot did exactly that (S3).
//! Its reader connections are `query_only`, so a write sent the wrong way
//! fails loudly instead of racing. The hot writes there — editors' appends,
//! Planner sessions' journal, a tool call's result with its cards — are
//! committed in groups by a thread of their own on a second write
//! connection (`committer`), which holds the store's writer while it
//! writes: every write waiting when the writer frees up commits in one
//! transaction and one fsync. A write is built once as statements
//! (`statement`) and runs on either writer.

mod accounts;
mod cards;
mod chat;
mod claim;
mod cluster;
mod committer;
mod documents;
mod group;
mod machines;
mod members;
mod sessions;
mod statement;
mod updates;
mod writer;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyConnection, AnyPool, Connection, Executor, Row};

pub use accounts::Account;
pub use cards::StoredCard;
pub use claim::{Claim, ClaimMode};
pub use cluster::{LeaseHolder, Node, Take};
pub use documents::DocumentRow;
pub use machines::{Machine, StoredCredential, EXPIRED_CREDENTIALS_KEPT_MS};
pub use sessions::{
    open_sessions_query, LeaseFence, SessionOwner, SessionWrite, StoredEvent, StoredSession,
};
pub use updates::{Alongside, ClientBinding, Epoch, RefusedUpdate, StoredState};

/// Errors from storage, typed by what a caller can do about them.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The row asked for does not exist.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The write would break a uniqueness rule (a taken account name, …).
    #[error("{0}")]
    Conflict(String),
    /// Another writer moved the document's revision: this writer's view is
    /// stale and must not write (revision fencing, SPEC W3).
    #[error("document revision moved: expected {expected}, found {found}")]
    RevisionMoved {
        /// The revision this writer held.
        expected: i64,
        /// The revision found in storage.
        found: i64,
    },
    /// Another owner claimed the document: this writer's copy is stale and
    /// must not write (owner fencing, SPEC W3).
    #[error(
        "document owner moved: this writer holds epoch {expected}, the document is at {found}"
    )]
    OwnerMoved {
        /// The epoch this writer held.
        expected: i64,
        /// The epoch found in storage.
        found: i64,
    },
    /// Another writer moved the session's journal: this writer's view is
    /// stale and must not write (journal fencing, SPEC W3).
    #[error("session journal moved: expected record {expected}, found {found}")]
    JournalMoved {
        /// The record this writer held.
        expected: u64,
        /// The record found in storage.
        found: u64,
    },
    /// In a cluster, another node took the session's document: this
    /// writer's copy is stale and must not write (SPEC C1, C3).
    #[error("the lease on document {document} moved to another node")]
    LeaseLost {
        /// The document.
        document: String,
    },
    /// Another server holds the database (see [`Store::claim`]).
    #[error("another margin server is using the {what}: {holder}. {remedy}")]
    Claimed {
        /// The database.
        what: String,
        /// Who holds it, as it described itself.
        holder: String,
        /// What the operator can do.
        remedy: &'static str,
    },
    /// The claim's lock file could not be used.
    #[error("cannot claim the database: {0}")]
    Claim(String),
    /// The revision asked for is older than the compacted snapshot.
    #[error("revision {requested} was compacted into the snapshot at {snapshot}")]
    Compacted {
        /// Revision requested.
        requested: i64,
        /// Revision of the snapshot that replaced it.
        snapshot: i64,
    },
    /// A stored row does not decode.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The database would not make commits durable.
    #[error("{0}")]
    Durability(String),
    /// A URL that names no supported database.
    #[error("unsupported database URL (expected sqlite: or postgres:)")]
    UnsupportedUrl,
    /// The database could not be reached when the store opened: where
    /// (never with a password) and why.
    #[error("cannot reach the database at {target}: {cause}")]
    Unreachable {
        /// What was tried: `PostgreSQL user@host:port/database`.
        target: String,
        /// Why it failed.
        cause: String,
    },
    /// The database failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// SQLite failed under the commit thread (`committer`).
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A migration failed at start-up.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// Which database a [`Store`] runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded default: one file, WAL, `synchronous=FULL`.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// Handle to the database; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    /// Reads (and, on PostgreSQL, writes too).
    pool: AnyPool,
    /// Writes: on SQLite one connection of its own, on PostgreSQL the
    /// same pool as reads.
    writer: writer::Writer,
    /// On SQLite, commits the hot writes in groups (`committer`).
    committer: Option<committer::Committer>,
    backend: Backend,
    /// SQLite on a file: the file a server's [`Claim`] locks.
    lock_path: Option<std::path::PathBuf>,
    /// The URL it was opened with: a cluster node's listener connects
    /// with it.
    url: String,
}

impl Store {
    /// Opens the database at `url`, creating an SQLite file if needed, and
    /// runs the migrations of its backend.
    pub async fn open(url: &str) -> Result<Self, StorageError> {
        Self::open_with(url, None).await
    }

    /// Opens the database at `url` as [`Store::open`] does; on PostgreSQL
    /// every session of the pool carries `deadlines` (a cluster node's,
    /// SPEC C5).
    pub async fn open_with(url: &str, deadlines: Option<Deadlines>) -> Result<Self, StorageError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            return Err(StorageError::UnsupportedUrl);
        };
        let (pool, writer) = match backend {
            Backend::Sqlite => {
                // The writer first: it creates the file and runs the
                // migrations before any reader opens it.
                let mut writer = AnyConnection::connect(url).await?;
                sqlite_pragmas(&mut writer, false).await?;
                sqlx::migrate!("./migrations/sqlite")
                    .run(&mut writer)
                    .await?;
                check_sqlite_durability(&mut writer).await?;
                (
                    sqlite_readers(url, 4).await?,
                    writer::Writer::owning(writer),
                )
            }
            Backend::Postgres => {
                reach_postgres(url).await?;
                let pool = AnyPoolOptions::new()
                    .max_connections(16)
                    .after_connect(move |conn, _meta| {
                        Box::pin(async move {
                            match deadlines {
                                Some(deadlines) => deadlines.set(conn).await,
                                None => Ok(()),
                            }
                        })
                    })
                    .connect(url)
                    .await?;
                sqlx::migrate!("./migrations/postgres").run(&pool).await?;
                (pool.clone(), writer::Writer::Pooled(pool))
            }
        };
        let committer = match backend {
            Backend::Sqlite => {
                let file = claim::sqlite_file(url).ok_or_else(|| {
                    StorageError::Durability(
                        "an SQLite database in memory keeps nothing; name a file".into(),
                    )
                })?;
                Some(committer::Committer::start(&file, writer.clone())?)
            }
            Backend::Postgres => None,
        };
        Ok(Store {
            pool,
            writer,
            committer,
            backend,
            lock_path: match backend {
                Backend::Sqlite => claim::sqlite_lock_path(url),
                Backend::Postgres => None,
            },
            url: url.to_owned(),
        })
    }

    /// The SQLite URL of `margin.db` inside `data_dir`, creating the folder.
    pub fn sqlite_url_in(data_dir: &Path) -> std::io::Result<String> {
        std::fs::create_dir_all(data_dir)?;
        let dir = std::fs::canonicalize(data_dir)?;
        Ok(format!(
            "sqlite://{}?mode=rwc",
            dir.join("margin.db").display()
        ))
    }

    /// The connection every write goes through, once the writers before
    /// have let it go (see the module comment).
    async fn writes(&self) -> Result<writer::Lent, StorageError> {
        self.writer.lend().await
    }

    /// Which backend this store runs on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// How many connections of the pool that serves reads (on PostgreSQL,
    /// writes too) are idle, and how many lent out (for `/metrics`).
    pub fn pool_connections(&self) -> (usize, usize) {
        let open = usize::try_from(self.pool.size()).unwrap_or(usize::MAX);
        let idle = self.pool.num_idle();
        (idle, open.saturating_sub(idle))
    }

    /// Checks the database answers (for `/healthz`).
    pub async fn ping(&self) -> Result<(), StorageError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Closes the pools and the writer, waiting for connections to finish.
    pub async fn close(&self) {
        self.pool.close().await;
        self.writer.close().await;
    }
}

/// How long a PostgreSQL session of a cluster node may hold a transaction
/// open doing nothing, or wait for a lock (SPEC C5). A node paused, or cut
/// off, in the middle of a commit holds the document's row: PostgreSQL
/// ends that transaction before the node's lease can lapse, so the next
/// owner never waits on it, and the paused node's commit fails when it
/// wakes. No statement deadline: a statement in progress runs on the
/// database and ends by itself; what can hang is waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// `idle_in_transaction_session_timeout`.
    pub idle_in_transaction: Duration,
    /// `lock_timeout`.
    pub lock_wait: Duration,
}

impl Deadlines {
    /// The deadlines for a node whose lease lasts `ttl`: half of it each.
    /// Its last renewal came at most a third of the TTL before it paused
    /// (renewals come at least three times a TTL), so a transaction left
    /// open is ended at least a sixth of the TTL before the lease lapses.
    pub fn for_lease(ttl: Duration) -> Deadlines {
        Deadlines {
            idle_in_transaction: ttl / 2,
            lock_wait: ttl / 2,
        }
    }

    async fn set(self, conn: &mut AnyConnection) -> Result<(), sqlx::Error> {
        let ms = |d: Duration| d.as_millis().max(1);
        conn.execute(
            format!(
                "SET idle_in_transaction_session_timeout = {}",
                ms(self.idle_in_transaction)
            )
            .as_str(),
        )
        .await?;
        conn.execute(format!("SET lock_timeout = {}", ms(self.lock_wait)).as_str())
            .await?;
        Ok(())
    }
}

/// A pool of `size` read-only connections to the SQLite database at `url`.
async fn sqlite_readers(url: &str, size: u32) -> Result<AnyPool, StorageError> {
    let pool = AnyPoolOptions::new()
        .max_connections(size)
        // Opened before the store is: a connection comes back to the pool
        // in a task of its own once dropped, so reads in quick succession
        // — a request's, a join's — each opened another until all were
        // open, on the first requests after every start.
        .min_connections(size)
        // sqlx pings a connection before lending it out, by default: on
        // SQLite that is one more round trip to the connection's worker
        // thread for every transaction, to check a connection in this
        // very process.
        .test_before_acquire(false)
        .after_connect(|conn, _meta| Box::pin(sqlite_pragmas(conn, true)))
        .connect(url)
        .await?;
    Ok(pool)
}

/// Sets up an SQLite connection: durable (SPEC W3); a `read_only` one
/// refuses every write, so a write sent the wrong way fails loudly.
async fn sqlite_pragmas(conn: &mut AnyConnection, read_only: bool) -> Result<(), sqlx::Error> {
    // Durability: a commit is on disk before it returns (SPEC W3).
    conn.execute("PRAGMA journal_mode = WAL").await?;
    conn.execute("PRAGMA synchronous = FULL").await?;
    conn.execute("PRAGMA foreign_keys = ON").await?;
    // Writers queue in-process; this covers a checkpoint or another
    // process holding the file.
    conn.execute("PRAGMA busy_timeout = 10000").await?;
    if read_only {
        conn.execute("PRAGMA query_only = ON").await?;
    }
    Ok(())
}

/// Refuses to run on an SQLite connection that would acknowledge a commit
/// before it is on disk (SPEC W3).
async fn check_sqlite_durability(conn: &mut AnyConnection) -> Result<(), StorageError> {
    let journal: String = sqlx::query("PRAGMA journal_mode")
        .fetch_one(&mut *conn)
        .await?
        .try_get(0)?;
    let synchronous: i64 = sqlx::query("PRAGMA synchronous")
        .fetch_one(&mut *conn)
        .await?
        .try_get(0)?;
    // synchronous: 2 = FULL, 3 = EXTRA.
    if !journal.eq_ignore_ascii_case("wal") || synchronous < 2 {
        return Err(StorageError::Durability(format!(
            "SQLite runs with journal_mode={journal}, synchronous={synchronous}; Margin needs WAL with FULL sync"
        )));
    }
    Ok(())
}

/// Milliseconds since the Unix epoch, for `created_at` columns and
/// credential expiries.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl StorageError {
    /// Whether a statement gave up waiting for a lock ([`Deadlines`]): the
    /// holder is stuck, and trying again later may find it gone.
    pub fn is_lock_timeout(&self) -> bool {
        matches!(self, StorageError::Database(sqlx::Error::Database(db))
            if db.code().as_deref() == Some("55P03"))
    }
}

/// Maps a unique-constraint violation to [`StorageError::Conflict`].
fn conflict_on_unique(err: sqlx::Error, what: impl FnOnce() -> String) -> StorageError {
    match &err {
        sqlx::Error::Database(db) if db.is_unique_violation() => StorageError::Conflict(what()),
        _ => StorageError::Database(err),
    }
}

/// How long opening a store waits for PostgreSQL to answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects once to the PostgreSQL at `url`, so an operator who named the
/// wrong one hears where and why within seconds — not a pool timing out
/// half a minute later, naming neither.
async fn reach_postgres(url: &str) -> Result<(), StorageError> {
    use sqlx::postgres::{PgConnectOptions, PgConnection};
    use sqlx::{ConnectOptions, Connection};
    let options: PgConnectOptions =
        url.parse()
            .map_err(|e: sqlx::Error| StorageError::Unreachable {
                target: "PostgreSQL".into(),
                cause: format!("the URL does not parse ({})", cause(&e)),
            })?;
    let target = format!(
        "PostgreSQL {}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or(options.get_username()),
    );
    match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
        Ok(Ok(connection)) => {
            let connection: PgConnection = connection;
            let _ = connection.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(StorageError::Unreachable {
            target,
            cause: cause(&e),
        }),
        Err(_) => Err(StorageError::Unreachable {
            target,
            cause: format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        }),
    }
}

/// A connection error as an operator needs it: the OS's or the server's
/// own words, without sqlx's wrapping.
fn cause(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Io(io) => io.to_string(),
        sqlx::Error::Database(db) => db.message().to_owned(),
        other => other.to_string(),
    }
}

/// Reads an `i64` column.
fn int(row: &AnyRow, column: &str) -> Result<i64, StorageError> {
    Ok(row.try_get::<i64, _>(column)?)
}
