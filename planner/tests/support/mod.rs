//! A Planner session on a virtual clock, with a simulated machine on the
//! other side of its link and a simulated store under it.
//!
//! Every step the session returns is "committed" to the simulated journal
//! before its effects are looked at, as the server's driver does; after
//! each step the whole journal is folded back into a session and compared
//! with the live one, so every test also pins that a restored session is
//! exactly the session that was committed (SPEC W2).
#![allow(dead_code)]

use margin_planner::{
    ChatLine, Effect, Held, LinkLoss, Millis, PlannerSession, Record, ReleaseReason,
    ReleaseTrigger, RequestId, RunId, RunStatus, Start, Step, StoredResult, Timing, ToolOutcome,
};
use margin_protocol::chat::{ChatKind, ChatMessageView};
use margin_protocol::decisions::{
    AnswerBody, CaptureStatus, CaptureView, OpenDecisionsOutput, ReadDocumentOutput, ToolRefusal,
};
use margin_protocol::link::ServerMessage;
use margin_protocol::sessions::SessionEvent;
use margin_protocol::tools::{ToolCall, ToolOutput};

pub use margin_planner::CallId;

/// A session, its clock, its committed journal and what it said and sent.
pub struct Sim {
    pub session: PlannerSession,
    pub now: Millis,
    pub timing: Timing,
    /// Every record committed, in order.
    pub journal: Vec<Record>,
    /// Every message sent to the machine, in order.
    pub sent: Vec<ServerMessage>,
    /// Every Chat line, in order.
    pub chat: Vec<ChatLine>,
    /// Every feed event, in order.
    pub events: Vec<SessionEvent>,
    /// Every other effect, in order.
    pub effects: Vec<Effect>,
    /// Viewers are not journaled: once a test sets them, the fold of the
    /// journal is no longer the whole session.
    viewed: bool,
    messages: i64,
}

impl Sim {
    pub fn new() -> Sim {
        Sim::with(false, 8)
    }

    /// A session whose Planner declared `planning` (SPEC U1).
    pub fn planning() -> Sim {
        Sim::with(true, 8)
    }

    pub fn with(planning: bool, run_capacity: usize) -> Sim {
        let timing = Timing::default();
        let start = Start {
            session: "s1".into(),
            document: "d1".into(),
            account: "a1".into(),
            machine: "m1".into(),
            machine_name: "laptop".into(),
            planning,
            run_capacity,
        };
        let now = Millis(1_000_000);
        let (session, step) = PlannerSession::start(start, timing, now);
        let mut sim = Sim {
            session,
            now,
            timing,
            journal: Vec::new(),
            sent: Vec::new(),
            chat: Vec::new(),
            events: Vec::new(),
            effects: Vec::new(),
            viewed: false,
            messages: 0,
        };
        sim.take(step);
        sim
    }

    /// Commits `step` and files what it asks for.
    pub fn take(&mut self, step: Step) -> Step {
        let next = self.journal.last().map_or(1, |r| r.seq + 1);
        for (expected, record) in (next..).zip(&step.journal) {
            assert_eq!(record.seq, expected, "journal records are contiguous");
            assert!(record.at <= self.now, "a record is not from the future");
        }
        self.journal.extend(step.journal.iter().cloned());
        self.chat.extend(step.chat.iter().cloned());
        self.events.extend(step.events.iter().cloned());
        for effect in &step.effects {
            match effect {
                Effect::Send(message) => self.sent.push(message.clone()),
                other => self.effects.push(other.clone()),
            }
        }
        // A deleted document's session has no journal left to fold.
        let deleted = self.session.released()
            == Some(ReleaseReason::Trigger(ReleaseTrigger::DocumentDeleted));
        if !self.viewed && !deleted {
            let restored =
                PlannerSession::restore(None, self.journal.clone(), self.timing).unwrap();
            assert_eq!(restored, self.session, "the journal folds to the session");
            let snapshot = self.session.snapshot();
            let from_snapshot =
                PlannerSession::restore(Some(snapshot), Vec::new(), self.timing).unwrap();
            assert_eq!(from_snapshot, self.session, "the snapshot is the session");
        }
        step
    }

