//! The committed JSON Schemas in `docs/protocol/` match the wire types.
//! After changing a wire type, regenerate them with:
//!
//!     UPDATE_SCHEMAS=1 cargo test -p margin-protocol --test schemas

use std::path::PathBuf;

use margin_protocol::schema;

#[test]
fn committed_schemas_match_the_wire_types() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol");
    let update = std::env::var_os("UPDATE_SCHEMAS").is_some();
    let mut stale = Vec::new();
    for (name, schema) in schema::all() {
        let path = dir.join(format!("{name}.schema.json"));
        let generated = schema::committed_json(&schema).unwrap();
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &generated).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(generated.as_str()) {
            stale.push(name);
        }
    }
    assert!(
        stale.is_empty(),
        "docs/protocol/ is out of date for {stale:?}; regenerate with:\n    UPDATE_SCHEMAS=1 cargo test -p margin-protocol --test schemas"
    );
}

/// The tool catalogue a Planner shows its model: every tool's name,
/// description and the schemas of its input and output.
#[test]
fn committed_tool_catalogue_matches_the_tool_table() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol/tools.json");
    let generated = schema::committed_json(&margin_protocol::tools::catalogue()).unwrap();
    if std::env::var_os("UPDATE_SCHEMAS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    assert!(
        std::fs::read_to_string(&path).ok().as_deref() == Some(generated.as_str()),
        "docs/protocol/tools.json is out of date; regenerate with:\n    UPDATE_SCHEMAS=1 cargo test -p margin-protocol --test schemas"
    );
}

/// The link's and the sync socket's constants, for the TypeScript packages
/// to generate theirs from (`sdk/typescript/codegen.mjs`).
#[test]
fn committed_constants_match_the_protocol() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol/constants.json");
    let generated = schema::committed_json(&margin_protocol::constants::all()).unwrap();
    if std::env::var_os("UPDATE_SCHEMAS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    assert!(
        std::fs::read_to_string(&path).ok().as_deref() == Some(generated.as_str()),
        "docs/protocol/constants.json is out of date; regenerate with:\n    UPDATE_SCHEMAS=1 cargo test -p margin-protocol --test schemas"
    );
}

/// Every `pub const` of `link` and `sync` that a client reads is in the
/// table: a constant added there reaches the TypeScript packages, or is
/// named here as the server's own.
#[test]
fn every_constant_of_the_link_and_sync_is_in_the_table() {
    // Arrays the server checks messages against; no client reads them.
    let servers_own = ["CLIENT_MESSAGE_TYPES"];
    let table = margin_protocol::constants::all();
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut missing = Vec::new();
    for module in ["link", "sync"] {
        let text = std::fs::read_to_string(src.join(format!("{module}.rs"))).unwrap();
        let mut inner: Option<String> = None;
        for line in text.lines() {
            if let Some(name) = line
                .strip_prefix("pub mod ")
                .and_then(|l| l.strip_suffix(" {"))
            {
                inner = Some(name.to_owned());
                continue;
            }
            if line == "}" {
                inner = None;
            }
            let Some(rest) = line.trim_start().strip_prefix("pub const ") else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| *c == '_' || c.is_ascii_alphanumeric())
                .collect();
            if servers_own.contains(&name.as_str()) {
                continue;
            }
            let entry = match &inner {
                Some(group) => &table[module][group][&name],
                None => &table[module][&name],
            };
            if entry.is_null() {
                missing.push(format!(
                    "{module}::{}{name}",
                    inner.as_ref().map(|g| format!("{g}::")).unwrap_or_default()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "constants missing from constants::all(): {missing:?}"
    );
}
