//! The live document: one yrs document, what it knows of its structs, who
//! owns each client id, and the awareness of those connected — driven by
//! frames, returning effects.
//!
//! [`LiveDocument`] is the y-sync side of a loaded document, without
//! sockets, storage or clocks (as y-sweet's `DocConnection::handle_msg`
//! is to its server). The caller feeds it what members send
//! ([`LiveDocument::frame`]), its own writes ([`LiveDocument::write`]) and
//! joins and leaves, and carries out what comes back: a reply to the
//! sender, a frame for the others, a change to commit and then broadcast,
//! or a close. Nothing reaches yrs that the checks in [`crate::update`]
//! and [`crate::known`] did not accept, and what is applied is the change
//! that will be stored: its own bytes are checked again against what the
//! document held before it, and only they are learned, so a document
//! loaded again from what was stored knows exactly what this one knows.

use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use margin_protocol::sync::{
    close, MAX_AWARENESS_BYTES, MAX_AWARENESS_CLIENTS, MAX_UPDATE_BYTES, MAX_WAITING_BYTES,
};
use yrs::block::ClientID;
use yrs::sync::Awareness;
use yrs::updates::decoder::Decode;
use yrs::{Doc, ReadTxn, StateVector, Transact, Update};

use crate::content::content;
use crate::frame::{self, Message};
use crate::known::{Known, Suspect};
use crate::load::{rebuild, LoadFailed, Rebuilt, Skipped, LEARN_BESIDE_BYTES};
use crate::messages;
use crate::refusal::Refusal;
use crate::update::decode;

/// A connection, as the caller numbers them.
pub type MemberId = u64;

/// Who wrote a client id's first struct in this document: its owner.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// The server's own writes (the Planner's edits, the cards' mirror).
    Server,
    /// A member, by account.
    Account(Arc<str>),
}

/// What a sender may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Edit.
    Edit,
    /// Read only; the reason its edits are refused.
    ReadOnly(&'static str),
}

/// A change to commit, and only then to broadcast.
#[derive(Debug, PartialEq, Eq)]
pub struct Change {
    /// The change as yrs made it: what is stored and relayed.
    pub bytes: Vec<u8>,
    /// Client ids this change is the first to write, with their owner:
    /// stored with it.
    pub bound: Vec<(u64, Owner)>,
    /// Whether it rearranges its writer's own text so that a client loading
    /// the document later shows it in another order than the live
    /// document (Yjs' redo writes such changes; see `order`).
    pub reorders: bool,
}

/// What the caller does for a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Effect {
    /// Send to the sender.
    Reply(Vec<u8>),
    /// Send to every member but the sender.
    Others(Vec<u8>),
    /// Commit, then broadcast to every member but the one it came from
    /// (the sender, or a member whose waiting update applied now).
    Change(MemberId, Change),
    /// Close another member: an update of its that waited turned out to be
    /// one no client sends.
    Close(MemberId, Close),
}

/// Why a sender is closed: the code and reason it is told, and whether
/// the document in memory is suspect (then the caller drops it, and it is
/// loaded again from what was stored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Close {
    /// The WebSocket close code.
    pub code: u16,
    /// The reason, for the sender.
    pub reason: String,
    /// Whether this copy of the document must be dropped.
    pub poisoned: bool,
}

impl Close {
    fn new(code: u16, reason: impl Into<String>) -> Self {
        Close {
            code,
            reason: reason.into(),
            poisoned: false,
        }
    }

    fn refused(refusal: &Refusal) -> Self {
        Close::new(close::BAD_UPDATE, format!("update refused: {refusal}"))
    }

    fn poisoned(reason: impl Into<String>) -> Self {
        Close {
            code: close::INTERNAL,
            reason: reason.into(),
            poisoned: true,
        }
    }
}

/// The outcome of one of the server's own writes.
#[derive(Debug)]
pub enum Written<E> {
    /// It changed the document.
    Changed(Change),
    /// It changed nothing.
    Unchanged,
    /// The write itself refused (an edit addressed stale text); nothing
    /// changed.
    Refused(E),
    /// Its change does not fit what the document held: a bug, and this
    /// copy is suspect.
    Broken(Close),
}

/// The key of the observer that marks the whole-document step 2 stale.
const WHOLE_OBSERVER: &str = "margin-sync-core-whole";

