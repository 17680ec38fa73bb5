//! The order of every list of the document (a type's children, a map
//! key's values), kept as yrs keeps it, to tell which new items need a
//! closer look before they are applied.
//!
//! Yjs places an item between its origin (the item to its left when it was
//! written) and its right origin (the one to its right then), after any
//! items written concurrently in that gap, by rules that give every replica
//! the same order whatever order the items arrive in — for items whose
//! origins were neighbours when they were written. An item whose right
//! origin lies before its origin, one of whose neighbours was collected,
//! or whose gap holds items its writer had
//! provably seen (its own earlier clocks, or earlier ones of its origin's,
//! right origin's or parent's writer), may be placed differently depending
//! on when it is integrated: the server, a client connected now and a
//! client loading the document later could each show the text in another
//! order. Real clients write such items too (Yjs' redo does), usually
//! harmlessly, so [`Order::place`] does not refuse them: it says the
//! update is suspect, and the live document then checks, on a copy, that
//! applying it gives what a client loading the document afterwards gets.
//!
//! Lists are runs of clocks (nodes) linked left to right, split where an
//! item is written inside a run, labelled in order, and integrated with
//! yrs' own rules (`Item::integrate`, `resolve_conflict`), so the order here
//! is the order yrs and every client give. Placing an update can be undone
//! until the next one begins.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashSet, HashSetExt};

use crate::known::{Name, Parent};
use crate::refusal::Id;

/// A list: a parent type, and a map key for a map entry's values (names
/// interned by `Known`).
pub type Slot = (Parent<'static>, Option<Name<'static>>);

const NONE: u32 = u32::MAX;

/// Undo entries whose room an emptied log keeps (48 bytes each).
const KEPT_UNDO: usize = 1024;

#[derive(Clone, Copy, Debug)]
struct Node {
    client: u64,
    clock: u32,
    len: u32,
    origins: Origins,
    list: u32,
    left: u32,
    right: u32,
    /// Its place in the list: labels grow left to right.
    label: u64,
}

// Nodes are most of what a loaded document's order holds: keep them at
// a cache line (server/benches/results/2026-12-07-known-footprint.md).
const _: () = assert!(std::mem::size_of::<Node>() == 64);

impl Node {
    fn contains(&self, id: Id) -> bool {
        id.client == self.client && id.clock >= self.clock && id.clock - self.clock < self.len
    }
}

/// A node's origin and right origin without an `Option`'s tag and
/// padding each: a large document's lists hold a node per run of text.
/// A missing one has the clock `u32::MAX`, which no struct's clock can
/// be: a struct ending past `u32::MAX` is refused, so every clock is
/// below it.
#[derive(Clone, Copy, Debug)]
struct Origins {
    clients: [u64; 2],
    clocks: [u32; 2],
}

impl Origins {
    fn new(origin: Option<Id>, right_origin: Option<Id>) -> Self {
        let part = |id: Option<Id>| id.map_or((0, u32::MAX), |id| (id.client, id.clock));
        let ((left_client, left_clock), (right_client, right_clock)) =
            (part(origin), part(right_origin));
        Origins {
            clients: [left_client, right_client],
            clocks: [left_clock, right_clock],
        }
    }

    fn origin(&self) -> Option<Id> {
        unpacked(self.clients[0], self.clocks[0])
    }

    fn right_origin(&self) -> Option<Id> {
        unpacked(self.clients[1], self.clocks[1])
    }
}

/// The id `client`, `clock` names, unless the clock says none.
fn unpacked(client: u64, clock: u32) -> Option<Id> {
    (clock != u32::MAX).then(|| Id::new(client, clock))
}

/// One write, to undo.
#[derive(Debug)]
enum Undo {
    Left(u32, u32),
    Right(u32, u32),
    Len(u32, u32),
    Label(u32, u64),
    Start(u32, u32),
    Indexed(u64, u32),
    NewList(Slot),
}

/// The order of every list (see the module's comment).
#[derive(Debug, Default)]
pub struct Order {
    nodes: Vec<Node>,
    /// Each client's nodes by first clock.
    index: HashMap<u64, BTreeMap<u32, u32>>,
    /// Each list's leftmost node.
    starts: Vec<u32>,
    lists: HashMap<Slot, u32>,
    undo: Vec<Undo>,
    /// Whether the placing in progress can be undone (it records `undo`).
    undoable: bool,
    /// The node count when the placing in progress began.
    mark: usize,
}