    /// Lets `minutes` pass, honouring every timeout the session sets.
    pub fn wait(&mut self, minutes: u64) {
        self.wait_ms(Millis::minutes(minutes));
    }

    pub fn wait_ms(&mut self, span: Millis) {
        let until = self.now.plus(span);
        while let Some(due) = self.session.poll_timeout() {
            if due > until {
                break;
            }
            self.now = due.max(self.now);
            let step = self.session.handle_timeout(self.now);
            self.take(step);
            if self.session.released().is_some() {
                break;
            }
        }
        self.now = until;
    }

    /// How many people view the document. While anyone does, the live
    /// session counts them and a restored one (which counts again) does
    /// not, so only then is the fold not compared.
    pub fn viewers(&mut self, viewers: usize) {
        self.viewed = viewers > 0;
        let step = self.session.handle_viewers(viewers, self.now);
        self.take(step);
    }

    /// A member's `@planner` message.
    pub fn say(&mut self, text: &str) -> Step {
        self.messages += 1;
        let message = ChatMessageView {
            seq: self.messages,
            author: "ada".into(),
            kind: ChatKind::Member,
            text: text.into(),
            created_at: 0,
        };
        let step = self.session.handle_message(message, self.now);
        self.take(step)
    }

    /// The turn the last `invoke` started, with its messages and repair.
    pub fn invoked(&self) -> Option<(String, Vec<String>, Vec<String>)> {
        self.sent.iter().rev().find_map(|m| match m {
            ServerMessage::Invoke {
                turn,
                messages,
                repair,
                ..
            } => Some((
                turn.clone(),
                messages.iter().map(|m| m.text.clone()).collect(),
                repair.clone(),
            )),
            _ => None,
        })
    }

    /// The running turn, as the last `invoke` named it.
    pub fn turn(&self) -> String {
        self.invoked().expect("a turn was invoked").0
    }

    pub fn reply(&mut self, text: &str) -> Step {
        let turn = self.turn();
        let step = self.session.handle_reply(&turn, text.into(), self.now);
        self.take(step)
    }

    /// A `tool-call` of the running turn.
    pub fn call(&mut self, call: &str, name: &str, arguments: serde_json::Value) -> Step {
        let turn = self.turn();
        let step =
            self.session
                .handle_tool_call(&turn, CallId::from(call), name, arguments, self.now);
        self.take(step)
    }

    /// The driver ran `call` and it returned `result`.
    pub fn finish(&mut self, call: &str, result: Result<ToolOutput, ToolRefusal>) -> Step {
        let bytes = match &result {
            Ok(output) => serde_json::to_string(output).unwrap().len(),
            Err(_) => 0,
        };
        let outcome = ToolOutcome {
            result,
            answered: Vec::new(),
            bytes,
        };
        let step = self
            .session
            .handle_tool_finished(CallId::from(call), outcome, self.now);
        self.take(step)
    }

    /// `read_document` called and answered with an outline of `blocks`.
    pub fn read(&mut self, call: &str, blocks: usize) -> Step {
        let started = self.call(call, "read_document", serde_json::json!({}));
        assert!(matches!(
            started.effects.as_slice(),
            [Effect::RunTool {
                tool: ToolCall::ReadDocument(_),
                ..
            }]
        ));
        self.finish(call, Ok(read_output(blocks)))
    }

    /// `ask` called and the driver opened card `card`.
    pub fn ask(&mut self, call: &str, card: &str) -> Step {
        let started = self.call(call, "ask", ask_arguments(card));
        assert!(
            matches!(started.effects.as_slice(), [Effect::RunTool { .. }]),
            "{started:?}"
        );
        self.finish(call, Ok(decisions(&[(card, CaptureStatus::Created)])))
    }

    pub fn run(&mut self, run: &str, status: RunStatus) -> Step {
        self.attempt(run, 1, status)
    }

