//! One mount per volume, whatever path reaches it; mkfs never writes to a
//! device in use.
//!
//! An advisory lock on the path a command was given protects only that
//! path: the same image file can also be reached through a loop device
//! over it, and the same block device through any of its device nodes.
//! So a command that writes claims every name of the storage:
//!
//! - a block device: an exclusive open (`O_EXCL`), which the kernel refuses
//!   while the device is mounted, claimed by another exclusive opener
//!   (device mapper, md, another DualFS mount through another node) or
//!   held by a file system;
//! - a loop device: that, and a lock on the file behind it;
//! - an image file: its lock, and a lock on every loop device over it.
//!
//! The claims live as long as the [`Claimed`] device that holds them.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Result, bail};
use dualfs_engine::device::BlockDevice;

/// A device with the claims that keep every other writer away from it.
#[derive(Debug)]
pub struct Claimed {
    inner: Arc<dyn BlockDevice>,
    /// Held open for their locks and exclusive opens; never read.
    _holds: Vec<File>,
}

impl BlockDevice for Claimed {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn refresh_block_count(&self) -> std::io::Result<u64> {
        self.inner.refresh_block_count()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_blocks(first, buf)
    }

    fn copies(&self) -> usize {
        self.inner.copies()
    }

    fn read_checked(&self, first: u64, buf: &mut [u8], right: &dyn Fn(usize, &[u8]) -> bool) -> io::Result<()> {
        self.inner.read_checked(first, buf, right)
    }

    fn will_need(&self, first: u64, count: u64) {
        self.inner.will_need(first, count);
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        self.inner.write_blocks(first, buf)
    }

    fn write_blocks_vectored(&self, first: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.inner.write_blocks_vectored(first, bufs)
    }

    fn write_runs(&self, runs: &[(u64, &[&[u8]])]) -> std::result::Result<(), (u64, io::Error)> {
        self.inner.write_runs(runs)
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }

    fn discard(&self, first: u64, count: u64) -> io::Result<()> {
        self.inner.discard(first, count)
    }
}

/// Loop devices and the files behind them, from /sys/block.
fn loop_devices() -> Vec<(PathBuf, PathBuf)> {
    let Ok(dir) = std::fs::read_dir("/sys/block") else { return Vec::new() };
    dir.filter_map(|e| {
        let name = e.ok()?.file_name().into_string().ok()?;
        let backing = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).ok()?;
        Some((PathBuf::from(format!("/dev/{name}")), PathBuf::from(backing.trim_end())))
    })
    .collect()
}

/// The file behind the loop device with device number `rdev`, if it is one.
pub(crate) fn backing_file(rdev: u64) -> Option<PathBuf> {
    let (major, minor) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
    let link = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    let name = link.file_name()?.to_str()?.to_string();
    let backing = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).ok()?;
    Some(PathBuf::from(backing.trim_end()))
}

/// Loop devices over the file `meta` describes.
fn loops_over(meta: &std::fs::Metadata) -> Vec<PathBuf> {
    loop_devices()
        .into_iter()
        .filter(|(_, file)| std::fs::metadata(file).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino()))
        .map(|(dev, _)| dev)
        .collect()
}

/// Opens `path` exclusively (a block device: `O_EXCL`, which conflicts
/// with mounts and other exclusive openers, not with our own plain open)
/// or takes its lock (a file); `what` names it in a refusal.
fn hold(path: &Path, block_device: bool, what: &str) -> Result<Option<File>> {
    let mut o = OpenOptions::new();
    o.read(true);
    if block_device {
        o.custom_flags(libc::O_EXCL);
    }
    let f = match o.open(path) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            bail!("{} is in use ({what}): it is mounted or held by another program", path.display())
        }
        // A name we may not open is one no other user of ours can write
        // through either; the kernel's checks still apply to it.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok(None),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot open {}", path.display()))),
    };
    if block_device {
        return Ok(Some(f));
    }
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "the volume is already mounted or in use: {} ({what}) is locked by another dualfs process",
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(anyhow::Error::new(e).context(format!("cannot lock {}", path.display())))
        }
    }
}

/// Claims every name of the storage at `path` (see the module docs) and
/// wraps `dev` with the claims.
///
/// # Errors
/// The storage is in use through another name.
pub fn claim(path: &Path, dev: Arc<dyn BlockDevice>) -> Result<Arc<dyn BlockDevice>> {
    let meta = std::fs::metadata(path)?;
    let mut holds = Vec::new();
    if meta.file_type().is_block_device() {
        holds.extend(hold(path, true, "a block device")?);
        if let Some(file) = backing_file(meta.rdev()) {
            holds.extend(hold(&file, false, &format!("the file behind {}", path.display()))?);
        }
    } else if meta.is_file() {
        for lo in loops_over(&meta) {
            holds.extend(hold(&lo, true, &format!("a loop device over {}", path.display()))?);
        }
    }
    Ok(Arc::new(Claimed { inner: dev, _holds: holds }))
}

/// Whether what [`claim`] takes for the storage at `path` is free now: no
/// exclusive opener of a block device, no lock on the file behind a loop
/// device or on an image file. `dualfs umount` waits for it, so that a
/// mount right after finds the volume free.
#[must_use]
pub fn is_free(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else { return true };
    if meta.file_type().is_block_device() {
        if hold(path, true, "a block device").is_err() {
            return false;
        }
        return backing_file(meta.rdev()).is_none_or(|file| hold(&file, false, "the file behind it").is_ok());
    }
    hold(path, false, "an image file").is_ok()
}

/// Refuses storage that is in use through any name: mounted, held by
/// another program, a file with a loop device over it, or locked by a
/// DualFS process. mkfs asks this whatever `--force` says.
///
/// # Errors
/// The storage is in use; the message says how.
pub fn refuse_in_use(path: &Path) -> Result<()> {
    let Ok(meta) = std::fs::metadata(path) else { return Ok(()) };
    if meta.is_file() {
        let loops = loops_over(&meta);
        if let Some(lo) = loops.first() {
            bail!(
                "{} is in use: loop device {} is set up over it (detach it with `losetup -d {}` first)",
                path.display(),
                lo.display(),
                lo.display()
            );
        }
    }
    let held = hold(path, meta.file_type().is_block_device(), "the device mkfs would write")?;
    drop(held);
    Ok(())
}
