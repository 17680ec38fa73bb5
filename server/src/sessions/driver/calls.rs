//! A document tool call run by the driver (SPEC W1): its result recorded
//! with the call's own writes when it wrote, after it otherwise, and sent
//! only once recorded; a result asked for again read from the journal.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use margin_planner::{
    CallId, Effect, Millis, PlannerSession, Record, RequestId, Step, ToolOutcome,
};
use margin_protocol::decisions::ToolRefusal;
use margin_protocol::link::ServerMessage;
use margin_protocol::tools::ToolCall;
use margin_protocol::RefusalCode;
use tokio::sync::oneshot;
use tracing::{warn, Instrument};

use super::Driver;
use crate::sessions::commit::{write_of, Written};
use crate::sessions::result_frame::encoded_size;
use crate::sync::command::{RecordResult, ResultWrite};
use crate::tools::{Ran, ToolError, Tools};

impl Driver {
    /// Runs a document tool call (its start is committed), records its
    /// result — with the call's own writes when it wrote — and returns the
    /// effects of that record.
    pub(super) async fn run_tool(&mut self, call: CallId, tool: ToolCall) -> Vec<Effect> {
        let now = self.shared.now();
        let name = tool.name();
        let recorded = Arc::new(Mutex::new(None));
        let record = name
            .writes()
            .then(|| self.recorder(&call, now, recorded.clone()));
        let tools = Tools::new(self.shared.hub.clone());
        // Inside the session's span: the call's log lines name the session,
        // its document, the turn and the call.
        let span = tracing::info_span!(
            "tool_call",
            tool = name.as_str(),
            call = %call.0,
            turn = self.session.turn().map(|t| t.0.as_str()).unwrap_or_default(),
        );
        let Ran { result, answered } = tools
            .run(&self.account, self.session.document(), tool, record)
            .instrument(span)
            .await;
        // The record the document task made last, if any, is the one that
        // rode with the call's writes.
        let recorded = lock(&recorded).take();
        if let (Ok(_), Some((next, step, written, mut committed))) = (&result, recorded) {
            if committed.try_recv().is_ok() {
                // Recorded with the call's writes, in their transaction.
                self.keep(next, Some(written));
                self.post(&step).await;
                return step.effects;
            }
        }
        let bytes = match &result {
            Ok(output) if !name.writes() => encoded_size(output),
            _ => 0,
        };
        let outcome = ToolOutcome {
            result: result.map_err(|error| refusal_of(error, name.as_str())),
            answered: answered
                .into_iter()
                .map(|(card, answer, by)| (RequestId(card), answer, by))
                .collect(),
            bytes,
        };
        let mut next = self.session.clone();
        let step = next.handle_tool_finished(call, outcome, now);
        match self.commit(next, step).await {
            Ok(step) => step.effects,
            // The result is not recorded: the machine is not told it, and
            // its `resume` after the restart this calls for gets
            // `interrupted` (SPEC W1).
            Err(_) => Vec::new(),
        }
    }

    /// How the document task records a writing call's output with the
    /// call's writes: it steps a copy of the session as it stands (the
    /// driver steps nothing else while the call runs) and returns the
    /// write; the session, step and write go to `recorded`, to keep if
    /// they committed, with where the task says they did.
    fn recorder(
        &self,
        call: &CallId,
        now: Millis,
        recorded: Arc<Mutex<Option<Recorded>>>,
    ) -> RecordResult {
        let (session, feed) = (self.session.clone(), self.feed.clone());
        let (call, keeping) = (call.clone(), self.shared.keeping);
        RecordResult(Arc::new(move |output| {
            let mut next = session.clone();
            let outcome = ToolOutcome {
                result: Ok(output),
                answered: Vec::new(),
                // A writing tool's result is always kept.
                bytes: 0,
            };
            let step = next.handle_tool_finished(call.clone(), outcome, now);
            match write_of(&next, &step, &feed, keeping) {
                Ok(written) => {
                    let (committed, heard) = oneshot::channel();
                    let write = written.write.clone();
                    *lock(&recorded) = Some((next, step, written, heard));
                    Some(ResultWrite { write, committed })
                }
                Err(error) => {
                    // Recorded after the commit instead. Logged from the
                    // document's task: the session is named here.
                    warn!(%error, session = %session.id(), call = %call, "a call's result could not ride with its writes");
                    None
                }
            }
        }))
    }

    /// Sends again the result of `call` journaled in record `seq`.
    pub(super) async fn redeliver(&mut self, call: CallId, seq: u64) {
        let stored = self
            .shared
            .hub
            .store()
            .journal_record(self.session.id(), seq)
            .await;
        let result = match stored {
            Ok(Some(json)) => match serde_json::from_str::<Record>(&json) {
                Ok(Record {
                    entry: margin_planner::Entry::CallFinished { result, .. },
                    ..
                }) => Some(result),
                _ => None,
            },
            _ => None,
        };
        let message = match result {
            Some(result) => self.session.stored_result(&call, result),
            None => {
                warn!(%call, seq, "a call's stored result could not be read");
                ServerMessage::Refusal {
                    code: RefusalCode::Internal,
                    message: format!(
                        "the result of call {:?} could not be read; verify state before retrying",
                        call.0
                    ),
                    call_id: Some(call.0),
                    session: None,
                    turn: None,
                    run: None,
                }
            }
        };
        self.send(&message);
    }
}

/// A writing call's result as the document task recorded it: the session
/// stepped with it, the step, its write, and where the task says the
/// write committed.
type Recorded = (PlannerSession, Step, Written, oneshot::Receiver<()>);

/// The record slot; a panic elsewhere while holding it leaves a value
/// still whole (it is only ever replaced).
fn lock(recorded: &Mutex<Option<Recorded>>) -> MutexGuard<'_, Option<Recorded>> {
    recorded.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A tool's failure as the refusal its call returns.
pub(super) fn refusal_of(error: ToolError, tool: &str) -> ToolRefusal {
    match error {
        ToolError::Refused(refusal) => refusal,
        ToolError::Internal(detail) => {
            warn!(%detail, tool, "tool call failed");
            // The one refusal that is not a decision (SPEC L6).
            ToolRefusal {
                code: RefusalCode::Internal,
                message: "the server failed and could not decide; nothing was acknowledged, so the same call may succeed later".into(),
                read_again: false,
                retry: true,
            }
        }
    }
}
