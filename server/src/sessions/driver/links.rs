//! The session's link: a machine's `resume` moving the session to its link
//! (SPEC L3), `resumed` out on it, and the link lost (L2, L7, L9).

use margin_planner::{LinkLoss, Millis};
use tracing::info;

use super::Driver;
use crate::link::{Link, LinkEnd};
use crate::sessions::input::Resumed;

impl Driver {
    /// The first half of `resume` (SPEC L3): the session moves to `link`,
    /// its step is committed, and what it sends waits until `resumed` is
    /// out.
    pub(super) async fn resume(
        &mut self,
        link: Link,
        held: margin_planner::Held,
        now: Millis,
    ) -> Option<Resumed> {
        if self.session.released().is_some() {
            return None;
        }
        let superseded = self
            .link
            .take()
            .filter(|old| old.id != link.id && self.shared.links.is_open(old.id));
        let machine = link.machine.clone();
        self.attaching = Some((link, Vec::new()));
        let mut resumed = None;
        let step = self
            .apply(|session| {
                let moved = session.handle_moved(&machine.id, &machine.name, now);
                let (carried, step) = session.handle_resume(held, now);
                resumed = Some(carried);
                moved.and(step)
            })
            .await;
        if step.is_err() {
            // Not committed: the machine is told nothing of it, and finds
            // the session again with its next `resume`.
            self.attaching = None;
            return None;
        }
        info!(link = ?self.attaching.as_ref().map(|(l, _)| l.id), "Planner session resumed");
        resumed.map(|session| Resumed {
            session,
            superseded,
        })
    }

    /// `resumed` is out on `link`: what the resume decided goes now.
    pub(super) fn attach(&mut self, link: u64) {
        match self.attaching.take() {
            Some((attached, frames)) if attached.id == link => {
                for frame in frames {
                    attached.send_frame(frame);
                }
                self.link = Some(attached);
            }
            other => self.attaching = other,
        }
    }

    pub(super) async fn link_lost(&mut self, link: u64, end: LinkEnd, now: Millis) {
        let current = self.link.as_ref().filter(|l| l.id == link).cloned();
        let current = current.or_else(|| {
            self.attaching
                .as_ref()
                .filter(|(l, _)| l.id == link)
                .map(|(l, _)| l.clone())
        });
        let Some(lost) = current else {
            // A link the session had already left.
            return;
        };
        self.link = None;
        self.attaching = None;
        let loss = match end {
            // Nothing is announced (SPEC L9); a takeover moved the work.
            LinkEnd::Shutdown | LinkEnd::Superseded => return,
            LinkEnd::Dropped if lost.resumable => LinkLoss::Dropped,
            LinkEnd::Detached if lost.resumable => LinkLoss::Detached,
            _ => LinkLoss::Ended,
        };
        let _ = self
            .apply(|session| session.handle_link_lost(loss, now))
            .await;
        if self.session.released().is_none() {
            info!(?loss, "Planner away; session kept");
        }
    }
}
