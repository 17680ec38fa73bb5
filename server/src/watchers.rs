//! Who watches a document's feed live (`GET /documents/{id}/events`, SPEC
//! B1, B1a), and the bells that make their streams look again: its Chat
//! (a line appended), its Planner (the session stepped, started or left, a
//! machine of the owner's linked or gone) and the document itself (renamed,
//! archived, deleted, a member's role changed).
//!
//! A bell carries nothing but a count per kind. A woken stream reads what
//! changed from where it is kept — Chat and the document from storage, the
//! Planner's view from the session registry — and only for the kinds that
//! rang, so the many steps of a Planner's turn cost its watchers no query.
//! A ring merged with another, or one that came before the stream looked,
//! can delay a line but never lose or reorder one. Only documents someone
//! watches have an entry; the last watcher's leaving removes it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

/// What changed for the people watching a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bell {
    /// A Chat line was appended.
    Chat,
    /// Its Planner's view may have changed.
    Planner,
    /// The document's title, archive state or members changed, or it was
    /// deleted.
    Document,
}

/// How many times each bell has rung for a document: a stream compares
/// the counts with those it last acted on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rung {
    /// Chat lines appended.
    pub chat: u64,
    /// Planner changes.
    pub planner: u64,
    /// Changes to the document itself.
    pub document: u64,
}

impl Rung {
    fn ring(&mut self, bell: Bell) {
        let count = match bell {
            Bell::Chat => &mut self.chat,
            Bell::Planner => &mut self.planner,
            Bell::Document => &mut self.document,
        };
        *count = count.wrapping_add(1);
    }
}

/// The documents watched on this server.
#[derive(Clone, Default)]
pub struct Watchers {
    watched: Arc<Mutex<HashMap<String, Watched>>>,
}

struct Watched {
    /// The account id of the document's owner, whose machines' links
    /// decide whether its Planner is available.
    owner: String,
    bells: watch::Sender<Rung>,
}

/// One stream's watch of one document; unwatches on drop.
pub struct Watch {
    document: String,
    bells: watch::Receiver<Rung>,
    watchers: Watchers,
}

impl Watchers {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Watched>> {
        // The map holds no invariant a panic elsewhere could break.
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts watching `document`, owned by account id `owner`.
    pub fn watch(&self, document: &str, owner: &str) -> Watch {
        let mut watched = self.lock();
        let entry = watched
            .entry(document.to_owned())
            .or_insert_with(|| Watched {
                owner: owner.to_owned(),
                bells: watch::Sender::new(Rung::default()),
            });
        Watch {
            document: document.to_owned(),
            bells: entry.bells.subscribe(),
            watchers: self.clone(),
        }
    }

    /// Rings `bell` for those watching `document`.
    pub fn ring(&self, document: &str, bell: Bell) {
        if let Some(watched) = self.lock().get(document) {
            watched.bells.send_modify(|rung| rung.ring(bell));
        }
    }

    /// A machine of account id `owner` linked or left: the Planner of
    /// every document it owns may have become available or gone.
    pub fn ring_owner(&self, owner: &str) {
        for watched in self.lock().values().filter(|w| w.owner == owner) {
            watched.bells.send_modify(|rung| rung.ring(Bell::Planner));
        }
    }

    /// How many feeds watch documents here, for `/metrics`.
    pub fn streams(&self) -> usize {
        self.lock().values().map(|w| w.bells.receiver_count()).sum()
    }

    #[cfg(test)]
    fn watched(&self) -> usize {
        self.lock().len()
    }
}

impl Watch {
    /// The counts now, marked seen: a ring after this wakes
    /// [`Watch::changed`] even if it comes before that is awaited.
    pub fn seen(&mut self) -> Rung {
        *self.bells.borrow_and_update()
    }

    /// Waits for the next ring after [`Watch::seen`].
    pub async fn changed(&mut self) {
        // The sender lives as long as this receiver's entry, which this
        // watch keeps; an error can only mean it went, and then there is
        // nothing more to wait for.
        if self.bells.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut watched = self.watchers.lock();
        // Under the lock no new watch can subscribe meanwhile: the count is
        // exact. This receiver is still alive, so one means only it.
        if watched
            .get(&self.document)
            .is_some_and(|w| w.bells.receiver_count() <= 1)
        {
            watched.remove(&self.document);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn rings(watch: &mut Watch) -> bool {
        tokio::time::timeout(Duration::from_millis(50), watch.changed())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_ring_reaches_every_watcher_of_the_document_and_no_other() {
        let watchers = Watchers::default();
        let mut a = watchers.watch("d1", "ada");
        let mut b = watchers.watch("d1", "ada");
        let mut other = watchers.watch("d2", "bo");
        for w in [&mut a, &mut b, &mut other] {
            w.seen();
        }
        watchers.ring("d1", Bell::Chat);
        assert!(rings(&mut a).await && rings(&mut b).await);
        assert!(!rings(&mut other).await);
    }

    #[tokio::test]
    async fn a_ring_before_the_wait_is_not_lost_and_says_which_bell() {
        let watchers = Watchers::default();
        let mut a = watchers.watch("d1", "ada");
        let before = a.seen();
        watchers.ring("d1", Bell::Planner);
        watchers.ring("d1", Bell::Planner);
        assert!(rings(&mut a).await, "woken although the wait began later");
        let after = a.seen();
        assert_eq!(
            (after.chat, after.planner, after.document),
            (before.chat, before.planner + 2, before.document),
            "two Planner rings merged into one wake-up, counted"
        );
        assert!(!rings(&mut a).await, "and once");
    }

    #[tokio::test]
    async fn an_owner_ring_reaches_the_documents_it_owns() {
        let watchers = Watchers::default();
        let mut mine = watchers.watch("d1", "ada");
        let mut theirs = watchers.watch("d2", "bo");
        mine.seen();
        theirs.seen();
        watchers.ring_owner("ada");
        assert!(rings(&mut mine).await);
        assert_eq!(mine.seen().planner, 1);
        assert!(!rings(&mut theirs).await);
    }

    #[test]
    fn the_last_watcher_leaving_forgets_the_document() {
        let watchers = Watchers::default();
        let a = watchers.watch("d1", "ada");
        let b = watchers.watch("d1", "ada");
        drop(a);
        assert_eq!(watchers.watched(), 1);
        drop(b);
        assert_eq!(watchers.watched(), 0);
        watchers.ring("d1", Bell::Document);
    }
}
