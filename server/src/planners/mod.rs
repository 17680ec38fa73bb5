//! Planner turns over machine links (SPEC T1, T2, T3, P1): which machine a
//! document's Planner runs on, the turn in progress, messages waiting for
//! the next turn, and what reaches Chat.
//!
//! The rules live in `margin-planner` (`Session`, `Steering`, `reply`);
//! this module is the wiring: it binds a document to a linked machine of its
//! owner, sends `invoke`, runs the machine's tool calls for the session's
//! document and account (never ones the machine names), and judges replies.
//! What a link's end and `resume` do to sessions is in [`links`].

mod feed;
mod links;
mod restore;

pub use links::ResumeError;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use margin_decisions::{wire, CardState};
use margin_planner::reply::{judge, repaired, Verdict};
use margin_planner::{
    Effect, Millis, ReleaseReason, ReleaseTrigger, ReplyOutcome, RequestId, RunId, RunRefusal,
    Session, Steering, TurnId,
};
use margin_protocol::chat::{ChatKind, ChatMessageView, MAX_CHAT_BYTES};
use margin_protocol::decisions::{AnswerBody, CaptureStatus, OpenDecisionsOutput, ToolRefusal};
use margin_protocol::link::{PlannerView, RunStatus as LinkRunStatus, RunView, ServerMessage};
use margin_protocol::sessions::UPDATE_PLAN;
use margin_protocol::tools::ToolOutput;
use margin_protocol::RefusalCode;
use serde::de::DeserializeOwned;
use tracing::{info, warn};
use uuid::Uuid;

use crate::link::{refusal, Link, Links};
use crate::sessions::{Published, SessionLog};
use crate::storage::{Account, StorageError};
use crate::sync::Hub;
use crate::tools::{ToolError, Tools};

/// The author of the server's own Chat lines.
pub const SYSTEM_AUTHOR: &str = "margin";
/// The author of the Planner's replies.
pub const PLANNER_AUTHOR: &str = "planner";

/// The Planners of every document.
#[derive(Clone)]
pub struct Planners {
    inner: Arc<Inner>,
}

struct Inner {
    hub: Hub,
    links: Links,
    /// Each session's events and plan, for applications (SPEC E1, E2).
    log: SessionLog,
    /// `PLANNER_IDLE_MS`.
    idle: Millis,
    /// `PLANNER_ATTACH_GRACE_MS`.
    attach_grace: Millis,
    started: Instant,
    by_document: Mutex<HashMap<String, DocumentPlanner>>,
    /// Lock order: `by_document` before `ended`, never the other way.
    ended: Mutex<Ended>,
}

/// What the server ended on its own (SPEC P3: archiving, deleting).
#[derive(Default)]
struct Ended {
    /// Documents archived or deleted: `@planner` binds no session to them.
    documents: HashSet<String>,
    /// Sessions released by the server and told to `stop`, with the link
    /// they ran on: the machine's `stopped` for one is accepted quietly.
    sessions: HashMap<String, u64>,
}

/// One document's Planner session, bound to one link.
struct DocumentPlanner {
    session: String,
    link: Link,
    lifecycle: Session,
    steering: Steering<ChatMessageView>,
    turn: Option<Turn>,
    /// Run names by id, as the machine reported them.
    run_names: HashMap<String, String>,
    /// Answers to its questions the machine has not acknowledged, with who
    /// gave them (SPEC L5).
    answers: HashMap<String, (AnswerBody, String)>,
    /// Host requests (card ids) the session asked that wait on a person.
    requests: std::collections::BTreeSet<String>,
    /// Whether its Planner declared `planning` (SPEC U1): pinned for the
    /// session's life, whatever later links declare.
    planning: bool,
    /// Its plan as last committed, handed back with each turn (U6).
    plan: Option<margin_protocol::sessions::PlanView>,
    /// What its feed last showed.
    published: Published,
}

impl DocumentPlanner {
    /// Whether this is `session`, running on `link`'s machine: the
    /// machine's own word for a session is never enough.
    fn is(&self, session: &str, link: &Link) -> bool {
        self.session == session && self.link.machine.id == link.machine.id
    }