/// One item to place: its new part, and where it was written.
#[derive(Clone, Debug)]
pub struct NewItem {
    /// The list it goes in.
    pub slot: Slot,
    /// Its first clock (after any part the document held).
    pub id: Id,
    /// Its length.
    pub len: u32,
    /// Its origin (for a part of an item held in part, the clock before).
    pub origin: Option<Id>,
    /// Its right origin.
    pub right_origin: Option<Id>,
    /// The id it was written under, for what its writer knew: the item's
    /// own first clock and its parent's id.
    pub written: Id,
    /// Its parent type item, if any.
    pub parent: Option<Id>,
}

impl Order {
    /// An empty document's lists.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many runs the lists hold.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Begins placing an update: when `undoable`, what follows is undone
    /// by [`Order::undo`] until the next begins; otherwise it is kept for
    /// good and records nothing to undo (a stored update, the server's own
    /// write: a loaded document's one stored update places tens of
    /// thousands of items, whose undo log would be written, grown and then
    /// held for nothing).
    pub fn begin(&mut self, undoable: bool) {
        self.undo.clear();
        // A large update's log (an editor's pasted chapter) is not held
        // for the keystrokes after it.
        self.undo.shrink_to(KEPT_UNDO);
        self.undoable = undoable;
        self.mark = self.nodes.len();
    }

    /// Undoes what was placed since an undoable [`Order::begin`]; after
    /// one that was not, there is nothing to undo.
    pub fn undo(&mut self) {
        if !self.undoable {
            return;
        }
        while let Some(write) = self.undo.pop() {
            match write {
                Undo::Left(node, old) => self.nodes[node as usize].left = old,
                Undo::Right(node, old) => self.nodes[node as usize].right = old,
                Undo::Len(node, old) => self.nodes[node as usize].len = old,
                Undo::Label(node, old) => self.nodes[node as usize].label = old,
                Undo::Start(list, old) => self.starts[list as usize] = old,
                Undo::Indexed(client, clock) => {
                    if let Some(clocks) = self.index.get_mut(&client) {
                        clocks.remove(&clock);
                        if clocks.is_empty() {
                            self.index.remove(&client);
                        }
                    }
                }
                Undo::NewList(slot) => {
                    self.lists.remove(&slot);
                    self.starts.pop();
                }
            }
        }
        self.nodes.truncate(self.mark);
    }

    /// Records `write` to undo, when the placing in progress can be.
    fn log(&mut self, write: Undo) {
        if self.undoable {
            self.undo.push(write);
        }
    }

    fn set_left(&mut self, node: u32, to: u32) {
        let old = std::mem::replace(&mut self.nodes[node as usize].left, to);
        self.log(Undo::Left(node, old));
    }

    fn set_right(&mut self, node: u32, to: u32) {
        let old = std::mem::replace(&mut self.nodes[node as usize].right, to);
        self.log(Undo::Right(node, old));
    }

    fn set_start(&mut self, list: u32, to: u32) {
        let old = std::mem::replace(&mut self.starts[list as usize], to);
        self.log(Undo::Start(list, old));
    }

    fn list(&mut self, slot: &Slot) -> u32 {
        if let Some(&list) = self.lists.get(slot) {
            return list;
        }
        let list = self.starts.len() as u32;
        self.starts.push(NONE);
        self.lists.insert(*slot, list);
        self.log(Undo::NewList(*slot));
        list
    }

    fn push(&mut self, node: Node) -> u32 {
        let at = self.nodes.len() as u32;
        self.nodes.push(node);
        self.index
            .entry(node.client)
            .or_default()
            .insert(node.clock, at);
        self.log(Undo::Indexed(node.client, node.clock));
        at
    }

    /// The node holding `id`, if it is in a list.
    fn find(&self, id: Id) -> Option<u32> {
        let (_, &node) = self.index.get(&id.client)?.range(..=id.clock).next_back()?;
        self.nodes[node as usize].contains(id).then_some(node)
    }

