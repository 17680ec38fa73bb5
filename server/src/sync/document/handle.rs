//! What the task does with each command of a batch: joins and frames
//! through the sync core, the Planner's edits and card batches, people's
//! acts on cards, archive, delete and access changes — all into the
//! batch's effects, nothing sent or stored yet.

use axum::body::Bytes;
use margin_protocol::sync::close;
use margin_protocol::Role;
use margin_sync_core::{Access, Effect, Owner, Written};
use tracing::{debug, info, warn};

use super::open::bindings;
use super::publish::{Effects, Judgement, Made};
use super::{DocumentTask, Member, Target};
use crate::sync::cards::mirror_entry;
use crate::sync::command::{
    Command, DecideRefused, DecideReply, EditRefused, EditRequest, JoinRefused, RecordResult,
};
use crate::sync::conn::{access_close, ConnId};
use crate::sync::decide::{self};
use crate::sync::writes;

impl DocumentTask {
    pub(super) fn handle(&mut self, command: Command, effects: &mut Effects) {
        match command {
            // A deleted document takes nobody in and no more changes; an
            // edit's or projection's reply is dropped, as an unloading
            // task's is.
            Command::Join { conn, reply } if self.deleted => {
                if reply.send(Err(JoinRefused::Deleted)).is_err() {
                    conn.closer
                        .close(close::DELETED, "the document was deleted");
                }
            }
            Command::Edit { .. }
            | Command::Decide { .. }
            | Command::Change { .. }
            | Command::Frame { .. }
                if self.deleted => {}
            Command::Join { conn, reply } => {
                let id = conn.id;
                for first in self.live.join(id) {
                    effects.sends.push((Target::One(id), Bytes::from(first)));
                }
                let closer = conn.closer.clone();
                let owner = Owner::Account(conn.account.clone());
                self.members.insert(id, Member { conn: *conn, owner });
                if reply.send(Ok(())).is_err() {
                    closer.close(close::GOING_AWAY, "connection gave up joining");
                    self.remove(id, effects);
                }
                debug!(conn = id, members = self.members.len(), "joined");
            }
            Command::Frame { conn, data } => self.frame(conn, &data, effects),
            Command::Leave { conn } => {
                self.remove(conn, effects);
                debug!(conn, members = self.members.len(), "left");
            }
            Command::Outline { reply } => effects.outlines.push(reply),
            Command::Archive { archived, reply } => {
                self.archived = archived;
                info!(archived, "archive state changed");
                let _ = reply.send(());
            }
            Command::Access {
                account,
                role,
                reply,
            } => {
                self.access_changed(&account, role, effects);
                let _ = reply.send(());
            }
            Command::Delete { reply } => {
                self.deleted = true;
                self.close_all(close::DELETED, "the document was deleted");
                info!("document deleted; closing its connections");
                let _ = reply.send(());
            }
            Command::Edit { reply, .. } if self.archived => {
                let _ = reply.send(Err(EditRefused::Archived));
            }
            Command::Edit { request, reply } => {
                let EditRequest {
                    revision,
                    edits,
                    by,
                    record,
                } = *request;
                // Changes earlier in this batch already moved the document.
                let current = self.revision + effects.deltas.len() as i64;
                if revision != current {
                    let _ = reply.send(Err(EditRefused::Stale { revision, current }));
                    return;
                }
                let before = self.outline.refresh();
                match self.live.write(|doc| writes::edit(doc, before, &edits)) {
                    Written::Broken(close) => self.broken(close),
                    Written::Refused(refused) => {
                        let _ = reply.send(Err(refused.into()));
                    }
                    written @ (Written::Changed(_) | Written::Unchanged) => {
                        if let Written::Changed(change) = written {
                            effects.server_change(change);
                            effects.edited_by = Some(by);
                        }
                        let outline = self.outline.snapshot();
                        let before = effects.deltas.len();
                        if let Some(record) = record {
                            effects
                                .recorded
                                .push((record, before, Made::Edit(outline.clone())));
                        }
                        effects.edits.push((reply, before, outline));
                    }
                }
            }
            Command::Decide { reply, .. } if self.archived => {
                let _ = reply.send(Err(DecideRefused::Archived));
            }
            Command::Decide {
                batch,
                record,
                reply,
            } => self.decide(*batch, record, reply, effects),
            Command::Change {
                card,
                change,
                reply,
            } => match self.cards.change(&card, *change) {
                Ok(Some(changed)) => {
                    let mirror = [mirror_entry(&changed.card)];
                    if !self.project(&mirror, effects) {
                        return;
                    }
                    effects.changed.push(changed.clone());
                    effects.changes.push((reply, changed));
                }
                other => {
                    let _ = reply.send(other);
                }
            },
        }
    }

