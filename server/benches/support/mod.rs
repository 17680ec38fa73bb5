//! The benchmark kit: everything the benches share, so each bench file
//! holds only its scenario and a figure means the same in every report.
//! Each bench binary includes this folder as `mod support` and uses part
//! of it (hence the `allow(dead_code)` where it is included).
//!
//! | module | owns |
//! |---|---|
//! | [`knobs`] | env knobs, `PARTS`, the `--bench` gate, the open-files check |
//! | [`cpu`] | `/proc` CPU: server, client, peer, other; this process's CPU clock; waiting for quiet |
//! | [`process`] | `/proc` memory, fds, TCP counters, load average, limits |
//! | [`report`] | the report's first lines, percentiles, ratios, table heads |
//! | [`schedule`] | an open loop: item `k` due at `start + k / rate`, and how late each went out |
//! | [`margin`] | the binary under test; starting and stopping `margin serve` |
//! | [`accounts`] | accounts, tokens, machines, documents written before a run |
//! | [`machine`] | a machine's link driven by hand: connect, `hello`, send, the next message, one tool call; split, with heartbeats answered |
//! | [`planner`] | a Planner's machine link, its turns and tool calls; accounts, machines, documents, Chat and a document's Planner over HTTP |
//! | [`sse`] | an SSE client on a raw HTTP/1.1 connection: the response head, chunked decoding, frames |
//! | [`peers`] | peer servers' runtime and listener, in or out of process |
//! | [`feed_peer`] | the feed bench's peer: `run` reports in, `run_updated` frames out over SSE, from a cursor or live |
//! | [`link_peer`] | the link bench's peer: `welcome`, and one fixed `tool-result` for every call |
//! | [`sync`] | a y-websocket client on `yrs` |
//! | [`postgres`] | a bench's own PostgreSQL schema |

pub(crate) mod accounts;
pub(crate) mod cpu;
pub(crate) mod feed_peer;
pub(crate) mod knobs;
pub(crate) mod link_peer;
pub(crate) mod machine;
pub(crate) mod margin;
pub(crate) mod peers;
pub(crate) mod planner;
pub(crate) mod postgres;
pub(crate) mod process;
pub(crate) mod report;
pub(crate) mod schedule;
pub(crate) mod sse;
pub(crate) mod sync;
