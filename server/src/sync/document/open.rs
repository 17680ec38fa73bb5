//! Opening a loaded document's task: its epoch claimed, the document
//! rebuilt from storage through the sync core, its cards read and their
//! mirror put right before anyone joins.

use std::collections::HashMap;

use margin_decisions::LiveOutline;
use margin_sync_core::{Owner, Written};
use tracing::warn;

use super::DocumentTask;
use crate::cluster::{Ownership, TakeRefused};
use crate::storage::{Alongside, ClientBinding, StorageError, Store, StoredCard};
use crate::sync::cards::{mirror_entry, CardSet};
use crate::sync::command::JoinRefused;
use crate::sync::compaction::{Compaction, Compactor};
use crate::sync::load::rebuilt;
use crate::sync::reads::Reads;
use crate::sync::writes;

impl DocumentTask {
    pub(super) async fn load(
        id: String,
        store: Store,
        compaction: Compaction,
        ownership: &Ownership,
        reads: Reads,
    ) -> Result<Box<Self>, JoinRefused> {
        let stored = |e: StorageError| match e {
            StorageError::NotFound("document") => JoinRefused::Deleted,
            other => JoinRefused::LoadFailed(other.to_string()),
        };
        // The claim first: the state loaded after it is what this owner's
        // writes build on, and any owner before it is refused from now on.
        let (epoch, lease) = match ownership {
            Ownership::Alone => (store.claim_document(&id).await.map_err(stored)?, None),
            Ownership::Cluster(cluster) => match cluster.take(&id).await {
                Ok(lease) => (lease.epoch, Some(lease)),
                Err(TakeRefused::Storage(e)) => return Err(stored(e)),
                Err(refused) => return Err(JoinRefused::Elsewhere(refused.to_string())),
            },
        };
        // Three reads apart, each on a reader connection of its own: the
        // snapshot's, the longest, hides the other two.
        let (state, archived, cards) = tokio::try_join!(
            store.load_state(&id, None),
            store.is_archived(&id),
            store.cards(&id),
        )
        .map_err(stored)?;
        let (mut revision, mut logged) = (state.revision, state.updates.len() as u64);
        let mut logged_bytes: u64 = state.updates.iter().map(|u| u.len() as u64).sum();
        let snapshot_bytes = state
            .snapshot
            .as_ref()
            .map_or(0, |(_, data)| data.len() as u64);
        let mirror = mirror_of(&cards);
        let (doc, live, repair) = rebuilt(state, move |mut doc, _| {
            let live = LiveOutline::new(doc.doc());
            // The rows are the record: make the map agree with them.
            let repair =
                doc.write(|doc| Ok::<_, std::convert::Infallible>(writes::project(doc, &mirror)));
            (doc, live, repair)
        })
        .await
        .map_err(|e| JoinRefused::LoadFailed(e.to_string()))?;
        let repair = match repair {
            Written::Changed(change) => Some(change),
            Written::Unchanged => None,
            Written::Refused(never) => match never {},
            Written::Broken(close) => return Err(JoinRefused::LoadFailed(close.reason)),
        };
        if let Some(repair) = repair {
            logged_bytes += repair.bytes.len() as u64;
            let clients = bindings(repair.bound);
            // Committed before anyone joins, so no editor ever sees a
            // mirror that disagrees with the rows.
            let alongside = Alongside {
                clients: &clients,
                ..Alongside::default()
            };
            revision = store
                .append_with(&id, epoch, revision, vec![repair.bytes], alongside)
                .await
                .map_err(stored)?;
            logged += 1;
            warn!(
                cards = cards.len(),
                "repaired the decisions mirror from the card rows"
            );
        }
        Ok(Box::new(DocumentTask {
            id,
            store,
            live: doc,
            outline: live,
            revision,
            epoch,
            members: HashMap::new(),
            compactor: Compactor::new(compaction, logged, logged_bytes, snapshot_bytes),
            archived,
            cards: CardSet::new(cards),
            reads,
            deleted: false,
            fenced: false,
            lease,
            poisoned: false,
        }))
    }
}

/// What the decisions map should hold for `cards` (SPEC D: SQL rows are
/// the record). A card's change commits with its mirror, but an editor's
/// client rewriting the map, or a row an older server changed alone,
/// leaves them apart until a load projects this again.
pub(super) fn mirror_of(cards: &[StoredCard]) -> Vec<(String, String)> {
    cards
        .iter()
        .map(|stored| mirror_entry(&stored.card))
        .collect()
}

/// Storage's form of the core's bindings.
pub(super) fn bindings(bound: Vec<(u64, Owner)>) -> Vec<ClientBinding> {
    bound
        .into_iter()
        .map(|(client, owner)| ClientBinding {
            client,
            account: match owner {
                Owner::Server => None,
                Owner::Account(account) => Some(account),
            },
        })
        .collect()
}
