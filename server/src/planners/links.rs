//! Planner sessions across their machine's links (SPEC L1–L5, L7): what a
//! link's end does to its sessions, `resume` and `resumed`, answers that
//! wait for an acknowledgement, and Stops that wait for the machine.
//!
//! The rules are the `Session`'s (margin-planner); this file carries out
//! its effects: Chat lines, messages to the machine, withdrawn questions.

use std::collections::BTreeSet;

use margin_planner::{Effect, LinkLoss, ReleaseReason, RequestId, ResumeRefusal, RunId};
use margin_protocol::chat::ChatKind;
use margin_protocol::decisions::AnswerBody;
use margin_protocol::link::{
    HeldSession, ResumedSession, ServerMessage, MAX_HELD_QUESTIONS, MAX_RESUME_SESSIONS,
};
use margin_protocol::RefusalCode;
use tracing::{info, warn};

use super::{refusal_unknown_session, DocumentPlanner, Planners, SYSTEM_AUTHOR};
use crate::link::{refusal, Link, LinkEnd};
use crate::storage::StorageError;

/// Chat's line when a kept session's machine drops (said once).
const DISCONNECTED: &str =
    "The Planner disconnected. Its runs and questions are kept until it reconnects; answers wait for it.";
/// Chat's line when it comes back (said once).
const RECONNECTED: &str = "The Planner reconnected.";

/// Why a Resume was refused.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The document has no Planner session.
    #[error("the document has no Planner session")]
    NoSession,
    /// No Stop waits to be confirmed.
    #[error("no Stop is waiting to be confirmed; there is nothing to resume")]
    NoStop,
    /// The machine is away: refused, not held (SPEC L4).
    #[error(
        "the Planner is disconnected; a Resume is not held for it, press it again once it is back"
    )]
    Away,
}

/// What a session's end left to carry out outside the lock.
pub(super) struct Ending {
    pub document: String,
    /// Questions (card ids) to withdraw.
    pub questions: Vec<String>,
    /// Chat lines.
    pub lines: Vec<String>,
}

/// Carries out a release's effects on `planner`: names of runs whose state
/// is now unknown, and questions to withdraw.
pub(super) fn settle_release(
    planner: &mut DocumentPlanner,
    effects: Vec<Effect>,
) -> (Vec<String>, Vec<String>) {
    let (mut unknown, mut questions) = (Vec::new(), Vec::new());
    for effect in effects {
        match effect {
            Effect::RunUnknown { run, .. } => unknown.push(run_name(planner, run)),
            Effect::WithdrawRequest(request) => questions.push(request.0),
            _ => {}
        }
    }
    (unknown, questions)
}

fn run_name(planner: &mut DocumentPlanner, run: RunId) -> String {
    planner.run_names.remove(&run.0).unwrap_or(run.0)
}

/// Chat's lines for a session that ended because its link did.
pub(super) fn ended_lines(in_turn: bool, unknown: Vec<String>) -> Vec<String> {
    let mut lines = Vec::new();
    if in_turn {
        lines
            .push("The Planner disconnected during its turn; its reply was not posted.".to_owned());
    }
    // Nothing says these runs stopped: say so rather than call them stopped
    // (SPEC R2, P4).
    lines.extend(unknown.into_iter().map(|name| {
        format!("{name} was live when the Planner disconnected; whether it stopped is not known.")
    }));
    lines
}

