//! `dualfs sync [MOUNTPOINT...]`: make everything written to a mounted
//! volume durable, as `sync` does for a kernel file system.
//!
//! sync(2) and syncfs(2) write the kernel's cached pages to a FUSE server,
//! but mainline Linux asks only virtiofs to make them durable (it sends
//! FUSE_SYNCFS to nobody else), so on DualFS they end in the volume's
//! memory, durable at its next commit. This command first has the kernel
//! write its cached pages of the mount (syncfs), then asks the serving
//! process, through the `dualfs.sync` control attribute, to commit and
//! checkpoint; it returns once both devices have flushed.
//!
//! A user who may not write the mount's root directory (the kernel's
//! check on the control attribute) gets an fsync of the root instead,
//! which commits everything too, without the checkpoint.

use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rustix::fs::XattrFlags;

use crate::args::SyncArgs;
use crate::mountinfo::{find, parse_mountinfo};

/// How one mount point was synced.
#[derive(Debug, PartialEq, Eq)]
pub enum Synced {
    /// Committed and checkpointed.
    Checkpoint,
    /// Committed (the caller may not use the control attribute).
    Commit,
    /// Mounted read-only: nothing to commit (as sync(1) says of a
    /// read-only file system).
    ReadOnly,
}

/// Syncs the DualFS volume mounted at `root` (canonical).
///
/// # Errors
/// The kernel's write-back or the volume's commit failed.
pub fn sync_mount(root: &Path) -> Result<Synced> {
    let dir = File::open(root).with_context(|| format!("cannot open {}", root.display()))?;
    rustix::fs::syncfs(dir.as_fd())
        .with_context(|| format!("writing the kernel's cached data of {} failed", root.display()))?;
    match rustix::fs::setxattr(root, dualfs_fuse::control::SYNC, b"1", XattrFlags::empty()) {
        Ok(()) => Ok(Synced::Checkpoint),
        Err(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM) => {
            dir.sync_all().with_context(|| format!("committing {} failed", root.display()))?;
            Ok(Synced::Commit)
        }
        // The kernel refuses the attribute on a read-only mount, which
        // holds nothing to commit. A volume turned read-only by a failed
        // write is not mounted read-only: its EROFS stays an error.
        Err(rustix::io::Errno::ROFS)
            if rustix::fs::statvfs(root).is_ok_and(|s| s.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY)) =>
        {
            Ok(Synced::ReadOnly)
        }
        Err(e) => bail!("syncing {}: {}", root.display(), std::io::Error::from(e)),
    }
}

/// Every DualFS mount of this mount namespace.
fn all_mounts() -> Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").context("cannot read /proc/self/mountinfo")?;
    Ok(parse_mountinfo(&text).into_iter().filter(|e| e.fstype == "fuse.dualfs").map(|e| e.mountpoint).collect())
}

/// A FUSE mount whose serving process has gone answers ENOTCONN.
fn abandoned(root: &Path) -> bool {
    crate::itself::is_dead_mount(root)
}

/// Runs `dualfs sync`.
///
/// # Errors
/// A mount point is not DualFS, or syncing it failed.
pub fn run(args: &SyncArgs) -> Result<()> {
    let roots = if args.mountpoints.is_empty() {
        all_mounts()?
    } else {
        let mut v = Vec::new();
        for m in &args.mountpoints {
            crate::itself::refuse_dead_mount(m)?;
            let root = std::fs::canonicalize(m).with_context(|| format!("cannot resolve {}", m.display()))?;
            find(&root)?;
            v.push(root);
        }
        v
    };
    let every = args.mountpoints.is_empty();
    let mut failed = Vec::new();
    for root in roots {
        // Syncing every mount passes over one whose serving process is
        // gone (killed, crashed): it holds nothing to sync, and the others
        // are synced; the status then says that not all were.
        if every && abandoned(&root) {
            let _ = writeln!(
                std::io::stderr(),
                "dualfs: {}: its serving process is gone, nothing to sync (`umount {}` removes it)",
                root.display(),
                root.display()
            );
            failed.push(format!("{} (a dead mount: its serving process is gone)", root.display()));
            continue;
        }
        let synced = match sync_mount(&root) {
            Ok(x) => x,
            // Every mount: the others are still synced, and the status says
            // which were not.
            Err(e) if every => {
                let _ = writeln!(std::io::stderr(), "dualfs: {e:#}");
                failed.push(format!("{} ({e:#})", root.display()));
                continue;
            }
            Err(e) => return Err(e),
        };
        match synced {
            Synced::Checkpoint => {
                if args.verbose {
                    say!("{}: committed and checkpointed", root.display());
                }
            }
            Synced::ReadOnly => {
                if args.verbose {
                    say!("{}: mounted read-only, nothing to commit", root.display());
                }
            }
            Synced::Commit => say!(
                "{}: committed (without a checkpoint: only root, the mounting user and those who may write the \
                 mount's root directory may ask for one)",
                root.display()
            ),
        }
    }
    // The others were synced; the caller must know which were not.
    if !failed.is_empty() {
        bail!("not synced: {}", failed.join("; "));
    }
    Ok(())
}
