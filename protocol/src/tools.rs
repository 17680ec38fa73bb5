//! The Planner's tools, defined once (SPEC D, U, W1): each tool's name,
//! what it does, its input and its output. The call enum a server parses
//! (`ToolCall`), the output enum it answers with (`ToolOutput`), the
//! catalogue a Planner shows its model (`docs/protocol/tools.json`) and
//! the `unknown_tool` refusal all come from the one table below.
//!
//! ```
//! use margin_protocol::tools::{ToolCall, ToolName};
//! let call = ToolCall::parse("read_document", serde_json::json!({}), false).unwrap();
//! assert_eq!(call.name(), ToolName::ReadDocument);
//! let refused = ToolCall::parse("update_plan", serde_json::json!({}), false).unwrap_err();
//! assert_eq!(refused.code.as_str(), "unknown_tool");
//! ```

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use crate::decisions::{
    EditPlanInput, EditPlanOutput, EncodedRead, OpenDecisionInput, OpenDecisionsInput,
    OpenDecisionsOutput, ReadDocumentOutput, ToolRefusal,
};
use crate::refusal::RefusalCode;
use crate::sessions::{UpdatePlanInput, UpdatePlanOutput};

/// `read_document`'s arguments: none (`{}`, or absent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadDocumentInput {}

/// One entry of the tool catalogue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name, as `tool-call` names it.
    pub name: String,
    /// What it does, for a model.
    pub description: String,
    /// Offered only to a Planner that declared `planning: true` (SPEC U1).
    pub requires_planning: bool,
    /// Whether a call may change the document or its decisions: after
    /// `interrupted` (SPEC W1), verify the document before calling again.
    pub writes: bool,
    /// The JSON Schema of its arguments.
    pub input: Schema,
    /// The JSON Schema of its output.
    pub output: Schema,
}

macro_rules! tools {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $name:literal, $input:ty => $output:ty,
        planning: $planning:literal, writes: $writes:literal,
        $description:literal;
    )*) => {
        /// A tool, by name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum ToolName {
            $($(#[$doc])* $variant,)*
        }

        impl ToolName {
            /// Every tool, in catalogue order.
            pub const ALL: &'static [ToolName] = &[$(ToolName::$variant,)*];

            /// The name `tool-call` uses.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ToolName::$variant => $name,)*
                }
            }

            /// The tool named `name`, if there is one.
            pub fn parse(name: &str) -> Option<ToolName> {
                match name {
                    $($name => Some(ToolName::$variant),)*
                    _ => None,
                }
            }

            /// What it does, for a model.
            pub fn description(self) -> &'static str {
                match self {
                    $(ToolName::$variant => $description,)*
                }
            }

            /// Whether only a Planner that declared `planning` is offered it.
            pub fn requires_planning(self) -> bool {
                match self {
                    $(ToolName::$variant => $planning,)*
                }
            }

            /// Whether a call may change the document or its decisions.
            pub fn writes(self) -> bool {
                match self {
                    $(ToolName::$variant => $writes,)*
                }
            }

            /// Whether its input has anything to send: a tool whose input
            /// `{}` fills (`read_document`) is called over HTTP with no body.
            pub fn takes_input(self) -> bool {
                match self {
                    $(ToolName::$variant => {
                        serde_json::from_value::<$input>(serde_json::json!({})).is_err()
                    })*
                }
            }

            /// The name of its input's shape (a schema of `docs/protocol/`).
            pub fn input_name(self) -> &'static str {
                match self {
                    $(ToolName::$variant => stringify!($input),)*
                }
            }

            /// The name of its output's shape.
            pub fn output_name(self) -> &'static str {
                match self {
                    $(ToolName::$variant => stringify!($output),)*
                }
            }

            /// Its catalogue entry, each schema standing alone.
            pub fn spec(self) -> ToolSpec {
                let (input, output) = match self {
                    $(ToolName::$variant => (
                        SchemaGenerator::default().into_root_schema_for::<$input>(),
                        SchemaGenerator::default().into_root_schema_for::<$output>(),
                    ),)*
                };
                ToolSpec {
                    name: self.as_str().to_owned(),
                    description: self.description().to_owned(),
                    requires_planning: self.requires_planning(),
                    writes: self.writes(),
                    input,
                    output,
                }
            }
        }

        /// A tool call with its arguments parsed.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum ToolCall {
            $($(#[$doc])* $variant($input),)*
        }

        impl ToolCall {
            /// Which tool it calls.
            pub fn name(&self) -> ToolName {
                match self {
                    $(ToolCall::$variant(_) => ToolName::$variant,)*
                }
            }

            /// Parses a `tool-call`'s name and arguments for a session that
            /// plans (`planning`) or not: an unknown name (or `update_plan`
            /// for a session that does not plan) is `unknown_tool`, naming
            /// the tools offered; arguments that do not parse are
            /// `invalid_input`. Absent arguments (`null`) read as `{}`.
            pub fn parse(
                name: &str,
                arguments: serde_json::Value,
                planning: bool,
            ) -> Result<ToolCall, ToolRefusal> {
                let tool = ToolName::parse(name)
                    .filter(|tool| planning || !tool.requires_planning())
                    .ok_or_else(|| unknown_tool(name, planning))?;
                let arguments = match arguments {
                    serde_json::Value::Null => serde_json::Value::Object(Default::default()),
                    other => other,
                };
                let malformed = |e: serde_json::Error| ToolRefusal {
                    code: RefusalCode::InvalidInput,
                    message: format!("malformed arguments for {name}: {e}"),
                    read_again: false,
                    retry: false,
                };
                Ok(match tool {
                    $(ToolName::$variant => {
                        ToolCall::$variant(serde_json::from_value(arguments).map_err(malformed)?)
                    })*
                })
            }
        }
    };
}

