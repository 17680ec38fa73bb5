//! `sync_frame`: the strict y-websocket frame splitter,
//! `margin_server::sync::frame::messages` (server/src/sync/frame.rs).
//!
//! Every binary WebSocket frame an editor sends on `/documents/{id}/sync`
//! goes through it before anything else, so it must never panic on any
//! bytes. When it accepts a frame, this pins what frame.rs promises:
//!
//! - at most 64 messages, and only sync, awareness and awareness-query
//!   messages (auth and custom types are refused, so the document task's
//!   "refused before they get here" arm stays unreachable);
//! - every message re-encodes (`Message::encode_v1`), and the re-encoded
//!   frame is no longer than the original: re-encoding writes minimal
//!   varints, drops bytes a state vector or awareness update left unread
//!   inside its buffer and collapses repeated client ids, but never adds;
//! - the re-encoded frame is itself accepted and splits into equal
//!   messages (the splitter and yrs agree on message boundaries).
//!
//! Byte equality of the re-encoding is not pinned: lib0 varints may be
//! overlong and state vectors and awareness updates are hash maps, whose
//! order is not kept.
#![no_main]

use libfuzzer_sys::fuzz_target;
use margin_server::sync::frame::messages;
use yrs::sync::Message;
use yrs::updates::encoder::Encode;

/// `MAX_MESSAGES_PER_FRAME` in frame.rs (private there).
const MAX_MESSAGES_PER_FRAME: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Ok(split) = messages(data) else {
        return;
    };
    assert!(
        split.len() <= MAX_MESSAGES_PER_FRAME,
        "{} messages",
        split.len()
    );
    let mut again = Vec::with_capacity(data.len());
    for message in &split {
        assert!(
            matches!(
                message,
                Message::Sync(_) | Message::Awareness(_) | Message::AwarenessQuery
            ),
            "accepted an unsupported message: {message:?}"
        );
        again.extend(message.encode_v1());
    }
    assert!(
        again.len() <= data.len(),
        "re-encoding grew the frame from {} to {} bytes",
        data.len(),
        again.len()
    );
    assert_eq!(
        messages(&again).as_ref(),
        Ok(&split),
        "the re-encoded frame does not split into the same messages"
    );
});
