//! The link's side of the tool calls, replies and run reports a machine
//! sends: the way out to the socket, each call waiting for its result
//! (sent again, or failed, as the link comes and goes; SPEC W1), and the
//! sessions and questions this machine holds, kept in a file across its
//! restarts (`crate::kept`) for the next `resume`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use margin_protocol::link::{ClientMessage, HeldSession, RunStatus};
use margin_protocol::RefusalCode;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use crate::handler::ToolError;
use crate::kept::{Invoked, Kept};

/// Calls waiting for a result: call id → the call.
type Pending = HashMap<String, InFlight>;

/// A call waiting for its result.
#[derive(Debug)]
struct InFlight {
    session: String,
    turn: String,
    /// Whether its frame went out on a link: only then can the server
    /// have it, and only then is it named in `resume` (one still queued
    /// goes out after it, and gets its result then).
    written: bool,
    /// Whether the last `resume` named it: only then does `unknown_call`
    /// mean it died with the old link before reaching the server — it
    /// never ran, and goes again (SPEC W1).
    named: bool,
    /// Its `tool-call`, to send again.
    message: ClientMessage,
    waiting: oneshot::Sender<Result<serde_json::Value, ToolError>>,
}

/// The way out to the socket, the tool calls waiting for results, and the
/// sessions and questions a `resume` names.
#[derive(Clone, Debug)]
pub(crate) struct Calls {
    out: mpsc::Sender<ClientMessage>,
    pending: Arc<Mutex<Pending>>,
    held: Arc<Mutex<Kept>>,
    /// Where `held` is kept across the machine's restarts, if anywhere.
    file: Option<Arc<PathBuf>>,
    next: Arc<AtomicU64>,
}

impl Calls {
    pub(crate) fn new(out: mpsc::Sender<ClientMessage>, file: Option<PathBuf>) -> Self {
        let held = file.as_deref().map(read_held).unwrap_or_default();
        Calls {
            out,
            pending: Arc::default(),
            held: Arc::new(Mutex::new(held)),
            file: file.map(Arc::new),
            next: Arc::default(),
        }
    }

    /// Queues a message for the socket (sent once a link is up).
    pub(crate) async fn send(&self, message: ClientMessage) -> Result<(), ToolError> {
        self.out
            .send(message)
            .await
            .map_err(|_| ToolError::LinkClosed)
    }

