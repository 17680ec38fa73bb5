//! Cluster mode's shared state (SPEC C1, C3, C4): the nodes serving one
//! PostgreSQL database, and which node owns each loaded document.
//!
//! A node is live while its row's `expires_at` is ahead of the database's
//! clock (never a node's own: their clocks may disagree); it renews that
//! itself. A document's lease names its owner node and the owner epoch it
//! took, and holds while that node is live, so a node's upkeep is one
//! statement however many documents it owns. Taking a document bumps
//! `documents.epoch` in the same transaction, which fences every write the
//! previous owner might still attempt (W3).

use sqlx::Row;

use super::sessions::OPEN;
use super::updates::next_epoch;
use super::{int, Backend, Epoch, StorageError, Store};

/// The database's clock in milliseconds since the Unix epoch; every node
/// reads the same one.
const DB_NOW: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

/// How long a node's row is kept after it stopped renewing, for an
/// operator reading `cluster_nodes`; older ones are swept by the next node
/// that joins.
const DEAD_NODES_KEPT_MS: i64 = 3_600_000;

/// A node of the cluster, as the others see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Its id (new for each start, and for each time it lapsed).
    pub id: String,
    /// Where the other nodes reach it (`http://HOST:PORT`).
    pub advertise: String,
}

/// The node holding a document's lease (its owner node, as the document
/// task that owns it runs there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseHolder {
    /// The node.
    pub node: Node,
    /// Whether that node still renews its lease. A lapsed owner's
    /// documents are free to take.
    pub live: bool,
    /// The owner epoch it took the document under.
    pub epoch: Epoch,
}

/// What [`Store::take_document`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Take {
    /// The caller owns the document under this epoch.
    Taken(Epoch),
    /// A live node owns it.
    Held(Node),
    /// The caller's own node has lapsed: it may take nothing until it
    /// joins again.
    Lapsed,
}

impl Store {
    /// Cluster mode runs on PostgreSQL only.
    fn cluster_only(&self) -> Result<(), StorageError> {
        match self.backend {
            Backend::Postgres => Ok(()),
            Backend::Sqlite => Err(StorageError::Claim(
                "cluster mode needs PostgreSQL (--database-url postgres://…); SQLite serves one server"
                    .into(),
            )),
        }
    }

