//! What people and owners do to a document's Planner session (SPEC P1,
//! P3, L3–L5): answers and discards of its questions, Stop and resume,
//! and the acts that end sessions — archive, reset, sign-out, a machine
//! unpaired or revoked, here or on another node.

use margin_planner::{CardId, ReleaseTrigger, RequestId, ResumeRefusal};
use margin_protocol::decisions::AnswerBody;
use tokio::sync::{mpsc, oneshot};

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
    pub async fn document_closed(&self, document: &str, trigger: ReleaseTrigger) {
        self.shared.lock().closed.insert(document.to_owned());
        self.shared.hub.watchers().ring(document, Bell::Planner);
        self.reset(document, trigger).await;
    }

    /// Ends the document's session, if it has one, for `trigger` (SPEC
    /// P3); the next `@planner` starts a new one. False when there was none.
    pub async fn reset(&self, document: &str, trigger: ReleaseTrigger) -> bool {
        match self.of_document(document) {
            Some(mailbox) => {
                release(mailbox, trigger).await;
                true
            }
            None => false,
        }
    }

    /// Ends every session of `account`'s machines (it signed out) or of
    /// machine `machine` (unpaired or revoked) for `trigger` (SPEC P3):
    /// linked or away, in use or not.
    pub async fn machines_ended(&self, whose: Whose<'_>, trigger: ReleaseTrigger) {
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
        for mailbox in mailboxes {
            release(mailbox, trigger).await;
        }
    }

    /// Ends a machine that no longer opens links (unpaired or revoked, SPEC
    /// P3): its sessions — linked or away — are released for `trigger`,
    /// then its open links are closed, and in a cluster every other node
    /// is told to do the same.
    pub async fn end_machine(&self, machine: &str, trigger: ReleaseTrigger) {
        self.machines_ended(Whose::Machine(machine), trigger).await;
        self.shared.links.revoke(machine);
        if let Some(cluster) = &self.shared.cluster {
            cluster
                .machines_ended(Whose::Machine(machine), trigger)
                .await;
        }
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
            if let Some(account) = &account {
                self.machines_ended(Whose::Account(account), trigger).await;
            }
            if let Some(machine) = &machine {
                self.machines_ended(Whose::Machine(machine), trigger).await;
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
/// committed (or the driver is gone).
pub(super) async fn release(mailbox: mpsc::Sender<Input>, trigger: ReleaseTrigger) {
    let (done, released) = oneshot::channel();
    if mailbox.send(Input::Release { trigger, done }).await.is_ok() {
        let _ = released.await;
    }
}