    /// Splits `node` so that a node starts at `clock`; returns that node.
    fn split(&mut self, node: u32, clock: u32) -> u32 {
        let left = self.nodes[node as usize];
        if clock == left.clock {
            return node;
        }
        let offset = clock - left.clock;
        let label = self.label_after(node);
        let right = self.push(Node {
            client: left.client,
            clock,
            len: left.len - offset,
            origins: Origins::new(
                Some(Id::new(left.client, clock - 1)),
                left.origins.right_origin(),
            ),
            list: left.list,
            left: node,
            right: left.right,
            label,
        });
        let old = std::mem::replace(&mut self.nodes[node as usize].len, offset);
        self.log(Undo::Len(node, old));
        if left.right != NONE {
            self.set_left(left.right, right);
        }
        self.set_right(node, right);
        right
    }

    /// The node ending at `id` (yrs' `get_item_clean_end`).
    fn clean_end(&mut self, id: Id) -> Option<u32> {
        let node = self.find(id)?;
        let next = id.clock + 1;
        let n = self.nodes[node as usize];
        if next < n.clock + n.len {
            self.split(node, next);
        }
        Some(node)
    }

    /// The node starting at `id` (yrs' `get_item_clean_start`).
    fn clean_start(&mut self, id: Id) -> Option<u32> {
        let node = self.find(id)?;
        Some(self.split(node, id.clock))
    }

    /// Places `item` as yrs integrates it; returns whether it sits where a
    /// Yjs client may not have written it (see the module's comment).
    pub fn place(&mut self, item: &NewItem) -> bool {
        let list = self.list(&item.slot);
        let left = item.origin.and_then(|id| self.clean_end(id));
        let right = item.right_origin.and_then(|id| self.clean_start(id));
        // Splitting at the right origin may have split the origin's node
        // again: the node ending at the origin is found after both.
        let left = left.and(item.origin).and_then(|id| self.find(id));
        let mut suspect = matches!((left, right), (Some(l), Some(r))
            if self.nodes[r as usize].label <= self.nodes[l as usize].label);
        // A neighbour it names that is in no list was collected: yrs places
        // the item by the other one alone, which a later reader may do
        // otherwise (Yjs collects the item instead).
        suspect |= (item.origin.is_some() && left.is_none())
            || (item.right_origin.is_some() && right.is_none());
        // The clients whose earlier clocks the writer provably saw.
        let knew = [
            Some(item.written),
            item.origin,
            item.right_origin,
            item.parent,
        ];
        let this = Node {
            client: item.id.client,
            clock: item.id.clock,
            len: item.len,
            origins: Origins::new(item.origin, item.right_origin),
            list,
            left: NONE,
            right: NONE,
            label: 0,
        };
        let (placed_left, enclosed) = self.resolve(&this, list, left, right, &knew);
        suspect |= enclosed;
        // Typing on: the item continues the run to its left, as yrs
        // squashes it.
        if let Some(l) = placed_left {
            let run = self.nodes[l as usize];
            let continues = run.client == this.client
                && run.clock + run.len == this.clock
                && item.origin == Some(Id::new(run.client, run.clock + run.len - 1))
                && run.origins.right_origin() == item.right_origin
                && (run.right == NONE || Some(run.right) == right);
            if continues {
                let old = std::mem::replace(&mut self.nodes[l as usize].len, run.len + this.len);
                self.log(Undo::Len(l, old));
                return suspect;
            }
        }
        let label = match placed_left {
            Some(l) => self.label_after(l),
            None => self.label_first(list),
        };
        let node = self.push(Node {
            left: placed_left.unwrap_or(NONE),
            label,
            ..this
        });
        // Link it in after where conflict resolution put it.
        let next = match placed_left {
            Some(l) => {
                let next = self.nodes[l as usize].right;
                self.set_right(l, node);
                next
            }
            None => {
                let next = self.starts[list as usize];
                self.set_start(list, node);
                next
            }
        };
        self.nodes[node as usize].right = next;
        if next != NONE {
            self.set_left(next, node);
        }
        suspect
    }

    /// A label for a node to go right after `node`, relabelling the list
    /// when there is no room between it and the next.
    fn label_after(&mut self, node: u32) -> u64 {
        let here = self.nodes[node as usize];
        let next = match here.right {
            NONE => u64::MAX,
            right => self.nodes[right as usize].label,
        };
        if next - here.label > 1 {
            // At the end, step rather than halve: appending is common.
            return if next == u64::MAX {
                here.label + (u64::MAX - here.label).min(1 << 32) / 2
            } else {
                here.label + (next - here.label) / 2
            };
        }
        self.relabel(here.list);
        self.label_after(node)
    }