    /// Judges a batch of cards against the document as this batch left
    /// it, and has what it creates — the cards, their mirror and the
    /// call's result — committed with the batch (SPEC D1–D10, W1).
    pub(super) fn decide(
        &mut self,
        batch: decide::Batch,
        record: Option<RecordResult>,
        reply: DecideReply,
        effects: &mut Effects,
    ) {
        // Changes earlier in this batch already moved the document.
        let current = self.revision + effects.deltas.len() as i64;
        let outline = self.outline.snapshot();
        let (cards, id) = (&self.cards, &self.id);
        let judged = self.reads.with(id, |reads| {
            decide::judge(current, &outline, reads, cards, &batch)
        });
        let judged = match judged {
            Ok(judged) => judged,
            Err(refused) => {
                let _ = reply.send(Err(refused.into()));
                return;
            }
        };
        // The mirror is in the decisions map, outside the blocks: the
        // outline at the revision it makes is the one judged against.
        let deltas = effects.deltas.len();
        if !self.project(&judged.mirror, effects) {
            return;
        }
        let changed = effects.deltas.len() > deltas;
        let before = effects.deltas.len();
        if let Some(record) = record.filter(|_| changed) {
            let made = Made::Decided(judged.captured.clone());
            effects.recorded.push((record, before, made));
        }
        for card in &judged.created {
            self.cards.insert(card.clone());
        }
        effects.cards.extend(judged.created);
        effects.decisions.push(Judgement {
            reply,
            before,
            outline,
            captured: judged.captured,
            answered: judged.answered,
        });
    }

    /// Handles one frame through the sync core: what it asks for goes
    /// into the batch's effects; a refusal closes the connection with its
    /// code and reason and changes nothing.
    pub(super) fn frame(&mut self, conn: ConnId, data: &[u8], effects: &mut Effects) {
        let Some(member) = self.members.get(&conn) else {
            // Frames that raced a close; the connection is already gone.
            return;
        };
        let access = if self.archived {
            Access::ReadOnly("read-only: the document is archived")
        } else if !member.conn.role.can_edit() {
            Access::ReadOnly("read-only: viewers cannot edit this document")
        } else {
            Access::Edit
        };
        let account = member.conn.account.clone();
        let mut asked = Vec::new();
        let outcome = self
            .live
            .frame(conn, &member.owner, access, data, &mut asked);
        // What the frame's messages before a refusal did stands.
        for effect in asked {
            match effect {
                Effect::Reply(frame) => effects.sends.push((Target::One(conn), Bytes::from(frame))),
                Effect::Others(frame) => effects
                    .sends
                    .push((Target::AllBut(conn), Bytes::from(frame))),
                Effect::Change(from, change) => {
                    if change.reorders {
                        info!(conn = from, "an editor's change rearranges its own text so a later reader orders it otherwise, as Yjs' redo can");
                    }
                    effects.clients.extend(bindings(change.bound));
                    effects.deltas.push((from, change.bytes));
                    let by = self
                        .members
                        .get(&from)
                        .map_or(&account, |m| &m.conn.account);
                    effects.edited_by = Some(by.clone());
                }
                Effect::Close(other, close) => {
                    debug!(conn = other, code = close.code, reason = %close.reason, "closing connection");
                    if let Some(member) = self.members.get(&other) {
                        member.conn.closer.close(close.code, close.reason);
                    }
                    self.remove(other, effects);
                }
            }
        }
        if let Err(close) = outcome {
            if close.poisoned {
                warn!(conn, reason = %close.reason, "yrs failed on what the sync core accepted; unloading the document");
                self.poisoned = true;
            }
            debug!(conn, code = close.code, reason = %close.reason, "closing connection");
            if let Some(member) = self.members.get(&conn) {
                member.conn.closer.close(close.code, close.reason);
            }
            self.remove(conn, effects);
        }
    }

    /// Writes `mirror` into the decisions map through the sync core and
    /// queues the change; false when the document broke (then the task
    /// unloads and the caller's reply is dropped).
    pub(super) fn project(&mut self, mirror: &[(String, String)], effects: &mut Effects) -> bool {
        match self
            .live
            .write(|doc| Ok::<_, std::convert::Infallible>(writes::project(doc, mirror)))
        {
            Written::Changed(change) => effects.server_change(change),
            Written::Unchanged => {}
            Written::Refused(never) => match never {},
            Written::Broken(close) => {
                self.broken(close);
                return false;
            }
        }
        true
    }

    /// The server's own change did not fit the document: a bug. Nothing
    /// of the batch is committed; everyone resyncs from storage.
    pub(super) fn broken(&mut self, close: margin_sync_core::Close) {
        warn!(reason = %close.reason, "the server's own change broke the document; unloading it");
        self.poisoned = true;
    }

    /// Closes `account`'s connections whose role is no longer `role`
    /// (all of them once it is `None`): a removed member's for good, a
    /// changed one's so the client reconnects and joins with the new role.
    pub(super) fn access_changed(
        &mut self,
        account: &str,
        role: Option<Role>,
        effects: &mut Effects,
    ) {
        let changed: Vec<ConnId> = self
            .members
            .values()
            .filter(|m| &*m.conn.account == account && Some(m.conn.role) != role)
            .map(|m| m.conn.id)
            .collect();
        if changed.is_empty() {
            return;
        }
        let (code, reason) = access_close(role);
        for &id in &changed {
            if let Some(member) = self.members.get(&id) {
                member.conn.closer.close(code, reason.clone());
            }
            self.remove(id, effects);
        }
        info!(
            account,
            closed = changed.len(),
            code,
            "access changed; closed the member's connections"
        );
    }

    pub(super) fn remove(&mut self, conn: ConnId, effects: &mut Effects) {
        if self.members.remove(&conn).is_none() {
            return;
        }
        if let Some(frame) = self.live.leave(conn) {
            effects
                .sends
                .push((Target::AllBut(conn), Bytes::from(frame)));
        }
    }
}
