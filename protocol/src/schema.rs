//! Every body's JSON Schema, by name: what `docs/protocol/*.schema.json`
//! holds (a test fails when they drift) and what the server's OpenAPI
//! description lists as its components. One list, so the two cannot
//! disagree about which shapes exist.

use crate::decisions::{
    AddCriterion, AddOption, AnswerBody, DecisionCardView, DecisionList, EditPlanInput,
    EditPlanOutput, OpenDecisionInput, OpenDecisionsInput, OpenDecisionsOutput, ReadDocumentOutput,
    ToolRefusal,
};
use crate::link::{ClientMessage, MachineList, PairMachine, PairedMachine, ServerMessage};
use crate::sessions;
use crate::{
    AddMember, CreateDocument, DocumentInfo, DocumentList, ErrorBody, Me, MemberInfo, MemberList,
    OutlineView, RenameDocument,
};
use schemars::{schema_for, Schema};
use serde_json::{Map, Value};

/// `value` as the committed files hold JSON: pretty, every object's keys
/// in sorted order, a newline at the end. Sorted here rather than left to
/// serde_json's map, whose order depends on a feature another crate of the
/// build may turn on (`preserve_order`), so a file reads the same whatever
/// was built beside it.
pub fn committed_json(value: &impl serde::Serialize) -> Result<String, serde_json::Error> {
    Ok(serde_json::to_string_pretty(&sorted(serde_json::to_value(value)?))? + "\n")
}

fn sorted(value: Value) -> Value {
    match value {
        Value::Object(object) => {
            let mut entries: Vec<(String, Value)> = object.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(key, value)| (key, sorted(value)))
                    .collect::<Map<String, Value>>(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// Each wire shape's name and its JSON Schema (draft 2020-12).
pub fn all() -> Vec<(&'static str, Schema)> {
    vec![
        ("ErrorBody", schema_for!(ErrorBody)),
        ("AccountSummary", schema_for!(crate::admin::AccountSummary)),
        ("TokenSummary", schema_for!(crate::admin::TokenSummary)),
        ("Me", schema_for!(Me)),
        ("CreateDocument", schema_for!(CreateDocument)),
        ("DocumentInfo", schema_for!(DocumentInfo)),
        ("DocumentList", schema_for!(DocumentList)),
        ("AddMember", schema_for!(AddMember)),
        ("MemberInfo", schema_for!(MemberInfo)),
        ("MemberList", schema_for!(MemberList)),
        ("RenameDocument", schema_for!(RenameDocument)),
        ("OutlineView", schema_for!(OutlineView)),
        ("ReadDocumentOutput", schema_for!(ReadDocumentOutput)),
        ("EditPlanInput", schema_for!(EditPlanInput)),
        ("EditPlanOutput", schema_for!(EditPlanOutput)),
        ("OpenDecisionsInput", schema_for!(OpenDecisionsInput)),
        ("OpenDecisionInput", schema_for!(OpenDecisionInput)),
        ("OpenDecisionsOutput", schema_for!(OpenDecisionsOutput)),
        ("ToolRefusal", schema_for!(ToolRefusal)),
        ("DecisionCardView", schema_for!(DecisionCardView)),
        ("DecisionList", schema_for!(DecisionList)),
        ("AnswerBody", schema_for!(AnswerBody)),
        ("AddOption", schema_for!(AddOption)),
        ("AddCriterion", schema_for!(AddCriterion)),
        ("ClientMessage", schema_for!(ClientMessage)),
        ("PlannerView", schema_for!(crate::link::PlannerView)),
        ("PostChat", schema_for!(crate::chat::PostChat)),
        ("ChatList", schema_for!(crate::chat::ChatList)),
        (
            "DocumentEvent",
            schema_for!(crate::document_feed::DocumentEvent),
        ),
        ("ServerMessage", schema_for!(ServerMessage)),
        ("KeptSessions", schema_for!(crate::kept::KeptSessions)),
        ("PairMachine", schema_for!(PairMachine)),
        ("PairedMachine", schema_for!(PairedMachine)),
        ("MachineList", schema_for!(MachineList)),
        ("UpdatePlanInput", schema_for!(sessions::UpdatePlanInput)),
        ("UpdatePlanOutput", schema_for!(sessions::UpdatePlanOutput)),
        ("SessionSnapshot", schema_for!(sessions::SessionSnapshot)),
        ("SessionEvent", schema_for!(sessions::SessionEvent)),
        ("Resync", schema_for!(sessions::Resync)),
        ("RefusalCode", schema_for!(crate::RefusalCode)),
        (
            "ReadDocumentInput",
            schema_for!(crate::tools::ReadDocumentInput),
        ),
    ]
}
