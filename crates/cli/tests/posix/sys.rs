//! The few system calls the suite needs that neither std nor nix wraps
//! (extended attributes), with errno results like nix's.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in test paths")
}

fn cname(n: &str) -> CString {
    CString::new(n).expect("no NUL in xattr names")
}

fn check(r: isize) -> nix::Result<usize> {
    if r < 0 { Err(Errno::last()) } else { Ok(r.unsigned_abs()) }
}

/// `lsetxattr(2)` (the link itself, not its target).
pub fn set(p: &Path, name: &str, value: &[u8], flags: i32) -> nix::Result<()> {
    let (p, n) = (cpath(p), cname(name));
    // SAFETY: NUL-terminated strings and a live slice, all outliving the call.
    #[allow(unsafe_code)]
    let r = unsafe { libc::lsetxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), flags) };
    check(r as isize).map(|_| ())
}

/// `lgetxattr(2)` into a buffer of `size` bytes; returns the value's length.
pub fn get(p: &Path, name: &str, size: usize) -> nix::Result<usize> {
    let (p, n) = (cpath(p), cname(name));
    let mut buf = vec![0u8; size];
    // SAFETY: as in `set`; the buffer is `size` bytes long.
    #[allow(unsafe_code)]
    let r = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size) };
    check(r)
}

/// `llistxattr(2)` into a buffer of `size` bytes; returns the list's length.
pub fn list(p: &Path, size: usize) -> nix::Result<usize> {
    let p = cpath(p);
    let mut buf = vec![0u8; size];
    // SAFETY: as in `get`.
    #[allow(unsafe_code)]
    let r = unsafe { libc::llistxattr(p.as_ptr(), buf.as_mut_ptr().cast(), size) };
    check(r)
}

/// `lremovexattr(2)`.
pub fn remove(p: &Path, name: &str) -> nix::Result<()> {
    let (p, n) = (cpath(p), cname(name));
    // SAFETY: as in `set`.
    #[allow(unsafe_code)]
    let r = unsafe { libc::lremovexattr(p.as_ptr(), n.as_ptr()) };
    check(r as isize).map(|_| ())
}
