//! Margin's Planner sessions (SPEC P, T, L, U, W, R): one sans-IO aggregate
//! per session — lifecycle and retention, turns and the reply policy, host
//! requests, runs, the durable plan and the tool journal — fed inputs and a
//! clock, returning what to commit and carry out.
//!
//! The crate performs no I/O and reads no clock: every input carries the
//! caller's `now` ([`Millis`]) and every output is a value the caller
//! carries out. The server runs one driver per [`PlannerSession`].
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
pub mod wording;

pub use attempt::{AttemptError, AttemptId, AttemptState, Attempts, Ending};
pub use ids::{CallId, CardId, Millis, RequestId, RunId, TurnId};
pub use session::{
    ChatLine, Effect, Entry, Held, LinkLoss, PlannerSession, Published, Record, ReleaseReason,
    ReleaseTrigger, RestoreError, ResumeRefusal, RunStatus, Shown, Snapshot, Start, Step,
    StoredResult, Timing, ToolOutcome, TurnEnd, DEFAULT_ATTACH_GRACE, DEFAULT_IDLE,
    DEFAULT_RUN_CAPACITY, KEPT_READ_BYTES,
};
