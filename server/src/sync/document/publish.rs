//! A batch's effects, and their publication: committed in one
//! transaction (with the session writes recording its tool calls' results),
//! then broadcast and answered — never before.

use std::sync::Arc;

use axum::body::Bytes;
use margin_decisions::{wire, DecisionCard, Outline};
use margin_protocol::decisions::EditPlanOutput;
use margin_protocol::sync::close;
use margin_protocol::tools::ToolOutput;
use margin_sync_core::messages;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::warn;

use super::open::bindings;
use super::{DocumentTask, Member, Target, SERVER};
use crate::metrics::COUNTERS;
use crate::storage::{Alongside, ClientBinding, SessionWrite, StorageError, StoredCard};
use crate::sync::command::{ChangeReply, DecideReply, EditReply, RecordResult};
use crate::sync::conn::{ConnId, Refused};
use crate::sync::decide::{Answered, Captured, Decided};

/// What one batch produced, held back until its changes are committed.
#[derive(Default)]
pub(super) struct Effects {
    /// Each change with the connection it came from.
    pub(super) deltas: Vec<(ConnId, Vec<u8>)>,
    pub(super) sends: Vec<(Target, Bytes)>,
    pub(super) outlines: Vec<oneshot::Sender<(i64, Arc<Outline>)>>,
    /// Edit replies: how many of the batch's changes precede the reply's
    /// revision, and the outline at it.
    pub(super) edits: Vec<(EditReply, usize, Arc<Outline>)>,
    /// New cards, stored with the batch.
    pub(super) cards: Vec<DecisionCard>,
    /// Decision batches' replies.
    pub(super) decisions: Vec<Judgement>,
    /// Cards changed, at their new versions, stored with the batch.
    pub(super) changed: Vec<StoredCard>,
    /// Their replies.
    pub(super) changes: Vec<(ChangeReply, StoredCard)>,
    /// Session calls whose results are recorded with the batch: how many
    /// of its changes precede each, and what it made.
    pub(super) recorded: Vec<(RecordResult, usize, Made)>,
    /// Client ids the batch's changes are the first to write, and their
    /// owners (SPEC A3a).
    pub(super) clients: Vec<ClientBinding>,
    /// Who made the batch's last edit (a person's change, or an
    /// `edit_plan`), stored as the document's `edited_by`; the server's
    /// mirror of cards leaves it be.
    pub(super) edited_by: Option<Arc<str>>,
}

/// A batch of cards judged, answered once the batch commits.
pub(super) struct Judgement {
    pub(super) reply: DecideReply,
    /// How many of the batch's changes precede the reply's revision.
    pub(super) before: usize,
    /// The outline at that revision.
    pub(super) outline: Arc<Outline>,
    pub(super) captured: Arc<Captured>,
    pub(super) answered: Vec<Answered>,
}

/// What a session's call that writes made, to make its output from once
/// the revision is known.
pub(super) enum Made {
    /// An `edit_plan`: the outline at the revision.
    Edit(Arc<Outline>),
    /// A batch of cards.
    Decided(Arc<Captured>),
}

impl Made {
    pub(super) fn output(&self, revision: i64) -> ToolOutput {
        match self {
            Made::Edit(outline) => ToolOutput::EditPlan(EditPlanOutput {
                revision,
                outline: wire::blocks(outline),
            }),
            Made::Decided(captured) => ToolOutput::Decisions(captured.at(revision)),
        }
    }
}

/// The write recording each session call's output at the revision the
/// batch gives it (SPEC W1), and whom to tell once they committed. A call
/// whose result cannot ride with its writes records nothing here: its
/// writes commit alone.
pub(super) fn record_results(
    recorded: &[(RecordResult, usize, Made)],
    base: i64,
) -> (Vec<SessionWrite>, Vec<oneshot::Sender<()>>) {
    let mut writes = Vec::with_capacity(recorded.len());
    let mut committed = Vec::with_capacity(recorded.len());
    for (record, before, made) in recorded {
        if let Some(result) = (record.0)(made.output(base + *before as i64)) {
            writes.push(result.write);
            committed.push(result.committed);
        }
    }
    (writes, committed)
}

impl Effects {
    /// Queues one of the server's own changes, and the client id it may
    /// bind.
    pub(super) fn server_change(&mut self, change: margin_sync_core::Change) {
        self.clients.extend(bindings(change.bound));
        self.deltas.push((SERVER, change.bytes));
    }
}

