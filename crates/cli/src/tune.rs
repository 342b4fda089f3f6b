//! `dualfs tune`: change a volume's label, UUID and default mount options
//! (tune2fs -L/-U/-o, xfs_admin) on both superblocks of an unmounted
//! volume.
//!
//! The meta-data device's superblock is written and flushed first (on a
//! mirrored volume both copies', the second copy named or found among the
//! block devices as a mount finds it), then the data device's. A tune
//! interrupted between them leaves superblocks that differ only in what
//! tune changes; mount refuses such a pair, and running the same tune
//! again reads the meta-data copy and rewrites them all.

use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use dualfs_engine::device::BlockDevice;
use dualfs_engine::error::DeviceRole;
use dualfs_engine::format::superblock::{MIRROR_DEGRADED, Role, Superblock};
use dualfs_engine::types::BLOCK_SIZE;

use crate::args::TuneArgs;
use crate::devices::{Access, check_distinct, named, open_one, open_pair};
use crate::words::uuid;

/// Reads a UUID in its usual text form (dashes optional).
fn parse_uuid(s: &str) -> Result<[u8; 16]> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        bail!("{s:?} is not a UUID (32 hexadecimal digits, e.g. 2ad5684d-2c8f-4687-b186-b3cef7503709)");
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| anyhow!("{s:?}: {e}"))?;
    }
    if out == [0; 16] {
        bail!("the null UUID cannot name a volume");
    }
    Ok(out)
}

fn random_uuid() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

/// The option's name, for replacing `commit=5` by `commit=30`.
fn key(opt: &str) -> &str {
    opt.split_once('=').map_or(opt, |(k, _)| k)
}

/// The stored list changed by `change` (see [`TuneArgs::options`]).
///
/// # Errors
/// The result is not a list `dualfs mount` accepts.
pub fn edit_options(stored: &str, change: &str) -> Result<String> {
    let mut list: Vec<String> = stored.split(',').filter(|o| !o.is_empty()).map(str::to_string).collect();
    for item in change.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        if item == "none" {
            list.clear();
        } else if let Some(gone) = item.strip_prefix('^') {
            list.retain(|o| o != gone && key(o) != gone);
        } else {
            list.retain(|o| key(o) != key(item));
            list.push(item.to_string());
        }
    }
    let joined = list.join(",");
    let cfg = crate::options::parse(std::slice::from_ref(&joined))
        .with_context(|| format!("{joined:?} cannot be stored as default mount options"))?;
    if cfg.remount || cfg.log.is_some() || cfg.trace.is_some() {
        bail!("remount, log= and trace= belong on a mount's command line, not in the superblock");
    }
    Ok(joined)
}

fn read_one(dev: &dyn BlockDevice, what: &str) -> Result<Superblock> {
    let mut block = vec![0u8; BLOCK_SIZE];
    dev.read_blocks(0, &mut block).with_context(|| format!("cannot read the {what}'s superblock"))?;
    Superblock::decode(&block).map_err(|e| anyhow!("the {what} holds no usable DualFS superblock: {}", e.0))
}

/// `onto` with what tune changes (and the format fields a tune may find
/// raised on one superblock) taken from `from`, as a meta-data device's.
fn tunables_of(from: &Superblock, onto: &Superblock) -> Superblock {
    Superblock {
        role: Role::Meta,
        minor: from.minor,
        compat: from.compat,
        incompat: from.incompat,
        volume_uuid: from.volume_uuid,
        meta_uuid: from.meta_uuid,
        data_uuid: from.data_uuid,
        label: from.label,
        mount_options: from.mount_options,
        block_id: from.block_id,
        ..onto.clone()
    }
}

