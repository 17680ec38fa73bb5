//! What a machine's link asks of its sessions (SPEC L1–L9, W1, T1): each
//! message checked against the session it names — a session runs on one
//! machine, and only that machine's links reach it — queued with that
//! session's driver, and answered when the driver is busy or the session
//! unknown.

use std::collections::HashSet;

use margin_planner::{CallId, Held, PlannerSession, RequestId, RunId, Start, TurnId};
use margin_protocol::chat::{ChatKind, ChatMessageView};
use margin_protocol::decisions::ToolRefusal;
use margin_protocol::link::{HeldSession, RunStatus, ServerMessage};
use margin_protocol::sessions::SessionSnapshot;
use margin_protocol::RefusalCode;
use tokio::sync::{mpsc, oneshot};
use tracing::info;
use uuid::Uuid;

use super::input::Input;
use super::{
    now, restore, resume_refusal, Registry, ResumeUnderway, Sessions, BUSY_WAIT, MAILBOX,
    MAX_ID_BYTES,
};
use crate::cluster::Lease;
use crate::link::{refusal, Link, LinkEnd};
use crate::storage::{Account, StorageError};

impl Sessions {
    /// A Chat message mentioned `@planner` (SPEC T1): it goes to the
    /// document's session — starting one on a linked machine of the owner
    /// if there is none — which starts a turn or queues it (T3), or the
    /// sender is told at once that no Planner is connected. Returns once
    /// what it caused is committed.
    pub async fn called(
        &self,
        document: &str,
        owner: &Account,
        message: ChatMessageView,
    ) -> Result<(), StorageError> {
        // In a cluster a new session holds its document's lease (the
        // call was relayed here because this node owns the document).
        let mut lease = match &self.shared.cluster {
            Some(cluster) => Some(cluster.hold(document).await.map_err(|refused| {
                StorageError::Conflict(format!("{refused}; send the message again"))
            })?),
            None => None,
        };
        // In a cluster the owner's machine may be linked to another node
        // whose relay has not reached this one yet (it joined, or came back
        // under a new id, a moment ago): give it the time a relay takes to
        // come before saying no Planner is connected (SPEC C2).
        if self.shared.cluster.is_some() && self.shared.links.of_account(&owner.id).is_none() {
            let _ = self
                .shared
                .links
                .of_account_within(&owner.id, RELAYED_WITHIN)
                .await;
        }
        // A session ending as the message arrives does not take it (its
        // driver drops the answer, or is gone): the message then binds a
        // new session rather than vanishing with the old one.
        for _ in 0..CALL_ATTEMPTS {
            let mailbox = {
                let mut registry = self.shared.lock();
                if registry.closed.contains(document) {
                    // Archived or deleted since the message was accepted: no
                    // turn starts (SPEC P3).
                    info!(
                        document,
                        "no Planner turn: the document is archived or deleted"
                    );
                    return Ok(());
                }
                let live = registry
                    .documents
                    .get(document)
                    .and_then(|id| registry.sessions.get(id))
                    // One whose start is not committed yet is starting.
                    .filter(|live| {
                        live.shown
                            .borrow()
                            .as_ref()
                            .is_none_or(|session| session.released().is_none())
                    })
                    .map(|live| live.mailbox.clone());
                match live {
                    Some(mailbox) => Some(mailbox),
                    None => self.bind(&mut registry, document, owner, &mut lease),
                }
            };
            let Some(mailbox) = mailbox else {
                let line = margin_planner::wording::not_connected(&owner.name);
                let author = margin_planner::wording::SYSTEM_AUTHOR;
                self.shared
                    .hub
                    .append_chat(document, author, ChatKind::System, &line)
                    .await?;
                return Ok(());
            };
            let (done, answer) = oneshot::channel();
            let input = Input::Message {
                message: message.clone(),
                done,
            };
            if mailbox.send(input).await.is_err() {
                continue;
            }
            if let Ok(result) = answer.await {
                return result;
            }
        }
        tracing::warn!(
            document,
            "a Planner message found only sessions that were ending"
        );
        Err(StorageError::Conflict(
            "the document's Planner session kept ending as the message arrived; send it again"
                .into(),
        ))
    }

