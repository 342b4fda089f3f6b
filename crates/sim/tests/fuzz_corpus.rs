//! The fuzzer's corpus and every finding it made, replayed in the ordinary
//! suite: each file of `fuzz/corpus/<target>/` and `fuzz/findings/<target>/`
//! goes through its target (`dualfs_sim::fuzz`, `stream_fuzz`,
//! `stream_structure`) and must come back without a panic (for
//! `stream_structure`, a panic is also its oracle failing: a stream
//! received inconsistent, or refused with the mirror changed). (The fuzzing itself is `scripts/fuzz`, afl++, behind
//! `make fuzz`; docs/TESTING.md.)

use std::path::PathBuf;

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut files = Vec::new();
    for dir in ["corpus", "findings"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else { continue };
        files.extend(entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()));
    }
    files.sort();
    files
}

fn replay(target: &str, run: fn(&[u8])) {
    let files = inputs(target);
    assert!(!files.is_empty(), "no corpus for {target}: fuzz/corpus/{target} is part of the repository");
    for f in &files {
        let bytes = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        eprintln!("{target}: {}", f.display());
        run(&bytes);
    }
    eprintln!("{target}: {} inputs replayed", files.len());
}

#[test]
fn every_decode_corpus_file_and_finding_decodes_or_says_why_not() {
    replay("decode", dualfs_sim::fuzz::decode);
}

#[test]
fn every_image_corpus_file_and_finding_is_checked_repaired_and_mounted_without_a_panic() {
    replay("image", dualfs_sim::fuzz::image);
}

#[test]
fn every_stream_corpus_file_and_finding_is_received_or_refused_without_a_panic() {
    replay("stream", dualfs_sim::stream_fuzz::stream_target);
}

#[test]
fn every_structure_corpus_file_and_finding_is_received_consistent_or_refused_whole() {
    replay("stream_structure", dualfs_sim::stream_structure::structure_target);
}
