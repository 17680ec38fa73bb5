//! A machine's `resume` (SPEC L3, L5, W1): its bounds, the drivers' answers
//! it waits for ([`ResumeUnderway`]), and — once `resumed` went out — what
//! follows it ([`ResumeAnswered`]). A cluster node splitting a `resume`
//! across nodes sends `resumed` itself, between the two.

use std::collections::HashSet;

use margin_protocol::link::{
    HeldSession, ServerMessage, MAX_HELD_CALLS, MAX_HELD_QUESTIONS, MAX_RESUME_SESSIONS,
};
use margin_protocol::RefusalCode;
use tokio::sync::{mpsc, oneshot};
use tracing::info;

use super::input::{Input, Resumed};
use super::{Sessions, MAX_ID_BYTES};
use crate::link::{refusal, Link};

/// The refusal of a `resume` over its bounds (SPEC A2), if it is.
pub fn resume_refusal(held: &[HeldSession]) -> Option<ServerMessage> {
    let bad_id = |id: &String| id.is_empty() || id.len() > MAX_ID_BYTES;
    if held.len() > MAX_RESUME_SESSIONS
        || held.iter().any(|h| {
            bad_id(&h.session)
                || h.questions.len() > MAX_HELD_QUESTIONS
                || h.questions.iter().any(bad_id)
                || h.calls.len() > MAX_HELD_CALLS
                || h.calls.iter().any(bad_id)
                || h.turn.as_ref().is_some_and(bad_id)
        })
    {
        return Some(refusal(
            RefusalCode::MalformedMessage,
            format!("resume names at most {MAX_RESUME_SESSIONS} sessions, each with at most {MAX_HELD_QUESTIONS} questions and {MAX_HELD_CALLS} calls, ids of 1 to {MAX_ID_BYTES} bytes"),
        ));
    }
    None
}

/// A `resume` queued with its sessions' drivers, waiting for their answers.
pub struct ResumeUnderway {
    pub(super) sessions: Sessions,
    pub(super) link: Link,
    pub(super) named: HashSet<String>,
    pub(super) waiting: Vec<(
        String,
        mpsc::Sender<Input>,
        oneshot::Receiver<Option<Resumed>>,
    )>,
    pub(super) ended: Vec<String>,
    /// A driver left without answering because the server is stopping:
    /// no `resumed` goes out, for it would call that session ended.
    pub(super) abandoned: bool,
}

impl ResumeUnderway {
    /// Waits for every session's driver, sends `resumed`, then lets each
    /// send what follows it; ends the machine's sessions it left out.
    pub async fn finish(self) {
        let mut answered = self.answers().await;
        if answered.abandoned {
            // The link closes with the server; the machine resumes after.
            return;
        }
        let resumed = answered.take_resumed();
        answered.link.send(&resumed);
        answered.follow().await;
    }

    /// Waits for every session's driver: what `resumed` is to say, and
    /// what follows it.
    pub async fn answers(self) -> ResumeAnswered {
        let ResumeUnderway {
            sessions,
            link,
            named,
            waiting,
            mut ended,
            mut abandoned,
        } = self;
        let mut carried = Vec::new();
        let mut attach = Vec::new();
        for (session, mailbox, answer) in waiting {
            match answer.await {
                Ok(Some(Resumed {
                    session: resumed,
                    superseded,
                })) => {
                    if let Some(old) = superseded {
                        info!(old = old.id, new = link.id, "link taken over by resume");
                        sessions.shared.links.supersede(&old);
                    }
                    carried.push(resumed);
                    attach.push(mailbox);
                }
                Err(_) if sessions.shared.shutdown.is_cancelled() => abandoned = true,
                _ => ended.push(session),
            }
        }
        ResumeAnswered {
            sessions,
            link,
            named,
            carried,
            ended,
            attach,
            abandoned,
        }
    }
}

/// A `resume` every session's driver answered, waiting for `resumed` to go
/// out.
pub struct ResumeAnswered {
    sessions: Sessions,
    link: Link,
    named: HashSet<String>,
    carried: Vec<margin_protocol::link::ResumedSession>,
    ended: Vec<String>,
    attach: Vec<mpsc::Sender<Input>>,
    /// Some driver left without answering as the server stops: send no
    /// `resumed` (see [`ResumeUnderway::finish`]).
    pub abandoned: bool,
}

impl ResumeAnswered {
    /// The `resumed` to send (taken once).
    pub fn take_resumed(&mut self) -> ServerMessage {
        ServerMessage::Resumed {
            sessions: std::mem::take(&mut self.carried),
            ended: std::mem::take(&mut self.ended),
        }
    }

    /// Once `resumed` went out: lets each session carried on send what
    /// follows it, and ends this machine's sessions the resume left out.
    pub async fn follow(self) {
        let ResumeAnswered {
            sessions,
            link,
            named,
            attach,
            ..
        } = self;
        for mailbox in attach {
            let _ = mailbox.send(Input::Attach { link: link.id }).await;
        }
        // This machine's sessions left out: the machine no longer holds
        // them; each ends if its driver finds it still away.
        let forgotten: Vec<mpsc::Sender<Input>> = {
            let registry = sessions.shared.lock();
            registry
                .machines
                .get(&link.machine.id)
                .into_iter()
                .flatten()
                .filter(|id| !named.contains(*id))
                .filter_map(|id| registry.sessions.get(id))
                .filter(|live| live.shown.borrow().as_ref().is_some_and(|s| s.is_away()))
                .map(|live| live.mailbox.clone())
                .collect()
        };
        for mailbox in forgotten {
            let _ = mailbox.send(Input::NotResumed).await;
        }
    }
}