impl DocumentTask {
    /// Commits the batch's changes, then sends what it produced.
    pub(super) async fn publish(&mut self, effects: Effects) -> Result<(), StorageError> {
        let base = self.revision;
        let mut sends = Vec::new();
        if !effects.deltas.is_empty() || !effects.cards.is_empty() || !effects.changed.is_empty() {
            let changes: Vec<Vec<u8>> = effects.deltas.iter().map(|(_, d)| d.clone()).collect();
            let count = changes.len() as u64;
            let bytes = changes.iter().map(|change| change.len() as u64).sum();
            let (sessions, recorded) = record_results(&effects.recorded, base);
            let alongside = Alongside {
                cards: &effects.cards,
                changed: &effects.changed,
                sessions: &sessions,
                edited_by: effects.edited_by.as_deref(),
                clients: &effects.clients,
            };
            let started = Instant::now();
            // Boxed: inline, the room a commit needs was kept in every
            // document's task for its whole life.
            self.revision = Box::pin(self.store.append_with(
                &self.id,
                self.epoch,
                self.revision,
                changes,
                alongside,
            ))
            .await?;
            COUNTERS.document_commit.observe(started.elapsed());
            for committed in recorded {
                let _ = committed.send(());
            }
            COUNTERS
                .updates_committed
                .fetch_add(count, std::sync::atomic::Ordering::Relaxed);
            self.compactor.committed(count, bytes);
            sends = self.fan_out(&effects.deltas);
        }
        sends.extend(effects.sends);
        let mut slow = self.dispatch(sends);
        // Closing a slow client announces its departure, which may find
        // another slow client; each round removes at least one member.
        while !slow.is_empty() {
            let mut gone = Effects::default();
            for id in slow {
                warn!(conn = id, "client fell behind; closing it so it resyncs");
                if let Some(member) = self.members.get(&id) {
                    member
                        .conn
                        .closer
                        .close(close::TOO_SLOW, "client fell behind; reconnect to resync");
                }
                self.remove(id, &mut gone);
            }
            slow = self.dispatch(gone.sends);
        }
        for (reply, changes_before, outline) in effects.edits {
            let _ = reply.send(Ok((base + changes_before as i64, outline)));
        }
        for judged in effects.decisions {
            let decided = Decided {
                output: judged.captured.at(base + judged.before as i64),
                outline: judged.outline,
                answered: judged.answered,
            };
            let _ = judged.reply.send(Ok(decided));
        }
        for (reply, changed) in effects.changes {
            let _ = reply.send(Ok(Some(changed)));
        }
        if !effects.outlines.is_empty() {
            let outline = self.outline.snapshot();
            for reply in effects.outlines {
                let _ = reply.send((self.revision, outline.clone()));
            }
        }
        Ok(())
    }

    /// One update frame per member for the whole batch: the batch's changes
    /// merged, less the member's own. A burst then costs each client one
    /// message per batch instead of one per change, which keeps clients
    /// that are merely busy from falling behind.
    pub(super) fn fan_out(&self, deltas: &[(ConnId, Vec<u8>)]) -> Vec<(Target, Bytes)> {
        let merged = |skip: Option<ConnId>| -> Option<Bytes> {
            let parts: Vec<&[u8]> = deltas
                .iter()
                .filter(|(origin, _)| Some(*origin) != skip)
                .map(|(_, delta)| delta.as_slice())
                .collect();
            match parts.as_slice() {
                [] => None,
                [one] => Some(Bytes::from(messages::update(one.to_vec()))),
                many => match yrs::merge_updates_v1(many.iter().copied()) {
                    Ok(update) => Some(Bytes::from(messages::update(update))),
                    // Unmergeable (it should not happen): send them one by one.
                    Err(error) => {
                        warn!(%error, "could not merge a batch's changes; sending them one by one");
                        None
                    }
                },
            }
        };
        let mut origins: Vec<ConnId> = deltas.iter().map(|(origin, _)| *origin).collect();
        origins.sort_unstable();
        origins.dedup();
        let mut sends = Vec::new();
        let everyone = merged(None);
        for member in self.members.values() {
            let id = member.conn.id;
            let frame = if origins.contains(&id) {
                merged(Some(id))
            } else {
                everyone.clone()
            };
            match frame {
                Some(frame) => sends.push((Target::One(id), frame)),
                None => sends.extend(deltas.iter().filter(|(origin, _)| *origin != id).map(
                    |(_, delta)| {
                        (
                            Target::One(id),
                            Bytes::from(messages::update(delta.clone())),
                        )
                    },
                )),
            }
        }
        sends
    }

    /// Queues frames on their connections; returns those whose queue is full.
    pub(super) fn dispatch(&self, sends: Vec<(Target, Bytes)>) -> Vec<ConnId> {
        let mut slow = Vec::new();
        for (target, frame) in sends {
            match target {
                Target::One(id) => {
                    if let Some(member) = self.members.get(&id) {
                        deliver(member, frame, &mut slow);
                    }
                }
                Target::AllBut(origin) => {
                    for member in self.members.values().filter(|m| m.conn.id != origin) {
                        deliver(member, frame.clone(), &mut slow);
                    }
                }
            }
        }
        slow.sort_unstable();
        slow.dedup();
        slow
    }
}

pub(super) fn deliver(member: &Member, frame: Bytes, slow: &mut Vec<ConnId>) {
    match member.conn.outbox.try_push(frame) {
        Ok(()) => {}
        Err(Refused::Full) => slow.push(member.conn.id),
        // The writer is gone; its Leave is on the way.
        Err(Refused::Closed) => {}
    }
}
