//! The requests' work, transport-neutral: one method of [`DualFs`] per
//! kernel request, each a call into the engine and an answer in the types
//! of [`crate::answers`]. Each method counts and times its request
//! ([`crate::requests`]) and logs the engine errors an administrator must
//! hear about, so that every transport does both alike.
//!
//! - `names.rs`: LOOKUP, FORGET, GETATTR, SETATTR, the directory changes,
//!   READDIR(PLUS), STATFS;
//! - `files.rs`: OPEN to COPY_FILE_RANGE, the requests on open files;
//! - `fileattr.rs`: the inode flags' IOCTLs (chattr, lsattr);
//! - `xattrs.rs`: the extended attributes, ACLs and the control interface;
//! - `trim.rs`: FITRIM;
//! - `fsctl.rs`: the volume's label and shutdown ioctls.

mod fileattr;
mod files;
mod fsctl;
mod names;
mod trim;
mod xattrs;

use std::sync::atomic::Ordering;

use dualfs_engine::Error;
use dualfs_engine::volume::Creds;

use crate::answers::{Caller, Errno, init};
use crate::{DualFs, convert};

pub use names::SetAttrIn;
pub use trim::FITRIM;

/// Capabilities asked of the kernel, each for a reason:
/// writeback caching (large, merged writes), readdirplus (one round trip
/// for `ls -l`, adaptively), parallel lookups in one directory (the engine
/// is thread-safe), cached symlink targets (they never change),
/// lookups of `.`/`..` for NFS export (inode numbers and generations are
/// stable across mounts), and POSIX ACLs: the kernel checks them and the
/// engine keeps them, which needs the umask unapplied (a directory's
/// default ACL replaces it).
const WANTED: [(u64, &str); 10] = [
    (init::FUSE_POSIX_ACL, "FUSE_POSIX_ACL"),
    (init::FUSE_DONT_MASK, "FUSE_DONT_MASK"),
    (init::FUSE_WRITEBACK_CACHE, "FUSE_WRITEBACK_CACHE"),
    (init::FUSE_DO_READDIRPLUS, "FUSE_DO_READDIRPLUS"),
    (init::FUSE_READDIRPLUS_AUTO, "FUSE_READDIRPLUS_AUTO"),
    (init::FUSE_PARALLEL_DIROPS, "FUSE_PARALLEL_DIROPS"),
    (init::FUSE_CACHE_SYMLINKS, "FUSE_CACHE_SYMLINKS"),
    (init::FUSE_EXPORT_SUPPORT, "FUSE_EXPORT_SUPPORT"),
    // We drop set-id bits and file capabilities on write, truncate and
    // chown ourselves; in return the kernel stops asking for
    // security.capability before every write (it sets SB_NOSEC).
    (init::FUSE_HANDLE_KILLPRIV_V2, "FUSE_HANDLE_KILLPRIV_V2"),
    // Files opened for direct I/O on a nearly full volume (see `open`) can
    // still be mapped (kernel 6.6 and later; older kernels refuse mmap).
    (init::FUSE_DIRECT_IO_ALLOW_MMAP, "FUSE_DIRECT_IO_ALLOW_MMAP"),
];

/// The creator of a new inode. The kernel sends the mode unmasked
/// (FUSE_DONT_MASK) with the umask beside it; the engine applies one or the
/// directory's default ACL. A kernel that masked already loses nothing by
/// masking twice.
fn creds(caller: Caller, umask: u32) -> Creds {
    Creds { uid: caller.uid, gid: caller.gid, umask: umask & 0o777 }
}

/// Logs errors the kernel's caller will only see as an errno but an
/// administrator must hear about (I/O, corruption, a volume gone read-only).
pub(crate) fn report(op: &str, e: &Error) -> Errno {
    match e {
        Error::NoSpace(role) => warn_no_space(op, e, *role),
        Error::Io { .. } | Error::Corrupt { .. } => log::error!("{op}: {e}"),
        Error::ReadOnly(why) if why.contains("after an error") => log::warn!("{op}: {e}"),
        _ => log::debug!("{op}: {e}"),
    }
    convert::errno(e)
}

/// When ENOSPC was last logged (seconds since the epoch), per device: a
/// full device fails every write, and one line every ten seconds says it.
static NO_SPACE_LOGGED: [std::sync::atomic::AtomicU64; 2] =
    [std::sync::atomic::AtomicU64::new(0), std::sync::atomic::AtomicU64::new(0)];

fn warn_no_space(op: &str, e: &Error, role: dualfs_engine::error::DeviceRole) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let slot = &NO_SPACE_LOGGED[usize::from(role == dualfs_engine::error::DeviceRole::Meta)];
    let last = slot.load(Ordering::Relaxed);
    if now >= last + 10 && slot.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        log::warn!("{op}: {e}: {}", dualfs_engine::volume::no_space_advice(role));
    } else {
        log::debug!("{op}: {e}");
    }
}

impl DualFs {
    /// INIT: the capabilities to ask of a kernel that offers `offered`
    /// (`flags | flags2 << 32`), noting what it grants. Call once, before
    /// any other request.
    pub fn negotiate(&self, offered: u64) -> u64 {
        let mut wanted = 0;
        for (cap, name) in WANTED {
            if cap == init::FUSE_WRITEBACK_CACHE && !self.options.writeback_cache {
                continue;
            }
            if offered & cap == cap {
                wanted |= cap;
                if cap == init::FUSE_POSIX_ACL {
                    self.acl.store(true, Ordering::Relaxed);
                }
            } else {
                log::info!("the kernel does not offer {name}; going on without it");
                if cap == init::FUSE_WRITEBACK_CACHE {
                    // Then the engine owns the times of writes and truncations.
                    self.writeback.store(false, Ordering::Relaxed);
                }
            }
        }
        wanted
    }

    /// The largest WRITE to ask the kernel for (INIT's `max_write`).
    #[must_use]
    pub fn max_write(&self) -> u32 {
        self.options.max_write
    }

    /// Whether the kernel caches writes (known after INIT).
    pub(crate) fn writeback(&self) -> bool {
        self.writeback.load(Ordering::Relaxed)
    }

    /// DESTROY, or the end of the session: what runs in the background and
    /// holds the volume ends, so that the volume can be closed.
    pub fn shutdown(&self) {
        self.control.shutdown();
        self.receiver.shutdown();
        self.scrubber.shutdown();
    }

    /// Makes the kernel forget the attributes it caches of `node` when the
    /// volume changed them behind a request that does not say so (the
    /// set-id bits dropped by a write or fallocate), so that the next stat
    /// asks. Only the attributes: offset -1 leaves the page cache alone.
    pub(crate) fn attributes_changed(&self, node: u64, changed: bool) {
        if !changed {
            return;
        }
        if let Some(n) = self.notifier.get()
            && let Err(e) = n.inval_inode(node, -1, 0)
        {
            log::debug!("cannot invalidate the attributes of inode {node}: {e}");
        }
    }
}
