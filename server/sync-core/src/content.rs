//! What a reader of a document sees, written out the same way whatever
//! order yrs keeps its hash maps in: every root, its sequence and its map
//! entries, elements with their attributes and text with its marks in key
//! order, and the state vector by client. Two replicas show the same
//! document exactly when their [`content`] is equal.

use yrs::types::text::YChange;
use yrs::{
    Any, Array, ArrayRef, Doc, Map, MapRef, Out, ReadTxn, Text, Transact, Xml, XmlFragment, XmlOut,
};

/// The document as a reader sees it, with its state vector.
pub fn content(doc: &Doc) -> String {
    let txn = doc.transact();
    let mut roots: Vec<(String, String)> = txn
        .root_refs()
        .map(|(name, root)| {
            let mut out = String::new();
            match root {
                Out::UndefinedRef(branch) => {
                    // A root no one typed here: its list and its keys.
                    render_array(&txn, &ArrayRef::from(branch), &mut out);
                    render_map(&txn, &MapRef::from(branch), &mut out);
                }
                other => render(&txn, other, &mut out),
            }
            (name.to_owned(), out)
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

fn render<T: ReadTxn>(txn: &T, value: Out, out: &mut String) {
    match value {
        Out::Any(any) => out.push_str(&canon(&any)),
        Out::YText(text) => render_text(txn, &text, out),
        Out::YXmlText(text) => render_text(txn, &text, out),
        Out::YArray(array) => render_array(txn, &array, out),
        Out::YMap(map) => render_map(txn, &map, out),
        Out::YXmlElement(element) => {
            let mut attributes: Vec<String> = element
                .attributes(txn)
                .map(|(k, v)| format!("{k}={}", value_text(txn, v)))
                .collect();
            attributes.sort();
            out.push_str(&format!("<{}{attributes:?}>", element.tag()));
            for child in element.children(txn) {
                render_xml(txn, child, out);
            }
            out.push_str("</>");
        }
        Out::YXmlFragment(fragment) => {
            for child in fragment.children(txn) {
                render_xml(txn, child, out);
            }
        }
        Out::YDoc(_) => out.push_str("<doc>"),
        Out::UndefinedRef(branch) => render_array(txn, &ArrayRef::from(branch), out),
    }
}

fn value_text<T: ReadTxn>(txn: &T, value: Out) -> String {
    let mut out = String::new();
    render(txn, value, &mut out);
    out
}

fn render_xml<T: ReadTxn>(txn: &T, node: XmlOut, out: &mut String) {
    match node {
        XmlOut::Element(element) => render(txn, Out::YXmlElement(element), out),
        XmlOut::Fragment(fragment) => render(txn, Out::YXmlFragment(fragment), out),
        XmlOut::Text(text) => render_text(txn, &text, out),
    }
}

fn render_text<T: ReadTxn>(txn: &T, text: &impl Text, out: &mut String) {
    out.push('"');
    for chunk in text.diff(txn, YChange::identity) {
        let mut marks: Vec<String> = chunk
            .attributes
            .iter()
            .flat_map(|a| a.iter())
            .map(|(k, v)| format!("{k}={}", canon(v)))
            .collect();
        marks.sort();
        out.push_str(&format!("{}{marks:?}", value_text(txn, chunk.insert)));
    }
    out.push('"');
}

fn render_array<T: ReadTxn>(txn: &T, array: &ArrayRef, out: &mut String) {
    out.push('[');
    for value in array.iter(txn) {
        render(txn, value, out);
        out.push(',');
    }
    out.push(']');
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
