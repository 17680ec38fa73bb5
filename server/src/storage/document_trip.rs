//! A document's changes with what rides along — new cards, changed cards,
//! the session writes recording the tool calls that made them — on SQLite
//! in two round trips (SPEC W1, W3, O5).
//!
//! Sent statement by statement, a Planner's `open_decisions` result was a
//! transaction of eight or more round trips to SQLite's worker thread
//! (BEGIN, the document's fence, its changes, the card rows, the session's
//! row, journal and events, COMMIT), each a wake of that thread and of an
//! async worker. Now the first trip begins the transaction and makes every
//! write, each fenced update returning the row it moved (`trip`); the
//! second commits when every fence held, or rolls back. The choice between
//! them is made here, in Rust, from the rows: a stale writer's statements
//! are undone whole, never merged, and all of the transaction lands or
//! none of it, as `append_with` promises.

use margin_decisions::DecisionCard;

use super::cards::{changed_meanwhile, insert_sql, key_taken, CardRow, CHANGE_CARD};
use super::session_trip::{landed, push_write};
use super::trip::{anonymous, moved, Bound, Moved, Trip, TRIP_PARAMETERS};
use super::{now_ms, Alongside, Epoch, SessionWrite, StorageError, Store};
use crate::metrics::COUNTERS;

/// The fence that did not hold, the document's first.
#[derive(Debug)]
enum Unheld<'a> {
    /// The document's revision or owner moved.
    Document,
    /// A changed card's row is no longer at the version before.
    Card(&'a DecisionCard),
    /// A session's journal moved.
    Session(&'a SessionWrite),
}

impl Store {
    /// [`Store::append_with`] on SQLite, when what it writes fits one
    /// query of at most [`TRIP_PARAMETERS`] and no session write is fenced
    /// on a cluster lease; `None` when it does not, and nothing was done.
    pub(super) async fn append_in_two_trips(
        &self,
        id: &str,
        epoch: Epoch,
        expected: i64,
        updates: &[Vec<u8>],
        alongside: &Alongside<'_>,
    ) -> Option<Result<i64, StorageError>> {
        if alongside.sessions.iter().any(|write| write.lease.is_some()) {
            return None;
        }
        let next = expected + updates.len() as i64;
        let now = now_ms();
        let new_cards: Vec<CardRow> = alongside.cards.iter().map(CardRow::new).collect();
        let changed: Vec<CardRow> = alongside
            .changed
            .iter()
            .map(|stored| CardRow::new(&stored.card))
            .collect();
        let trip = statements(
            Document {
                id,
                epoch,
                expected,
                updates,
                now,
            },
            alongside,
            &new_cards,
            &changed,
        );
        if trip.bound.len() > TRIP_PARAMETERS {
            return None;
        }
        Some(self.run(&trip, id, epoch, expected, next, alongside).await)
    }

    /// Sends `trip`, then commits it when every fence held: the document's
    /// revision `next`, or why nothing of it was written.
    async fn run(
        &self,
        trip: &Trip<'_>,
        id: &str,
        epoch: Epoch,
        expected: i64,
        next: i64,
        alongside: &Alongside<'_>,
    ) -> Result<i64, StorageError> {
        let mut connection = self.writes().await?;
        // Its one transaction is begun by the query's own BEGIN.
        COUNTERS.write_transaction();
        let rows = match trip.query().fetch_all(&mut *connection).await {
            Ok(rows) => rows,
            Err(error) => {
                self.writer.roll_back(connection, &error).await;
                return Err(match self.fence_failure(id, epoch, expected).await {
                    // The fence held: the error is a statement's own.
                    StorageError::RevisionMoved { found, .. } if found == expected => {
                        key_taken(error)
                    }
                    moved => moved,
                });
            }
        };
        let unheld = match moved(&rows) {
            Ok(moved) => unheld(id, next, alongside, &moved),
            Err(error) => {
                self.writer.roll_back(connection, &error).await;
                return Err(error);
            }
        };
        let Some(unheld) = unheld else {
            if let Err(error) = sqlx::query("COMMIT").execute(&mut *connection).await {
                self.writer.roll_back(connection, &error).await;
                return Err(error.into());
            }
            return Ok(next);
        };
        self.writer
            .roll_back(connection, &format!("a fence moved: {unheld:?}"))
            .await;
        Err(match unheld {
            Unheld::Document => self.fence_failure(id, epoch, expected).await,
            Unheld::Card(card) => changed_meanwhile(card),
            Unheld::Session(write) => self.journal_fence_failure(write).await,
        })
    }
}

/// The document a trip appends to, and its changes.
struct Document<'a> {
    id: &'a str,
    epoch: Epoch,
    expected: i64,
    updates: &'a [Vec<u8>],
    /// When, for `edited_at` and the rows' `created_at`.
    now: i64,
}

