//! The application feed of a Planner session (SPEC U1–U6, E1–E3): the
//! snapshot `GET /sessions/{sid}` returns, the events
//! `GET /sessions/{sid}/events` streams, and the `update_plan` tool's input
//! and output.
//!
//! A snapshot carries the `cursor` of the last event folded into it.
//! [`SessionSnapshot::apply`] is the reference fold: applying a snapshot's
//! later events, in order, gives exactly the live state. Applications in
//! other languages mirror it (`docs/plans.md`).
//!
//! ```
//! use margin_protocol::sessions::{SessionEvent, SessionSnapshot};
//!
//! let mut snapshot: SessionSnapshot = serde_json::from_str(
//!     r#"{"session":"s1","document":"d1","machine":"laptop","cursor":1,
//!         "state":"active","turn":null,"stop_pending":false,"runs":[],
//!         "host_requests":[],"plan":null}"#,
//! ).unwrap();
//! let event: SessionEvent = serde_json::from_str(
//!     r#"{"kind":"turn_started","turn":"t1"}"#,
//! ).unwrap();
//! snapshot.apply(2, &event);
//! assert_eq!(snapshot.turn.as_deref(), Some("t1"));
//! assert_eq!(snapshot.cursor, 2);
//! ```
//!
//! Every text the Planner wrote (step descriptions, explanations, run
//! names, results) is untrusted model-authored data: render it as text,
//! never as HTML.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::decisions::ToolRefusal;

/// The reserved tool name (SPEC U1): no other binding can take it.
pub const UPDATE_PLAN: &str = "update_plan";
/// What `plan_updated` says it enforced: session metadata only — it grants
/// nothing and proves nothing about the work.
pub const ENFORCEMENT: &str = "session-metadata-only";
/// Most events one read of a session's log takes from storage; an SSE
/// reader far behind reads in batches of this size.
pub const MAX_EVENTS_PER_READ: u32 = 1_000;

/// A Planner's manifest, sent in `hello` (SPEC U1). Unknown fields are
/// refused, so a typo does not silently leave a capability off.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Whether the Planner keeps a durable plan with `update_plan`.
    /// Off by default; pinned for the life of each session it starts.
    #[serde(default)]
    pub planning: bool,
}

/// A step's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started.
    Pending,
    /// Being worked on; at most one step at a time.
    InProgress,
    /// The Planner marked it complete (its word, not a proof).
    Completed,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanStep {
    /// Stable ASCII id, 1–64 bytes, unique in the plan.
    pub id: String,
    /// Non-blank, at most 240 UTF-8 bytes. Model-authored: render as text.
    pub description: String,
    /// Its status.
    pub status: StepStatus,
}

/// `update_plan`'s arguments (SPEC U2): the whole new list.
///
/// ```json
/// {"expected_revision":0,"explanation":"Read first","steps":[
///   {"id":"read","description":"Read the plan","status":"in_progress"}]}
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdatePlanInput {
    /// The revision the Planner last saw; 0 before the first update.
    pub expected_revision: u64,
    /// Why, at most 500 UTF-8 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// The list that replaces the plan; `[]` clears it.
    pub steps: Vec<PlanStep>,
}

/// A session's plan as accepted (SPEC U3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanView {
    /// +1 per accepted replacement; a client keeps the highest it saw.
    pub revision: u64,
    /// The turn of the accepted update.
    pub turn_id: String,
    /// The tool call of the accepted update.
    pub call_id: String,
    /// The update's explanation. Model-authored: render as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// The steps, in the Planner's order.
    pub steps: Vec<PlanStep>,
}

/// `update_plan`'s output: the plan now in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdatePlanOutput {
    /// The plan, at its new revision.
    pub plan: PlanView,
    /// One line for the model.
    pub result: String,
}

/// Where a session is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Its machine is linked.
    Active,
    /// Its machine dropped; the session is kept (SPEC L2).
    Disconnected,
    /// Released (SPEC P3); nothing more happens to it.
    Ended,
}

/// A run as the feed shows it (SPEC R1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionRun {
    /// The machine's id for the run.
    pub run: String,
    /// What people see. Model-authored: render as text.
    pub name: String,
    /// Its last status.
    pub status: crate::link::RunStatus,
}

