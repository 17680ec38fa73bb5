//! Pairing and revoking machines, and the machine link upgrade (SPEC A1,
//! L1, P3).

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use margin_protocol::link::{
    MachineInfo, MachineList, PairMachine, PairedMachine, MAX_FRAME_BYTES,
};

use super::extract::{Caller, JsonBody};
use super::{AppError, AppState};
use crate::auth;
use crate::link::socket;
use crate::storage::{Machine, StorageError};

fn info(machine: &Machine) -> MachineInfo {
    MachineInfo {
        id: machine.id.clone(),
        name: machine.name.clone(),
        revoked: machine.revoked,
    }
}

pub async fn pair(
    State(state): State<AppState>,
    Caller(account): Caller,
    JsonBody(body): JsonBody<PairMachine>,
) -> Result<(StatusCode, Json<PairedMachine>), AppError> {
    auth::valid_machine_name(&body.name).map_err(|m| AppError::bad_request("invalid_name", m))?;
    let (machine, credential) = auth::pair_machine(state.hub.store(), &account, body.name.trim())
        .await
        .map_err(|e| AppError::Internal(e.to_string()))?;
    tracing::info!(machine = %machine.id, account = %account.name, "machine paired");
    Ok((
        StatusCode::CREATED,
        Json(PairedMachine {
            machine: info(&machine),
            credential,
        }),
    ))
}

pub async fn list(
    State(state): State<AppState>,
    Caller(account): Caller,
) -> Result<Json<MachineList>, AppError> {
    let machines = state.hub.store().machines_of(&account).await?;
    Ok(Json(MachineList {
        machines: machines.iter().map(info).collect(),
    }))
}

pub async fn revoke(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, AppError> {
    match state.hub.store().revoke_machine(&account, &id).await {
        Ok(()) => {}
        Err(StorageError::NotFound(_)) => {
            return Err(AppError::NotFound {
                code: "machine_not_found",
                message: format!("no machine {id:?} of yours"),
            })
        }
        Err(other) => return Err(other.into()),
    }
    state.links.revoke(&id);
    tracing::info!(machine = %id, account = %account.name, "machine revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /machine`: a machine's link, authenticated by its credential.
pub async fn link(
    State(state): State<AppState>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Result<Response, AppError> {
    let credential = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(AppError::Unauthenticated(
            "send the machine credential as 'Authorization: Bearer <credential>'",
        ))?;
    let machine = match auth::authenticate_machine(state.hub.store(), credential.trim()).await {
        Ok(machine) if machine.revoked => {
            return Err(AppError::Unauthenticated(
                "this machine's credential was revoked",
            ))
        }
        Ok(machine) => machine,
        Err(StorageError::NotFound(_)) => {
            return Err(AppError::Unauthenticated("unknown machine credential"))
        }
        Err(other) => return Err(other.into()),
    };
    let (links, planners) = (state.links.clone(), state.planners.clone());
    Ok(upgrade
        .max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |ws| socket::serve(ws, links, planners, machine)))
}
