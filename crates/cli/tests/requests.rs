//! The requests the kernel sends for the commonest operations, counted by
//! the adapter (`dualfs stats`), against the ledger in DESIGN ("Requests
//! the kernel sends, and which are ours to cut"): each request is there for
//! the kernel's reason written there, and none more. A change to the
//! adapter that makes the kernel ask again (an invalidation, a zero
//! timeout, a missing open flag) fails here before it shows in a benchmark.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::collections::BTreeMap;

use common::{TestVolume, sh};

/// Requests served since the mount, by opcode.
fn counts(m: &str) -> BTreeMap<String, u64> {
    let out = common::dualfs(&["stats", "--json", m]);
    assert!(out.status.success(), "stats: {}", String::from_utf8_lossy(&out.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    stats["fuse_requests"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(op, v)| (op.clone(), v["count"].as_u64().unwrap()))
        .collect()
}

/// The requests `script` makes, less the STATFS and GETXATTR of the
/// `dualfs stats` that reads the counters, and without FORGET: the kernel
/// sends it when it evicts an inode, which memory pressure may do at any
/// time, and it is no round trip (nothing answers it).
fn requests(m: &str, script: &str) -> BTreeMap<String, u64> {
    let before = counts(m);
    sh(script);
    let mut after = counts(m);
    for op in ["STATFS", "GETXATTR"] {
        *after.get_mut(op).unwrap() -= 1;
    }
    after
        .into_iter()
        .map(|(op, n)| {
            let d = n - before.get(&op).copied().unwrap_or(0);
            (op, d)
        })
        .filter(|(op, d)| *d > 0 && op != "FORGET")
        .collect()
}

/// `got` has exactly the opcodes of `exact` with those counts, and the
/// others of `at_most` no more often than said.
fn check(what: &str, got: &BTreeMap<String, u64>, exact: &[(&str, u64)], at_most: &[(&str, u64)]) {
    for (op, n) in got {
        let want = exact.iter().find(|(o, _)| o == op).map(|(_, n)| *n);
        let bound = at_most.iter().find(|(o, _)| o == op).map(|(_, n)| *n);
        match (want, bound) {
            (Some(w), _) => assert_eq!(*n, w, "{what}: {op} ({got:?})"),
            (None, Some(b)) => assert!(*n <= b, "{what}: {n} {op}, at most {b} ({got:?})"),
            (None, None) => panic!("{what}: {n} {op} not in the ledger ({got:?})"),
        }
    }
    for (op, n) in exact {
        assert_eq!(got.get(*op).copied().unwrap_or(0), *n, "{what}: {op} ({got:?})");
    }
}

const N: u64 = 10;

#[test]
fn each_operation_costs_the_requests_in_the_ledger_and_no_more() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    // Warm: the directory is looked up, the FLUSH that is ENOSYS once sent.
    sh(&format!("cd {m} && mkdir d && : > d/warm && echo x > d/w && rm d/w && ls -l d >/dev/null"));
    let each = |op: &str| format!("cd {m}/d && for i in $(seq 1 {N}); do {op}; done");

    // A create: the name is looked up (the kernel opens atomically only a
    // name it has looked up), created, closed; the directory's attributes,
    // stale after the change, are fetched again by the next walk through it
    // (`default_permissions`).
    let got = requests(&m, &each(": > f$i"));
    check("create", &got, &[("LOOKUP", N), ("CREATE", N), ("RELEASE", N)], &[("GETATTR", N)]);

    // A first write to a new file: `security.capability`, asked by
    // file_remove_privs (a new inode is never S_NOSEC), and the WRITE at
    // close; the times go with it or after it.
    let got = requests(&m, &each("echo x > g$i"));
    check(
        "create and write",
        &got,
        &[("LOOKUP", N), ("CREATE", N), ("RELEASE", N), ("WRITE", N), ("GETXATTR", N)],
        &[("GETATTR", N), ("SETATTR", N)],
    );

    // chown: the capability asked once more (notify_change, ATTR_KILL_PRIV),
    // the SETATTR; chown's own stat finds the block count stale (every
    // close under the writeback cache marks it so).
    let got = requests(&m, &each("chown 1:1 g$i"));
    check("chown", &got, &[("SETATTR", N), ("GETXATTR", N)], &[("GETATTR", N + 1)]);

    // A read: OPEN and RELEASE; the data from the kernel's pages, except
    // where the read updates the access time (relatime: the first read
    // after a change), for which the open drops them; an ACL lookup where
    // the owner is someone else.
    let got = requests(&m, &each("cat f$i g$i >/dev/null"));
    let bounds = [("GETATTR", 2 * N), ("GETXATTR", N), ("READ", N)];
    check("read", &got, &[("OPEN", 2 * N), ("RELEASE", 2 * N)], &bounds);
    let got = requests(&m, &each("cat f$i g$i >/dev/null"));
    check("read again", &got, &[("OPEN", 2 * N), ("RELEASE", 2 * N)], &[("GETATTR", 2 * N)]);

    // A rename: the new name looked up, the kernel's ctime of the moved
    // file (it owns a regular file's times under the writeback cache).
    let got = requests(&m, &each("mv f$i h$i"));
    check("rename", &got, &[("LOOKUP", N), ("RENAME", N), ("SETATTR", N)], &[("GETATTR", 2 * N)]);

    // An unlink: the same ctime; rm's stat finds the name's attributes stale.
    let got = requests(&m, &each("rm h$i"));
    check("unlink", &got, &[("UNLINK", N), ("SETATTR", N)], &[("GETATTR", 2 * N)]);

    // ls -l of names the kernel knows: coreutils asks each file's label
    // and the directory's, and the kernel an ACL it has not cached.
    let got = requests(&m, &format!("ls -l {m}/d >/dev/null"));
    let listed = N + 1;
    let bounds = [("GETXATTR", 2 * (listed + 1)), ("GETATTR", 1), ("READDIR", 2), ("READDIRPLUS", 1)];
    check("ls -l", &got, &[], &bounds);
    assert!(got.get("GETXATTR").copied().unwrap_or(0) >= listed, "ls -l: a label per file ({got:?})");
    v.umount();

    // Without the security namespace, ls -l asks once and then knows.
    v.mount_with("nosecurity_xattr");
    sh(&format!("ls -l {m}/d >/dev/null"));
    let got = requests(&m, &format!("ls -l {m}/d >/dev/null"));
    check("ls -l, nosecurity_xattr", &got, &[], &[("GETXATTR", 1), ("GETATTR", 1), ("READDIR", 2), ("READDIRPLUS", 1)]);
    v.umount();
}
