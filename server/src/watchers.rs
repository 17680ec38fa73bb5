//! Who watches a document's feed live (`GET /documents/{id}/events`, SPEC
//! B1, B1a), and the wake-ups that make their streams look again: a Chat
//! line appended, the document's Planner session changed, a machine of the
//! document owner's linked or gone.
//!
//! A wake-up carries nothing. A woken stream reads what changed from where
//! it is kept — Chat from storage, the Planner's view from the session
//! registry — so a wake-up merged with another, or one that came before
//! the stream looked, can delay a line but never lose or reorder one.
//! Only documents someone watches have an entry; the last watcher's leaving
//! removes it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

/// The documents watched on this server.
#[derive(Clone, Default)]
pub struct Watchers {
    watched: Arc<Mutex<HashMap<String, Watched>>>,
}

struct Watched {
    /// The account id of the document's owner, whose machines' links
    /// decide whether its Planner is available.
    owner: String,
    bell: watch::Sender<()>,
}

/// One stream's watch of one document; unwatches on drop.
pub struct Watch {
    document: String,
    bell: watch::Receiver<()>,
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
                bell: watch::Sender::new(()),
            });
        Watch {
            document: document.to_owned(),
            bell: entry.bell.subscribe(),
            watchers: self.clone(),
        }
    }

    /// Something people watching `document` see changed.
    pub fn wake(&self, document: &str) {
        if let Some(watched) = self.lock().get(document) {
            watched.bell.send_replace(());
        }
    }

    /// A machine of account id `owner` linked or left: the Planner of
    /// every document it owns may have become available or gone.
    pub fn wake_owner(&self, owner: &str) {
        for watched in self.lock().values().filter(|w| w.owner == owner) {
            watched.bell.send_replace(());
        }
    }

    #[cfg(test)]
    fn watched(&self) -> usize {
        self.lock().len()
    }
}

impl Watch {
    /// Marks what there is as seen: a wake-up after this wakes
    /// [`Watch::changed`] even if it comes before that is awaited.
    pub fn seen(&mut self) {
        self.bell.borrow_and_update();
    }

    /// Waits for the next wake-up after [`Watch::seen`].
    pub async fn changed(&mut self) {
        // The sender lives as long as this receiver's entry, which this
        // watch keeps; an error can only mean it went, and then there is
        // nothing more to wait for.
        if self.bell.changed().await.is_err() {
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
            .is_some_and(|w| w.bell.receiver_count() <= 1)
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
    async fn a_wake_reaches_every_watcher_of_the_document_and_no_other() {
        let watchers = Watchers::default();
        let mut a = watchers.watch("d1", "ada");
        let mut b = watchers.watch("d1", "ada");
        let mut other = watchers.watch("d2", "bo");
        for w in [&mut a, &mut b, &mut other] {
            w.seen();
        }
        watchers.wake("d1");
        assert!(rings(&mut a).await && rings(&mut b).await);
        assert!(!rings(&mut other).await);
    }

    #[tokio::test]
    async fn a_wake_before_the_wait_is_not_lost() {
        let watchers = Watchers::default();
        let mut a = watchers.watch("d1", "ada");
        a.seen();
        watchers.wake("d1");
        assert!(rings(&mut a).await, "woken although the wait began later");
        assert!(!rings(&mut a).await, "and once");
    }

    #[tokio::test]
    async fn an_owner_wake_reaches_the_documents_it_owns() {
        let watchers = Watchers::default();
        let mut mine = watchers.watch("d1", "ada");
        let mut theirs = watchers.watch("d2", "bo");
        mine.seen();
        theirs.seen();
        watchers.wake_owner("ada");
        assert!(rings(&mut mine).await);
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
        watchers.wake("d1");
    }
}
