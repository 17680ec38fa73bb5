//! A query of several statements sent to SQLite's worker thread in one
//! round trip, and the fences its rows report.
//!
//! Every SQL statement sent through `sqlx` is a round trip to the thread
//! that runs SQLite: a wake of that thread and of an async worker. The
//! writes that must be quick (sessions' writes, a document's changes with
//! what rides along) are built as one query of many statements instead.
//! Parameters are anonymous (`?`), bound in the order they appear: with
//! numbered ones the driver looks each up by name in a list as long as the
//! query. Each fenced update returns `fence, id, at` — what kind of row it
//! moved, which, and where it now stands — so the caller reads which
//! fences held from the rows alone.

use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, Row};

use super::{int, StorageError};

/// Most parameters one query binds, well under SQLite's 32,766; writes
/// that need more go statement by statement.
pub const TRIP_PARAMETERS: usize = 16_000;

/// A value bound to one `?`.
#[derive(Clone, Copy)]
pub(super) enum Bound<'a> {
    Text(&'a str),
    MaybeText(Option<&'a str>),
    Int(i64),
    Bytes(&'a [u8]),
}

/// A query and the values of its `?`s, in order.
#[derive(Default)]
pub(super) struct Trip<'a> {
    pub sql: String,
    pub bound: Vec<Bound<'a>>,
}

impl<'a> Trip<'a> {
    /// Appends `sql`, whose `?`s take `values` in order.
    pub fn push(&mut self, sql: &str, values: impl IntoIterator<Item = Bound<'a>>) {
        self.sql.push_str(sql);
        self.sql.push('\n');
        self.bound.extend(values);
    }

    /// The query with every value bound.
    pub fn query(&self) -> Query<'_, Any, AnyArguments<'_>> {
        let mut query = sqlx::query(&self.sql);
        for value in &self.bound {
            query = value.bind(query);
        }
        query
    }
}

impl<'a> Bound<'a> {
    /// Binds the value to `query`'s next parameter.
    pub fn bind<'q>(
        self,
        query: Query<'q, Any, AnyArguments<'q>>,
    ) -> Query<'q, Any, AnyArguments<'q>>
    where
        'a: 'q,
    {
        match self {
            Bound::Text(text) => query.bind(text),
            Bound::MaybeText(text) => query.bind(text),
            Bound::Int(int) => query.bind(int),
            Bound::Bytes(bytes) => query.bind(bytes),
        }
    }
}

/// `sql` with its numbered parameters (`$1`, `$2`, …), which must appear
/// once each and in order, made anonymous (`?`).
pub(super) fn anonymous(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            while chars.next_if(char::is_ascii_digit).is_some() {}
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

/// A row a fenced update returned: which kind of row it moved
/// (`document`, `session`, `card`), its id, and its revision, journal
/// record or version after the update.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Moved {
    pub fence: String,
    pub id: String,
    pub at: i64,
}

/// The rows of a trip's fenced updates, in order.
pub(super) fn moved(rows: &[AnyRow]) -> Result<Vec<Moved>, StorageError> {
    rows.iter()
        .map(|row| {
            Ok(Moved {
                fence: row.try_get("fence")?,
                id: row.try_get("id")?,
                at: int(row, "at")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_parameters_become_anonymous_in_place() {
        assert_eq!(
            anonymous("UPDATE t SET a = $1, b = $12 WHERE c = $3 AND d = '$'"),
            "UPDATE t SET a = ?, b = ? WHERE c = ? AND d = '$'"
        );
    }
}