    pub fn attempt(&mut self, run: &str, attempt: u32, status: RunStatus) -> Step {
        let step = self.session.handle_run(
            RunId::from(run),
            format!("Run {run}"),
            status,
            attempt,
            self.now,
        );
        self.take(step)
    }

    pub fn answer(&mut self, card: &str) -> Step {
        let step = self.session.handle_answered(
            RequestId::from(card),
            AnswerBody::Yes(true),
            "bo".into(),
            self.now,
        );
        self.take(step)
    }

    pub fn link_lost(&mut self, loss: LinkLoss) -> Step {
        let step = self.session.handle_link_lost(loss, self.now);
        self.take(step)
    }

    pub fn resume(&mut self, held: Held) -> Step {
        let (_, step) = self.session.handle_resume(held, self.now);
        self.take(step)
    }

    pub fn release(&mut self, trigger: ReleaseTrigger) -> Step {
        let step = self.session.handle_release(trigger, self.now);
        self.take(step)
    }

    /// The server restarted: the session is folded back from its journal
    /// (as committed, nothing else) and told so.
    pub fn restart(&mut self) -> Step {
        self.session = PlannerSession::restore(None, self.journal.clone(), self.timing).unwrap();
        self.viewed = false;
        let step = self.session.handle_restarted(self.now);
        self.take(step)
    }

    pub fn released(&self) -> Option<ReleaseReason> {
        self.session.released()
    }

    pub fn chat_texts(&self) -> Vec<&str> {
        self.chat.iter().map(|line| line.text.as_str()).collect()
    }

    pub fn event_kinds(&self) -> Vec<&'static str> {
        self.events.iter().map(SessionEvent::kind).collect()
    }

    /// The messages sent since `from`.
    pub fn sent_since(&self, from: usize) -> &[ServerMessage] {
        &self.sent[from..]
    }

    /// The stored result of the `call_finished` record `seq`.
    pub fn stored(&self, seq: u64) -> StoredResult {
        match &self.journal[(seq - 1) as usize].entry {
            margin_planner::Entry::CallFinished { result, .. } => result.clone(),
            other => panic!("record {seq} is {other:?}, not call_finished"),
        }
    }
}

pub fn read_output(blocks: usize) -> ToolOutput {
    ToolOutput::ReadDocument(ReadDocumentOutput {
        revision: 7,
        outline: (0..blocks)
            .map(|i| margin_protocol::BlockEntry {
                index: i,
                kind: "paragraph".into(),
                text: format!("Paragraph {i} of the plan, long enough to weigh something."),
                digest: format!("{i:064x}"),
                identity: format!("1:{i}"),
            })
            .collect(),
    })
}

pub fn ask_arguments(key: &str) -> serde_json::Value {
    serde_json::json!({"revision": 7, "card": {"key": key, "question": "Ship on March 3?",
        "response": "yes_no", "passages": [{"index": 0, "digest": format!("{:064x}", 0)}]}})
}

/// An `open_decisions`-like output: each card with what happened to it.
pub fn decisions(cards: &[(&str, CaptureStatus)]) -> ToolOutput {
    let captures: Vec<CaptureView> = cards
        .iter()
        .map(|(card, status)| CaptureView {
            key: format!("key-{card}"),
            card_id: (*card).to_owned(),
            status: *status,
            captured: *status != CaptureStatus::NotCaptured,
        })
        .collect();
    ToolOutput::Decisions(OpenDecisionsOutput {
        captured: captures.iter().filter(|c| c.captured).count(),
        captures,
        summary: "summary".into(),
        revision: 8,
    })
}

/// The result a `tool-result` carries: output, or the refusal's code.
pub fn result_of(message: &ServerMessage) -> (String, Result<ToolOutput, String>) {
    match message {
        ServerMessage::ToolResult {
            call_id,
            output: Some(output),
            error: None,
            ..
        } => (call_id.clone(), Ok(output.clone())),
        ServerMessage::ToolResult {
            call_id,
            error: Some(error),
            ..
        } => (call_id.clone(), Err(error.code.to_string())),
        other => panic!("not a tool result: {other:?}"),
    }
}
