//! `document_update`: bytes an editor sends as a sync update, taken the way
//! the server takes them — `LiveDocument::frame`, which runs Margin's
//! validator (margin-sync-core) before yrs sees a byte — and then, when
//! accepted, everything the server does with the document afterwards.
//!
//! The first byte picks the document: bit 0 clear, an empty one; set, one
//! holding the concurrent history of three real npm yjs editors
//! (fuzz/history/concurrent.updates, written by
//! web-tests/tools/fuzz-seeds.mjs), so mutations of the seeds reach yrs'
//! conflict resolution. Bit 1 clear binds the history's client ids to
//! another member (as the server does), set leaves them unowned, so
//! updates may continue those clients too. The rest is the update.
//!
//! When the update is accepted, this pins what the server relies on:
//! yrs applied all of it (nothing left waiting), the change it stored
//! loads again — alone after what was held, and as the stored log would
//! replay — to the same state, the outline reads, and a sync step 2 to
//! an empty client and to one holding the history both load into a fresh
//! document unrefused. A crash, or a failed assertion, is a hole in the
//! validator: keep the input under regressions/document_update/.
#![no_main]

use libfuzzer_sys::fuzz_target;
use margin_fuzz::Target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, update)) = data.split_first() else {
        return;
    };
    let mut target = Target::new(selector);
    if target.send(update) {
        target.after();
    }
});
