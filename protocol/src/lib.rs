//! Margin's wire types.
//!
//! Every shape that crosses the network — HTTP request and response bodies,
//! the WebSocket close codes and limits of document sync — is defined here
//! once, with serde. Other crates convert their domain types to and from these
//! by hand. This crate performs no I/O.
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod admin;
pub mod chat;
mod codes;
pub mod constants;
pub mod decisions;
pub mod document_feed;
pub mod documents;
pub mod error;
pub mod kept;
pub mod link;
pub mod mcp;
pub mod refusal;
pub mod schema;
pub mod sessions;
pub mod sync;
pub mod tools;

#[cfg(test)]
mod testing;

pub use documents::{
    AddMember, BlockEntry, CreateDocument, DocumentInfo, DocumentList, Me, MemberInfo, MemberList,
    OutlineView, RenameDocument, Role,
};
pub use error::{Code, ErrorBody, ErrorCode, ErrorDetail};
pub use refusal::RefusalCode;
