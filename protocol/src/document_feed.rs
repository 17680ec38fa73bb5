//! A document's feed for the people watching it, `GET /documents/{id}/events`
//! (SPEC B1, B1a, T1): its Chat lines, its Planner's status and the
//! document's own title, archive state and the caller's role, pushed as they
//! change, so an editor shows a reply the moment it is committed instead of
//! polling for it.
//!
//! ```
//! use margin_protocol::chat::{ChatKind, ChatMessageView};
//! use margin_protocol::document_feed::DocumentEvent;
//! let line = DocumentEvent::Chat(ChatMessageView {
//!     seq: 4,
//!     author: "ada".into(),
//!     kind: ChatKind::Member,
//!     text: "@planner review".into(),
//!     created_at: 1,
//! });
//! assert_eq!((line.name(), line.id()), ("chat", Some(4)));
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::chat::ChatMessageView;
use crate::documents::DocumentInfo;
use crate::link::PlannerView;

/// One event of a document's feed. Sent as Server-Sent Events: the SSE
/// `event` field is [`DocumentEvent::name`], its `data` the payload's JSON
/// (`data` here). A Chat line's SSE `id` is its `seq`, so a reconnecting
/// `EventSource` resumes after the last line it got (`Last-Event-ID`); the
/// other events have no `id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "event", content = "data", rename_all = "snake_case")]
pub enum DocumentEvent {
    /// A Chat line, once committed: every line after the cursor, in order,
    /// each once.
    Chat(ChatMessageView),
    /// The Planner's status: first on every (re)connect, then each time it
    /// changes.
    Planner(PlannerView),
    /// The document as the caller sees it, each time its title, its
    /// archive state or the caller's role changes (renamed, archived or
    /// unarchived, the caller's role changed). The stream ends once the
    /// caller is no longer a member.
    Document(DocumentInfo),
}

impl DocumentEvent {
    /// Its SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            DocumentEvent::Chat(_) => "chat",
            DocumentEvent::Planner(_) => "planner",
            DocumentEvent::Document(_) => "document",
        }
    }

    /// Its SSE id: a Chat line's `seq`.
    pub fn id(&self) -> Option<i64> {
        match self {
            DocumentEvent::Chat(line) => Some(line.seq),
            DocumentEvent::Planner(_) | DocumentEvent::Document(_) => None,
        }
    }

    /// The SSE frame that carries it: `id` (for a Chat line), `event`, and
    /// its payload's JSON on one `data` line.
    pub fn frame(&self) -> Result<String, serde_json::Error> {
        let data = match self {
            DocumentEvent::Chat(line) => serde_json::to_string(line)?,
            DocumentEvent::Planner(view) => serde_json::to_string(view)?,
            DocumentEvent::Document(info) => serde_json::to_string(info)?,
        };
        Ok(match self.id() {
            Some(id) => format!("id: {id}\nevent: {}\ndata: {data}\n\n", self.name()),
            None => format!("event: {}\ndata: {data}\n\n", self.name()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ChatKind;
    use crate::link::PlannerState;
    use crate::testing::round_trip;
    use pretty_assertions::assert_eq;

    fn line() -> ChatMessageView {
        ChatMessageView {
            seq: 2,
            author: "planner".into(),
            kind: ChatKind::Planner,
            text: "Done.".into(),
            created_at: 5,
        }
    }

    #[test]
    fn document_events_round_trip() {
        round_trip(
            DocumentEvent::Chat(line()),
            r#"{"event":"chat","data":{"seq":2,"author":"planner","kind":"planner","text":"Done.","created_at":5}}"#,
        );
        round_trip(
            DocumentEvent::Planner(PlannerView::default()),
            r#"{"event":"planner","data":{"state":"unlinked","connected":false,"disconnected":false,"replying":false,"stop_pending":false,"questions":0,"runs":[]}}"#,
        );
    }

    #[test]
    fn a_chat_line_is_framed_with_its_seq_and_a_view_without_an_id() {
        assert_eq!(
            DocumentEvent::Chat(line()).frame().unwrap(),
            "id: 2\nevent: chat\ndata: {\"seq\":2,\"author\":\"planner\",\"kind\":\"planner\",\"text\":\"Done.\",\"created_at\":5}\n\n"
        );
        let view = DocumentEvent::Planner(PlannerView {
            state: PlannerState::Available,
            ..PlannerView::default()
        });
        let frame = view.frame().unwrap();
        assert!(
            frame.starts_with("event: planner\ndata: {\"state\":\"available\""),
            "{frame}"
        );
        assert_eq!(frame.matches('\n').count(), 3, "one data line: {frame}");
    }
}
