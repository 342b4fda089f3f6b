//! Send and receive with real tools: a tree made with cp, ln, setfattr,
//! chmod, chown and touch is sent through a pipe into a mounted mirror, then
//! changed (renames, deletes, overwrites, truncations) and sent again as an
//! increment, and the mirror shows the same tree, with the same inode
//! numbers, after its kernel had cached the old one; a stream whose base
//! the mirror lacks is refused; offline receive gives the same tree.
#![allow(clippy::unwrap_used)]

mod common;

use common::{TestVolume, dualfs, sh, sh_output};

/// Everything tools show of a tree but its access times (reading it
/// changes them): type, mode, owners, links, size, times, inode number,
/// symlink target, user attributes, contents.
fn listing(root: &str) -> String {
    sh(&format!(
        "cd {root} && find . -printf '%p %y %m %U %G %n %s %T@ %C@ %i %l\\n' | sort && getfattr -R -d -m '^user\\.' \
         --absolute-names . 2>/dev/null | sort && find . -type f | sort | xargs -r sha256sum"
    ))
}

fn same(a: &str, b: &str) {
    let (x, y) = (listing(a), listing(b));
    if x != y {
        let only = |p: &str, q: &str| -> Vec<String> {
            let theirs: std::collections::HashSet<&str> = q.lines().collect();
            p.lines().filter(|l| !theirs.contains(l)).take(20).map(String::from).collect()
        };
        panic!("{a} and {b} differ:\nonly in {a}: {:#?}\nonly in {b}: {:#?}", only(&x, &y), only(&y, &x));
    }
}

fn ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_mirror_follows_its_source_through_full_and_incremental_streams() {
    let Some(mut src) = TestVolume::create("512M") else { return };
    let Some(mut dst) = TestVolume::create("512M") else { return };
    src.mount();
    dst.mount();
    let (s, d) = (src.m().to_string(), dst.m().to_string());
    let bin = env!("CARGO_BIN_EXE_dualfs");
    sh(&format!(
        "mkdir -p {s}/a/b {s}/c && cp -a /usr/share/doc/coreutils {s}/a/doc 2>/dev/null || true; \
         head -c 2000000 /dev/urandom > {s}/a/big && seq 1 50000 > {s}/c/list && echo tiny > {s}/tiny && \
         ln {s}/tiny {s}/a/b/tiny-link && ln -s ../tiny {s}/c/sym && ln -s $(printf 'x%.0s' $(seq 1 1500)) {s}/long && \
         mkfifo {s}/c/fifo && setfattr -n user.colour -v blue {s}/a/big && chmod 0640 {s}/c/list && \
         chown 1000:100 {s}/a/b && touch -d '2001-02-03 04:05:06' {s}/tiny && truncate -s 10M {s}/sparse && \
         echo end >> {s}/sparse"
    ));
    ok(&dualfs(&["snapshot", "create", &s, "one"]));
    let dir = src.dir.path().display().to_string();
    sh(&format!("{bin} send one {s} > {dir}/one.stream && {bin} receive {d} < {dir}/one.stream"));
    same(&s, &d);
    // Changes, after the mirror's kernel cached the old tree (listing read it).
    sh(&format!(
        "mv {s}/a/doc {s}/c/doc-moved 2>/dev/null || true; rm {s}/a/b/tiny-link && mv {s}/c/list {s}/list-moved && \
         dd if=/dev/urandom of={s}/a/big bs=4096 seek=100 count=10 conv=notrunc status=none && \
         truncate -s 1000 {s}/list-moved && echo appended >> {s}/tiny && mkdir -p {s}/new/deeper && \
         echo fresh > {s}/new/deeper/file && setfattr -x user.colour {s}/a/big && setfattr -n user.size -v 2 {s}/tiny \
         && rm {s}/c/fifo && chmod 0700 {s}/c"
    ));
    ok(&dualfs(&["snapshot", "create", &s, "two"]));
    sh(&format!("{bin} send --from one two {s} | {bin} receive {d}"));
    same(&s, &d);
    // Another round, then a stream from a base the mirror does not hold.
    sh(&format!(
        "rm -rf {s}/new && echo again > {s}/again && dd if=/dev/zero of={s}/sparse bs=1 count=3 conv=notrunc status=none"
    ));
    ok(&dualfs(&["snapshot", "create", &s, "three"]));
    ok(&dualfs(&["snapshot", "create", &s, "four"]));
    let refused = sh_output(&format!("{bin} send --from three four {s} | {bin} receive {d}"));
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("does not hold the stream's base"), "{why}");
    sh(&format!("{bin} send --from two three {s} | {bin} receive {d}"));
    same(&s, &d);
    let snaps = String::from_utf8_lossy(&dualfs(&["snapshot", "list", &d]).stdout).into_owned();
    assert!(snaps.contains("one") && snaps.contains("two") && snaps.contains("three"), "{snaps}");
    // Offline: the full stream into a third volume gives the same tree.
    let Some(mut third) = TestVolume::create("512M") else { return };
    let (m, dd) = (third.meta.display().to_string(), third.data.display().to_string());
    sh(&format!("{bin} send three {s} | {bin} receive {m} {dd}"));
    third.mount();
    same(&s, third.m());
    third.umount();
    dst.umount();
    src.umount();
}
