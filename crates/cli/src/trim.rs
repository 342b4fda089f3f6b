//! `dualfs trim`: discard the free space of a volume (what `fstrim`
//! does), unmounted in this process or mounted through FITRIM.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use dualfs_engine::Error;
use dualfs_engine::volume::{MountOptions, TrimRange, TrimReport};

use crate::args::TrimArgs;
use crate::devices::{Access, open_volume, split_source};
use crate::words::human_bytes;

fn range(args: &TrimArgs) -> TrimRange {
    TrimRange { start: args.offset, len: args.length.unwrap_or(u64::MAX), min_len: args.minimum }
}

fn offline(meta: &Path, data: &Path, r: TrimRange) -> Result<TrimReport> {
    let vol = open_volume(meta, data, Access::Exclusive, MountOptions::default())?;
    let report = match vol.trim(r) {
        Ok(report) => report,
        Err(Error::NotSupported) => bail!("{}: the data device cannot discard", data.display()),
        Err(e) => bail!("trimming failed: {e}"),
    };
    vol.close().map_err(|e| anyhow!("cannot close the volume cleanly: {e}"))?;
    Ok(report)
}

fn mounted(root: &Path, r: TrimRange) -> Result<u64> {
    let dir = std::fs::File::open(root).with_context(|| format!("cannot open {}", root.display()))?;
    dualfs_blkdev::fitrim(&dir, r.start, r.len, r.min_len).map_err(|e| match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) => anyhow!("{}: the volume's data device cannot discard", root.display()),
        Some(libc::EPERM) => anyhow!("{}: only root may trim a mounted volume", root.display()),
        Some(libc::ENOTTY) => anyhow!("{}: not a file system that trims", root.display()),
        _ => anyhow!("trimming {} failed: {e}", root.display()),
    })
}

/// Runs `dualfs trim`.
///
/// # Errors
/// The volume cannot be opened or reached, a device cannot discard, or
/// fails.
pub fn run(args: &TrimArgs) -> Result<()> {
    let r = range(args);
    let (name, report) = match &args.data {
        Some(data) => (format!("{}#{}", args.target.display(), data.display()), offline(&args.target, data, r)?),
        None if args.target.is_dir() => {
            let bytes = mounted(&args.target, r)?;
            say!("{}: {} ({bytes} bytes) trimmed", args.target.display(), human_bytes(bytes));
            return Ok(());
        }
        None => {
            let (meta, data) = split_source(&args.target.to_string_lossy(), None)?;
            (args.target.display().to_string(), offline(&meta, &data, r)?)
        }
    };
    let bytes = report.bytes();
    say!(
        "{name}: {} ({bytes} bytes) trimmed: {} of the data device, {}",
        human_bytes(bytes),
        human_bytes(report.data_bytes),
        if report.meta_unsupported {
            "none of the meta-data device (it cannot discard)".to_string()
        } else {
            format!("{} of the meta-data device", human_bytes(report.meta_bytes))
        }
    );
    Ok(())
}
