//! What the bridge keeps in a file beside the machine's credential, so a
//! restart loses nothing the agent was owed: which ACP session each Margin
//! session ran on (a restarted bridge loads it again with `session/load`
//! instead of starting it blank), and the permission requests asked as
//! cards, with their answers once given. A request dies with the agent
//! process that made it; its answer, kept here, settles the same request
//! asked again (same card) at once, and is told to the agent in its
//! session's next prompt. Replaced whole and atomically on each change;
//! the newest [`MAX_HELD`] sessions and [`MAX_ASKED`] requests are kept.

use std::path::{Path, PathBuf};

use margin_protocol::decisions::AnswerBody;
use serde::{Deserialize, Serialize};

/// Most sessions remembered; the oldest are forgotten first.
const MAX_HELD: usize = 1024;
/// Most permission requests remembered; the oldest are forgotten first.
const MAX_ASKED: usize = 256;

/// The file and what it holds.
pub(crate) struct Held {
    path: PathBuf,
    pairs: Vec<Pair>,
    asked: Vec<Asked>,
}

/// A permission request asked as a card.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Asked {
    /// The card.
    pub card: String,
    /// The Margin session.
    pub session: String,
    /// What the agent asked to do.
    pub action: String,
    /// The agent's options' names, in the card's order of choices.
    pub options: Vec<String>,
    /// The answer, once given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<AnswerBody>,
    /// Whether the answer was told to the agent in a prompt.
    #[serde(default)]
    pub told: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Pair {
    margin: String,
    acp: String,
}

#[derive(Default, Serialize, Deserialize)]
struct File {
    sessions: Vec<Pair>,
    #[serde(default)]
    asked: Vec<Asked>,
}

