//! A write as data: its SQL statements, each with its values and what it
//! must find, built once and run by either writer — `sqlx` inside a
//! transaction (PostgreSQL, and SQLite's rarer writes), or SQLite's commit
//! thread (`committer`) inside a savepoint of its group.
//!
//! A fenced statement (a revision, an owner's epoch, a journal record, a
//! card's version, a lease) says what it refuses with when it finds
//! nothing; the run stops there, and the caller rolls back and reads why.
//! Placeholders are written as each backend takes them: `$N` for one
//! value, `?` for the runs of a multi-row `INSERT` on SQLite. Both
//! runners bind `$N` and `?N` by their number, `?` by its place.

use std::borrow::Cow;

use sqlx::any::Any;
use sqlx::Transaction;

use super::sessions::{journal_moved, JOURNAL_AT};
use super::{conflict_on_unique, StorageError, Store};

/// One value bound to a placeholder.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Value {
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
    Null,
}

impl From<i64> for Value {
    fn from(int: i64) -> Self {
        Value::Int(int)
    }
}

impl From<&str> for Value {
    fn from(text: &str) -> Self {
        Value::Text(text.to_owned())
    }
}

impl From<String> for Value {
    fn from(text: String) -> Self {
        Value::Text(text)
    }
}

impl From<Option<&str>> for Value {
    fn from(text: Option<&str>) -> Self {
        text.map_or(Value::Null, Value::from)
    }
}

impl From<Option<String>> for Value {
    fn from(text: Option<String>) -> Self {
        text.map_or(Value::Null, Value::Text)
    }
}

impl Value {
    /// Its bytes, a write's share of a group's budget.
    fn weight(&self) -> usize {
        match self {
            Value::Int(_) | Value::Null => 8,
            Value::Text(text) => text.len(),
            Value::Blob(blob) => blob.len(),
        }
    }
}

/// What stopped a fenced write: the fence that moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Document `id` is no longer at revision `expected` under owner `epoch`.
    Document {
        id: String,
        epoch: i64,
        expected: i64,
    },
    /// Session `session`'s journal is no longer at record `base`.
    Journal { session: String, base: u64 },
    /// A card changed since the version its change started from.
    Card(String),
    /// This node no longer holds `document`'s lease (SPEC C1).
    Lease(String),
}

/// What a statement must find.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Check {
    /// Nothing: whatever it changes.
    Nothing,
    /// One row changed, or the write is refused.
    One(Refusal),
    /// A row read, or the write is refused.
    Row(Refusal),
    /// A unique key taken is a [`StorageError::Conflict`] in these words.
    Unique(&'static str),
}

/// One statement of a write.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Statement {
    pub sql: Cow<'static, str>,
    pub values: Vec<Value>,
    pub check: Check,
}

impl Statement {
    /// `sql` with `values`, finding whatever it finds.
    pub fn new(sql: impl Into<Cow<'static, str>>, values: Vec<Value>) -> Self {
        Statement {
            sql: sql.into(),
            values,
            check: Check::Nothing,
        }
    }

    /// This statement, which must find what `check` says.
    pub fn checked(mut self, check: Check) -> Self {
        self.check = check;
        self
    }
}

/// The bytes `statements` bind, their write's share of a group's budget.
pub(super) fn weight(statements: &[Statement]) -> usize {
    statements
        .iter()
        .flat_map(|statement| &statement.values)
        .map(Value::weight)
        .sum()
}

/// How a write ended, short of an error: written whole, or refused by a
/// fence with what was written before it still to roll back.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Ran {
    Whole,
    Refused(Refusal),
}

