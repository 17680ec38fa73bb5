//! Planner sessions across a server restart (SPEC U6, L2, W2 in part).
//! Sessions live in memory, but each one's snapshot is committed with
//! every change; at start the server takes back every session a previous
//! run left open, as if its machine's link had just dropped: kept with its
//! plan, questions, live runs and held Stop until the account's next
//! `resume` carries it on, or leased for the attach grace when nothing is
//! in use. A session it cannot take back ends, saying why.
//!
//! What is not stored is lost: the turn in flight (its reply will find no
//! turn), messages queued for the next turn, and runs' true ages (they
//! count again from the restart).

use std::collections::HashMap;

use margin_decisions::{wire, CardState};
use margin_planner::{LinkLoss, ReleaseReason, RequestId, RunId, Session, Steering};
use margin_protocol::link::RunStatus as LinkRunStatus;
use margin_protocol::sessions::{SessionEvent, SessionSnapshot};
use tracing::{info, warn};

use super::feed::planner_status;
use super::{DocumentPlanner, Planners};
use crate::link::Terms;
use crate::sessions::Published;
use crate::storage::{StorageError, StoredSession};

impl Planners {
    /// Takes back the sessions a previous run left open; call once at
    /// start, before serving.
    pub async fn restore(&self) {
        let open = match self.inner.hub.store().open_sessions().await {
            Ok(open) => open,
            Err(error) => {
                warn!(%error, "open Planner sessions not read; none is taken back");
                return;
            }
        };
        for (session, stored) in open {
            let document = stored.document.clone();
            match self.take_back(&session, stored).await {
                Ok(()) => {
                    info!(document, %session, "Planner session taken back; waiting for its machine")
                }
                Err(reason) => {
                    info!(document, %session, reason, "Planner session not taken back; it ends");
                    self.inner.log.append(
                        &session,
                        vec![SessionEvent::SessionEnded {
                            reason: reason.to_owned(),
                        }],
                    );
                }
            }
        }
        self.inner.log.flush().await;
    }

    async fn take_back(&self, session: &str, stored: StoredSession) -> Result<(), &'static str> {
        const UNREADABLE: &str = "the server restarted and could not read the session back";
        let store = self.inner.hub.store();
        let snapshot: SessionSnapshot =
            serde_json::from_str(&stored.snapshot).map_err(|_| UNREADABLE)?;
        let machine = store
            .machine(&stored.machine)
            .await
            .map_err(|_| UNREADABLE)?;
        if machine.revoked {
            return Err("the machine was revoked");
        }
        if store
            .is_archived(&stored.document)
            .await
            .map_err(|_| UNREADABLE)?
        {
            return Err("the document was archived");
        }
        let questions = self
            .questions_now(&stored.document, &snapshot.host_requests)
            .await
            .map_err(|_| UNREADABLE)?;
        let now = self.now();
        let planning = snapshot.plan.is_some();
        let link = self.inner.links.absent(
            &machine,
            Terms {
                run_capacity: margin_planner::DEFAULT_RUN_CAPACITY,
                resumable: true,
                planning,
            },
        );
        let mut lifecycle = Session::new(now, self.inner.idle)
            .with_run_capacity(link.run_capacity)
            .with_attach_grace(self.inner.attach_grace);
        let mut run_names = HashMap::new();
        for run in &snapshot.runs {
            if matches!(run.status, LinkRunStatus::Running | LinkRunStatus::Paused) {
                // A live run stays live: whether it stopped is not known.
                let _ = lifecycle.handle_run(
                    RunId(run.run.clone()),
                    1,
                    planner_status(run.status),
                    now,
                );
                run_names.insert(run.run.clone(), run.name.clone());
            }
        }
        for request in questions.keys() {
            let _ = lifecycle.handle_request_opened(RequestId(request.clone()), now);
        }
        if snapshot.stop_pending {
            let _ = lifecycle.handle_stop_requested(now);
        }
        let _ = lifecycle.handle_link_lost(LinkLoss::Restarted, now);
        let requests = questions
            .iter()
            .filter(|(_, answer)| answer.is_none())
            .map(|(request, _)| request.clone())
            .collect();
        let mut answers = HashMap::new();
        for (request, answer) in questions {
            if let Some(answer) = answer {
                // Answered while the server was down: held for the machine.
                let _ = lifecycle.handle_answered(&RequestId(request.clone()), now);
                answers.insert(request, answer);
            }
        }
        let mut planner = DocumentPlanner {
            session: session.to_owned(),
            link,
            lifecycle,
            steering: Steering::default(),
            turn: None,
            run_names,
            answers,
            requests,
            planning,
            plan: snapshot.plan.clone().flatten(),
            published: Published::shown(&snapshot),
        };
        planner.publish(&self.inner.log, now);
        if let Some(older) = self.lock().insert(stored.document, planner) {
            // One session per document: the newer one is taken back.
            older.publish_end(&self.inner.log, ReleaseReason::LinkClosed);
        }
        Ok(())
    }

    /// The stored session's questions that still wait: each card still
    /// open, with the answer of one answered meanwhile. Discarded and
    /// withdrawn cards no longer hold a question.
    async fn questions_now(
        &self,
        document: &str,
        requests: &[String],
    ) -> Result<
        HashMap<String, Option<(margin_protocol::decisions::AnswerBody, String)>>,
        StorageError,
    > {
        let mut questions = HashMap::new();
        for request in requests {
            let card = match self.inner.hub.store().card(document, request).await {
                Ok(stored) => stored.card,
                Err(StorageError::NotFound(_)) => continue,
                Err(other) => return Err(other),
            };
            match (card.state, &card.answer, &card.answered_by) {
                (CardState::Open | CardState::Reopened, _, _) => {
                    questions.insert(request.clone(), None);
                }
                (CardState::Answered, Some(answer), Some(by)) => {
                    questions.insert(
                        request.clone(),
                        Some((wire::answer_body(answer), by.clone())),
                    );
                }
                _ => {}
            }
        }
        Ok(questions)
    }
}
