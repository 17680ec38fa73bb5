//! The live sessions' feeds for applications (SPEC E1, E2): a ring of the
//! latest committed events per session, pushed to only once a session's
//! write has committed, and the readers that follow them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use margin_protocol::sessions::{SessionSnapshot, SessionState};
use tokio_util::sync::CancellationToken;

use super::feed::{Entry, Feed};
use super::reader::Reader;
use crate::storage::{StorageError, Store, StoredEvent};

/// The rings, shared by drivers (which push) and readers.
#[derive(Clone)]
pub struct Feeds {
    map: Arc<Mutex<HashMap<String, Arc<Feed>>>>,
    /// Most events a ring keeps.
    capacity: usize,
    store: Store,
    shutdown: CancellationToken,
}

impl Feeds {
    /// Feeds over `store` whose rings keep at most `capacity` events.
    pub fn new(store: Store, capacity: usize, shutdown: CancellationToken) -> Self {
        Feeds {
            map: Arc::default(),
            capacity,
            store,
            shutdown,
        }
    }

    /// Shows `events` of `session`, just committed after cursor `base`;
    /// the ring goes when the session ends.
    pub fn push(&self, session: &str, base: u64, events: &[StoredEvent]) {
        if events.is_empty() {
            return;
        }
        let entries: Vec<Arc<Entry>> = events.iter().map(|e| Arc::new(Entry::new(e))).collect();
        let ended = entries.last().is_some_and(|e| e.last);
        self.get_or_new(session, base).push(entries);
        if ended {
            self.lock().remove(session);
        }
    }

    /// Session `session`'s stored snapshot and its document.
    pub async fn snapshot(
        &self,
        session: &str,
    ) -> Result<Option<(String, SessionSnapshot)>, StorageError> {
        let Some(stored) = self.store.session(session).await? else {
            return Ok(None);
        };
        let snapshot = serde_json::from_str(&stored.snapshot)
            .map_err(|e| StorageError::Corrupt(format!("session snapshot: {e}")))?;
        Ok(Some((stored.document, snapshot)))
    }

    /// A reader of `snapshot`'s session from `after` on.
    pub fn reader(&self, snapshot: &SessionSnapshot, after: u64) -> Reader {
        let ended = snapshot.state == SessionState::Ended;
        let feed = if ended {
            // Nothing more will be written: no need to be woken.
            Arc::new(Feed::new(snapshot.cursor, 0))
        } else {
            self.get_or_new(&snapshot.session, snapshot.cursor)
        };
        Reader::new(
            self.store.clone(),
            snapshot.session.clone(),
            feed,
            (after, snapshot.cursor, ended),
            self.shutdown.clone(),
        )
    }

    fn get_or_new(&self, session: &str, cursor: u64) -> Arc<Feed> {
        self.lock()
            .entry(session.to_owned())
            .or_insert_with(|| Arc::new(Feed::new(cursor, self.capacity)))
            .clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Feed>>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
