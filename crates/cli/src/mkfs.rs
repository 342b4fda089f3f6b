//! `dualfs mkfs`: image files if asked for, then the engine's format.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use dualfs_engine::Volume;
use dualfs_engine::format::superblock::MAX_INLINE_DATA;
use dualfs_engine::meta_log::Log;
use dualfs_engine::types::BLOCK_BYTES;
use dualfs_engine::volume::MkfsOptions;

use crate::args::MkfsArgs;
use crate::devices::{Access, open_pair};
use crate::progress::{Activity, Meter};
use crate::words::{count, human_bytes};

/// How a total size is split: the meta-data device takes about a tenth.
const META_SHARE_DIVISOR: u64 = 10;

/// Sizes of the meta-data and data images for a volume of `total` bytes:
/// meta ≈ 10% rounded up to whole segments (at least 17 of them: the
/// superblock area and the engine's minimum of 16), data the rest in blocks.
///
/// # Errors
/// The total is too small to hold both.
pub fn split_size(total: u64, segment_bytes: u64) -> Result<(u64, u64)> {
    let min_meta = 17 * segment_bytes;
    let meta = (total / META_SHARE_DIVISOR).div_ceil(segment_bytes).saturating_mul(segment_bytes).max(min_meta);
    let data = total.saturating_sub(meta) / BLOCK_BYTES * BLOCK_BYTES;
    if data < 1 << 20 {
        bail!(
            "a volume of {total} bytes is too small: the meta-data device alone needs {meta} bytes and the data device at least 1 MiB"
        );
    }
    Ok((meta, data))
}

/// Creates `path` as a sparse file of `len` bytes; it must not exist yet.
fn create_image(path: &Path, len: u64, created: &mut Created) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    created.0.push(path.to_path_buf());
    f.set_len(len).with_context(|| format!("cannot size {} to {len} bytes", path.display()))?;
    say!("created {} ({}, sparse)", path.display(), human_bytes(len));
    Ok(())
}

/// Refuses, before anything is created, paths that cannot both become
/// image files: the same path twice, a folder, a missing parent folder.
fn check_distinct_paths(args: &MkfsArgs) -> Result<()> {
    if args.meta == args.data {
        bail!("{} is given twice: DualFS needs two different devices or image files", args.meta.display());
    }
    for p in [&args.meta, &args.data] {
        if p.is_dir() {
            bail!("{} is a directory: give a device or an image file", p.display());
        }
        if !p.exists() {
            let parent = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !parent.is_dir() {
                bail!("cannot create {}: {} is not a directory", p.display(), parent.display());
            }
        }
    }
    Ok(())
}

/// Image files this run created: removed again unless the volume is made,
/// so that a failed mkfs leaves nothing behind (a 16 TiB sparse file least
/// of all).
#[derive(Debug, Default)]
struct Created(Vec<PathBuf>);

impl Created {
    fn keep(mut self) {
        self.0.clear();
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        for p in &self.0 {
            match std::fs::remove_file(p) {
                Ok(()) => eprintln!("dualfs: removed {}, which this mkfs had created", p.display()),
                Err(e) => eprintln!("dualfs: cannot remove {} again: {e}", p.display()),
            }
        }
    }
}

/// Creates whichever image files are missing when `--size` is given.
fn ensure_images(args: &MkfsArgs, created: &mut Created) -> Result<()> {
    let missing: Vec<&Path> = [args.meta.as_path(), args.data.as_path()].into_iter().filter(|p| !p.exists()).collect();
    if missing.is_empty() {
        if args.size.is_some() {
            log::info!("both paths exist; --size is ignored");
        }
        return Ok(());
    }
    let Some(total) = args.size else {
        bail!(
            "{} does not exist: give --size (e.g. --size 4G) to create image files, or name existing devices",
            missing[0].display()
        );
    };
    let (meta_len, data_len) = split_size(total, args.segment_size)?;
    // Both paths are checked before either is made: a data path in a
    // missing folder must not leave a meta-data image behind.
    check_distinct_paths(args)?;
    for (path, len) in [(&args.meta, meta_len), (&args.data, data_len)] {
        if !path.exists() {
            create_image(path, len, created)?;
        }
    }
    Ok(())
}

fn blocks_of(bytes: u64, what: &str) -> Result<u32> {
    if bytes == 0 || !bytes.is_multiple_of(BLOCK_BYTES) {
        bail!("the {what} must be a positive multiple of 4 KiB, not {bytes} bytes");
    }
    u32::try_from(bytes / BLOCK_BYTES).with_context(|| format!("the {what} is too large"))
}

