//! The session's link: a machine's `resume` moving the session to its link
//! (SPEC L3), `resumed` out on it, and the link lost (L2, L7, L9).

use margin_planner::{LinkLoss, Millis};
use tokio::time::Instant;
use tracing::info;

use super::{Driver, RETRY_PAUSE};
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
            // Nothing is announced (SPEC L9).
            LinkEnd::Shutdown => return,
            // A takeover moved the sessions the new link's `resume` named;
            // one still on the old link was left out of it, and is away as
            // if its link had dropped (carried on below if the machine
            // never answered in it).
            LinkEnd::Superseded | LinkEnd::Dropped if lost.resumable => LinkLoss::Dropped,
            LinkEnd::Detached if lost.resumable => LinkLoss::Detached,
            _ => LinkLoss::Ended,
        };
        self.record(Unrecorded::LinkLost(loss), now).await;
        if self.session.released().is_some() {
            return;
        }
        info!(?loss, "Planner away; session kept");
        // The machine may have come back on a newer link, and resumed there
        // before this one was noticed dead: a session it never answered in
        // was not away then, so its resume left it out, though its `invoke`
        // may have died unread with this link (SPEC L10).
        self.carry_on_unheard(lost.id, now).await;
    }

    /// Carries a session that is away, and that its machine never answered
    /// in, on to the machine's newest link here newer than link `after`,
    /// as a `resume` on it would have (SPEC L10): no `resume` names a
    /// session whose `invoke` died unread, so none would carry it on. A
    /// machine that did read the `invoke` ignores it the second time.
    pub(super) async fn carry_on_unheard(&mut self, after: u64, now: Millis) {
        if !(self.session.unheard() && self.session.is_away()) {
            return;
        }
        let newer = self
            .shared
            .links
            .newest_of(self.session.machine())
            .filter(|newer| newer.id > after);
        if let Some(newer) = newer {
            let id = newer.id;
            if self
                .resume(newer, margin_planner::Held::default(), now)
                .await
                .is_some()
            {
                self.attach(id);
            }
        }
    }

    /// Commits what became of the machine while the session has no link,
    /// or, if storage refuses it, tries again after a pause: until it is
    /// committed nothing of it is shown, and the session would show its
    /// machine linked for good.
    pub(super) async fn record(&mut self, unrecorded: Unrecorded, now: Millis) {
        self.unrecorded = None;
        // A link attached since makes it moot.
        if self.link.is_some() || self.attaching.is_some() {
            return;
        }
        let stepped = match unrecorded {
            Unrecorded::LinkLost(loss) => {
                self.apply(|session| session.handle_link_lost(loss, now))
                    .await
            }
            // Only a session still away: one a later `resume` carried on
            // stays.
            Unrecorded::NotResumed if self.session.is_away() => {
                self.apply(|session| session.handle_not_resumed(now)).await
            }
            Unrecorded::NotResumed => return,
        };
        if stepped.is_err() {
            self.unrecorded = Some(unrecorded);
            self.pause = Some(Instant::now() + RETRY_PAUSE);
        }
    }
}

/// What became of the machine, not yet committed.
#[derive(Clone, Copy, Debug)]
pub(super) enum Unrecorded {
    /// Its link was lost.
    LinkLost(LinkLoss),
    /// It did not come back to resume the session in time.
    NotResumed,
}
