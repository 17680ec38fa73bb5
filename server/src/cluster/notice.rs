//! What one node tells every other (SPEC C2, C3, P3), through PostgreSQL's
//! LISTEN/NOTIFY on a channel of the cluster's own: acts that end Planner
//! sessions wherever they run — a sign-out, a revoked or unpaired machine —
//! which the node that took the request cannot carry out alone, and
//! wake-ups: a node let documents go (it unloaded them, or it is leaving),
//! so a connection waiting for their owner looks again at once and the
//! sessions left without a node are taken back at once rather than at the
//! next sweep. Each node listens on one connection of its own; a notice is
//! sent once what it reports is committed, and applying it twice changes
//! nothing. Nothing waits on a notice alone: what it wakes also polls.

use margin_planner::ReleaseTrigger;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use tokio::sync::mpsc;

use super::Cluster;

/// Whose machines' sessions end (SPEC P3).
#[derive(Clone, Copy, Debug)]
pub enum Whose<'a> {
    /// Every machine of the account with this id.
    Account(&'a str),
    /// The machine with this id.
    Machine(&'a str),
}

/// Another node's word that machines' sessions ended: this node ends its
/// own, and closes a revoked or unpaired machine's links.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachinesEnded {
    /// The account whose machines' sessions end.
    pub account: Option<String>,
    /// The machine whose sessions end (and whose links close).
    pub machine: Option<String>,
    /// Why.
    pub trigger: ReleaseTrigger,
}

/// A notice from one node to the others. The payload of a NOTIFY between
/// nodes of one build, never seen by a client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "notice", rename_all = "snake_case")]
pub enum Notice {
    /// The sessions of an account's machines, or of one machine, end for
    /// `trigger`; a revoked or unpaired machine's links close.
    MachinesEnded {
        /// The node that took the request (it has done its part).
        from: String,
        /// The account whose machines' sessions end.
        account: Option<String>,
        /// The machine whose sessions end.
        machine: Option<String>,
        /// Why.
        trigger: ReleaseTrigger,
    },
    /// A node let documents go: their owner may be another node now.
    Released {
        /// The node that let them go.
        from: String,
    },
}

impl Cluster {
    /// Tells the other nodes that `whose` sessions ended for `trigger`
    /// (this node has ended its own).
    pub async fn machines_ended(&self, whose: Whose<'_>, trigger: ReleaseTrigger) {
        let (account, machine) = match whose {
            Whose::Account(account) => (Some(account.to_owned()), None),
            Whose::Machine(machine) => (None, Some(machine.to_owned())),
        };
        let notice = Notice::MachinesEnded {
            from: self.incarnation().node,
            account,
            machine,
            trigger,
        };
        // Unsent, sessions elsewhere end when their node next takes them
        // back (a revoked machine's are ended then).
        self.tell(&notice).await;
    }

    /// Tells the other nodes this one let documents go (it unloaded one,
    /// or is leaving).
    pub(super) async fn released(&self) {
        let notice = Notice::Released {
            from: self.incarnation().node,
        };
        self.tell(&notice).await;
    }

    async fn tell(&self, notice: &Notice) {
        let sent = match serde_json::to_string(notice) {
            Ok(payload) => self.inner.store.notify(&self.inner.channel, &payload).await,
            Err(error) => Err(crate::storage::StorageError::Corrupt(error.to_string())),
        };
        if let Err(error) = sent {
            // What it would wake polls anyway.
            debug!(%error, "a notice to the other nodes was not sent");
        }
    }

    /// Resolves at the next wake-up: another node let documents go.
    pub async fn woken(&self) {
        self.inner.wakeup.notified().await;
    }

    /// Listens for the other nodes' notices until `shutdown`: wake-ups are
    /// carried out here, ended machines handed to `ended` (whoever holds
    /// this node's sessions and links).
    pub async fn listen(self, ended: mpsc::Sender<MachinesEnded>, shutdown: CancellationToken) {
        let mut listener = loop {
            match self.inner.store.listen(&self.inner.channel).await {
                Ok(listener) => break listener,
                Err(error) => {
                    warn!(%error, "cannot listen for the other nodes; trying again");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(self.inner.settings.renew_every) => {}
                    }
                }
            }
        };
        loop {
            let received = tokio::select! {
                _ = shutdown.cancelled() => return,
                received = listener.recv() => received,
            };
            // The listener reconnects by itself after an error.
            let notification = match received {
                Ok(notification) => notification,
                Err(error) => {
                    debug!(%error, "listener interrupted");
                    continue;
                }
            };
            match serde_json::from_str::<Notice>(notification.payload()) {
                Ok(notice) => self.apply(notice, &ended).await,
                Err(error) => warn!(%error, "a notice from another node did not parse"),
            }
        }
    }

    async fn apply(&self, notice: Notice, ended: &mpsc::Sender<MachinesEnded>) {
        match notice {
            Notice::Released { from } => {
                if from != self.incarnation().node {
                    self.inner.wakeup.notify_waiters();
                }
            }
            Notice::MachinesEnded {
                from,
                account,
                machine,
                trigger,
            } => {
                if from == self.incarnation().node {
                    return;
                }
                info!(
                    ?account,
                    ?machine,
                    ?trigger,
                    "sessions ended on another node's word"
                );
                let notice = MachinesEnded {
                    account,
                    machine,
                    trigger,
                };
                // Gone only at shutdown, when nothing is ended any more.
                let _ = ended.send(notice).await;
            }
        }
    }
}
