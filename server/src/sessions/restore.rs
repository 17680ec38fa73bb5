//! Planner sessions across a server restart (SPEC W1, W2, W2a, L9, U6):
//! at start, each session a previous run left open is folded back from
//! its journal — a domain snapshot and the records after it — exactly as
//! it was committed: its turn in flight, the messages waiting for the next
//! turn, its runs with their true ages, its questions and held answers,
//! its plan and a held Stop. Then it is told it was restarted (every call
//! that was in flight is `interrupted`, and it is kept as for a drop,
//! announcing nothing), its questions are checked against their cards
//! (answers given and cards discarded meanwhile), and its driver waits for
//! the machine's `resume`. A session that cannot be taken back ends,
//! saying why in its feed.

use std::sync::Arc;
use std::time::Duration;

use margin_decisions::{wire, CardState};
use margin_planner::{CardId, PlannerSession, Record, ReleaseTrigger, Snapshot, Step};
use margin_protocol::sessions::{SessionEvent, SessionSnapshot, SessionState};
use tracing::{debug, info, warn};

use super::commit::state_of;
use super::{now, Shared};
use crate::cluster::{Lease, TakeRefused};
use crate::storage::{LeaseFence, SessionWrite, StorageError, StoredEvent, StoredSession};

/// Why a stored session was not taken back.
const UNREADABLE: &str = "the server restarted and could not read the session back";
/// Longest wait for another task taking the same session back.
const RESTORE_WAIT: Duration = Duration::from_secs(10);

/// Most orphaned sessions one sweep takes back.
const SWEEP_BATCH: i64 = 64;

/// A session stored before sessions were journaled.
const BEFORE_JOURNAL: &str =
    "the server was upgraded; a session from before the upgrade cannot be taken back";

/// Takes back every open session; call once at start, before serving.
pub(super) async fn restore(shared: &Arc<Shared>) {
    let store = shared.hub.store();
    let open = match store.open_sessions().await {
        Ok(open) => open,
        Err(error) => {
            warn!(%error, "open Planner sessions not read; none is taken back");
            return;
        }
    };
    for (id, stored) in open {
        take_back_or_end(shared, &id, &stored, None).await;
    }
}

/// In a cluster: every `every`, takes back the open sessions no live node
/// holds, each once its document's lease is held here; and, as soon as
/// this node takes a document, the sessions of it no node here runs (their
/// node died: the document came here without them).
pub(super) async fn sweep(shared: &Arc<Shared>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let Some(cluster) = shared.cluster.clone() else {
        return;
    };
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = tick.tick() => {}
            // Another node let documents go: its sessions need a node now.
            _ = cluster.woken() => {}
            _ = cluster.documents_taken() => {}
        }
        for document in cluster.taken_since() {
            follow_document(shared, &document).await;
        }
        let orphaned = match shared.hub.store().orphaned_sessions(SWEEP_BATCH).await {
            Ok(orphaned) => orphaned,
            Err(error) => {
                warn!(%error, "orphaned Planner sessions not read");
                continue;
            }
        };
        for (id, _) in orphaned {
            // Another node may take it first; it then holds the lease and
            // this one lets it be.
            if let Err(error) = take_back_one(shared, &id).await {
                debug!(%error, session = %id, "orphaned session left to another node");
            }
        }
    }
}

/// Takes back the open sessions of `document`, just taken here, that no
/// task here runs.
async fn follow_document(shared: &Arc<Shared>, document: &str) {
    let open = match shared.hub.store().open_sessions_of(document).await {
        Ok(open) => open,
        Err(error) => {
            warn!(%error, document, "the sessions of a document taken here not read");
            return;
        }
    };
    for id in open {
        if let Err(error) = take_back_one(shared, &id).await {
            debug!(%error, session = %id, document, "session of a document taken here left");
        }
    }
}

/// In a cluster: takes open session `id` back here, holding its
/// document's lease, unless it runs here already.
pub(super) async fn take_back_one(shared: &Arc<Shared>, id: &str) -> Result<(), TakeRefused> {
    let Some(cluster) = shared.cluster.clone() else {
        return Ok(());
    };
    if shared.lock().sessions.contains_key(id) {
        return Ok(());
    }
    let Some(stored) = shared.hub.store().open_session(id).await? else {
        return Ok(());
    };
    let lease = cluster.hold(&stored.document).await?;
    take_back_or_end(shared, id, &stored, Some(lease)).await;
    Ok(())
}

