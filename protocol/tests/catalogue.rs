//! `docs/behaviours.md` is Margin's catalogue of behaviours: one entry per
//! behaviour ID (a `### ID …` heading under its letter's `## X — …`
//! group), each naming the tests that pin it.
//! These tests keep it true to the code:
//!
//! - every ID the code cites (`SPEC` followed by a list such as `W1`,
//!   `L2, L4`, `D6–D9` or a bare letter, in `*.rs`, `*.ts`, `*.mjs` and
//!   `*.py` files outside `target`, `node_modules` and hidden folders) has
//!   an entry, or a group for a bare letter;
//! - every test the catalogue names exists: a Rust test
//!   `` `path/file.rs::name` `` (or `` `path/file.rs::tests::name` `` for a
//!   unit test) is a test function of that file, and a web test
//!   `` `web-tests/tests/file.test.mjs`: "title" `` is a test of that file
//!   with that title, and a Python test `` `path/test_file.py::name` `` is
//!   a `def name(` (or `async def`) of that file;
//! - every entry names a test that pins it, and no ID has two.
//!
//! Each failure prints what is missing and where it was cited or named.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The catalogue, relative to the workspace root.
const CATALOGUE: &str = "docs/behaviours.md";

/// The letters behaviour IDs start with, in the catalogue's order.
const GROUPS: &str = "SDPTLUEWCRABO";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the protocol crate sits in the workspace root")
        .to_path_buf()
}

fn catalogue() -> String {
    let path = root().join(CATALOGUE);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// One `### ID …` entry: its ID, the line its heading is on, its text.
struct Entry {
    id: String,
    line: usize,
    text: String,
}

/// The catalogue's entries, in order.
fn entries(catalogue: &str) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    let mut current: Option<Entry> = None;
    for (number, line) in catalogue.lines().enumerate() {
        if line.starts_with('#') {
            entries.extend(current.take());
            if let Some(heading) = line.strip_prefix("### ") {
                let id: String = heading
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect();
                if is_id(&id) {
                    current = Some(Entry {
                        id,
                        line: number + 1,
                        text: String::new(),
                    });
                }
            }
        } else if let Some(entry) = &mut current {
            entry.text.push_str(line);
            entry.text.push('\n');
        }
    }
    entries.extend(current);
    entries
}

/// The letters with a `## X — …` group in the catalogue.
fn groups(catalogue: &str) -> BTreeSet<char> {
    catalogue
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .filter_map(|heading| {
            let letter = heading.chars().next()?;
            (GROUPS.contains(letter) && heading[1..].starts_with(" — ")).then_some(letter)
        })
        .collect()
}

/// Whether `text` is one behaviour ID (`S1`, `D10`, `S4a`), as [`id_at`]
/// reads one.
fn is_id(text: &str) -> bool {
    id_at(text).is_some_and(|(id, length)| length == text.len() && id.len() > 1)
}

/// What the code cites: an ID, or a bare group letter.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Cite {
    Id(String),
    Group(char),
}

/// The source files cites are looked for in: `*.rs`, `*.ts`, `*.mjs` and `*.py`
/// under `dir`, outside hidden folders, `target` and `node_modules` (this
/// file aside: its samples are not cites).
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(listing) = fs::read_dir(dir) else {
        return;
    };
    for item in listing.flatten() {
        let name = item.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = item.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if !(name.starts_with('.') || name == "target" || name == "node_modules") {
                sources(&item.path(), found);
            }
        } else if kind.is_file()
            && [".rs", ".ts", ".mjs", ".py"]
                .iter()
                .any(|ext| name.ends_with(ext))
            && !item.path().ends_with(file!())
        {
            found.push(item.path());
        }
    }
}