/// `GET /sessions/{sid}`: a session at `cursor` (SPEC E1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionSnapshot {
    /// The session.
    pub session: String,
    /// Its document.
    pub document: String,
    /// The machine it runs on, by name.
    pub machine: String,
    /// The id of the last event folded in; events after it follow.
    pub cursor: u64,
    /// Where it is.
    pub state: SessionState,
    /// The turn replying now, if any.
    pub turn: Option<String>,
    /// A Stop was asked for and not yet confirmed.
    pub stop_pending: bool,
    /// Its runs, in the order first reported.
    pub runs: Vec<SessionRun>,
    /// Its open host requests: the card ids of questions waiting on people.
    pub host_requests: Vec<String>,
    /// `null` until the first `update_plan`; absent when the Planner did
    /// not declare `planning: true` (SPEC U1).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<PlanView>")]
    pub plan: Option<Option<PlanView>>,
}

/// Reads a field that is present (even as `null`) as `Some`.
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// One event of a session's feed; its SSE `id` is its cursor and its SSE
/// `event` name is `kind`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SessionEvent {
    /// The session began (always the first event).
    SessionStarted {
        /// Its document.
        document: String,
        /// Its machine, by name.
        machine: String,
        /// Whether the Planner declared `planning: true`.
        planning: bool,
    },
    /// A turn began replying.
    TurnStarted {
        /// The turn.
        turn: String,
    },
    /// The turn ended (replied, repaired, refused or cancelled). Its end
    /// completes no step, and no step completes it (SPEC U5).
    TurnFinished {
        /// The turn.
        turn: String,
    },
    /// A run was reported or changed status.
    RunUpdated {
        /// The run now.
        run: SessionRun,
    },
    /// A question began waiting on people.
    HostRequestOpened {
        /// Its card.
        request: String,
    },
    /// A question was answered, discarded or withdrawn.
    HostRequestClosed {
        /// Its card.
        request: String,
    },
    /// A Stop was asked for.
    StopRequested {},
    /// A Resume withdrew the pending Stop.
    StopWithdrawn {},
    /// The machine dropped; the session is kept.
    PlannerDisconnected {},
    /// The machine is back.
    PlannerReconnected {},
    /// Another machine of the account took the session over (`resume`);
    /// it runs there from now on.
    MachineChanged {
        /// That machine, by name.
        machine: String,
    },
    /// The session was released; no event follows.
    SessionEnded {
        /// Why, in words.
        reason: String,
    },
    /// `update_plan` succeeded (SPEC U4): its terminal event, with no
    /// approval or `tool_started` before it.
    PlanUpdated {
        /// Always `update_plan`.
        name: String,
        /// The tool call.
        call_id: String,
        /// The plan now in force.
        plan: PlanView,
        /// The result the Planner got.
        result: String,
        /// Always `session-metadata-only`.
        enforcement: String,
    },
    /// A tool call that changes session metadata was refused (a rejected
    /// `update_plan`); nothing changed.
    ToolFinished {
        /// The tool.
        name: String,
        /// The tool call.
        call_id: String,
        /// The refusal the Planner got.
        error: ToolRefusal,
    },
}

impl SessionEvent {
    /// Its SSE event name.
    pub fn kind(&self) -> &'static str {
        match self {
            SessionEvent::SessionStarted { .. } => "session_started",
            SessionEvent::TurnStarted { .. } => "turn_started",
            SessionEvent::TurnFinished { .. } => "turn_finished",
            SessionEvent::RunUpdated { .. } => "run_updated",
            SessionEvent::HostRequestOpened { .. } => "host_request_opened",
            SessionEvent::HostRequestClosed { .. } => "host_request_closed",
            SessionEvent::StopRequested {} => "stop_requested",
            SessionEvent::StopWithdrawn {} => "stop_withdrawn",
            SessionEvent::PlannerDisconnected {} => "planner_disconnected",
            SessionEvent::PlannerReconnected {} => "planner_reconnected",
            SessionEvent::MachineChanged { .. } => "machine_changed",
            SessionEvent::SessionEnded { .. } => "session_ended",
            SessionEvent::PlanUpdated { .. } => "plan_updated",
            SessionEvent::ToolFinished { .. } => "tool_finished",
        }
    }
}