impl Planners {
    /// A link ended (SPEC L1, L2, L7). A resumable link that dropped keeps
    /// each session in use with no deadline; a detach, or a drop with
    /// nothing to keep, leases it for the attach grace; any other end (no
    /// `resumable-sessions`, a refusal, revocation) ends its sessions. At
    /// shutdown nothing is announced (L9).
    pub async fn link_closed(&self, link: &Link, end: LinkEnd) {
        self.ended().sessions.retain(|_, id| *id != link.id);
        let loss = match end {
            LinkEnd::Shutdown | LinkEnd::Superseded => return,
            LinkEnd::Dropped if link.resumable => LinkLoss::Dropped,
            LinkEnd::Detached if link.resumable => LinkLoss::Detached,
            _ => LinkLoss::Ended,
        };
        let now = self.now();
        let mut endings = Vec::new();
        {
            let mut planners = self.lock();
            let on_link: Vec<String> = planners
                .iter()
                .filter(|(_, p)| p.link.id == link.id)
                .map(|(d, _)| d.clone())
                .collect();
            for document in on_link {
                let Some(planner) = planners.get_mut(&document) else {
                    continue;
                };
                let in_turn = planner.turn.is_some();
                let effects = planner.lifecycle.handle_link_lost(loss, now);
                if let Some(reason) = planner.lifecycle.released() {
                    let (unknown, questions) = settle_release(planner, effects);
                    planner.publish_end(&self.inner.log, reason);
                    planners.remove(&document);
                    endings.push(Ending {
                        document,
                        questions,
                        lines: ended_lines(in_turn, unknown),
                    });
                    continue;
                }
                let lines = effects
                    .into_iter()
                    .filter_map(|effect| match effect {
                        Effect::AnnounceDisconnected => Some(DISCONNECTED.to_owned()),
                        Effect::StopUnconfirmed => Some(
                            "The Planner disconnected before confirming the Stop. The Stop is kept and reaches it first when it reconnects."
                                .to_owned(),
                        ),
                        _ => None,
                    })
                    .collect();
                planner.publish(&self.inner.log, now);
                info!(document, session = %planner.session, ?loss, "Planner away; session kept");
                endings.push(Ending {
                    document,
                    questions: Vec::new(),
                    lines,
                });
            }
        }
        self.carry_out_endings(endings).await;
    }

    /// Withdraws questions and posts lines of sessions that ended or changed.
    pub(super) async fn carry_out_endings(&self, endings: Vec<Ending>) {
        for ending in endings {
            // A session's questions end with it: nobody is left to read the
            // answers.
            self.withdraw(&ending.document, ending.questions).await;
            self.system_lines(&ending.document, ending.lines).await;
        }
    }

