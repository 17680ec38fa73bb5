//! One isolated database per test: a temporary SQLite folder, or a fresh
//! PostgreSQL schema dropped when the test ends.

use margin_server::storage::Store;
use sqlx::Connection;
use tempfile::TempDir;

/// An isolated database, and a data folder of its own (`margin serve
/// --data`: the SQLite database, and the demo Planner's files on either
/// backend).
pub struct TestDb {
    dir: TempDir,
    /// For PostgreSQL: the base URL and the schema this test owns.
    schema: Option<(String, String)>,
}

impl TestDb {
    pub fn sqlite() -> Self {
        TestDb {
            dir: data_folder(),
            schema: None,
        }
    }

    /// `None` when `TEST_DATABASE_URL` is unset.
    pub async fn postgres() -> Option<Self> {
        let base = std::env::var("TEST_DATABASE_URL").ok()?;
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&base).await.unwrap();
        sqlx::query(&format!("CREATE SCHEMA {schema}"))
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        Some(TestDb {
            dir: data_folder(),
            schema: Some((base, schema)),
        })
    }

    /// [`TestDb::postgres`], failing the test when `TEST_DATABASE_URL` is
    /// unset: a PostgreSQL test without PostgreSQL is skipped by the runner
    /// (`cargo nextest run --profile sqlite-only`), never passed.
    pub async fn postgres_or_fail() -> Self {
        match Self::postgres().await {
            Some(db) => db,
            None => panic!(
                "TEST_DATABASE_URL is not set, and this test needs PostgreSQL; \
                 without one, run `cargo nextest run --profile sqlite-only`, which skips it"
            ),
        }
    }

    /// Whether this is a PostgreSQL database.
    pub fn is_postgres(&self) -> bool {
        self.schema.is_some()
    }

    /// The data folder `margin serve --data` is given.
    pub fn data_dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The URL `Store::open` takes.
    pub fn url(&self) -> String {
        match &self.schema {
            None => Store::sqlite_url_in(self.dir.path()).unwrap(),
            Some((base, schema)) => {
                let sep = if base.contains('?') { '&' } else { '?' };
                format!("{base}{sep}options=-c%20search_path%3D{schema}")
            }
        }
    }

    /// The `margin` CLI arguments that select this database.
    pub fn cli_args(&self) -> Vec<String> {
        let mut args = vec!["--data".into(), self.dir.path().display().to_string()];
        if self.schema.is_some() {
            args.extend(["--database-url".into(), self.url()]);
        }
        args
    }

    pub async fn open(&self) -> Store {
        Store::open(&self.url()).await.unwrap()
    }

    /// Makes every write to a session's journal fail, as a full or failing
    /// disk would, until [`TestDb::accept_journal_writes`]: a real fault
    /// in the real database (a trigger), not a stand-in for it.
    pub async fn refuse_journal_writes(&self) {
        let statements: &[&str] = if self.is_postgres() {
            &[
                "CREATE FUNCTION refuse_journal() RETURNS trigger AS $$ \
                 BEGIN RAISE EXCEPTION 'the disk refused'; END $$ LANGUAGE plpgsql",
                "CREATE TRIGGER refuse_journal BEFORE INSERT ON session_journal \
                 FOR EACH ROW EXECUTE FUNCTION refuse_journal()",
            ]
        } else {
            &[
                "CREATE TRIGGER refuse_journal BEFORE INSERT ON session_journal \
               BEGIN SELECT RAISE(ABORT, 'the disk refused'); END",
            ]
        };
        self.execute(statements).await;
    }

    /// Undoes [`TestDb::refuse_journal_writes`].
    pub async fn accept_journal_writes(&self) {
        let statements: &[&str] = if self.is_postgres() {
            &[
                "DROP TRIGGER refuse_journal ON session_journal",
                "DROP FUNCTION refuse_journal",
            ]
        } else {
            &["DROP TRIGGER refuse_journal"]
        };
        self.execute(statements).await;
    }

    /// Makes the next append to a document's log wait, inside its
    /// transaction, until the returned gate opens (PostgreSQL only): a
    /// trigger waits on an advisory lock the gate holds. The commit can then
    /// be caught half done, as a node paused mid-write leaves it.
    pub async fn hold_appends(&self) -> AppendGate {
        use sqlx::Connection;
        sqlx::any::install_default_drivers();
        let mut holder = sqlx::AnyConnection::connect(&self.url()).await.unwrap();
        sqlx::query("SELECT 1 FROM (SELECT pg_advisory_lock(4242)) AS held")
            .execute(&mut holder)
            .await
            .unwrap();
        self.execute(&[
            "CREATE FUNCTION hold_appends() RETURNS trigger AS $$ \
             BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NEW; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER hold_appends BEFORE INSERT ON document_updates \
             FOR EACH ROW EXECUTE FUNCTION hold_appends()",
        ])
        .await;
        AppendGate { holder }
    }

    /// Holds document `id`'s row locked in an open transaction of its own
    /// (PostgreSQL only), as a writer stuck mid-commit would, until the
    /// returned guard is released.
    pub async fn lock_document_row(&self, id: &str) -> RowLock {
        use sqlx::Connection;
        sqlx::any::install_default_drivers();
        let mut holder = sqlx::AnyConnection::connect(&self.url()).await.unwrap();
        sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
        sqlx::query("SELECT id FROM documents WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_one(&mut holder)
            .await
            .unwrap();
        RowLock { holder }
    }

    /// How many of the database's sessions are in `state` (as
    /// `pg_stat_activity` says: `active`, `idle in transaction`, …) with a
    /// last statement starting with `query`, waiting on a lock or not.
    pub async fn sessions_in(&self, state: &str, query: &str, waiting: bool) -> i64 {
        use sqlx::Row;
        let raw = sqlx::AnyPool::connect(&self.url()).await.unwrap();
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE datname = current_database() \
             AND state = $1 AND query LIKE $2 AND (wait_event_type = 'Lock') = $3",
        )
        .bind(state)
        .bind(format!("{query}%"))
        .bind(waiting)
        .fetch_one(&raw)
        .await
        .unwrap();
        raw.close().await;
        row.try_get("n").unwrap()
    }

    async fn execute(&self, statements: &[&str]) {
        let raw = sqlx::AnyPool::connect(&self.url()).await.unwrap();
        for statement in statements {
            sqlx::query(statement).execute(&raw).await.unwrap();
        }
        raw.close().await;
    }
}

/// Holds the appends [`TestDb::hold_appends`] made wait.
pub struct AppendGate {
    holder: sqlx::AnyConnection,
}

impl AppendGate {
    /// Lets the waiting append go on.
    pub async fn open(mut self) {
        sqlx::query("SELECT 1 FROM (SELECT pg_advisory_unlock(4242)) AS released")
            .execute(&mut self.holder)
            .await
            .unwrap();
    }
}

/// A row [`TestDb::lock_document_row`] holds.
pub struct RowLock {
    holder: sqlx::AnyConnection,
}

impl RowLock {
    /// Ends the transaction, letting the row go.
    pub async fn release(mut self) {
        sqlx::query("ROLLBACK")
            .execute(&mut self.holder)
            .await
            .unwrap();
    }
}

fn data_folder() -> TempDir {
    tempfile::Builder::new()
        .prefix("margin-test-")
        .tempdir()
        .unwrap()
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((base, schema)) = self.schema.take() else {
            return;
        };
        // Drop runs inside the test's runtime; clean up on a thread of its own.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&base).await {
                    let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}
