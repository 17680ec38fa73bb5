//! Writing a decoded update back to bytes, as lib0 writes them: for tests
//! and the structure-aware fuzz target, which change a decoded update's
//! fields and see what the check makes of the result.

use crate::refusal::Id;
use crate::update::{Body, DeclaredParent, Update};

/// The update's bytes.
pub fn encode(update: &Update<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    var(&mut out, update.runs.len() as u64);
    for run in &update.runs {
        var(&mut out, run.structs.len() as u64);
        var(&mut out, run.client);
        var(&mut out, u64::from(run.clock));
        for item in &run.structs {
            match &item.body {
                Body::Gc => {
                    out.push(0);
                    var(&mut out, u64::from(item.len));
                }
                Body::Item(body) => {
                    out.push(body.info);
                    if let Some(origin) = body.origin {
                        id(&mut out, origin);
                    }
                    if let Some(right) = body.right_origin {
                        id(&mut out, right);
                    }
                    match body.parent {
                        Some(DeclaredParent::Root(name)) => {
                            var(&mut out, 1);
                            string(&mut out, name);
                        }
                        Some(DeclaredParent::Type(parent)) => {
                            var(&mut out, 0);
                            id(&mut out, parent);
                        }
                        None => {}
                    }
                    if let Some(sub) = body.parent_sub {
                        string(&mut out, sub);
                    }
                    out.extend_from_slice(body.content_bytes);
                }
            }
        }
    }
    var(&mut out, update.deletes.len() as u64);
    for run in &update.deletes {
        var(&mut out, run.client);
        var(&mut out, run.ranges.len() as u64);
        for &(start, end) in &run.ranges {
            var(&mut out, u64::from(start));
            var(&mut out, u64::from(end.wrapping_sub(start)));
        }
    }
    out
}

/// A lib0 unsigned varint.
pub fn var(out: &mut Vec<u8>, mut value: u64) {
    while value > 0x7f {
        out.push(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A lib0 string.
pub fn string(out: &mut Vec<u8>, text: &str) {
    var(out, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

fn id(out: &mut Vec<u8>, id: Id) {
    var(out, id.client);
    var(out, u64::from(id.clock));
}
