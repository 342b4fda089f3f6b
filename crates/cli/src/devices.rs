//! Opening the two devices of a volume, with errors a person can act on.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use dualfs_engine::device::{BlockDevice, FileDevice};
use dualfs_engine::error::DeviceRole;

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

pub fn open_one(path: &Path, role: DeviceRole, access: Access) -> Result<Arc<dyn BlockDevice>> {
    let (read_only, exclusive) = match access {
        Access::Exclusive => (false, true),
        Access::ExclusiveReadOnly => (true, true),
        Access::Shared => (true, false),
    };
    let mut waiting = crate::holder::Wait::new(path);
    loop {
        // The data device of a writable open bypasses the page cache
        // (FileDevice::open_direct); the log keeps the kernel's caching of
        // its blocks, which its own cache is sized against.
        let opened = if exclusive && !read_only && role == DeviceRole::Data {
            FileDevice::open_direct(path, read_only, exclusive)
        } else {
            FileDevice::open(path, read_only, exclusive)
        };
        match opened {
            Ok(d) if exclusive => {
                waiting.done();
                return crate::claim::claim(path, Arc::new(d));
            }
            Ok(d) => {
                waiting.done();
                return Ok(Arc::new(d));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => waiting.turn(&role.to_string())?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                bail!("{} ({role}): no such file or device", path.display())
            }
            Err(e) => return Err(e).with_context(|| format!("cannot open {} ({role})", path.display())),
        }
    }
}

/// Whether an open failed because the device or file may not be written.
fn write_refused(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<io::Error>())
        .any(|io| matches!(io.raw_os_error(), Some(libc::EACCES | libc::EROFS | libc::EPERM)))
}

/// A volume's two devices, opened: meta-data, data.
pub type DevicePair = (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>);

/// Opens the devices for a mount: read-write under the lock even when the
/// mount is read-only (nothing is written then), so that it can be
/// remounted read-write later; read-only when writing is refused (a
/// write-protected device, an image without write permission). Returns
/// whether the devices can be written.
///
/// # Errors
/// As [`open_pair`].
pub fn open_pair_for_mount(meta: &Path, data: &Path, read_only: bool) -> Result<(DevicePair, bool)> {
    match open_pair(meta, data, Access::Exclusive) {
        Ok(pair) => Ok((pair, true)),
        Err(e) if read_only && write_refused(&e) => Ok((open_pair(meta, data, Access::ExclusiveReadOnly)?, false)),
        Err(e) => Err(e),
    }
}

/// The two devices a command line names: META and DATA, each a path,
/// `UUID=…` or `LABEL=…`; or, without DATA, one SOURCE as fstab names it
/// (`META#DATA`, a tag, or one device whose partner is found by scanning).
///
/// # Errors
/// A tag or partner is not found; one SOURCE that names neither.
pub fn named(meta: &Path, data: Option<&Path>) -> Result<(PathBuf, PathBuf)> {
    match data {
        Some(d) => Ok((
            crate::find::device(meta, dualfs_engine::format::superblock::Role::Meta)?,
            crate::find::device(d, dualfs_engine::format::superblock::Role::Data)?,
        )),
        None => split_source(&meta.to_string_lossy(), None),
    }
}

/// SOURCE names both devices: `META#DATA`, or `META:DATA` when neither
/// path contains a colon, or just `META` with `-o data=DATA`. Either side
/// may be `UUID=…` or `LABEL=…`, and SOURCE may be one tag or one device
/// alone, whose partner is then looked for among the block devices.
///
/// Splits SOURCE into the two device paths, looking tags up.
///
/// # Errors
/// A SOURCE that does not name both devices, a tag no device answers to,
/// or one device whose partner is not found.
pub fn split_source(source: &str, data_option: Option<&str>) -> Result<(PathBuf, PathBuf)> {
    let pair = |m: &str, d: &str| -> Result<(PathBuf, PathBuf)> {
        Ok((
            crate::find::device(Path::new(m), dualfs_engine::format::superblock::Role::Meta)?,
            crate::find::device(Path::new(d), dualfs_engine::format::superblock::Role::Data)?,
        ))
    };
    if let Some(data) = data_option {
        return pair(source, data);
    }
    if let Some((m, d)) = source.split_once('#') {
        return pair(m, d);
    }
    let colons: Vec<_> = source.match_indices(':').collect();
    if let [(i, _)] = colons[..]
        && crate::find::Tag::parse(source).is_none()
    {
        return pair(&source[..i], &source[i + 1..]);
    }
    if crate::find::Tag::parse(source).is_some() || Path::new(source).exists() {
        return crate::find::both(source);
    }
    bail!(
        "the source {source:?} must name both devices: META#DATA (or META:DATA), META with -o data=DATA, UUID=… or LABEL=…"
    )
}

