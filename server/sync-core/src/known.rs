//! What a document knows of its structs, and whether an update fits it.
//!
//! [`Known`] keeps, for every clock of every client the document holds,
//! where that struct sits: collected, or an item in which parent, under
//! which map key, holding a type or not. It is folded from the very
//! changes the document stores, so a document loaded again knows exactly
//! what the live one knew.
//!
//! [`Known::check`] takes a decoded update and says whether yrs can take it
//! as a Yjs client would have sent it: every struct continues what the
//! document holds of its client without a hole; every origin, right origin
//! and parent names a struct the document or the update holds, written
//! before it; a parent is a type; an item's neighbours lie in one place;
//! the structs of the update can be taken in an order where each one's
//! references come first (yrs would otherwise keep the rest waiting, in
//! memory, for changes that never come); and the delete set deletes only
//! what is known. A struct the document already holds is skipped by yrs, so
//! it is not judged, only decoded.

// The maps here and in `order` hash with `foldhash`, seeded at random per
// process, as the outline's indexes do: the standard SipHash was a large
// share of loading a document and of checking each keystroke (see
// server/benches/results/2026-12-06-tool-trips-and-hashing.md). The seed
// keeps keys a member chooses (client ids, names) from being aimed at one
// bucket.
use std::hash::BuildHasher;

use foldhash::{HashMap, HashMapExt};
use hashbrown::HashTable;

use crate::order::{NewItem, Order};
use crate::refusal::{Id, Reference, Refusal};
use crate::update::{Body, Content, DeclaredParent, Item, Struct, Update};

/// A name (a root type's, a map key) as a check sees it: one the document
/// already holds, by number, or one only the update holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Name<'a> {
    /// Interned in the document.
    Known(u32),
    /// Only in the update.
    New(&'a str),
}

/// A parent type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Parent<'a> {
    /// A root type, by name.
    Root(Name<'a>),
    /// A type item.
    Type(Id),
}

/// Where a struct sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place<'a> {
    /// Collected (a GC range), or an item whose parent was collected.
    Gc,
    /// An item.
    Item {
        /// Its parent.
        parent: Parent<'a>,
        /// Its map key, for a map entry.
        sub: Option<Name<'a>>,
        /// What it holds.
        kind: Content,
    },
}

impl<'a> Place<'a> {
    /// The parent and key of an item.
    fn slot(self) -> Option<(Parent<'a>, Option<Name<'a>>)> {
        match self {
            Place::Gc => None,
            Place::Item { parent, sub, .. } => Some((parent, sub)),
        }
    }
}

/// An item placed where a Yjs client may not have written it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suspect {
    /// The item.
    pub item: Id,
    /// Its origin.
    pub origin: Option<Id>,
    /// Its right origin.
    pub right_origin: Option<Id>,
}

impl Suspect {
    /// Whether the item's origins are its own writer's: a client
    /// rearranging its own text, as Yjs' redo does.
    pub fn is_own(&self) -> bool {
        [self.origin, self.right_origin]
            .iter()
            .flatten()
            .all(|id| id.client == self.item.client)
    }
}

/// A run of clocks in one place: from `start` to the next span's start.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u32,
    place: u32,
}

#[derive(Debug, Default)]
struct Client {
    spans: Vec<Span>,
    /// The clock after the last one held.
    end: u32,
}

/// Everything a document holds, as places per clock.
#[derive(Debug, Default)]
pub struct Known {
    clients: HashMap<u64, Client>,
    /// Every place once, numbered by position.
    places: Vec<Place<'static>>,
    /// Each place's number, found by the place's hash: numbers only, not
    /// a second copy of every place (a large document holds tens of
    /// thousands).
    place_ids: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
    names: Vec<Box<str>>,
    name_ids: HashMap<Box<str>, u32>,
    /// The order of every list.
    order: Order,
}

/// An update that fits: what of it is new, in place, ready to be learned
/// once the document holds it.
#[derive(Debug)]
pub struct Checked<'a> {
    runs: Vec<NewRun<'a>>,
    deletes: bool,
    /// The new structs in the order they were taken: run, struct, and
    /// the run's span that holds the first clock the document lacked
    /// and the place (an index, not a copy: a loaded document's stored
    /// part takes tens of thousands of structs at once).
    taken: Vec<(u32, u32, u32)>,
}

#[derive(Debug)]
struct NewRun<'a> {
    client: u64,
    /// The first clock the document lacks.
    from: u32,
    /// The new structs' starts and places, in clock order from `from`.
    spans: Vec<(u32, Place<'a>)>,
    /// The clock after the last struct.
    end: u32,
}

