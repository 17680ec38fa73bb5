//! Joining a document (SPEC S2, A1): a connection let into the task that
//! owns it, its membership, which leaves when dropped, and the count of
//! people viewing each document.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use margin_protocol::sync::close;
use margin_protocol::Role;
use tokio::sync::{mpsc, oneshot};

use super::{Hub, JOIN_ATTEMPTS};
use crate::sync::command::{Command, JoinRefused};
use crate::sync::conn::{self, Closer, Conn, ConnId, OutboxReader};

impl Hub {
    /// Joins `account`'s connection with `role` to document `id`, loading
    /// it if needed.
    pub async fn join(&self, id: &str, account: &str, role: Role) -> Result<Joined, JoinRefused> {
        let account: Arc<str> = Arc::from(account);
        for _ in 0..JOIN_ATTEMPTS {
            let mailbox = self.task_for(id)?;
            let (outbox_tx, outbox) =
                conn::outbox(self.inner.outbox_frames, self.inner.outbox_bytes);
            let closer = Closer::default();
            let conn_id = self.inner.next_conn.fetch_add(1, Ordering::Relaxed);
            let conn = Box::new(Conn {
                id: conn_id,
                account: account.clone(),
                role,
                outbox: outbox_tx,
                closer: closer.clone(),
            });
            let (reply, answer) = oneshot::channel();
            if mailbox.send(Command::Join { conn, reply }).await.is_err() {
                continue;
            }
            match answer.await {
                Ok(Ok(())) => {
                    self.viewer(id, 1);
                    self.confirm_access(id, &account, role, &closer).await;
                    return Ok(Joined {
                        id: conn_id,
                        mailbox: mailbox.clone(),
                        outbox,
                        closer,
                        membership: Membership {
                            hub: self.clone(),
                            document: id.to_owned(),
                            conn: conn_id,
                            mailbox,
                        },
                    });
                }
                Ok(Err(JoinRefused::Unloading)) | Err(_) => continue,
                Ok(Err(refused)) => return Err(refused),
            }
        }
        Err(JoinRefused::Unloading)
    }

    /// Closes a connection that joined with a role its member no longer
    /// has. The route checked the member before the join; an access change
    /// committed in between told the task before this connection was in it
    /// ([`Hub::access_changed`]), so it is told here instead. Once joined,
    /// the task tells it of every later change.
    pub(super) async fn confirm_access(
        &self,
        id: &str,
        account: &str,
        role: Role,
        closer: &Closer,
    ) {
        match self.inner.store.member_role(id, account).await {
            Ok(now) if now == Some(role) => {}
            Ok(now) => {
                let (code, reason) = conn::access_close(now);
                closer.close(code, reason);
            }
            Err(error) => {
                tracing::warn!(document = id, %error, "could not confirm a joining member's access");
                closer.close(
                    close::INTERNAL,
                    "could not confirm your access to the document; reconnect",
                );
            }
        }
    }

    /// A sync connection to `id` ended.
    pub fn viewer_left(&self, id: &str) {
        self.viewer(id, -1);
    }

    /// How many sync connections `id` has: the people viewing it.
    pub fn viewers(&self, id: &str) -> usize {
        self.inner
            .viewers
            .lock()
            .map(|v| v.get(id).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    pub(super) fn viewer(&self, id: &str, change: isize) {
        if let Ok(mut viewers) = self.inner.viewers.lock() {
            let count = viewers.entry(id.to_owned()).or_default();
            *count = count.saturating_add_signed(change);
            if *count == 0 {
                viewers.remove(id);
            }
        }
    }
}

/// A connection that has joined its document's task.
pub struct Joined {
    /// The connection's id.
    pub id: ConnId,
    /// Where to send its frames.
    pub mailbox: mpsc::Sender<Command>,
    /// Frames to write to it.
    pub outbox: OutboxReader,
    /// How the task closes it.
    pub closer: Closer,
    /// Leaves the document when dropped.
    pub membership: Membership,
}

/// A joined connection's place in its document: dropping it leaves (the
/// task forgets the member, the viewer count goes down), however the
/// connection ended — also when it never got to run, as when a WebSocket
/// upgrade failed after the join.
pub struct Membership {
    hub: Hub,
    document: String,
    conn: ConnId,
    mailbox: mpsc::Sender<Command>,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.hub.viewer_left(&self.document);
        let leave = Command::Leave { conn: self.conn };
        if let Err(mpsc::error::TrySendError::Full(leave)) = self.mailbox.try_send(leave) {
            // A busy document: wait for room, as a frame would.
            let mailbox = self.mailbox.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = mailbox.send(leave).await;
                });
            }
        }
    }
}