/// The SSE event sent, without an `id`, to a reader whose cursor the log
/// can no longer continue from: refetch the snapshot and follow from its
/// cursor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resync {
    /// Why the cursor cannot be continued.
    pub reason: String,
    /// The snapshot to refetch.
    pub snapshot: String,
}

impl SessionSnapshot {
    /// A session before any event: what `session_started` is folded into.
    pub fn empty(session: &str) -> Self {
        SessionSnapshot {
            session: session.to_owned(),
            document: String::new(),
            machine: String::new(),
            cursor: 0,
            state: SessionState::Active,
            turn: None,
            stop_pending: false,
            runs: Vec::new(),
            host_requests: Vec::new(),
            plan: None,
        }
    }

    /// Folds event `cursor` in. Events at or before the snapshot's cursor
    /// are already in it and change nothing, and a `plan_updated` older
    /// than the plan held never replaces it (SPEC E2).
    pub fn apply(&mut self, cursor: u64, event: &SessionEvent) {
        if cursor <= self.cursor {
            return;
        }
        self.cursor = cursor;
        match event {
            SessionEvent::SessionStarted {
                document,
                machine,
                planning,
            } => {
                self.document.clone_from(document);
                self.machine.clone_from(machine);
                self.plan = planning.then_some(None);
            }
            SessionEvent::TurnStarted { turn } => self.turn = Some(turn.clone()),
            SessionEvent::TurnFinished { turn } => {
                if self.turn.as_ref() == Some(turn) {
                    self.turn = None;
                }
            }
            SessionEvent::RunUpdated { run } => {
                match self.runs.iter_mut().find(|r| r.run == run.run) {
                    Some(held) => *held = run.clone(),
                    None => self.runs.push(run.clone()),
                }
            }
            SessionEvent::HostRequestOpened { request } => {
                if !self.host_requests.contains(request) {
                    self.host_requests.push(request.clone());
                }
            }
            SessionEvent::HostRequestClosed { request } => {
                self.host_requests.retain(|r| r != request);
            }
            SessionEvent::StopRequested {} => self.stop_pending = true,
            SessionEvent::StopWithdrawn {} => self.stop_pending = false,
            SessionEvent::PlannerDisconnected {} => self.state = SessionState::Disconnected,
            SessionEvent::PlannerReconnected {} => self.state = SessionState::Active,
            SessionEvent::MachineChanged { machine } => self.machine.clone_from(machine),
            SessionEvent::SessionEnded { .. } => {
                self.state = SessionState::Ended;
                self.turn = None;
                self.stop_pending = false;
                self.host_requests.clear();
            }
            SessionEvent::PlanUpdated { plan, .. } => {
                let newer = match &self.plan {
                    Some(Some(held)) => plan.revision > held.revision,
                    _ => true,
                };
                if newer {
                    self.plan = Some(Some(plan.clone()));
                }
            }
            SessionEvent::ToolFinished { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::round_trip;

    fn plan(revision: u64) -> PlanView {
        PlanView {
            revision,
            turn_id: "t1".into(),
            call_id: format!("c{revision}"),
            explanation: None,
            steps: vec![PlanStep {
                id: "read".into(),
                description: "Read the plan".into(),
                status: StepStatus::InProgress,
            }],
        }
    }

    fn started(planning: bool) -> SessionSnapshot {
        let mut snapshot = SessionSnapshot::empty("s1");
        snapshot.apply(
            1,
            &SessionEvent::SessionStarted {
                document: "d1".into(),
                machine: "laptop".into(),
                planning,
            },
        );
        snapshot
    }

    fn plan_updated(revision: u64) -> SessionEvent {
        SessionEvent::PlanUpdated {
            name: UPDATE_PLAN.into(),
            call_id: format!("c{revision}"),
            plan: plan(revision),
            result: format!("plan at revision {revision}"),
            enforcement: ENFORCEMENT.into(),
        }
    }

    #[test]
    fn update_plan_input_round_trips() {
        round_trip(
            UpdatePlanInput {
                expected_revision: 0,
                explanation: Some("Read first".into()),
                steps: vec![PlanStep {
                    id: "read".into(),
                    description: "Read the plan".into(),
                    status: StepStatus::InProgress,
                }],
            },
            r#"{"expected_revision":0,"explanation":"Read first","steps":[{"id":"read","description":"Read the plan","status":"in_progress"}]}"#,
        );
        round_trip(
            UpdatePlanInput {
                expected_revision: 3,
                explanation: None,
                steps: vec![],
            },
            r#"{"expected_revision":3,"steps":[]}"#,
        );
    }

    #[test]
    fn an_unknown_status_or_field_is_malformed() {
        let unknown_status =
            r#"{"expected_revision":0,"steps":[{"id":"a","description":"d","status":"done"}]}"#;
        assert!(serde_json::from_str::<UpdatePlanInput>(unknown_status).is_err());
        let unknown_field = r#"{"expected_revision":0,"steps":[],"session":"s2"}"#;
        assert!(serde_json::from_str::<UpdatePlanInput>(unknown_field).is_err());
    }

    #[test]
    fn a_snapshot_without_planning_has_no_plan_field_and_with_planning_a_null_one() {
        let off = serde_json::to_value(started(false)).unwrap();
        assert!(off.get("plan").is_none());
        let on = serde_json::to_value(started(true)).unwrap();
        assert_eq!(on["plan"], serde_json::Value::Null);
        let read: SessionSnapshot = serde_json::from_value(on).unwrap();
        assert_eq!(read.plan, Some(None));
        let read: SessionSnapshot = serde_json::from_value(off).unwrap();
        assert_eq!(read.plan, None);
    }

    #[test]
    fn events_round_trip_with_their_kind() {
        round_trip(
            plan_updated(1),
            r#"{"kind":"plan_updated","name":"update_plan","call_id":"c1","plan":{"revision":1,"turn_id":"t1","call_id":"c1","steps":[{"id":"read","description":"Read the plan","status":"in_progress"}]},"result":"plan at revision 1","enforcement":"session-metadata-only"}"#,
        );
        round_trip(
            SessionEvent::StopRequested {},
            r#"{"kind":"stop_requested"}"#,
        );
        round_trip(
            SessionEvent::RunUpdated {
                run: SessionRun {
                    run: "r1".into(),
                    name: "Nightly".into(),
                    status: crate::link::RunStatus::Running,
                },
            },
            r#"{"kind":"run_updated","run":{"run":"r1","name":"Nightly","status":"running"}}"#,
        );
        round_trip(
            SessionEvent::MachineChanged {
                machine: "desktop".into(),
            },
            r#"{"kind":"machine_changed","machine":"desktop"}"#,
        );
        for event in [plan_updated(2), SessionEvent::PlannerDisconnected {}] {
            let json = serde_json::to_value(&event).unwrap();
            assert_eq!(json["kind"], event.kind());
        }
    }

    #[test]
    fn a_replayed_older_plan_never_replaces_a_newer_one() {
        let mut snapshot = started(true);
        snapshot.apply(2, &plan_updated(2));
        // A client that tracks revisions, fed an older event under a
        // newer cursor (a replay from another source), keeps revision 2.
        snapshot.apply(3, &plan_updated(1));
        assert_eq!(snapshot.plan.clone().flatten().map(|p| p.revision), Some(2));
        // An event at or behind the cursor is already folded in.
        snapshot.apply(3, &plan_updated(9));
        assert_eq!(snapshot.plan.flatten().map(|p| p.revision), Some(2));
    }

    #[test]
    fn the_fold_tracks_turns_runs_requests_and_the_end() {
        let mut snapshot = started(false);
        snapshot.apply(2, &SessionEvent::TurnStarted { turn: "t1".into() });
        snapshot.apply(
            3,
            &SessionEvent::HostRequestOpened {
                request: "card-1".into(),
            },
        );
        snapshot.apply(4, &SessionEvent::PlannerDisconnected {});
        assert_eq!(snapshot.state, SessionState::Disconnected);
        assert_eq!(snapshot.host_requests, ["card-1"]);
        snapshot.apply(5, &SessionEvent::TurnFinished { turn: "t0".into() });
        assert_eq!(snapshot.turn.as_deref(), Some("t1"), "another turn's end");
        snapshot.apply(
            6,
            &SessionEvent::SessionEnded {
                reason: "stopped".into(),
            },
        );
        assert_eq!(snapshot.state, SessionState::Ended);
        assert_eq!(snapshot.turn, None);
        assert!(snapshot.host_requests.is_empty());
        assert_eq!(snapshot.cursor, 6);
    }
}
