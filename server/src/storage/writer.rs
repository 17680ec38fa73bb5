//! The connection every write goes through: on SQLite one connection the
//! store owns and lends to one writer at a time, on PostgreSQL any
//! connection of the pool.
//!
//! SQLite takes one writer at a time, so its writers queue here, in
//! order, and the next runs the moment the last lets go. A pool of one
//! connection did the same, but sqlx pings a pooled connection each time it
//! is given back (and, by default, lent): a round trip to the connection's
//! worker thread on every transaction, each costing more than the SQL of
//! an editor's append, to check a connection in this very process.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::Any;
use sqlx::pool::PoolConnection;
use sqlx::AnyConnection;
use sqlx::{AnyPool, Connection, Transaction};
use tokio::sync::{Mutex, OwnedMappedMutexGuard, OwnedMutexGuard};

use super::StorageError;
use crate::metrics::COUNTERS;

/// How long a writer waits for the owned connection before it gives up
/// with an error, as it would waiting on sqlx's pool (its default).
const LEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Where writes get their connection; cheap to clone.
#[derive(Clone, Debug)]
pub(super) enum Writer {
    /// SQLite: the one write connection, `None` once the store is closed.
    Owned(Arc<Mutex<Option<AnyConnection>>>),
    /// PostgreSQL: the shared pool.
    Pooled(AnyPool),
}

/// A connection lent to one writer, given back when dropped.
pub(super) enum Lent {
    Owned(OwnedMappedMutexGuard<Option<AnyConnection>, AnyConnection>),
    Pooled(PoolConnection<Any>),
}

impl Writer {
    /// Owns `connection` for every write.
    pub fn owning(connection: AnyConnection) -> Self {
        Writer::Owned(Arc::new(Mutex::new(Some(connection))))
    }

    /// The connection, once the writers before have let it go.
    pub async fn lend(&self) -> Result<Lent, StorageError> {
        self.lend_within(LEND_TIMEOUT).await
    }

    /// [`Writer::lend`], waiting at most `timeout` for the owned
    /// connection.
    async fn lend_within(&self, timeout: Duration) -> Result<Lent, StorageError> {
        match self {
            Writer::Owned(connection) => {
                let held = tokio::time::timeout(timeout, connection.clone().lock_owned())
                    .await
                    .map_err(|_| StorageError::Database(sqlx::Error::PoolTimedOut))?;
                Lent::open(held)
            }
            Writer::Pooled(pool) => Ok(Lent::Pooled(pool.acquire().await?)),
        }
    }

    /// [`Writer::lend`], for a thread outside the runtime: blocks that
    /// thread until the writers before have let go, with no deadline (its
    /// holders are this process's own writes, each bounded).
    pub fn lend_blocking(&self) -> Result<Lent, StorageError> {
        match self {
            Writer::Owned(connection) => Lent::open(connection.clone().blocking_lock_owned()),
            Writer::Pooled(_) => Err(StorageError::Durability(
                "a blocking lend is for SQLite's own write connection".into(),
            )),
        }
    }

    /// Closes the owned connection once the writer holding it is done;
    /// later writes fail as on a closed pool. A pool is closed with the
    /// store's.
    pub async fn close(&self) {
        if let Writer::Owned(connection) = self {
            if let Some(connection) = connection.lock().await.take() {
                let _ = connection.close().await;
            }
        }
    }
}

impl Lent {
    /// The owned connection `held` lends, or an error as on a closed pool
    /// once the store has closed it.
    fn open(held: OwnedMutexGuard<Option<AnyConnection>>) -> Result<Lent, StorageError> {
        OwnedMutexGuard::try_map(held, Option::as_mut)
            .map(Lent::Owned)
            .map_err(|_| StorageError::Database(sqlx::Error::PoolClosed))
    }

    /// Begins a transaction on the lent connection.
    pub async fn begin(&mut self) -> Result<Transaction<'_, Any>, sqlx::Error> {
        COUNTERS.write_transaction();
        Connection::begin(&mut **self).await
    }
}

impl Deref for Lent {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        match self {
            Lent::Owned(connection) => connection,
            Lent::Pooled(connection) => connection,
        }
    }
}

impl DerefMut for Lent {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        match self {
            Lent::Owned(connection) => connection,
            Lent::Pooled(connection) => connection,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn owning() -> Writer {
        sqlx::any::install_default_drivers();
        let connection = AnyConnection::connect("sqlite::memory:")
            .await
            .expect("an in-memory database opens");
        Writer::owning(connection)
    }

    #[tokio::test]
    async fn a_writer_waiting_longer_than_the_lend_timeout_gets_an_error() {
        let writer = owning().await;
        let held = writer.lend().await.expect("the first writer gets it");
        let waiting = writer.lend_within(Duration::from_millis(20)).await;
        assert!(matches!(
            waiting,
            Err(StorageError::Database(sqlx::Error::PoolTimedOut))
        ));
        drop(held);
        assert!(writer.lend().await.is_ok(), "free again once let go");
    }

    #[tokio::test]
    async fn a_closed_writer_refuses_to_lend() {
        let writer = owning().await;
        writer.close().await;
        assert!(matches!(
            writer.lend().await,
            Err(StorageError::Database(sqlx::Error::PoolClosed))
        ));
    }
}
