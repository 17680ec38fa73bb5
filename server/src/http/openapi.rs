//! The HTTP API described as OpenAPI 3.1 (SPEC O1), served at
//! `/openapi.json` and committed as `docs/openapi.json`.
//!
//! Built from the code: [`routes`] lists every route the router serves,
//! with the wire shape of its body and answers by name, and the shapes
//! themselves are `margin_protocol::schema::all()` — the JSON Schemas the
//! protocol crate derives, committed beside it in `docs/protocol/`. Tests
//! fail when this table and the router disagree, and when the committed
//! file is stale.

use std::sync::LazyLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use margin_protocol::tools::ToolName;
use serde_json::{json, Map, Value};

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// Anyone: health, metrics, the editor's files.
    None,
    /// A member's bearer token (`Authorization: Bearer mgn_…`).
    Member,
    /// A machine's credential (`Authorization: Bearer mgm_…`).
    Machine,
    /// Another node of the cluster, showing the cluster's secret.
    Node,
}

/// What a route answers when it succeeds.
#[derive(Clone, Copy, Debug)]
pub enum Answer {
    /// A JSON body of the named shape.
    Json(u16, &'static str),
    /// No body.
    Empty(u16),
    /// Server-Sent Events whose `data` is the named shape.
    Events(&'static str),
    /// A WebSocket upgrade; frames as `docs/protocol.md` describes.
    Upgrade,
    /// A file of this media type.
    File(&'static str),
}

/// One operation.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    /// `get`, `post`, `patch`, `delete`.
    pub method: &'static str,
    /// As the router spells it: `/documents/{id}`.
    pub path: &'static str,
    /// What it does, one line.
    pub summary: &'static str,
    /// A tag grouping it.
    pub tag: &'static str,
    /// Who may call it.
    pub auth: Auth,
    /// The JSON body it takes, by shape name.
    pub body: Option<&'static str>,
    /// Query parameters, with what each means.
    pub query: &'static [(&'static str, &'static str)],
    /// What it answers when it succeeds.
    pub answer: Answer,
}

const fn route(
    method: &'static str,
    path: &'static str,
    tag: &'static str,
    auth: Auth,
    summary: &'static str,
    answer: Answer,
) -> Route {
    Route {
        method,
        path,
        summary,
        tag,
        auth,
        body: None,
        query: &[],
        answer,
    }
}

const fn with_body(mut route: Route, body: &'static str) -> Route {
    route.body = Some(body);
    route
}

const fn with_query(mut route: Route, query: &'static [(&'static str, &'static str)]) -> Route {
    route.query = query;
    route
}

use Answer::{Empty, Events, File, Json, Upgrade};
use Auth::{Machine, Member, Node};

const CURSOR: &[(&str, &str)] = &[(
    "after",
    "Replay after this cursor when no Last-Event-ID header is sent",
)];

/// Every route the router serves but the Planner's tools ([`routes`] adds
/// one per tool of the protocol's table).
pub const ROUTES: &[Route] = &[
    route("get", "/", "editor", Auth::None, "The browser editor's page (never cached)", File("text/html")),
    route("get", "/assets/{file}", "editor", Auth::None, "An editor file under its content-hashed name (cached for a year; br or gzip as asked)", File("application/octet-stream")),
    route("get", "/favicon.ico", "editor", Auth::None, "The icon", File("image/x-icon")),
    route("get", "/healthz", "operations", Auth::None, "The server runs and its database answers", File("application/json")),
    route("get", "/readyz", "operations", Auth::None, "The server can take traffic: not draining after SIGTERM, and in a cluster registered", File("application/json")),
    route("get", "/metrics", "operations", Auth::None, "Counters and gauges in the Prometheus text format", File("text/plain")),
    route("get", "/openapi.json", "operations", Auth::None, "This description", File("application/json")),
    route("get", "/internal/documents/{id}/sync", "cluster", Node, "A sync socket forwarded from another node to the document's owner", Upgrade),
    route("get", "/internal/machines/{id}/link", "cluster", Node, "A machine's link mirrored from the node it reached", Upgrade),
    route("get", "/me", "accounts", Member, "Who the token belongs to", Json(200, "Me")),
    route("post", "/me/sign-out", "accounts", Member, "Forget this token; the account's Planner sessions end", Empty(204)),
    with_body(route("post", "/machines", "machines", Member, "Pair a machine for a Planner; its credential is shown only here", Json(201, "PairedMachine")), "PairMachine"),
    route("get", "/machines", "machines", Member, "The caller's machines", Json(200, "MachineList")),
    route("delete", "/machines/{id}", "machines", Member, "Revoke a machine: its sessions end and its links close", Empty(204)),
    route("get", "/machine", "machines", Machine, "A machine's link (WebSocket)", Upgrade),
    route("delete", "/machine", "machines", Machine, "A machine unpairs itself", Empty(204)),
    with_body(route("post", "/documents", "documents", Member, "Create a document", Json(201, "DocumentInfo")), "CreateDocument"),
    route("get", "/documents", "documents", Member, "The caller's documents, most recently edited first", Json(200, "DocumentList")),
    route("get", "/documents/{id}", "documents", Member, "A document as the caller sees it", Json(200, "DocumentInfo")),
    with_body(route("patch", "/documents/{id}", "documents", Member, "Rename a document (owners and editors)", Json(200, "DocumentInfo")), "RenameDocument"),
    route("delete", "/documents/{id}", "documents", Member, "Delete a document and everything under it (owner)", Empty(204)),
    route("post", "/documents/{id}/archive", "documents", Member, "Archive: read-only for everyone; its Planner session ends (owner)", Json(200, "DocumentInfo")),
    route("post", "/documents/{id}/unarchive", "documents", Member, "Unarchive (owner)", Json(200, "DocumentInfo")),
    route("get", "/documents/{id}/members", "documents", Member, "Who has access, owner first", Json(200, "MemberList")),
    with_body(route("post", "/documents/{id}/members", "documents", Member, "Share with an account, or change its role (owner)", Json(200, "MemberInfo")), "AddMember"),
    route("delete", "/documents/{id}/members/{account}", "documents", Member, "Remove a member (owner); their sockets close with 4404", Empty(204)),
    with_query(route("get", "/documents/{id}/outline", "documents", Member, "The outline of a revision (the latest by default)", Json(200, "OutlineView")), &[("revision", "The revision wanted")]),
    route("get", "/documents/{id}/sync", "documents", Member, "The y-websocket sync socket (token also as ?token=)", Upgrade),
    with_body(route("post", "/documents/{id}/chat", "chat", Member, "Post to Chat; @planner starts a turn", Json(201, "ChatMessageView")), "PostChat"),
    with_query(route("get", "/documents/{id}/chat", "chat", Member, "Chat lines after a seq, oldest first", Json(200, "ChatList")), &[("after", "The last seq the caller has")]),
    with_query(route("get", "/documents/{id}/events", "chat", Member, "The document's feed: its Chat, its Planner's status and the document itself, live (token also as ?token=)", Events("DocumentEvent")), CURSOR),
    route("get", "/documents/{id}/planner", "planner", Member, "What the document's Planner is doing", Json(200, "PlannerView")),
    route("post", "/documents/{id}/planner/stop", "planner", Member, "Ask the Planner to stop (held while it is away)", Empty(202)),
    route("post", "/documents/{id}/planner/resume", "planner", Member, "Withdraw a Stop not yet confirmed", Empty(202)),
    route("post", "/documents/{id}/planner/reset", "planner", Member, "End the document's Planner session", Empty(204)),
    with_body(route("post", "/documents/{id}/planner/invoke", "planner", Member, "Post to Chat and hand the message to the Planner (invoke_planner)", Json(201, "ChatMessageView")), "PostChat"),
    route("get", "/documents/{id}/decisions", "decisions", Member, "The document's decision cards", Json(200, "DecisionList")),
    with_body(route("post", "/documents/{id}/decisions/{card}/answer", "decisions", Member, "Answer a card", Json(200, "DecisionCardView")), "AnswerBody"),
    route("post", "/documents/{id}/decisions/{card}/discard", "decisions", Member, "Discard a card", Json(200, "DecisionCardView")),
    route("post", "/documents/{id}/decisions/{card}/reopen", "decisions", Member, "Reopen a card", Json(200, "DecisionCardView")),
    with_body(route("post", "/documents/{id}/decisions/{card}/options", "decisions", Member, "Add an option", Json(200, "DecisionCardView")), "AddOption"),
    with_body(route("post", "/documents/{id}/decisions/{card}/criteria", "decisions", Member, "Add a criterion", Json(200, "DecisionCardView")), "AddCriterion"),
    route("get", "/sessions/{sid}", "planner", Member, "A Planner session's snapshot, with its cursor", Json(200, "SessionSnapshot")),
    with_query(route("get", "/sessions/{sid}/events", "planner", Member, "A Planner session's events after a cursor, live (token also as ?token=)", Events("SessionEvent")), CURSOR),
];

/// The description, built once.
static DESCRIPTION: LazyLock<String> = LazyLock::new(|| {
    margin_protocol::schema::committed_json(&describe()).unwrap_or_else(|_| "{}\n".into())
});

/// Every route the router serves: [`ROUTES`], and
/// `POST /documents/{id}/tools/{tool}` once per document tool of the
/// protocol's table (`margin_protocol::tools`), with its input and output.
pub fn routes() -> &'static [Route] {
    static ALL: LazyLock<Vec<Route>> = LazyLock::new(|| {
        let tools = ToolName::ALL
            .iter()
            .filter(|tool| !tool.requires_planning())
            .map(|&tool| {
                // Made once for the process: the table's names, as the
                // routes' static strings.
                let path: &'static str = Box::leak(
                    format!("/documents/{{id}}/tools/{}", tool.as_str()).into_boxed_str(),
                );
                let summary: &'static str =
                    Box::leak(format!("The Planner's {} tool", tool.as_str()).into_boxed_str());
                let described = route(
                    "post",
                    path,
                    "tools",
                    Member,
                    summary,
                    Json(200, tool.output_name()),
                );
                match tool.takes_input() {
                    true => with_body(described, tool.input_name()),
                    false => described,
                }
            });
        ROUTES.iter().copied().chain(tools).collect()
    });
    &ALL
}

