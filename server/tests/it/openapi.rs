//! The OpenAPI 3.1 description (SPEC O1): the committed `docs/openapi.json`
//! is what the code describes, `/openapi.json` serves it, and it describes
//! exactly the routes the router serves — each described route answers
//! (is not "no such route"), and the router's source names no route the
//! description lacks. (`web-tests` validates the document against the
//! OpenAPI 3.1 schema with an independent validator.)

use std::collections::BTreeSet;
use std::path::PathBuf;

use margin_protocol::tools::ToolName;
use margin_server::http::openapi::{describe, routes};

use crate::harness::Server;
use crate::on_both_backends;

fn generated() -> String {
    margin_protocol::schema::committed_json(&describe()).unwrap()
}

#[test]
fn the_committed_openapi_description_matches_the_code() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    if std::env::var_os("UPDATE_SCHEMAS").is_some() {
        std::fs::write(&path, generated()).unwrap();
    }
    assert!(
        std::fs::read_to_string(&path).ok().as_deref() == Some(generated().as_str()),
        "docs/openapi.json is out of date; regenerate with:\n    UPDATE_SCHEMAS=1 cargo nextest run -p margin-server -E 'test(/openapi/)'"
    );
}

/// `(method, path)` of every `.route(...)` in the router's source.
fn routed() -> BTreeSet<(String, String)> {
    let source =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/http/mod.rs"))
            .unwrap();
    let mut found = BTreeSet::new();
    for call in source.split(".route(").skip(1) {
        let call: String = call.split_whitespace().collect::<Vec<_>>().join("");
        let path = call.split('"').nth(1).unwrap().to_owned();
        let handlers = &call[call.find(',').unwrap() + 1..];
        // One route serves every document tool of the protocol's table.
        let paths: Vec<String> = if path.contains("{tool}") {
            ToolName::ALL
                .iter()
                .filter(|tool| !tool.requires_planning())
                .map(|tool| path.replace("{tool}", tool.as_str()))
                .collect()
        } else {
            vec![path]
        };
        for method in ["get", "post", "patch", "put", "delete"] {
            // `get(x)` at the start, or chained as `.get(x)`.
            if handlers.starts_with(&format!("{method}("))
                || handlers.contains(&format!(").{method}("))
            {
                for path in &paths {
                    found.insert((method.to_owned(), path.clone()));
                }
            }
        }
    }
    found
}

#[test]
fn the_description_names_every_route_the_router_serves_and_no_other() {
    let described: BTreeSet<(String, String)> = routes()
        .iter()
        .map(|r| (r.method.to_owned(), r.path.to_owned()))
        .collect();
    let routed = routed();
    assert!(
        routed.len() > 40,
        "the router's source was read: {routed:?}"
    );
    let undocumented: Vec<_> = routed.difference(&described).collect();
    let unrouted: Vec<_> = described.difference(&routed).collect();
    assert!(
        undocumented.is_empty(),
        "routes with no description: {undocumented:?}"
    );
    assert!(
        unrouted.is_empty(),
        "described routes the router does not serve: {unrouted:?}"
    );
}

on_both_backends! {
    async fn every_described_route_answers_and_openapi_json_is_the_committed_file(db) {
        let server = Server::start(&db).await;
        let ada = Server::account(&db, "ada").await;
        let client = reqwest::Client::new();
        for route in routes() {
            let path = route.path.replace("{id}", "x").replace("{sid}", "x").replace("{card}", "x")
                .replace("{account}", "x").replace("{file}", "x");
            let method = reqwest::Method::from_bytes(route.method.to_uppercase().as_bytes()).unwrap();
            let response = client.request(method, server.url(&path)).bearer_auth(&ada).send().await.unwrap();
            let status = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            assert!(status != 405, "{} {path} is not routed for its method", route.method);
            let code = serde_json::from_str::<serde_json::Value>(&body).ok().and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
            assert_ne!(code.as_deref(), Some("route_not_found"), "{} {path} answered no such route", route.method);
        }
        let served = reqwest::get(server.url("/openapi.json")).await.unwrap();
        assert_eq!(served.headers()["content-type"], "application/json");
        assert_eq!(served.text().await.unwrap(), generated());
    }
}
