//! What people and owners do to a document's Planner session (SPEC P1,
//! P3, L3–L5): answers and discards of its questions, Stop and resume,
//! and the acts that end sessions — archive, reset, sign-out, a machine
//! unpaired or revoked, here or on another node.

use margin_planner::{CardId, ReleaseTrigger, RequestId, ResumeRefusal};
use margin_protocol::decisions::AnswerBody;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::input::Input;
use super::Sessions;
use crate::cluster::{MachinesEnded, Whose};
use crate::storage::StorageError;
use crate::watchers::Bell;

impl Sessions {
    /// The driver of `document`'s session, if it has one.
    pub(super) fn of_document(&self, document: &str) -> Option<mpsc::Sender<Input>> {
        let registry = self.shared.lock();
        let id = registry.documents.get(document)?;
        registry.sessions.get(id).map(|live| live.mailbox.clone())
    }

    /// A person answered `request` of `document`: if a session asked it,
    /// the answer goes to its machine — or waits while it is away — until
    /// acknowledged (SPEC L5). Returns once that is committed.
    pub async fn answered(
        &self,
        document: &str,
        request: RequestId,
        answer: AnswerBody,
        by: String,
    ) {
        let Some(mailbox) = self.of_document(document) else {
            return;
        };
        let (done, answered) = oneshot::channel();
        let input = Input::Answered {
            request,
            answer,
            by,
            done,
        };
        if mailbox.send(input).await.is_ok() {
            let _ = answered.await;
        }
    }

    /// People discarded `card` of `document`: the session no longer waits
    /// on it, nor counts it as captured.
    pub async fn discarded(&self, document: &str, card: CardId) {
        let Some(mailbox) = self.of_document(document) else {
            return;
        };
        let (done, discarded) = oneshot::channel();
        if mailbox.send(Input::Discarded { card, done }).await.is_ok() {
            let _ = discarded.await;
        }
    }

    /// A member pressed Stop (SPEC L4): sent, or held while the machine is
    /// away. False when the document has no Planner session.
    pub async fn stop(&self, document: &str) -> Result<bool, StorageError> {
        let Some(mailbox) = self.of_document(document) else {
            return Ok(false);
        };
        let (done, stopped) = oneshot::channel();
        if mailbox.send(Input::StopRequested { done }).await.is_err() {
            return Ok(false);
        }
        stopped.await.unwrap_or(Ok(())).map(|()| true)
    }

    /// A member pressed Resume (SPEC L4): it withdraws the Stop pending
    /// now, only while the machine is linked.
    pub async fn resume_work(&self, document: &str) -> Result<(), ResumeError> {
        let mailbox = self.of_document(document).ok_or(ResumeError::NoSession)?;
        let (done, resumed) = oneshot::channel();
        mailbox
            .send(Input::ResumeRequested { done })
            .await
            .map_err(|_| ResumeError::NoSession)?;
        match resumed.await.map_err(|_| ResumeError::NoSession)?? {
            Ok(()) => Ok(()),
            Err(ResumeRefusal::NoStop) => Err(ResumeError::NoStop),
            Err(ResumeRefusal::Away) => Err(ResumeError::Away),
        }
    }

    /// The document was archived or deleted (SPEC P3): its session, if it
    /// has one, ends and its machine is told to `stop`; until
    /// [`Sessions::document_reopened`], `@planner` starts nothing there.
    /// An error when the session's end could not be committed: it carries
    /// on, and closing the document again ends it.
    pub async fn document_closed(
        &self,
        document: &str,
        trigger: ReleaseTrigger,
    ) -> Result<(), StorageError> {
        self.shared.lock().closed.insert(document.to_owned());
        self.shared.hub.watchers().ring(document, Bell::Planner);
        self.reset(document, trigger).await.map(drop)
    }

    /// Ends the document's session, if it has one, for `trigger` (SPEC
    /// P3); the next `@planner` starts a new one. False when there was
    /// none; an error when its end could not be committed.
    pub async fn reset(
        &self,
        document: &str,
        trigger: ReleaseTrigger,
    ) -> Result<bool, StorageError> {
        match self.of_document(document) {
            Some(mailbox) => release(mailbox, trigger).await.map(|()| true),
            None => Ok(false),
        }
    }

