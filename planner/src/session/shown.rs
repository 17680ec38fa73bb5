//! What people see of a session ([`Shown`]): its view as of its last
//! committed step, kept beside the session by its driver so the registry,
//! `/metrics` and the Planner panel read it without a copy of the session.

use margin_protocol::link::PlannerView;

use super::ReleaseReason;
use crate::ids::Millis;

/// A session's view as committed, and whether it has ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shown {
    /// The view; its runs' ages are brought to the reader's `now` by
    /// [`Shown::view`].
    view: PlannerView,
    released: Option<ReleaseReason>,
    unheard: bool,
}

impl Shown {
    pub(super) fn new(view: PlannerView, released: Option<ReleaseReason>, unheard: bool) -> Self {
        Shown {
            view,
            released,
            unheard,
        }
    }

    /// The view at `now`: a run's true age runs on with the clock until it
    /// ends (SPEC P4).
    pub fn view(&self, now: Millis) -> PlannerView {
        let mut view = self.view.clone();
        for run in &mut view.runs {
            let until = run.ended_at.unwrap_or(now.0);
            run.age_ms = until.saturating_sub(run.started_at);
        }
        view
    }

    /// Whether the machine is away.
    pub fn is_away(&self) -> bool {
        self.view.disconnected
    }

    /// Whether the machine has answered nothing in it yet (see
    /// [`super::PlannerSession::unheard`]).
    pub fn is_unheard(&self) -> bool {
        self.unheard
    }

    /// Why the session ended, once it has.
    pub fn released(&self) -> Option<ReleaseReason> {
        self.released
    }
}