    /// A new session for `document` on a linked machine of `owner`'s, if
    /// one is linked.
    pub(super) fn bind(
        &self,
        registry: &mut Registry,
        document: &str,
        owner: &Account,
        lease: &mut Option<Lease>,
    ) -> Option<mpsc::Sender<Input>> {
        let link = self.shared.links.of_account(&owner.id)?;
        info!(document, machine = %link.machine.id, "Planner bound");
        let start = Start {
            session: Uuid::new_v4().to_string(),
            document: document.to_owned(),
            account: owner.id.clone(),
            machine: link.machine.id.clone(),
            machine_name: link.machine.name.clone(),
            planning: link.planning,
            run_capacity: link.run_capacity,
        };
        let (session, first) = PlannerSession::start(start, self.shared.timing, now());
        let account = link.machine.account.clone();
        let feed = SessionSnapshot::empty(session.id());
        let (mailbox, _ready) = self.shared.spawn(
            registry,
            session,
            first,
            account,
            Some(link),
            feed,
            lease.take(),
            false,
        );
        Some(mailbox)
    }

    /// The driver of `session` if it runs on `link`'s machine: the
    /// machine's word for a session is never enough.
    pub(super) fn of_link(&self, link: &Link, session: &str) -> Option<mpsc::Sender<Input>> {
        self.shared
            .lock()
            .sessions
            .get(session)
            .filter(|live| live.machine == link.machine.id)
            .map(|live| live.mailbox.clone())
    }

    /// Queues `input` for `session` of `link`'s machine; the refusal to
    /// send back when there is no such session (`missing`) or it stays too
    /// busy (`busy`). A full mailbox makes the link wait — a burst from the
    /// machine slows the machine, it is not refused — but only for
    /// [`BUSY_WAIT`], so one session that does not keep up cannot hold up
    /// the link's other sessions for long.
    pub(super) async fn route(
        &self,
        link: &Link,
        session: &str,
        input: Input,
        missing: impl FnOnce() -> ServerMessage,
        busy: impl FnOnce(String) -> ServerMessage,
    ) -> Option<ServerMessage> {
        let Some(mailbox) = self.of_link(link, session) else {
            return Some(missing());
        };
        match mailbox.send_timeout(input, BUSY_WAIT).await {
            Ok(()) => None,
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => Some(busy(format!(
                "session {session:?} has {MAILBOX} messages waiting; send this again shortly"
            ))),
            Err(mpsc::error::SendTimeoutError::Closed(_)) => Some(missing()),
        }
    }

    /// [`Sessions::route`] for a message about the session as a whole.
    pub(super) async fn route_to_session(
        &self,
        link: &Link,
        session: &str,
        input: Input,
    ) -> Option<ServerMessage> {
        let missing = || unknown_session(session);
        self.route(link, session, input, missing, session_busy)
            .await
    }

    /// A `tool-call` from `link`, for its session's document and account.
    pub async fn tool_call(
        &self,
        link: &Link,
        session: String,
        turn: String,
        call: String,
        name: String,
        arguments: serde_json::Value,
    ) -> Option<ServerMessage> {
        if [&session, &turn, &call]
            .iter()
            .any(|id| id.is_empty() || id.len() > MAX_ID_BYTES)
        {
            return Some(ServerMessage::Refusal {
                code: RefusalCode::MalformedMessage,
                message: format!("session, turn and call_id are 1 to {MAX_ID_BYTES} bytes"),
                call_id: (!call.is_empty() && call.len() <= MAX_ID_BYTES).then_some(call),
                session: None,
                turn: None,
                run: None,
            });
        }
        let missing = || unknown_turn(&session, &turn, Some(&call));
        // The machine may call again (with a new call id): nothing ran.
        let busy = |message| ServerMessage::ToolResult {
            session: session.clone(),
            turn: turn.clone(),
            call_id: call.clone(),
            output: None,
            error: Some(ToolRefusal {
                code: RefusalCode::SessionBusy,
                message,
                read_again: false,
                retry: true,
            }),
        };
        let input = Input::ToolCall {
            turn: turn.clone(),
            call: CallId(call.clone()),
            name,
            arguments,
        };
        self.route(link, &session, input, missing, busy).await
    }