    /// Ends every session of `account`'s machines (it signed out) or of
    /// machine `machine` (unpaired or revoked) for `trigger` (SPEC P3):
    /// linked or away, in use or not. Every session is tried; the first
    /// whose end could not be committed is the error.
    pub async fn machines_ended(
        &self,
        whose: Whose<'_>,
        trigger: ReleaseTrigger,
    ) -> Result<(), StorageError> {
        let mailboxes: Vec<mpsc::Sender<Input>> = {
            let registry = self.shared.lock();
            registry
                .sessions
                .values()
                .filter(|live| match whose {
                    Whose::Account(account) => live.account == account,
                    Whose::Machine(machine) => live.machine == machine,
                })
                .map(|live| live.mailbox.clone())
                .collect()
        };
        let mut ended = Ok(());
        for mailbox in mailboxes {
            let released = release(mailbox, trigger).await;
            ended = ended.and(released);
        }
        ended
    }

    /// Ends a machine that no longer opens links (unpaired or revoked, SPEC
    /// P3): its sessions — linked or away — are released for `trigger`,
    /// then its open links are closed, and in a cluster every other node
    /// is told to do the same. Its links close and the cluster is told
    /// even when a session's end could not be committed here (the error):
    /// the machine opens no link either way, and ending it again finishes.
    pub async fn end_machine(
        &self,
        machine: &str,
        trigger: ReleaseTrigger,
    ) -> Result<(), StorageError> {
        let ended = self.machines_ended(Whose::Machine(machine), trigger).await;
        self.shared.links.revoke(machine);
        if let Some(cluster) = &self.shared.cluster {
            cluster
                .machines_ended(Whose::Machine(machine), trigger)
                .await;
        }
        ended
    }

    /// Carries out, until `ended` closes, other nodes' word that machines'
    /// sessions ended (SPEC C2, P3): their sessions here end, and a revoked
    /// or unpaired machine's links close.
    pub async fn follow_other_nodes(self, mut ended: mpsc::Receiver<MachinesEnded>) {
        while let Some(MachinesEnded {
            account,
            machine,
            trigger,
        }) = ended.recv().await
        {
            // The node that was asked answered its caller; here a session
            // whose end is not committed carries on, and is logged.
            if let Some(account) = &account {
                if let Err(error) = self.machines_ended(Whose::Account(account), trigger).await {
                    warn!(%error, ?trigger, "a session of a signed-out account did not end");
                }
            }
            if let Some(machine) = &machine {
                if let Err(error) = self.machines_ended(Whose::Machine(machine), trigger).await {
                    warn!(%error, ?trigger, machine, "a session of an ended machine did not end");
                }
                self.shared.links.revoke(machine);
            }
        }
    }

    /// The document was unarchived: `@planner` starts turns there again.
    pub fn document_reopened(&self, document: &str) {
        self.shared.lock().closed.remove(document);
        self.shared.hub.watchers().ring(document, Bell::Planner);
    }
}

/// Why a Resume was refused.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The document has no Planner session.
    #[error("the document has no Planner session")]
    NoSession,
    /// No Stop waits to be confirmed.
    #[error("no Stop is waiting to be confirmed; there is nothing to resume")]
    NoStop,
    /// The machine is away: refused, not held (SPEC L4).
    #[error(
        "the Planner is disconnected; a Resume is not held for it, press it again once it is back"
    )]
    Away,
    /// Storage failed; nothing changed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Asks a session's driver to end it for `trigger`; returns once that is
/// committed (or the driver is gone: the session ended already), or why
/// it could not be, the session carrying on.
pub(super) async fn release(
    mailbox: mpsc::Sender<Input>,
    trigger: ReleaseTrigger,
) -> Result<(), StorageError> {
    let (done, released) = oneshot::channel();
    if mailbox
        .send(Input::Release { trigger, done })
        .await
        .is_err()
    {
        return Ok(());
    }
    released.await.unwrap_or(Ok(()))
}