    /// Whether `turn` is this session's running turn, on `link`'s machine.
    fn runs(&self, session: &str, turn: &str, link: &Link) -> bool {
        self.is(session, link) && self.turn.as_ref().is_some_and(|t| t.id == turn)
    }
}

struct Turn {
    id: String,
    /// Questions a reply asked in prose, while a repair turn runs.
    withheld: Vec<String>,
    /// Cards this turn's `open_decisions` captured (new or replayed).
    captured: usize,
}

/// A session released by an explicit act (SPEC P3), with what is left to
/// carry out once the lock is released.
struct Released {
    session: String,
    link: Link,
    /// Its runs that were live: name and age. Stopped with it only when the
    /// trigger was a confirmed Stop; otherwise their state is unknown (P4).
    runs: Vec<(String, Millis)>,
    /// Its questions (card ids), to withdraw.
    questions: Vec<String>,
}

/// Releases `document`'s session by `trigger`, if it has one: it is
/// forgotten, its live runs stop with their true age and its questions are
/// handed back to be withdrawn.
fn release(
    planners: &mut HashMap<String, DocumentPlanner>,
    log: &SessionLog,
    document: &str,
    trigger: ReleaseTrigger,
    now: Millis,
) -> Option<Released> {
    let mut planner = planners.remove(document)?;
    planner.publish_end(log, ReleaseReason::Trigger(trigger));
    let mut runs = Vec::new();
    let mut questions = Vec::new();
    for effect in planner.lifecycle.handle_release(trigger, now) {
        match effect {
            Effect::RunStopped { run, after } | Effect::RunUnknown { run, after } => {
                let name = planner.run_names.remove(&run.0).unwrap_or(run.0);
                runs.push((name, after));
            }
            Effect::WithdrawRequest(request) => questions.push(request.0),
            _ => {}
        }
    }
    Some(Released {
        session: planner.session,
        link: planner.link,
        runs,
        questions,
    })
}

/// What to carry out once the lock is released.
#[derive(Default)]
struct Outcome {
    chat: Vec<(&'static str, ChatKind, String)>,
    send: Option<(Link, ServerMessage)>,
}

impl Planners {
    /// Planners over `hub`'s documents and `links`' machines, idle after
    /// `idle` with nothing to do and nobody viewing.
    pub fn new(
        hub: Hub,
        links: Links,
        log: SessionLog,
        idle: std::time::Duration,
        attach_grace: std::time::Duration,
    ) -> Self {
        Planners {
            inner: Arc::new(Inner {
                hub,
                links,
                log,
                idle: Millis(idle.as_millis() as u64),
                attach_grace: Millis(attach_grace.as_millis() as u64),
                started: Instant::now(),
                by_document: Mutex::new(HashMap::new()),
                ended: Mutex::new(Ended::default()),
            }),
        }
    }

    fn now(&self) -> Millis {
        Millis(self.inner.started.elapsed().as_millis() as u64)
    }

