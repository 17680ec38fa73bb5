//! The Planner's document tools — `read_document`, `edit_plan`,
//! `open_decisions`, `open_decision` and `ask` — as calls on the server,
//! independent of transport (the machine link and HTTP expose them). Each
//! takes the acting account and wire input and returns wire output or a
//! refusal.
//!
//! A call from a Planner session carries a [`RecordResult`]: a tool that
//! writes commits the call's result with its own writes, in one
//! transaction (SPEC W1) — an edit with its document change, new cards
//! with their live mirror.

use std::sync::Arc;
use std::time::Instant;

use margin_decisions::wire::{ReadBuffers, WrittenRead};
use margin_decisions::{wire, Access, BatchError, Outline, Strictness};
use margin_protocol::decisions::{
    EditPlanInput, EditPlanOutput, EncodedRead, OpenDecisionInput, OpenDecisionsInput,
    OpenDecisionsOutput, ToolRefusal,
};
use margin_protocol::tools::{ToolCall, ToolOutput};
use margin_protocol::RefusalCode;
use tracing::{info, Instrument};

use crate::metrics::COUNTERS;
use crate::storage::{Account, StorageError};
use crate::sync::command::{DecideRefused, EditRefused, RecordResult};
use crate::sync::decide::{self, Answered, Decided};
use crate::sync::hub::OutlineError;
use crate::sync::Hub;

/// What a call came to.
#[derive(Debug)]
pub struct Ran {
    /// Its output, or why it did nothing.
    pub result: Result<ToolOutput, ToolError>,
    /// For `ask`: questions it replayed that people already answered — the
    /// card, the answer and who gave it (SPEC D3).
    pub answered: Vec<Answered>,
}

/// Why a tool call did nothing.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// Refused with a code the Planner can act on.
    #[error("{}: {}", .0.code, .0.message)]
    Refused(ToolRefusal),
    /// The server failed; nothing was acknowledged.
    #[error("tool failed: {0}")]
    Internal(String),
}

impl ToolError {
    fn refused(code: RefusalCode, message: impl Into<String>, read_again: bool) -> Self {
        ToolError::Refused(ToolRefusal {
            code,
            message: message.into(),
            read_again,
            retry: false,
        })
    }

    /// A write to an archived document: nothing changes until its owner
    /// unarchives it, and reading again will not help.
    fn archived() -> Self {
        ToolError::refused(
            RefusalCode::Archived,
            EditRefused::Archived.to_string(),
            false,
        )
    }
}

impl From<BatchError> for ToolError {
    fn from(error: BatchError) -> Self {
        let read_again = matches!(&error, BatchError::Refused(r) if r.cause.read_again());
        ToolError::refused(error.code(), error.to_string(), read_again)
    }
}

impl From<StorageError> for ToolError {
    fn from(error: StorageError) -> Self {
        ToolError::Internal(error.to_string())
    }
}

impl From<OutlineError> for ToolError {
    fn from(error: OutlineError) -> Self {
        ToolError::Internal(error.to_string())
    }
}

/// Who a Planner session's `edit_plan` names as the document's last
/// editor (`edited_by`): the session acts for its owner's account, but
/// people should read that the Planner wrote it.
pub const PLANNER_EDITOR: &str = "planner";

/// The tools, over a hub.
#[derive(Clone)]
pub struct Tools {
    hub: Hub,
}

impl Tools {
    /// Tools acting on `hub`'s documents.
    pub fn new(hub: Hub) -> Self {
        Tools { hub }
    }

    /// `read_document`: the current revision and outline, remembered as read.
    pub async fn read_document(
        &self,
        account: &Account,
        document: &str,
    ) -> Result<EncodedRead, ToolError> {
        self.access(account, document, Intent::Read)
            .await?
            .granted()?;
        let (revision, outline) = self.hub.outline(document, None).await?;
        let read = match self.hub.encoded_read(document, revision, &outline) {
            Some(read) => read,
            None => {
                let last = self.hub.last_encoded_read(document);
                let buffers = self.hub.read_buffers(document);
                let written = encoded_read(revision, &outline, last, buffers).await?;
                let read = written.read().clone();
                self.hub
                    .keep_encoded_read(document, revision, &outline, written);
                read
            }
        };
        self.hub.remember_read(document, revision, outline);
        Ok(read)
    }

