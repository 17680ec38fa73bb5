//! The server's top-level modules import each other without a circle, so
//! each can be read, changed and tested above the ones it uses
//! (docs/architecture.md, *Code map*). Read from `server/src` as text:
//! every `crate::module` a module names, in paths and in `use` groups.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of `server/src` and the files that make it.
fn modules() -> BTreeMap<String, Vec<PathBuf>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(&src).expect("server/src") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 name")
            .to_owned();
        if name == "main" || name == "lib" {
            continue;
        }
        let files = if path.is_dir() {
            rust_files(&path)
        } else if path.extension().is_some_and(|e| e == "rs") {
            vec![path]
        } else {
            continue;
        };
        modules.insert(name, files);
    }
    modules
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a module folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The code of `text` without its comments (a line's `//` onwards).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segment of each item of a `use` group whose `{` is at
/// the start of `group`.
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item = String::new();
    for c in group.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    heads.push(std::mem::take(&mut item));
                    break;
                }
            }
            ',' if depth == 1 => {
                heads.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        if depth >= 1 {
            item.push(c);
        }
    }
    heads
        .iter()
        .map(|item| {
            item.trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .filter(|head: &String| !head.is_empty())
        .collect()
}

/// The top-level modules `text` names through `crate::`.
fn named(text: &str) -> BTreeSet<String> {
    let code = code(text);
    let mut named = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if rest.starts_with('{') {
            named.extend(group_heads(rest));
        } else {
            let head: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            named.insert(head);
        }
    }
    named
}

/// Which top-level modules each one imports.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules();
    modules
        .iter()
        .map(|(name, files)| {
            let mut uses = BTreeSet::new();
            for file in files {
                let text = std::fs::read_to_string(file).expect("a source file");
                uses.extend(named(&text));
            }
            uses.retain(|used| used != name && modules.contains_key(used));
            (name.clone(), uses)
        })
        .collect()
}

/// A circle of imports, if there is one, as the modules along it.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(circle) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(circle);
        }
    }
    None
}

#[test]
fn the_reader_finds_what_a_use_group_names() {
    let text = "use crate::{a::b, c, d::{e, f}};\n// crate::g\nlet x = crate::h::i();";
    let named: Vec<String> = named(text).into_iter().collect();
    assert_eq!(named, ["a", "c", "d", "h"]);
    let graph = BTreeMap::from([
        ("x".to_owned(), BTreeSet::from(["y".to_owned()])),
        ("y".to_owned(), BTreeSet::from(["x".to_owned()])),
    ]);
    assert_eq!(
        circle(&graph),
        Some(vec!["x".into(), "y".into(), "x".into()])
    );
}

#[test]
fn the_servers_modules_import_each_other_without_a_circle() {
    let graph = imports();
    assert!(graph.contains_key("sync") && graph.contains_key("sessions"));
    if let Some(circle) = circle(&graph) {
        panic!(
            "the modules import each other in a circle: {}",
            circle.join(" → ")
        );
    }
}

#[test]
fn sync_knows_nothing_of_tools_sessions_or_machines() {
    let graph = imports();
    let sync = &graph["sync"];
    for above in [
        "tools", "sessions", "machine", "http", "demo", "cli", "serve",
    ] {
        assert!(!sync.contains(above), "sync imports {above}");
    }
}
