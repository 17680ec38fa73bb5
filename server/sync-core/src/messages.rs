//! The y-websocket messages the server sends, encoded.

use yrs::block::ClientID;
use yrs::encoding::write::Write;
use yrs::sync::protocol::{MSG_SYNC, MSG_SYNC_STEP_2};
use yrs::sync::{Awareness, AwarenessUpdate, Message, SyncMessage};
use yrs::updates::encoder::Encode;
use yrs::{ReadTxn, StateVector, Transact};

/// Sync step 1 with the document's state vector.
pub fn step1(awareness: &Awareness) -> Vec<u8> {
    let sv = awareness.doc().transact().state_vector();
    Message::Sync(SyncMessage::SyncStep1(sv)).encode_v1()
}

/// Sync step 2: everything the document holds that `remote` lacks.
pub fn step2(awareness: &Awareness, remote: &StateVector) -> Vec<u8> {
    let diff = awareness.doc().transact().encode_diff_v1(remote);
    Message::Sync(SyncMessage::SyncStep2(diff)).encode_v1()
}

/// Sync step 2 carrying `update` as it is: for a joiner holding nothing,
/// when `update` is all the document holds. Written straight into the
/// frame: `update` may be a whole stored snapshot, not worth a second copy.
pub fn step2_of(update: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(update.len() + 12);
    out.write_var(MSG_SYNC);
    out.write_var(MSG_SYNC_STEP_2);
    out.write_buf(update);
    out
}

/// A document update for the other members.
pub fn update(change: Vec<u8>) -> Vec<u8> {
    Message::Sync(SyncMessage::Update(change)).encode_v1()
}

/// The awareness states of `clients` (a removed client encodes as `null`).
pub fn awareness_of(awareness: &Awareness, clients: &[ClientID]) -> Option<Vec<u8>> {
    let update = awareness
        .update_with_clients(clients.iter().copied())
        .ok()?;
    non_empty(update)
}

/// Every live awareness state, for a member that just joined or asked.
pub fn awareness_all(awareness: &Awareness) -> Option<Vec<u8>> {
    non_empty(awareness.update().ok()?)
}

fn non_empty(update: AwarenessUpdate) -> Option<Vec<u8>> {
    (!update.clients.is_empty()).then(|| Message::Awareness(update).encode_v1())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step2_written_straight_is_the_frame_yrs_would_encode() {
        for len in [0, 1, 127, 128, 300_000] {
            let update: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let yrs = Message::Sync(SyncMessage::SyncStep2(update.clone())).encode_v1();
            assert_eq!(step2_of(&update), yrs, "an update of {len} bytes");
        }
    }
}