/// A loaded document (see the module's comment).
pub struct LiveDocument {
    awareness: Awareness,
    known: Known,
    owners: HashMap<u64, Owner>,
    /// The client id the server writes under here.
    server: u64,
    /// Each member's awareness client ids, removed when it leaves.
    members: HashMap<MemberId, HashSet<ClientID>>,
    /// Each member's updates that wait for changes it has not sent yet.
    waiting: HashMap<MemberId, Waiting>,
    /// The whole document as a sync step 2, for joiners that hold nothing
    /// (a new tab's Yjs document is empty): encoding a large document is
    /// most of a join, and it is done once for all of them until it changes.
    /// A document loaded from one stored part starts with that part here:
    /// it is all the document holds, so it is not encoded again.
    whole: Option<Vec<u8>>,
    /// Set by every transaction that may change the document, whichever
    /// way it comes (a member's frame, the server's write, a caller's own
    /// transaction on [`LiveDocument::doc`]): `whole` is then stale.
    changed: Arc<AtomicBool>,
}

impl LiveDocument {
    /// Rebuilds the document from its stored parts (the snapshot, then the
    /// log), each checked like an editor's update; a part that does not
    /// fit is left out and reported. `owners` are the stored client-id
    /// bindings. A large part is placed and learned beside yrs' apply
    /// ([`LEARN_BESIDE_BYTES`]).
    pub fn load<'a>(
        parts: impl IntoIterator<Item = &'a [u8]> + Clone,
        owners: impl IntoIterator<Item = (u64, Owner)>,
    ) -> Result<(LiveDocument, Vec<Skipped>), LoadFailed> {
        Self::load_learning_beside(parts, owners, LEARN_BESIDE_BYTES)
    }

    /// [`LiveDocument::load`], with the parts of `learn_beside_from` bytes
    /// or more placed and learned on a second thread while yrs applies
    /// them.
    pub fn load_learning_beside<'a>(
        parts: impl IntoIterator<Item = &'a [u8]> + Clone,
        owners: impl IntoIterator<Item = (u64, Owner)>,
        learn_beside_from: usize,
    ) -> Result<(LiveDocument, Vec<Skipped>), LoadFailed> {
        let owners: HashMap<u64, Owner> = owners.into_iter().collect();
        let mut each = parts.clone().into_iter();
        let single = match (each.next(), each.next()) {
            (Some(part), None) => Some(part),
            _ => None,
        };
        loop {
            let Rebuilt {
                doc,
                known,
                skipped,
            } = rebuild(parts.clone(), learn_beside_from)?;
            // The server writes under a client id nobody used in the
            // document, so its writes never continue another's clock (one
            // load in billions draws a used one, and loads again).
            let server = doc.client_id().get();
            if known.clock(server) > 0 || owners.contains_key(&server) {
                continue;
            }
            // A part left out would leave the document holding less than
            // the part says.
            let whole = single
                .filter(|_| skipped.is_empty())
                .map(messages::step2_of);
            let changed = Arc::new(AtomicBool::new(true));
            let seen = changed.clone();
            doc.observe_after_transaction(WHOLE_OBSERVER, move |_| {
                seen.store(true, Ordering::Relaxed)
            })
            .map_err(|e| LoadFailed {
                position: 0,
                cause: format!("watching the document for changes: {e}"),
            })?;
            // Set after: yrs registers the observer in a transaction of
            // its own, which the observer then sees.
            changed.store(whole.is_none(), Ordering::Relaxed);
            return Ok((
                LiveDocument {
                    awareness: Awareness::new(doc),
                    known,
                    owners,
                    server,
                    members: HashMap::new(),
                    waiting: HashMap::new(),
                    whole,
                    changed,
                },
                skipped,
            ));
        }
    }

    /// The yrs document, to read. Every write goes through
    /// [`LiveDocument::frame`] or [`LiveDocument::write`], which keep what
    /// the document knows in step with it.
    pub fn doc(&self) -> &Doc {
        self.awareness.doc()
    }

    /// How many runs of clocks the document knows the place of (its
    /// check's footprint).
    pub fn known_spans(&self) -> usize {
        self.known.spans()
    }

    /// A member joins: what to send it first (sync step 1, and every
    /// awareness state).
    pub fn join(&mut self, member: MemberId) -> Vec<Vec<u8>> {
        self.members.insert(member, HashSet::new());
        let mut first = vec![messages::step1(&self.awareness)];
        first.extend(messages::awareness_all(&self.awareness));
        first
    }

    /// A member leaves: the frame that removes its cursors for the others.
    pub fn leave(&mut self, member: MemberId) -> Option<Vec<u8>> {
        self.waiting.remove(&member);
        let clients: Vec<ClientID> = self.members.remove(&member)?.into_iter().collect();
        for client in &clients {
            self.awareness.remove_state(*client);
        }
        messages::awareness_of(&self.awareness, &clients)
    }

    /// Handles one frame from `member`, writing as `owner` with `access`;
    /// what it asks for goes into `effects`. A close changes nothing:
    /// what the frame's earlier messages did stays in `effects`.
    pub fn frame(
        &mut self,
        member: MemberId,
        owner: &Owner,
        access: Access,
        data: &[u8],
        effects: &mut Vec<Effect>,
    ) -> Result<(), Close> {
        let messages =
            frame::messages(data).map_err(|e| Close::new(close::MALFORMED, e.to_string()))?;
        for message in messages {
            match message {
                Message::SyncStep1(remote) => {
                    match catch_unwind(AssertUnwindSafe(|| self.step2(&remote))) {
                        Ok(step2) => effects.push(Effect::Reply(step2)),
                        Err(_) => {
                            return Err(Close::poisoned("the document failed; reconnect to resync"))
                        }
                    }
                }
                Message::SyncStep2(bytes) | Message::Update(bytes) => {
                    if bytes.len() > MAX_UPDATE_BYTES {
                        return Err(Close::new(
                            close::TOO_BIG,
                            format!(
                                "update of {} bytes exceeds the {MAX_UPDATE_BYTES}-byte limit",
                                bytes.len()
                            ),
                        ));
                    }
                    match access {
                        Access::Edit => self.edit(member, owner, bytes, effects)?,
                        Access::ReadOnly(reason) => {
                            if self.is_news(bytes)? {
                                return Err(Close::new(close::READ_ONLY, reason));
                            }
                        }
                    }
                }
                Message::Awareness(mut update) => {
                    let size: usize = update.clients.values().map(|e| e.json.len()).sum();
                    if size > MAX_AWARENESS_BYTES {
                        return Err(Close::new(close::TOO_BIG, format!("awareness state of {size} bytes exceeds the {MAX_AWARENESS_BYTES}-byte limit")));
                    }
                    // A connection speaks only for the client ids it
                    // claimed first: it may not move or erase another's
                    // cursor.
                    let members = &self.members;
                    update.clients.retain(|client, _| {
                        !members
                            .iter()
                            .any(|(id, clients)| *id != member && clients.contains(client))
                    });
                    let clients: Vec<ClientID> = update.clients.keys().copied().collect();
                    if let Some(claimed) = self.members.get_mut(&member) {
                        claimed.extend(clients.iter().copied());
                        if claimed.len() > MAX_AWARENESS_CLIENTS {
                            return Err(Close::new(close::MALFORMED, format!("more than {MAX_AWARENESS_CLIENTS} awareness clients on one connection")));
                        }
                    }
                    if clients.is_empty() {
                        continue;
                    }
                    self.awareness.apply_update(update).map_err(|e| {
                        Close::new(close::MALFORMED, format!("bad awareness update: {e}"))
                    })?;
                    if let Some(frame) = messages::awareness_of(&self.awareness, &clients) {
                        effects.push(Effect::Others(frame));
                    }
                }
                Message::AwarenessQuery => {
                    if let Some(states) = messages::awareness_all(&self.awareness) {
                        effects.push(Effect::Reply(states));
                    }
                }
            }
        }
        Ok(())
    }

    /// Sync step 2 for a member holding `remote`; one holding nothing gets
    /// the whole document, encoded once until it changes.
    fn step2(&mut self, remote: &StateVector) -> Vec<u8> {
        if !remote.is_empty() {
            return messages::step2(&self.awareness, remote);
        }
        if self.changed.swap(false, Ordering::Relaxed) {
            self.whole = None;
        }
        let awareness = &self.awareness;
        self.whole
            .get_or_insert_with(|| messages::step2(awareness, remote))
            .clone()
    }

    /// Takes an editor's update: applies it, or keeps it waiting when it
    /// builds on changes the member has not sent yet; then retries what
    /// waits, since a change may be what it waited for.
    fn edit(
        &mut self,
        member: MemberId,
        owner: &Owner,
        bytes: &[u8],
        effects: &mut Vec<Effect>,
    ) -> Result<(), Close> {
        match self.apply(bytes, owner)? {
            Applied::Changed(change) => effects.push(Effect::Change(member, change)),
            Applied::Unchanged => return Ok(()),
            Applied::Waits => {
                let waiting = self.waiting.entry(member).or_insert_with(|| Waiting {
                    owner: owner.clone(),
                    updates: Vec::new(),
                    bytes: 0,
                });
                waiting.bytes += bytes.len();
                if waiting.bytes > MAX_WAITING_BYTES {
                    self.waiting.remove(&member);
                    return Err(Close::new(
                        close::BAD_UPDATE,
                        format!("updates that wait for changes never sent passed {MAX_WAITING_BYTES} bytes; they were dropped"),
                    ));
                }
                waiting.updates.push(bytes.to_vec());
                return Ok(());
            }
        }
        self.retry(effects);
        Ok(())
    }

    /// Applies what waits, as long as something of it applies. An update
    /// refused once what it waited for came closes its sender.
    fn retry(&mut self, effects: &mut Vec<Effect>) {
        let mut progress = true;
        while progress {
            progress = false;
            let members: Vec<MemberId> = self.waiting.keys().copied().collect();
            for member in members {
                let Some(waiting) = self.waiting.remove(&member) else {
                    continue;
                };
                let mut still = Waiting {
                    updates: Vec::new(),
                    bytes: 0,
                    ..waiting
                };
                for bytes in waiting.updates {
                    match self.apply(&bytes, &still.owner) {
                        Ok(Applied::Changed(change)) => {
                            effects.push(Effect::Change(member, change));
                            progress = true;
                        }
                        Ok(Applied::Unchanged) => {}
                        Ok(Applied::Waits) => {
                            still.bytes += bytes.len();
                            still.updates.push(bytes);
                        }
                        Err(close) => {
                            effects.push(Effect::Close(member, close));
                            still.updates.clear();
                            break;
                        }
                    }
                }
                if !still.updates.is_empty() {
                    self.waiting.insert(member, still);
                }
            }
        }
    }

    /// Applies an editor's update, if it is one a Yjs client could send
    /// and writes only under client ids `owner` owns.
    fn apply(&mut self, bytes: &[u8], owner: &Owner) -> Result<Applied, Close> {
        let update = decode(bytes).map_err(|r| Close::refused(&r))?;
        let checked = match self.known.check(&update) {
            Ok(checked) => checked,
            // Builds on what the sender has not sent yet (a y-websocket
            // client's new edit may overtake the sync step 2 of its
            // edits offline): it waits for them.
            Err(
                Refusal::StartsPastKnown { .. }
                | Refusal::Missing { .. }
                | Refusal::DeletePastKnown { .. },
            ) => return Ok(Applied::Waits),
            Err(refusal) => return Err(Close::refused(&refusal)),
        };
        for client in checked.new_clients() {
            let taken = match self.owners.get(&client) {
                Some(held) => held != owner,
                None => client == self.server && *owner != Owner::Server,
            };
            if taken {
                return Err(Close::new(
                    close::BAD_UPDATE,
                    format!("update refused: client id {client} belongs to another writer of this document"),
                ));
            }
        }
        if !checked.has_new_structs() && !checked.has_deletes() {
            return Ok(Applied::Unchanged);
        }
        let suspects = self.known.order(&update, &checked);
        let mut reorders = false;
        if !suspects.is_empty() && self.diverges(bytes) {
            // A client rearranging its own text (Yjs' redo writes such
            // items) is a Yjs client; another writer's text is not its to
            // reorder.
            if !suspects.iter().all(Suspect::is_own) {
                self.known.unplace();
                return Err(Close::refused(&Refusal::PlacedByArrival));
            }
            reorders = true;
        }
        let mut txn = self.awareness.doc().transact_mut();
        let change = integrate(&mut self.known, &mut txn, bytes).map_err(|cause| {
            Close::poisoned(format!(
                "the document failed on an update ({cause}); reconnect to resync"
            ))
        })?;
        drop(txn);
        Ok(match change {
            Some((bytes, new_clients)) => Applied::Changed(Change {
                bound: self.bind(new_clients, owner),
                bytes,
                reorders,
            }),
            None => Applied::Unchanged,
        })
    }

    /// Runs one of the server's own writes on the document and takes in
    /// the change it made. `write` returns `None` only when it changed
    /// nothing.
    pub fn write<E>(
        &mut self,
        write: impl FnOnce(&Doc) -> Result<Option<Vec<u8>>, E>,
    ) -> Written<E> {
        let stale = self.changed.load(Ordering::Relaxed);
        let change = match write(self.awareness.doc()) {
            Ok(Some(change)) => change,
            Ok(None) => {
                // Its transaction marked the whole document stale, but
                // changed nothing: what was kept still stands.
                self.changed.store(stale, Ordering::Relaxed);
                return Written::Unchanged;
            }
            Err(refused) => return Written::Refused(refused),
        };
        let learned = decode(&change).and_then(|update| {
            let checked = self.known.check(&update)?;
            // The server writes beside its neighbours.
            self.known.order_kept(&update, &checked);
            self.known.learn(&checked);
            Ok(checked.new_clients().collect::<Vec<_>>())
        });
        match learned {
            Ok(new_clients) => Written::Changed(Change {
                bound: self.bind(new_clients, &Owner::Server),
                bytes: change,
                reorders: false,
            }),
            Err(refusal) => Written::Broken(Close::poisoned(format!(
                "the server's own change does not fit the document ({refusal}); reconnect to resync"
            ))),
        }
    }

    /// Binds the clients of `new_clients` nobody owns yet to `owner`;
    /// returns those bindings, to be stored.
    fn bind(&mut self, new_clients: Vec<u64>, owner: &Owner) -> Vec<(u64, Owner)> {
        let mut bound = Vec::new();
        for client in new_clients {
            if let std::collections::hash_map::Entry::Vacant(slot) = self.owners.entry(client) {
                slot.insert(owner.clone());
                bound.push((client, owner.clone()));
            }
        }
        bound
    }

    /// Whether applying `bytes` (which fit) to this document gives another
    /// document than a client gets loading the result afresh: tried on a
    /// copy, so nothing changes here. Only updates whose items sit where a
    /// client may not have written them are tried.
    fn diverges(&self, bytes: &[u8]) -> bool {
        let copy = Doc::new();
        let state = self
            .doc()
            .transact()
            .encode_state_as_update_v1(&StateVector::default());
        let applied = catch_unwind(AssertUnwindSafe(|| {
            for part in [state.as_slice(), bytes] {
                let update = Update::decode_v1(part).map_err(|e| e.to_string())?;
                copy.transact_mut()
                    .apply_update(update)
                    .map_err(|e| e.to_string())?;
            }
            let fresh = Doc::new();
            let whole = copy
                .transact()
                .encode_state_as_update_v1(&StateVector::default());
            let update = Update::decode_v1(&whole).map_err(|e| e.to_string())?;
            fresh
                .transact_mut()
                .apply_update(update)
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(content(&copy) != content(&fresh))
        }));
        !matches!(applied, Ok(Ok(false)))
    }

    /// Whether a viewer's update carries anything the document lacks (a
    /// viewer's sync step 2 normally carries nothing new and is ignored).
    fn is_news(&self, bytes: &[u8]) -> Result<bool, Close> {
        let update = decode(bytes).map_err(|r| Close::refused(&r))?;
        let checked = self.known.check(&update).map_err(|r| Close::refused(&r))?;
        if checked.has_new_structs() {
            return Ok(true);
        }
        if !checked.has_deletes() {
            return Ok(false);
        }
        let Ok(update) = Update::decode_v1(bytes) else {
            return Ok(true);
        };
        let txn = self.awareness.doc().transact();
        Ok(!update
            .delete_set()
            .diff(&txn.snapshot().delete_set)
            .is_empty())
    }
}