/// The text after a `SPEC` at `at`, with each line break and the comment
/// marker after it (`//!`, `///`, `//`, `*`) read as one space, so a cite
/// wrapped onto the next comment line reads whole.
fn after_spec(text: &str, at: usize) -> String {
    let mut out = String::new();
    let mut rest = &text[at..];
    while out.len() < 160 {
        let Some(c) = rest.chars().next() else { break };
        rest = &rest[c.len_utf8()..];
        if c == '\n' {
            rest = rest.trim_start();
            for marker in ["//!", "///", "//", "* ", "*\n"] {
                if let Some(after) = rest.strip_prefix(marker) {
                    rest = after;
                    break;
                }
            }
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The behaviour ID or bare group letter at the start of `text`, and its
/// length: a letter, digits, at most one lowercase letter, then no more
/// letters or digits.
fn id_at(text: &str) -> Option<(String, usize)> {
    text.chars().next().filter(|c| GROUPS.contains(*c))?;
    let digits = text[1..].chars().take_while(char::is_ascii_digit).count();
    let mut end = 1 + digits;
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut tail = text[end..].chars();
    if let (true, Some(s), next) = (digits > 0, tail.next(), tail.next()) {
        if s.is_ascii_lowercase() && !next.is_some_and(word) {
            end += 1;
        }
    }
    if text[end..].chars().next().is_some_and(word) {
        return None;
    }
    Some((text[..end].to_string(), end))
}

/// One item of a cite list at the start of `text` — `W1`, `S4a`, `D6–D9`,
/// `C1-C3` or a bare letter — as the cites it stands for, and the rest.
fn cite_item(text: &str) -> Option<(Vec<Cite>, &str)> {
    let (first, end) = id_at(text)?;
    let mut rest = &text[end..];
    if first.len() == 1 {
        return Some((vec![Cite::Group(first.chars().next()?)], rest));
    }
    let mut ids = vec![first.clone()];
    if let Some(after) = rest.strip_prefix('–').or_else(|| rest.strip_prefix('-')) {
        if let Some((last, length)) = id_at(after).filter(|(id, _)| id.len() > 1) {
            rest = &after[length..];
            let number = |id: &str| id[1..].parse::<u32>().ok();
            ids = match (number(&first), number(&last)) {
                (Some(from), Some(to)) if first[..1] == last[..1] && from < to => {
                    (from..=to).map(|n| format!("{}{n}", &first[..1])).collect()
                }
                _ => vec![first, last],
            };
        }
    }
    Some((ids.into_iter().map(Cite::Id).collect(), rest))
}

/// Every cite in `text`, with the line it starts on.
fn cites_in(text: &str) -> Vec<(Cite, usize)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("SPEC") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let line = text[..at].matches('\n').count() + 1;
        let after = after_spec(text, at + "SPEC".len());
        let Some(mut rest) = after.strip_prefix(' ') else {
            continue;
        };
        while let Some((cites, next)) = cite_item(rest.trim_start()) {
            found.extend(cites.into_iter().map(|cite| (cite, line)));
            match next.trim_start().strip_prefix(',') {
                Some(more) => rest = more,
                None => break,
            }
        }
    }
    found
}

/// The test functions of a Rust file: those under `#[test]` or
/// `#[tokio::test…]`, and those declared inside the integration suite's
/// `on_both_backends!` / `on_postgres!` blocks (`async fn name(db) {…}`).
fn rust_tests(source: &str) -> BTreeSet<String> {
    let mut tests = BTreeSet::new();
    let mut attributed = false;
    for line in source.lines().map(str::trim) {
        if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
            attributed = true;
            continue;
        }
        if line.starts_with("#[") || line.starts_with("//") {
            continue;
        }
        let signature = line.strip_prefix("pub ").unwrap_or(line);
        let is_async = signature.starts_with("async ");
        let signature = signature.strip_prefix("async ").unwrap_or(signature);
        if let Some(after) = signature.strip_prefix("fn ") {
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let params = after[name.len()..]
                .strip_prefix('(')
                .and_then(|p| p.split_once(')'))
                .map(|(p, _)| p.trim());
            let macro_form = is_async
                && params.is_some_and(|p| {
                    !p.is_empty()
                        && p != "self"
                        && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                });
            if attributed || macro_form {
                tests.insert(name);
            }
        }
        attributed = false;
    }
    tests
}

/// The titles of a web test file's tests: the string literal each
/// `test(…)`, `serverTest(…)`, `clusterTest(…)` call opens with.
fn web_tests(source: &str) -> BTreeSet<String> {
    let mut titles = BTreeSet::new();
    for (at, _) in source.match_indices("est(") {
        let before = &source[..at + 3];
        let name: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if !(name == "test" || name.ends_with("Test")) {
            continue;
        }
        let args = source[at + 4..].trim_start();
        let Some(quote) = args.chars().next().filter(|q| "'\"`".contains(*q)) else {
            continue;
        };
        let mut title = String::new();
        let mut chars = args[1..].chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => title.extend(chars.next()),
                c if c == quote => {
                    titles.insert(title);
                    break;
                }
                c => title.push(c),
            }
        }
    }
    titles
}

