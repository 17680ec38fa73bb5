//! The browser editor's built files, embedded so `margin serve` needs no
//! Node. Source: `server/web/`; output: `server/assets/` (committed), listed
//! at compile time by `server/build.rs` into [`table`].
//!
//! Caching follows the names: the page (`/`) is never stored, so a deploy
//! is picked up at once; every file it names carries its content hash, so
//! browsers may keep it for a year without asking again. Bodies are
//! precompressed by the build and chosen per request ([`negotiate`]).

mod negotiate;
mod table;

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_ENCODING, CONTENT_TYPE, ETAG, VARY};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use margin_protocol::ErrorCode;

use super::AppError;
use negotiate::Coding;
use table::Asset;

/// A content-hashed name never changes content.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// `/favicon.ico` keeps its name across builds: a day, then a revalidation
/// by its ETag.
const A_DAY: &str = "public, max-age=86400";

pub async fn index(request: HeaderMap) -> Response {
    send(&table::INDEX, &request, "no-store")
}

pub async fn asset(Path(file): Path<String>, request: HeaderMap) -> Result<Response, AppError> {
    let asset = table::hashed(&file).ok_or_else(|| not_found(&file))?;
    Ok(send(asset, &request, IMMUTABLE))
}

pub async fn favicon(request: HeaderMap) -> Result<Response, AppError> {
    let asset = table::favicon_ico().ok_or_else(|| not_found("favicon.ico"))?;
    Ok(send(asset, &request, A_DAY))
}

fn not_found(file: &str) -> AppError {
    AppError::NotFound {
        code: ErrorCode::AssetNotFound,
        message: format!("no asset {file:?}"),
    }
}

/// The asset as the request asks for it: a 304 when the browser's copy is
/// current, else the best encoding it accepts. axum answers HEAD from this
/// too, keeping the headers (and `Content-Length`) and dropping the body.
fn send(asset: &'static Asset, request: &HeaderMap, cache_control: &'static str) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(cache_control));
    if asset.br.is_some() || asset.gzip.is_some() {
        // Shared caches must key the body on the request's Accept-Encoding.
        headers.insert(VARY, HeaderValue::from_static("accept-encoding"));
    }
    if let Some(etag) = asset.etag {
        headers.insert(ETAG, HeaderValue::from_static(etag));
        if negotiate::copy_is_current(request, etag) {
            return (StatusCode::NOT_MODIFIED, headers).into_response();
        }
    }
    let offered: &[Coding] = match (asset.br, asset.gzip) {
        (Some(_), Some(_)) => &[Coding::Br, Coding::Gzip],
        (Some(_), None) => &[Coding::Br],
        (None, Some(_)) => &[Coding::Gzip],
        (None, None) => &[],
    };
    let (coding, body) = match negotiate::coding(request, offered) {
        Coding::Br => asset.br.map(|body| (Coding::Br, body)),
        Coding::Gzip => asset.gzip.map(|body| (Coding::Gzip, body)),
        Coding::Identity => None,
    }
    .unwrap_or((Coding::Identity, asset.identity));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    if let Some(token) = coding.token() {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(token));
    }
    (headers, body).into_response()
}
