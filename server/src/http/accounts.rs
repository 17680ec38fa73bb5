//! The signed-in account: who it is, and signing out (SPEC P3).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use margin_planner::ReleaseTrigger;
use margin_protocol::Me;

use super::extract::{Caller, SignedIn};
use super::{AppError, AppState};
use crate::cluster::Whose;

/// `GET /me`: the account the token names.
pub async fn me(Caller(account): Caller) -> Json<Me> {
    Json(Me {
        account: account.name,
    })
}

/// `POST /me/sign-out`: every Planner session of the account's machines
/// ends (SPEC P3), then the token of the call signs nobody in any more.
/// Other tokens of the account stay signed in.
pub async fn sign_out(
    State(state): State<AppState>,
    signed: SignedIn,
) -> Result<StatusCode, AppError> {
    let account = &signed.account;
    state
        .sessions
        .machines_ended(Whose::Account(&account.id), ReleaseTrigger::SignOut)
        .await?;
    if let Some(cluster) = state.hub.cluster() {
        cluster
            .machines_ended(Whose::Account(&account.id), ReleaseTrigger::SignOut)
            .await;
    }
    crate::auth::sign_out(state.hub.store(), &signed.token).await?;
    tracing::info!(account = %account.name, "signed out");
    Ok(StatusCode::NO_CONTENT)
}