tools! {
    /// The document's revision and outline.
    ReadDocument = "read_document", ReadDocumentInput => ReadDocumentOutput,
    planning: false, writes: false,
    "Reads the document: its revision and its blocks in order (index, kind, text, digest, identity). The read is remembered, so a batch of decisions written from it survives later edits by others.";
    /// Edits blocks at the current revision.
    EditPlan = "edit_plan", EditPlanInput => EditPlanOutput,
    planning: false, writes: true,
    "Inserts, replaces or deletes blocks, every address taken at the current revision; all edits apply or none do. Returns the revision made and its outline.";
    /// Opens a batch of decision cards.
    OpenDecisions = "open_decisions", OpenDecisionsInput => OpenDecisionsOutput,
    planning: false, writes: true,
    "Opens decision cards beside the paragraphs they concern, each under a stable key. The whole batch is created or nothing is; a repeated key replays its decision. A batch written at an older revision keeps its place when the paragraphs it names are intact.";
    /// Opens one decision card at the current revision.
    OpenDecision = "open_decision", OpenDecisionInput => OpenDecisionsOutput,
    planning: false, writes: true,
    "Opens one decision card, strictly at the current revision.";
    /// Asks people a question and waits on their answer.
    Ask = "ask", OpenDecisionInput => OpenDecisionsOutput,
    planning: false, writes: true,
    "Asks people a question as a decision card at the current revision; the session waits on it, with no deadline, and the answer arrives as input-result.";
    /// Replaces the session's plan.
    UpdatePlan = "update_plan", UpdatePlanInput => UpdatePlanOutput,
    planning: true, writes: false,
    "Replaces the session's plan (a checklist of at most 32 steps, at most one in progress) at expected_revision. Progress reporting only: it grants nothing and proves nothing.";
}

/// A tool's output. The JSON is the tool's output type; a reader that does
/// not know which tool answered reads an `edit_plan` output (the same
/// shape) as [`ToolOutput::ReadDocument`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ToolOutput {
    /// `open_decisions`, `open_decision`, `ask`.
    Decisions(OpenDecisionsOutput),
    /// `update_plan`.
    UpdatePlan(UpdatePlanOutput),
    /// `read_document`.
    ReadDocument(ReadDocumentOutput),
    /// `edit_plan`.
    EditPlan(EditPlanOutput),
    /// `read_document`, as the server sends it: already encoded. Never
    /// decoded into: its JSON reads back as [`ToolOutput::ReadDocument`].
    #[serde(skip_deserializing)]
    #[schemars(skip)]
    EncodedRead(EncodedRead),
}

impl ToolOutput {
    /// The output as the type its tool returns (`ReadDocumentOutput`,
    /// `EditPlanOutput`, …): what a machine that knows which tool it called
    /// reads it as.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::to_value(self).and_then(serde_json::from_value)
    }
}

