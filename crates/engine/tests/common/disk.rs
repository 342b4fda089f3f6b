//! Scratch files on a disk file system, and what of them the page cache
//! holds: for the tests of reads through the kernel's cache.

use std::path::Path;

/// A directory on a disk file system, removed when dropped (a failing
/// test too): /tmp may be tmpfs, which refuses `O_DIRECT` (a device would
/// then be buffered throughout and test nothing).
pub fn scratch(prefix: &str) -> tempfile::TempDir {
    let dir = Path::new("/var/tmp");
    let dir = if dir.is_dir() { dir.to_path_buf() } else { std::env::temp_dir() };
    tempfile::Builder::new().prefix(prefix).tempdir_in(dir).unwrap()
}

/// Bytes of `path` in the page cache (util-linux's `fincore`).
pub fn cached_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .expect("fincore (util-linux) runs");
    assert!(out.status.success(), "fincore: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}