    /// `resume` from `link` (SPEC L3): each named session of the account
    /// moves to this link — taking it over from a link the server had not
    /// yet noticed was dead — and `resumed` says what carries on. Then held
    /// Stops, then unacknowledged answers, then turns for messages that
    /// waited. A session this machine ran that the list leaves out has
    /// ended on the machine, and ends here.
    pub async fn resume(&self, link: &Link, held: Vec<HeldSession>) -> Result<(), ServerMessage> {
        if held.len() > MAX_RESUME_SESSIONS
            || held.iter().any(|h| {
                h.session.is_empty()
                    || h.session.len() > 128
                    || h.questions.len() > MAX_HELD_QUESTIONS
                    || h.questions.iter().any(|q| q.is_empty() || q.len() > 128)
            })
        {
            return Err(refusal(
                RefusalCode::MalformedMessage,
                format!("resume names at most {MAX_RESUME_SESSIONS} sessions, each with at most {MAX_HELD_QUESTIONS} questions, ids of 1 to 128 bytes"),
            ));
        }
        let now = self.now();
        let (mut carried, mut ended, mut after) = (Vec::new(), Vec::new(), Vec::new());
        let mut endings = Vec::new();
        let mut withdrawn_here = Vec::new();
        let mut superseded = Vec::new();
        {
            let mut planners = self.lock();
            let account = &link.machine.account.id;
            for HeldSession {
                session, questions, ..
            } in held
            {
                let Some((document, planner)) = planners
                    .iter_mut()
                    .find(|(_, p)| p.session == session && p.link.machine.account.id == *account)
                else {
                    ended.push(session);
                    continue;
                };
                if planner.link.id != link.id && self.inner.links.is_open(planner.link.id) {
                    superseded.push(planner.link.clone());
                }
                planner.link = link.clone();
                let listed: BTreeSet<String> = questions.into_iter().collect();
                let waiting: BTreeSet<String> =
                    planner.lifecycle.questions().map(|q| q.0.clone()).collect();
                // Listed, but no longer waiting here: the machine settles them.
                let withdrawn = listed.difference(&waiting).cloned().collect();
                // Open here, but the machine no longer holds them: it
                // withdrew them while the link was down.
                for card in planner
                    .requests
                    .iter()
                    .filter(|c| !listed.contains(*c))
                    .cloned()
                    .collect::<Vec<_>>()
                {
                    planner.requests.remove(&card);
                    let _ = planner
                        .lifecycle
                        .handle_request_settled(&RequestId(card.clone()), now);
                    withdrawn_here.push((document.clone(), card));
                }
                let mut lines = Vec::new();
                for effect in planner.lifecycle.handle_link_back(now) {
                    match effect {
                        Effect::AnnounceReconnected => lines.push(RECONNECTED.to_owned()),
                        Effect::SendStop => after.push(ServerMessage::Stop {
                            session: session.clone(),
                        }),
                        Effect::DeliverAnswer(request) => {
                            if let Some(answer) = planner.input_result(&request.0) {
                                after.push(answer);
                            }
                        }
                        _ => {}
                    }
                }
                if planner.turn.is_none() {
                    if let Some(messages) = planner.steering.handle_turn_ended() {
                        let outcome =
                            super::start_turn(planner, document, messages, Vec::new(), now);
                        if let Some((_, invoke)) = outcome.send {
                            after.push(invoke);
                        }
                    }
                }
                planner.publish(&self.inner.log, now);
                info!(document, %session, link = link.id, "Planner session resumed");
                endings.push(Ending {
                    document: document.clone(),
                    questions: Vec::new(),
                    lines,
                });
                carried.push(ResumedSession {
                    session,
                    document: document.clone(),
                    withdrawn,
                });
            }
            // This machine's sessions that were away and not named: the
            // machine no longer holds them.
            let forgotten: Vec<String> = planners
                .iter()
                .filter(|(_, p)| {
                    p.link.machine.id == link.machine.id
                        && p.link.id != link.id
                        && p.lifecycle.is_away()
                })
                .map(|(d, _)| d.clone())
                .collect();
            for document in forgotten {
                let Some(mut planner) = planners.remove(&document) else {
                    continue;
                };
                let effects = planner.lifecycle.handle_not_resumed(now);
                let (unknown, questions) = settle_release(&mut planner, effects);
                planner.publish_end(&self.inner.log, ReleaseReason::LinkClosed);
                let mut lines = vec![
                    "The Planner came back without this session's work; the session ended."
                        .to_owned(),
                ];
                lines.extend(ended_lines(false, unknown));
                endings.push(Ending {
                    document,
                    questions,
                    lines,
                });
            }
        }
        for old in superseded {
            info!(old = old.id, new = link.id, "link taken over by resume");
            self.inner.links.supersede(&old);
        }
        link.send(ServerMessage::Resumed {
            sessions: carried,
            ended,
        });
        for message in after {
            link.send(message);
        }
        for (document, card) in withdrawn_here {
            self.withdraw(&document, vec![card]).await;
        }
        self.carry_out_endings(endings).await;
        Ok(())
    }

    /// The machine acknowledged an answer (SPEC L5).
    pub fn input_received(
        &self,
        link: &Link,
        session: &str,
        request: &str,
    ) -> Option<ServerMessage> {
        let now = self.now();
        let mut planners = self.lock();
        let Some(planner) = planners.values_mut().find(|p| p.is(session, link)) else {
            return Some(refusal_unknown_session(session));
        };
        planner.answers.remove(request);
        let _ = planner
            .lifecycle
            .handle_answer_received(&RequestId(request.to_owned()), now);
        None
    }

    /// A person answered card `card` of `document`: if a session asked it,
    /// the answer goes to its machine as `input-result` — or waits with the
    /// session while the machine is away — until acknowledged (SPEC L5).
    pub fn answered(&self, document: &str, card: &str, answer: AnswerBody, answered_by: &str) {
        let now = self.now();
        let mut planners = self.lock();
        let Some(planner) = planners
            .get_mut(document)
            .filter(|p| p.requests.contains(card))
        else {
            return;
        };
        planner.requests.remove(card);
        planner
            .answers
            .insert(card.to_owned(), (answer, answered_by.to_owned()));
        for effect in planner
            .lifecycle
            .handle_answered(&RequestId(card.to_owned()), now)
        {
            if let Effect::DeliverAnswer(request) = effect {
                if let Some(message) = planner.input_result(&request.0) {
                    if !planner.link.send(message) {
                        warn!(
                            document,
                            card,
                            "answer not delivered; it waits for the machine's acknowledgement"
                        );
                    }
                }
            }
        }
        planner.publish(&self.inner.log, now);
    }

