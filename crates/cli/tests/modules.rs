//! The modules of the `dualfs` command import each other without a
//! circle: `args` (the command line) names nothing of the crate, shared
//! helpers (`words`, `exit`, `mountinfo`, `devices`...) name no command,
//! and a command names only what sits below it. A new `crate::` path that
//! closes a circle fails here, naming the circle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// `line` without its `//` comment (doc links name modules without
/// importing them). Quotes are tracked so that `"a//b"` stays whole.
fn code_of(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut in_str = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            b'/' if !in_str && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

/// The first path segments named after `crate::` in `code`, opening
/// `{a, b::c}` groups.
fn named(code: &str) -> Vec<String> {
    let ident = |s: &str| -> String { s.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            out.extend(group[..end].split(',').map(ident));
        } else {
            out.push(ident(rest));
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("source directory") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each top-level module of `src` (a file `x.rs` or a folder `x/`) and the
/// other top-level modules its files name through `crate::`.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let module = |p: &Path| -> String {
        let rel = p.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a component").as_os_str().to_string_lossy().into_owned();
        first.trim_end_matches(".rs").to_string()
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = files.iter().map(|f| (module(f), BTreeSet::new())).collect();
    let known: BTreeSet<String> = graph.keys().cloned().collect();
    for f in &files {
        let m = module(f);
        let text = fs::read_to_string(f).expect("source file");
        for line in text.lines() {
            for n in named(code_of(line)) {
                if n != m && known.contains(&n) {
                    graph.get_mut(&m).expect("module").insert(n);
                }
            }
        }
    }
    graph
}

/// A circle of imports, as the modules along it, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search; a module met again while still on the path closes a circle.
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut c = path[at..].to_vec();
            c.push(m.to_string());
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for n in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(n, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_modules_import_each_other_without_a_circle() {
    let graph = imports(&src());
    assert!(graph.len() > 20, "the crate's modules were not found: {:?}", graph.keys());
    if let Some(c) = circle(&graph) {
        panic!("an import circle: {}", c.join(" -> "));
    }
}

#[test]
fn the_command_line_names_nothing_else_of_the_crate() {
    let graph = imports(&src());
    assert_eq!(graph.get("args"), Some(&BTreeSet::new()), "args imports from the commands");
}

#[test]
fn a_circle_is_found_and_named() {
    let mut graph = imports(&src());
    assert_eq!(circle(&graph), None);
    // `words` naming `mkfs`, which names `words`: the circle shared helpers once made.
    graph.get_mut("words").expect("words").insert("mkfs".into());
    let c = circle(&graph).expect("the circle words -> mkfs -> ... -> words");
    assert_eq!(c.first(), c.last());
    assert!(c.iter().any(|m| m == "words") && c.iter().any(|m| m == "mkfs"), "{c:?}");
    assert_eq!(named("use crate::{args::MkfsArgs, words::count};"), ["args", "words"]);
    assert_eq!(named(code_of("let x = my_crate::y; // crate::z")), Vec::<String>::new());
}
