//! Several processes at once: separate files, one file in append mode, and
//! an SQLite database (which needs POSIX record locks) under two writers.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use common::{TestVolume, sh};

#[test]
fn two_processes_writing_different_files_at_once() {
    let Some(mut v) = TestVolume::create("512M") else {
        return;
    };
    let src = v.dir.path().to_str().unwrap().to_string();
    sh(&format!("head -c 50331648 /dev/urandom > {src}/one && head -c 41943040 /dev/urandom > {src}/two"));
    v.mount();
    let m = v.m().to_string();
    // Small and large writes, one of them with fsync along the way.
    sh(&format!(
        "dd if={src}/one of={m}/one bs=4k status=none & \
         dd if={src}/two of={m}/two bs=1M conv=fsync status=none & wait"
    ));
    let sums = |dir: &str| sh(&format!("cd {dir} && sha256sum one two"));
    assert_eq!(sums(&src), sums(&m));
    v.remount();
    assert_eq!(sums(&src), sums(&m));
    v.umount();
}

#[test]
fn two_processes_appending_to_one_file_lose_nothing() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    let f = v.path("log");
    let f = f.to_str().unwrap();
    // Each process holds one O_APPEND descriptor and writes line by line.
    let writer = |tag: &str| format!("(exec 3>>{f}; for i in $(seq 1 3000); do echo \"{tag} $i\" >&3; done)");
    sh(&format!("{} & {} & wait", writer("A"), writer("B")));
    let check = || {
        let text = std::fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6000, "every line is there, none torn");
        for tag in ["A", "B"] {
            let seen: Vec<u32> =
                lines.iter().filter_map(|l| l.strip_prefix(&format!("{tag} "))).map(|n| n.parse().unwrap()).collect();
            assert_eq!(seen, (1..=3000).collect::<Vec<_>>(), "{tag}'s lines in order");
        }
    };
    check();
    v.remount();
    check();
    v.umount();
}

/// Two sqlite3 processes, each running 1500 transactions that contend for
/// the database lock; the first error stops a writer (-bail) and fails the
/// test with its message. Returns the query that checks the result.
fn run_sqlite_writers(v: &TestVolume) -> (String, &'static str) {
    let db = v.path("test.db");
    let db = db.to_str().unwrap();
    sh(&format!("sqlite3 {db} 'CREATE TABLE t(id INTEGER PRIMARY KEY, tag TEXT, i INT, pad BLOB);'"));
    let writer = |tag: &str| {
        format!(
            "{{ echo 'PRAGMA busy_timeout=30000;'; for i in $(seq 1 1500); do \
             echo \"BEGIN IMMEDIATE; INSERT INTO t(tag,i,pad) VALUES('{tag}',$i,randomblob(300)); COMMIT;\"; \
             done; }} | sqlite3 -bail {db} >/dev/null"
        )
    };
    sh(&format!("{} & a=$!; {} & b=$!; wait $a; wait $b", writer("A"), writer("B")));
    let query = format!(
        "sqlite3 {db} \"PRAGMA integrity_check; SELECT tag, count(*), count(DISTINCT i), min(i), max(i) FROM t GROUP BY tag;\""
    );
    (query, "ok\nA|1500|1500|1|1500\nB|1500|1500|1|1500\n")
}

fn have_sqlite() -> bool {
    let found = !sh("command -v sqlite3 || true").trim().is_empty();
    if !found {
        common::skip("sqlite3 is not installed (scripts/install-deps)");
    }
    found
}

#[test]
fn sqlite_survives_two_writers_and_a_remount() {
    // Every transaction is a few fsyncs, each a partial segment: the log
    // needs room for the segments written between two checkpoints (see the
    // ignored test below for a meta-data device too small for that).
    let Some(mut v) = TestVolume::create("1G") else {
        return;
    };
    if !have_sqlite() {
        return;
    }
    v.mount();
    let (query, expect) = run_sqlite_writers(&v);
    assert_eq!(sh(&query), expect);
    v.remount();
    assert_eq!(sh(&query), expect);
    v.umount();
}

#[test]
fn an_fsync_heavy_workload_on_a_small_volume_keeps_it_writable() {
    // 256 MiB: 26 log segments. 4.5 KiB of meta-data are live at the end,
    // but the log between two checkpoints (4096 blocks, or a tick) is larger.
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    if !have_sqlite() {
        return;
    }
    v.mount();
    let (query, expect) = run_sqlite_writers(&v);
    assert_eq!(sh(&query), expect);
    v.umount();
}

#[test]
fn flock_excludes_a_second_holder() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let f = v.path("lockfile");
    let f = f.to_str().unwrap();
    sh(&format!("touch {f}"));
    // One process holds the lock for a while; a second may not take it,
    // then may once the first is done.
    let out = sh(&format!(
        "flock -x {f} -c 'sleep 1' & sleep 0.3; \
         if flock -n -x {f} -c true; then echo taken; else echo refused; fi; wait; \
         flock -n -x {f} -c 'echo free'"
    ));
    assert_eq!(out, "refused\nfree\n");
    v.umount();
}
