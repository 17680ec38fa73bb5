//! What the bridge holds while it runs: each Margin session's ACP session,
//! its running turn (the one the agent's tool calls act in), the agent's
//! words of that turn, the tool calls it reported, its plan's revision and
//! the permission requests waiting on people. Everything the ACP side and
//! the link side share goes through here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent_client_protocol::v1::schema::{PermissionOption, RequestPermissionResponse};
use agent_client_protocol::v1::Responder;
use margin_protocol::decisions::AnswerBody;
use margin_sdk::{SessionHandle, Turn};
use tokio::sync::{mpsc, watch};

use crate::agent::{self, Work, MAX_QUEUED};
use crate::held::Held;

/// A permission request waiting on a card's answer.
pub(crate) struct Waiting {
    /// The card that asks it.
    pub card: String,
    /// The Margin session that asked.
    pub session: String,
    /// The run that shows the wait (paused until the answer).
    pub run: (String, String),
    /// The agent's options, in the card's order of choices.
    pub options: Vec<PermissionOption>,
    /// Where the outcome goes.
    pub responder: Responder<RequestPermissionResponse>,
}

/// One Margin session as the bridge runs it.
pub(crate) struct Session {
    /// The Margin session's id.
    pub margin: String,
    /// Its ACP session's id.
    pub acp: String,
    /// Its worker's queue: plans and runs, in the agent's order.
    queue: mpsc::Sender<Work>,
    /// Whether the agent is working on a prompt of this session: a Stop
    /// is confirmed only once it is not (SPEC P4).
    prompting: watch::Sender<bool>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The running turn, if any.
    turn: Option<Arc<Turn>>,
    /// The session, for run reports (known from its first turn).
    handle: Option<SessionHandle>,
    /// The agent's words in the running turn.
    reply: String,
    /// The plan's revision as last accepted (0 before the first).
    plan_revision: u64,
    /// Each tool call's title as the agent last gave it.
    titles: HashMap<String, String>,
}

/// Most tool-call titles remembered per session; the oldest calls' are
/// forgotten first (a later update then names its run by its id).
const MAX_TITLES: usize = 256;

impl Session {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Plain data; a panic elsewhere leaves nothing half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `turn` the running one, its reply empty, until the guard drops
    /// (the turn ended or was aborted by a Stop).
    pub fn begin(self: &Arc<Self>, turn: Arc<Turn>) -> Running {
        let mut state = self.lock();
        if let Some(plan) = &turn.plan {
            state.plan_revision = state.plan_revision.max(plan.revision);
        }
        state.handle = Some(turn.session.clone());
        state.turn = Some(turn);
        state.reply.clear();
        Running {
            session: Arc::clone(self),
        }
    }

    /// Queues `work` for the session's worker, waiting while it is full.
    pub async fn work(&self, work: Work) -> Result<(), mpsc::error::SendError<Work>> {
        self.queue.send(work).await
    }

    /// Marks the agent at work on a prompt until the mark drops — when
    /// the prompt's answer came, whether or not its turn still waits.
    pub fn prompting(&self) -> Prompting {
        self.prompting.send_replace(true);
        Prompting {
            prompting: self.prompting.clone(),
        }
    }

    /// Waits until the agent is at work on no prompt of this session.
    pub async fn idle(&self) {
        let mut prompting = self.prompting.subscribe();
        let _ = prompting.wait_for(|prompting| !prompting).await;
    }

    /// The running turn.
    pub fn turn(&self) -> Option<Arc<Turn>> {
        self.lock().turn.clone()
    }

    /// The session's handle, once a turn has run.
    pub fn handle(&self) -> Option<SessionHandle> {
        self.lock().handle.clone()
    }

    /// Adds the agent's words to the running turn's reply; words outside a
    /// turn (a loaded session's history) are nobody's reply.
    pub fn say(&self, words: &str) {
        let mut state = self.lock();
        if state.turn.is_some() {
            state.reply.push_str(words);
        }
    }

    /// The running turn's words so far, taken.
    pub fn take_reply(&self) -> String {
        std::mem::take(&mut self.lock().reply)
    }

    /// The plan revision an update is written against.
    pub fn plan_revision(&self) -> u64 {
        self.lock().plan_revision
    }

    /// Records the revision an update was accepted at.
    pub fn planned(&self, revision: u64) {
        let mut state = self.lock();
        state.plan_revision = state.plan_revision.max(revision);
    }

