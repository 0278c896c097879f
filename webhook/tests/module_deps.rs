//! The webhook crate's top-level modules (`src/lib.rs`) depend on each
//! other without cycles, and `metrics` is a leaf. Run by `make lint`.
//!
//! An edge `a → b` is any path `crate::b` (or `crate::{b, ...}`, or enough
//! `super::` to reach the crate root followed by `b`) in a source file of
//! module `a`, comments excluded. A cycle is reported with its path, e.g.
//! `cli → self_managed_certs → cli`; fix it by moving the shared item into the
//! module that owns it (see docs/ARCHITECTURE.md, module map).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Module → the modules it uses.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Modules that must not depend on any other module of the crate.
const LEAVES: &[&str] = &["metrics"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The modules declared in `lib.rs` (`mod x;` / `pub mod x;`).
fn top_level_modules(lib: &str) -> Vec<String> {
    lib.lines()
        .map(|l| strip_comment(l).trim())
        .filter_map(|l| {
            let l = l.strip_prefix("pub ").unwrap_or(l);
            let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
            l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
        })
        .collect()
}

/// The line without its `//` comment (doc comments included).
fn strip_comment(line: &str) -> &str {
    line.find("//").map_or(line, |i| &line[..i])
}

/// Every `.rs` file under `dir`, with its module path below the top-level
/// module (`server/admission.rs` → `["server", "admission"]`).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Depth of the module a file defines, counted from the crate root:
/// `metrics.rs` and `metrics/mod.rs` are 1, `metrics/labels.rs` is 2.
fn depth(file: &Path) -> usize {
    let relative = file.strip_prefix(src()).unwrap();
    let parts = relative.components().count();
    if file.file_name().is_some_and(|n| n == "mod.rs") {
        parts - 1
    } else {
        parts
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The leading identifier of `text`.
fn ident(text: &str) -> &str {
    let end = text.find(|c| !is_ident(c)).unwrap_or(text.len());
    &text[..end]
}

/// The crate-root names a piece of code refers to: after `crate::`, or
/// after `depth` or more `super::`; `{a, b::c}` groups give each of theirs.
fn root_names(code: &str, depth: usize) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let before_ok = i == 0 || !is_ident(bytes[i - 1] as char);
        let rest = &code[i..];
        let after = if before_ok && rest.starts_with("crate::") {
            Some(&rest["crate::".len()..])
        } else if before_ok && rest.starts_with("super::") {
            let mut r = rest;
            let mut supers = 0;
            while let Some(next) = r.strip_prefix("super::") {
                r = next;
                supers += 1;
            }
            (supers >= depth).then_some(r)
        } else {
            None
        };
        match after {
            Some(after) if after.starts_with('{') => {
                // A group: the first identifier of each top-level item.
                let mut level = 0;
                let mut item_start = true;
                for (j, c) in after.char_indices() {
                    match c {
                        '{' => {
                            level += 1;
                            item_start = level == 1;
                        }
                        '}' => {
                            level -= 1;
                            if level == 0 {
                                break;
                            }
                        }
                        ',' if level == 1 => item_start = true,
                        c if item_start && is_ident(c) => {
                            names.insert(ident(&after[j..]).to_owned());
                            item_start = false;
                        }
                        _ => {}
                    }
                }
                i += 1;
            }
            Some(after) => {
                names.insert(ident(after).to_owned());
                i += 1;
            }
            None => i += 1,
        }
    }
    names
}

/// The dependency graph of the top-level modules of the crate at `src`.
fn graph() -> Graph {
    let lib = fs::read_to_string(src().join("lib.rs")).unwrap();
    let modules = top_level_modules(&lib);
    assert!(modules.len() >= 5, "too few modules in lib.rs: {modules:?}");
    let mut graph = Graph::new();
    for module in &modules {
        let mut files = Vec::new();
        let dir = src().join(module);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
        let file = src().join(format!("{module}.rs"));
        if file.is_file() {
            files.push(file);
        }
        assert!(!files.is_empty(), "no source of module {module}");
        let mut uses = BTreeSet::new();
        for file in files {
            let text = fs::read_to_string(&file).unwrap();
            let code: String = text
                .lines()
                .map(strip_comment)
                .collect::<Vec<_>>()
                .join("\n");
            uses.extend(
                root_names(&code, depth(&file))
                    .into_iter()
                    .filter(|name| name != module && modules.contains(name)),
            );
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// A cycle of `graph` as its path (first module repeated at the end), if it
/// has one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path.iter().position(|n| n == node).unwrap();
                let mut cycle = path[start..].to_vec();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_owned(), Mark::Open);
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut marks, &mut Vec::new()))
}

fn render(graph: &Graph) -> String {
    graph
        .iter()
        .map(|(m, uses)| {
            let uses: Vec<_> = uses.iter().map(String::as_str).collect();
            format!("  {m} → {}", uses.join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn top_level_modules_have_no_cycle() {
    let graph = graph();
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "import cycle between the webhook's top-level modules: {}\nall edges:\n{}",
            cycle.join(" → "),
            render(&graph)
        );
    }
}

#[test]
fn leaves_depend_on_no_other_module() {
    let graph = graph();
    for leaf in LEAVES {
        let uses = graph
            .get(*leaf)
            .unwrap_or_else(|| panic!("no module {leaf}"));
        assert!(
            uses.is_empty(),
            "{leaf} must be a leaf, but uses {uses:?}\nall edges:\n{}",
            render(&graph)
        );
    }
}

/// The checker itself finds cycles and edges of every form.
#[test]
fn the_checker_sees_cycles_and_every_path_form() {
    let edges = |pairs: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in pairs {
            g.entry((*a).to_owned())
                .or_default()
                .insert((*b).to_owned());
            g.entry((*b).to_owned()).or_default();
        }
        g
    };
    let cyclic = edges(&[("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]);
    let cycle = find_cycle(&cyclic).unwrap();
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4, "{cycle:?}");
    assert_eq!(
        find_cycle(&edges(&[("a", "b"), ("b", "c"), ("a", "c")])),
        None
    );

    let code = "use crate::metrics::Metrics;\n\
                use crate::{cli::{A, B}, server};\n\
                let x = crate::tls::load();\n\
                use super::super::logging;\n\
                use super::sibling;\n\
                let y = notcrate::other;";
    let names: Vec<_> = root_names(code, 2).into_iter().collect();
    assert_eq!(names, ["cli", "logging", "metrics", "server", "tls"]);
    assert_eq!(
        top_level_modules("//! doc\npub mod a;\nmod b; // c\n// mod d;\npub use x;"),
        ["a", "b"]
    );
}
