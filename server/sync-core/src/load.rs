//! Rebuilding a document from its stored parts (the snapshot, then the
//! log): each part is decoded and checked as an editor's update is, its
//! items placed and learned, and only then handed to yrs.
//!
//! A part's checks must end before yrs sees it, but placing its items
//! and learning them (about as much work again as yrs' decode and apply)
//! need nothing of yrs: what is known is folded from the checked part,
//! not read back from yrs. So a large part is placed and learned on a
//! second thread while yrs applies it, and a large load takes about the
//! checks and the longer of the two when a second core is free (a new
//! joiner's cold load is most of its wait; see
//! server/benches/results/2026-12-07-cold-load-beside.md).

use std::panic::{catch_unwind, AssertUnwindSafe};

use yrs::updates::decoder::Decode;
use yrs::{Doc, ReadTxn, Transact, Update};

use crate::known::Known;
use crate::refusal::Refusal;
use crate::update::decode;

/// A stored part of at least this many bytes is placed and learned
/// beside yrs' apply; for a smaller one, starting a thread costs about
/// what it saves (a new document's few kilobytes load in tens of
/// microseconds).
pub const LEARN_BESIDE_BYTES: usize = 256 * 1024;

/// A stored part that did not load: reported, and left out.
#[derive(Debug, PartialEq, Eq)]
pub struct Skipped {
    /// 0 for the snapshot, then 1.. for the log rows after it.
    pub position: usize,
    /// Why.
    pub refusal: Refusal,
}

/// A stored document that could not be rebuilt at all.
#[derive(Debug, thiserror::Error)]
#[error("stored part {position} broke the document model: {cause}")]
pub struct LoadFailed {
    /// The part.
    pub position: usize,
    /// What yrs said.
    pub cause: String,
}

/// A rebuilt document and what it knows, with the parts left out.
pub(crate) struct Rebuilt {
    pub doc: Doc,
    pub known: Known,
    pub skipped: Vec<Skipped>,
}

/// Rebuilds a document from `parts`; those of `learn_beside_from` bytes
/// or more are placed and learned on a second thread while yrs applies
/// them.
pub(crate) fn rebuild<'a>(
    parts: impl IntoIterator<Item = &'a [u8]>,
    learn_beside_from: usize,
) -> Result<Rebuilt, LoadFailed> {
    let doc = Doc::new();
    let mut known = Known::new();
    let mut skipped = Vec::new();
    // Dropped inside the last part's apply: dropping it is where yrs
    // finishes its work (squashing and cleaning up), beside the learning.
    let mut txn = Some(doc.transact_mut());
    let mut parts = parts.into_iter().enumerate().peekable();
    while let Some((position, bytes)) = parts.next() {
        let update = match decode(bytes) {
            Ok(update) => update,
            Err(refusal) => {
                skipped.push(Skipped { position, refusal });
                continue;
            }
        };
        let checked = match known.check(&update) {
            Ok(checked) => checked,
            Err(refusal) => {
                skipped.push(Skipped { position, refusal });
                continue;
            }
        };
        // Stored parts are changes yrs made once already: where their
        // items sit was settled then, and what they hold is what yrs
        // takes from them, so each is learned as it is (re-encoding
        // the load's one transaction after every part would cost the
        // square of the log).
        let learn = |known: &mut Known| {
            known.order_kept(&update, &checked);
            known.learn(&checked);
        };
        let last = parts.peek().is_none();
        let mut apply = || {
            let applied = txn.as_mut().map_or(Ok(()), |txn| apply_part(txn, bytes));
            if last {
                txn.take();
            }
            applied
        };
        let applied = if bytes.len() >= learn_beside_from {
            beside(&mut known, learn, apply)
        } else {
            learn(&mut known);
            apply()
        };
        applied.map_err(|cause| LoadFailed { position, cause })?;
    }
    drop(txn);
    Ok(Rebuilt {
        doc,
        known,
        skipped,
    })
}

/// Runs `learn` on a second thread while `apply` runs on this one: yrs'
/// document is then built in this thread's memory, as without one.
fn beside(
    known: &mut Known,
    learn: impl FnOnce(&mut Known) + Send,
    apply: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    std::thread::scope(|scope| {
        let learner = std::thread::Builder::new()
            .name("margin-load".into())
            .spawn_scoped(scope, || learn(known))
            .map_err(|e| format!("starting the thread that learns it: {e}"))?;
        let applied = apply();
        learner
            .join()
            .map_err(|_| "learning it panicked".to_string())?;
        applied
    })
}

/// Applies one checked part; an error says how yrs failed on it.
fn apply_part(txn: &mut yrs::TransactionMut<'_>, bytes: &[u8]) -> Result<(), String> {
    let decoded = Update::decode_v1(bytes)
        .map_err(|e| format!("yrs cannot decode what the check accepted: {e}"))?;
    match catch_unwind(AssertUnwindSafe(|| txn.apply_update(decoded))) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err("yrs panicked".into()),
    }
    if txn.store().pending_update().is_some() || txn.store().pending_ds().is_some() {
        return Err("yrs kept part of it waiting".into());
    }
    Ok(())
}