/// A test the catalogue names, with the line it is named on.
#[derive(Debug)]
enum Named {
    /// `path/file.rs::tests::name`: the file, its module path, the name.
    Rust {
        file: String,
        modules: Vec<String>,
        name: String,
    },
    /// `web-tests/tests/file.test.mjs`: "title".
    Web { file: String, title: String },
    /// `path/test_file.py::name` (or `::Class::name`): the file, the name.
    Python { file: String, name: String },
}

/// Every test the catalogue names, anywhere in it, with its line.
fn named_tests(catalogue: &str) -> Vec<(Named, usize)> {
    let mut found = Vec::new();
    for (number, line) in catalogue.lines().enumerate() {
        // Odd pieces are inside backticks; each is followed by the text
        // after its closing backtick (an unclosed last one is skipped).
        let pieces: Vec<&str> = line.split('`').collect();
        for at in (1..pieces.len().saturating_sub(1)).step_by(2) {
            let (span, after) = (pieces[at], pieces[at + 1]);
            if let Some((file, path)) = span.split_once(".rs::") {
                let mut modules: Vec<String> = path.split("::").map(str::to_string).collect();
                let name = modules.pop().unwrap_or_default();
                let file = format!("{file}.rs");
                found.push((
                    Named::Rust {
                        file,
                        modules,
                        name,
                    },
                    number + 1,
                ));
            } else if let Some((file, path)) = span.split_once(".py::") {
                let name = path.rsplit("::").next().unwrap_or_default().to_string();
                let file = format!("{file}.py");
                found.push((Named::Python { file, name }, number + 1));
            } else if span.starts_with("web-tests/tests/") && span.ends_with(".mjs") {
                let title = after.strip_prefix(": \"").and_then(|t| t.split_once('"'));
                if let Some((title, _)) = title {
                    let (file, title) = (span.to_string(), title.to_string());
                    found.push((Named::Web { file, title }, number + 1));
                }
            }
        }
    }
    found
}

