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

    async fn execute(&self, statements: &[&str]) {
        let raw = sqlx::AnyPool::connect(&self.url()).await.unwrap();
        for statement in statements {
            sqlx::query(statement).execute(&raw).await.unwrap();
        }
        raw.close().await;
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
