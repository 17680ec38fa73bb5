//! Steering (SPEC T3): messages that arrive while a turn runs wait, in
//! order, and are delivered together at the next turn boundary.
//!
//! Call order: [`Steering::handle_message`] for each message; it says when a
//! turn should start now. [`Steering::handle_turn_ended`] at every turn
//! boundary; it hands over what waited. If starting that turn fails,
//! [`Steering::handle_start_failed`] puts the messages back in front, in
//! order, so nothing is lost and the queue stays usable.

use std::collections::VecDeque;

/// The steering queue of one session, over messages of type `M`.
#[derive(Debug)]
pub struct Steering<M> {
    waiting: VecDeque<M>,
    turn_running: bool,
}

impl<M> Default for Steering<M> {
    fn default() -> Self {
        Steering {
            waiting: VecDeque::new(),
            turn_running: false,
        }
    }
}

impl<M> Steering<M> {
    /// A message arrived. Returns the messages a turn should start with now,
    /// or `None` when a turn is running and the message waits.
    pub fn handle_message(&mut self, message: M) -> Option<Vec<M>> {
        self.waiting.push_back(message);
        if self.turn_running {
            None
        } else {
            self.start()
        }
    }

    /// The running turn ended. Returns the messages that waited, in order, as
    /// the next turn's — or `None` when nothing waited.
    pub fn handle_turn_ended(&mut self) -> Option<Vec<M>> {
        self.turn_running = false;
        self.start()
    }

    /// Starting the turn with `messages` failed: they wait again, ahead of
    /// anything that arrived since, in their original order.
    pub fn handle_start_failed(&mut self, messages: Vec<M>) {
        self.turn_running = false;
        for message in messages.into_iter().rev() {
            self.waiting.push_front(message);
        }
    }

    /// How many messages wait.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn start(&mut self) -> Option<Vec<M>> {
        if self.waiting.is_empty() {
            return None;
        }
        self.turn_running = true;
        Some(self.waiting.drain(..).collect())
    }
}
