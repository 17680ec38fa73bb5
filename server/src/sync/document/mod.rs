//! The task that owns one loaded document (SPEC S2, S3).
//!
//! Every frame for the document passes through this task, in order. It works
//! in batches: it takes whatever frames are waiting, applies them to the
//! in-memory `yrs` document, commits the resulting changes to storage in one
//! transaction, and only then sends anything — so nothing is acknowledged or
//! broadcast before it is durable. A storage failure closes every connection
//! and unloads the document; clients reconnect, the document is rebuilt from
//! what was committed, and their sync step 2 restores what they still hold.
//!
//! Here: the task's state, its loop and its way out; [`open`] loads it,
//! [`handle`] takes each command of a batch into the batch's effects, and
//! [`publish`] commits them and only then sends.

use std::collections::HashMap;
use std::time::Duration;

use margin_decisions::LiveOutline;
use margin_protocol::sync::close;
use margin_sync_core::{LiveDocument, Owner};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::cards::CardSet;
use super::command::{Command, JoinRefused};
use super::compaction::Compactor;
use super::conn::{Conn, ConnId};
use super::hub::Hub;
use super::reads::Reads;
use crate::cluster::Lease;
use crate::storage::{Epoch, StorageError, Store};

mod handle;
mod open;
mod publish;

use publish::Effects;

/// The origin of the server's own changes; connections count from 1.
const SERVER: ConnId = 0;

/// Most commands handled in one batch (one storage transaction).
const MAX_BATCH: usize = 256;

/// How long a document nobody has open stays loaded after its last
/// command. A Planner's turn calls its tools one after another on a
/// document nobody may be viewing; unloading after each call rebuilt the
/// document from storage and took a new owner epoch for the next one (and
/// fenced the last one's final compaction).
const LINGER: Duration = Duration::from_secs(30);

/// A joined connection.
struct Member {
    conn: Conn,
    /// The owner its updates write as: its account.
    owner: Owner,
}

/// Whom a frame goes to.
enum Target {
    One(ConnId),
    AllBut(ConnId),
}

pub struct DocumentTask {
    id: String,
    store: Store,
    /// The document, its checks and its members' awareness (the sync
    /// core): every frame and every write of the server's goes through it.
    live: LiveDocument,
    /// The outline, kept current by re-reading only the blocks that change.
    outline: LiveOutline,
    revision: i64,
    /// This task's claim on the document: every write names it (W3).
    epoch: Epoch,
    members: HashMap<ConnId, Member>,
    compactor: Compactor,
    /// Archived: edits are refused from everyone (SPEC P3).
    archived: bool,
    /// The document's cards: changed only here, in the step that writes
    /// the change, so a batch is judged against what is stored.
    cards: CardSet,
    /// The Planner's remembered reads, which batches are judged with.
    reads: Reads,
    /// Deleted: unload at once and write nothing more.
    deleted: bool,
    /// Another owner claimed the document: this copy writes nothing more.
    fenced: bool,
    /// In a cluster: the lease this node holds on the document (SPEC C1).
    lease: Option<Lease>,
    /// yrs failed on something the sync core accepted: the in-memory
    /// document is suspect, so nothing of the batch is committed and the
    /// task unloads.
    poisoned: bool,
}

/// Loads document `id` and runs its task until nobody connected has used it
/// for [`LINGER`], storage fails, or the server shuts down.
pub async fn run(
    id: String,
    hub: Hub,
    mailbox: mpsc::Sender<Command>,
    mut rx: mpsc::Receiver<Command>,
    shutdown: CancellationToken,
) {
    let span = tracing::info_span!("document", document = %id);
    async move {
        // Boxed, as the task it loads is: loading needs its room once,
        // and the task's state sat beside a second slot for it while
        // loading could fail; inline, every loaded document's task kept
        // both.
        let loading = Box::pin(DocumentTask::load(
            id.clone(),
            hub.store().clone(),
            hub.compaction(),
            hub.ownership(),
            hub.reads().clone(),
        ));
        let mut task = match loading.await {
            Ok(task) => task,
            Err(refused) => {
                if let JoinRefused::Elsewhere(_) = refused {
                    // Another node took it first: the caller goes there.
                    debug!(%refused, "document not loaded here");
                } else {
                    warn!(%refused, "document failed to load");
                }
                hub.forget(&id, &mailbox);
                refuse_all(&mut rx, refused).await;
                return;
            }
        };
        info!(revision = task.revision, "document loaded");
        task.serve(&mut rx, &shutdown).await;
        hub.forget(&id, &mailbox);
        drop(mailbox);
        refuse_all(&mut rx, JoinRefused::Unloading).await;
        task.finish().await;
        // Its share of the lease goes with it.
        task.lease = None;
        info!(revision = task.revision, "document unloaded");
    }
    .instrument(span)
    .await
}

