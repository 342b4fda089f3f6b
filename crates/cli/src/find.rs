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

/// The one device among `devices` in `role` that answers to `tag`. The
/// two copies of one mirrored meta-data device are one device here: the
/// copy [`mirror_meta`] chooses is META, and the mount finds the other as
/// its mirror ([`mirror_copy`]).
///
/// # Errors
/// None does, or several do (of different volumes, or more than the
/// volume's mirror accounts for).
pub fn pick(devices: &[(PathBuf, Superblock)], tag: &Tag, role: Role) -> Result<PathBuf> {
    let found: Vec<&(PathBuf, Superblock)> =
        devices.iter().filter(|(_, sb)| sb.role == role && tag.matches(sb)).collect();
    match found[..] {
        [(p, _)] => Ok(p.clone()),
        [] => bail!(
            "no DualFS {} device with {tag} among the block devices (`dualfs probe` lists those it finds)",
            role_name(role)
        ),
        [(_, first), ..] => {
            if role == Role::Meta
                && let Some(p) = mirror_meta(&found, data_of(devices, first))
            {
                return Ok(p.clone());
            }
            bail!(
                "several DualFS {} devices answer to {tag}: {} (name one by its path)",
                role_name(role),
                found.iter().map(|(p, _)| p.display().to_string()).collect::<Vec<_>>().join(", ")
            )
        }
    }
}

/// Whether two superblocks are of one volume's devices: its three UUIDs.
fn same_volume(a: &Superblock, b: &Superblock) -> bool {
    (a.volume_uuid, a.meta_uuid, a.data_uuid) == (b.volume_uuid, b.meta_uuid, b.data_uuid)
}

/// The superblock of the data device of the volume `sb` belongs to, when
/// exactly one among `devices` is it.
fn data_of<'a>(devices: &'a [(PathBuf, Superblock)], sb: &Superblock) -> Option<&'a Superblock> {
    let mut data = devices.iter().filter(|(_, d)| d.role == Role::Data && same_volume(d, sb)).map(|(_, d)| d);
    let one = data.next();
    if data.next().is_some() { None } else { one }
}

/// Of several meta-data devices answering to one tag, the one a mount
/// takes as META when they are copies of one volume's mirror, `None` when
/// they are not. They must be of one volume (their three UUIDs); the
/// copy naming the newest mirror generation is taken (a copy naming an
/// older one missed writes, or was replaced or removed: the mount
/// refuses it as the mirror unless `-o degraded`). Two copies naming it
/// are the mirror in sync only when the volume is mirrored (its data
/// device's superblock says so, `data`; without one, the copies'): their
/// superblocks are alike byte for byte (FORMAT.md 2: the mirror writes
/// both), so nothing on disk tells copy 1 from copy 2, and either serves
/// as META with the other as its mirror; the first in device order
/// (`/dev/loop2` before `/dev/loop10`) is taken, the same each time. More
/// than two naming it, or two of an unmirrored volume, are duplicates no
/// mirror accounts for (a block-for-block copy of the device): `None`.
pub fn mirror_meta<'a>(found: &[&'a (PathBuf, Superblock)], data: Option<&Superblock>) -> Option<&'a PathBuf> {
    let (_, first) = found.first()?;
    if found.iter().any(|(_, sb)| sb.role != Role::Meta || !same_volume(sb, first)) {
        return None;
    }
    let newest = found.iter().map(|(_, sb)| sb.mirror_generation).max()?;
    let mut top: Vec<&'a (PathBuf, Superblock)> =
        found.iter().copied().filter(|(_, sb)| sb.mirror_generation == newest).collect();
    top.sort_by_key(|(p, _)| device_order(p));
    let mirrored = data.map_or_else(|| top.iter().any(|(_, sb)| sb.mirrored()), Superblock::mirrored);
    match top[..] {
        [(p, _)] => Some(p),
        [(p, _), _] if mirrored => Some(p),
        _ => None,
    }
}