    /// Remembers a tool call's title (when given) and returns the one to
    /// show.
    pub fn title(&self, tool_call: &str, title: Option<&str>) -> String {
        let mut state = self.lock();
        if let Some(title) = title {
            if state.titles.len() >= MAX_TITLES && !state.titles.contains_key(tool_call) {
                state.titles.clear();
            }
            state.titles.insert(tool_call.to_owned(), title.to_owned());
        }
        state.titles.get(tool_call).cloned().unwrap_or_default()
    }
}

/// The mark of a prompt the agent works on; dropping it clears it.
pub(crate) struct Prompting {
    prompting: watch::Sender<bool>,
}

impl Drop for Prompting {
    fn drop(&mut self) {
        self.prompting.send_replace(false);
    }
}

/// The running turn's mark; dropping it ends the turn.
pub(crate) struct Running {
    session: Arc<Session>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.session.lock().turn = None;
    }
}

/// The bridge's shared state.
#[derive(Clone)]
pub(crate) struct Live {
    inner: Arc<Mutex<Inner>>,
    held: Arc<Mutex<Held>>,
}

#[derive(Default)]
struct Inner {
    /// By Margin session id.
    sessions: HashMap<String, Arc<Session>>,
    /// ACP session id → Margin session id.
    by_acp: HashMap<String, String>,
    /// Permission requests waiting, by the card that asks them.
    waiting: HashMap<String, Waiting>,
}

impl Live {
    /// Nothing running yet; `held` is what the last run kept.
    pub fn new(held: Held) -> Live {
        Live {
            inner: Arc::default(),
            held: Arc::new(Mutex::new(held)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The file of what outlives the bridge.
    pub fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session with this Margin id, if the bridge runs it.
    pub fn session(&self, margin: &str) -> Option<Arc<Session>> {
        self.lock().sessions.get(margin).cloned()
    }

    /// The session whose ACP session this is.
    pub fn by_acp(&self, acp: &str) -> Option<Arc<Session>> {
        let inner = self.lock();
        let margin = inner.by_acp.get(acp)?;
        inner.sessions.get(margin).cloned()
    }

    /// Runs `margin` on ACP session `acp` from now on.
    pub fn insert(&self, margin: &str, acp: &str) -> Arc<Session> {
        let (queue, queued) = mpsc::channel(MAX_QUEUED);
        let session = Arc::new(Session {
            margin: margin.to_owned(),
            acp: acp.to_owned(),
            queue,
            prompting: watch::channel(false).0,
            state: Mutex::default(),
        });
        tokio::spawn(agent::work(Arc::downgrade(&session), queued));
        let mut inner = self.lock();
        if let Some(old) = inner
            .sessions
            .insert(margin.to_owned(), Arc::clone(&session))
        {
            inner.by_acp.remove(&old.acp);
        }
        inner.by_acp.insert(acp.to_owned(), margin.to_owned());
        session
    }

    /// The running turn of Margin session `margin`.
    pub fn turn_of(&self, margin: &str) -> Option<Arc<Turn>> {
        self.session(margin)?.turn()
    }

    /// Keeps a permission request until its card is answered; if the
    /// answer came already (to the same request, asked before a restart),
    /// returns the request with it instead.
    pub fn wait(&self, waiting: Waiting) -> Option<(Waiting, AnswerBody)> {
        let answer = self.held().answer_of(&waiting.card).cloned();
        match answer {
            Some(answer) => Some((waiting, answer)),
            None => {
                self.lock().waiting.insert(waiting.card.clone(), waiting);
                None
            }
        }
    }

    /// The permission request card `card` asks, taken; with none waiting
    /// (its agent was restarted), `answer` is kept in the file for the
    /// request asked again and for the session's next prompt.
    pub fn answered(&self, card: &str, session: &str, answer: &AnswerBody) -> Option<Waiting> {
        let waiting = self.lock().waiting.remove(card);
        if waiting.is_none() {
            if let Err(error) = self.held().answered(card, session, answer) {
                tracing::warn!(card, %error, "an answer to a permission request was not written down");
            }
        }
        waiting
    }

    /// Every permission request of Margin session `margin`, taken.
    pub fn withdrawn(&self, margin: &str) -> Vec<Waiting> {
        let mut inner = self.lock();
        let cards: Vec<String> = inner
            .waiting
            .iter()
            .filter(|(_, waiting)| waiting.session == margin)
            .map(|(card, _)| card.clone())
            .collect();
        cards
            .iter()
            .filter_map(|card| inner.waiting.remove(card))
            .collect()
    }
}