    /// Calls a tool and waits for its result.
    pub(crate) async fn call(
        &self,
        session: &str,
        turn: &str,
        name: &str,
        arguments: serde_json::Value,
    ) -> Result<serde_json::Value, ToolError> {
        let call_id = format!("c{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let (result, waiting) = oneshot::channel();
        let message = ClientMessage::ToolCall {
            session: session.to_owned(),
            turn: turn.to_owned(),
            call_id: call_id.clone(),
            name: name.to_owned(),
            arguments,
        };
        self.pending().insert(
            call_id.clone(),
            InFlight {
                session: session.to_owned(),
                turn: turn.to_owned(),
                written: false,
                named: false,
                message: message.clone(),
                waiting: result,
            },
        );
        let sent = self.send(message).await;
        if let Err(e) = sent {
            self.pending().remove(&call_id);
            return Err(e);
        }
        waiting.await.map_err(|_| ToolError::LinkClosed)?
    }

    /// Remembers a question `session` asked, for the next `resume`.
    pub(crate) fn hold_question(&self, session: &str, request: &str) {
        self.change_held(|held| held.hold_question(session, request));
    }

    pub(crate) fn hold_session(&self, session: &str) {
        self.change_held(|held| held.hold_session(session));
    }

    pub(crate) fn settle_question(&self, session: &str, request: &str) {
        self.change_held(|held| held.settle_question(session, request));
    }

    /// `stopped` went out for `session`.
    pub(crate) fn stopped(&self, session: &str) {
        self.change_held(|held| held.stopped(session));
    }

    /// The server no longer has `session`.
    pub(crate) fn ended(&self, session: &str) {
        self.change_held(|held| held.ended(session));
    }

    /// Nothing will be resumed; with `owed`, what the sessions still owe
    /// the server is kept for a later `resume` all the same.
    pub(crate) fn forget(&self, owed: bool) {
        if owed {
            self.change_held(Kept::forget_settled);
        } else {
            self.change_held(Kept::forget_all);
        }
    }

    /// Changes what is kept; `change` says whether it changed anything, and
    /// then the held file (if any) is written again.
    fn change_held(&self, change: impl FnOnce(&mut Kept) -> bool) {
        self.with_held(|held| ((), change(held)));
    }

    /// Like [`Calls::change_held`], with a result besides.
    fn with_held<R>(&self, change: impl FnOnce(&mut Kept) -> (R, bool)) -> R {
        let mut held = self.held();
        let (result, changed) = change(&mut held);
        if changed {
            if let Some(file) = &self.file {
                write_held(file, &held);
            }
        }
        result
    }

    /// A reply or run report went out: kept until settled.
    pub(crate) fn sent(&self, message: &ClientMessage) {
        self.change_held(|held| held.sent(message));
    }

    pub(crate) fn reply_received(&self, session: &str, turn: &str) {
        self.change_held(|held| held.reply_received(session, turn));
    }

    pub(crate) fn run_received(&self, session: &str, run: &str, attempt: u32, status: RunStatus) {
        self.change_held(|held| held.run_received(session, run, attempt, status));
    }

    pub(crate) fn refused(
        &self,
        session: &str,
        turn: Option<&str>,
        run: Option<&str>,
        code: RefusalCode,
        now: Instant,
    ) {
        self.change_held(|held| held.refused(session, turn, run, code, now));
    }

    pub(crate) fn invoked(&self, session: &str, turn: &str) -> Invoked {
        self.with_held(|held| held.invoked(session, turn))
    }

    /// What to send again after `resumed`.
    pub(crate) fn resumed(&self) -> Vec<ClientMessage> {
        self.held().resumed()
    }

    pub(crate) fn next_retry(&self) -> Option<Instant> {
        self.held().next_retry()
    }

    /// The replies and reports refused as busy that are due again.
    pub(crate) fn due(&self, now: Instant) -> Vec<ClientMessage> {
        self.held().due(now)
    }

    /// The `resume` naming what this machine holds; `turn_of` gives each
    /// session's running turn, else the turn of its reply still kept.
    /// What is kept goes out again after its `resumed`.
    pub(crate) fn resume(&self, turn_of: impl Fn(&str) -> Option<String>) -> ClientMessage {
        let mut pending = self.pending();
        // A call whose turn was aborted has nobody waiting any more.
        pending.retain(|_, call| !call.waiting.is_closed());
        let mut held = self.held();
        held.resuming();
        for call in pending.values_mut() {
            call.named = false;
        }
        ClientMessage::Resume {
            sessions: held
                .sessions()
                .map(|(session, questions, replied)| {
                    let turn = turn_of(session).or_else(|| replied.map(str::to_owned));
                    let calls = pending
                        .iter_mut()
                        .filter(|(_, c)| {
                            c.written && c.session == session && Some(&c.turn) == turn.as_ref()
                        })
                        .take(margin_protocol::link::MAX_HELD_CALLS)
                        .map(|(call, c)| {
                            c.named = true;
                            call.clone()
                        })
                        .collect();
                    HeldSession {
                        session: session.to_owned(),
                        questions,
                        turn,
                        calls,
                    }
                })
                .collect(),
        }
    }

    pub(crate) fn settle(&self, call_id: &str, result: Result<serde_json::Value, ToolError>) {
        match self.pending().remove(call_id) {
            Some(call) => {
                let _ = call.waiting.send(result);
            }
            None => warn!(%call_id, "a result for no call in flight ignored"),
        }
    }

    /// The `tool-call` to send again for `call_id`, answered `unknown_call`:
    /// only if the last `resume` named it — then it died with the old link
    /// before reaching the server, so it never ran and calling it again is
    /// safe (SPEC W1) — and its turn is still `running` (session, turn).
    /// Otherwise the refusal is its answer (`None`).
    pub(crate) fn again(
        &self,
        call_id: &str,
        running: impl Fn(&str, &str) -> bool,
    ) -> Option<ClientMessage> {
        let mut pending = self.pending();
        let call = pending
            .get_mut(call_id)
            .filter(|call| call.named && running(&call.session, &call.turn))?;
        call.named = false;
        call.written = false;
        Some(call.message.clone())
    }

    /// Fails the calls in flight of a session that ended.
    pub(crate) fn fail_session(&self, session: &str) {
        self.pending().retain(|_, call| call.session != session);
    }

    /// Call `call_id`'s frame went out on a link.
    pub(crate) fn mark_written(&self, call_id: &str) {
        if let Some(call) = self.pending().get_mut(call_id) {
            call.written = true;
        }
    }

    /// Fails every call in flight: its result, if any, went with the link.
    pub(crate) fn fail_in_flight(&self) {
        self.pending().clear();
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a held file says: each session this machine holds, the questions
/// it waits on, and what it owes the server (`margin_protocol::kept`; the
/// older bare lists of questions read too). A missing or unreadable file
/// holds nothing.
fn read_held(path: &std::path::Path) -> Kept {
    match std::fs::read_to_string(path) {
        Ok(text) => match serde_json::from_str(&text) {
            Ok(file) => Kept::from_file(file),
            Err(error) => {
                warn!(path = %path.display(), %error, "the held sessions file is unreadable; resuming none");
                Kept::default()
            }
        },
        Err(_) => Kept::default(),
    }
}

/// Replaces the held file, atomically and privately; a failure is logged
/// (what it holds is still kept while this process lives).
fn write_held(path: &std::path::Path, held: &Kept) {
    let json = serde_json::to_string(&held.file()).unwrap_or_default();
    if let Err(error) = crate::credential::write_private_file(path, &json) {
        warn!(path = %path.display(), %error, "cannot save the held sessions");
    }
}
