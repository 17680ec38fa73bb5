//! Margin as an MCP server for a member's own agent (SPEC O4), over
//! Streamable HTTP at `/mcp`. Each tool call is the HTTP call it stands for
//! ([`route`]), made in process through this server's own HTTP surface with
//! the caller's token and address: roles, bounds, refusals, the sign-in
//! throttle and a cluster's relays to a document's owner hold exactly as
//! over HTTP, and the answer — or the error body of a refusal — is the
//! tool's result. Stateless: any node of a cluster answers any request.

use std::net::SocketAddr;

use axum::body::{to_bytes, Body};
use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use margin_protocol::mcp::{
    is_id, refusal, split_document, unknown_tool, DocumentResource, ListDocumentsInput, MemberTool,
    OnDocument, PostChatInput, MAX_ID_BYTES, RESOURCE_PREFIX,
};
use margin_protocol::DocumentList;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, ServerCapabilities, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Map, Value};
use tower::ServiceExt;

use super::extract::Caller;
use super::AppState;

/// Largest answer read back from the HTTP surface: a whole outline of a
/// document at its bounds, with room.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// `/mcp`: Streamable HTTP for signed-in callers, its calls made through
/// `api`, this server's HTTP surface. Requests of at most `max_body` bytes.
pub fn service(state: AppState, api: Router, max_body: usize) -> Router {
    let mut config = StreamableHttpServerConfig::default();
    // Stateless, answering in JSON: a cluster's balancer may send each
    // request to another node, and none holds an MCP session.
    config.legacy_session_mode = false;
    config.json_response = true;
    config.max_request_body_bytes = max_body;
    // The `Host` check guards a local server that trusts whoever reaches
    // it; every call here carries the member's token, which a rebound
    // page cannot send, and the server answers on whatever name it is
    // deployed under.
    let config = config.disable_allowed_hosts();
    let member = Member { api };
    let mcp = StreamableHttpService::new(
        move || Ok(member.clone()),
        NeverSessionManager::default().into(),
        config,
    );
    Router::new()
        .route_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(state, signed_in))
}

/// Refuses a request without a good token before MCP reads it: 401 with
/// `WWW-Authenticate: Bearer`, as the MCP authorization spec has a
/// protected resource answer.
async fn signed_in(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    if let Err(error) = Caller::from_request_parts(&mut parts, &state).await {
        let mut refused = error.into_response();
        refused
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return refused;
    }
    next.run(Request::from_parts(parts, body)).await
}

/// One member's agent: each call goes to `api` as that member.
#[derive(Clone)]
struct Member {
    api: Router,
}

/// The HTTP call a tool call stands for.
#[derive(Debug, PartialEq)]
struct Call {
    method: Method,
    path: String,
    body: Option<Value>,
}

