//! The browser editor's built files, embedded so `margin serve` needs no
//! Node. Source: `server/web/`; output: `server/assets/` (committed), listed
//! at compile time by `server/build.rs` into [`table`].

mod table;

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;

use super::AppError;
use table::Asset;

pub async fn index() -> impl IntoResponse {
    serve(&table::INDEX)
}

pub async fn asset(Path(file): Path<String>) -> Result<impl IntoResponse, AppError> {
    let asset = table::hashed(&file).ok_or_else(|| AppError::NotFound {
        code: "asset_not_found",
        message: format!("no asset {file:?}"),
    })?;
    Ok(serve(asset))
}

fn serve(asset: &'static Asset) -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, asset.content_type),
            (CACHE_CONTROL, "no-cache"),
        ],
        asset.identity,
    )
}
