//! Margin's document model over `yrs`, and the decision engine.
//!
//! This crate owns how a plan document is seen as a list of **blocks** — the
//! [`Outline`] of a revision, each block's normalised text, its `blake3`
//! [`Digest`] and its [`BlockIdentity`] (SPEC S1, S4), kept current as the
//! document changes by [`LiveOutline`] — the reads the Planner
//! made ([`ReadCache`], SPEC S5), decision cards ([`DecisionCard`]) and the
//! `open_decisions` engine ([`open_decisions`], SPEC D1–D10).
//!
//! It performs no I/O: callers hand it a `yrs` document, outlines and cards,
//! and get values back. Storage, sockets and clocks belong to `server`.
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod block;
mod capture;
mod card;
mod edit;
mod live;
mod outline;
mod people;
mod read_json;
mod reads;
mod refusal;
pub mod wire;

pub use block::{normalise, Block, BlockIdentity, Digest};
pub use capture::{
    open_decisions, Access, BatchError, Capture, CaptureSummary, DocumentState, InvalidInput,
    NewCard, Outcome, Strictness,
};
pub use card::{
    check_text, excerpt, limits, Anchor, Answer, CardSpec, CardState, Choice, DecisionCard, Key,
    Passage, ResponseKind, EXCERPT_CHARS,
};
pub use edit::{apply_edits, BlockKind, Edit, EditError, MAX_EDITS, MAX_EDIT_TEXT_BYTES};
pub use live::LiveOutline;
pub use outline::{Blocks, Outline, FRAGMENT_NAME};
pub use people::{act, withdraw, Action, ActionError};
pub use reads::{ReadCache, DEFAULT_READS};
pub use refusal::{Cause, Refusal};
