//! Names and time as the session machines see them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Milliseconds on the caller's clock. The machines never read a clock;
/// tests drive them with a virtual one. The server passes milliseconds
/// since the Unix epoch, so times kept in the journal (a run's start, the
/// end of the last activity) keep their meaning across a restart.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Millis(pub u64);

impl Millis {
    /// `minutes` minutes.
    pub const fn minutes(minutes: u64) -> Millis {
        Millis(minutes * 60_000)
    }

    /// The time `later` after this one.
    pub fn plus(self, later: Millis) -> Millis {
        Millis(self.0.saturating_add(later.0))
    }

    /// How long after `earlier` this is (0 if before).
    pub fn since(self, earlier: Millis) -> Millis {
        Millis(self.0.saturating_sub(earlier.0))
    }

    /// Whole minutes, rounded down.
    pub fn whole_minutes(self) -> u64 {
        self.0 / 60_000
    }
}

macro_rules! name {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(name: &str) -> Self {
                $name(name.to_owned())
            }
        }
    };
}

name!(
    /// One turn of a session: a reply to the messages that started it.
    TurnId
);
name!(
    /// A workflow run the Planner reports.
    RunId
);
name!(
    /// A host request: a question the Planner asked that waits on a member.
    RequestId
);

impl From<&CardId> for RequestId {
    fn from(card: &CardId) -> Self {
        RequestId(card.0.clone())
    }
}
name!(
    /// A decision card, as the server named it. A host request's id is its
    /// card's.
    CardId
);
name!(
    /// A tool call, as the machine named it (unique within its turn).
    CallId
);