    /// A Chat message mentioned `@planner` (SPEC T1): start a turn, queue it
    /// behind the running one (T3), or say at once that the Planner is not
    /// connected.
    pub async fn called(
        &self,
        document: &str,
        owner: &Account,
        message: ChatMessageView,
    ) -> Result<(), StorageError> {
        let now = self.now();
        let outcome = {
            let mut planners = self.lock();
            if self.ended().documents.contains(document) {
                // Archived or deleted since the message was accepted: no
                // turn starts (SPEC P3).
                info!(
                    document,
                    "no Planner turn: the document is archived or deleted"
                );
                return Ok(());
            }
            let bound = planners
                .get(document)
                .is_some_and(|p| p.lifecycle.is_away() || self.inner.links.is_open(p.link.id));
            if !bound {
                if let Some(gone) = planners.remove(document) {
                    gone.publish_end(&self.inner.log, ReleaseReason::LinkClosed);
                }
                if let Some(link) = self.inner.links.of_account(&owner.id) {
                    info!(document, machine = %link.machine.id, "Planner bound");
                    let planner = DocumentPlanner {
                        session: Uuid::new_v4().to_string(),
                        lifecycle: Session::new(now, self.inner.idle)
                            .with_run_capacity(link.run_capacity)
                            .with_attach_grace(self.inner.attach_grace),
                        planning: link.planning,
                        link,
                        steering: Steering::default(),
                        turn: None,
                        run_names: HashMap::new(),
                        answers: HashMap::new(),
                        requests: Default::default(),
                        plan: None,
                        published: Published::default(),
                    };
                    planner.begin(&self.inner.log, document);
                    planners.insert(document.to_owned(), planner);
                }
            }
            let outcome = match planners.get_mut(document) {
                // Away: the message waits for the machine, which is not
                // replaced by another of the owner's (SPEC L2, L7).
                Some(planner) if planner.lifecycle.is_away() => {
                    if let Some(messages) = planner.steering.handle_message(message) {
                        planner.steering.handle_start_failed(messages);
                    }
                    Outcome {
                        chat: vec![(
                            SYSTEM_AUTHOR,
                            ChatKind::System,
                            "The Planner is disconnected. Your message waits for it and reaches it when it reconnects.".to_owned(),
                        )],
                        send: None,
                    }
                }
                Some(planner) => match planner.steering.handle_message(message) {
                    Some(messages) => start_turn(planner, document, messages, Vec::new(), now),
                    None => Outcome::default(),
                },
                None => Outcome {
                    chat: vec![(
                        SYSTEM_AUTHOR,
                        ChatKind::System,
                        format!(
                            "The Planner is not connected: none of {}'s machines is linked. Start the Planner and mention @planner again.",
                            owner.name
                        ),
                    )],
                    send: None,
                },
            };
            if let Some(planner) = planners.get_mut(document) {
                planner.publish(&self.inner.log, now);
            }
            outcome
        };
        self.carry_out(document, outcome).await
    }

    /// Runs a tool call from `link` for the session's document and account.
    pub async fn tool_call(
        &self,
        link: &Link,
        session: String,
        turn: String,
        call_id: String,
        name: &str,
        arguments: serde_json::Value,
    ) -> ServerMessage {
        let Some((document, planning)) = self.document_of(link, &session, &turn) else {
            return refusal_unknown_turn(&session, &turn, Some(call_id));
        };
        let account = &link.machine.account;
        let tools = Tools::new(self.inner.hub.clone());
        let result = match name {
            "read_document" => tools
                .read_document(account, &document)
                .await
                .map(ToolOutput::ReadDocument),
            "edit_plan" => match input(arguments) {
                Ok(input) => tools
                    .edit_plan(account, &document, input)
                    .await
                    .map(ToolOutput::EditPlan),
                Err(e) => Err(e),
            },
            "open_decisions" => match input(arguments) {
                Ok(input) => self.captured(
                    &document,
                    &turn,
                    tools.open_decisions(account, &document, input).await,
                ),
                Err(e) => Err(e),
            },
            "open_decision" => match input(arguments) {
                Ok(input) => self.captured(
                    &document,
                    &turn,
                    tools.open_decision(account, &document, input).await,
                ),
                Err(e) => Err(e),
            },
            "ask" => match input(arguments) {
                Ok(input) => {
                    let asked = tools.ask(account, &document, input).await;
                    if let Ok(output) = &asked {
                        // The session ended while its question was being
                        // opened (a Stop, an archive): nobody would read the
                        // answer.
                        let orphans = self.asked(&document, &session, output);
                        self.withdraw(&document, orphans).await;
                        self.answer_replays(&document, output).await;
                    }
                    self.captured(&document, &turn, asked)
                }
                Err(e) => Err(e),
            },
            UPDATE_PLAN if planning => match input(arguments) {
                Ok(input) => {
                    self.update_plan(&document, &session, &turn, &call_id, input)
                        .await
                }
                Err(e) => Err(e),
            },
            other => Err(feed::unknown_tool(other, planning)),
        };
        let (output, error) = match result {
            Ok(output) => (Some(output), None),
            Err(ToolError::Refused(refusal)) => (None, Some(refusal)),
            Err(ToolError::Internal(detail)) => {
                warn!(%detail, tool = name, "tool call failed");
                // The one refusal that is not a decision (SPEC L6).
                let refusal = ToolRefusal {
                    code: RefusalCode::Internal,
                    message: "the server failed and could not decide; nothing was acknowledged, so the same call may succeed later".into(),
                    read_again: false,
                    retry: true,
                };
                (None, Some(refusal))
            }
        };
        ServerMessage::ToolResult {
            session,
            turn,
            call_id,
            output,
            error,
        }
    }

