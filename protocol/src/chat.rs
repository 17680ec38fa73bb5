//! A document's Chat over HTTP (SPEC T1): members talk, `@planner` starts a
//! Planner turn, the Planner's accepted replies and true lifecycle lines
//! appear.
//!
//! ```
//! use margin_protocol::chat::PostChat;
//! let post: PostChat = serde_json::from_str(r#"{"text":"@planner draft the risks"}"#).unwrap();
//! assert!(post.text.starts_with("@planner"));
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest Chat message, in bytes.
pub const MAX_CHAT_BYTES: usize = 4000;

/// Who wrote a Chat line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChatKind {
    /// A member.
    Member,
    /// The Planner (an accepted reply).
    Planner,
    /// The server (lifecycle lines).
    System,
}

impl ChatKind {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatKind::Member => "member",
            ChatKind::Planner => "planner",
            ChatKind::System => "system",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<ChatKind> {
        [ChatKind::Member, ChatKind::Planner, ChatKind::System]
            .into_iter()
            .find(|k| k.as_str() == name)
    }
}

/// `POST /documents/{id}/chat` body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostChat {
    /// Non-blank, ≤ 4000 bytes.
    pub text: String,
}

/// One Chat line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChatMessageView {
    /// Position in the document's Chat, from 1.
    pub seq: i64,
    /// The member's account, `planner`, or `margin`.
    pub author: String,
    /// Who wrote it.
    pub kind: ChatKind,
    /// What it says (untrusted: render as text).
    pub text: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
}

/// `GET /documents/{id}/chat[?after=SEQ]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChatList {
    /// Lines after `after`, oldest first (at most 200).
    pub messages: Vec<ChatMessageView>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::round_trip;

    #[test]
    fn chat_bodies_round_trip() {
        round_trip(PostChat { text: "hi".into() }, r#"{"text":"hi"}"#);
        round_trip(
            ChatList {
                messages: vec![ChatMessageView {
                    seq: 1,
                    author: "planner".into(),
                    kind: ChatKind::Planner,
                    text: "Done.".into(),
                    created_at: 5,
                }],
            },
            r#"{"messages":[{"seq":1,"author":"planner","kind":"planner","text":"Done.","created_at":5}]}"#,
        );
    }
}
