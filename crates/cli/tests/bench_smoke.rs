//! The benchmark harness (bench/suite.py) on tiny inputs, DualFS and ext4
//! only, traced and replayed, and its report: so that `make bench` never
//! rots between the (long) real runs.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const DUALFS: &str = env!("CARGO_BIN_EXE_dualfs");

fn bench_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench")
}

/// Whether the harness can run here; says why not when it cannot.
fn can_run() -> bool {
    if !nix::unistd::geteuid().is_root() {
        common::skip("the benchmark harness needs root (loop devices, mount)");
        return false;
    }
    for (what, cmd) in [
        ("/dev/fuse", "test -e /dev/fuse"),
        ("python3", "command -v python3"),
        ("mkfs.ext4", "command -v mkfs.ext4"),
        ("loop devices", "losetup -f"),
    ] {
        let ok = Command::new("sh").args(["-c", cmd]).output().is_ok_and(|o| o.status.success());
        if !ok {
            common::skip(&format!("{what} is not available"));
            return false;
        }
    }
    true
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn harness_measures_traces_and_reports_dualfs_and_ext4_on_a_tiny_tree() {
    if !can_run() {
        return;
    }
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = work.path().join("results.jsonl");
    run(Command::new("timeout").args(["600", "python3"]).arg(bench_dir().join("suite.py")).args([
        "--smoke",
        "--trace",
        "--dualfs",
        DUALFS,
        "--work",
        work.path().to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]));
    // The store: one JSON record a line, the measured values under "values".
    let records: Vec<serde_json::Value> =
        std::fs::read_to_string(&store).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let runs: Vec<serde_json::Value> = records
        .iter()
        .map(|r| {
            let mut flat = r["values"].clone();
            for key in ["config", "phase", "traced", "commit", "machine"] {
                flat[key] = r[key].clone();
            }
            flat
        })
        .collect();
    assert!(runs.iter().all(|r| r["machine"]["kernel"].is_string()), "every record names its machine");
    for config in ["dualfs", "ext4"] {
        for phase in ["untar", "find", "grep", "tar", "write-meta", "write-data-meta", "rm", "write-del-1"] {
            let r: Vec<_> = runs.iter().filter(|r| r["config"] == config && r["phase"] == phase).collect();
            assert_eq!(r.len(), 2, "{config} {phase}: one timed and one traced run");
            let traced = r.iter().find(|r| r["traced"] == true).unwrap();
            let hdd = traced["replay"]["hdd5400/one-disk"]["total_s"].as_f64().unwrap();
            assert!(hdd > 0.0, "{config} {phase}: no I/O time replayed");
        }
        let untar = runs.iter().find(|r| r["config"] == config && r["phase"] == "untar").unwrap();
        let writes: u64 =
            untar["devices"].as_object().unwrap().values().map(|d| d["write_req"].as_u64().unwrap()).sum();
        assert!(writes > 0, "{config}: untar wrote nothing");
    }
    // DualFS's own trace names what it wrote.
    let sem = runs.iter().find(|r| r["config"] == "dualfs" && r["phase"] == "untar" && r["traced"] == true).unwrap();
    assert!(sem["semantic"]["devices"]["meta"]["write"]["classes"]["descriptor"]["requests"].as_u64().unwrap() > 0);
    let docs = work.path().join("docs");
    run(Command::new("python3")
        .arg(bench_dir().join("report.py"))
        .arg("--store")
        .arg(&store)
        .arg("--docs")
        .arg(&docs)
        .arg("--no-plots"));
    let md = std::fs::read_to_string(docs.join("BENCHMARKS.md")).unwrap();
    assert!(md.contains("| untar |"), "{md}");
}