/// A device path as people order them: the name without its trailing
/// number, then the number (`/dev/loop2` before `/dev/loop10`).
fn device_order(p: &Path) -> (String, u64, String) {
    let s = p.to_string_lossy();
    let stem = s.trim_end_matches(|c: char| c.is_ascii_digit());
    (stem.to_string(), s[stem.len()..].parse().unwrap_or(0), s.to_string())
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

    /// The superblocks of a mirrored volume mkfs made: (a meta-data
    /// copy's, the data device's).
    fn mirrored_volume(seed: u64) -> (Superblock, Superblock) {
        use std::sync::Arc;

        use dualfs_engine::Volume;
        use dualfs_engine::device::{BlockDevice, MemoryDevice};
        use dualfs_engine::volume::MkfsOptions;

        let dev = |n| -> Arc<dyn BlockDevice> { Arc::new(MemoryDevice::new(n)) };
        let (a, b, d) = (dev(4096), dev(4096), dev(8192));
        let opts = MkfsOptions {
            segment_blocks: 128,
            identity_seed: Some(seed),
            label: "shared".into(),
            ..MkfsOptions::default()
        };
        Volume::format_mirrored([a.clone(), b], d.clone(), &opts).unwrap();
        let sb = |x: &Arc<dyn BlockDevice>| {
            let mut raw = vec![0u8; BLOCK_SIZE];
            x.read_blocks(0, &mut raw).unwrap();
            Superblock::decode(&raw).unwrap()
        };
        (sb(&a), sb(&d))
    }

    fn chosen(found: &[(PathBuf, Superblock)], data: Option<&Superblock>) -> Option<String> {
        let refs: Vec<&(PathBuf, Superblock)> = found.iter().collect();
        mirror_meta(&refs, data).map(|p| p.display().to_string())
    }

    #[test]
    fn the_copies_of_one_mirror_are_one_meta_data_device_and_two_volumes_are_not() {
        let (copy, data) = mirrored_volume(1);
        let at =
            |p: &str, generation: u64| (PathBuf::from(p), Superblock { mirror_generation: generation, ..copy.clone() });
        // In sync, alike: the first in device order, whichever is listed first.
        let pair = [at("/dev/loop10", 0), at("/dev/loop2", 0)];
        assert_eq!(chosen(&pair, Some(&data)).as_deref(), Some("/dev/loop2"));
        assert_eq!(chosen(&[pair[1].clone(), pair[0].clone()], None).as_deref(), Some("/dev/loop2"));
        // One copy stale (a degraded mount ran on the other): the copy in
        // sync, whatever the order.
        let degraded = Superblock { mirror_generation: 3, mirror_state: 1, ..data.clone() };
        let one_stale = [at("/dev/loop2", 2), at("/dev/loop10", 3)];
        assert_eq!(chosen(&one_stale, Some(&degraded)).as_deref(), Some("/dev/loop10"));
        // A third copy (a block-for-block copy of one): no mirror accounts for it.
        let three = [at("/dev/loop2", 0), at("/dev/loop3", 0), at("/dev/loop4", 0)];
        assert_eq!(chosen(&three, Some(&data)), None);
        // An unmirrored volume's meta-data device twice: a duplicate.
        let single = Superblock { meta_copies: 0, ..copy.clone() };
        let dup = [(PathBuf::from("/dev/sdb1"), single.clone()), (PathBuf::from("/dev/sdc1"), single.clone())];
        assert_eq!(chosen(&dup, Some(&Superblock { meta_copies: 0, ..data.clone() })), None);
        assert_eq!(chosen(&dup, None), None);
        // Two volumes answering to one label.
        let (other, _) = mirrored_volume(2);
        assert_ne!(other.volume_uuid, copy.volume_uuid);
        let two = [at("/dev/loop2", 0), (PathBuf::from("/dev/loop5"), other)];
        assert_eq!(chosen(&two, Some(&data)), None);
    }

    #[test]
    fn a_tag_names_a_mirrored_volume_once_and_two_volumes_ambiguously() {
        let (copy, data) = mirrored_volume(1);
        let devices = vec![
            (PathBuf::from("/dev/loop1"), copy.clone()),
            (PathBuf::from("/dev/loop0"), copy.clone()),
            (PathBuf::from("/dev/loop3"), data.clone()),
        ];
        let tag = Tag::Uuid(uuid(&copy.volume_uuid));
        assert_eq!(pick(&devices, &tag, Role::Meta).unwrap(), PathBuf::from("/dev/loop0"));
        assert_eq!(pick(&devices, &tag, Role::Data).unwrap(), PathBuf::from("/dev/loop3"));
        assert_eq!(partner(&devices, &data, Role::Meta).unwrap(), PathBuf::from("/dev/loop0"));
        assert_eq!(pick(&devices, &Tag::Label("shared".into()), Role::Meta).unwrap(), PathBuf::from("/dev/loop0"));
        // Another volume with the same label: ambiguous.
        let (other, _) = mirrored_volume(2);
        let mut two = devices.clone();
        two.push((PathBuf::from("/dev/loop4"), other));
        let e = pick(&two, &Tag::Label("shared".into()), Role::Meta).unwrap_err().to_string();
        assert!(e.contains("several DualFS meta-data devices"), "{e}");
    }
}