/// Opens the meta-data and data devices of a volume.
///
/// # Errors
/// A path does not exist, is the other path, or is locked by a mount.
pub fn open_pair(meta: &Path, data: &Path, access: Access) -> Result<DevicePair> {
    check_distinct(meta, data)?;
    let m = open_one(meta, DeviceRole::Meta, access)?;
    let d = open_one(data, DeviceRole::Data, access)?;
    Ok((m, d))
}

/// The data device's superblock when it names a mirror in sync: writing
/// such a volume takes both meta-data copies.
pub fn mirror_in_sync(data: &dyn BlockDevice) -> Option<dualfs_engine::format::superblock::Superblock> {
    let raw = dualfs_engine::device::read(data, DeviceRole::Data, 0, 1).ok()?;
    dualfs_engine::format::superblock::Superblock::decode(&raw)
        .ok()
        .filter(|sb| sb.mirrored() && sb.mirror_state != dualfs_engine::format::superblock::MIRROR_DEGRADED)
}

/// Opens the volume on `meta` and `data` for a command run on it unmounted,
/// failing with "cannot open META and DATA: why". A mirrored meta-data
/// device is opened with its second copy, found among the block devices as
/// a mount finds it, so that what the command writes reaches both copies
/// (the engine refuses to write one copy of a mirror in sync); a read-only
/// open reads `meta` alone.
///
/// # Errors
/// The devices cannot be opened, the mirror's second copy is not found or
/// does not pair, or the volume does not open.
pub fn open_volume(
    meta: &Path,
    data: &Path,
    access: Access,
    options: dualfs_engine::volume::MountOptions,
) -> Result<dualfs_engine::Volume> {
    use dualfs_engine::Volume;
    let cannot =
        |e: &dyn std::fmt::Display| anyhow::anyhow!("cannot open {} and {}: {e}", meta.display(), data.display());
    let (m, d) = open_pair(meta, data, access)?;
    let Some(dsb) = mirror_in_sync(d.as_ref()).filter(|_| !options.read_only) else {
        return Volume::open(m, d, options).map_err(|e| cannot(&e));
    };
    let second = crate::find::mirror_copy(meta, &dsb, "-o mirror=DEV on a mount, and run the command on the mount")
        .map_err(|e| cannot(&format!("{e:#}")))?;
    check_distinct(meta, &second)?;
    check_distinct(&second, data)?;
    let c = open_one(&second, DeviceRole::Meta, access)?;
    let assembled = Volume::assemble_meta(&[m, c], &d, false, true)
        .map_err(|e| cannot(&format!("{e} (the second copy found among the block devices: {})", second.display())))?;
    Volume::open_assembled(assembled, d, options).map_err(|e| cannot(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_name_both_devices() {
        let (m, d) = split_source("/v/meta.img#/v/data.img", None).unwrap();
        assert_eq!((m.to_str(), d.to_str()), (Some("/v/meta.img"), Some("/v/data.img")));
        let (m, d) = split_source("/dev/sdb1:/dev/sdc1", None).unwrap();
        assert_eq!((m.to_str(), d.to_str()), (Some("/dev/sdb1"), Some("/dev/sdc1")));
        let (m, d) = split_source("/dev/disk/by-path/pci-0:1", Some("/d")).unwrap();
        assert_eq!((m.to_str(), d.to_str()), (Some("/dev/disk/by-path/pci-0:1"), Some("/d")));
        assert!(split_source("/dev/sdb1", None).is_err());
        assert!(split_source("a:b:c", None).is_err());
    }
}
