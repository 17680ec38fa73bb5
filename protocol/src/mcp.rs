//! Margin as an MCP server for a member's own agent (SPEC O4): the tools it
//! offers and what each takes. The document tools are the Planner's
//! ([`ToolName`]), with the same input plus the `document` they act on;
//! three more list documents and decisions and post to Chat. A call acts
//! for the caller's account and role, as the HTTP call it stands for.

use schemars::{JsonSchema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tools::ToolName;

/// A tool of Margin's MCP server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberTool {
    /// The documents the caller is a member of.
    ListDocuments,
    /// A document's decision cards.
    ListDecisions,
    /// A line in a document's Chat, as the caller.
    PostChat,
    /// One of the Planner's document tools.
    Document(ToolName),
}

/// The Planner's tools an agent is offered over MCP, by `/mcp` and by the
/// ACP bridge: not `ask` (a Planner's question to people, answered into its
/// session; the bridge asks for the agent's permission requests) nor
/// `update_plan` (a session's own plan; the bridge sends the agent's).
pub const DOCUMENT_TOOLS: [ToolName; 4] = [
    ToolName::ReadDocument,
    ToolName::EditPlan,
    ToolName::OpenDecisions,
    ToolName::OpenDecision,
];

impl MemberTool {
    /// Every tool, in the order `tools/list` gives them.
    pub fn all() -> Vec<MemberTool> {
        let mut all = vec![MemberTool::ListDocuments];
        all.extend(DOCUMENT_TOOLS.map(MemberTool::Document));
        all.extend([MemberTool::ListDecisions, MemberTool::PostChat]);
        all
    }

    /// Its name in `tools/call`.
    pub fn name(self) -> &'static str {
        match self {
            MemberTool::ListDocuments => "list_documents",
            MemberTool::ListDecisions => "list_decisions",
            MemberTool::PostChat => "post_chat",
            MemberTool::Document(tool) => tool.as_str(),
        }
    }

    /// The tool named `name`, if this server offers it.
    pub fn parse(name: &str) -> Option<MemberTool> {
        MemberTool::all()
            .into_iter()
            .find(|tool| tool.name() == name)
    }

    /// What it does, for a model.
    pub fn description(self) -> &'static str {
        match self {
            MemberTool::ListDocuments => {
                "List the documents you are a member of: each one's id, title, your role and its revision."
            }
            MemberTool::ListDecisions => {
                "List a document's decision cards: each one's question, options, state and answer."
            }
            MemberTool::PostChat => {
                "Post a line in a document's Chat, as you. Start it with @planner to ask the document's Planner."
            }
            MemberTool::Document(tool) => tool.description(),
        }
    }

    /// Its input's JSON Schema: a document tool's input with the
    /// `document` it acts on added.
    pub fn input_schema(self) -> Map<String, Value> {
        let root = |schema: schemars::Schema| match schema.to_value() {
            Value::Object(object) => object,
            _ => Map::new(),
        };
        match self {
            MemberTool::ListDocuments => root(schema_of::<ListDocumentsInput>()),
            MemberTool::ListDecisions => root(schema_of::<OnDocument>()),
            MemberTool::PostChat => root(schema_of::<PostChatInput>()),
            MemberTool::Document(tool) => {
                let mut schema = root(tool.spec().input);
                let document = serde_json::json!({
                    "type": "string",
                    "description": "The id of the document to act on."
                });
                if let Some(Value::Object(properties)) = schema.get_mut("properties") {
                    properties.insert("document".into(), document);
                } else {
                    schema.insert(
                        "properties".into(),
                        serde_json::json!({ "document": document }),
                    );
                }
                match schema.get_mut("required") {
                    Some(Value::Array(required)) => required.insert(0, "document".into()),
                    _ => {
                        schema.insert("required".into(), serde_json::json!(["document"]));
                    }
                }
                schema
            }
        }
    }
}

/// A document's resources, read as the caller (SPEC O4): its outline (the
/// `GET /documents/{id}/outline` body) and its decision cards (`GET
/// /documents/{id}/decisions`), each at `margin://documents/{id}/{name}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocumentResource {
    /// The blocks at the current revision.
    Outline,
    /// The decision cards.
    Decisions,
}

/// Where every document resource's URI starts.
pub const RESOURCE_PREFIX: &str = "margin://documents/";

impl DocumentResource {
    /// Both, in the order `resources/list` gives them.
    pub const ALL: [DocumentResource; 2] = [DocumentResource::Outline, DocumentResource::Decisions];

