//! The Planner's document tools over HTTP, for an account's own tooling and
//! scripts: the same calls the machine link carries, acting for the token's
//! account (SPEC A1), one route for every tool of the protocol's table
//! (`POST /documents/{id}/tools/{tool}`). A refusal is a 422 whose code is
//! the refusal's, except a write to an archived document: `409 archived`,
//! as for people (SPEC P3).

use axum::extract::{FromRequest, Path, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use axum::Json;
use margin_protocol::tools::{ToolCall, ToolName, ToolOutput};
use margin_protocol::{ErrorCode, RefusalCode};

use super::extract::{Caller, JsonBody};
use super::{AppError, AppState};
use crate::tools::{Ran, ToolError, Tools};

impl From<ToolError> for AppError {
    fn from(error: ToolError) -> Self {
        match error {
            ToolError::Refused(refusal) if refusal.code == RefusalCode::Archived => {
                AppError::Archived(refusal.message)
            }
            ToolError::Refused(refusal) => AppError::Tool(refusal),
            ToolError::Internal(detail) => AppError::Internal(detail),
        }
    }
}

/// `POST /documents/{id}/tools/{tool}`: the tool's input as the body (none
/// for `read_document`), its output as the answer. A name the protocol's
/// table lacks, and `update_plan` (a session's own), are no route.
pub async fn call(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path((id, tool)): Path<(String, String)>,
    request: Request,
) -> Result<Json<ToolOutput>, AppError> {
    let Some(tool) = ToolName::parse(&tool).filter(|tool| !tool.requires_planning()) else {
        return Err(AppError::NotFound {
            code: ErrorCode::RouteNotFound,
            message: format!("no tool {tool:?} over HTTP"),
        });
    };
    // A tool with nothing to send ignores whatever body comes.
    let arguments = if !tool.takes_input() || sends_nothing(&request) {
        serde_json::Value::Null
    } else {
        let JsonBody(value) = JsonBody::<serde_json::Value>::from_request(request, &state).await?;
        value
    };
    let call = ToolCall::parse(tool.as_str(), arguments, false).map_err(|refusal| {
        AppError::bad_request(
            ErrorCode::InvalidBody,
            format!("the body does not fit this request: {}", refusal.message),
        )
    })?;
    let Ran { result, .. } = Tools::new(state.hub)
        .call(&account, &id, call, &account.name, None)
        .await;
    Ok(Json(result?))
}

/// A request with no body at all: what a tool without input is called
/// with.
fn sends_nothing(request: &Request) -> bool {
    let headers = request.headers();
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|length| length.to_str().ok())
        .and_then(|length| length.trim().parse::<u64>().ok());
    !headers.contains_key(CONTENT_TYPE)
        && !headers.contains_key(TRANSFER_ENCODING)
        && declared.unwrap_or(0) == 0
}
