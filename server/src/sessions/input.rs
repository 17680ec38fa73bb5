//! What a session's driver is told: one [`Input`] per thing that happened
//! to its session, queued in its mailbox and handled in order.

use margin_planner::{
    CallId, CardId, Held, ReleaseTrigger, RequestId, ResumeRefusal, RunId, RunStatus,
};
use margin_protocol::chat::ChatMessageView;
use margin_protocol::decisions::AnswerBody;
use margin_protocol::link::ResumedSession;
use tokio::sync::oneshot;

use crate::link::{Link, LinkEnd};
use crate::storage::StorageError;

/// Where a caller hears that its input was carried out.
pub type Done<T> = oneshot::Sender<T>;

/// One thing that happened to a session.
#[derive(Debug)]
pub enum Input {
    /// A member's message called the Planner (SPEC T1).
    Message {
        /// The Chat message.
        message: ChatMessageView,
        /// Told once its step is committed and carried out.
        done: Done<Result<(), StorageError>>,
    },
    /// The machine called a tool.
    ToolCall {
        /// The turn it names.
        turn: String,
        /// The call.
        call: CallId,
        /// The tool's name.
        name: String,
        /// Its arguments.
        arguments: serde_json::Value,
    },
    /// The machine's reply for a turn.
    Reply {
        /// The turn.
        turn: String,
        /// The text.
        text: String,
    },
    /// The machine reported a run.
    Run {
        /// The run.
        run: RunId,
        /// Its name.
        name: String,
        /// Its status.
        status: RunStatus,
        /// The attempt (from 1).
        attempt: u32,
    },
    /// The machine confirmed a Stop.
    Stopped,
    /// The machine acknowledged an answer.
    AnswerReceived {
        /// The question.
        request: RequestId,
    },
    /// The first half of `resume` from `link`: the session moves to it and
    /// says what carries on; what follows `resumed` waits for
    /// [`Input::Attach`].
    Resume {
        /// The new link.
        link: Link,
        /// What the machine still holds.
        held: Held,
        /// `None` when the session ended meanwhile.
        done: Done<Option<Resumed>>,
    },
    /// `resumed` went out on link `link`: send what follows it.
    Attach {
        /// The link.
        link: u64,
    },
    /// The machine came back without naming this session.
    NotResumed,
    /// Link `link` ended.
    LinkLost {
        /// The link.
        link: u64,
        /// How.
        end: LinkEnd,
    },
    /// A member answered a question of the session.
    Answered {
        /// The question.
        request: RequestId,
        /// The answer.
        answer: AnswerBody,
        /// Who answered.
        by: String,
        /// Told once it is committed.
        done: Done<()>,
    },
    /// People discarded a card of the session's document.
    Discarded {
        /// The card.
        card: CardId,
        /// Told once it is committed.
        done: Done<()>,
    },
    /// A member pressed Stop.
    StopRequested {
        /// Told once it is committed and sent (or held).
        done: Done<Result<(), StorageError>>,
    },
    /// A member pressed Resume.
    ResumeRequested {
        /// Told once it is committed, or why it was refused.
        done: Done<Result<Result<(), ResumeRefusal>, StorageError>>,
    },
    /// An explicit act ends the session (SPEC P3).
    Release {
        /// The act.
        trigger: ReleaseTrigger,
        /// Told once it is committed and carried out, or why not.
        done: Done<Result<(), StorageError>>,
    },
}

/// A session `resume` carries on.
#[derive(Debug)]
pub struct Resumed {
    /// What `resumed` says of it.
    pub session: ResumedSession,
    /// The link it ran on, if that is still open: the new link takes its
    /// work over, and it is closed (SPEC L3).
    pub superseded: Option<Link>,
}