impl Checked<'_> {
    /// The clients the update writes new structs for.
    pub fn new_clients(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs
            .iter()
            .filter(|run| !run.spans.is_empty())
            .map(|run| run.client)
    }

    /// Whether the update holds structs the document lacks.
    pub fn has_new_structs(&self) -> bool {
        self.runs.iter().any(|run| !run.spans.is_empty())
    }

    /// Whether the update deletes anything (known or not yet deleted).
    pub fn has_deletes(&self) -> bool {
        self.deletes
    }
}

impl Known {
    /// A document that holds nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The clock after the last one the document holds of `client`.
    pub fn clock(&self, client: u64) -> u32 {
        self.clients.get(&client).map_or(0, |c| c.end)
    }

    /// How many runs of clocks the document is known in (its footprint).
    pub fn spans(&self) -> usize {
        self.clients.values().map(|c| c.spans.len()).sum()
    }

    /// Where the struct at `id` sits, if the document holds it.
    fn place_of(&self, id: Id) -> Option<Place<'static>> {
        let client = self.clients.get(&id.client)?;
        if id.clock >= client.end {
            return None;
        }
        let index = client.spans.partition_point(|s| s.start <= id.clock);
        let span = client.spans.get(index.checked_sub(1)?)?;
        self.places.get(span.place as usize).copied()
    }

    fn name<'a>(&self, name: &'a str) -> Name<'a> {
        match self.name_ids.get(name) {
            Some(&id) => Name::Known(id),
            None => Name::New(name),
        }
    }

    /// Whether `update` fits the document; what of it is new if it does.
    pub fn check<'a>(&self, update: &Update<'a>) -> Result<Checked<'a>, Refusal> {
        let mut check = Check {
            known: self,
            update,
            runs: Vec::with_capacity(update.runs.len()),
            index: HashMap::with_capacity(update.runs.len()),
            taken: Vec::new(),
        };
        for (index, run) in update.runs.iter().enumerate() {
            let known = self.clock(run.client);
            if run.clock > known {
                return Err(Refusal::StartsPastKnown {
                    client: run.client,
                    clock: run.clock,
                    known,
                });
            }
            // Structs wholly held are skipped by yrs: start past them.
            let next = run.structs.partition_point(|s| s.end() <= known);
            check.runs.push(Progress {
                next,
                done: known,
                spans: Vec::new(),
            });
            check.index.insert(run.client, index);
        }
        check.integrate()?;
        let mut deletes = false;
        for run in &update.deletes {
            let known = check.done(run.client);
            if let Some(&(_, end)) = run.ranges.last() {
                deletes = true;
                if end > known {
                    return Err(Refusal::DeletePastKnown {
                        client: run.client,
                        end,
                        known,
                    });
                }
            }
        }
        let runs = update
            .runs
            .iter()
            .zip(check.runs)
            .map(|(run, progress)| NewRun {
                client: run.client,
                from: self.clock(run.client),
                spans: progress.spans,
                end: progress.done,
            })
            .collect();
        Ok(Checked {
            runs,
            deletes,
            taken: check.taken,
        })
    }

    /// Places the new items of `update`, which `checked` found fit, in
    /// their lists as yrs will; returns the ones that sit where a Yjs
    /// client may not have written them (`order`), which the caller checks
    /// before applying the update. Until the next update is placed,
    /// [`Known::unplace`] takes them out again.
    pub fn order(&mut self, update: &Update<'_>, checked: &Checked<'_>) -> Vec<Suspect> {
        self.place_items(update, checked, true)
    }

    /// [`Known::order`] for a change the document takes whatever it
    /// says (a stored part, the server's own write): placed for good,
    /// with nothing kept to undo it.
    pub fn order_kept(&mut self, update: &Update<'_>, checked: &Checked<'_>) {
        self.place_items(update, checked, false);
    }

    fn place_items(
        &mut self,
        update: &Update<'_>,
        checked: &Checked<'_>,
        undoable: bool,
    ) -> Vec<Suspect> {
        self.order.begin(undoable);
        let mut suspects = Vec::new();
        for &(run, index, span) in &checked.taken {
            let Some(&(from, place)) = checked
                .runs
                .get(run as usize)
                .and_then(|new| new.spans.get(span as usize))
            else {
                continue;
            };
            let Place::Item { parent, sub, .. } = place else {
                continue;
            };
            let run = &update.runs[run as usize];
            let item = &run.structs[index as usize];
            let Body::Item(body) = &item.body else {
                continue;
            };
            let slot = (
                self.intern_parent(parent),
                sub.map(|name| self.intern_name(name)),
            );
            let origin = if from > item.clock {
                Some(Id::new(run.client, from - 1))
            } else {
                body.origin
            };
            let new = NewItem {
                slot,
                id: Id::new(run.client, from),
                len: item.end() - from,
                origin,
                right_origin: body.right_origin,
                written: Id::new(run.client, item.clock),
                parent: match parent {
                    Parent::Type(id) => Some(id),
                    Parent::Root(_) => None,
                },
            };
            if self.order.place(&new) {
                suspects.push(Suspect {
                    item: new.written,
                    origin: body.origin,
                    right_origin: body.right_origin,
                });
            }
        }
        suspects
    }

    /// Takes the items [`Known::order`] placed last out of their lists.
    pub fn unplace(&mut self) {
        self.order.undo();
    }

    fn intern_parent(&mut self, parent: Parent<'_>) -> Parent<'static> {
        match parent {
            Parent::Root(name) => Parent::Root(self.intern_name(name)),
            Parent::Type(id) => Parent::Type(id),
        }
    }

    /// Takes in what `checked` found new: the document now holds it.
    pub fn learn(&mut self, checked: &Checked<'_>) {
        for run in &checked.runs {
            if run.spans.is_empty() {
                continue;
            }
            let mut spans = Vec::with_capacity(run.spans.len());
            for &(start, place) in &run.spans {
                let place = self.intern(place);
                spans.push(Span { start, place });
            }
            let client = self.clients.entry(run.client).or_default();
            debug_assert_eq!(client.end, run.from, "a new run continues what is held");
            for span in spans {
                match client.spans.last() {
                    Some(last) if last.place == span.place => {}
                    _ => client.spans.push(span),
                }
            }
            client.end = run.end;
        }
    }

    fn intern_name(&mut self, name: Name<'_>) -> Name<'static> {
        match name {
            Name::Known(id) => Name::Known(id),
            Name::New(text) => {
                if let Some(&id) = self.name_ids.get(text) {
                    return Name::Known(id);
                }
                let id = self.names.len() as u32;
                self.names.push(text.into());
                self.name_ids.insert(text.into(), id);
                Name::Known(id)
            }
        }
    }

    fn intern(&mut self, place: Place<'_>) -> u32 {
        let place = match place {
            Place::Gc => Place::Gc,
            Place::Item { parent, sub, kind } => Place::Item {
                parent: self.intern_parent(parent),
                sub: sub.map(|name| self.intern_name(name)),
                kind,
            },
        };
        let hash = self.hasher.hash_one(place);
        let places = &self.places;
        let same = |id: &u32| places.get(*id as usize) == Some(&place);
        if let Some(&id) = self.place_ids.find(hash, same) {
            return id;
        }
        let id = self.places.len() as u32;
        self.places.push(place);
        let (places, hasher) = (&self.places, &self.hasher);
        let rehash = |id: &u32| places.get(*id as usize).map_or(0, |p| hasher.hash_one(p));
        self.place_ids.insert_unique(hash, id, rehash);
        id
    }
}

/// How far one client's run of the update has been taken in.
struct Progress<'a> {
    /// The next struct to take.
    next: usize,
    /// The clock up to which the document and the update together hold it.
    done: u32,
    spans: Vec<(u32, Place<'a>)>,
}

struct Check<'k, 'u, 'a> {
    known: &'k Known,
    update: &'u Update<'a>,
    runs: Vec<Progress<'a>>,
    index: HashMap<u64, usize>,
    taken: Vec<(u32, u32, u32)>,
}

