//! `sync_frame`: the strict y-websocket frame splitter,
//! `margin_sync_core::frame::messages` (server/sync-core/src/frame.rs).
//!
//! Every binary WebSocket frame an editor sends on `/documents/{id}/sync`
//! goes through it before anything else, so it must never panic on any
//! bytes. When it accepts a frame, this pins what frame.rs promises:
//!
//! - at most 64 messages;
//! - every message encodes again as yrs writes it, and the encoded frame
//!   is itself accepted and splits into equal messages (the splitter and
//!   yrs agree on message boundaries and contents);
//! - the encoded frame is no longer than the original, since the splitter
//!   takes only minimal varints and no bytes left inside a message.
//!
//! Byte equality of the re-encoding is not pinned: state vectors and
//! awareness updates are hash maps, whose order is not kept.
#![no_main]

use libfuzzer_sys::fuzz_target;
use margin_sync_core::frame::{messages, Message, MAX_MESSAGES_PER_FRAME};
use yrs::sync::{Message as YMessage, SyncMessage};
use yrs::updates::encoder::Encode;

fn encoded(message: &Message<'_>) -> Vec<u8> {
    match message {
        Message::SyncStep1(vector) => YMessage::Sync(SyncMessage::SyncStep1(vector.clone())),
        Message::SyncStep2(update) => YMessage::Sync(SyncMessage::SyncStep2(update.to_vec())),
        Message::Update(update) => YMessage::Sync(SyncMessage::Update(update.to_vec())),
        Message::Awareness(update) => YMessage::Awareness(update.clone()),
        Message::AwarenessQuery => YMessage::AwarenessQuery,
    }
    .encode_v1()
}

fuzz_target!(|data: &[u8]| {
    let Ok(split) = messages(data) else {
        return;
    };
    assert!(
        split.len() <= MAX_MESSAGES_PER_FRAME,
        "{} messages",
        split.len()
    );
    let again: Vec<u8> = split.iter().flat_map(encoded).collect();
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
