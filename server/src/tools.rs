//! The Planner's document tools — `read_document`, `edit_plan`,
//! `open_decisions`, `open_decision` and `ask` — as calls on the server,
//! independent of transport (the machine link exposes them). Each takes the
//! acting account and wire input and returns wire output or a refusal.

use std::collections::HashMap;

use margin_decisions::{
    open_decisions, wire, Access, BatchError, DecisionCard, Key, Outcome, Strictness,
};
use margin_protocol::decisions::{
    EditPlanInput, EditPlanOutput, OpenDecisionInput, OpenDecisionsInput, OpenDecisionsOutput,
    ReadDocumentOutput, ToolRefusal,
};
use margin_protocol::RefusalCode;
use tracing::{info, Instrument};
use uuid::Uuid;

use crate::storage::{Account, StorageError};
use crate::sync::command::EditRefused;
use crate::sync::hub::OutlineError;
use crate::sync::Hub;

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

/// How many times a batch is re-evaluated after losing a race for a key.
const KEY_RACE_RETRIES: usize = 3;

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
    ) -> Result<ReadDocumentOutput, ToolError> {
        self.access(account, document, Intent::Read)
            .await?
            .granted()?;
        let (revision, outline) = self.hub.outline(document, None).await?;
        let blocks = wire::blocks(&outline);
        self.hub.remember_read(document, revision, outline);
        Ok(ReadDocumentOutput {
            revision,
            outline: blocks,
        })
    }

    /// `edit_plan`: edits addressed at the current revision; the outline of
    /// the revision they make is remembered once committed (SPEC S5).
    pub async fn edit_plan(
        &self,
        account: &Account,
        document: &str,
        input: EditPlanInput,
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
        let (revision, outline) = match self.hub.edit(document, input.revision, edits).await {
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
    ) -> Result<OpenDecisionsOutput, ToolError> {
        self.open(
            account,
            document,
            input.revision,
            &input.cards,
            Strictness::StaleAllowed,
        )
        .await
    }

    /// `open_decision`: one card, strict revision (SPEC D9).
    pub async fn open_decision(
        &self,
        account: &Account,
        document: &str,
        input: OpenDecisionInput,
    ) -> Result<OpenDecisionsOutput, ToolError> {
        let cards = [input.card];
        self.open(
            account,
            document,
            input.revision,
            &cards,
            Strictness::CurrentOnly,
        )
        .await
    }

    /// `ask`: a question for people, as one card at the current revision
    /// (SPEC D9). Waiting on its answer belongs to the Planner session.
    pub async fn ask(
        &self,
        account: &Account,
        document: &str,
        input: OpenDecisionInput,
    ) -> Result<OpenDecisionsOutput, ToolError> {
        self.open_decision(account, document, input).await
    }

    async fn open(
        &self,
        account: &Account,
        document: &str,
        revision: i64,
        cards: &[margin_protocol::decisions::CardInput],
        strictness: Strictness,
    ) -> Result<OpenDecisionsOutput, ToolError> {
        let span = tracing::info_span!("open_decisions", document, revision, cards = cards.len());
        async move {
            // Access first: nothing about the batch is read without it (D10).
            let access = self.access(account, document, Intent::Write).await?;
            access.granted()?;
            let specs = cards
                .iter()
                .map(wire::card_spec)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ToolError::from(BatchError::Invalid(e)))?;
            for _ in 0..KEY_RACE_RETRIES {
                let (current, outline) = self.hub.outline(document, None).await?;
                let stored = self.hub.store().cards(document).await?;
                let existing: HashMap<Key, DecisionCard> = stored
                    .into_iter()
                    .map(|s| (s.card.key.clone(), s.card))
                    .collect();
                let captures = self.hub.with_reads(document, |reads| {
                    let state = margin_decisions::DocumentState {
                        revision: current,
                        outline: &outline,
                        reads,
                    };
                    open_decisions(
                        state,
                        access,
                        |key| existing.get(key),
                        revision,
                        &specs,
                        strictness,
                    )
                })?;
                let created: Vec<DecisionCard> = captures
                    .iter()
                    .filter_map(|c| match &c.outcome {
                        Outcome::Created(new) => {
                            Some(new.clone().into_card(Uuid::new_v4().to_string()))
                        }
                        Outcome::AlreadyInDocument { .. } => None,
                    })
                    .collect();
                match self.hub.store().create_cards(document, &created).await {
                    Ok(()) => {}
                    // Another batch took a key meanwhile: judge again.
                    Err(StorageError::Conflict(_)) => continue,
                    Err(other) => return Err(other.into()),
                }
                // Mirroring the cards makes a revision; its outline is
                // remembered as read, so the Planner can go on from it.
                let mut revision_now = current;
                if !created.is_empty() {
                    let projection = created
                        .iter()
                        .map(|card| (card.id.clone(), card_json(card)))
                        .collect();
                    // The cards are committed: a failed mirror must not make
                    // the Planner think they were not. The next change to a
                    // card mirrors it again.
                    match self.hub.project(document, projection).await {
                        Ok((revision, outline)) => {
                            self.hub.remember_read(document, revision, outline);
                            revision_now = revision;
                        }
                        Err(error) => {
                            tracing::warn!(%error, "decisions created but their live mirror failed")
                        }
                    }
                }
                let ids: HashMap<&Key, &str> =
                    created.iter().map(|c| (&c.key, c.id.as_str())).collect();
                let output = wire::captures(&captures, revision_now, |key| {
                    ids.get(key).map(|id| id.to_string()).unwrap_or_default()
                });
                info!(
                    created = created.len(),
                    captured = output.captured,
                    "decisions opened"
                );
                return Ok(output);
            }
            Err(ToolError::Internal(
                "the batch kept losing races for its keys".into(),
            ))
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

/// Cancels card `card` of `document` (its question was withdrawn by the
/// system) and mirrors it; a card that no longer holds its question is left
/// as it is.
pub async fn cancel_card(hub: &Hub, document: &str, card: &str) -> Result<(), StorageError> {
    let mut stored = hub.store().card(document, card).await?;
    if !margin_decisions::withdraw(&mut stored.card) {
        return Ok(());
    }
    hub.store().update_card(document, &stored).await?;
    let mirror = vec![(stored.card.id.clone(), card_json(&stored.card))];
    if let Err(error) = hub.project(document, mirror).await {
        tracing::warn!(%error, "card cancelled but its live mirror failed");
    }
    Ok(())
}

/// A card's JSON for the live projection.
pub fn card_json(card: &DecisionCard) -> String {
    serde_json::to_string(&wire::card_view(card)).unwrap_or_default()
}