    /// People discarded card `card` of `document`: if a session asked it, the
    /// session no longer waits on it.
    pub fn discarded(&self, document: &str, card: &str) {
        let now = self.now();
        let mut planners = self.lock();
        if let Some(planner) = planners
            .get_mut(document)
            .filter(|p| p.requests.contains(card))
        {
            planner.requests.remove(card);
            let _ = planner
                .lifecycle
                .handle_request_settled(&RequestId(card.to_owned()), now);
            planner.publish(&self.inner.log, now);
        }
    }

    /// A member pressed Stop: sent, or held while the machine is away; Chat
    /// says which — "stopped" only once the machine confirms (SPEC L4, P4).
    /// False when the document has no Planner session.
    pub async fn stop(&self, document: &str) -> Result<bool, StorageError> {
        let line = {
            let mut planners = self.lock();
            let Some(planner) = planners.get_mut(document) else {
                return Ok(false);
            };
            let now = self.now();
            let mut line = None;
            for effect in planner.lifecycle.handle_stop_requested(now) {
                line = match effect {
                    Effect::SendStop => Some(
                        if planner.link.send(ServerMessage::Stop { session: planner.session.clone() }) {
                            "Stop was sent to the Planner; waiting for it to confirm."
                        } else {
                            "Stop was asked, but the Planner's link is down. The Stop is kept and reaches it first when it reconnects."
                        },
                    ),
                    Effect::StopHeld => Some(
                        "Stop was asked while the Planner is disconnected. The Stop is kept and reaches it first when it reconnects.",
                    ),
                    _ => line,
                };
            }
            planner.publish(&self.inner.log, now);
            line
        };
        if let Some(line) = line {
            self.inner
                .hub
                .store()
                .append_chat(document, SYSTEM_AUTHOR, ChatKind::System, line)
                .await?;
        }
        Ok(true)
    }

    /// A member pressed Resume (SPEC L4): it withdraws the Stop pending now,
    /// only while the machine is linked.
    pub async fn resume_work(&self, document: &str) -> Result<(), ResumeError> {
        let now = self.now();
        {
            let mut planners = self.lock();
            let planner = planners.get_mut(document).ok_or(ResumeError::NoSession)?;
            let effects = planner
                .lifecycle
                .handle_resume_requested(now)
                .map_err(|refused| match refused {
                    ResumeRefusal::NoStop => ResumeError::NoStop,
                    ResumeRefusal::Away => ResumeError::Away,
                })?;
            for effect in effects {
                if effect == Effect::WithdrawStop {
                    planner.link.send(ServerMessage::StopWithdrawn {
                        session: planner.session.clone(),
                    });
                }
            }
            planner.publish(&self.inner.log, now);
        }
        self.system_lines(
            document,
            vec!["Resume was sent: the Stop is withdrawn.".to_owned()],
        )
        .await;
        Ok(())
    }

    /// Sessions whose lease ran out while their machine was away (SPEC L7),
    /// released by [`Planners::tick`].
    pub(super) fn lease_ended(
        planner: &mut DocumentPlanner,
        document: &str,
        effects: Vec<Effect>,
    ) -> Option<Ending> {
        if planner.lifecycle.released() != Some(ReleaseReason::LinkClosed) {
            return None;
        }
        let in_turn = planner.turn.is_some();
        let (unknown, questions) = settle_release(planner, effects);
        let mut lines = ended_lines(in_turn, unknown);
        if planner.steering.waiting() > 0 {
            lines.push(format!(
                "The Planner did not come back; {} message(s) for it were not delivered. Mention @planner again.",
                planner.steering.waiting()
            ));
        }
        Some(Ending {
            document: document.to_owned(),
            questions,
            lines,
        })
    }
}

impl DocumentPlanner {
    /// The `input-result` for an answered question of this session.
    fn input_result(&self, request: &str) -> Option<ServerMessage> {
        let (answer, answered_by) = self.answers.get(request)?;
        Some(ServerMessage::InputResult {
            session: self.session.clone(),
            request: request.to_owned(),
            answer: answer.clone(),
            answered_by: answered_by.clone(),
        })
    }
}
