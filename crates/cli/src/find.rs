//! Finding a volume's devices: by `UUID=` or `LABEL=`, or the partner of
//! one device, by reading the superblock of every block device (what
//! blkid does for the file systems it knows; it does not know DualFS).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use dualfs_engine::format::superblock::{Role, SUPER_MAGIC, Superblock};
use dualfs_engine::types::BLOCK_SIZE;

use crate::words::uuid;

/// What a device holds, as far as DualFS is concerned.
#[derive(Debug)]
pub enum Probed {
    /// A DualFS superblock.
    DualFs(Box<Superblock>),
    /// Something else, or nothing.
    Other,
    /// The DualFS magic, but the superblock does not decode.
    Damaged(String),
}

/// Reads block 0 of `path` and decodes it if it is DualFS's.
///
/// # Errors
/// The path cannot be opened or read (a device shorter than a block is
/// `Other`).
pub fn probe(path: &Path) -> Result<Probed> {
    let mut f = File::open(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let mut block = vec![0u8; BLOCK_SIZE];
    let mut got = 0;
    while got < block.len() {
        match f.read(&mut block[got..]) {
            Ok(0) => return Ok(Probed::Other),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => bail!("cannot read {}: {e}", path.display()),
        }
    }
    if block[..4] != SUPER_MAGIC.to_le_bytes() {
        return Ok(Probed::Other);
    }
    Ok(match Superblock::decode(&block) {
        Ok(sb) => Probed::DualFs(Box::new(sb)),
        Err(e) => Probed::Damaged(e.0),
    })
}

/// The block devices to search: every one /proc/partitions lists (disks,
/// partitions, loop and device-mapper devices) that has a node in /dev.
#[must_use]
pub fn block_devices() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/partitions").unwrap_or_default();
    text.lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().nth(3))
        .map(|name| Path::new("/dev").join(name))
        .filter(|p| p.exists())
        .collect()
}

/// Every DualFS device among the block devices.
#[must_use]
pub fn dualfs_devices() -> Vec<(PathBuf, Superblock)> {
    block_devices()
        .into_iter()
        .filter_map(|p| match probe(&p) {
            Ok(Probed::DualFs(sb)) => Some((p, *sb)),
            _ => None,
        })
        .collect()
}

/// `UUID=…` or `LABEL=…` (either case: mount(8) resolves the upper-case
/// tags itself, through blkid, before it runs a helper, so fstab spells
/// them `uuid=` and `label=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    /// A volume UUID, or one device's own UUID.
    Uuid(String),
    /// The volume's label.
    Label(String),
}

impl Tag {
    /// Reads a tag, if `spec` is one.
    #[must_use]
    pub fn parse(spec: &str) -> Option<Tag> {
        let (name, value) = spec.split_once('=')?;
        match name.to_ascii_uppercase().as_str() {
            "UUID" => Some(Tag::Uuid(value.to_string())),
            "LABEL" => Some(Tag::Label(value.to_string())),
            _ => None,
        }
    }

    /// Whether a device with superblock `sb` answers to the tag.
    #[must_use]
    pub fn matches(&self, sb: &Superblock) -> bool {
        match self {
            Tag::Uuid(u) => {
                let want = normal_uuid(u);
                let own = match sb.role {
                    Role::Meta => sb.meta_uuid,
                    Role::Data => sb.data_uuid,
                };
                [sb.volume_uuid, own].iter().any(|x| normal_uuid(&uuid(x)) == want)
            }
            Tag::Label(l) => sb.label_str() == *l,
        }
    }
}

impl std::fmt::Display for Tag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tag::Uuid(u) => write!(f, "UUID={u}"),
            Tag::Label(l) => write!(f, "LABEL={l}"),
        }
    }
}

/// A UUID without dashes, in lower case, for comparisons.
fn normal_uuid(s: &str) -> String {
    s.chars().filter(|c| *c != '-').map(|c| c.to_ascii_lowercase()).collect()
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Meta => "meta-data",
        Role::Data => "data",
    }
}

