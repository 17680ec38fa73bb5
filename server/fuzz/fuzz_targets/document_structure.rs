//! `document_structure`: valid updates from real npm yjs editors, decoded
//! and changed field by field — clocks, lengths, origins, parents, map
//! keys, runs and delete ranges — then sent as `document_update` sends
//! bytes, with the same checks after. Byte-level mutation rarely keeps an
//! update well-formed enough to reach yrs' integration; this target
//! spends its inputs there, on updates that decode and refer to structs
//! that exist, so the document-level check (`known`) is what stands
//! between them and yrs.
//!
//! Input: a byte picking the seed (one of the committed
//! `history-*` seeds), a selector byte as in `document_update`, then a
//! script: each step a byte choosing the change and bytes for its
//! arguments. A script may send the update and go on changing it, so a
//! few updates in a row reach the document.
#![no_main]

use libfuzzer_sys::fuzz_target;
use margin_fuzz::{Target, HISTORY_CLIENTS};
use margin_sync_core::encode::encode;
use margin_sync_core::update::{Body, DeclaredParent, Deletes, Run, Update};
use margin_sync_core::{decode, Id};

const SEEDS: [&[u8]; 5] = [
    include_bytes!("../corpus/document_update/history-offline-step2-1"),
    include_bytes!("../corpus/document_update/history-offline-merged-1"),
    include_bytes!("../corpus/document_update/history-online-next-1"),
    include_bytes!("../corpus/document_update/history-new-editor-1"),
    include_bytes!("../corpus/document_update/history-offline-first-1"),
];

const HAS_ORIGIN: u8 = 0x80;
const HAS_RIGHT_ORIGIN: u8 = 0x40;
const HAS_PARENT_SUB: u8 = 0x20;
const NAMES: [&str; 4] = ["prosemirror", "decisions", "level", "x"];

/// Reads the script's bytes.
struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn below(&mut self, n: usize) -> Option<usize> {
        (n > 0).then_some(())?;
        Some(usize::from(self.byte()?) % n)
    }

    fn delta(&mut self) -> Option<i64> {
        Some(i64::from(self.byte()? as i8))
    }
}

/// An id near what the document and update hold: a known client, a clock
/// near its end.
fn id(script: &mut Script<'_>, target: &Target, update: &Update<'_>) -> Option<Id> {
    let mut clients: Vec<u64> = HISTORY_CLIENTS.to_vec();
    clients.extend(update.runs.iter().map(|r| r.client));
    let client = clients[script.below(clients.len())?];
    let known = target
        .state_vector()
        .get(&yrs::block::ClientID::new(client));
    let end = update
        .runs
        .iter()
        .find(|r| r.client == client)
        .map_or(known, |r| r.end().max(known));
    let clock = (i64::from(end) + script.delta()?).clamp(0, i64::from(u32::MAX)) as u32;
    Some(Id::new(client, clock))
}