impl Store {
    /// Commits `write`, all of it or none: on SQLite by the commit thread
    /// with whatever else waits, on PostgreSQL in a transaction of its
    /// own. A fence that found nothing is the error that says where it
    /// stands, read once the write is rolled back.
    pub(super) async fn commit_write(&self, write: Vec<Statement>) -> Result<(), StorageError> {
        let ran = match &self.committer {
            Some(committer) => committer.commit(write).await?,
            None => {
                let mut writer = self.writes().await?;
                let mut tx = writer.begin().await?;
                let ran = run_in(&mut tx, &write).await?;
                if ran == Ran::Whole {
                    tx.commit().await?;
                }
                ran
            }
        };
        match ran {
            Ran::Whole => Ok(()),
            Ran::Refused(refusal) => Err(self.refused(refusal).await),
        }
    }

    /// Why a write was refused by `refusal`'s fence.
    async fn refused(&self, refusal: Refusal) -> StorageError {
        match refusal {
            Refusal::Document {
                id,
                epoch,
                expected,
            } => self.fence_failure(&id, super::Epoch(epoch), expected).await,
            Refusal::Journal { session, base } => {
                let found = sqlx::query(JOURNAL_AT)
                    .bind(&session)
                    .fetch_optional(&self.pool)
                    .await;
                match found {
                    Ok(found) => journal_moved(base, found.as_ref()),
                    Err(error) => error.into(),
                }
            }
            Refusal::Card(card) => StorageError::Conflict(format!(
                "card {card:?} changed meanwhile; nothing was written"
            )),
            Refusal::Lease(document) => StorageError::LeaseLost { document },
        }
    }
}

/// Runs `statements` in order inside `tx`, stopping at the first whose
/// check fails.
pub(super) async fn run_in(
    tx: &mut Transaction<'_, Any>,
    statements: &[Statement],
) -> Result<Ran, StorageError> {
    for statement in statements {
        let mut query = sqlx::query(&statement.sql);
        for value in &statement.values {
            query = match value {
                Value::Int(int) => query.bind(*int),
                Value::Text(text) => query.bind(text.as_str()),
                Value::Blob(blob) => query.bind(blob.as_slice()),
                Value::Null => query.bind(None::<&str>),
            };
        }
        let found = match &statement.check {
            Check::Row(_) => query.fetch_optional(&mut **tx).await?.is_some(),
            Check::Unique(what) => {
                query
                    .execute(&mut **tx)
                    .await
                    .map_err(|e| conflict_on_unique(e, || (*what).to_owned()))?;
                true
            }
            Check::Nothing => {
                query.execute(&mut **tx).await?;
                true
            }
            Check::One(_) => query.execute(&mut **tx).await?.rows_affected() == 1,
        };
        if let (false, Check::One(refusal) | Check::Row(refusal)) = (found, &statement.check) {
            return Ok(Ran::Refused(refusal.clone()));
        }
    }
    Ok(Ran::Whole)
}

/// Runs `statements` in order on `connection` (SQLite's commit thread),
/// each prepared once and kept, stopping at the first whose check fails.
pub(super) fn run_on(
    connection: &rusqlite::Connection,
    statements: &[Statement],
) -> Result<Ran, StorageError> {
    for statement in statements {
        let mut prepared = connection.prepare_cached(&statement.sql)?;
        for place in 1..=prepared.parameter_count() {
            let value = numbered(prepared.parameter_name(place))
                .unwrap_or(place)
                .checked_sub(1)
                .and_then(|index| statement.values.get(index))
                .ok_or_else(|| {
                    StorageError::Corrupt(format!(
                        "no value for placeholder {place} of {:?}",
                        statement.sql
                    ))
                })?;
            prepared.raw_bind_parameter(place, value)?;
        }
        let found = match &statement.check {
            Check::Row(_) => prepared.raw_query().next()?.is_some(),
            Check::Unique(what) => match prepared.raw_execute() {
                Ok(_) => true,
                Err(error) if unique_violation(&error) => {
                    return Err(StorageError::Conflict((*what).to_owned()))
                }
                Err(error) => return Err(error.into()),
            },
            Check::Nothing => {
                prepared.raw_execute()?;
                true
            }
            Check::One(_) => prepared.raw_execute()? == 1,
        };
        if let (false, Check::One(refusal) | Check::Row(refusal)) = (found, &statement.check) {
            return Ok(Ran::Refused(refusal.clone()));
        }
    }
    Ok(Ran::Whole)
}

