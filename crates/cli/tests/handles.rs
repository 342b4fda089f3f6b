//! File handles as the kernel's exportfs hands them out
//! (name_to_handle_at / open_by_handle_at, and the NFS server, which uses
//! the same path): valid while the file lives, after its inode has left
//! the kernel's caches and across a remount; stale once it is deleted.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use common::{TestVolume, sh, sh_output};

/// Room for the handle bytes after `struct file_handle`'s two u32s.
const HANDLE_BYTES: usize = 128;

/// A file handle: `struct file_handle` as raw bytes.
#[derive(Clone)]
struct Handle(Vec<u8>);

#[allow(unsafe_code)]
fn name_to_handle(path: &Path) -> io::Result<Handle> {
    let mut buf = vec![0u8; 8 + HANDLE_BYTES];
    buf[..4].copy_from_slice(&(HANDLE_BYTES as u32).to_ne_bytes());
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `buf` is a file_handle with handle_bytes set to the room
    // after its header, and outlives the call; `c` is NUL-terminated.
    let r =
        unsafe { libc::name_to_handle_at(libc::AT_FDCWD, c.as_ptr(), buf.as_mut_ptr().cast(), &raw mut mount_id, 0) };
    if r == 0 { Ok(Handle(buf)) } else { Err(io::Error::last_os_error()) }
}

#[allow(unsafe_code)]
fn open_by_handle(mount: &Path, h: &Handle) -> io::Result<std::fs::File> {
    let m = std::fs::File::open(mount)?;
    let mut buf = h.0.clone();
    // SAFETY: `buf` holds a handle name_to_handle_at filled; the mount fd
    // is open for the call.
    let fd = unsafe { libc::open_by_handle_at(m.as_raw_fd(), buf.as_mut_ptr().cast(), libc::O_RDONLY) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor this process owns from now on.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

fn read_by_handle(mount: &Path, h: &Handle) -> io::Result<String> {
    let mut s = String::new();
    io::Read::read_to_string(&mut open_by_handle(mount, h)?, &mut s)?;
    Ok(s)
}

/// Makes the kernel forget its cached inodes and dentries, so that a
/// handle must be resolved by asking the volume.
fn drop_caches() {
    sh("sync; echo 3 > /proc/sys/vm/drop_caches");
}

#[test]
fn handles_stay_valid_while_the_file_lives_and_across_a_remount() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    sh(&format!("mkdir {m}/d && echo file > {m}/d/f && echo other > {m}/g && ln -s f {m}/d/s"));
    let file = name_to_handle(&v.path("d/f")).unwrap();
    let dir = name_to_handle(&v.path("d")).unwrap();
    let doomed = name_to_handle(&v.path("g")).unwrap();
    assert_eq!(read_by_handle(&v.mnt, &file).unwrap(), "file\n", "cached");
    drop_caches();
    assert_eq!(read_by_handle(&v.mnt, &file).unwrap(), "file\n", "after the kernel forgot the inode");
    assert!(open_by_handle(&v.mnt, &dir).unwrap().metadata().unwrap().is_dir());
    v.remount();
    drop_caches();
    assert_eq!(read_by_handle(&v.mnt, &file).unwrap(), "file\n", "after a remount");
    assert_eq!(read_by_handle(&v.mnt, &doomed).unwrap(), "other\n");

    // Deleted: stale, even once its inode number is in use again (the
    // generation differs).
    sh(&format!("rm {m}/g"));
    drop_caches();
    let e = open_by_handle(&v.mnt, &doomed).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
    sh(&format!("for i in $(seq 20); do echo new > {m}/n$i; done"));
    drop_caches();
    let e = open_by_handle(&v.mnt, &doomed).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "a reused number is not the old file: {e}");
    v.umount();
}

/// Why the kernel NFS server cannot be used here, if it cannot: Err when
/// the kernel was built without it (nothing to install: the test does not
/// apply, and says so), Ok(Some) when its tools are missing (what
/// scripts/install-deps installs: the test cannot run, see
/// `common::skip`).
fn nfs_missing() -> Result<Option<String>, String> {
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let has = |name: &str| {
        fs.lines().any(|l| l.split_whitespace().last() == Some(name))
            || sh_output(&format!("modprobe {name} 2>/dev/null")).status.success()
    };
    if !has("nfsd") {
        return Err("the kernel has no NFS server (nfsd)".into());
    }
    if !has("nfs4") && !has("nfs") {
        return Err("the kernel has no NFS client".into());
    }
    for tool in ["exportfs", "rpc.nfsd", "rpc.mountd", "mount.nfs"] {
        if !sh_output(&format!("command -v {tool} || test -x /usr/sbin/{tool} || test -x /sbin/{tool}"))
            .status
            .success()
        {
            return Ok(Some(format!("{tool} is missing (Debian's nfs-kernel-server)")));
        }
    }
    Ok(None)
}

/// The NFS server started for a test, stopped when dropped.
struct NfsExport {
    export: String,
    client: String,
}

impl Drop for NfsExport {
    fn drop(&mut self) {
        let _ = sh_output(&format!("umount -f -l {}", self.client));
        let _ = sh_output(&format!("exportfs -u 127.0.0.1:{}", self.export));
        let _ = sh_output("rpc.nfsd 0");
    }
}

#[test]
fn a_mount_exported_over_nfs_serves_files_through_forgotten_inodes() {
    match nfs_missing() {
        Ok(None) => {}
        Ok(Some(why)) => {
            common::skip(&format!("NFS export test: {why}"));
            return;
        }
        // The same kernel path (exportfs decoding a handle) is what the
        // open_by_handle_at test above takes, on every kernel.
        Err(why) => {
            println!("NOT APPLICABLE: NFS export test: {why}");
            return;
        }
    }
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let client = v.dir.path().join("nfs");
    std::fs::create_dir(&client).unwrap();
    let nfs = NfsExport { export: v.m().to_string(), client: client.to_str().unwrap().to_string() };
    // A FUSE mount has no device number NFS can name: fsid= gives it one.
    let started = sh_output(&format!(
        "(mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd) && \
         exportfs -o rw,sync,no_root_squash,no_subtree_check,fsid=4242 127.0.0.1:{e} && \
         (pgrep -x rpc.mountd >/dev/null || rpc.mountd) && rpc.nfsd 4 && \
         mount -t nfs -o vers=4.2,soft,timeo=50 127.0.0.1:{e} {c}",
        e = nfs.export,
        c = nfs.client
    ));
    if !started.status.success() {
        common::skip(&format!(
            "NFS export test: the NFS server would not start: {}",
            String::from_utf8_lossy(&started.stderr)
        ));
        return;
    }
    let (m, c) = (v.m().to_string(), nfs.client.clone());
    sh(&format!("mkdir {c}/d && echo from-nfs > {c}/d/f && sync"));
    assert_eq!(sh(&format!("cat {m}/d/f")), "from-nfs\n", "written over NFS, read locally");
    sh(&format!("echo local > {m}/d/g"));
    drop_caches();
    std::thread::sleep(Duration::from_millis(200));
    // The server resolves the client's handles through inodes it forgot.
    assert_eq!(sh(&format!("cat {c}/d/g {c}/d/f")), "local\nfrom-nfs\n");
    sh(&format!("rm {c}/d/f && ls {c}/d"));
    assert!(!v.path("d/f").exists());
    drop(nfs);
    v.umount();
}
