//! What the server asks of a document's task and waits for: the Planner's
//! edits and card batches, a card's change, archive, access and delete —
//! each retried on a fresh task when the one asked was unloading.

use std::sync::Arc;

use margin_decisions::{Edit, Outline};
use margin_protocol::Role;
use tokio::sync::oneshot;

use super::{Hub, JOIN_ATTEMPTS};
use crate::storage::StoredCard;
use crate::sync::cards::{CardChange, ChangeRefused};
use crate::sync::command::{
    Command, DecideRefused, EditRefused, EditRequest, JoinRefused, RecordResult,
};
use crate::sync::decide::{Batch, Decided};
use crate::watchers::Bell;

impl Hub {
    /// Applies the Planner's edits to `id` and returns the revision they made
    /// and its outline, once committed — with the session write `record`
    /// asks for in the same transaction, when given, and `by` as the
    /// document's last editor.
    pub async fn edit(
        &self,
        id: &str,
        revision: i64,
        edits: Vec<Edit>,
        by: &str,
        record: Option<RecordResult>,
    ) -> Result<(i64, Arc<Outline>), EditRefused> {
        let by: Arc<str> = Arc::from(by);
        self.request(id, |reply| Command::Edit {
            request: Box::new(EditRequest {
                revision,
                edits: edits.clone(),
                by: by.clone(),
                record: record.clone(),
            }),
            reply,
        })
        .await
        .map_err(|e| EditRefused::Unavailable(e.to_string()))?
    }

    /// Judges `batch` of cards for `id` in its task and stores what it
    /// creates with their live mirror — and the call's result, recorded
    /// through `record` when given — in one transaction; what it came to,
    /// once committed.
    pub async fn decide(
        &self,
        id: &str,
        batch: Batch,
        record: Option<RecordResult>,
    ) -> Result<Decided, DecideRefused> {
        self.request(id, |reply| Command::Decide {
            batch: Box::new(batch.clone()),
            record: record.clone(),
            reply,
        })
        .await
        .map_err(|e| DecideRefused::Unavailable(e.to_string()))?
    }

    /// Applies `change` to card `card` of `id` in its task and stores it
    /// with its live mirror in one transaction; the card as changed
    /// (`None`: there was nothing to change), once committed.
    pub async fn change_card(
        &self,
        id: &str,
        card: &str,
        change: CardChange,
    ) -> Result<Result<Option<StoredCard>, ChangeRefused>, JoinRefused> {
        self.request(id, |reply| Command::Change {
            card: card.to_owned(),
            change: Box::new(change.clone()),
            reply,
        })
        .await
    }

    /// Puts document `id`'s archive state in force on its loaded task, if
    /// any (SPEC P3). Storage must already say so: a task that loads later
    /// reads it there.
    pub async fn set_archived(&self, id: &str, archived: bool) {
        // Those following its feed see it archived (or not) at once.
        self.inner.watchers.ring(id, Bell::Document);
        let Some(mailbox) = self.loaded(id) else {
            return;
        };
        let (reply, answer) = oneshot::channel();
        if mailbox
            .send(Command::Archive { archived, reply })
            .await
            .is_ok()
        {
            // No answer: the task was unloading, and the next one reads
            // storage.
            let _ = answer.await;
        }
    }

    /// The owner changed `account`'s access to document `id` — `role` is
    /// its role now, `None` once removed — and storage already says so:
    /// the member's connections to the loaded document that hold another
    /// role close at once (SPEC A1), removed ones for good
    /// ([`margin_protocol::sync::close::REMOVED`]), the others to reconnect
    /// with the new role ([`margin_protocol::sync::close::ACCESS_CHANGED`]).
    /// In a cluster this runs on the document's owner, where every socket
    /// on it is joined, forwarded ones included.
    pub async fn access_changed(&self, id: &str, account: &str, role: Option<Role>) {
        // Its feed tells the member their new role, or ends.
        self.inner.watchers.ring(id, Bell::Document);
        let Some(mailbox) = self.loaded(id) else {
            return;
        };
        let (reply, answer) = oneshot::channel();
        let command = Command::Access {
            account: account.to_owned(),
            role,
            reply,
        };
        if mailbox.send(command).await.is_ok() {
            // No answer: the task was unloading, and its connections with it.
            let _ = answer.await;
        }
    }

    /// Document `id` was deleted from storage: closes its sync connections
    /// ([`margin_protocol::sync::close::DELETED`]), unloads it without
    /// writing, and forgets the Planner's reads of it.
    pub async fn deleted(&self, id: &str) {
        // Its feed ends: the next read finds no document.
        self.inner.watchers.ring(id, Bell::Document);
        if let Some(mailbox) = self.loaded(id) {
            let (reply, answer) = oneshot::channel();
            if mailbox.send(Command::Delete { reply }).await.is_ok() {
                let _ = answer.await;
            }
        }
        self.inner.reads.forget(id);
        self.inner.encoded_reads.forget(id);
    }

    /// Asks `id`'s task something and waits for the answer, starting a task
    /// if needed. A task that was unloading drops the question unanswered
    /// (and nothing of it was done, or committed); it is then asked again of
    /// a fresh task.
    pub(super) async fn request<T>(
        &self,
        id: &str,
        command: impl Fn(oneshot::Sender<T>) -> Command,
    ) -> Result<T, JoinRefused> {
        for _ in 0..JOIN_ATTEMPTS {
            let mailbox = self.task_for(id)?;
            let (reply, answer) = oneshot::channel();
            if mailbox.send(command(reply)).await.is_err() {
                continue;
            }
            if let Ok(answer) = answer.await {
                return Ok(answer);
            }
        }
        Err(JoinRefused::Unloading)
    }
}