    /// `edit_plan`: edits addressed at the current revision; the outline of
    /// the revision they make is remembered once committed (SPEC S5). `by`
    /// is who the document will say edited it last.
    pub async fn edit_plan(
        &self,
        account: &Account,
        document: &str,
        input: EditPlanInput,
        by: &str,
        record: Option<RecordResult>,
    ) -> Result<EditPlanOutput, ToolError> {
        self.access(account, document, Intent::Write)
            .await?
            .granted()?;
        let edits = input
            .edits
            .iter()
            .enumerate()
            .map(|(i, e)| {
                wire::edit(e).map_err(|m| {
                    ToolError::refused(
                        RefusalCode::InvalidInput,
                        format!("edit {i}: {m}; nothing was changed"),
                        false,
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (revision, outline) = match self
            .hub
            .edit(document, input.revision, edits, by, record)
            .await
        {
            Ok(done) => done,
            Err(EditRefused::Stale { revision, current }) => {
                let message = EditRefused::Stale { revision, current }.to_string();
                return Err(ToolError::refused(
                    RefusalCode::StaleRevision,
                    message,
                    true,
                ));
            }
            Err(EditRefused::Edit(e)) => {
                let read_again = e.code() == RefusalCode::AddressMismatch;
                return Err(ToolError::refused(
                    e.code(),
                    format!("{e}; nothing was changed"),
                    read_again,
                ));
            }
            Err(EditRefused::Archived) => return Err(ToolError::archived()),
            Err(EditRefused::Unavailable(e)) => return Err(ToolError::Internal(e)),
        };
        let blocks = wire::blocks(&outline);
        self.hub.remember_read(document, revision, outline);
        info!(document, revision, "edit_plan published");
        Ok(EditPlanOutput {
            revision,
            outline: blocks,
        })
    }

    /// `open_decisions`: a batch that survives a stale revision (SPEC D1–D8).
    pub async fn open_decisions(
        &self,
        account: &Account,
        document: &str,
        input: OpenDecisionsInput,
        record: Option<RecordResult>,
    ) -> Result<OpenDecisionsOutput, ToolError> {
        let batch = Batch {
            revision: input.revision,
            cards: &input.cards,
            strictness: Strictness::StaleAllowed,
        };
        Ok(self.open(account, document, batch, record).await?.output)
    }

    /// `open_decision`: one card, strict revision (SPEC D9).
    pub async fn open_decision(
        &self,
        account: &Account,
        document: &str,
        input: OpenDecisionInput,
        record: Option<RecordResult>,
    ) -> Result<OpenDecisionsOutput, ToolError> {
        Ok(self
            .one_card(account, document, input, record)
            .await?
            .output)
    }

    /// One card at the current revision (`open_decision`, `ask`).
    async fn one_card(
        &self,
        account: &Account,
        document: &str,
        input: OpenDecisionInput,
        record: Option<RecordResult>,
    ) -> Result<Decided, ToolError> {
        let cards = [input.card];
        let batch = Batch {
            revision: input.revision,
            cards: &cards,
            strictness: Strictness::CurrentOnly,
        };
        self.open(account, document, batch, record).await
    }

    /// Runs a Planner session's `call` for `account` on `document`; a tool
    /// that writes records its result through `record` with its writes,
    /// and names the Planner as the document's last editor.
    pub async fn run(
        &self,
        account: &Account,
        document: &str,
        call: ToolCall,
        record: Option<RecordResult>,
    ) -> Ran {
        self.call(account, document, call, PLANNER_EDITOR, record)
            .await
    }

    /// Runs the tool `call` names for `account` on `document`, counted in
    /// `/metrics` by its outcome: `by` is who an edit names as the
    /// document's last editor, and a Planner session's call carries
    /// `record`. `update_plan` is a session's own and never runs here.
    pub async fn call(
        &self,
        account: &Account,
        document: &str,
        call: ToolCall,
        by: &str,
        record: Option<RecordResult>,
    ) -> Ran {
        let tool = call.name();
        let started = Instant::now();
        let ran = self.dispatch(account, document, call, by, record).await;
        COUNTERS.tool_call(tool.as_str(), outcome(&ran.result), started.elapsed());
        ran
    }

    /// The tool `call` names, run.
    async fn dispatch(
        &self,
        account: &Account,
        document: &str,
        call: ToolCall,
        by: &str,
        record: Option<RecordResult>,
    ) -> Ran {
        let result = match call {
            ToolCall::ReadDocument(_) => self
                .read_document(account, document)
                .await
                .map(ToolOutput::EncodedRead),
            ToolCall::EditPlan(input) => self
                .edit_plan(account, document, input, by, record)
                .await
                .map(ToolOutput::EditPlan),
            ToolCall::OpenDecisions(input) => self
                .open_decisions(account, document, input, record)
                .await
                .map(ToolOutput::Decisions),
            ToolCall::OpenDecision(input) => self
                .open_decision(account, document, input, record)
                .await
                .map(ToolOutput::Decisions),
            ToolCall::Ask(input) => {
                return match self.one_card(account, document, input, record).await {
                    Ok(decided) => Ran {
                        result: Ok(ToolOutput::Decisions(decided.output)),
                        answered: decided.answered,
                    },
                    Err(refused) => Ran {
                        result: Err(refused),
                        answered: Vec::new(),
                    },
                };
            }
            ToolCall::UpdatePlan(_) => Err(ToolError::Internal(
                "update_plan is the session's own tool".into(),
            )),
        };
        Ran {
            result,
            answered: Vec::new(),
        }
    }

    /// Judges and writes a batch of cards in the document's task (SPEC
    /// D1–D10): what it came to, its outline remembered as read. For
    /// `ask`, the replayed questions people already answered come back
    /// with it: an `ask` that repeats one gets its answer at once, nobody
    /// is asked twice (SPEC D3).
    async fn open(
        &self,
        account: &Account,
        document: &str,
        batch: Batch<'_>,
        record: Option<RecordResult>,
    ) -> Result<Decided, ToolError> {
        let Batch {
            revision,
            cards,
            strictness,
        } = batch;
        let span = tracing::info_span!("open_decisions", document, revision, cards = cards.len());
        async move {
            // Access first: nothing about the batch is read without it (D10).
            self.access(account, document, Intent::Write)
                .await?
                .granted()?;
            let specs = cards
                .iter()
                .map(wire::card_spec)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ToolError::from(BatchError::Invalid(e)))?;
            let batch = decide::Batch {
                revision,
                specs,
                strictness,
            };
            let decided = match self.hub.decide(document, batch, record).await {
                Ok(decided) => decided,
                Err(DecideRefused::Batch(refused)) => return Err(refused.into()),
                Err(DecideRefused::Archived) => return Err(ToolError::archived()),
                Err(DecideRefused::Unavailable(e)) => return Err(ToolError::Internal(e)),
            };
            // The revision the batch made (or found), from which the
            // Planner goes on.
            let output = &decided.output;
            self.hub
                .remember_read(document, output.revision, decided.outline.clone());
            info!(
                revision = output.revision,
                captured = output.captured,
                "decisions opened"
            );
            Ok(decided)
        }
        .instrument(span)
        .await
    }

    /// Whether `account` may use the tools on `document`: owners and
    /// editors may, and may write unless it is archived (SPEC P3). Only
    /// those who may see the document learn that it is archived.
    async fn access(
        &self,
        account: &Account,
        document: &str,
        intent: Intent,
    ) -> Result<Access, ToolError> {
        match self.hub.store().document_for(account, document).await {
            Ok(row) if row.role.can_edit() && row.archived && intent == Intent::Write => {
                Err(ToolError::archived())
            }
            Ok(row) if row.role.can_edit() => Ok(Access::Granted),
            Ok(_) | Err(StorageError::NotFound(_)) => Ok(Access::Denied),
            Err(other) => Err(other.into()),
        }
    }
}

/// What a tool call does to the document.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Intent {
    Read,
    Write,
}

trait Granted {
    fn granted(self) -> Result<(), ToolError>;
}

impl Granted for Access {
    fn granted(self) -> Result<(), ToolError> {
        match self {
            Access::Granted => Ok(()),
            Access::Denied => Err(ToolError::refused(
                RefusalCode::NoAccess,
                "the Planner has no access to this document",
                false,
            )),
        }
    }
}

/// Most blocks written as a read on the async workers; a larger outline is
/// written on a blocking thread.
const BLOCKS_INLINE: usize = 512;

/// `read_document`'s output for `outline` at `revision`, copying what it
/// can from `last`, the document's last read written, into `buffers`.
async fn encoded_read(
    revision: i64,
    outline: &Arc<Outline>,
    last: Option<WrittenRead>,
    buffers: ReadBuffers,
) -> Result<WrittenRead, ToolError> {
    let written = if outline.len() <= BLOCKS_INLINE {
        wire::encoded_read_into(revision, outline, last.as_ref(), buffers)
    } else {
        let outline = outline.clone();
        tokio::task::spawn_blocking(move || {
            wire::encoded_read_into(revision, &outline, last.as_ref(), buffers)
        })
        .await
        .map_err(|e| ToolError::Internal(format!("reading the outline stopped: {e}")))?
    };
    written.map_err(|e| ToolError::Internal(format!("the read could not be written: {e}")))
}

/// A batch of cards as a call wrote it.
struct Batch<'a> {
    revision: i64,
    cards: &'a [margin_protocol::decisions::CardInput],
    strictness: Strictness,
}

/// How a tool call ended, as `/metrics` labels it.
fn outcome<T>(result: &Result<T, ToolError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(ToolError::Refused(_)) => "refused",
        Err(ToolError::Internal(_)) => "failed",
    }
}
