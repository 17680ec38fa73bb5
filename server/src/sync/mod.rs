//! Document sync over the y-websocket protocol (SPEC S2, S3): one task per
//! loaded document ([`document`]) with its decision cards ([`cards`]), a
//! registry that finds or starts it ([`hub`]), and the socket wiring
//! ([`socket`]). What a frame may do to a
//! document is decided by the sans-IO sync core, `margin_sync_core`; the
//! task carries out what it says.

mod background;
pub mod cards;
pub mod command;
pub mod compaction;
pub mod conn;
pub mod decide;
pub mod document;
mod encoded_reads;
pub mod forward;
pub mod hub;
pub mod load;
mod reads;
pub mod socket;
pub mod writes;

pub use compaction::Compaction;
pub use hub::{Hub, HubSettings};