    /// The last segment of its URI.
    pub fn name(self) -> &'static str {
        match self {
            DocumentResource::Outline => "outline",
            DocumentResource::Decisions => "decisions",
        }
    }

    /// What it holds, for an agent.
    pub fn description(self) -> &'static str {
        match self {
            DocumentResource::Outline => {
                "The document's blocks at its current revision: each one's index, kind, text and digest."
            }
            DocumentResource::Decisions => {
                "The document's decision cards: each one's question, options, state and answer."
            }
        }
    }

    /// Its URI for `document`.
    pub fn uri(self, document: &str) -> String {
        format!("{RESOURCE_PREFIX}{document}/{}", self.name())
    }

    /// Its URI template.
    pub fn template(self) -> String {
        self.uri("{document}")
    }

    /// The document and resource `uri` names, if it names one.
    pub fn parse(uri: &str) -> Option<(&str, DocumentResource)> {
        let (document, name) = uri.strip_prefix(RESOURCE_PREFIX)?.split_once('/')?;
        let resource = DocumentResource::ALL
            .into_iter()
            .find(|r| r.name() == name)?;
        (!document.is_empty()).then_some((document, resource))
    }
}

/// Longest id an agent's call may name (Margin's ids are UUIDs).
pub const MAX_ID_BYTES: usize = 64;

/// Whether `id` can be one of Margin's ids (a document's, a session's):
/// 1 to [`MAX_ID_BYTES`] letters, digits, `-` or `_`. Checked before an id
/// an agent sent stands in a path or names a session, so no `/`, `?` or
/// `..` ever reaches one.
pub fn is_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What a call naming a tool not `offered` is told.
pub fn unknown_tool(name: &str, offered: &[&str]) -> String {
    format!("no tool {name:?}; the tools are {}", offered.join(", "))
}

/// A refused call's structured content, in the shape of the HTTP error body
/// (`{"error": {code, message}}`): an agent reads a refusal alike from every
/// door.
pub fn refusal(code: &str, message: &str) -> Value {
    serde_json::json!({ "error": { "code": code, "message": message } })
}

fn schema_of<T: JsonSchema>() -> schemars::Schema {
    SchemaGenerator::default().into_root_schema_for::<T>()
}

/// `list_documents`' input: nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDocumentsInput {}

/// The document a call acts on: `list_decisions`' whole input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OnDocument {
    /// The id of the document to act on.
    pub document: String,
}

/// `post_chat`'s input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostChatInput {
    /// The id of the document whose Chat it goes to.
    pub document: String,
    /// Non-blank, ≤ 4000 bytes.
    pub text: String,
}

/// Splits a document tool's arguments into the document they name and the
/// tool's own input; `None` when they name no document.
pub fn split_document(arguments: Map<String, Value>) -> Option<(String, Map<String, Value>)> {
    let mut arguments = arguments;
    match arguments.remove("document") {
        Some(Value::String(document)) => Some((document, arguments)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_is_found_by_its_name_and_names_its_document() {
        for tool in MemberTool::all() {
            assert_eq!(MemberTool::parse(tool.name()), Some(tool));
            let schema = tool.input_schema();
            assert_eq!(schema.get("type"), Some(&Value::from("object")), "{tool:?}");
            if tool != MemberTool::ListDocuments {
                let required = schema.get("required").and_then(Value::as_array);
                assert!(
                    required.is_some_and(|r| r.contains(&Value::from("document"))),
                    "{tool:?}: {schema:?}"
                );
            }
        }
        assert_eq!(MemberTool::parse("ask"), None);
        assert_eq!(MemberTool::parse("update_plan"), None);
    }

    #[test]
    fn a_document_resource_is_read_back_from_its_uri_and_nothing_else_is() {
        for resource in DocumentResource::ALL {
            let uri = resource.uri("d-1");
            assert_eq!(DocumentResource::parse(&uri), Some(("d-1", resource)));
        }
        assert_eq!(
            DocumentResource::Outline.uri("d-1"),
            "margin://documents/d-1/outline"
        );
        for bad in [
            "margin://documents//outline",
            "margin://documents/d-1/chat",
            "margin://documents/d-1",
            "file:///etc/passwd",
        ] {
            assert_eq!(DocumentResource::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_document_tools_arguments_split_into_document_and_input() {
        let arguments = serde_json::json!({"document": "d1", "expected_revision": 3});
        let Value::Object(arguments) = arguments else {
            unreachable!()
        };
        let (document, input) = split_document(arguments).unwrap();
        assert_eq!(document, "d1");
        assert_eq!(
            Value::Object(input),
            serde_json::json!({"expected_revision": 3})
        );
        assert_eq!(split_document(Map::new()), None);
    }
}