/// Runs `dualfs mkfs`.
///
/// # Errors
/// Bad sizes, missing paths, the same device twice, a device in use or
/// already formatted (without --force), I/O errors.
pub fn run(args: &MkfsArgs) -> Result<()> {
    if args.inline_max > MAX_INLINE_DATA {
        bail!("--inline-max is at most {MAX_INLINE_DATA} bytes");
    }
    if args.label.len() > 64 {
        bail!("the label is at most 64 bytes");
    }
    let options = MkfsOptions {
        segment_blocks: blocks_of(args.segment_size, "segment size")?,
        group_blocks: blocks_of(args.group_size, "group size")?,
        inline_max: args.inline_max,
        force: args.force,
        label: args.label.clone(),
        ..MkfsOptions::default()
    };
    let mut created = Created::default();
    ensure_images(args, &mut created)?;
    // Whatever --force says: overwriting a mounted file system, or one a
    // loop device or another program holds, destroys it under its user.
    crate::claim::refuse_in_use(&args.meta)?;
    crate::claim::refuse_in_use(&args.data)?;
    let (meta, data) = open_pair(&args.meta, &args.data, Access::Exclusive)?;
    let meter = Meter::default();
    let activity = Activity::start("creating the volume".into(), meter.written.clone(), "written");
    let mut copies = vec![meta.clone()];
    let formatted = match &args.meta_mirror {
        None => Volume::format(meter.wrap(meta.clone()), meter.wrap(data.clone()), &options),
        Some(path) => {
            crate::devices::check_distinct(&args.meta, path)?;
            crate::devices::check_distinct(path, &args.data)?;
            crate::claim::refuse_in_use(path)?;
            let mirror = crate::devices::open_one(path, dualfs_engine::error::DeviceRole::Meta, Access::Exclusive)
                .with_context(|| format!("cannot open the meta-data mirror {}", path.display()))?;
            copies.push(mirror.clone());
            Volume::format_mirrored([meter.wrap(meta.clone()), meter.wrap(mirror)], meter.wrap(data.clone()), &options)
        }
    };
    drop(activity);
    if let Err(e) = formatted {
        // The first checkpoint holds the whole IFile, the bitmap of the
        // data device included (32 MiB per TiB).
        let hint = if matches!(e, dualfs_engine::Error::NoSpace(dualfs_engine::error::DeviceRole::Meta)) {
            " (the meta-data device is too small for the IFile of this data device: give it more room)"
        } else {
            ""
        };
        bail!("cannot create a DualFS volume on {} and {}: {e}{hint}", args.meta.display(), args.data.display());
    }
    if args.quota {
        // Both copies of a mirror, as a mount assembles them.
        let vol = Volume::assemble_meta(&copies, &data, false, true)
            .and_then(|a| Volume::open_assembled(a, data.clone(), dualfs_engine::volume::MountOptions::default()))
            .and_then(|v| v.enable_quotas().and_then(|()| v.close()));
        vol.map_err(|e| anyhow::anyhow!("the volume was made, but quotas could not be turned on: {e}"))?;
    }
    created.keep();
    let sb = Log::read_superblocks(meta.as_ref(), data.as_ref())?;
    say!(
        "DualFS volume {} created{}",
        crate::words::uuid(&sb.volume_uuid),
        if sb.label_str().is_empty() { String::new() } else { format!(", label {:?}", sb.label_str()) }
    );
    say!(
        "  meta-data device {}: {} of {}",
        args.meta.display(),
        count(u64::from(sb.segment_count), "segment"),
        human_bytes(u64::from(sb.segment_blocks) * BLOCK_BYTES)
    );
    if let Some(path) = &args.meta_mirror {
        say!("  meta-data mirror {}: every meta-data write goes to both", path.display());
    }
    say!(
        "  data device {}: {} in {} of {}",
        args.data.display(),
        human_bytes(sb.data_blocks * BLOCK_BYTES),
        count(u64::from(sb.group_count), "group"),
        human_bytes(u64::from(sb.group_blocks) * BLOCK_BYTES)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_total_splits_about_one_tenth_to_meta_data() {
        let (m, d) = split_size(4 << 30, 1 << 20).unwrap();
        assert_eq!(m, 410 << 20);
        assert_eq!(m + d, 4 << 30);
        // Small volumes still get the minimum number of segments.
        let (m, _) = split_size(64 << 20, 1 << 20).unwrap();
        assert_eq!(m, 17 << 20);
        assert!(split_size(16 << 20, 1 << 20).is_err());
    }
}
