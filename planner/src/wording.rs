//! Every sentence a Planner session says: its Chat lines and the reasons
//! its feed gives for an end. One place, so what is said stays true to
//! what happened (SPEC L2, L4, L9, P4) and reads the same everywhere.

use crate::session::{ReleaseReason, ReleaseTrigger};

/// Who the server's own Chat lines are from.
pub const SYSTEM_AUTHOR: &str = "margin";
/// Who the Planner's accepted replies are from.
pub const PLANNER_AUTHOR: &str = "planner";

/// A kept session's machine dropped (said once, SPEC L2).
pub const DISCONNECTED: &str =
    "The Planner disconnected. Its runs and questions are kept until it reconnects; answers wait for it.";
/// It came back (said once).
pub const RECONNECTED: &str = "The Planner reconnected.";
/// A message for a Planner that is away (SPEC T1).
pub const MESSAGE_WAITS: &str =
    "The Planner is disconnected. Your message waits for it and reaches it when it reconnects.";
/// A Stop went to the machine (SPEC L4): not yet "stopped".
pub const STOP_SENT: &str = "Stop was sent to the Planner; waiting for it to confirm.";
/// A Stop pressed while the machine is away.
pub const STOP_HELD: &str =
    "Stop was asked while the Planner is disconnected. The Stop is kept and reaches it first when it reconnects.";
/// The link dropped before the machine confirmed a Stop.
pub const STOP_UNCONFIRMED: &str =
    "The Planner disconnected before confirming the Stop. The Stop is kept and reaches it first when it reconnects.";
/// A Resume withdrew the pending Stop.
pub const RESUME_SENT: &str = "Resume was sent: the Stop is withdrawn.";
/// The machine confirmed a Stop.
pub const STOPPED: &str = "The Planner stopped.";
/// The link ended during a turn.
pub const ENDED_IN_TURN: &str =
    "The Planner disconnected during its turn; its reply was not posted.";
/// The machine came back without the session.
pub const CAME_BACK_WITHOUT: &str =
    "The Planner came back without this session's work; the session ended.";
/// The machine came back without the turn that was running.
pub const TURN_ABANDONED: &str =
    "The Planner came back without the turn it was working on; that turn ended without a reply. Mention @planner again.";

/// A live run stopped by a confirmed Stop, with its true age (SPEC P4).
pub fn run_stopped(name: &str, minutes: u64) -> String {
    format!("{name} was stopped after {minutes} min.")
}

/// A live run of a session that ended any other way: nothing proves it
/// stopped (SPEC R2, P4).
pub fn run_unknown(name: &str) -> String {
    format!("{name} was live when the Planner disconnected; whether it stopped is not known.")
}

/// A run the server asked to stop as it ended the session.
pub fn run_asked_to_stop(name: &str) -> String {
    format!("{name} was asked to stop.")
}

/// The machine did not come back within the attach grace with messages
/// still waiting for it.
pub fn undelivered(messages: usize) -> String {
    format!(
        "The Planner did not come back; {messages} message(s) for it were not delivered. Mention @planner again."
    )
}

/// A repair turn moved the withheld questions into decisions (SPEC T2).
pub fn repaired(questions: usize) -> String {
    format!("The Planner opened its {questions} question(s) as decisions.")
}

/// A repair turn did not: the reply is never posted (SPEC T2).
pub fn withheld(asked: usize, opened: usize) -> String {
    format!(
        "The Planner's reply was withheld: it asked {asked} question(s) in Chat and opened {opened} as decisions."
    )
}

/// The server ended the session by an act (SPEC P3).
pub fn session_ended_by(trigger: ReleaseTrigger) -> String {
    format!("The Planner's session ended: {}.", trigger_words(trigger))
}

/// Nobody of the owner's is linked (SPEC T1).
pub fn not_connected(owner: &str) -> String {
    format!(
        "The Planner is not connected: none of {owner}'s machines is linked. Start the Planner and mention @planner again."
    )
}

/// Why a session ended, for `session_ended` (SPEC E2).
pub fn ended_because(reason: ReleaseReason) -> &'static str {
    match reason {
        ReleaseReason::Idle => "idle: nothing to do and nobody viewing",
        ReleaseReason::LinkClosed => "the Planner's link closed",
        ReleaseReason::Trigger(ReleaseTrigger::Stop) => "stopped",
        ReleaseReason::Trigger(trigger) => trigger_words(trigger),
    }
}

fn trigger_words(trigger: ReleaseTrigger) -> &'static str {
    match trigger {
        ReleaseTrigger::Stop => "the Planner was stopped",
        ReleaseTrigger::SignOut => "the owner signed out",
        ReleaseTrigger::MachineUnpaired => "the machine was unpaired",
        ReleaseTrigger::MachineRevoked => "the machine was revoked",
        ReleaseTrigger::PlannerReset => "the Planner was reset",
        ReleaseTrigger::DocumentArchived => "the document was archived",
        ReleaseTrigger::DocumentClosed => "the document was closed",
        ReleaseTrigger::DocumentDeleted => "the document was deleted",
    }
}