    /// The turn's reply (SPEC T2).
    pub async fn reply(
        &self,
        link: &Link,
        session: &str,
        turn: String,
        text: String,
    ) -> Option<ServerMessage> {
        // Refusals name the reply's turn, so the machine knows which reply
        // to stop sending — or, when busy, to send again (SPEC L10).
        let missing = || unknown_turn(session, &turn, None).answering_reply(session, &turn);
        let busy = |message| session_busy(message).answering_reply(session, &turn);
        let input = Input::Reply {
            turn: turn.clone(),
            text,
        };
        self.route(link, session, input, missing, busy).await
    }

    /// The machine reported a run of `session` (SPEC R1).
    pub async fn run(
        &self,
        link: &Link,
        session: &str,
        run: String,
        name: String,
        status: RunStatus,
        attempt: Option<u32>,
    ) -> Option<ServerMessage> {
        if run.is_empty() || run.len() > MAX_ID_BYTES || name.trim().is_empty() || name.len() > 200
        {
            let refused = refusal(
                RefusalCode::MalformedMessage,
                "a run has an id of 1 to 128 bytes and a name of 1 to 200 bytes",
            );
            let nameable = !run.is_empty() && run.len() <= MAX_ID_BYTES;
            return Some(if nameable {
                refused.answering_run(session, &run)
            } else {
                refused
            });
        }
        let missing = || unknown_session(session).answering_run(session, &run);
        let busy = |message| session_busy(message).answering_run(session, &run);
        let input = Input::Run {
            run: RunId(run.clone()),
            name,
            status,
            attempt: attempt.unwrap_or(1),
        };
        self.route(link, session, input, missing, busy).await
    }

    /// The machine confirmed a Stop (SPEC P3, P4). A `stopped` for a
    /// session the server already ended (archive, delete) is accepted and
    /// changes nothing.
    pub async fn stopped(&self, link: &Link, session: &str) -> Option<ServerMessage> {
        {
            let mut registry = self.shared.lock();
            if let Some(on) = registry.released.get(session).copied() {
                if on.is_none_or(|id| id == link.id) {
                    registry.released.remove(session);
                    return None;
                }
            }
        }
        self.route_to_session(link, session, Input::Stopped).await
    }

    /// The machine acknowledged an answer (SPEC L5).
    pub async fn input_received(
        &self,
        link: &Link,
        session: &str,
        request: String,
    ) -> Option<ServerMessage> {
        let input = Input::AnswerReceived {
            request: RequestId(request),
        };
        self.route_to_session(link, session, input).await
    }

    /// A link ended (SPEC L1, L2, L7): each session it carried hears how.
    pub async fn link_closed(&self, link: &Link, end: LinkEnd) {
        let mailboxes: Vec<mpsc::Sender<Input>> = {
            let mut registry = self.shared.lock();
            registry
                .released
                .retain(|_, on| on.is_none_or(|id| id != link.id));
            registry
                .machines
                .get(&link.machine.id)
                .into_iter()
                .flatten()
                .filter_map(|id| registry.sessions.get(id))
                .map(|live| live.mailbox.clone())
                .collect()
        };
        for mailbox in mailboxes {
            let _ = mailbox.send(Input::LinkLost { link: link.id, end }).await;
        }
    }

    /// This machine's sessions away here that `held` leaves out and the
    /// machine has answered nothing in: their first `invoke` may have died
    /// with the link unread, so they are carried on as if named with
    /// nothing — the `invoke` is sent again — rather than ended (SPEC L10).
    fn unheard_away(&self, link: &Link, held: &[HeldSession]) -> Vec<HeldSession> {
        let registry = self.shared.lock();
        registry
            .machines
            .get(&link.machine.id)
            .into_iter()
            .flatten()
            .filter(|id| !held.iter().any(|h| &h.session == *id))
            .filter(|id| {
                registry.sessions.get(*id).is_some_and(|live| {
                    live.shown
                        .borrow()
                        .as_ref()
                        .is_some_and(|s| s.is_away() && s.is_unheard() && s.released().is_none())
                })
            })
            .map(|id| HeldSession {
                session: id.clone(),
                questions: Vec::new(),
                turn: None,
                calls: Vec::new(),
            })
            .collect()
    }