    /// The turn's reply (SPEC T2): posted when it asks nothing; withheld for
    /// a repair turn when it asks in prose; after the repair, posted only if
    /// the questions were captured as decisions, else the turn fails visibly.
    pub async fn reply(
        &self,
        link: &Link,
        session: &str,
        turn: &str,
        text: String,
    ) -> Option<ServerMessage> {
        if text.len() > MAX_CHAT_BYTES {
            return Some(refusal(
                RefusalCode::MalformedMessage,
                format!("a reply is at most {MAX_CHAT_BYTES} bytes"),
            ));
        }
        let now = self.now();
        let (document, outcome) = {
            let mut planners = self.lock();
            let Some((document, planner)) = planners
                .iter_mut()
                .find(|(_, p)| p.runs(session, turn, link))
            else {
                return Some(refusal_unknown_turn(session, turn, None));
            };
            let document = document.clone();
            let Some(current) = planner.turn.as_mut() else {
                return Some(refusal_unknown_turn(session, turn, None));
            };
            let mut outcome = Outcome::default();
            let reply_outcome = if current.withheld.is_empty() {
                match judge(&text) {
                    Verdict::Publish => {
                        outcome.chat.push((PLANNER_AUTHOR, ChatKind::Planner, text));
                        Some(ReplyOutcome::Accepted)
                    }
                    Verdict::Withhold { questions } => {
                        // A repair turn: same session, a new turn. The text
                        // is never posted.
                        info!(
                            document,
                            questions = questions.len(),
                            "reply withheld; repair turn"
                        );
                        outcome = start_turn(planner, &document, Vec::new(), questions, now);
                        None
                    }
                }
            } else if repaired(current.withheld.len(), current.captured) {
                outcome.chat.push((
                    SYSTEM_AUTHOR,
                    ChatKind::System,
                    format!(
                        "The Planner opened its {} question(s) as decisions.",
                        current.withheld.len()
                    ),
                ));
                if judge(&text) == Verdict::Publish && !text.trim().is_empty() {
                    outcome.chat.push((PLANNER_AUTHOR, ChatKind::Planner, text));
                }
                Some(ReplyOutcome::Accepted)
            } else {
                outcome.chat.push((
                    SYSTEM_AUTHOR,
                    ChatKind::System,
                    format!(
                        "The Planner's reply was withheld: it asked {} question(s) in Chat and opened {} as decisions.",
                        current.withheld.len(),
                        current.captured
                    ),
                ));
                Some(ReplyOutcome::Refused)
            };
            if let Some(reply_outcome) = reply_outcome {
                let _ =
                    planner
                        .lifecycle
                        .handle_reply_finished(TurnId::from(turn), reply_outcome, now);
                planner.turn = None;
                if let Some(messages) = planner.steering.handle_turn_ended() {
                    let next = start_turn(planner, &document, messages, Vec::new(), now);
                    outcome.send = next.send;
                }
            }
            planner.publish(&self.inner.log, now);
            (document, outcome)
        };
        if let Err(error) = self.carry_out(&document, outcome).await {
            warn!(%error, "chat write failed");
        }
        None
    }

    /// The machine reported a run of `session` (SPEC R1).
    pub fn run(
        &self,
        link: &Link,
        session: &str,
        run: String,
        name: String,
        status: LinkRunStatus,
        attempt: Option<u32>,
    ) -> Option<ServerMessage> {
        if run.is_empty() || run.len() > 128 || name.trim().is_empty() || name.len() > 200 {
            return Some(refusal(
                RefusalCode::MalformedMessage,
                "a run has an id of 1 to 128 bytes and a name of 1 to 200 bytes",
            ));
        }
        let now = self.now();
        let mut planners = self.lock();
        let Some(planner) = planners.values_mut().find(|p| p.is(session, link)) else {
            return Some(refusal_unknown_session(session));
        };
        let status = feed::planner_status(status);
        let attempt = attempt.unwrap_or(1);
        match planner
            .lifecycle
            .handle_run(RunId(run.clone()), attempt, status, now)
        {
            Ok(_) => {
                planner.run_names.entry(run).or_insert(name);
                planner.publish(&self.inner.log, now);
                None
            }
            Err(refused) => {
                let code = match refused {
                    RunRefusal::NoAttemptZero => RefusalCode::MalformedMessage,
                    RunRefusal::CapacityFull { .. } => RefusalCode::RunCapacity,
                    RunRefusal::Superseded { .. } => RefusalCode::SupersededAttempt,
                };
                Some(refusal(code, format!("run {run:?}: {refused}")))
            }
        }
    }

