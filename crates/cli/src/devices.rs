//! Opening the two devices of a volume, with errors a person can act on.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use dualfs_engine::device::{BlockDevice, FileDevice};

/// How the devices are opened.
#[derive(Clone, Copy, Debug)]
pub enum Access {
    /// Read and write, locked against every other dualfs process.
    Exclusive,
    /// Read and write under the lock, but nothing is written (ro mount).
    ExclusiveReadOnly,
    /// Read only, without the lock: inspecting a mounted volume is allowed.
    Shared,
}

fn examine(path: &Path) -> Result<std::fs::Metadata> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            bail!("{}: no such file or device", path.display())
        }
        Err(e) => Err(e).with_context(|| format!("cannot examine {}", path.display())),
    }
}

/// Refuses a pair that is one file or one device under two names.
///
/// # Errors
/// The same file twice, or a path that cannot be examined.
pub fn check_distinct(meta: &Path, data: &Path) -> Result<()> {
    let m = examine(meta)?;
    let d = examine(data)?;
    let same_file = m.dev() == d.dev() && m.ino() == d.ino();
    let same_device = m.file_type().is_block_device() && d.file_type().is_block_device() && m.rdev() == d.rdev();
    if same_file || same_device {
        bail!(
            "{} and {} are the same {}: DualFS needs two different devices or image files",
            meta.display(),
            data.display(),
            if same_device { "device" } else { "file" }
        );
    }
    Ok(())
}

fn open_one(path: &Path, role: &str, access: Access) -> Result<Arc<dyn BlockDevice>> {
    let (read_only, exclusive) = match access {
        Access::Exclusive => (false, true),
        Access::ExclusiveReadOnly => (true, true),
        Access::Shared => (true, false),
    };
    match FileDevice::open(path, read_only, exclusive) {
        Ok(d) if exclusive => crate::claim::claim(path, Arc::new(d)),
        Ok(d) => Ok(Arc::new(d)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => bail!(
            "the volume is already mounted or in use: {} ({role}) is locked by another dualfs process",
            path.display()
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            bail!("{} ({role}): no such file or device", path.display())
        }
        Err(e) => Err(e).with_context(|| format!("cannot open {} ({role})", path.display())),
    }
}

/// Opens the meta-data and data devices of a volume.
///
/// # Errors
/// A path does not exist, is the other path, or is locked by a mount.
pub fn open_pair(meta: &Path, data: &Path, access: Access) -> Result<(Arc<dyn BlockDevice>, Arc<dyn BlockDevice>)> {
    check_distinct(meta, data)?;
    let m = open_one(meta, "meta-data device", access)?;
    let d = open_one(data, "data device", access)?;
    Ok((m, d))
}
