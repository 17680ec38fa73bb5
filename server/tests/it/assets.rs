//! The editor's embedded files (issue #14): the page names only
//! content-hashed files, each of which the server serves.

use pretty_assertions::assert_eq;

use crate::harness::{Server, TestDb};

/// The `/assets/…` paths the page refers to, in order.
fn references(page: &str) -> Vec<String> {
    page.split("\"/assets/")
        .skip(1)
        .filter_map(|rest| rest.split_once('"'))
        .map(|(file, _)| format!("/assets/{file}"))
        .collect()
}

/// Whether `path` is `/assets/STEM.HASH.EXT` with a 10-hex content hash.
fn is_hashed(path: &str) -> bool {
    let Some(file) = path.strip_prefix("/assets/") else {
        return false;
    };
    let parts: Vec<&str> = file.split('.').collect();
    matches!(parts.as_slice(), [stem, hash, ext]
        if !stem.is_empty()
            && hash.len() == 10
            && hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            && !ext.is_empty())
}

#[tokio::test]
async fn the_page_names_only_hashed_files_and_the_server_serves_each() {
    let db = TestDb::sqlite();
    let server = Server::start(&db).await;
    let page = reqwest::get(server.url("/")).await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let refs = references(&page.text().await.unwrap());
    let kinds: Vec<(&str, bool)> = refs
        .iter()
        .map(|r| (r.rsplit('.').next().unwrap_or(""), is_hashed(r)))
        .collect();
    assert_eq!(
        kinds,
        vec![("svg", true), ("css", true), ("js", true)],
        "{refs:?}"
    );
    let mut served = Vec::new();
    for r in &refs {
        let asset = reqwest::get(server.url(r)).await.unwrap();
        let content_type = asset.headers()["content-type"].to_str().unwrap().to_owned();
        served.push((asset.status().as_u16(), content_type));
    }
    assert_eq!(
        served,
        vec![
            (200, "image/svg+xml".to_owned()),
            (200, "text/css; charset=utf-8".to_owned()),
            (200, "text/javascript; charset=utf-8".to_owned()),
        ]
    );
}

#[tokio::test]
async fn unknown_asset_names_are_404_asset_not_found() {
    let db = TestDb::sqlite();
    let server = Server::start(&db).await;
    let mut answers = Vec::new();
    // Nor are the unhashed names of earlier builds, the page itself, or a
    // path out of the directory.
    for path in [
        "/assets/app.js",
        "/assets/app.css",
        "/assets/index.html",
        "/assets/secret.txt",
        "/assets/..%2Fbuild.rs",
    ] {
        let (status, body) = server.get(None, path).await;
        answers.push((path, status, body["error"]["code"].clone()));
    }
    let code = serde_json::json!("asset_not_found");
    assert_eq!(
        answers,
        vec![
            ("/assets/app.js", 404, code.clone()),
            ("/assets/app.css", 404, code.clone()),
            ("/assets/index.html", 404, code.clone()),
            ("/assets/secret.txt", 404, code.clone()),
            ("/assets/..%2Fbuild.rs", 404, code),
        ]
    );
}
