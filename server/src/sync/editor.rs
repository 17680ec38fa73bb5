//! What an editor sends, taken in before the document task keeps it (SPEC
//! S2, A2): updates decoded and applied under `catch_unwind` (yrs 0.28.1
//! panics on inputs the fuzzer found: server/fuzz/regressions), a change
//! checked to decode again before it can be stored, updates waiting for
//! changes never sent bounded per document, and awareness states checked to
//! be what y-protocols parses.

use std::panic::{catch_unwind, AssertUnwindSafe};

use margin_protocol::sync::{close, MAX_PENDING_BYTES};
use tracing::warn;
use yrs::updates::decoder::Decode;
use yrs::{Doc, ReadTxn, StateVector, Transact, Update, WriteTxn};

use super::writes;

/// What applying an editor's update did.
pub struct Applied {
    /// The change it made, if any.
    pub change: Option<Vec<u8>>,
    /// Whether updates waiting for missing changes passed
    /// [`MAX_PENDING_BYTES`] and were dropped.
    pub overflowed: bool,
}

/// Why an update was refused: the close code and reason for its sender,
/// and whether the document it reached is now suspect.
pub struct Failed {
    pub code: u16,
    pub reason: String,
    pub poisoned: bool,
}

/// Decodes an editor's update. Decoding touches no document: a panic in it
/// only closes the sender.
pub fn decode(bytes: &[u8]) -> Result<Update, (u16, String)> {
    match catch_unwind(|| Update::decode_v1(bytes)) {
        Ok(decoded) => decoded.map_err(|e| (close::MALFORMED, format!("malformed update: {e}"))),
        Err(_) => Err((
            close::MALFORMED,
            "malformed update: it crashed the decoder".into(),
        )),
    }
}

/// Applies an editor's update of `bytes` to `doc`; returns the change it
/// made, if any, and whether what waits for missing changes passed
/// [`MAX_PENDING_BYTES`] (counted in `pending`) — then it was dropped. yrs
/// keeps an update whose dependencies are missing in memory until they
/// come; they never came from a client that sent 512 MiB of such updates.
pub fn apply(
    doc: &Doc,
    update: Update,
    bytes: usize,
    pending: &mut usize,
) -> Result<Applied, Failed> {
    // A panic closes the sender with a reason and leaves the copy suspect,
    // so the task drops it and the document reloads from storage, instead
    // of the task dying with nobody told why.
    let applied = catch_unwind(AssertUnwindSafe(|| {
        let mut txn = doc.transact_mut();
        txn.apply_update(update)
            .map(|()| (writes::change_of(&txn), txn.has_missing_updates()))
    }));
    let (change, missing) = match applied {
        Ok(Ok(applied)) => applied,
        Ok(Err(e)) => {
            return Err(Failed {
                code: close::BAD_UPDATE,
                reason: format!("update does not apply: {e}"),
                poisoned: false,
            })
        }
        Err(_) => {
            warn!("an update panicked inside yrs; unloading the document");
            return Err(Failed {
                code: close::BAD_UPDATE,
                reason: "update does not apply: it crashed the document model; it was refused"
                    .into(),
                poisoned: true,
            });
        }
    };
    // A change is stored and replayed at every load: one yrs cannot decode
    // again would leave the document unloadable for good (the fuzzer found
    // updates whose encoded state is not UTF-8). The copy that holds it is
    // suspect too.
    if let Some(delta) = &change {
        if Update::decode_v1(delta).is_err() {
            warn!("an update's change does not decode again; unloading the document");
            return Err(Failed {
                code: close::BAD_UPDATE,
                reason: "update does not apply: its change would not load again; it was refused"
                    .into(),
                poisoned: true,
            });
        }
    }
    if !missing {
        *pending = 0;
        return Ok(Applied {
            change,
            overflowed: false,
        });
    }
    *pending = pending.saturating_add(bytes);
    if *pending <= MAX_PENDING_BYTES {
        return Ok(Applied {
            change,
            overflowed: false,
        });
    }
    if let Some(held) = doc.transact_mut().store_mut().pending_update_mut() {
        held.update = Update::new();
        held.missing = StateVector::default();
    }
    *pending = 0;
    warn!("dropped updates waiting for changes never sent");
    Ok(Applied {
        change,
        overflowed: true,
    })
}

/// Whether `json` is an awareness state y-protocols can take: a JSON
/// object, or `null` for a client that left. Every y-websocket client
/// parses each state it is relayed; one that is not JSON breaks them all.
pub fn is_awareness_state(json: &str) -> bool {
    let shape = json.trim_start();
    (shape.starts_with('{') || shape.starts_with("null"))
        && serde_json::from_str::<serde::de::IgnoredAny>(json).is_ok()
}