/// The one device among `devices` in `role` that answers to `tag`.
///
/// # Errors
/// None does, or several do.
pub fn pick(devices: &[(PathBuf, Superblock)], tag: &Tag, role: Role) -> Result<PathBuf> {
    let found: Vec<&PathBuf> =
        devices.iter().filter(|(_, sb)| sb.role == role && tag.matches(sb)).map(|(p, _)| p).collect();
    match found[..] {
        [p] => Ok(p.clone()),
        [] => bail!(
            "no DualFS {} device with {tag} among the block devices (`dualfs probe` lists those it finds)",
            role_name(role)
        ),
        _ => bail!(
            "several DualFS {} devices answer to {tag}: {} (name one by its path)",
            role_name(role),
            found.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The device in `role` of the volume `sb` belongs to, found among `devices`.
///
/// # Errors
/// None is found, or several are.
pub fn partner(devices: &[(PathBuf, Superblock)], sb: &Superblock, role: Role) -> Result<PathBuf> {
    pick(devices, &Tag::Uuid(uuid(&sb.volume_uuid)), role)
}

/// A device argument: a path, or a tag to look up among the block devices
/// for the device in `role`.
///
/// # Errors
/// The tag matches no device, or several.
pub fn device(spec: &Path, role: Role) -> Result<PathBuf> {
    let text = spec.to_string_lossy();
    match Tag::parse(&text) {
        Some(tag) if !spec.exists() => pick(&dualfs_devices(), &tag, role),
        _ => Ok(spec.to_path_buf()),
    }
}

/// Both devices of a volume named by one tag (`UUID=`, `LABEL=`) or by one
/// of its devices.
///
/// # Errors
/// The tag or the device's partner is not found, or `spec` names a device
/// that is not DualFS.
pub fn both(spec: &str) -> Result<(PathBuf, PathBuf)> {
    let devices = dualfs_devices();
    if let Some(tag) = Tag::parse(spec)
        && !Path::new(spec).exists()
    {
        return Ok((pick(&devices, &tag, Role::Meta)?, pick(&devices, &tag, Role::Data)?));
    }
    let path = PathBuf::from(spec);
    match probe(&path)? {
        Probed::DualFs(sb) => {
            // The device itself is among `devices` when it is a block
            // device; an image file is not, and is taken as given.
            let other = partner(&devices, &sb, if sb.role == Role::Meta { Role::Data } else { Role::Meta })?;
            Ok(if sb.role == Role::Meta { (path, other) } else { (other, path) })
        }
        Probed::Damaged(why) => bail!("{spec}: a damaged DualFS superblock ({why})"),
        Probed::Other => bail!("{spec} is not a DualFS device"),
    }
}

/// The block devices /sys/class/block lists (every disk, partition, loop
/// and device-mapper device the kernel has) that have a node in /dev.
///
/// # Errors
/// /sys/class/block cannot be read.
pub fn sys_block_devices() -> Result<Vec<PathBuf>> {
    let dir = Path::new("/sys/class/block");
    let entries = std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("cannot list {}: {e}", dir.display()))?;
    let mut out: Vec<PathBuf> =
        entries.filter_map(|e| e.ok()).map(|e| Path::new("/dev").join(e.file_name())).filter(|p| p.exists()).collect();
    out.sort();
    Ok(out)
}

/// Whether `candidate` is the device or file `meta` itself: the same
/// path, the same block device, or a loop device over the file.
fn same_device(candidate: &Path, meta: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(c), Ok(m)) = (std::fs::canonicalize(candidate), std::fs::canonicalize(meta)) else { return false };
    if c == m {
        return true;
    }
    let (Ok(cm), Ok(mm)) = (std::fs::metadata(&c), std::fs::metadata(&m)) else { return false };
    let block = |x: &std::fs::Metadata| std::os::unix::fs::FileTypeExt::is_block_device(&x.file_type());
    if block(&cm) && block(&mm) && cm.rdev() == mm.rdev() {
        return true;
    }
    // A loop device over META's file, or over the file META's loop is.
    let over = backing(&c);
    over.is_some() && (over.as_ref() == Some(&m) || over == backing(&m))
}

/// The file a loop device reads, canonical.
fn backing(dev: &Path) -> Option<PathBuf> {
    let name = dev.file_name()?;
    let b = std::fs::read_to_string(Path::new("/sys/class/block").join(name).join("loop/backing_file")).ok()?;
    std::fs::canonicalize(b.trim()).ok()
}

/// The second copy of the mirrored meta-data device `meta`, whose volume's
/// data device has the superblock `d`, found among the block devices as
/// `btrfs device scan` finds a volume's devices: a meta-data device of
/// the same volume (its volume and meta-data UUIDs) that is neither `meta`
/// nor a loop device over it. Of several, the one naming the newest mirror
/// generation; whether it is in sync is for the mount to judge. `name_it`
/// says how to name the copy instead ("-o mirror=DEV").
///
/// # Errors
/// The block devices cannot be listed, or none is the copy.
pub fn mirror_copy(meta: &Path, d: &Superblock, name_it: &str) -> Result<PathBuf> {
    let devices = sys_block_devices().map_err(|e| {
        anyhow::anyhow!(
            "the volume's mirror cannot be looked for among the block devices ({e}); name it with {name_it}"
        )
    })?;
    let found = devices
        .into_iter()
        .filter_map(|p| match probe(&p) {
            Ok(Probed::DualFs(sb))
                if sb.role == Role::Meta && sb.volume_uuid == d.volume_uuid && sb.meta_uuid == d.meta_uuid =>
            {
                Some((p, sb.mirror_generation))
            }
            _ => None,
        })
        .filter(|(p, _)| !same_device(p, meta))
        .max_by_key(|(_, generation)| *generation);
    match found {
        Some((p, _)) => Ok(p),
        None => bail!("the volume's mirror was not found among the block devices; name it with {name_it}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_read_in_either_case() {
        assert_eq!(Tag::parse("UUID=ab-cd"), Some(Tag::Uuid("ab-cd".into())));
        assert_eq!(Tag::parse("uuid=ab"), Some(Tag::Uuid("ab".into())));
        assert_eq!(Tag::parse("label=home"), Some(Tag::Label("home".into())));
        assert_eq!(Tag::parse("/dev/sdb1"), None);
        assert_eq!(Tag::parse("PARTUUID=x"), None);
    }

    #[test]
    fn uuids_compare_without_dashes_or_case() {
        assert_eq!(normal_uuid("2AD5684D-2c8f"), normal_uuid("2ad5684d2C8F"));
    }
}