    /// The machine confirmed a Stop: the session is released, its live runs
    /// stop with their true age, and Chat says so (SPEC P3, P4). A `stopped`
    /// for a session the server already ended (archive, delete) is accepted
    /// and changes nothing.
    pub async fn stopped(&self, link: &Link, session: &str) -> Option<ServerMessage> {
        let now = self.now();
        let released = {
            let mut planners = self.lock();
            let document = planners
                .iter()
                .find(|(_, p)| p.is(session, link))
                .map(|(d, _)| d.clone());
            document.and_then(|document| {
                release(
                    &mut planners,
                    &self.inner.log,
                    &document,
                    ReleaseTrigger::Stop,
                    now,
                )
                .map(|released| (document, released))
            })
        };
        let Some((document, released)) = released else {
            let mut ended = self.ended();
            return match ended.sessions.get(session) {
                Some(id) if *id == link.id => {
                    ended.sessions.remove(session);
                    None
                }
                _ => Some(refusal_unknown_session(session)),
            };
        };
        self.withdraw(&document, released.questions).await;
        let mut lines = vec!["The Planner stopped.".to_owned()];
        for (name, after) in released.runs {
            lines.push(format!(
                "{name} was stopped after {} min.",
                after.whole_minutes()
            ));
        }
        self.system_lines(&document, lines).await;
        None
    }

    /// The document was archived or deleted (SPEC P3): its session, if it
    /// has one, is released and its machine told to `stop` (the same
    /// message as a member's Stop; the session is gone without waiting for
    /// `stopped`). For an archive its questions are withdrawn and Chat says
    /// the session ended and which runs were asked to stop — not that they
    /// stopped, which only the machine can confirm (P4). For a delete the
    /// questions and Chat went with the document. Until
    /// [`Planners::document_reopened`], `@planner` starts nothing there.
    pub async fn document_closed(&self, document: &str, trigger: ReleaseTrigger) {
        self.ended().documents.insert(document.to_owned());
        let now = self.now();
        let released = release(&mut self.lock(), &self.inner.log, document, trigger, now);
        let Some(released) = released else {
            return;
        };
        info!(document, session = %released.session, ?trigger, "Planner session released");
        self.ended()
            .sessions
            .insert(released.session.clone(), released.link.id);
        let told = released.link.send(ServerMessage::Stop {
            session: released.session.clone(),
        });
        if trigger == ReleaseTrigger::DocumentDeleted {
            return;
        }
        self.withdraw(document, released.questions).await;
        let why = match trigger {
            ReleaseTrigger::DocumentArchived => "the document was archived",
            ReleaseTrigger::DocumentClosed => "the document was closed",
            _ => "it was released",
        };
        let mut lines = vec![format!("The Planner's session ended: {why}.")];
        if told {
            lines.extend(
                released
                    .runs
                    .into_iter()
                    .map(|(name, _)| format!("{name} was asked to stop.")),
            );
        }
        self.system_lines(document, lines).await;
    }

    /// The document was unarchived: `@planner` starts turns there again.
    pub fn document_reopened(&self, document: &str) {
        self.ended().documents.remove(document);
    }

    /// Appends the server's own lines to `document`'s Chat, logging a
    /// failure: what they announce has already happened.
    async fn system_lines(&self, document: &str, lines: Vec<String>) {
        for line in lines {
            if let Err(error) = self
                .inner
                .hub
                .store()
                .append_chat(document, SYSTEM_AUTHOR, ChatKind::System, &line)
                .await
            {
                warn!(%error, "chat write failed");
            }
        }
    }