#[test]
fn every_behaviour_the_code_cites_has_an_entry_in_the_catalogue() {
    let catalogue = catalogue();
    let ids: BTreeSet<String> = entries(&catalogue).into_iter().map(|e| e.id).collect();
    let groups = groups(&catalogue);
    let root = root();
    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    let mut cited: BTreeMap<Cite, Vec<String>> = BTreeMap::new();
    for file in &files {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for (cite, line) in cites_in(&text) {
            cited
                .entry(cite)
                .or_default()
                .push(format!("{shown}:{line}"));
        }
    }
    assert!(
        cited.len() > 40,
        "only {} behaviours are cited in {} files: is the walk from {} finding the code?",
        cited.len(),
        files.len(),
        root.display()
    );
    let missing: Vec<String> = cited
        .iter()
        .filter(|(cite, _)| match cite {
            Cite::Id(id) => !ids.contains(id),
            Cite::Group(letter) => !groups.contains(letter),
        })
        .map(|(cite, at)| {
            let what = match cite {
                Cite::Id(id) => format!("{id} has no `### {id}` entry"),
                Cite::Group(letter) => format!("group {letter} has no `## {letter} — …` section"),
            };
            format!("  {what}; cited at {}", at.join(", "))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "behaviours cited in the code but missing from {CATALOGUE}:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_test_the_catalogue_names_exists() {
    let catalogue = catalogue();
    let root = root();
    let named = named_tests(&catalogue);
    assert!(
        named.len() > 100,
        "only {} tests named in {CATALOGUE}",
        named.len()
    );
    let mut rust: BTreeMap<String, Option<(String, BTreeSet<String>)>> = BTreeMap::new();
    let mut web: BTreeMap<String, Option<BTreeSet<String>>> = BTreeMap::new();
    let mut missing = Vec::new();
    for (test, line) in &named {
        match test {
            Named::Rust {
                file,
                modules,
                name,
            } => {
                let source = rust.entry(file.clone()).or_insert_with(|| {
                    let text = fs::read_to_string(root.join(file)).ok()?;
                    let tests = rust_tests(&text);
                    Some((text, tests))
                });
                let shown = format!(
                    "{file}::{}",
                    modules
                        .iter()
                        .chain([name])
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("::")
                );
                match source {
                    None => missing.push(format!("  line {line}: `{shown}`: no file {file}")),
                    Some((text, tests)) => {
                        for module in modules {
                            if !text.contains(&format!("mod {module} {{")) {
                                missing.push(format!(
                                    "  line {line}: `{shown}`: {file} has no `mod {module}`"
                                ));
                            }
                        }
                        if !tests.contains(name) {
                            missing.push(format!(
                                "  line {line}: `{shown}`: {file} has no test fn `{name}`"
                            ));
                        }
                    }
                }
            }
            Named::Python { file, name } => match fs::read_to_string(root.join(file)) {
                Err(_) => missing.push(format!("  line {line}: no file {file}")),
                Ok(text) if !text.contains(&format!("def {name}(")) => missing.push(format!(
                    "  line {line}: `{file}::{name}`: {file} has no `def {name}(`"
                )),
                Ok(_) => {}
            },
            Named::Web { file, title } => {
                let titles = web.entry(file.clone()).or_insert_with(|| {
                    fs::read_to_string(root.join(file))
                        .ok()
                        .map(|t| web_tests(&t))
                });
                match titles {
                    None => missing.push(format!("  line {line}: no file {file}")),
                    Some(titles) if !titles.contains(title) => {
                        missing.push(format!("  line {line}: {file} has no test \"{title}\""))
                    }
                    Some(_) => {}
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "tests named in {CATALOGUE} that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_entry_names_the_tests_that_pin_it() {
    let catalogue = catalogue();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for entry in entries(&catalogue) {
        if let Some(first) = seen.insert(entry.id.clone(), entry.line) {
            wrong.push(format!(
                "  {}: two entries, lines {first} and {}",
                entry.id, entry.line
            ));
        }
        // "none yet" once let an entry name no test, and then stood in
        // prose for a thing that had long been built and tested.
        if named_tests(&entry.text).is_empty() {
            wrong.push(format!(
                "  {} (line {}): names no test that pins it",
                entry.id, entry.line
            ));
        }
    }
    assert!(!seen.is_empty(), "no `### ID` entries in {CATALOGUE}");
    assert!(
        wrong.is_empty(),
        "entries of {CATALOGUE} to fix:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn cites_are_read_as_lists_ranges_and_wrapped_lines() {
    let source = "// (SPEC W1)\n/// see SPEC L2, L4 and\n//! (SPEC B1a; issue #14), SPEC D6–D9, SPEC C1-C3\n// SPEC P, T and SPEC\n// S4a, R2).\nlet x = \"SPECIAL SPEC's\";";
    let cites: Vec<String> = cites_in(source)
        .into_iter()
        .map(|(cite, line)| match cite {
            Cite::Id(id) => format!("{id}@{line}"),
            Cite::Group(letter) => format!("{letter}@{line}"),
        })
        .collect();
    pretty_assertions::assert_eq!(
        cites,
        [
            "W1@1", "L2@2", "L4@2", "B1a@3", "D6@3", "D7@3", "D8@3", "D9@3", "C1@3", "C2@3",
            "C3@3", "P@4", "T@4", "S4a@4", "R2@4"
        ]
    );
}

/// Code comments say why in words and cite behaviours by ID: an issue
/// number points at a conversation, not at the contract, and goes stale.
#[test]
fn code_cites_behaviours_not_issue_numbers() {
    let root = root();
    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in &files {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            let cites_issue = lower.match_indices("issue #").any(|(at, what)| {
                lower[at + what.len()..].starts_with(|c: char| c.is_ascii_digit())
            });
            if cites_issue {
                let shown = file.strip_prefix(&root).unwrap_or(file).display();
                found.push(format!("  {shown}:{}", number + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "issue numbers in the code (cite the SPEC behaviour instead):\n{}",
        found.join("\n")
    );
}

/// Every code an HTTP error can carry is in docs/protocol.md's table of
/// errors, with its status and when.
#[test]
fn every_error_code_is_documented() {
    let doc = fs::read_to_string(root().join("docs/protocol.md")).expect("docs/protocol.md");
    let errors = doc
        .split("## Errors")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("an Errors section");
    let missing: Vec<&str> = margin_protocol::ErrorCode::ALL
        .iter()
        .map(|code| code.as_str())
        .filter(|code| !errors.contains(&format!("`{code}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "error codes missing from docs/protocol.md: {missing:?}"
    );
}
