//! The layering of docs/DESIGN.md ("Layers"), enforced: a module of the
//! engine may name (through `crate::`) only modules of its own layer or of
//! layers below it, and the FUSE adapter only the engine's public face.
//!
//! The allowed edges are written once, in [`LAYERS`] and [`ADAPTER_MAY_USE`];
//! DESIGN.md shows the same order and points here.

use std::fs;
use std::path::{Path, PathBuf};

/// The engine's layers, bottom first. A module may import from its own layer
/// and from every layer before it in this list, never from one after it.
///
/// `types`, `error` and `faults` are the foundations everyone uses. `table`
/// (one IFile table in memory) sits below both of its owners, `data_space`
/// and `ifile`. `check` (fsck) sits above the meta log, whose recovery it
/// runs the way mount does, and below the namespace, whose code it must not
/// trust: it decodes every structure itself.
const LAYERS: &[&str] = &[
    "types",
    "error",
    "faults",
    "device",
    "format",
    "table",
    "data_space",
    "ifile",
    "meta_log",
    "check",
    "namespace",
    "volume",
    "repair",
];

/// What the FUSE adapter may import from the engine: the volume's API and the
/// plain types it speaks in, never the layers under the volume.
const ADAPTER_MAY_USE: &[&str] = &["volume", "types", "error", "device", "Volume", "Error", "Result", "DeviceRole"];

/// The position of `module` in [`LAYERS`].
fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == module)
}

/// `line` without its `//` comment (doc comments name other layers in links
/// that are no import). Quotes are tracked so that `"a//b"` stays whole.
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

/// The first path segments named after `prefix` (`crate::` or
/// `dualfs_engine::`) in `code`, opening `{a, b::c}` groups.
fn named_after(prefix: &str, code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        // `my_crate::` must not count as `crate::`.
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

/// Every import of `source` (a file of engine module `module`) that points
/// to a layer above it, as `line: module -> named`.
fn upward_imports(module: &str, source: &str) -> Vec<String> {
    let Some(own) = rank(module) else { return vec![format!("{module} is in no layer: add it to LAYERS")] };
    let mut out = Vec::new();
    for (n, line) in source.lines().enumerate() {
        for named in named_after("crate::", code_of(line)) {
            match rank(&named) {
                Some(r) if r > own => out.push(format!("{}: {module} -> {named}", n + 1)),
                // Items of the crate root (`crate::Error`, `crate::Result`)
                // are re-exports of foundations.
                _ => {}
            }
        }
    }
    out
}

/// Every import of `source` (a file of the FUSE adapter) outside
/// [`ADAPTER_MAY_USE`].
fn adapter_overreach(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (n, line) in source.lines().enumerate() {
        for named in named_after("dualfs_engine::", code_of(line)) {
            if !ADAPTER_MAY_USE.contains(&named.as_str()) {
                out.push(format!("{}: fuse -> dualfs_engine::{named}", n + 1));
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir).expect("source directory").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The engine module a source file belongs to: its first path component
/// under `src/` (`meta_log/seal.rs` -> `meta_log`, `table.rs` -> `table`);
/// `None` for the crate root.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let module = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (module != "lib").then_some(module)
}

#[test]
fn no_engine_module_imports_from_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 40, "found only {} source files under {}", files.len(), src.display());
    let mut bad = Vec::new();
    for f in &files {
        let Some(module) = module_of(&src, f) else { continue };
        let text = fs::read_to_string(f).expect("readable source");
        for v in upward_imports(&module, &text) {
            bad.push(format!("{}:{v}", f.strip_prefix(&src).unwrap_or(f).display()));
        }
    }
    assert!(bad.is_empty(), "imports that point up (see LAYERS in this file):\n{}", bad.join("\n"));
}

#[test]
fn the_fuse_adapter_uses_only_the_volume_and_its_types() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuse/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(!files.is_empty(), "no FUSE adapter sources under {}", src.display());
    let mut bad = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).expect("readable source");
        bad.extend(adapter_overreach(&text).into_iter().map(|v| format!("{}:{v}", f.display())));
    }
    assert!(
        bad.is_empty(),
        "the adapter reaches under the volume (re-export from volume instead):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_engine_never_names_fuse() {
    // FUSE types live in dualfs-wire; the engine may not depend on it, nor
    // on the adapter.
    let manifest = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).expect("manifest");
    for (n, line) in manifest.lines().enumerate() {
        for fuse in ["dualfs-wire", "dualfs-fuse", "fuser"] {
            assert!(!line.trim_start().starts_with(fuse), "Cargo.toml:{}: the engine depends on {fuse}", n + 1);
        }
    }
}

#[test]
fn every_engine_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for f in &files {
        if let Some(module) = module_of(&src, f) {
            assert!(rank(&module).is_some(), "{module} ({}) is in no layer: add it to LAYERS", f.display());
        }
    }
}

#[test]
fn the_checker_catches_an_upward_import() {
    let device = "use crate::types::BLOCK_SIZE;\nuse crate::format::block::BLOCK_MAGIC;\n";
    assert_eq!(upward_imports("device", device), vec!["2: device -> format".to_string()]);
    // Grouped imports and paths in expressions count too.
    let grouped = "use crate::{error::Result, namespace::btree};\nlet x = crate::volume::Volume::open;\n";
    assert_eq!(
        upward_imports("meta_log", grouped),
        vec!["1: meta_log -> namespace".to_string(), "2: meta_log -> volume".to_string()]
    );
    // An unknown module is an error, not a pass.
    assert_eq!(upward_imports("newcomer", "").len(), 1);
}

#[test]
fn the_checker_lets_downward_imports_comments_and_strings_pass() {
    let ok = "use crate::format::node::Node; // see crate::volume\n/// [`crate::volume`] calls this\n\
              let s = \"//\"; use crate::meta_log::Log;\nuse my_crate::volume::X;\n";
    assert_eq!(upward_imports("namespace", ok), Vec::<String>::new());
    // The comment is cut where the quotes end, not inside them.
    assert_eq!(upward_imports("device", "let s = \"//\"; use crate::volume::X;\n").len(), 1);
}

#[test]
fn the_checker_catches_the_adapter_reaching_under_the_volume() {
    let src = "use dualfs_engine::namespace::file::Whence;\nuse dualfs_engine::volume::{Attr, Whence};\n";
    assert_eq!(adapter_overreach(src), vec!["1: fuse -> dualfs_engine::namespace".to_string()]);
    assert_eq!(adapter_overreach("use dualfs_engine::{Error, meta_log::Log};\n").len(), 1);
}
