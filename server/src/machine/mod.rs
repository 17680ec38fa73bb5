//! A machine's link at `/machine` (SPEC L1–L9, C2): the loop that
//! serves one link ([`socket`]: hello, heartbeats, credential renewal,
//! refusals, detach), and in a cluster its mirror on every other node
//! ([`relay`]) and a link mirrored here ([`relayed`]). Each loop parses
//! the machine's messages and hands them to `Sessions`; what sessions send
//! comes back through the link's handle (`link`).

pub mod relay;
pub mod relayed;
pub mod socket;