impl ServerHandler for Member {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("margin", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Margin: shared planning documents. list_documents gives the documents you \
                 are a member of; read_document before editing (edits name the revision and \
                 the paragraphs' digests you read); open_decisions turns open questions into \
                 decision cards people answer in the document; post_chat talks to people and, \
                 with @planner, to the document's Planner. You act as yourself, with your role.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = MemberTool::all()
            .into_iter()
            .map(|tool| {
                Tool::new(
                    tool.name(),
                    tool.description(),
                    std::sync::Arc::new(tool.input_schema()),
                )
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(tool) = MemberTool::parse(&request.name) else {
            let offered: Vec<&str> = MemberTool::all()
                .into_iter()
                .map(MemberTool::name)
                .collect();
            return Err(McpError::invalid_params(
                unknown_tool(&request.name, &offered),
                None,
            ));
        };
        let call = match route(tool, request.arguments.unwrap_or_default()) {
            Ok(call) => call,
            Err(message) => return Ok(refused("invalid_input", message).into()),
        };
        let parts = request_parts(&context)?;
        Ok(self.send(call, parts).await.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let parts = request_parts(&context)?;
        Ok(ListResourcesResult::with_all_items(
            self.resources(parts).await?,
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let templates = DocumentResource::ALL
            .into_iter()
            .map(|resource| {
                ResourceTemplate::new(resource.template(), resource.name())
                    .with_description(resource.description())
                    .with_mime_type("application/json")
            })
            .collect();
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let parts = request_parts(&context)?;
        let call = resource_call(&request.uri)
            .map_err(|message| McpError::resource_not_found(message, None))?;
        let (status, body) = self
            .fetch(call, parts)
            .await
            .map_err(|message| McpError::internal_error(message, None))?;
        if !status.is_success() {
            // The HTTP error body's message: a document the caller cannot
            // see is not found, as over HTTP.
            let message = body
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("the server refused the read")
                .to_owned();
            return Err(McpError::resource_not_found(message, Some(body)));
        }
        let contents = ResourceContents::text(body.to_string(), request.uri)
            .with_mime_type("application/json");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// The HTTP request `context` came in, whose caller every call acts as.
fn request_parts(context: &RequestContext<RoleServer>) -> Result<&Parts, McpError> {
    context
        .extensions
        .get::<Parts>()
        .ok_or_else(|| McpError::internal_error("the HTTP request is not at hand", None))
}

/// The HTTP read a resource `uri` stands for, or why there is none.
fn resource_call(uri: &str) -> Result<Call, String> {
    let (document, resource) = DocumentResource::parse(uri).ok_or_else(|| {
        format!("no resource {uri:?}: the resources are {RESOURCE_PREFIX}{{document}}/outline and …/decisions")
    })?;
    Ok(Call {
        method: Method::GET,
        path: format!("/documents/{}/{}", id(document)?, resource.name()),
        body: None,
    })
}

impl Member {
    /// Makes `call` through the HTTP surface as the caller of `parts`, as
    /// a tool call's result.
    async fn send(&self, call: Call, parts: &Parts) -> CallToolResult {
        match self.fetch(call, parts).await {
            Ok((status, body)) => match (status.is_success(), body) {
                (true, body @ Value::Object(_)) => CallToolResult::structured(body),
                (true, body) => CallToolResult::success(vec![ContentBlock::text(body.to_string())]),
                (false, body @ Value::Object(_)) => CallToolResult::structured_error(body),
                (false, _) => refused("internal", format!("the server answered {status}")),
            },
            Err(message) => refused("internal", message),
        }
    }

    /// Makes `call` through the HTTP surface as the caller of `parts`: its
    /// status and JSON body (`null` when empty or not JSON).
    async fn fetch(&self, call: Call, parts: &Parts) -> Result<(StatusCode, Value), String> {
        let mut request = axum::http::Request::builder()
            .method(call.method)
            .uri(call.path);
        if let Some(token) = parts.headers.get(AUTHORIZATION) {
            request = request.header(AUTHORIZATION, token);
        }
        let body = match call.body {
            Some(body) => {
                request = request.header(CONTENT_TYPE, "application/json");
                Body::from(body.to_string())
            }
            None => Body::empty(),
        };
        let Ok(mut request) = request.body(body) else {
            return Err("the call names no valid path".into());
        };
        // The caller's address, for the throttle and the logs.
        if let Some(peer) = parts.extensions.get::<ConnectInfo<SocketAddr>>() {
            request.extensions_mut().insert(*peer);
        }
        let Ok(response) = self.api.clone().oneshot(request).await;
        let status = response.status();
        match to_bytes(response.into_body(), MAX_ANSWER_BYTES).await {
            Ok(bytes) if bytes.is_empty() => Ok((status, Value::Null)),
            Ok(bytes) => Ok((
                status,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            )),
            Err(error) => Err(format!("the answer could not be read: {error}")),
        }
    }

    /// The caller's documents' resources.
    async fn resources(&self, parts: &Parts) -> Result<Vec<Resource>, McpError> {
        // The call `list_documents` stands for.
        let listed = route(MemberTool::ListDocuments, Map::new())
            .map_err(|message| McpError::internal_error(message, None))?;
        let (status, body) = self
            .fetch(listed, parts)
            .await
            .map_err(|message| McpError::internal_error(message, None))?;
        let documents: DocumentList = match status.is_success() {
            true => serde_json::from_value(body)
                .map_err(|error| McpError::internal_error(error.to_string(), None))?,
            false => {
                return Err(McpError::internal_error(
                    format!("the server answered {status}"),
                    None,
                ))
            }
        };
        let mut resources = Vec::new();
        for document in documents.documents {
            for resource in DocumentResource::ALL {
                resources.push(
                    Resource::new(
                        resource.uri(&document.id),
                        format!("{} — {}", document.title, resource.name()),
                    )
                    .with_description(resource.description())
                    .with_mime_type("application/json"),
                );
            }
        }
        Ok(resources)
    }
}

/// A call refused before it reached the HTTP surface, as the error body
/// one refused there is, so an agent reads both alike.
fn refused(code: &str, message: String) -> CallToolResult {
    CallToolResult::structured_error(refusal(code, &message))
}

/// The HTTP call `tool` with `arguments` stands for, or why there is none.
fn route(tool: MemberTool, arguments: Map<String, Value>) -> Result<Call, String> {
    let arguments = Value::Object(arguments);
    let malformed =
        |error: serde_json::Error| format!("malformed arguments for {}: {error}", tool.name());
    match tool {
        MemberTool::ListDocuments => {
            let ListDocumentsInput {} = serde_json::from_value(arguments).map_err(malformed)?;
            Ok(Call {
                method: Method::GET,
                path: "/documents".into(),
                body: None,
            })
        }
        MemberTool::ListDecisions => {
            let OnDocument { document } = serde_json::from_value(arguments).map_err(malformed)?;
            Ok(Call {
                method: Method::GET,
                path: format!("/documents/{}/decisions", id(&document)?),
                body: None,
            })
        }
        MemberTool::PostChat => {
            let PostChatInput { document, text } =
                serde_json::from_value(arguments).map_err(malformed)?;
            Ok(Call {
                method: Method::POST,
                path: format!("/documents/{}/chat", id(&document)?),
                body: Some(serde_json::json!({ "text": text })),
            })
        }
        MemberTool::Document(name) => {
            let Value::Object(arguments) = arguments else {
                return Err(format!("{} takes an object", tool.name()));
            };
            let (document, input) = split_document(arguments).ok_or_else(|| {
                format!("{} needs the document's id as \"document\"", tool.name())
            })?;
            Ok(Call {
                method: Method::POST,
                path: format!("/documents/{}/tools/{}", id(&document)?, name.as_str()),
                body: Some(Value::Object(input)),
            })
        }
    }
}

/// `id`, if it can stand in a path as one segment.
fn id(id: &str) -> Result<&str, String> {
    if is_id(id) {
        Ok(id)
    } else {
        Err(format!(
            "{id:?} is no document id (1 to {MAX_ID_BYTES} letters, digits, '-' or '_')"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use margin_protocol::tools::ToolName;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(object) => object,
            _ => Map::new(),
        }
    }

    #[test]
    fn each_tool_stands_for_the_http_call_a_member_would_make() {
        let call = |tool, args| route(tool, object(args));
        assert_eq!(
            call(MemberTool::ListDocuments, serde_json::json!({})),
            Ok(Call {
                method: Method::GET,
                path: "/documents".into(),
                body: None
            })
        );
        assert_eq!(
            call(
                MemberTool::ListDecisions,
                serde_json::json!({"document": "d-1"})
            ),
            Ok(Call {
                method: Method::GET,
                path: "/documents/d-1/decisions".into(),
                body: None
            })
        );
        assert_eq!(
            call(
                MemberTool::PostChat,
                serde_json::json!({"document": "d-1", "text": "hi"})
            ),
            Ok(Call {
                method: Method::POST,
                path: "/documents/d-1/chat".into(),
                body: Some(serde_json::json!({"text": "hi"}))
            })
        );
        assert_eq!(
            call(
                MemberTool::Document(ToolName::EditPlan),
                serde_json::json!({"document": "d-1", "expected_revision": 2, "edits": []})
            ),
            Ok(Call {
                method: Method::POST,
                path: "/documents/d-1/tools/edit_plan".into(),
                body: Some(serde_json::json!({"expected_revision": 2, "edits": []}))
            })
        );
    }

    #[test]
    fn a_call_naming_no_fit_document_is_refused_before_any_path_is_made() {
        for bad in ["", "../admin", "d?x=1", "d/e", &"d".repeat(65)] {
            let args = object(serde_json::json!({"document": bad}));
            assert!(
                route(MemberTool::ListDecisions, args.clone()).is_err(),
                "{bad:?}"
            );
            assert!(
                route(MemberTool::Document(ToolName::ReadDocument), args).is_err(),
                "{bad:?}"
            );
        }
        let unknown = object(serde_json::json!({"document": "d", "extra": 1}));
        assert!(route(MemberTool::ListDecisions, unknown).is_err());
        assert!(route(MemberTool::Document(ToolName::ReadDocument), Map::new()).is_err());
    }
}
