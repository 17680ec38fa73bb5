//! Run attempts (SPEC R2, T4).

use margin_planner::{AttemptError, AttemptState, Attempts, Ending, RunId};
use pretty_assertions::assert_eq;

fn run() -> RunId {
    RunId::from("plan-review")
}

#[test]
fn an_attempt_goes_from_prepared_to_accepted() {
    let mut attempts = Attempts::new(2);
    let a = attempts.handle_prepare(run()).unwrap();
    attempts.handle_launch(a).unwrap();
    attempts.handle_started(a).unwrap();
    attempts.handle_ended(a, Ending::Completed).unwrap();
    assert_eq!(attempts.state(a), Some(AttemptState::ResultPending));
    attempts.handle_accept(a).unwrap();
    assert_eq!(attempts.state(a), Some(AttemptState::Accepted));
    assert_eq!(attempts.live(), 0);
}

#[test]
fn an_ambiguous_launch_failure_becomes_unknown_and_keeps_its_slot() {
    let mut attempts = Attempts::new(1);
    let a = attempts.handle_prepare(run()).unwrap();
    attempts.handle_launch(a).unwrap();
    attempts.handle_ambiguous_failure(a).unwrap();
    assert_eq!(attempts.state(a), Some(AttemptState::Unknown));
    // It may be running: the slot stays taken.
    assert_eq!(
        attempts.handle_prepare(run()),
        Err(AttemptError::CapacityFull { capacity: 1 })
    );
    // A later observation settles it.
    attempts.handle_ended(a, Ending::Failed).unwrap();
    assert!(attempts.handle_prepare(run()).is_ok());
}

#[test]
fn capacity_counts_pending_and_live_attempts() {
    let mut attempts = Attempts::new(2);
    let a = attempts.handle_prepare(RunId::from("a")).unwrap();
    attempts.handle_prepare(RunId::from("b")).unwrap();
    assert_eq!(
        attempts.handle_prepare(RunId::from("c")),
        Err(AttemptError::CapacityFull { capacity: 2 })
    );
    attempts.handle_launch(a).unwrap();
    attempts.handle_started(a).unwrap();
    attempts.handle_ended(a, Ending::Interrupted).unwrap();
    assert!(attempts.handle_prepare(RunId::from("c")).is_ok());
    assert_eq!(
        Attempts::new(0).handle_prepare(run()),
        Err(AttemptError::CapacityFull { capacity: 0 })
    );
}

#[test]
fn cancel_is_not_an_end_and_illegal_moves_change_nothing() {
    let mut attempts = Attempts::new(1);
    let a = attempts.handle_prepare(run()).unwrap();
    assert!(matches!(
        attempts.handle_started(a),
        Err(AttemptError::IllegalTransition { .. })
    ));
    assert!(matches!(
        attempts.handle_accept(a),
        Err(AttemptError::IllegalTransition { .. })
    ));
    attempts.handle_launch(a).unwrap();
    attempts.handle_cancel(a).unwrap();
    assert_eq!(
        (attempts.state(a), attempts.live()),
        (Some(AttemptState::CancelRequested), 1)
    );
    attempts.handle_ended(a, Ending::Interrupted).unwrap();
    assert_eq!(attempts.state(a), Some(AttemptState::Interrupted));
    assert!(matches!(
        attempts.handle_cancel(a),
        Err(AttemptError::IllegalTransition { .. })
    ));
}

#[test]
fn the_same_end_twice_is_idempotent_and_a_conflicting_end_is_unknown() {
    let mut attempts = Attempts::new(1);
    let a = attempts.handle_prepare(run()).unwrap();
    attempts.handle_launch(a).unwrap();
    attempts.handle_ended(a, Ending::Completed).unwrap();
    attempts.handle_ended(a, Ending::Completed).unwrap();
    assert_eq!(attempts.state(a), Some(AttemptState::ResultPending));
    attempts.handle_ended(a, Ending::Failed).unwrap();
    assert_eq!(attempts.state(a), Some(AttemptState::Unknown));
}

#[test]
fn a_late_result_of_a_superseded_attempt_never_repaints_newer_state() {
    let mut attempts = Attempts::new(2);
    let old = attempts.handle_prepare(run()).unwrap();
    attempts.handle_launch(old).unwrap();
    attempts.handle_cancel(old).unwrap();
    let new = attempts.handle_prepare(run()).unwrap();
    attempts.handle_launch(new).unwrap();
    attempts.handle_started(new).unwrap();
    // The old attempt finishes after all.
    attempts.handle_ended(old, Ending::Completed).unwrap();
    assert_eq!(
        attempts.handle_accept(old),
        Err(AttemptError::Obsolete {
            attempt: old,
            newer: new
        })
    );
    assert_eq!(attempts.state(new), Some(AttemptState::Running));
    // Another run's newer attempt does not make a result obsolete.
    let other = attempts.handle_prepare(RunId::from("other")).unwrap();
    attempts.handle_launch(other).unwrap();
    attempts.handle_ended(new, Ending::Completed).unwrap();
    assert_eq!(attempts.handle_accept(new), Ok(()));
}
