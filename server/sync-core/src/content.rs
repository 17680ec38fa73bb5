//! What a reader of a document sees, written out the same way whatever
//! order yrs keeps its hash maps in, and whatever type a replica gave a
//! root locally: every type as its sequence (chunks of text with their
//! marks, values, nested types) and its map entries (an element's
//! attributes among them) in key order, and the state vector by client.
//! Two replicas show the same document exactly when their [`content`] is
//! equal.

use yrs::branch::{Branch, BranchPtr};
use yrs::types::text::YChange;
use yrs::{Any, Doc, Map, MapRef, Out, ReadTxn, Text, TextRef, Transact};

/// The document as a reader sees it, with its state vector.
pub fn content(doc: &Doc) -> String {
    let txn = doc.transact();
    let mut roots: Vec<(String, String)> = txn
        .root_refs()
        .filter_map(|(name, root)| {
            // Read every root the same way, whatever type this replica
            // gave it locally: its sequence, then its keys.
            let branch = branch_of(&root)?;
            let mut out = String::new();
            render_sequence(&txn, branch, &mut out);
            render_map(&txn, &MapRef::from(branch), &mut out);
            Some((name.to_owned(), out))
        })
        .collect();
    roots.sort();
    let mut clocks: Vec<(u64, u32)> = txn
        .state_vector()
        .iter()
        .map(|(client, clock)| (client.get(), *clock))
        .collect();
    clocks.sort_unstable();
    format!("{clocks:?}{roots:?}")
}

fn branch(shared: &impl AsRef<Branch>) -> BranchPtr {
    BranchPtr::from(shared.as_ref())
}

fn branch_of(value: &Out) -> Option<BranchPtr> {
    Some(match value {
        Out::YText(t) => branch(t),
        Out::YArray(a) => branch(a),
        Out::YMap(m) => branch(m),
        Out::YXmlElement(e) => branch(e),
        Out::YXmlFragment(f) => branch(f),
        Out::YXmlText(t) => branch(t),
        Out::UndefinedRef(b) => *b,
        Out::Any(_) | Out::YDoc(_) => return None,
    })
}

/// A list's content in order, in chunks (text as runs, not characters:
/// reading a long text a character at a time is quadratic in yrs).
fn render_sequence<T: ReadTxn>(txn: &T, branch: BranchPtr, out: &mut String) {
    out.push('[');
    for chunk in TextRef::from(branch).diff(txn, YChange::identity) {
        let mut marks: Vec<String> = chunk
            .attributes
            .iter()
            .flat_map(|a| a.iter())
            .map(|(k, v)| format!("{k}={}", canon(v)))
            .collect();
        marks.sort();
        out.push_str(&format!("{}{marks:?},", value_text(txn, chunk.insert)));
    }
    out.push(']');
}

fn render<T: ReadTxn>(txn: &T, value: Out, out: &mut String) {
    match value {
        Out::Any(any) => out.push_str(&canon(&any)),
        Out::YDoc(_) => out.push_str("<doc>"),
        other => {
            if let Some(branch) = branch_of(&other) {
                render_sequence(txn, branch, out);
                render_map(txn, &MapRef::from(branch), out);
            }
        }
    }
}

fn value_text<T: ReadTxn>(txn: &T, value: Out) -> String {
    let mut out = String::new();
    render(txn, value, &mut out);
    out
}

fn render_map<T: ReadTxn>(txn: &T, map: &MapRef, out: &mut String) {
    let mut entries: Vec<String> = map
        .iter(txn)
        .map(|(k, v)| format!("{k}:{}", value_text(txn, v)))
        .collect();
    entries.sort();
    out.push_str(&format!("{{{}}}", entries.join(",")));
}

/// `any` with its maps' keys in order.
fn canon(any: &Any) -> String {
    match any {
        Any::Map(map) => {
            let mut entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}:{}", canon(v)))
                .collect();
            entries.sort();
            format!("{{{}}}", entries.join(","))
        }
        Any::Array(items) => {
            let items: Vec<String> = items.iter().map(canon).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}
