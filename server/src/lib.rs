//! The `margin` server: HTTP and WebSocket wiring, storage, auth and the
//! embedded browser editor. Domain logic lives in `margin-decisions` and
//! `margin-planner`; wire shapes in `margin-protocol`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod admission;
pub mod auth;
pub mod cli;
pub mod cluster;
pub mod demo;
#[cfg(test)]
mod future_size;
pub mod http;
pub mod link;
pub mod machine;
pub mod mcp_stdio;
pub mod metrics;
pub mod serve;
pub mod sessions;
pub mod sockets;
pub mod storage;
pub mod sync;
pub mod telemetry;
pub mod tools;
pub mod watchers;