impl Held {
    /// What `path` holds; nothing if it does not exist. A file that cannot
    /// be read as this one is reported and started afresh: the agent's
    /// sessions then begin blank, which loses no decision.
    pub fn open(path: &Path) -> Held {
        let file = match std::fs::read(path) {
            Ok(bytes) => match serde_json::from_slice::<File>(&bytes) {
                Ok(file) => file,
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "unreadable ACP sessions file; starting afresh");
                    File::default()
                }
            },
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => File::default(),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read the ACP sessions file; starting afresh");
                File::default()
            }
        };
        Held {
            path: path.to_owned(),
            pairs: file.sessions,
            asked: file.asked,
        }
    }

    /// The ACP session Margin session `margin` last ran on.
    pub fn acp_of(&self, margin: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|pair| pair.margin == margin)
            .map(|pair| pair.acp.as_str())
    }

    /// Records that `margin` runs on `acp`, and writes the file.
    pub fn keep(&mut self, margin: &str, acp: &str) -> std::io::Result<()> {
        self.pairs.retain(|pair| pair.margin != margin);
        self.pairs.push(Pair {
            margin: margin.to_owned(),
            acp: acp.to_owned(),
        });
        let excess = self.pairs.len().saturating_sub(MAX_HELD);
        self.pairs.drain(..excess);
        self.write()
    }

    /// Records a permission request asked as `asked.card` (again: its
    /// answer, if given, stays), and writes the file.
    pub fn ask(&mut self, asked: Asked) -> std::io::Result<()> {
        if let Some(known) = self.asked.iter_mut().find(|a| a.card == asked.card) {
            if known.options.is_empty() {
                // Its answer came first: now it is known what was asked.
                known.action = asked.action;
                known.options = asked.options;
                return self.write();
            }
            return Ok(());
        }
        self.asked.push(asked);
        let excess = self.asked.len().saturating_sub(MAX_ASKED);
        self.asked.drain(..excess);
        self.write()
    }

    /// The answer card `card` was given, if one came.
    pub fn answer_of(&self, card: &str) -> Option<&AnswerBody> {
        self.asked.iter().find(|a| a.card == card)?.answer.as_ref()
    }

    /// Keeps the answer to `card` of `session` until its request is asked
    /// again or its agent is told. A request the bridge was killed before
    /// writing down is kept too, by its card alone.
    pub fn answered(
        &mut self,
        card: &str,
        session: &str,
        answer: &AnswerBody,
    ) -> std::io::Result<()> {
        match self.asked.iter_mut().find(|a| a.card == card) {
            Some(asked) => asked.answer = Some(answer.clone()),
            None => {
                self.asked.push(Asked {
                    card: card.to_owned(),
                    session: session.to_owned(),
                    action: String::new(),
                    options: Vec::new(),
                    answer: Some(answer.clone()),
                    told: false,
                });
                let excess = self.asked.len().saturating_sub(MAX_ASKED);
                self.asked.drain(..excess);
            }
        }
        self.write()
    }

    /// Forgets `card`'s request: its agent has its outcome.
    pub fn settled(&mut self, card: &str) -> std::io::Result<()> {
        let before = self.asked.len();
        self.asked.retain(|a| a.card != card);
        if self.asked.len() == before {
            return Ok(());
        }
        self.write()
    }

    /// The requests of `session` answered and not yet told, marked told.
    pub fn untold(&mut self, session: &str) -> std::io::Result<Vec<Asked>> {
        let mut untold = Vec::new();
        for asked in &mut self.asked {
            if asked.session == session && asked.answer.is_some() && !asked.told {
                asked.told = true;
                untold.push(asked.clone());
            }
        }
        if !untold.is_empty() {
            self.write()?;
        }
        Ok(untold)
    }

    fn write(&self) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(&File {
            sessions: self.pairs.clone(),
            asked: self.asked.clone(),
        })?;
        let fresh = self.path.with_extension("tmp");
        std::fs::write(&fresh, bytes)?;
        std::fs::rename(&fresh, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_session_is_found_again_by_a_bridge_that_opens_the_file_afresh() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("laptop.acp-sessions.json");
        let mut held = Held::open(&path);
        assert_eq!(held.acp_of("m1"), None);
        held.keep("m1", "a1").expect("written");
        held.keep("m2", "a2").expect("written");
        held.keep("m1", "a3").expect("written");
        let again = Held::open(&path);
        assert_eq!(again.acp_of("m1"), Some("a3"));
        assert_eq!(again.acp_of("m2"), Some("a2"));
    }

    #[test]
    fn an_answer_to_a_permission_request_outlives_the_bridge_until_told_once() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("laptop.acp-sessions.json");
        let mut held = Held::open(&path);
        let asked = Asked {
            card: "card-1".into(),
            session: "m1".into(),
            action: "Deploy".into(),
            options: vec!["Allow".into(), "Reject".into()],
            answer: None,
            told: false,
        };
        held.ask(asked).expect("written");
        assert!(
            held.untold("m1").expect("read").is_empty(),
            "nothing answered yet"
        );
        let reject = AnswerBody::Choices(vec!["c2".into()]);
        held.answered("card-1", "m1", &reject).expect("written");
        // Asked by a bridge killed before it wrote the request down.
        held.answered("card-2", "m2", &reject).expect("written");
        let mut again = Held::open(&path);
        assert_eq!(again.answer_of("card-1"), Some(&reject));
        assert_eq!(again.answer_of("card-2"), Some(&reject));
        assert_eq!(again.answer_of("unknown"), None);
        let told = again.untold("m1").expect("read");
        assert_eq!(told.len(), 1);
        assert!(again.untold("m1").expect("read").is_empty(), "told once");
        assert_eq!(
            again.answer_of("card-1"),
            Some(&reject),
            "still settles a request asked again"
        );
        again.settled("card-1").expect("written");
        assert_eq!(Held::open(&path).answer_of("card-1"), None);
    }

    #[test]
    fn an_unreadable_file_starts_afresh() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("broken.json");
        std::fs::write(&path, b"{not json").expect("written");
        assert_eq!(Held::open(&path).acp_of("m1"), None);
    }
}
