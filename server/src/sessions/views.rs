//! What people see of the sessions: a document's Planner as its view, and
//! how many sessions are in each state (`/metrics`).

use margin_planner::{ReleaseReason, ReleaseTrigger, Shown};
use margin_protocol::link::{PlannerState, PlannerView};

use super::{now, Sessions};
use crate::storage::Account;

impl Sessions {
    /// How many sessions run here in each state their view names, for
    /// `/metrics`.
    pub fn states(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let shown: Vec<Shown> = self
            .shared
            .lock()
            .sessions
            .values()
            .filter_map(|live| live.shown.borrow().clone())
            .collect();
        let mut states = std::collections::BTreeMap::new();
        let now = now();
        for session in shown.iter().filter(|s| s.released().is_none()) {
            *states.entry(session.view(now).state.as_str()).or_default() += 1;
        }
        states
    }

    /// The document's Planner as people see it (SPEC B1a): its session's
    /// view, or with none what a `@planner` would find — a machine of
    /// `owner`'s linked, the last session stopped, or nothing.
    pub fn view(&self, document: &str, owner: &Account) -> PlannerView {
        let (shown, stopped, closed) = {
            let registry = self.shared.lock();
            let shown = registry
                .documents
                .get(document)
                .and_then(|id| registry.sessions.get(id))
                .and_then(|live| live.shown.borrow().clone());
            let closed = registry.closed.contains(document);
            (shown, registry.stopped.contains(document), closed)
        };
        match shown {
            Some(session) if session.released().is_none() => session.view(now()),
            // Archived: `@planner` binds nothing here (SPEC P3).
            _ if closed => PlannerView::default(),
            ended => {
                // No session: what a `@planner` would find (SPEC T1).
                let stopped = stopped
                    || ended.is_some_and(|session| {
                        session.released() == Some(ReleaseReason::Trigger(ReleaseTrigger::Stop))
                    });
                let linked = self.shared.links.of_account(&owner.id);
                let state = match (stopped, &linked) {
                    (true, _) => PlannerState::Stopped,
                    (false, Some(_)) => PlannerState::Available,
                    (false, None) => PlannerState::Unlinked,
                };
                PlannerView {
                    state,
                    machine: linked.map(|link| link.machine.name.clone()),
                    ..PlannerView::default()
                }
            }
        }
    }
}