/// Both superblocks, checked to be one volume's: equal but for what tune
/// changes (so that an interrupted tune can be run again).
fn read_pair(meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<(Superblock, Superblock)> {
    let m = read_one(meta, "meta-data device")?;
    let d = read_one(data, "data device")?;
    if m.role != Role::Meta {
        bail!("the device given as meta-data device is a DualFS data device");
    }
    if d.role != Role::Data {
        bail!("the device given as data device is a DualFS meta-data device");
    }
    if d.volume_id() != m.volume_id() || tunables_of(&m, &d) != m {
        bail!("the two devices are not a pair: they belong to different volumes");
    }
    if d != (Superblock { role: Role::Data, ..m.clone() }) {
        eprintln!(
            "dualfs: the data device's superblock lags the meta-data device's (an interrupted tune?): rewriting it"
        );
    }
    Ok((m, d))
}

/// The second copy of a mirrored volume's meta-data device, tuned with the
/// first (`m`; `d` the data device's superblock): `named`, or found among
/// the block devices by either superblock's UUIDs (the copy's may lag an
/// interrupted tune). None on an unmirrored volume, and when the copy is
/// stale or, on a mirror that runs degraded, missing: a replace writes the
/// new copy's superblock. A mirror in sync whose copy cannot be found is
/// refused: tuning one copy alone would leave the other no copy of the
/// volume (a new UUID) or of another label.
fn mirror_to_tune(
    named: Option<&std::path::Path>,
    meta: &std::path::Path,
    data: &std::path::Path,
    m: &Superblock,
    d: &Superblock,
) -> Result<Option<Arc<dyn BlockDevice>>> {
    if !d.mirrored() {
        if let Some(p) = named {
            bail!("{} names no meta-data mirror: tune it without --meta-mirror {}", data.display(), p.display());
        }
        return Ok(None);
    }
    let path = match named {
        Some(p) => p.to_path_buf(),
        None => match crate::find::mirror_copy(meta, m, "--meta-mirror DEV").or_else(|_| {
            crate::find::mirror_copy(meta, &Superblock { role: Role::Meta, ..d.clone() }, "--meta-mirror DEV")
        }) {
            Ok(p) => {
                eprintln!(
                    "dualfs: the meta-data mirror's second copy: {} (found among the block devices)",
                    p.display()
                );
                p
            }
            Err(e) if d.mirror_state == MIRROR_DEGRADED => {
                eprintln!("dualfs: {e:#}; the mirror runs degraded: only the copy in use is tuned");
                return Ok(None);
            }
            Err(e) => bail!("{e:#}: a tune writes both copies of a mirrored meta-data device"),
        },
    };
    check_distinct(meta, &path)?;
    check_distinct(&path, data)?;
    let dev = open_one(&path, DeviceRole::Meta, Access::Exclusive)?;
    let c = read_one(dev.as_ref(), "meta-data mirror")?;
    let as_copy =
        Superblock { mirror_state: c.mirror_state, mirror_generation: c.mirror_generation, ..tunables_of(&c, m) };
    if c.role != Role::Meta || c.volume_id() != m.volume_id() || as_copy != c {
        bail!("{} is not a copy of this volume's meta-data device", path.display());
    }
    if c.mirror_generation < d.mirror_generation {
        eprintln!(
            "dualfs: {} is a stale copy (mirror generation {}, the volume's is {}): left as it is until a replace \
             resyncs it",
            path.display(),
            c.mirror_generation,
            d.mirror_generation
        );
        return Ok(None);
    }
    Ok(Some(dev))
}

fn write_one(dev: &Arc<dyn BlockDevice>, sb: &Superblock, what: &str) -> Result<()> {
    dev.write_blocks(0, &sb.encode()).with_context(|| format!("cannot write the {what}'s superblock"))?;
    dev.flush().with_context(|| format!("cannot flush the {what}"))
}

/// Runs `dualfs tune`.
///
/// # Errors
/// The volume is mounted or not DualFS, a value is refused, I/O fails.
pub fn run(args: &TuneArgs) -> Result<()> {
    let (meta_path, data_path) = named(&args.meta, args.data.as_deref())?;
    let (meta, data) = open_pair(&meta_path, &data_path, Access::Exclusive)?;
    let (old, d) = read_pair(meta.as_ref(), data.as_ref())?;
    let mirror = mirror_to_tune(args.meta_mirror.as_deref(), &meta_path, &data_path, &old, &d)?;
    let mut sb = old.clone();
    if let Some(label) = &args.label {
        sb.set_label(label).map_err(|e| anyhow!(e))?;
    }
    if let Some(u) = &args.uuid {
        let new = if u == "random" { random_uuid() } else { parse_uuid(u)? };
        sb.set_volume_uuid(new);
        sb.meta_uuid = random_uuid();
        sb.data_uuid = random_uuid();
    }
    if let Some(change) = &args.options {
        let list = edit_options(&old.mount_options_str(), change)?;
        sb.set_mount_options(&list).map_err(|e| anyhow!(e))?;
    }
    let changing = args.label.is_some() || args.uuid.is_some() || args.options.is_some();
    let data_lags = d != Superblock { role: Role::Data, ..old.clone() };
    let mirror_lags = match &mirror {
        Some(c) => read_one(c.as_ref(), "meta-data mirror")? != old,
        None => false,
    };
    if changing || data_lags || mirror_lags {
        write_one(&meta, &sb, "meta-data device")?;
        if let Some(c) = &mirror {
            write_one(c, &sb, "meta-data mirror")?;
        }
        write_one(&data, &Superblock { role: Role::Data, ..sb.clone() }, "data device")?;
    }
    let show = |label: &str, before: String, after: String| {
        if before == after {
            say!("{label:<15}{after}");
        } else {
            say!("{label:<15}{after} (was {before})");
        }
    };
    show("label", format!("{:?}", old.label_str()), format!("{:?}", sb.label_str()));
    show("uuid", uuid(&old.volume_uuid), uuid(&sb.volume_uuid));
    show("mount options", format!("{:?}", old.mount_options_str()), format!("{:?}", sb.mount_options_str()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_edits_add_replace_and_remove() {
        assert_eq!(edit_options("", "noatime,commit=30").unwrap(), "noatime,commit=30");
        assert_eq!(edit_options("noatime,commit=30", "commit=10").unwrap(), "noatime,commit=10");
        assert_eq!(edit_options("noatime,commit=30", "^commit").unwrap(), "noatime");
        assert_eq!(edit_options("noatime,commit=30", "^noatime").unwrap(), "commit=30");
        assert_eq!(edit_options("noatime", "none").unwrap(), "");
        assert!(edit_options("", "bogus").is_err());
        assert!(edit_options("", "remount").is_err());
    }

    #[test]
    fn uuids_are_read_with_or_without_dashes() {
        let u = parse_uuid("2ad5684d-2c8f-4687-b186-b3cef7503709").unwrap();
        assert_eq!(uuid(&u), "2ad5684d-2c8f-4687-b186-b3cef7503709");
        assert_eq!(parse_uuid("2ad5684d2c8f4687b186b3cef7503709").unwrap(), u);
        assert!(parse_uuid("xyz").is_err());
        assert!(parse_uuid("00000000-0000-0000-0000-000000000000").is_err());
    }
}
