//! `fallocate`'s range modes through a mount, with xfs_io: collapse and
//! insert on a file with holes, a tail still in the kernel's cache and an
//! inline file, and unshare on blocks a snapshot holds, compared with the
//! same edits made by hand on a copy in memory.
//!
//! Linux's FUSE passes only keep-size, punch-hole and zero-range to a
//! server (`fuse_file_fallocate` in fs/fuse/file.c: any other bit is
//! EOPNOTSUPP before a request is made, Linux 6.18 included), so on such
//! a kernel the calls never reach DualFS and this test cannot run:
//! `cargo test --test ranges -- --ignored` runs it on a kernel that
//! passes them. The engine's and the adapter's tests (crates/engine/tests/
//! ranges.rs, crates/fuse/tests/fallocate.rs) cover the same cases below
//! the kernel.

#![allow(clippy::unwrap_used)]
mod common;

use common::{TestVolume, dualfs, sh, sh_output, skip};

const B: usize = 4096;

fn xfs_io(path: &std::path::Path, cmd: &str) -> Result<(), String> {
    let out = sh_output(&format!("xfs_io -c '{cmd}' '{}'", path.display()));
    let err = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    if out.status.success() && err.trim().is_empty() { Ok(()) } else { Err(err) }
}

#[test]
#[ignore = "Linux's FUSE does not pass collapse, insert or unshare to a server (fs/fuse/file.c)"]
fn collapse_insert_and_unshare_through_the_mount() {
    if sh_output("command -v xfs_io").stdout.is_empty() {
        skip("xfs_io (xfsprogs) is not installed");
        return;
    }
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    v.mount_with("");
    let m = v.m().to_string();
    // Holes between data, then a tail written but not synced.
    let mut want = vec![0u8; 12 * B + 300];
    sh(&format!(
        "cd {m} && head -c 49452 /dev/urandom > src && cp src f && fallocate -p -o 4096 -l 12288 f && sync f \
         && printf tail | dd of=f bs=1 seek=49000 conv=notrunc status=none && printf small > inline"
    ));
    let src = std::fs::read(v.path("src")).unwrap();
    want.copy_from_slice(&src);
    want[B..4 * B].fill(0);
    want[49000..49004].copy_from_slice(b"tail");
    match xfs_io(&v.path("f"), "fcollapse 4096 8192") {
        Ok(()) => {}
        Err(e) if e.contains("Operation not supported") => {
            skip(&format!("this kernel's FUSE refuses fcollapse before DualFS sees it: {e}"));
            return;
        }
        Err(e) => panic!("fcollapse: {e}"),
    }
    want.drain(B..3 * B);
    xfs_io(&v.path("f"), "finsert 0 4096").unwrap();
    want.splice(0..0, vec![0u8; B]);
    assert_eq!(std::fs::read(v.path("f")).unwrap(), want, "after collapse and insert");
    // The kernel's rules.
    assert!(xfs_io(&v.path("f"), "fcollapse 100 4096").unwrap_err().contains("Invalid argument"));
    assert!(xfs_io(&v.path("inline"), "finsert 4096 4096").unwrap_err().contains("Invalid argument"));
    xfs_io(&v.path("inline"), "finsert 0 4096").unwrap();
    assert_eq!(std::fs::read(v.path("inline")).unwrap(), [vec![0u8; B], b"small".to_vec()].concat());
    // Unshare of blocks a snapshot holds: the same bytes, the snapshot's too.
    sh(&format!("sync {m}"));
    let out = dualfs(&["snapshot", "create", &m, "s"]);
    assert!(out.status.success(), "snapshot: {}", String::from_utf8_lossy(&out.stderr));
    xfs_io(&v.path("f"), &format!("funshare 0 {}", want.len())).unwrap();
    assert_eq!(std::fs::read(v.path("f")).unwrap(), want, "after unshare");
    v.remount();
    assert_eq!(std::fs::read(v.path("f")).unwrap(), want, "after a remount");
    v.umount();
    v.fsck();
}
