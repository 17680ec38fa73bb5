//! A tool call's result recorded with the call's own writes (SPEC W1): the
//! session's side of the document task's transaction. Given the call's
//! output, it steps a clone of the session and hands back the write that
//! records the result; once that transaction committed, the driver takes
//! the stepped session as the session.

use margin_planner::{CallId, Millis, PlannerSession, Step, ToolOutcome};
use margin_protocol::sessions::SessionSnapshot;
use margin_protocol::tools::ToolOutput;
use tracing::warn;

use super::commit::{write_of, Keeping, Written};
use crate::storage::SessionWrite;
use crate::tools;

/// A call's recording, from its start to its commit.
pub(super) struct Recording {
    session: PlannerSession,
    feed: SessionSnapshot,
    call: CallId,
    now: Millis,
    keeping: Keeping,
    /// Built for the transaction under way.
    pending: Option<(PlannerSession, Step, Written)>,
    /// Committed with the call's writes.
    committed: Option<(PlannerSession, Step, Written)>,
}

impl Recording {
    /// A recording of `call` for `session` as it is now, its feed at `feed`.
    pub(super) fn new(
        session: PlannerSession,
        feed: SessionSnapshot,
        call: CallId,
        now: Millis,
        keeping: Keeping,
    ) -> Self {
        Recording {
            session,
            feed,
            call,
            now,
            keeping,
            pending: None,
            committed: None,
        }
    }

    /// The session, step and write the call's transaction committed, if it
    /// did.
    pub(super) fn take_committed(&mut self) -> Option<(PlannerSession, Step, Written)> {
        self.committed.take()
    }
}

impl tools::Recording for Recording {
    fn record(&mut self, output: &ToolOutput) -> Option<SessionWrite> {
        let mut next = self.session.clone();
        let outcome = ToolOutcome {
            result: Ok(output.clone()),
            answered: Vec::new(),
            // A writing tool's result is always kept.
            bytes: 0,
        };
        let step = next.handle_tool_finished(self.call.clone(), outcome, self.now);
        match write_of(&next, &step, &self.feed, self.keeping) {
            Ok(written) => {
                let write = written.write.clone();
                self.pending = Some((next, step, written));
                Some(write)
            }
            Err(error) => {
                // Recorded after the commit instead, by the driver.
                warn!(%error, call = %self.call, "a call's result could not ride with its writes");
                None
            }
        }
    }

    fn committed(&mut self) {
        self.committed = self.pending.take();
    }
}
