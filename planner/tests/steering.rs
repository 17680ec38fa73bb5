//! Steering messages (SPEC T3).

use margin_planner::Steering;
use pretty_assertions::assert_eq;

#[test]
fn a_message_with_no_turn_running_starts_one_at_once() {
    let mut steering = Steering::default();
    assert_eq!(
        steering.handle_message("@planner draft it"),
        Some(vec!["@planner draft it"])
    );
}

#[test]
fn messages_during_a_turn_arrive_in_order_at_the_boundary() {
    let mut steering = Steering::default();
    steering.handle_message("first");
    assert_eq!(steering.handle_message("also EU"), None);
    assert_eq!(steering.handle_message("and budget"), None);
    assert_eq!(steering.waiting(), 2);
    assert_eq!(
        steering.handle_turn_ended(),
        Some(vec!["also EU", "and budget"])
    );
    assert_eq!(steering.handle_turn_ended(), None);
    assert_eq!(steering.handle_message("next"), Some(vec!["next"]));
}

#[test]
fn a_failed_start_keeps_the_messages_in_front_and_the_queue_usable() {
    let mut steering = Steering::default();
    steering.handle_message("first");
    steering.handle_message("a");
    steering.handle_message("b");
    let next = steering.handle_turn_ended().unwrap();
    steering.handle_start_failed(next);
    assert_eq!(steering.handle_message("c"), Some(vec!["a", "b", "c"]));
}