/// The refusal of a name the session does not offer, naming what it does.
pub fn unknown_tool(name: &str, planning: bool) -> ToolRefusal {
    let offered: Vec<&str> = ToolName::ALL
        .iter()
        .filter(|tool| planning || !tool.requires_planning())
        .map(|tool| tool.as_str())
        .collect();
    let shown: String = name.chars().take(64).collect();
    ToolRefusal {
        code: RefusalCode::UnknownTool,
        message: format!("no tool named {shown:?}; tools: {}", offered.join(", ")),
        read_again: false,
        retry: false,
    }
}

/// The catalogue of every tool, with JSON Schemas of its input and output
/// (committed as `docs/protocol/tools.json`).
pub fn catalogue() -> Vec<ToolSpec> {
    ToolName::ALL.iter().map(|tool| tool.spec()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_document_takes_no_input() {
        let none: Vec<ToolName> = ToolName::ALL
            .iter()
            .copied()
            .filter(|tool| !tool.takes_input())
            .collect();
        assert_eq!(none, [ToolName::ReadDocument]);
    }

    #[test]
    fn every_name_parses_back_to_its_tool() {
        for tool in ToolName::ALL {
            assert_eq!(ToolName::parse(tool.as_str()), Some(*tool));
            let json = serde_json::to_string(tool).unwrap();
            assert_eq!(json, format!("\"{}\"", tool.as_str()));
        }
        assert_eq!(ToolName::parse("rm_rf"), None);
    }

    #[test]
    fn update_plan_is_offered_only_to_a_session_that_plans() {
        let input = serde_json::json!({"expected_revision": 0, "steps": []});
        let refused = ToolCall::parse("update_plan", input.clone(), false).unwrap_err();
        assert_eq!(refused.code, RefusalCode::UnknownTool);
        assert!(
            refused
                .message
                .ends_with("tools: read_document, edit_plan, open_decisions, open_decision, ask"),
            "{}",
            refused.message
        );
        let call = ToolCall::parse("update_plan", input, true).unwrap();
        assert_eq!(call.name(), ToolName::UpdatePlan);
        let other = ToolCall::parse("shout", serde_json::Value::Null, true).unwrap_err();
        assert!(other.message.ends_with(
            "tools: read_document, edit_plan, open_decisions, open_decision, ask, update_plan"
        ));
    }

    #[test]
    fn malformed_arguments_are_invalid_input_naming_the_tool() {
        let refused =
            ToolCall::parse("edit_plan", serde_json::json!({"revision": "x"}), false).unwrap_err();
        assert_eq!(refused.code, RefusalCode::InvalidInput);
        assert!(refused
            .message
            .starts_with("malformed arguments for edit_plan:"));
        let refused =
            ToolCall::parse("read_document", serde_json::json!({"all": true}), false).unwrap_err();
        assert_eq!(refused.code, RefusalCode::InvalidInput);
        assert_eq!(
            ToolCall::parse("read_document", serde_json::Value::Null, false),
            Ok(ToolCall::ReadDocument(ReadDocumentInput {}))
        );
    }

    #[test]
    fn an_encoded_read_is_sent_as_its_json_and_read_back_as_a_read() {
        let json = r#"{"revision":3,"outline":[{"index":0,"kind":"paragraph","text":"Ship \"it\"","digest":"ab","identity":"1:2"}]}"#;
        let output = ToolOutput::EncodedRead(EncodedRead::new(json.into()).unwrap());
        assert_eq!(serde_json::to_string(&output).unwrap(), json);
        let read: ReadDocumentOutput = output.decode().unwrap();
        assert_eq!(read.outline[0].text, "Ship \"it\"");
        let back: ToolOutput = serde_json::from_str(json).unwrap();
        assert_eq!(back, ToolOutput::ReadDocument(read));
        assert!(EncodedRead::new(r#"{"revision":3,"outline":["#.into()).is_err());
    }

    #[test]
    fn outputs_serialize_as_their_tools_output_and_decode_to_it() {
        let read = ReadDocumentOutput {
            revision: 3,
            outline: Vec::new(),
        };
        let output = ToolOutput::ReadDocument(read.clone());
        assert_eq!(
            serde_json::to_string(&output).unwrap(),
            r#"{"revision":3,"outline":[]}"#
        );
        let edited: EditPlanOutput = output.decode().unwrap();
        assert_eq!(
            (edited.revision, edited.outline),
            (read.revision, read.outline)
        );
    }
}
