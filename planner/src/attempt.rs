//! Run attempts (SPEC R2, T4): a strict state machine per attempt, a
//! declared capacity, and results that a newer attempt made obsolete.
//!
//! ```text
//! prepared → launching → running → result pending → accepted
//!                │           │  └──────────────→ failed | interrupted
//!                └─(ambiguous failure)→ unknown ─→ (result pending | failed | interrupted)
//! any live state → cancel requested (not an end: the work may still finish)
//! ```
//!
//! An ambiguous launch failure becomes `unknown`: it never proves the work
//! did not start, so the attempt keeps its capacity slot until a terminal
//! observation arrives. Conflicting terminal observations also make it
//! `unknown`. Every transition is checked in [`Attempts`]; callers see only
//! `handle_*` inputs and the resulting states.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::RunId;

/// An attempt's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AttemptState {
    /// Admitted against capacity, not yet dispatched.
    Prepared,
    /// Dispatched; start not yet observed.
    Launching,
    /// Observed running.
    Running,
    /// Asked to stop; still live until an end is observed.
    CancelRequested,
    /// The evidence is ambiguous or conflicting; it may be running.
    Unknown,
    /// Finished well; its result waits to be accepted.
    ResultPending,
    /// Its result was accepted.
    Accepted,
    /// Finished badly.
    Failed,
    /// Stopped before finishing.
    Interrupted,
}

impl AttemptState {
    /// Whether the attempt holds a capacity slot: everything that may still
    /// be running, pending and unknown attempts included.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            AttemptState::Prepared
                | AttemptState::Launching
                | AttemptState::Running
                | AttemptState::CancelRequested
                | AttemptState::Unknown
        )
    }
}

/// How an attempt ended, as observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Ending {
    /// It completed.
    Completed,
    /// It failed.
    Failed,
    /// It was interrupted.
    Interrupted,
}

/// Identifies an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AttemptId(pub u64);

/// Why a transition was refused; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptError {
    /// No free slot: live attempts (pending and unknown included) fill the
    /// declared capacity.
    CapacityFull {
        /// The declared capacity.
        capacity: usize,
    },
    /// No such attempt.
    UnknownAttempt(AttemptId),
    /// The attempt is not in a state that allows this.
    IllegalTransition {
        /// The attempt.
        attempt: AttemptId,
        /// Its state.
        from: AttemptState,
        /// What was asked.
        action: &'static str,
    },
    /// A newer attempt of the same run exists: this result is obsolete and
    /// must not replace newer state (SPEC T4).
    Obsolete {
        /// The attempt whose result arrived late.
        attempt: AttemptId,
        /// The newer attempt.
        newer: AttemptId,
    },
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptError::CapacityFull { capacity } => write!(
                f,
                "no free slot: {capacity} attempts are live (pending and unknown attempts count)"
            ),
            AttemptError::UnknownAttempt(id) => write!(f, "no attempt {}", id.0),
            AttemptError::IllegalTransition {
                attempt,
                from,
                action,
            } => {
                write!(f, "attempt {} is {from:?}; it cannot {action}", attempt.0)
            }
            AttemptError::Obsolete { attempt, newer } => write!(
                f,
                "attempt {} was superseded by attempt {}; its result is not applied",
                attempt.0, newer.0
            ),
        }
    }
}

impl std::error::Error for AttemptError {}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Attempt {
    run: RunId,
    state: AttemptState,
    ending: Option<Ending>,
}

/// The attempts of one session's runs, under one declared capacity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempts {
    capacity: usize,
    attempts: BTreeMap<AttemptId, Attempt>,
    next: u64,
}

impl Attempts {
    /// Attempts under a declared `capacity` (0: none may run).
    pub fn new(capacity: usize) -> Self {
        Attempts {
            capacity,
            attempts: BTreeMap::new(),
            next: 1,
        }
    }

    /// The declared capacity: most attempts live at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The state of `attempt`, if it exists.
    pub fn state(&self, attempt: AttemptId) -> Option<AttemptState> {
        self.attempts.get(&attempt).map(|a| a.state)
    }

    /// How many attempts hold a slot.
    pub fn live(&self) -> usize {
        self.attempts.values().filter(|a| a.state.is_live()).count()
    }

    /// Admits a new attempt of `run` if a slot is free.
    pub fn handle_prepare(&mut self, run: RunId) -> Result<AttemptId, AttemptError> {
        if self.live() >= self.capacity {
            return Err(AttemptError::CapacityFull {
                capacity: self.capacity,
            });
        }
        let id = AttemptId(self.next);
        self.next += 1;
        self.attempts.insert(
            id,
            Attempt {
                run,
                state: AttemptState::Prepared,
                ending: None,
            },
        );
        Ok(id)
    }

