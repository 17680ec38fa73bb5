//! Margin's sync core: what an editor's y-websocket frames may do to a
//! document, decided without sockets, storage or clocks.
//!
//! A member's socket is a trust boundary. yrs 0.28 corrupts its own memory
//! on some updates that no Yjs client writes (server/fuzz/regressions), so
//! no byte an editor sends reaches yrs before this crate has read it in
//! safe Rust and found it to be what a real client could send:
//!
//! - [`frame`] splits a WebSocket frame into y-websocket messages and reads
//!   state vectors and awareness updates itself;
//! - [`update`] decodes a Yjs v1 update strictly, with a bound on every
//!   count ([`lib0`] for the primitives, [`json`] for embedded JSON);
//! - [`known`] holds where every struct of the document sits and checks an
//!   update against it (no holes, references written before, parents that
//!   are types, deletions of what is known);
//! - [`Refusal`] names the invariant a refused update broke;
//! - [`LiveDocument`] is a loaded document driven by frames: it applies
//!   only what the checks accept, binds each client id to the member who
//!   wrote it first, and returns effects (reply, broadcast, commit this
//!   change, close this sender) for the caller to carry out.
//!
//! It performs no I/O: callers hand it bytes and get values back.
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod content;
pub mod document;
#[cfg(any(test, feature = "encode"))]
pub mod encode;
pub mod frame;
pub mod json;
pub mod known;
pub mod lib0;
pub mod load;
pub mod messages;
pub mod order;
pub mod refusal;
pub mod update;

pub use document::{Access, Change, Close, Effect, LiveDocument, MemberId, Owner, Written};
pub use known::{Checked, Known, Suspect};
pub use load::{LoadFailed, Skipped, LEARN_BESIDE_BYTES};
pub use refusal::{Id, Malformed, Reference, Refusal};
pub use update::{decode, Update};
