//! The browser editor's built bundle, embedded so `margin serve` needs no
//! Node. Source: `server/web/`; output: `server/assets/` (committed).

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;

use super::AppError;

const INDEX_HTML: &[u8] = include_bytes!("../../assets/index.html");
const APP_JS: &[u8] = include_bytes!("../../assets/app.js");
const APP_CSS: &[u8] = include_bytes!("../../assets/app.css");

pub async fn index() -> impl IntoResponse {
    serve("text/html; charset=utf-8", INDEX_HTML)
}

pub async fn asset(Path(file): Path<String>) -> Result<impl IntoResponse, AppError> {
    match file.as_str() {
        "app.js" => Ok(serve("text/javascript; charset=utf-8", APP_JS)),
        "app.css" => Ok(serve("text/css; charset=utf-8", APP_CSS)),
        _ => Err(AppError::NotFound {
            code: "asset_not_found",
            message: format!("no asset {file:?}"),
        }),
    }
}

fn serve(content_type: &'static str, body: &'static [u8]) -> impl IntoResponse {
    (
        [(CONTENT_TYPE, content_type), (CACHE_CONTROL, "no-cache")],
        body,
    )
}