/// The number a placeholder's name gives it (`$3`, `?3`), as sqlx binds.
fn numbered(name: Option<&str>) -> Option<usize> {
    name?.get(1..)?.parse().ok()
}

fn unique_violation(error: &rusqlite::Error) -> bool {
    const UNIQUE: i32 = 2067;
    const PRIMARY_KEY: i32 = 1555;
    matches!(error, rusqlite::Error::SqliteFailure(failure, _)
        if matches!(failure.extended_code, UNIQUE | PRIMARY_KEY))
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Int(int) => ValueRef::Integer(*int),
            Value::Text(text) => ValueRef::Text(text.as_bytes()),
            Value::Blob(blob) => ValueRef::Blob(blob),
            Value::Null => ValueRef::Null,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection() -> rusqlite::Connection {
        let connection = rusqlite::Connection::open_in_memory().expect("an in-memory database");
        connection
            .execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER, b BLOB);")
            .expect("the table");
        connection
    }

    #[test]
    fn numbered_placeholders_take_their_numbered_value_wherever_they_stand() {
        let connection = connection();
        let insert = Statement::new(
            "INSERT INTO t (n, k, b) VALUES ($3, $1, $2)",
            vec!["a".into(), Value::Blob(vec![7]), 5.into()],
        );
        let anonymous = Statement::new(
            "INSERT INTO t (k, n, b) VALUES (?, ?, ?), (?, ?, ?)",
            vec![
                "b".into(),
                6.into(),
                Value::Null,
                "c".into(),
                7.into(),
                Value::Null,
            ],
        );
        assert_eq!(
            run_on(&connection, &[insert, anonymous]).ok(),
            Some(Ran::Whole)
        );
        let rows: Vec<(String, i64, Option<Vec<u8>>)> = connection
            .prepare("SELECT k, n, b FROM t ORDER BY k")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            })
            .expect("the rows");
        assert_eq!(
            rows,
            vec![
                ("a".into(), 5, Some(vec![7])),
                ("b".into(), 6, None),
                ("c".into(), 7, None)
            ]
        );
    }

    #[test]
    fn a_fence_that_finds_nothing_stops_the_write_there() {
        let connection = connection();
        let refusal = Refusal::Card("c1".into());
        let write = [
            Statement::new("INSERT INTO t (k, n) VALUES ($1, 1)", vec!["a".into()]),
            Statement::new("UPDATE t SET n = 2 WHERE k = $1", vec!["gone".into()])
                .checked(Check::One(refusal.clone())),
            Statement::new("INSERT INTO t (k, n) VALUES ($1, 1)", vec!["after".into()]),
        ];
        assert_eq!(
            run_on(&connection, &write).ok(),
            Some(Ran::Refused(refusal))
        );
        let after: i64 = connection
            .query_row("SELECT COUNT(*) FROM t WHERE k = 'after'", [], |r| r.get(0))
            .expect("a count");
        assert_eq!(after, 0, "a statement after the refusal ran");
    }

    #[test]
    fn a_taken_key_is_a_conflict_in_the_statements_words_and_too_few_values_an_error() {
        let connection = connection();
        let insert = || {
            Statement::new("INSERT INTO t (k) VALUES ($1)", vec!["a".into()])
                .checked(Check::Unique("key a is taken"))
        };
        assert!(run_on(&connection, &[insert()]).is_ok());
        let taken = run_on(&connection, &[insert()]);
        assert!(
            matches!(&taken, Err(StorageError::Conflict(what)) if what == "key a is taken"),
            "{taken:?}"
        );
        let short = Statement::new("INSERT INTO t (k, n) VALUES ($1, $2)", vec!["z".into()]);
        let short = run_on(&connection, &[short]);
        assert!(matches!(short, Err(StorageError::Corrupt(_))), "{short:?}");
    }
}
