//! What a connector SDK keeps on disk between runs of a machine, in its held
//! file (SPEC L3, L5, L10): each session it holds, the questions the
//! session waits on, and what it sent that the server has not acknowledged
//! yet — a turn's reply and the latest report of each run. Every SDK reads
//! and writes this one shape, so a machine may move between them.
//!
//! ```
//! use margin_protocol::kept::{KeptSessions, KeptSession};
//! // Older SDKs wrote only the questions; that still reads.
//! let old: KeptSessions = serde_json::from_str(r#"{"s1":["c9"]}"#).unwrap();
//! assert_eq!(KeptSession::from(old["s1"].clone()).questions, ["c9"]);
//! ```

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::link::RunStatus;

/// The held file: each session this machine holds, by id, sorted.
pub type KeptSessions = BTreeMap<String, KeptEntry>;

/// One session in the held file, as this or an older SDK wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum KeptEntry {
    /// What this SDK writes.
    Session(KeptSession),
    /// What SDKs before L10 wrote: only the questions.
    Questions(Vec<String>),
}

impl From<KeptEntry> for KeptSession {
    fn from(entry: KeptEntry) -> Self {
        match entry {
            KeptEntry::Session(session) => session,
            KeptEntry::Questions(questions) => KeptSession {
                questions,
                ..KeptSession::default()
            },
        }
    }
}

/// A session the machine holds, and what it still owes the server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeptSession {
    /// The questions (`ask` card ids) it waits on, sorted.
    #[serde(default)]
    pub questions: Vec<String>,
    /// A turn's reply not yet acknowledged: its turn is named in `resume`
    /// and the reply sent again after `resumed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<KeptReply>,
    /// The latest report of each run not yet acknowledged, sorted by run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<KeptRun>,
}

/// A reply sent and not yet acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeptReply {
    /// The turn it ends.
    pub turn: String,
    /// Its text.
    pub text: String,
}

/// A run's latest report, sent and not yet acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeptRun {
    /// The run's id.
    pub run: String,
    /// Its name.
    pub name: String,
    /// The status reported.
    pub status: RunStatus,
    /// The attempt reported about.
    pub attempt: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_session_round_trips_and_an_empty_one_is_just_its_questions() {
        let kept = KeptSession {
            questions: vec!["c9".into()],
            reply: Some(KeptReply {
                turn: "t3".into(),
                text: "Done.".into(),
            }),
            runs: vec![KeptRun {
                run: "deploy".into(),
                name: "Deploy".into(),
                status: RunStatus::Completed,
                attempt: 2,
            }],
        };
        let json = r#"{"questions":["c9"],"reply":{"turn":"t3","text":"Done."},"runs":[{"run":"deploy","name":"Deploy","status":"completed","attempt":2}]}"#;
        assert_eq!(serde_json::to_string(&kept).unwrap(), json);
        let back: KeptEntry = serde_json::from_str(json).unwrap();
        assert_eq!(KeptSession::from(back), kept);
        let bare = serde_json::to_string(&KeptSession::default()).unwrap();
        assert_eq!(bare, r#"{"questions":[]}"#);
    }
}
