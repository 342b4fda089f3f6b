//! `dualfs trim`: discard the free space of a volume (what `fstrim`
//! does), unmounted in this process or mounted through FITRIM.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use dualfs_engine::volume::{MountOptions, TrimRange, TrimReport};
use dualfs_engine::{Error, Volume};

use crate::devices::split_source;
use crate::devices::{Access, open_pair};
use crate::words::human_bytes;

pub const TRIM_HELP: &str = "\
Tells both devices which blocks hold nothing: free data blocks and log
segments that no checkpoint, snapshot or pending fsync record needs. An SSD
may then erase them ahead of time; a sparse image file has holes punched
and gives the space back to the file system holding it. The range (bytes,
the data device first, then the meta-data device) is fstrim's.

A mounted volume is trimmed through the mount (fstrim MOUNTPOINT does the
same); an unmounted one in this process. To discard continuously instead,
mount with -o discard.

Example: dualfs trim /mnt
         dualfs trim volume/meta.img volume/data.img";

#[derive(Args, Debug)]
pub struct TrimArgs {
    /// The mount point of a mounted volume, or the meta-data device of an
    /// unmounted one (or META#DATA).
    pub target: PathBuf,
    /// The data device of an unmounted volume.
    pub data: Option<PathBuf>,
    /// First byte of the range to trim.
    #[arg(long, short = 'o', default_value = "0", value_parser = crate::args::parse_size)]
    pub offset: u64,
    /// Bytes from the offset (default: to the end).
    #[arg(long, short = 'l', value_parser = crate::args::parse_size)]
    pub length: Option<u64>,
    /// Leave free runs shorter than this alone.
    #[arg(long, short = 'm', default_value = "0", value_parser = crate::args::parse_size)]
    pub minimum: u64,
}

fn range(args: &TrimArgs) -> TrimRange {
    TrimRange { start: args.offset, len: args.length.unwrap_or(u64::MAX), min_len: args.minimum }
}

fn offline(meta: &Path, data: &Path, r: TrimRange) -> Result<TrimReport> {
    let (m, d) = open_pair(meta, data, Access::Exclusive)?;
    let vol = Volume::open(m, d, MountOptions::default())
        .map_err(|e| anyhow!("cannot open {} and {}: {e}", meta.display(), data.display()))?;
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
