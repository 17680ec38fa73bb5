//! Pairing, revoking and unpairing machines, and the machine link upgrade
//! (SPEC A1, L1, L8, P3).

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use margin_protocol::link::{
    MachineInfo, MachineList, PairMachine, PairedMachine, MAX_FRAME_BYTES,
};
use margin_protocol::ErrorCode;

use margin_planner::ReleaseTrigger;

use super::extract::{Caller, JsonBody};
use super::throttle::ClientAddress;
use super::{AppError, AppState};
use crate::auth::{self, MachineRefusal};
use crate::machine::socket;
use crate::sockets;
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
    auth::valid_machine_name(&body.name)
        .map_err(|m| AppError::bad_request(ErrorCode::InvalidName, m))?;
    let ttl = state.links.settings().credential_ttl;
    let (machine, credential) =
        auth::pair_machine(state.hub.store(), &account, body.name.trim(), ttl)
            .await
            .map_err(|e| AppError::Internal(e.to_string()))?;
    tracing::info!(machine = %machine.id, account = %account.name, expires_at = credential.expires_at, "machine paired");
    Ok((
        StatusCode::CREATED,
        Json(PairedMachine {
            machine: info(&machine),
            credential: credential.secret,
            expires_at: credential.expires_at,
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
                code: ErrorCode::MachineNotFound,
                message: format!("no machine {id:?} of yours"),
            })
        }
        Err(other) => return Err(other.into()),
    }
    state
        .sessions
        .end_machine(&id, ReleaseTrigger::MachineRevoked)
        .await?;
    tracing::info!(machine = %id, account = %account.name, "machine revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /machine`: the machine unpairs itself, with its own credential:
/// none of its credentials opens a link again, and its sessions end (SPEC
/// P3).
pub async fn unpair(
    State(state): State<AppState>,
    client: ClientAddress,
    headers: HeaderMap,
) -> Result<StatusCode, AppError> {
    let machine = authenticated(&state, client, &headers).await?;
    match state
        .hub
        .store()
        .revoke_machine(&machine.account, &machine.id)
        .await
    {
        // Revoked meanwhile by its owner: unpaired all the same.
        Ok(()) | Err(StorageError::NotFound(_)) => {}
        Err(other) => return Err(other.into()),
    }
    state
        .sessions
        .end_machine(&machine.id, ReleaseTrigger::MachineUnpaired)
        .await?;
    tracing::info!(machine = %machine.id, account = %machine.account.name, "machine unpaired");
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /machine`: a machine's link, authenticated by its credential. A
/// refused credential is a 401 naming the cause (SPEC L8): `unauthenticated`
/// (unknown), `machine_revoked` or `credential_expired`.
pub async fn link(
    State(state): State<AppState>,
    client: ClientAddress,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Result<Response, AppError> {
    let machine = authenticated(&state, client, &headers).await?;
    let (links, sessions) = (state.links.clone(), state.sessions.clone());
    let store = state.hub.store().clone();
    let cluster = state.hub.cluster().cloned();
    Ok(
        sockets::serving_peers(upgrade, MAX_FRAME_BYTES).on_upgrade(move |ws| {
            socket::serve(Box::new(ws), links, sessions, store, machine, cluster)
        }),
    )
}

/// The machine a request's credential names, or the 401 naming why not.
async fn authenticated(
    state: &AppState,
    client: ClientAddress,
    headers: &HeaderMap,
) -> Result<Machine, AppError> {
    let credential = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(AppError::Unauthenticated(
            "send the machine credential as 'Authorization: Bearer <credential>'",
        ))?;
    let ttl = state.links.settings().credential_ttl;
    let credential = credential.trim();
    let signing_in = async {
        auth::authenticate_machine(state.hub.store(), credential, ttl)
            .await
            .map_err(|refusal| refused_link(refusal, ttl))
    };
    state.throttle.sign_in(client, credential, signing_in).await
}

/// The 401 for a credential that opens no link, naming the cause.
fn refused_link(refusal: MachineRefusal, ttl: std::time::Duration) -> AppError {
    match refusal {
        MachineRefusal::Unknown => AppError::Unauthenticated(
            "unknown machine credential (never issued, or expired long ago); pair the machine again",
        ),
        MachineRefusal::Revoked { name } => {
            tracing::info!(machine = %name, "link refused: the machine was revoked");
            AppError::CredentialRefused {
                code: ErrorCode::MachineRevoked,
                message: format!(
                    "machine {name:?} was revoked, so none of its credentials opens a link; pair it again"
                ),
            }
        }
        MachineRefusal::Expired { expired_at, now } => {
            tracing::info!(expired_at, "link refused: the machine credential expired");
            AppError::CredentialRefused {
                code: ErrorCode::CredentialExpired,
                message: format!(
                    "this machine credential expired {}; credentials last {} and a linked machine is sent fresh ones, so connect with the newest it was sent, or pair the machine again",
                    auth::ago(expired_at, now),
                    auth::describe(ttl)
                ),
            }
        }
        MachineRefusal::Storage(error) => error.into(),
    }
}
