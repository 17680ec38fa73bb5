//! The editor's embedded files: the page is never cached and names only
//! content-hashed files, which are cached for a year and come brotli- or
//! gzip-compressed as the browser asks; `/favicon.ico` is an icon.

use std::io::Read;

use pretty_assertions::assert_eq;
use reqwest::header::HeaderMap;

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
async fn the_page_is_never_cached_and_names_only_hashed_files_the_server_serves() {
    let db = TestDb::sqlite();
    let server = Server::start(&db).await;
    let page = reqwest::get(server.url("/")).await.unwrap();
    assert_eq!(
        (
            page.status().as_u16(),
            header(page.headers(), "content-type"),
            header(page.headers(), "cache-control"),
        ),
        (200, Some("text/html; charset=utf-8"), Some("no-store"))
    );
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

/// The page's references, fetched from a fresh server.
async fn page_references(server: &Server) -> Vec<String> {
    let page = reqwest::get(server.url("/")).await.unwrap();
    references(&page.text().await.unwrap())
}

/// GET (or HEAD) `path` with these request headers.
async fn fetch(
    method: reqwest::Method,
    server: &Server,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, HeaderMap, Vec<u8>) {
    let mut request = reqwest::Client::new().request(method, server.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.bytes().await.unwrap().to_vec())
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

fn decode(encoding: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match encoding {
        None => out.extend_from_slice(body),
        Some("gzip") => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("br") => {
            brotli_decompressor::Decompressor::new(body, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some(other) => panic!("unexpected content-encoding {other}"),
    }
    out
}

#[tokio::test]
async fn each_hashed_file_comes_as_brotli_then_gzip_then_identity_as_asked() {
    let db = TestDb::sqlite();
    let server = Server::start(&db).await;
    let asked = [
        None,
        Some("br, gzip"),
        Some("gzip, deflate, br, zstd"),
        Some("gzip"),
        Some("GZIP;Q=0.5, identity;q=0.1"),
        Some("br;q=0, gzip;q=0"),
        Some("gzip;q=1, br;q=0.5"),
        Some("*"),
        Some("br;q=0, *"),
        Some("*;q=0, identity"),
        Some("identity"),
        Some(""),
        Some("br;q=x, gzip;q=0.001"),
    ];
    for path in page_references(&server).await {
        let (_, plain_headers, identity) = fetch(reqwest::Method::GET, &server, &path, &[]).await;
        let mut seen = Vec::new();
        for accept in asked {
            let headers: Vec<(&str, &str)> =
                accept.map(|a| ("accept-encoding", a)).into_iter().collect();
            let (status, got, body) = fetch(reqwest::Method::GET, &server, &path, &headers).await;
            let encoding = header(&got, "content-encoding");
            seen.push((
                accept,
                status,
                encoding.map(str::to_owned),
                header(&got, "vary").map(str::to_owned),
                header(&got, "content-type") == header(&plain_headers, "content-type"),
                header(&got, "content-length") == Some(body.len().to_string().as_str()),
                decode(encoding, &body) == identity,
            ));
        }
        let want = |accept, encoding: Option<&str>| {
            (
                accept,
                200,
                encoding.map(str::to_owned),
                Some("accept-encoding".to_owned()),
                true,
                true,
                true,
            )
        };
        assert_eq!(
            seen,
            vec![
                want(None, None),
                want(Some("br, gzip"), Some("br")),
                want(Some("gzip, deflate, br, zstd"), Some("br")),
                want(Some("gzip"), Some("gzip")),
                want(Some("GZIP;Q=0.5, identity;q=0.1"), Some("gzip")),
                want(Some("br;q=0, gzip;q=0"), None),
                want(Some("gzip;q=1, br;q=0.5"), Some("gzip")),
                want(Some("*"), Some("br")),
                want(Some("br;q=0, *"), Some("gzip")),
                want(Some("*;q=0, identity"), None),
                want(Some("identity"), None),
                want(Some(""), None),
                want(Some("br;q=x, gzip;q=0.001"), Some("gzip")),
            ],
            "{path}"
        );
    }
}

#[tokio::test]
async fn hashed_files_are_immutable_for_a_year_and_revalidate_by_their_hash() {
    let db = TestDb::sqlite();
    let server = Server::start(&db).await;
    for path in page_references(&server).await {
        let hash = path.split('.').nth(1).unwrap().to_owned();
        let (status, got, _) = fetch(reqwest::Method::GET, &server, &path, &[]).await;
        let etag = format!("W/\"{hash}\"");
        assert_eq!(
            (status, header(&got, "cache-control"), header(&got, "etag")),
            (
                200,
                Some("public, max-age=31536000, immutable"),
                Some(etag.as_str())
            ),
            "{path}"
        );
        for if_none_match in [
            etag.clone(),
            format!("\"{hash}\""),
            format!("\"other\", {etag}"),
            "*".into(),
        ] {
            let (status, got, body) = fetch(
                reqwest::Method::GET,
                &server,
                &path,
                &[("if-none-match", &if_none_match), ("accept-encoding", "br")],
            )
            .await;
            assert_eq!(
                (
                    status,
                    header(&got, "etag"),
                    header(&got, "cache-control"),
                    header(&got, "vary"),
                    body.len()
                ),
                (
                    304,
                    Some(etag.as_str()),
                    Some("public, max-age=31536000, immutable"),
                    Some("accept-encoding"),
                    0
                ),
                "{path} If-None-Match: {if_none_match}"
            );
        }
        let (status, _, _) = fetch(
            reqwest::Method::GET,
            &server,
            &path,
            &[("if-none-match", "\"other\"")],
        )
        .await;
        assert_eq!(status, 200, "{path}");
    }
}

#[tokio::test]
async fn head_answers_as_get_without_a_body() {
    let db = TestDb::sqlite();
    let server = Server::start(&db).await;
    let js = page_references(&server)
        .await
        .into_iter()
        .find(|r| r.ends_with(".js"))
        .unwrap();
    let br = [("accept-encoding", "br, gzip")];
    let (_, got, body) = fetch(reqwest::Method::GET, &server, &js, &br).await;
    let (status, head, head_body) = fetch(reqwest::Method::HEAD, &server, &js, &br).await;
    assert_eq!(
        (
            status,
            header(&head, "content-encoding"),
            header(&head, "content-length"),
            head_body.len()
        ),
        (200, Some("br"), Some(body.len().to_string().as_str()), 0)
    );
    assert_eq!(header(&got, "etag"), header(&head, "etag"));
}

#[tokio::test]
async fn favicon_ico_is_an_icon_cached_for_a_day() {
    let db = TestDb::sqlite();
    let server = Server::start(&db).await;
    let (status, got, body) = fetch(reqwest::Method::GET, &server, "/favicon.ico", &[]).await;
    assert_eq!(
        (
            status,
            header(&got, "content-type"),
            header(&got, "cache-control")
        ),
        (200, Some("image/x-icon"), Some("public, max-age=86400"))
    );
    // An ICO directory of one image, which is a PNG.
    assert_eq!(body.get(..6), Some(&[0, 0, 1, 0, 1, 0][..]));
    assert_eq!(body.get(22..30), Some(&b"\x89PNG\r\n\x1a\n"[..]));
    let etag = header(&got, "etag").unwrap().to_owned();
    let (status, _, _) = fetch(
        reqwest::Method::GET,
        &server,
        "/favicon.ico",
        &[("if-none-match", &etag)],
    )
    .await;
    assert_eq!(status, 304);
}

#[tokio::test]
async fn precompressed_siblings_are_not_addressable() {
    let db = TestDb::sqlite();
    let server = Server::start(&db).await;
    for path in page_references(&server).await {
        for suffix in [".br", ".gz"] {
            let (status, body) = server.get(None, &format!("{path}{suffix}")).await;
            assert_eq!(
                (status, body["error"]["code"].as_str()),
                (404, Some("asset_not_found")),
                "{path}{suffix}"
            );
        }
    }
}
