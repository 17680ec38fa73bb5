//! What a session shows applications, and the events that move that view
//! from one state to the next (SPEC E2). After every input the session
//! compares what its state showed before with what it shows now, so every
//! change becomes events in the order it happened, from one place,
//! whichever input made it — and they are committed with its journal.

use margin_protocol::sessions::{SessionEvent, SessionRun, SessionSnapshot, SessionState};

use super::state::State;

/// The parts of a session's state its feed shows. The plan is not here:
/// only `update_plan` changes it, with its own event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Published {
    /// The machine it runs on, by name.
    pub machine: String,
    /// The machine is away.
    pub away: bool,
    /// The turn replying.
    pub turn: Option<String>,
    /// A Stop waits for the machine.
    pub stop_pending: bool,
    /// Runs, by id.
    pub runs: Vec<SessionRun>,
    /// Open host requests (card ids).
    pub host_requests: Vec<String>,
}

impl Published {
    /// What a session's state shows.
    pub(super) fn of(state: &State) -> Published {
        Published {
            machine: state.machine_name.clone(),
            away: state.away.is_some(),
            turn: state.turn.as_ref().map(|turn| turn.id.0.clone()),
            stop_pending: state.stop_pending,
            runs: state
                .runs
                .iter()
                .map(|(id, run)| SessionRun {
                    run: id.0.clone(),
                    name: run.name.clone(),
                    status: run.status,
                })
                .collect(),
            host_requests: state.requests.iter().map(|r| r.0.clone()).collect(),
        }
    }

    /// What `snapshot` shows of a session.
    pub fn shown(snapshot: &SessionSnapshot) -> Published {
        let mut runs = snapshot.runs.clone();
        runs.sort_by(|a, b| a.run.cmp(&b.run));
        let mut host_requests = snapshot.host_requests.clone();
        host_requests.sort();
        Published {
            machine: snapshot.machine.clone(),
            away: snapshot.state == SessionState::Disconnected,
            turn: snapshot.turn.clone(),
            stop_pending: snapshot.stop_pending,
            runs,
            host_requests,
        }
    }

    /// The events that take a session from `self` to `next`. A run no
    /// longer in `next` keeps its last published status.
    pub fn diff(&self, next: &Published) -> Vec<SessionEvent> {
        let mut events = Vec::new();
        if self.machine != next.machine {
            events.push(SessionEvent::MachineChanged {
                machine: next.machine.clone(),
            });
        }
        if self.away != next.away {
            events.push(if next.away {
                SessionEvent::PlannerDisconnected {}
            } else {
                SessionEvent::PlannerReconnected {}
            });
        }
        if self.stop_pending != next.stop_pending {
            events.push(if next.stop_pending {
                SessionEvent::StopRequested {}
            } else {
                SessionEvent::StopWithdrawn {}
            });
        }
        if self.turn != next.turn {
            if let Some(turn) = &self.turn {
                events.push(SessionEvent::TurnFinished { turn: turn.clone() });
            }
            if let Some(turn) = &next.turn {
                events.push(SessionEvent::TurnStarted { turn: turn.clone() });
            }
        }
        for run in &next.runs {
            if !self.runs.contains(run) {
                events.push(SessionEvent::RunUpdated { run: run.clone() });
            }
        }
        for request in &self.host_requests {
            if !next.host_requests.contains(request) {
                events.push(SessionEvent::HostRequestClosed {
                    request: request.clone(),
                });
            }
        }
        for request in &next.host_requests {
            if !self.host_requests.contains(request) {
                events.push(SessionEvent::HostRequestOpened {
                    request: request.clone(),
                });
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use margin_protocol::link::RunStatus;

    use super::*;

    fn run(id: &str, status: RunStatus) -> SessionRun {
        SessionRun {
            run: id.into(),
            name: format!("run {id}"),
            status,
        }
    }

    #[test]
    fn folding_the_diff_of_each_change_gives_the_state_after_it() {
        let states = [
            Published::default(),
            Published {
                turn: Some("t1".into()),
                runs: vec![run("a", RunStatus::Running)],
                host_requests: vec!["c1".into(), "c2".into()],
                ..Published::default()
            },
            Published {
                machine: "desktop".into(),
                away: true,
                turn: Some("t1".into()),
                stop_pending: true,
                runs: vec![run("a", RunStatus::Paused), run("b", RunStatus::Running)],
                host_requests: vec!["c2".into()],
            },
            Published {
                turn: Some("t2".into()),
                runs: vec![run("a", RunStatus::Completed), run("b", RunStatus::Running)],
                host_requests: vec!["c3".into()],
                ..Published::default()
            },
            Published {
                runs: vec![run("a", RunStatus::Completed), run("b", RunStatus::Stopped)],
                ..Published::default()
            },
        ];
        let mut snapshot = SessionSnapshot::empty("s1");
        let mut cursor = 0;
        let mut last = Published::default();
        for state in states {
            for event in last.diff(&state) {
                cursor += 1;
                snapshot.apply(cursor, &event);
            }
            assert_eq!(Published::shown(&snapshot), state);
            last = state;
        }
    }

    #[test]
    fn no_change_is_no_event() {
        let state = Published {
            turn: Some("t1".into()),
            runs: vec![run("a", RunStatus::Running)],
            ..Published::default()
        };
        assert!(state.diff(&state.clone()).is_empty());
    }
}
