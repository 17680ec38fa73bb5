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
        let generated = serde_json::to_string_pretty(&schema).unwrap() + "\n";
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
    let generated =
        serde_json::to_string_pretty(&margin_protocol::tools::catalogue()).unwrap() + "\n";
    if std::env::var_os("UPDATE_SCHEMAS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    assert!(
        std::fs::read_to_string(&path).ok().as_deref() == Some(generated.as_str()),
        "docs/protocol/tools.json is out of date; regenerate with:\n    UPDATE_SCHEMAS=1 cargo test -p margin-protocol --test schemas"
    );
}
