//! The committed JSON Schemas in `docs/protocol/` match the wire types.
//! After changing a wire type, regenerate them with:
//!
//!     UPDATE_SCHEMAS=1 cargo test -p margin-protocol --test schemas

use std::path::PathBuf;

use margin_protocol::decisions::{
    AddCriterion, AddOption, AnswerBody, DecisionCardView, DecisionList, EditPlanInput,
    EditPlanOutput, OpenDecisionInput, OpenDecisionsInput, OpenDecisionsOutput, ReadDocumentOutput,
    ToolRefusal,
};
use margin_protocol::link::{
    ClientMessage, MachineList, PairMachine, PairedMachine, ServerMessage,
};
use margin_protocol::sessions;
use margin_protocol::{
    AddMember, CreateDocument, DocumentInfo, DocumentList, ErrorBody, Me, MemberInfo, MemberList,
    OutlineView, RenameDocument,
};
use schemars::{schema_for, Schema};

fn schemas() -> Vec<(&'static str, Schema)> {
    vec![
        ("ErrorBody", schema_for!(ErrorBody)),
        (
            "AccountSummary",
            schema_for!(margin_protocol::admin::AccountSummary),
        ),
        (
            "TokenSummary",
            schema_for!(margin_protocol::admin::TokenSummary),
        ),
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
        (
            "PlannerView",
            schema_for!(margin_protocol::link::PlannerView),
        ),
        ("PostChat", schema_for!(margin_protocol::chat::PostChat)),
        ("ChatList", schema_for!(margin_protocol::chat::ChatList)),
        (
            "DocumentEvent",
            schema_for!(margin_protocol::document_feed::DocumentEvent),
        ),
        ("ServerMessage", schema_for!(ServerMessage)),
        ("PairMachine", schema_for!(PairMachine)),
        ("PairedMachine", schema_for!(PairedMachine)),
        ("MachineList", schema_for!(MachineList)),
        ("UpdatePlanInput", schema_for!(sessions::UpdatePlanInput)),
        ("UpdatePlanOutput", schema_for!(sessions::UpdatePlanOutput)),
        ("SessionSnapshot", schema_for!(sessions::SessionSnapshot)),
        ("SessionEvent", schema_for!(sessions::SessionEvent)),
        ("Resync", schema_for!(sessions::Resync)),
        ("RefusalCode", schema_for!(margin_protocol::RefusalCode)),
        (
            "ReadDocumentInput",
            schema_for!(margin_protocol::tools::ReadDocumentInput),
        ),
    ]
}

#[test]
fn committed_schemas_match_the_wire_types() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol");
    let update = std::env::var_os("UPDATE_SCHEMAS").is_some();
    let mut stale = Vec::new();
    for (name, schema) in schemas() {
        let path = dir.join(format!("{name}.schema.json"));
        let generated = serde_json::to_string_pretty(&schema).unwrap() + "\n";
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &generated).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(generated.as_str()) {
            stale.push(name);
        }
    }
    assert!(
        stale.is_empty(),
        "docs/protocol/ is out of date for {stale:?}; regenerate with:\n    UPDATE_SCHEMAS=1 cargo test -p margin-protocol --test schemas"
    );
}

/// The tool catalogue a Planner shows its model: every tool's name,
/// description and the schemas of its input and output.
#[test]
fn committed_tool_catalogue_matches_the_tool_table() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol/tools.json");
    let generated =
        serde_json::to_string_pretty(&margin_protocol::tools::catalogue()).unwrap() + "\n";
    if std::env::var_os("UPDATE_SCHEMAS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    assert!(
        std::fs::read_to_string(&path).ok().as_deref() == Some(generated.as_str()),
        "docs/protocol/tools.json is out of date; regenerate with:\n    UPDATE_SCHEMAS=1 cargo test -p margin-protocol --test schemas"
    );
}
