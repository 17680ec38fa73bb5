//! Margin's document model over `yrs`.
//!
//! This crate owns how a plan document is seen as a list of **blocks**: the
//! [`Outline`] of a revision, each block's normalised text, its `blake3`
//! [`Digest`] and its [`BlockIdentity`] (SPEC S1, S4).
//!
//! It performs no I/O: callers hand it a `yrs` document (or a transaction on
//! one) and get values back. Storage, sockets and clocks belong to `server`.
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod block;
mod outline;

pub use block::{normalise, Block, BlockIdentity, Digest};
pub use outline::{Outline, FRAGMENT_NAME};