/// Why a struct cannot be taken yet, or at all.
enum Stop {
    /// It names a struct of this run of the update, not taken yet.
    Wait(usize, Reference),
    Refused(Refusal),
}

impl From<Refusal> for Stop {
    fn from(refusal: Refusal) -> Self {
        Stop::Refused(refusal)
    }
}

impl<'a> Check<'_, '_, 'a> {
    /// The clock up to which `client` is held by the document and what of
    /// the update was taken.
    fn done(&self, client: u64) -> u32 {
        match self.index.get(&client) {
            Some(&run) => self.runs[run].done,
            None => self.known.clock(client),
        }
    }

    /// Where the struct at `id` sits, if it is held or taken already.
    fn place(&self, id: Id) -> Option<Place<'a>> {
        if id.clock < self.known.clock(id.client) {
            return self.known.place_of(id);
        }
        let progress = &self.runs[*self.index.get(&id.client)?];
        if id.clock >= progress.done {
            return None;
        }
        let index = progress.spans.partition_point(|s| s.0 <= id.clock);
        progress.spans.get(index.checked_sub(1)?).map(|s| s.1)
    }

    /// Takes every new struct in, each after what it names (yrs' order:
    /// a struct that waits on another client's sends the check there, and
    /// back after each struct taken).
    fn integrate(&mut self) -> Result<(), Refusal> {
        let mut stack: Vec<usize> = Vec::new();
        for start in 0..self.runs.len() {
            let mut current = start;
            loop {
                let run = &self.update.runs[current];
                let Some(item) = run.structs.get(self.runs[current].next) else {
                    match stack.pop() {
                        Some(waiting) => {
                            current = waiting;
                            continue;
                        }
                        None => break,
                    }
                };
                match self.take(run.client, item) {
                    Ok(place) => {
                        let progress = &mut self.runs[current];
                        let span = progress.spans.len() as u32;
                        self.taken
                            .push((current as u32, progress.next as u32, span));
                        progress.spans.push((progress.done, place));
                        progress.done = item.end();
                        progress.next += 1;
                        if let Some(waiting) = stack.pop() {
                            current = waiting;
                        }
                    }
                    Err(Stop::Wait(other, what)) => {
                        let of = Id::new(run.client, item.clock);
                        if other == current {
                            return Err(Refusal::OwnRun { of, what });
                        }
                        if stack.contains(&other) {
                            return Err(Refusal::Cycle(of));
                        }
                        stack.push(current);
                        current = other;
                    }
                    Err(Stop::Refused(refusal)) => return Err(refusal),
                }
            }
        }
        Ok(())
    }

    /// Checks that `id`, one of an item's references, is held or taken.
    fn available(&self, of: Id, what: Reference, id: Id) -> Result<(), Stop> {
        if id.clock < self.done(id.client) {
            return Ok(());
        }
        match self.index.get(&id.client) {
            Some(&run) if id.clock < self.update.runs[run].end() => Err(Stop::Wait(run, what)),
            _ => Err(Refusal::Missing { of, what, id }.into()),
        }
    }

    /// Where the new part of `item` of `client` sits, once what it names is
    /// in; the part before `done` is held already.
    fn take(&self, client: u64, item: &Struct<'a>) -> Result<Place<'a>, Stop> {
        let of = Id::new(client, item.clock);
        let Body::Item(body) = &item.body else {
            return Ok(Place::Gc);
        };
        let parent_id = match body.parent {
            Some(DeclaredParent::Type(id)) => Some(id),
            _ => None,
        };
        let references = [
            (Reference::Origin, body.origin),
            (Reference::RightOrigin, body.right_origin),
            (Reference::Parent, parent_id),
        ];
        for (what, id) in references {
            let Some(id) = id else { continue };
            // Written before the item, so never inside or after its run.
            if id.client == client && id.clock >= item.clock {
                return Err(Refusal::OwnRun { of, what }.into());
            }
            self.available(of, what, id)?;
        }
        // Part of the struct may be held: yrs takes only the rest, as an
        // item whose origin is the clock before it.
        let done = self.done(client);
        let split = done > item.clock;
        let origin = if split {
            Some(Id::new(client, done - 1))
        } else {
            body.origin
        };
        let left = origin.and_then(|id| self.place(id)).and_then(Place::slot);
        let right = body
            .right_origin
            .and_then(|id| self.place(id))
            .and_then(Place::slot);
        let slot = if body.origin.is_some() || body.right_origin.is_some() {
            if let (Some(left), Some(right)) = (left, right) {
                if left != right {
                    return Err(Refusal::OriginsDisagree(of).into());
                }
            }
            left.or(right)
        } else {
            let declared = self.declared(of, body)?;
            if let (true, Some(left), Some(declared)) = (split, left, declared) {
                if left != declared {
                    return Err(Refusal::SplitDisagrees(of).into());
                }
            }
            declared
        };
        Ok(match slot {
            Some((parent, sub)) => Place::Item {
                parent,
                sub,
                kind: body.content,
            },
            // Its parent was collected: yrs collects it too.
            None => Place::Gc,
        })
    }

    /// The parent and key an item without origins names, or `None` when
    /// the parent was collected.
    fn declared(
        &self,
        of: Id,
        item: &Item<'a>,
    ) -> Result<Option<(Parent<'a>, Option<Name<'a>>)>, Stop> {
        let sub = item.parent_sub.map(|name| self.known.name(name));
        let parent = match item.parent {
            Some(DeclaredParent::Root(name)) => Parent::Root(self.known.name(name)),
            Some(DeclaredParent::Type(id)) => match self.place(id) {
                Some(Place::Item {
                    kind: Content::Type,
                    ..
                }) => Parent::Type(id),
                // A type collected since (its content deleted, or the
                // whole range collected): yrs collects the child.
                Some(Place::Item {
                    kind: Content::Deleted,
                    ..
                })
                | Some(Place::Gc) => return Ok(None),
                Some(Place::Item {
                    kind: Content::Value,
                    ..
                }) => return Err(Refusal::ParentNotType { of, parent: id }.into()),
                None => {
                    return Err(Refusal::Missing {
                        of,
                        what: Reference::Parent,
                        id,
                    }
                    .into())
                }
            },
            // `decode` gives every item without origins a parent.
            None => return Ok(None),
        };
        Ok(Some((parent, sub)))
    }
}
