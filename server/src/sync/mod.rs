//! Document sync over the y-websocket protocol (SPEC S2, S3): one task per
//! loaded document ([`document`]), a registry that finds or starts it
//! ([`hub`]), and the socket wiring ([`socket`]).

mod background;
pub mod command;
pub mod compaction;
pub mod conn;
pub mod decide;
pub mod document;
mod editor;
mod encoded_reads;
pub mod frame;
pub mod hub;
pub mod load;
mod messages;
mod reads;
pub mod socket;
pub mod writes;

pub use compaction::Compaction;
pub use hub::{Hub, HubSettings};
