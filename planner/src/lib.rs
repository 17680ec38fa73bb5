//! Margin's Planner sessions: lifecycle, turns, host requests, runs and plans
//! (SPEC P, T, L, U, R), as sans-IO state machines fed events and a clock.
//!
//! This crate performs no I/O. It is part of the workspace layout from the
//! start so that `server` wiring has a fixed home for it; the session manager
//! itself arrives with the Planner-sessions work.
#![warn(missing_docs)]