    /// A label for a node to go first in `list`.
    fn label_first(&mut self, list: u32) -> u64 {
        let first = self.starts[list as usize];
        if first == NONE {
            return 1 << 63;
        }
        let label = self.nodes[first as usize].label;
        if label > 1 {
            return label / 2;
        }
        self.relabel(list);
        self.label_first(list)
    }

    /// Spreads `list`'s labels evenly.
    fn relabel(&mut self, list: u32) {
        let mut count: u64 = 0;
        let mut at = self.starts[list as usize];
        while at != NONE {
            count += 1;
            at = self.nodes[at as usize].right;
        }
        let step = u64::MAX / (count + 2);
        let mut at = self.starts[list as usize];
        let mut label = step;
        while at != NONE {
            let old = std::mem::replace(&mut self.nodes[at as usize].label, label);
            self.log(Undo::Label(at, old));
            label += step;
            at = self.nodes[at as usize].right;
        }
    }

    /// yrs' `resolve_conflict`: the node the new one goes after, and
    /// whether the gap it scanned held an item its writer had seen.
    fn resolve(
        &self,
        this: &Node,
        list: u32,
        left: Option<u32>,
        right: Option<u32>,
        knew: &[Option<Id>],
    ) -> (Option<u32>, bool) {
        let right_node = right.unwrap_or(NONE);
        let conflict = match (left, right) {
            (None, None) => true,
            (None, Some(r)) => self.nodes[r as usize].left != NONE,
            (Some(l), _) => self.nodes[l as usize].right != right_node,
        };
        if !conflict {
            return (left, false);
        }
        let mut o = match left {
            Some(l) => self.nodes[l as usize].right,
            None => self.starts[list as usize],
        };
        let mut placed = left;
        let mut enclosed = false;
        let mut conflicting: HashSet<u32> = HashSet::new();
        let mut before_origin: HashSet<u32> = HashSet::new();
        while o != NONE && o != right_node {
            let node = self.nodes[o as usize];
            enclosed |= knew
                .iter()
                .flatten()
                .any(|k| k.client == node.client && node.clock < k.clock);
            before_origin.insert(o);
            conflicting.insert(o);
            let origin = node.origins.origin();
            if this.origins.origin() == origin {
                if node.client < this.client {
                    placed = Some(o);
                    conflicting.clear();
                } else if this.origins.right_origin() == node.origins.right_origin() {
                    break;
                }
            } else if let Some(origin) = origin.and_then(|id| self.find(id)) {
                if before_origin.contains(&origin) {
                    if !conflicting.contains(&origin) {
                        placed = Some(o);
                        conflicting.clear();
                    }
                } else {
                    break;
                }
            } else {
                break;
            }
            o = node.right;
        }
        (placed, enclosed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Client 1 typing one character at `clock`, after `origin`.
    fn typed(clock: u32, origin: Option<u32>) -> NewItem {
        NewItem {
            slot: (Parent::Root(Name::Known(0)), None),
            id: Id::new(1, clock),
            len: 1,
            origin: origin.map(|clock| Id::new(1, clock)),
            right_origin: None,
            written: Id::new(1, clock),
            parent: None,
        }
    }

    #[test]
    fn an_update_placed_for_good_keeps_nothing_to_undo_and_an_undoable_one_is_undone() {
        let mut order = Order::new();
        order.begin(false);
        order.place(&typed(0, None));
        // Beside another writer's text, so it is a node of its own.
        order.place(&NewItem {
            id: Id::new(2, 0),
            written: Id::new(2, 0),
            origin: Some(Id::new(1, 0)),
            ..typed(0, None)
        });
        let kept = order.nodes();
        assert!(order.undo.is_empty(), "nothing is logged to undo");
        order.undo();
        assert_eq!(order.nodes(), kept, "what was placed for good stays");

        order.begin(true);
        order.place(&NewItem {
            id: Id::new(3, 0),
            written: Id::new(3, 0),
            origin: Some(Id::new(2, 0)),
            ..typed(0, None)
        });
        assert_eq!(order.nodes(), kept + 1);
        order.undo();
        assert_eq!(order.nodes(), kept, "an undoable placing is taken out");
        assert!(order.find(Id::new(3, 0)).is_none());
        assert!(order.find(Id::new(2, 0)).is_some());
    }
}
