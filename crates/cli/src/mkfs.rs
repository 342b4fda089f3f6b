//! `dualfs mkfs`: image files if asked for, then the engine's format.

use std::fs::OpenOptions;
use std::path::Path;

use anyhow::{Context, Result, bail};
use dualfs_engine::Volume;
use dualfs_engine::format::superblock::MAX_INLINE_DATA;
use dualfs_engine::meta_log::Log;
use dualfs_engine::types::BLOCK_BYTES;
use dualfs_engine::volume::MkfsOptions;

use crate::args::MkfsArgs;
use crate::devices::{Access, open_pair};
use crate::progress::{Activity, Meter};

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
fn create_image(path: &Path, len: u64) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.set_len(len).with_context(|| format!("cannot size {} to {len} bytes", path.display()))?;
    println!("created {} ({}, sparse)", path.display(), human_bytes(len));
    Ok(())
}

/// Creates whichever image files are missing when `--size` is given.
fn ensure_images(args: &MkfsArgs) -> Result<()> {
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
    if !args.meta.exists() {
        create_image(&args.meta, meta_len)?;
    }
    if !args.data.exists() {
        create_image(&args.data, data_len)?;
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
    ensure_images(args)?;
    // Whatever --force says: overwriting a mounted file system, or one a
    // loop device or another program holds, destroys it under its user.
    crate::claim::refuse_in_use(&args.meta)?;
    crate::claim::refuse_in_use(&args.data)?;
    let (meta, data) = open_pair(&args.meta, &args.data, Access::Exclusive)?;
    let meter = Meter::default();
    let activity = Activity::start("creating the volume".into(), meter.written.clone(), "written");
    Volume::format(meter.wrap(meta.clone()), meter.wrap(data.clone()), &options).map_err(|e| {
        anyhow::anyhow!("cannot create a DualFS volume on {} and {}: {e}", args.meta.display(), args.data.display())
    })?;
    drop(activity);
    let sb = Log::read_superblocks(meta.as_ref(), data.as_ref())?;
    println!(
        "DualFS volume {} created{}",
        crate::inspect::uuid(&sb.volume_uuid),
        if sb.label_str().is_empty() { String::new() } else { format!(", label {:?}", sb.label_str()) }
    );
    println!(
        "  meta-data device {}: {} segments of {}",
        args.meta.display(),
        sb.segment_count,
        human_bytes(u64::from(sb.segment_blocks) * BLOCK_BYTES)
    );
    println!(
        "  data device {}: {} in {} groups of {}",
        args.data.display(),
        human_bytes(sb.data_blocks * BLOCK_BYTES),
        sb.group_count,
        human_bytes(u64::from(sb.group_blocks) * BLOCK_BYTES)
    );
    Ok(())
}

/// `1536` → `1.5 KiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} bytes")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
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

    #[test]
    fn human_sizes_read_well() {
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(1 << 20), "1 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}