/// `GET /openapi.json`.
pub async fn serve() -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], DESCRIPTION.as_str())
}

/// The OpenAPI 3.1 document.
pub fn describe() -> Value {
    let mut paths = Map::new();
    for route in routes() {
        let item = paths
            .entry(route.path.to_owned())
            .or_insert_with(|| json!({}));
        if let Value::Object(item) = item {
            item.insert(route.method.to_owned(), operation(route));
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Margin",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Margin's HTTP API. Every body is defined once in the margin-protocol crate; docs/protocol.md describes each route, its errors and the sync and machine-link protocols.",
        },
        "paths": paths,
        "components": {
            "schemas": components(),
            "securitySchemes": {
                "member": {"type": "http", "scheme": "bearer", "description": "A member's token (mgn_…), from `margin account add` or `margin token add`"},
                "machine": {"type": "http", "scheme": "bearer", "description": "A machine's credential (mgm_…), from pairing; renewed over the link"},
                "node": {"type": "apiKey", "in": "header", "name": crate::cluster::SECRET_HEADER, "description": "The cluster's secret, shown by another node"},
            },
        },
    })
}

fn operation(route: &Route) -> Value {
    let mut op = Map::new();
    op.insert("operationId".into(), json!(operation_id(route)));
    op.insert("summary".into(), json!(route.summary));
    op.insert("tags".into(), json!([route.tag]));
    let mut parameters: Vec<Value> = route
        .path
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect();
    parameters.extend(route.query.iter().map(|(name, what)| {
        json!({"name": name, "in": "query", "required": false, "description": what, "schema": {"type": "string"}})
    }));
    if !parameters.is_empty() {
        op.insert("parameters".into(), Value::Array(parameters));
    }
    if let Some(body) = route.body {
        op.insert(
            "requestBody".into(),
            json!({"required": true, "content": {"application/json": {"schema": reference(body)}}}),
        );
    }
    let security = match route.auth {
        Auth::None => json!([]),
        Member => json!([{"member": []}]),
        Machine => json!([{"machine": []}]),
        Node => json!([{"node": []}]),
    };
    op.insert("security".into(), security);
    let mut responses = Map::new();
    let (status, success) = match route.answer {
        Json(status, shape) => (
            status,
            json!({"description": "Done", "content": {"application/json": {"schema": reference(shape)}}}),
        ),
        Empty(status) => (status, json!({"description": "Done; no body"})),
        Events(shape) => (
            200,
            json!({"description": format!("Server-Sent Events; each event's data is a {shape}"), "content": {"text/event-stream": {"schema": reference(shape)}}}),
        ),
        Upgrade => (101, json!({"description": "Switching to WebSocket"})),
        File(media) => (
            200,
            json!({"description": "The file", "content": {media: {}}}),
        ),
    };
    responses.insert(status.to_string(), success);
    responses.insert(
        "default".into(),
        json!({"description": "An error; docs/protocol.md lists every code", "content": {"application/json": {"schema": reference("ErrorBody")}}}),
    );
    op.insert("responses".into(), Value::Object(responses));
    Value::Object(op)
}

