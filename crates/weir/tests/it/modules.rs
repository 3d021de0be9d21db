//! The workspace's structure: no two top-level modules of a crate import each other, directly
//! or through others (a module and the ones it uses can be read, tested and moved in order).
//! The check reads every `crate::` and `super::` path in each crate's sources (comments and
//! the `tests` modules left out) and looks for a circle among the modules they name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of `file` under `src` (`lib.rs` and `main.rs` are the root, `mod.rs` its
/// directory).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// `text` without its comments and without a trailing `#[cfg(test)] mod tests { ... }`.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths after each `crate::` or `super::` in `code`, as segments.
fn paths_in(code: &str) -> Vec<(bool, Vec<String>)> {
    let mut out = Vec::new();
    for (head, is_crate) in [("crate::", true), ("super::", false)] {
        let mut rest = code;
        while let Some(at) = rest.find(head) {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + head.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                // `crate::{a::X, b::{Y, Z}}`: the first segment of each item of the group.
                let mut depth = 1;
                let mut item = String::new();
                for c in group.chars() {
                    match c {
                        '}' | ',' if depth == 1 => {
                            let first = item.trim().split("::").next().unwrap_or("").to_string();
                            if !first.is_empty() {
                                out.push((is_crate, vec![first]));
                            }
                            item.clear();
                            if c == '}' {
                                break;
                            }
                            continue;
                        }
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    if depth == 1 {
                        item.push(c);
                    }
                }
                continue;
            }
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            let segments = rest[..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            out.push((is_crate, segments));
        }
    }
    out
}

/// The top-level modules of the crate at `src`, each with the top-level modules it uses.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let module = module_of(src, &file);
        let Some(top) = module.first().cloned() else {
            continue; // the crate root declares the modules
        };
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        for (is_crate, segments) in paths_in(&code_of(&text)) {
            let target = if is_crate {
                segments
            } else {
                // `super` in `a/b.rs` (module a::b) is `a`; in `a/mod.rs` (module a), the root.
                let mut base = module.clone();
                base.pop();
                base.extend(segments);
                base
            };
            // Only modules count: `crate::Decoder` names an item of the root.
            if let Some(used) = target.first() {
                let is_module = src.join(format!("{used}.rs")).is_file()
                    || src.join(used).join("mod.rs").is_file();
                if is_module && *used != top {
                    graph.entry(top.clone()).or_default().insert(used.clone());
                }
            }
        }
        graph.entry(top).or_default();
    }
    graph
}

/// A circle in `graph`, if there is one: the modules along it, the first repeated at the end.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|start| visit(start, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // A use each crate is known to have: the graph is read, not empty of edges.
    let known = [
        ("weir", "pipeline", "source"),
        ("weir-codec", "protobuf", "error"),
        ("weir-kafka", "security", "error"),
        ("weir-dedup", "store", "order"),
    ];
    let mut checked = 0;
    for (name, from, to) in known {
        let src = crates.join(name).join("src");
        let graph = module_graph(&src);
        assert!(
            graph.get(from).is_some_and(|uses| uses.contains(to)),
            "{name}: the check did not see {from} use {to}: {graph:#?}"
        );
        if let Some(found) = circle(&graph) {
            panic!(
                "{name}: the modules {} import each other in a circle; the uses, module by \
                 module: {graph:#?}",
                found.join(" -> ")
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 4);
}

#[test]
fn the_circle_check_finds_a_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(str::to_string).collect()))
    .collect();
    assert_eq!(
        circle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let code = code_of(
        "use crate::x::Y; // crate::z\nuse crate::{a::B, c::{D, e::F}};\n\
         fn f() { super::w::g(); my_crate::q(); }",
    );
    let found: Vec<_> = paths_in(&code)
        .into_iter()
        .map(|(_, s)| s[0].clone())
        .collect();
    assert_eq!(found, vec!["x", "a", "c", "w"]);
}