/// The trip's query: `BEGIN IMMEDIATE`, the document's fenced update
/// (first, so the rows' order starts with it), its changes and client
/// bindings, the new cards, each changed card's fenced update, then each
/// session write's statements. No `COMMIT`: that is the second trip's.
fn statements<'a>(
    document: Document<'a>,
    alongside: &Alongside<'a>,
    new_cards: &'a [CardRow<'a>],
    changed: &'a [CardRow<'a>],
) -> Trip<'a> {
    use Bound::{Bytes, Int, MaybeText, Text};
    let Document {
        id,
        epoch,
        expected,
        updates,
        now,
    } = document;
    let mut trip = Trip::default();
    trip.push("BEGIN IMMEDIATE;", []);
    let next = expected + updates.len() as i64;
    let fence = [Text(id), Int(expected), Int(epoch.0)];
    match alongside.edited_by {
        Some(by) => trip.push(
            "UPDATE documents SET revision = ?, edited_at = ?, edited_by = ? \
             WHERE id = ? AND revision = ? AND epoch = ? \
             RETURNING 'document' AS fence, id, revision AS at;",
            [Int(next), Int(now), Text(by)].into_iter().chain(fence),
        ),
        None => trip.push(
            "UPDATE documents SET revision = ? WHERE id = ? AND revision = ? AND epoch = ? \
             RETURNING 'document' AS fence, id, revision AS at;",
            [Int(next)].into_iter().chain(fence),
        ),
    }
    if !updates.is_empty() {
        trip.push(
            &format!(
                "INSERT INTO document_updates (document_id, revision, data) VALUES {};",
                rows("(?, ?, ?)", updates.len())
            ),
            updates
                .iter()
                .zip(expected + 1..)
                .flat_map(|(update, revision)| [Text(id), Int(revision), Bytes(update.as_slice())]),
        );
    }
    if !alongside.clients.is_empty() {
        trip.push(
            &format!(
                "INSERT INTO document_clients (document_id, client_id, account) VALUES {} \
                 ON CONFLICT (document_id, client_id) DO NOTHING;",
                rows("(?, ?, ?)", alongside.clients.len())
            ),
            alongside.clients.iter().flat_map(|binding| {
                [
                    Text(id),
                    Int(binding.client as i64),
                    MaybeText(binding.account.as_deref()),
                ]
            }),
        );
    }
    if !new_cards.is_empty() {
        trip.push(
            &format!("{};", insert_sql(new_cards.len(), |_, _| "?".to_owned())),
            new_cards.iter().flat_map(|card| card.insert(id, now)),
        );
    }
    let change = format!(
        "{} RETURNING 'card' AS fence, id, version AS at;",
        anonymous(CHANGE_CARD)
    );
    for (card, stored) in changed.iter().zip(alongside.changed) {
        trip.push(&change, card.change(id, stored.version));
    }
    for write in alongside.sessions {
        push_write(&mut trip, write, now);
    }
    trip
}

/// `row` `count` times, comma-separated: a multi-row `VALUES` list.
fn rows(row: &str, count: usize) -> String {
    vec![row; count].join(", ")
}

/// Which fence did not hold, from the rows the trip's fenced updates
/// returned: the document's at `next`, then each changed card's at its new
/// version, then each session's at its new journal record.
fn unheld<'a>(
    id: &str,
    next: i64,
    alongside: &Alongside<'a>,
    moved: &[Moved],
) -> Option<Unheld<'a>> {
    let document = moved
        .iter()
        .any(|row| row.fence == "document" && row.id == id && row.at == next);
    if !document {
        return Some(Unheld::Document);
    }
    let mut cards = moved.iter().filter(|row| row.fence == "card").peekable();
    for stored in alongside.changed {
        let held = cards
            .next_if(|row| row.id == stored.card.id && row.at == stored.version)
            .is_some();
        if !held {
            return Some(Unheld::Card(&stored.card));
        }
    }
    landed(alongside.sessions, moved)
        .into_iter()
        .zip(alongside.sessions)
        .find(|(landed, _)| !landed)
        .map(|(_, write)| Unheld::Session(write))
}