/// Answers what is left in a closed mailbox.
async fn refuse_all(rx: &mut mpsc::Receiver<Command>, why: JoinRefused) {
    rx.close();
    while let Some(command) = rx.recv().await {
        match command {
            Command::Join { conn, reply } => {
                if reply.send(Err(why.clone())).is_err() {
                    conn.closer.close(close::GOING_AWAY, "document unloaded");
                }
            }
            // Dropping the reply makes the caller read storage instead.
            Command::Outline { .. }
            | Command::Edit { .. }
            | Command::Decide { .. }
            | Command::Change { .. }
            | Command::Archive { .. }
            | Command::Access { .. }
            | Command::Delete { .. }
            | Command::Frame { .. }
            | Command::Leave { .. } => {}
        }
    }
}

impl DocumentTask {
    async fn serve(&mut self, rx: &mut mpsc::Receiver<Command>, shutdown: &CancellationToken) {
        // Without a lease (a server alone) this never fires.
        let lapsed = self
            .lease
            .as_ref()
            .map(|lease| lease.holder.lapsed.clone())
            .unwrap_or_default();
        // Set while nobody is connected: when the last command came.
        let mut idle_since: Option<Instant> = None;
        loop {
            let deadline = self.compactor.deadline();
            let linger = idle_since.map(|since| since + LINGER);
            let first = tokio::select! {
                biased;
                _ = shutdown.cancelled() => {
                    self.close_all(close::GOING_AWAY, "server shutting down");
                    return;
                }
                _ = lapsed.cancelled() => {
                    // Another node may own the document now (SPEC C3):
                    // this copy writes nothing more, and its clients
                    // reconnect to whoever does.
                    warn!("this node lapsed; dropping the document");
                    self.moved_away();
                    return;
                }
                _ = self.compactor.wait() => continue,
                _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    self.start_compaction();
                    continue;
                }
                _ = sleep_until(linger.unwrap_or_else(Instant::now)), if linger.is_some() => {
                    debug!("nobody used the document for a while; unloading it");
                    return;
                }
                command = rx.recv() => match command {
                    Some(command) => command,
                    None => return,
                },
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(command) => batch.push(command),
                    Err(_) => break,
                }
            }
            let mut effects = Effects::default();
            for command in batch {
                self.handle(command, &mut effects);
            }
            if self.poisoned {
                // Nothing of the batch was committed or answered; clients
                // resync from storage, where a new task loads it.
                self.close_all(close::INTERNAL, "the document failed; reconnect to resync");
                return;
            }
            if self.deleted {
                // Nothing of this batch is committed or answered: the
                // document is gone.
                return;
            }
            // A commit the database never answers (cut off from this node)
            // must not outlast the node's lease: once it lapsed, the batch
            // is given up unanswered, as a moved owner's is (SPEC C5).
            let published = tokio::select! {
                published = self.publish(effects) => published,
                _ = lapsed.cancelled() => {
                    warn!("this node lapsed in the middle of a commit; dropping the document");
                    self.moved_away();
                    return;
                }
            };
            match published {
                Ok(()) => {}
                Err(cause @ StorageError::OwnerMoved { .. }) => {
                    // Nothing of the batch was committed or answered; this
                    // copy is stale, and its clients resync from the owner.
                    warn!(%cause, "another owner claimed the document; unloading");
                    self.moved_away();
                    return;
                }
                Err(cause)
                    if self
                        .lease
                        .as_ref()
                        .is_some_and(|lease| !lease.surely_held()) =>
                {
                    // The node was away past its lease (paused, cut off):
                    // the database ended the write, and the document may
                    // be another node's by now.
                    warn!(%cause, "a write failed after this node's lease ran out; unloading");
                    self.moved_away();
                    return;
                }
                Err(cause) => {
                    warn!(%cause, "storage failed; closing every connection");
                    self.close_all(close::INTERNAL, "storage failed; reconnect to resync");
                    return;
                }
            }
            idle_since = self.members.is_empty().then(Instant::now);
        }
    }

    /// Another node may own the document now: this copy is fenced (it
    /// writes nothing more, its final compaction included) and its clients
    /// reconnect to whoever owns it.
    fn moved_away(&mut self) {
        self.close_all(close::GOING_AWAY, "the document moved; reconnect to resync");
        self.fenced = true;
    }

    fn close_all(&mut self, code: u16, reason: &str) {
        for member in self.members.values() {
            member.conn.closer.close(code, reason);
        }
        self.members.clear();
    }

    /// Has the compactor snapshot everything committed so far, in the
    /// background: editors wait on neither the encoding nor the write.
    fn start_compaction(&mut self) {
        self.compactor
            .start(&self.store, &self.id, self.epoch, self.revision);
    }

    /// Leaves storage compact on the way out (a deleted document has no
    /// storage left to compact, a fenced copy no right to).
    async fn finish(&mut self) {
        if self.deleted || self.fenced {
            return;
        }
        if self.compactor.in_flight() {
            self.compactor.wait().await;
        }
        if self.compactor.has_pending() {
            self.start_compaction();
            self.compactor.wait().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::future_size::ReturnSize;
    /// A loaded document's task is its future, alive while anyone uses the
    /// document: hundreds at once, mostly waiting on their mailbox. Its
    /// loading and its commits are boxed, so the room they need while they
    /// run is not kept beside the task for its whole life.
    #[test]
    fn a_document_tasks_future_keeps_no_room_for_loading_or_committing() {
        let size = super::run.return_size();
        assert!(size <= 1536, "a document task's future is {size} bytes");
    }
}