    /// The attempt was dispatched.
    pub fn handle_launch(&mut self, id: AttemptId) -> Result<(), AttemptError> {
        self.move_to(
            id,
            "launch",
            &[AttemptState::Prepared],
            AttemptState::Launching,
        )
    }

    /// The attempt was observed running.
    pub fn handle_started(&mut self, id: AttemptId) -> Result<(), AttemptError> {
        self.move_to(
            id,
            "start",
            &[AttemptState::Launching, AttemptState::Unknown],
            AttemptState::Running,
        )
    }

    /// The launch failed in a way that does not show whether the work
    /// started: the attempt becomes `unknown` and keeps its slot.
    pub fn handle_ambiguous_failure(&mut self, id: AttemptId) -> Result<(), AttemptError> {
        self.move_to(
            id,
            "fail ambiguously",
            &[AttemptState::Launching],
            AttemptState::Unknown,
        )
    }

    /// Stop was asked. Not an end: the attempt stays live until one is seen.
    pub fn handle_cancel(&mut self, id: AttemptId) -> Result<(), AttemptError> {
        let live = [
            AttemptState::Prepared,
            AttemptState::Launching,
            AttemptState::Running,
            AttemptState::Unknown,
            AttemptState::CancelRequested,
        ];
        self.move_to(id, "be cancelled", &live, AttemptState::CancelRequested)
    }

    /// Sight of a live attempt was lost (its machine's link closed): it may
    /// still be running, so it becomes `unknown` and keeps its slot.
    pub fn handle_lost(&mut self, id: AttemptId) -> Result<(), AttemptError> {
        let live = [
            AttemptState::Launching,
            AttemptState::Running,
            AttemptState::CancelRequested,
        ];
        self.move_to(id, "be lost", &live, AttemptState::Unknown)
    }

    /// An end was observed. The same end twice is idempotent; a different
    /// second end makes the attempt `unknown`.
    pub fn handle_ended(&mut self, id: AttemptId, ending: Ending) -> Result<(), AttemptError> {
        let attempt = self
            .attempts
            .get_mut(&id)
            .ok_or(AttemptError::UnknownAttempt(id))?;
        match attempt.ending {
            Some(seen) if seen == ending => return Ok(()),
            Some(_) => {
                attempt.state = AttemptState::Unknown;
                return Ok(());
            }
            None => {}
        }
        if !matches!(
            attempt.state,
            AttemptState::Launching
                | AttemptState::Running
                | AttemptState::CancelRequested
                | AttemptState::Unknown
        ) {
            return Err(AttemptError::IllegalTransition {
                attempt: id,
                from: attempt.state,
                action: "end",
            });
        }
        attempt.ending = Some(ending);
        attempt.state = match ending {
            Ending::Completed => AttemptState::ResultPending,
            Ending::Failed => AttemptState::Failed,
            Ending::Interrupted => AttemptState::Interrupted,
        };
        Ok(())
    }

    /// Accepts a pending result — unless a newer attempt of the same run
    /// exists, whose state it must not overwrite (SPEC T4).
    pub fn handle_accept(&mut self, id: AttemptId) -> Result<(), AttemptError> {
        let run = &self
            .attempts
            .get(&id)
            .ok_or(AttemptError::UnknownAttempt(id))?
            .run;
        let newer = self
            .attempts
            .range(AttemptId(id.0 + 1)..)
            .find(|(_, a)| &a.run == run)
            .map(|(newer, _)| *newer);
        if let Some(newer) = newer {
            return Err(AttemptError::Obsolete { attempt: id, newer });
        }
        self.move_to(
            id,
            "be accepted",
            &[AttemptState::ResultPending],
            AttemptState::Accepted,
        )
    }

    /// The one place an attempt's state changes by rule.
    fn move_to(
        &mut self,
        id: AttemptId,
        action: &'static str,
        from: &[AttemptState],
        to: AttemptState,
    ) -> Result<(), AttemptError> {
        let attempt = self
            .attempts
            .get_mut(&id)
            .ok_or(AttemptError::UnknownAttempt(id))?;
        if !from.contains(&attempt.state) {
            return Err(AttemptError::IllegalTransition {
                attempt: id,
                from: attempt.state,
                action,
            });
        }
        attempt.state = to;
        Ok(())
    }
}
