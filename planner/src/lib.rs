//! Margin's Planner sessions: lifecycle, turns, host requests, runs and plans
//! (SPEC P, T, L, U, R), as sans-IO state machines fed events and a clock.
//!
//! The session logic performs no I/O and reads no clock: every input carries
//! the caller's `now` ([`Millis`]) and every output is a value the caller
//! carries out. The server drives one [`Session`] per Planner session.
//!
//! The other side of the link, the Rust connector SDK a machine uses to link
//! to Margin and serve its Planner, is the `margin-sdk` crate (`sdk/rust`).
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod attempt;
mod ids;
pub mod plan;
pub mod reply;
mod session;
mod steering;

pub use attempt::{AttemptError, AttemptId, AttemptState, Attempts, Ending};
pub use ids::{Millis, RequestId, RunId, TurnId};
pub use session::{
    Effect, LinkLoss, ReleaseReason, ReleaseTrigger, ReplyOutcome, ResumeRefusal, RunCard,
    RunRefusal, RunStatus, Session, DEFAULT_ATTACH_GRACE, DEFAULT_IDLE, DEFAULT_RUN_CAPACITY,
};
pub use steering::Steering;