    /// Adds a node reachable at `advertise`, live for `ttl_ms`; returns it.
    /// Rows of nodes dead for an hour go first.
    pub async fn register_node(&self, advertise: &str, ttl_ms: i64) -> Result<Node, StorageError> {
        self.cluster_only()?;
        let id = format!("node-{}", uuid::Uuid::new_v4().simple());
        let mut writer = self.writes().await?;
        let mut tx = writer.begin().await?;
        sqlx::query(&format!(
            "DELETE FROM cluster_nodes WHERE expires_at < {DB_NOW} - $1"
        ))
        .bind(DEAD_NODES_KEPT_MS)
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "INSERT INTO cluster_nodes (id, advertise, started_at, expires_at) \
             VALUES ($1, $2, {DB_NOW}, {DB_NOW} + $3)"
        ))
        .bind(&id)
        .bind(advertise)
        .bind(ttl_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Node {
            id,
            advertise: advertise.to_owned(),
        })
    }

    /// Keeps node `id` live for `ttl_ms` more. `false` when it had already
    /// lapsed (or was removed): then it is not renewed, because another
    /// node may have taken its documents; it must drop them and join again.
    pub async fn renew_node(&self, id: &str, ttl_ms: i64) -> Result<bool, StorageError> {
        let renewed = sqlx::query(&format!(
            "UPDATE cluster_nodes SET expires_at = {DB_NOW} + $2 \
             WHERE id = $1 AND expires_at >= {DB_NOW}"
        ))
        .bind(id)
        .bind(ttl_ms)
        .execute(&mut *self.writes().await?)
        .await?;
        Ok(renewed.rows_affected() == 1)
    }

    /// Marks node `id` as draining (or not): it takes no new documents, and
    /// `/readyz` says so.
    pub async fn set_draining(&self, id: &str, draining: bool) -> Result<(), StorageError> {
        sqlx::query("UPDATE cluster_nodes SET draining = $2 WHERE id = $1")
            .bind(id)
            .bind(draining)
            .execute(&mut *self.writes().await?)
            .await?;
        Ok(())
    }

    /// Node `id` leaves: its row and its leases go, so its documents are
    /// free at once (a graceful stop, after they unloaded).
    pub async fn remove_node(&self, id: &str) -> Result<(), StorageError> {
        let mut writer = self.writes().await?;
        let mut tx = writer.begin().await?;
        sqlx::query("DELETE FROM document_leases WHERE node = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM cluster_nodes WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The nodes live now, oldest first.
    pub async fn live_nodes(&self) -> Result<Vec<Node>, StorageError> {
        self.cluster_only()?;
        let rows = sqlx::query(&format!(
            "SELECT id, advertise FROM cluster_nodes WHERE expires_at >= {DB_NOW} \
             ORDER BY started_at, id"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Node {
                    id: row.try_get("id")?,
                    advertise: row.try_get("advertise")?,
                })
            })
            .collect()
    }

    /// Which live node holds each of `documents`, as (document, node); a
    /// document no live node holds is left out.
    pub async fn live_holders(
        &self,
        documents: &[String],
    ) -> Result<Vec<(String, String)>, StorageError> {
        self.cluster_only()?;
        // A bounded statement per chunk: the driver binds no arrays.
        const CHUNK: usize = 256;
        let mut held = Vec::new();
        for chunk in documents.chunks(CHUNK) {
            let places = (1..=chunk.len())
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!(
                "SELECT l.document_id, n.id FROM document_leases l \
                 JOIN cluster_nodes n ON n.id = l.node \
                 WHERE l.document_id IN ({places}) AND n.expires_at >= {DB_NOW}"
            );
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(id);
            }
            for row in query.fetch_all(&self.pool).await? {
                held.push((row.try_get("document_id")?, row.try_get("id")?));
            }
        }
        Ok(held)
    }

    /// The secret nodes show each other on their internal channel: the
    /// one stored, or `fresh` if this is the first node.
    pub async fn cluster_secret(&self, fresh: &str) -> Result<String, StorageError> {
        self.cluster_only()?;
        sqlx::query(
            "INSERT INTO cluster_secret (id, secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
        )
        .bind(fresh)
        .execute(&mut *self.writes().await?)
        .await?;
        let row = sqlx::query("SELECT secret FROM cluster_secret WHERE id = 1")
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("secret")?)
    }

    /// The node holding document `id`'s lease, if any does.
    pub async fn lease_holder(&self, id: &str) -> Result<Option<LeaseHolder>, StorageError> {
        let row = sqlx::query(&format!(
            "SELECT n.id, n.advertise, n.expires_at >= {DB_NOW} AS live, l.epoch \
             FROM document_leases l JOIN cluster_nodes n ON n.id = l.node \
             WHERE l.document_id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(LeaseHolder {
                node: Node {
                    id: row.try_get("id")?,
                    advertise: row.try_get("advertise")?,
                },
                live: row.try_get("live")?,
                epoch: Epoch(int(&row, "epoch")?),
            })
        })
        .transpose()
    }

    /// Makes node `node` the owner of document `id` under the next epoch,
    /// unless another live node owns it. The epoch moves in the same
    /// transaction as the lease, so the previous owner's writes are refused
    /// from the moment this commits ([`StorageError::OwnerMoved`]).
    pub async fn take_document(&self, id: &str, node: &str) -> Result<Take, StorageError> {
        let mut writer = self.writes().await?;
        let mut tx = writer.begin().await?;
        // Takes of one document queue here, and wait for the compactions
        // under the epoch they replace (see `claim_document`).
        self.lock_owner(&mut tx, id, "pg_advisory_xact_lock")
            .await?;
        let me = sqlx::query(&format!(
            "SELECT expires_at >= {DB_NOW} AS live FROM cluster_nodes WHERE id = $1"
        ))
        .bind(node)
        .fetch_optional(&mut *tx)
        .await?;
        let live = match me {
            Some(row) => row.try_get::<bool, _>("live")?,
            None => false,
        };
        if !live {
            return Ok(Take::Lapsed);
        }
        let holder = sqlx::query(&format!(
            "SELECT n.id, n.advertise FROM document_leases l JOIN cluster_nodes n ON n.id = l.node \
             WHERE l.document_id = $1 AND n.id <> $2 AND n.expires_at >= {DB_NOW}"
        ))
        .bind(id)
        .bind(node)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = holder {
            return Ok(Take::Held(Node {
                id: row.try_get("id")?,
                advertise: row.try_get("advertise")?,
            }));
        }
        let epoch = next_epoch(&mut tx, id).await?;
        sqlx::query(
            "INSERT INTO document_leases (document_id, node, epoch) VALUES ($1, $2, $3) \
             ON CONFLICT (document_id) DO UPDATE SET node = excluded.node, epoch = excluded.epoch",
        )
        .bind(id)
        .bind(node)
        .bind(epoch.0)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Take::Taken(epoch))
    }

    /// Node `node` lets document `id` go (it unloaded), if it still holds
    /// it under `epoch`.
    pub async fn release_document(
        &self,
        id: &str,
        node: &str,
        epoch: Epoch,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "DELETE FROM document_leases WHERE document_id = $1 AND node = $2 AND epoch = $3",
        )
        .bind(id)
        .bind(node)
        .bind(epoch.0)
        .execute(&mut *self.writes().await?)
        .await?;
        Ok(())
    }

    /// Up to `limit` open Planner sessions whose document no live node
    /// holds, oldest first, as (session, document): a node that owned them
    /// stopped, and one that takes the document takes them back (SPEC C3).
    pub async fn orphaned_sessions(
        &self,
        limit: i64,
    ) -> Result<Vec<(String, String)>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT s.id, s.document_id FROM planner_sessions s \
             WHERE s.{OPEN} AND NOT EXISTS ( \
               SELECT 1 FROM document_leases l JOIN cluster_nodes n ON n.id = l.node \
               WHERE l.document_id = s.document_id AND n.expires_at >= {DB_NOW}) \
             ORDER BY s.created_at, s.id LIMIT $1"
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("id")?, row.try_get("document_id")?)))
            .collect()
    }

    /// The channel this database's nodes tell each other things on: one
    /// per database and schema, as the servers' claim is.
    pub async fn cluster_channel(&self) -> Result<String, StorageError> {
        self.cluster_only()?;
        let scope: String = sqlx::query("SELECT current_database() || '.' || current_schema()")
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?;
        let hash = blake3::hash(format!("margin cluster {scope}").as_bytes());
        Ok(format!("margin_{}", &hash.to_hex()[..16]))
    }

    /// Tells every node listening on `channel` `payload` (PostgreSQL's
    /// NOTIFY: delivered once this commits, to those listening then).
    pub async fn notify(&self, channel: &str, payload: &str) -> Result<(), StorageError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(channel)
            .bind(payload)
            .execute(&mut *self.writes().await?)
            .await?;
        Ok(())
    }

    /// A connection listening on `channel`.
    pub async fn listen(&self, channel: &str) -> Result<sqlx::postgres::PgListener, StorageError> {
        self.cluster_only()?;
        let mut listener = sqlx::postgres::PgListener::connect(&self.url).await?;
        listener.listen(channel).await?;
        Ok(listener)
    }
}
