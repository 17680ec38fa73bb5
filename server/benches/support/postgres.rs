//! A bench's own PostgreSQL schema: made in `DATABASE_URL` (default the
//! local `test` database) at the start, dropped at the end, so a bench
//! never meets another's rows.

use sqlx::Connection;

use super::knobs::env_or;

/// A schema made for one bench run.
pub(crate) struct Scratch {
    /// A connection outside the schema, for the bench's own queries.
    pub(crate) admin: sqlx::PgConnection,
    /// The schema's name.
    pub(crate) schema: String,
    /// The URL `Store::open` and `margin serve --database-url` take.
    pub(crate) url: String,
}

impl Scratch {
    /// Makes schema `bench_NAME_PID`.
    pub(crate) async fn new(name: &str) -> Scratch {
        let base = env_or(
            "DATABASE_URL",
            "postgres://postgres@127.0.0.1:5432/test".to_owned(),
        );
        let schema = format!("bench_{name}_{}", std::process::id());
        let mut admin = sqlx::PgConnection::connect(&base)
            .await
            .expect("the bench's PostgreSQL (DATABASE_URL)");
        sqlx::query(&format!("CREATE SCHEMA {schema}"))
            .execute(&mut admin)
            .await
            .expect("a schema for the bench");
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
        Scratch { admin, schema, url }
    }

    /// Drops the schema and everything in it.
    pub(crate) async fn drop_schema(mut self) {
        let _ = sqlx::query(&format!("DROP SCHEMA {} CASCADE", self.schema))
            .execute(&mut self.admin)
            .await;
    }
}