/// Takes session `id` back here, holding `lease` in a cluster, or ends it
/// saying why it could not be.
async fn take_back_or_end(
    shared: &Arc<Shared>,
    id: &str,
    stored: &StoredSession,
    lease: Option<Lease>,
) {
    // Another task taking the same session back (the sweep, a resume)
    // finishes first: the caller then finds it running, as it expects.
    let waited_since = tokio::time::Instant::now();
    loop {
        {
            let mut registry = shared.lock();
            if registry.sessions.contains_key(id) {
                return;
            }
            if registry.restoring.insert(id.to_owned()) {
                break;
            }
        }
        if waited_since.elapsed() > RESTORE_WAIT {
            warn!(session = %id, "another take-back of this session did not finish in time");
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let document = stored.document.clone();
    let fence = lease.as_ref().map(Lease::fence);
    let taken = take_back(shared, id, stored, lease).await;
    shared.lock().restoring.remove(id);
    match taken {
        Ok(()) => {
            info!(document, session = %id, "Planner session taken back; waiting for its machine")
        }
        Err(reason) => {
            info!(document, session = %id, reason, "Planner session not taken back; it ends");
            if let Err(error) = end(shared, id, stored, reason, fence).await {
                warn!(%error, session = %id, "a session that was not taken back could not be ended");
            }
        }
    }
}

async fn take_back(
    shared: &Arc<Shared>,
    id: &str,
    stored: &StoredSession,
    lease: Option<Lease>,
) -> Result<(), &'static str> {
    if stored.journal_seq == 0 {
        return Err(BEFORE_JOURNAL);
    }
    let store = shared.hub.store();
    let (after, snapshot) = match &stored.domain {
        Some((seq, json)) => {
            let snapshot: Snapshot = serde_json::from_str(json).map_err(|_| UNREADABLE)?;
            (*seq, Some(snapshot))
        }
        None => (0, None),
    };
    let records = store
        .session_journal(id, after)
        .await
        .map_err(|_| UNREADABLE)?
        .into_iter()
        .map(|(_, json)| serde_json::from_str::<Record>(&json))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| UNREADABLE)?;
    let session =
        PlannerSession::restore(snapshot, records, shared.timing).map_err(|_| UNREADABLE)?;
    let feed: SessionSnapshot = serde_json::from_str(&stored.snapshot).map_err(|_| UNREADABLE)?;
    if session.released().is_some() {
        return Err(UNREADABLE);
    }
    let machine = store
        .machine(session.machine())
        .await
        .map_err(|_| UNREADABLE)?;
    let archived = store
        .is_archived(session.document())
        .await
        .map_err(|_| UNREADABLE)?;
    let now = now();
    let mut next = session;
    let mut step = next.handle_restarted(now);
    step = step.and(reconcile(shared, &mut next).await.map_err(|_| UNREADABLE)?);
    let ended_by = if machine.revoked {
        Some(ReleaseTrigger::MachineRevoked)
    } else if archived {
        Some(ReleaseTrigger::DocumentArchived)
    } else {
        None
    };
    if let Some(trigger) = ended_by {
        step = step.and(next.handle_release(trigger, now));
    }
    let ready = {
        let mut registry = shared.lock();
        if registry.documents.contains_key(next.document()) {
            // One session per document: the older one stays.
            return Err(UNREADABLE);
        }
        let account = machine.account.clone();
        let (_, ready) = shared.spawn(&mut registry, next, step, account, None, feed, lease, true);
        ready
    };
    // Serving starts once what the restart did is committed.
    let _ = ready.await;
    Ok(())
}

/// The session's open questions against their cards: an answer given
/// while the server was down is held for the machine; a card discarded or
/// gone no longer holds a question.
async fn reconcile(shared: &Shared, session: &mut PlannerSession) -> Result<Step, StorageError> {
    let now = now();
    let mut step = Step::default();
    let requests: Vec<_> = session.requests().cloned().collect();
    for request in requests {
        let card = match shared
            .hub
            .store()
            .card(session.document(), &request.0)
            .await
        {
            Ok(stored) => Some(stored.card),
            Err(StorageError::NotFound(_)) => None,
            Err(other) => return Err(other),
        };
        let settled = match card {
            Some(card) => match (card.state, &card.answer, &card.answered_by) {
                (CardState::Open | CardState::Reopened, _, _) => continue,
                (CardState::Answered, Some(answer), Some(by)) => {
                    let answer = wire::answer_body(answer);
                    session.handle_answered(request, answer, by.clone(), now)
                }
                _ => session.handle_discarded(CardId(request.0), now),
            },
            None => session.handle_discarded(CardId(request.0), now),
        };
        step = step.and(settled);
    }
    Ok(step)
}

/// Ends a session that was not taken back: its feed says why (no Chat
/// line: nothing happened that people must be told, SPEC L9).
async fn end(
    shared: &Shared,
    id: &str,
    stored: &StoredSession,
    reason: &str,
    lease: Option<LeaseFence>,
) -> Result<(), StorageError> {
    let mut feed: SessionSnapshot =
        serde_json::from_str(&stored.snapshot).unwrap_or_else(|_| SessionSnapshot::empty(id));
    let cursor = stored.cursor;
    let event = SessionEvent::SessionEnded {
        reason: reason.to_owned(),
    };
    feed.apply(cursor + 1, &event);
    let body = serde_json::to_string(&event)
        .map_err(|e| StorageError::Corrupt(format!("session event: {e}")))?;
    let write = SessionWrite {
        session: id.to_owned(),
        base: stored.journal_seq,
        cursor,
        events: vec![StoredEvent {
            seq: cursor + 1,
            kind: event.kind().to_owned(),
            body,
        }],
        snapshot: serde_json::to_string(&feed)
            .map_err(|e| StorageError::Corrupt(format!("session snapshot: {e}")))?,
        state: state_of(SessionState::Ended),
        lease,
        ..SessionWrite::default()
    };
    shared.journal.commit(write).await
}