    /// `resume` from `link` (SPEC L3, W1): each named session of the
    /// account moves to this link — taking it over from a link the server
    /// had not yet noticed was dead — and `resumed` says what carries on;
    /// after it come, per session, a held Stop, unacknowledged answers, the
    /// results of the calls it listed and a turn for messages that waited.
    /// A session this machine ran that the list leaves out, and that is
    /// away, has ended on the machine, and ends here.
    ///
    /// This queues the resume with each session's driver, so anything the
    /// link says next reaches them after it; [`ResumeUnderway::finish`]
    /// waits for their answers and sends `resumed`.
    pub async fn begin_resume(
        &self,
        link: &Link,
        held: Vec<HeldSession>,
    ) -> Result<ResumeUnderway, ServerMessage> {
        if let Some(refused) = resume_refusal(&held) {
            return Err(refused);
        }
        let mut held = held;
        held.extend(self.unheard_away(link, &held));
        let named: HashSet<String> = held.iter().map(|h| h.session.clone()).collect();
        let mut underway = ResumeUnderway {
            sessions: self.clone(),
            link: link.clone(),
            named,
            waiting: Vec::new(),
            ended: Vec::new(),
            abandoned: false,
        };
        for HeldSession {
            session,
            questions,
            turn,
            calls,
        } in held
        {
            if self.shared.cluster.is_some() && !self.runs_here(&session) {
                // In a cluster a resume reaches the node a session belongs
                // on; one being taken back here (the sweep got there first)
                // or still to take back is running before it is answered.
                if let Err(error) = restore::take_back_one(&self.shared, &session).await {
                    info!(%error, session, "session named by a resume not taken back here");
                }
            }
            let Some(mailbox) = self.shared.move_to(&session, link) else {
                underway.ended.push(session);
                continue;
            };
            let (done, answer) = oneshot::channel();
            let held = Held {
                questions: questions.into_iter().map(RequestId).collect(),
                turn: turn.map(TurnId),
                calls: calls.into_iter().map(CallId).collect(),
            };
            let input = Input::Resume {
                link: link.clone(),
                held,
                done,
            };
            if mailbox.send(input).await.is_err() {
                // Gone because the server stops: not ended (see
                // `ResumeUnderway::abandoned`).
                match self.shared.shutdown.is_cancelled() {
                    true => underway.abandoned = true,
                    false => underway.ended.push(session),
                }
                continue;
            }
            underway.waiting.push((session, mailbox, answer));
        }
        Ok(underway)
    }
}

/// How long a node waits for a machine linked elsewhere to be relayed to
/// it: the link's node looks for new nodes every 2 s
/// (`machine::relay::REFRESH`; sessions may not import machine), and the
/// relay takes a moment to open.
const RELAYED_WITHIN: std::time::Duration = std::time::Duration::from_secs(3);

/// How many sessions a Planner message tries before it gives up: each one
/// it meets was ending, and a new one is bound after it.
pub(super) const CALL_ATTEMPTS: usize = 3;

/// The refusal of a message for a session with too much waiting: nothing
/// changed; send it again shortly.
pub(super) fn session_busy(message: String) -> ServerMessage {
    refusal(RefusalCode::SessionBusy, message)
}

/// The refusal of a session that is not running on the machine.
pub(super) fn unknown_session(session: &str) -> ServerMessage {
    refusal(
        RefusalCode::UnknownSession,
        format!("session {session:?} is not running on this machine"),
    )
}

/// The refusal of work for a turn that is not running; `call` names the
/// `tool-call` refused, so the machine can fail that call.
pub(super) fn unknown_turn(session: &str, turn: &str, call: Option<&str>) -> ServerMessage {
    ServerMessage::Refusal {
        code: RefusalCode::UnknownTurn,
        message: format!("turn {turn:?} of session {session:?} is not running on this machine"),
        call_id: call.map(str::to_owned),
        session: None,
        turn: None,
        run: None,
    }
}
