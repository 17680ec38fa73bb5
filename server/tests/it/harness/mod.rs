//! Test harness: isolated databases, a real `margin` process, and a `yrs`
//! y-websocket client.

pub mod api;
pub mod client;
pub mod db;
pub mod inproc;
pub mod link;
pub mod proxy;
pub mod server;
pub mod sse;

pub use api::Api;
pub use client::SyncClient;
pub use db::TestDb;
pub use inproc::InProcess;
pub use link::LinkClient;
pub use proxy::Proxy;
pub use server::Server;
pub use sse::{Sse, SseEvent};

/// Declares each test once per backend: `name::sqlite` and `name::postgres`.
/// The PostgreSQL variant fails when `TEST_DATABASE_URL` is unset, never
/// passes having done nothing: without PostgreSQL, nextest's `sqlite-only`
/// profile (`.config/nextest.toml`, which `.ci/test` picks) skips it and
/// counts it as skipped.
#[macro_export]
macro_rules! on_both_backends {
    ($(async fn $name:ident($db:ident) $body:block)*) => {
        $(
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                #[allow(unused_imports)]
                use pretty_assertions::assert_eq;

                async fn body($db: $crate::harness::TestDb) $body

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    body($crate::harness::TestDb::sqlite()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    body($crate::harness::TestDb::postgres_or_fail().await).await;
                }
            }
        )*
    };
}