/// `get /documents/{id}/members` → `get_documents_id_members`.
fn operation_id(route: &Route) -> String {
    let path: Vec<&str> = route
        .path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_start_matches('{').trim_end_matches('}'))
        .collect();
    let name = if path.is_empty() {
        "root".to_owned()
    } else {
        path.join("_").replace(['-', '.'], "_")
    };
    format!("{}_{name}", route.method)
}

fn reference(shape: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{shape}")})
}

/// Every wire shape, its `$defs` hoisted beside it: an OpenAPI document
/// resolves `#` against itself, so a schema's own `#/$defs/X` would point
/// nowhere once embedded.
fn components() -> Map<String, Value> {
    let mut all = Map::new();
    for (name, schema) in margin_protocol::schema::all() {
        let mut value = schema.to_value();
        if let Value::Object(object) = &mut value {
            object.remove("$schema");
            if let Some(Value::Object(defs)) = object.remove("$defs") {
                for (def, schema) in defs {
                    all.insert(def, schema);
                }
            }
        }
        all.insert(name.to_owned(), value);
    }
    // Shapes named inside others that are not top-level schemas of their own.
    let mut rewritten = Value::Object(all);
    rewrite_refs(&mut rewritten);
    match rewritten {
        Value::Object(all) => all,
        _ => Map::new(),
    }
}

fn rewrite_refs(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if let Some(Value::String(target)) = object.get_mut("$ref") {
                if let Some(name) = target.strip_prefix("#/$defs/") {
                    *target = format!("#/components/schemas/{name}");
                }
            }
            for child in object.values_mut() {
                rewrite_refs(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}