/// A member's updates that wait for changes it has not sent yet, in
/// arrival order.
struct Waiting {
    owner: Owner,
    updates: Vec<Vec<u8>>,
    bytes: usize,
}

/// What became of an editor's update.
enum Applied {
    Changed(Change),
    Unchanged,
    /// It builds on changes not sent yet.
    Waits,
}

/// A change yrs made and the clients it is the first to write.
type Integrated = (Vec<u8>, Vec<u64>);

/// Applies `bytes`, which fit `known`, in `txn`; checks the change yrs
/// made against what was known before and learns it. Returns the change
/// and the clients it is the first to write; an error says how yrs failed
/// (the document is then suspect).
fn integrate(
    known: &mut Known,
    txn: &mut yrs::TransactionMut<'_>,
    bytes: &[u8],
) -> Result<Option<Integrated>, String> {
    let decoded = Update::decode_v1(bytes)
        .map_err(|e| format!("yrs cannot decode what the check accepted: {e}"))?;
    let before = txn.state_vector();
    let applied = catch_unwind(AssertUnwindSafe(|| txn.apply_update(decoded)));
    match applied {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err("yrs panicked".into()),
    }
    if txn.store().pending_update().is_some() || txn.store().pending_ds().is_some() {
        return Err("yrs kept part of it waiting".into());
    }
    if txn.state_vector() == before && txn.delete_set().is_empty() {
        return Ok(None);
    }
    let change = txn.encode_update_v1();
    let update = decode(&change).map_err(|r| format!("its change: {r}"))?;
    let checked = known
        .check(&update)
        .map_err(|r| format!("its change: {r}"))?;
    known.learn(&checked);
    let new_clients = checked.new_clients().collect();
    Ok(Some((change, new_clients)))
}