fn mutate<'a>(script: &mut Script<'_>, target: &Target, update: &mut Update<'a>) -> Option<()> {
    let runs = update.runs.len();
    match script.byte()? % 12 {
        0 | 1 | 2 => {
            // An item's origin, right origin or parent, to an id near
            // what exists (or none, or a root).
            let (r, i) = pick(script, update)?;
            let new = id(script, target, update)?;
            let which = script.byte()? % 5;
            let Body::Item(item) = &mut update.runs[r].structs[i].body else {
                return Some(());
            };
            match which {
                0 => item.origin = Some(new),
                1 => item.right_origin = Some(new),
                2 => item.origin = None,
                3 => item.right_origin = None,
                _ => {}
            }
            if item.origin.is_none() && item.right_origin.is_none() {
                item.parent = Some(if which == 4 {
                    DeclaredParent::Type(new)
                } else {
                    DeclaredParent::Root(NAMES[usize::from(new.clock as u8) % NAMES.len()])
                });
            } else {
                item.parent = None;
                item.parent_sub = None;
            }
            item.info = (item.info & !(HAS_ORIGIN | HAS_RIGHT_ORIGIN))
                | if item.origin.is_some() { HAS_ORIGIN } else { 0 }
                | if item.right_origin.is_some() {
                    HAS_RIGHT_ORIGIN
                } else {
                    0
                };
        }
        3 => {
            // A map key on, or off.
            let (r, i) = pick(script, update)?;
            let key = NAMES[script.below(NAMES.len())?];
            if let Body::Item(item) = &mut update.runs[r].structs[i].body {
                if item.parent.is_some() {
                    item.parent_sub = match item.parent_sub {
                        Some(_) => None,
                        None => Some(key),
                    };
                    item.info ^= HAS_PARENT_SUB;
                }
            }
        }
        4 => {
            // A run's first clock, moved.
            let r = script.below(runs)?;
            let run = &mut update.runs[r];
            run.clock =
                (i64::from(run.clock) + script.delta()?).clamp(0, i64::from(u32::MAX)) as u32;
        }
        5 => {
            // A run under another client.
            let r = script.below(runs)?;
            let client = id(script, target, update)?.client;
            update.runs[r].client = client;
        }
        6 => {
            let (r, i) = pick(script, update)?;
            update.runs[r].structs.remove(i);
            if update.runs[r].structs.is_empty() {
                update.runs.remove(r);
            }
        }
        7 => {
            // A struct copied from elsewhere in the update, after another.
            let (from_r, from_i) = pick(script, update)?;
            let (to_r, to_i) = pick(script, update)?;
            let copy = clone_struct(&update.runs[from_r].structs[from_i]);
            update.runs[to_r].structs.insert(to_i, copy);
        }
        8 => {
            // A collected range of another length.
            let (r, i) = pick(script, update)?;
            let s = &mut update.runs[r].structs[i];
            if matches!(s.body, Body::Gc) {
                s.len = (i64::from(s.len) + script.delta()?).clamp(0, 1 << 20) as u32;
            } else {
                s.body = Body::Gc;
            }
        }
        9 => {
            // A delete range added near what exists.
            let at = id(script, target, update)?;
            let len = u32::from(script.byte()?) + 1;
            match update.deletes.iter_mut().find(|d| d.client == at.client) {
                Some(run) => {
                    run.ranges.push((at.clock, at.clock.saturating_add(len)));
                    run.ranges.sort_unstable();
                    merge_ranges(&mut run.ranges);
                }
                None => update.deletes.push(Deletes {
                    client: at.client,
                    ranges: vec![(at.clock, at.clock.saturating_add(len))],
                }),
            }
        }
        10 => {
            // A delete range moved or stretched.
            let d = script.below(update.deletes.len())?;
            let run = &mut update.deletes[d];
            let k = script.below(run.ranges.len())?;
            let (start, end) = run.ranges[k];
            let shift = script.delta()?;
            let start = (i64::from(start) + shift).max(0) as u32;
            let end =
                (i64::from(end) + shift + script.delta()? / 8).max(i64::from(start) + 1) as u32;
            run.ranges[k] = (start, end);
            run.ranges.sort_unstable();
            merge_ranges(&mut run.ranges);
        }
        _ => {
            // One run split off in two, the second continuing the first.
            let r = script.below(runs)?;
            let run = &mut update.runs[r];
            if run.structs.len() > 1 {
                let at = 1 + script.below(run.structs.len() - 1)?;
                let rest = run.structs.split_off(at);
                let clock = rest.first().map_or(run.end(), |s| s.clock);
                let client = id(script, target, update)?.client;
                update.runs.push(Run {
                    client,
                    clock,
                    structs: rest,
                });
            }
        }
    }
    Some(())
}

fn merge_ranges(ranges: &mut Vec<(u32, u32)>) {
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
    for &(start, end) in ranges.iter() {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    *ranges = merged;
}

fn pick(script: &mut Script<'_>, update: &Update<'_>) -> Option<(usize, usize)> {
    let r = script.below(update.runs.len())?;
    let i = script.below(update.runs[r].structs.len())?;
    Some((r, i))
}

fn clone_struct<'a>(
    s: &margin_sync_core::update::Struct<'a>,
) -> margin_sync_core::update::Struct<'a> {
    margin_sync_core::update::Struct {
        clock: s.clock,
        len: s.len,
        body: match &s.body {
            Body::Gc => Body::Gc,
            Body::Item(item) => Body::Item(margin_sync_core::update::Item {
                origin: item.origin,
                right_origin: item.right_origin,
                parent: item.parent,
                parent_sub: item.parent_sub,
                content: item.content,
                info: item.info,
                content_bytes: item.content_bytes,
            }),
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let mut script = Script(data);
    let (Some(seed), Some(selector)) = (script.byte(), script.byte()) else {
        return;
    };
    let seed = SEEDS[usize::from(seed) % SEEDS.len()];
    // The seed files start with their own selector byte.
    let Ok(mut update) = decode(&seed[1..]) else {
        return;
    };
    let mut target = Target::new(selector | 1);
    let (mut sent, mut changed) = (0, false);
    while !script.0.is_empty() && sent < 4 {
        if script.0.first() == Some(&0xff) {
            script.byte();
            changed |= target.send(&encode(&update));
            sent += 1;
            continue;
        }
        if mutate(&mut script, &target, &mut update).is_none() {
            break;
        }
    }
    changed |= target.send(&encode(&update));
    if changed {
        target.after();
    }
});