    /// Feeds each session who is viewing its document and the time, and
    /// lets go of those idle for the idle period with nobody viewing (SPEC
    /// P3). A session in use is never released here.
    pub async fn tick(&self) {
        let now = self.now();
        let mut endings = Vec::new();
        {
            let mut planners = self.lock();
            let mut gone = Vec::new();
            for (document, planner) in planners.iter_mut() {
                let _ = planner
                    .lifecycle
                    .handle_viewers(self.inner.hub.viewers(document), now);
                let effects = planner.lifecycle.handle_timeout(now);
                if effects.contains(&Effect::Released(ReleaseReason::Idle)) {
                    info!(document, "Planner session released after its idle period");
                    planner.publish_end(&self.inner.log, ReleaseReason::Idle);
                    gone.push(document.clone());
                } else if let Some(ending) = Self::lease_ended(planner, document, effects) {
                    info!(document, "Planner session released: its machine did not come back within the attach grace");
                    planner.publish_end(&self.inner.log, ReleaseReason::LinkClosed);
                    gone.push(document.clone());
                    endings.push(ending);
                }
            }
            for document in gone {
                planners.remove(&document);
            }
        }
        self.carry_out_endings(endings).await;
    }

    /// How often [`Planners::tick`] should run: often enough to honour the
    /// idle period and the attach grace closely, and at least every 5 s.
    pub fn tick_every(&self) -> std::time::Duration {
        let shortest = self.inner.idle.0.min(self.inner.attach_grace.0);
        std::time::Duration::from_millis((shortest / 4).clamp(10, 5_000))
    }

    /// The document's Planner as people see it.
    pub fn view(&self, document: &str) -> PlannerView {
        let now = self.now();
        let planners = self.lock();
        match planners
            .get(document)
            .filter(|p| p.lifecycle.is_away() || self.inner.links.is_open(p.link.id))
        {
            None => PlannerView::default(),
            Some(planner) => PlannerView {
                connected: !planner.lifecycle.is_away(),
                disconnected: planner.lifecycle.is_away(),
                machine: Some(planner.link.machine.name.clone()),
                session: Some(planner.session.clone()),
                replying: planner.lifecycle.replying(),
                stop_pending: planner.lifecycle.stop_pending(),
                questions: planner.requests.len(),
                runs: planner
                    .lifecycle
                    .runs(now)
                    .into_iter()
                    .map(|card| RunView {
                        name: planner.run_name(&card.run.0),
                        run: card.run.0,
                        status: feed::link_status(card.status),
                        age_ms: card.age.0,
                        disconnected: planner.lifecycle.is_away(),
                    })
                    .collect(),
            },
        }
    }

