//! Encoding the y-websocket messages the server sends.

use axum::body::Bytes;
use yrs::sync::{Awareness, AwarenessUpdate, Message, SyncMessage};
use yrs::updates::encoder::Encode;
use yrs::{ClientID, ReadTxn, StateVector, Transact};

/// `sync step 1` with the server's state vector.
pub fn step1(awareness: &Awareness) -> Bytes {
    let sv = awareness.doc().transact().state_vector();
    encode(Message::Sync(SyncMessage::SyncStep1(sv)))
}

/// `sync step 2`: everything the server has that `remote` lacks.
pub fn step2(awareness: &Awareness, remote: &StateVector) -> Bytes {
    let diff = awareness.doc().transact().encode_diff_v1(remote);
    encode(Message::Sync(SyncMessage::SyncStep2(diff)))
}

/// A document `update` for the other clients.
pub fn update(delta: Vec<u8>) -> Bytes {
    encode(Message::Sync(SyncMessage::Update(delta)))
}

/// The awareness states of `clients` (a removed client encodes as `null`).
pub fn awareness_of(awareness: &Awareness, clients: &[ClientID]) -> Option<Bytes> {
    let update = awareness
        .update_with_clients(clients.iter().copied())
        .ok()?;
    non_empty(update)
}

/// Every live awareness state, for a client that just joined or asked.
pub fn awareness_all(awareness: &Awareness) -> Option<Bytes> {
    non_empty(awareness.update().ok()?)
}

fn non_empty(update: AwarenessUpdate) -> Option<Bytes> {
    (!update.clients.is_empty()).then(|| encode(Message::Awareness(update)))
}

fn encode(message: Message) -> Bytes {
    Bytes::from(message.encode_v1())
}
