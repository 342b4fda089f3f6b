//! The transport a mount chooses by itself: with the fuse module's
//! `enable_uring` set, per-CPU io_uring queues, over which real tools
//! (tar, cp -a, ls -l, fsync, rm -rf) get what they put, and the volume
//! keeps it across a remount over /dev/fuse; with it off, /dev/fuse, and
//! the log says why; `transport=uring` then refuses to mount.
//!
//! `enable_uring` is the whole machine's: it is set only for the moment of
//! the mount (the kernel decides at INIT and at each queue's
//! registration) and put back as it was, even when the test fails. `make
//! test` runs the mount suites over io_uring too (docs/TESTING.md).

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::path::Path;

use common::{TestVolume, UringParameter, sh};

/// Mounts `v` with no transport named while `enable_uring` is `value`;
/// the parameter is put back once the mount is up.
fn mount_by_itself(v: &mut TestVolume, value: &str) -> bool {
    let Some(param) = UringParameter::set(value) else {
        return false;
    };
    v.mount_as_given("");
    drop(param);
    true
}

/// Builds a tree with every kind of file in `dir` (outside the mount).
fn make_tree(dir: &Path) {
    sh(&format!(
        r#"mkdir -p '{d}' && cd '{d}'
mkdir -p src/a/b src/c src/empty
for i in $(seq 1 200); do head -c $((i * 97)) /dev/urandom > src/a/f$i; done
for i in $(seq 1 50); do echo "file $i" > src/a/b/small$i; done
head -c 3000000 /dev/urandom > src/c/big
ln src/c/big src/c/big.hard
ln -s ../a/f1 src/c/link
chmod 4755 src/a/f2; chmod 600 src/a/f3; chown 1234:5678 src/a/f4
touch -d '2001-02-03 04:05:06.123456789' src/a/f5
setfattr -n user.color -v blue src/a/f6
mkfifo src/c/pipe
tar --format=posix --xattrs --xattrs-include='user.*' -cf tree.tar -C src .
"#,
        d = dir.display()
    ));
}

/// What a tree holds: every path's type, size (but a directory's, which
/// each file system counts its own way), mode, owner, links and
/// modification time, every regular file's checksum, and the user xattrs.
fn listing(dir: &str) -> String {
    sh(&format!(
        "cd '{dir}' && find . -mindepth 1 ! -type d -printf '%p|%y|%s|%m|%U|%G|%n|%T@\\n' | LC_ALL=C sort && \
         find . -mindepth 1 -type d -printf '%p|%m|%U|%G|%n|%T@\\n' | LC_ALL=C sort && \
         find . -type f | LC_ALL=C sort | xargs md5sum && getfattr -d -m user. -R . 2>/dev/null | LC_ALL=C sort"
    ))
}

/// Fails with the lines that differ between two listings.
fn assert_same(got: &str, want: &str, what: &str) {
    let (g, w): (Vec<&str>, Vec<&str>) = (got.lines().collect(), want.lines().collect());
    let missing: Vec<&&str> = w.iter().filter(|l| !g.contains(l)).collect();
    let extra: Vec<&&str> = g.iter().filter(|l| !w.contains(l)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: expected but missing {missing:#?}\nfound instead {extra:#?}"
    );
}

#[test]
fn tools_over_io_uring_get_what_they_put_and_it_survives_a_remount() {
    let Some(mut v) = TestVolume::create("512M") else {
        return;
    };
    if !mount_by_itself(&mut v, "Y") {
        return;
    }
    let said = v.transport();
    assert!(said.contains("serving over io_uring"), "io_uring was allowed, but: {said}");
    let src = v.dir.path().join("outside");
    make_tree(&src);
    let m = v.m().to_string();
    let s = src.display();
    sh(&format!(
        r#"cd '{m}'
mkdir x && tar --xattrs --xattrs-include='user.*' -xf '{s}/tree.tar' -C x
cp -a x y
head -c 1000000 /dev/urandom > synced && sync synced
"#
    ));
    let want = listing(&format!("{s}/src"));
    assert_same(&listing(&format!("{m}/x")), &want, "tar x over io_uring");
    assert_same(&listing(&format!("{m}/y")), &want, "cp -a over io_uring");
    // ls -l of folders without subfolders (whose sizes each file system counts its own way).
    for d in ["a/b", "c"] {
        let ls = |root: &str| sh(&format!("ls -ln '{root}/{d}' | tail -n +2 | awk '{{print $1, $2, $3, $4, $5, $9}}'"));
        assert_eq!(ls(&format!("{m}/x")), ls(&format!("{s}/src")), "ls -l {d} over io_uring");
    }
    let synced = sh(&format!("md5sum < '{m}/synced'"));
    // Every request the tools sent is counted by opcode, whatever the transport.
    let stats = common::dualfs(&["stats", "--json", &m]);
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    for op in ["LOOKUP", "CREATE", "WRITE", "SETATTR", "READDIRPLUS", "FSYNC"] {
        assert!(stats["fuse_requests"][op]["count"].as_u64().unwrap_or(0) > 0, "no {op} counted: {stats}");
    }
    sh(&format!("rm -rf '{m}/y' && test ! -e '{m}/y' && test -z \"$(ls -A '{m}/x/c/empty' 2>/dev/null)\""));
    v.umount();
    // Over /dev/fuse this time: the volume kept what io_uring brought.
    v.mount_as_given("transport=devfuse");
    v.expect_transport("serving over /dev/fuse: not asked for");
    assert_same(&listing(&format!("{m}/x")), &want, "after a remount");
    assert_eq!(sh(&format!("md5sum < '{m}/synced'")), synced);
    assert!(!Path::new(&format!("{m}/y")).exists(), "rm -rf over io_uring held");
    v.umount();
}

#[test]
fn with_enable_uring_off_the_mount_serves_over_dev_fuse_and_says_why() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    if !mount_by_itself(&mut v, "N") {
        return;
    }
    let said = v.transport();
    assert!(said.contains("serving over /dev/fuse: the fuse module's enable_uring is off"), "{said}");
    let m = v.m().to_string();
    sh(&format!(
        r#"cd '{m}'
mkdir d && echo hello > d/f && sync d/f && ln -s f d/l && mv d/f d/g
test "$(cat d/g)" = hello && test "$(readlink d/l)" = f
"#
    ));
    v.umount();
    v.mount();
    assert_eq!(sh(&format!("cat '{m}/d/g'")), "hello\n");
    v.umount();
}

#[test]
fn transport_uring_refuses_to_mount_without_io_uring_and_says_why() {
    let Some(v) = TestVolume::create("128M") else {
        return;
    };
    let Some(param) = UringParameter::set("N") else {
        return;
    };
    let out =
        common::dualfs(&["mount", "-o", "transport=uring", v.meta.to_str().unwrap(), v.data.to_str().unwrap(), v.m()]);
    drop(param);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mounted without io_uring");
    assert!(said.contains("transport=uring") && said.contains("enable_uring is off"), "{said}");
    assert!(!common::is_mounted(&v.mnt), "the refused mount is gone");
    // Nothing was left half-open: the volume mounts again at once.
    let mut v = v;
    v.mount();
    v.umount();
}