    /// Cancels the cards of questions whose session ended, and mirrors them
    /// (a card nobody will read the answer of no longer holds its question).
    async fn withdraw(&self, document: &str, cards: Vec<String>) {
        for card in cards {
            if let Err(error) = crate::tools::cancel_card(&self.inner.hub, document, &card).await {
                warn!(%error, card, "could not withdraw a question");
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, DocumentPlanner>> {
        self.inner
            .by_document
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ended(&self) -> std::sync::MutexGuard<'_, Ended> {
        self.inner
            .ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The document of `session` if `turn` is its running turn on `link`'s
    /// machine; the machine's own word for either is never enough. Also whether the session plans (SPEC U1).
    fn document_of(&self, link: &Link, session: &str, turn: &str) -> Option<(String, bool)> {
        self.lock()
            .iter()
            .find(|(_, p)| p.runs(session, turn, link))
            .map(|(document, p)| (document.clone(), p.planning))
    }

    /// `ask` opened host requests: the session waits on a person for each
    /// card that holds its question, and stays in use meanwhile (SPEC P1).
    /// If the session ended meanwhile, returns the cards this call created:
    /// no session will read their answers.
    fn asked(&self, document: &str, session: &str, output: &OpenDecisionsOutput) -> Vec<String> {
        let now = self.now();
        let mut planners = self.lock();
        let Some(planner) = planners.get_mut(document).filter(|p| p.session == session) else {
            return output
                .captures
                .iter()
                .filter(|c| c.status == CaptureStatus::Created)
                .map(|c| c.card_id.clone())
                .collect();
        };
        let cards = output
            .captures
            .iter()
            .filter(|c| c.captured)
            .map(|c| c.card_id.clone());
        for card in cards {
            let _ = planner
                .lifecycle
                .handle_request_opened(RequestId(card.clone()), now);
            planner.requests.insert(card);
        }
        planner.publish(&self.inner.log, now);
        Vec::new()
    }

    /// An `ask` that replays a question people already answered gets that
    /// answer at once, as `input-result`: nobody is asked twice (SPEC D3).
    async fn answer_replays(&self, document: &str, output: &OpenDecisionsOutput) {
        let replayed = output
            .captures
            .iter()
            .filter(|c| c.status == CaptureStatus::AlreadyInDocument);
        for capture in replayed {
            match self
                .inner
                .hub
                .store()
                .card(document, &capture.card_id)
                .await
            {
                Ok(stored) => {
                    let card = stored.card;
                    if let (CardState::Answered, Some(answer), Some(by)) =
                        (card.state, &card.answer, &card.answered_by)
                    {
                        self.answered(document, &card.id, wire::answer_body(answer), by);
                    }
                }
                Err(error) => {
                    warn!(%error, card = %capture.card_id, "could not read a replayed question")
                }
            }
        }
    }

    /// Counts what an `open_decisions`-like call captured toward the turn.
    fn captured(
        &self,
        document: &str,
        turn: &str,
        done: Result<OpenDecisionsOutput, ToolError>,
    ) -> Result<ToolOutput, ToolError> {
        let output = done?;
        if let Some(current) = self
            .lock()
            .get_mut(document)
            .and_then(|p| p.turn.as_mut())
            .filter(|t| t.id == turn)
        {
            current.captured += output.captured;
        }
        Ok(ToolOutput::Decisions(output))
    }

    async fn carry_out(&self, document: &str, outcome: Outcome) -> Result<(), StorageError> {
        for (author, kind, text) in outcome.chat {
            self.inner
                .hub
                .store()
                .append_chat(document, author, kind, &text)
                .await?;
        }
        if let Some((link, message)) = outcome.send {
            if !link.send(message) {
                if let Some(gone) = self.lock().remove(document) {
                    gone.publish_end(&self.inner.log, ReleaseReason::LinkClosed);
                }
                let line = "The Planner could not be reached; its turn did not start.";
                self.inner
                    .hub
                    .store()
                    .append_chat(document, SYSTEM_AUTHOR, ChatKind::System, line)
                    .await?;
            }
        }
        Ok(())
    }
}

fn start_turn(
    planner: &mut DocumentPlanner,
    document: &str,
    messages: Vec<ChatMessageView>,
    repair: Vec<String>,
    now: Millis,
) -> Outcome {
    let id = Uuid::new_v4().to_string();
    planner.turn = Some(Turn {
        id: id.clone(),
        withheld: repair.clone(),
        captured: 0,
    });
    let _ = planner
        .lifecycle
        .handle_turn_started(TurnId(id.clone()), now);
    let invoke = ServerMessage::Invoke {
        session: planner.session.clone(),
        turn: id,
        document: document.to_owned(),
        messages,
        repair,
        plan: planner
            .plan
            .clone()
            .filter(|_| planner.planning)
            .map(Box::new),
    };
    Outcome {
        chat: Vec::new(),
        send: Some((planner.link.clone(), invoke)),
    }
}

fn refusal_unknown_session(session: &str) -> ServerMessage {
    refusal(
        RefusalCode::UnknownSession,
        format!("session {session:?} is not running on this machine"),
    )
}

/// Refuses work for a turn that is not running; `call_id` names the
/// `tool-call` refused, so the machine can fail that call.
fn refusal_unknown_turn(session: &str, turn: &str, call_id: Option<String>) -> ServerMessage {
    ServerMessage::Refusal {
        code: RefusalCode::UnknownTurn,
        message: format!("turn {turn:?} of session {session:?} is not running on this machine"),
        call_id,
    }
}

fn input<T: DeserializeOwned>(arguments: serde_json::Value) -> Result<T, ToolError> {
    serde_json::from_value(arguments).map_err(|e| {
        ToolError::Refused(ToolRefusal {
            code: RefusalCode::InvalidInput,
            message: format!("malformed arguments: {e}"),
            read_again: false,
            retry: false,
        })
    })
}
