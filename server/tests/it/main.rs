//! Integration tests of the `margin` binary and its storage, on SQLite and —
//! when `TEST_DATABASE_URL` names one — PostgreSQL.

mod harness;

mod acknowledged;
mod archive;
mod assets;
mod bounds;
mod cli;
mod cluster;
mod connector;
mod connector_scripted;
mod crash;
mod credentials;
mod decisions;
mod demo_planner;
mod document_feed;
mod documents;
mod feed;
mod fencing;
mod http;
mod isolation;
mod keeping;
mod layering;
mod link;
mod members;
mod metrics;
mod openapi;
mod plans;
mod releases;
mod repairs;
mod resume;
mod storage;
mod stranded;
mod survival;
mod sync;
mod throttle;
mod trials;
mod turns;
