//! `dualfs trace`: block-level traces — read them, replay them through disk
//! models, and record them for any file system.
//!
//! A DualFS mount records its own trace with `-o trace=FILE` (the engine's
//! tracing device, which names what every block holds). Kernel file
//! systems are traced from outside by `dualfs trace serve`: a one-file FUSE
//! file system exposing an image file, used as the backing file of a loop
//! device, that records every read, write and flush the loop device sends.
//! Both produce the same text format (see `dualfs_engine::device::tracing`).

pub mod disk;
mod replay;
mod serve;
mod summary;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use dualfs_engine::device::BlockDevice;
use dualfs_engine::device::tracing::{TRACE_HEADER, TraceDevice, TraceRecord, TraceSink, TracingDevice};
use dualfs_engine::format::classify;

/// Arguments of `dualfs trace`.
#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub what: TraceCommand,
}

#[derive(Subcommand, Debug)]
pub enum TraceCommand {
    /// Requests, bytes, sequential fraction and mean request size, per
    /// device and per class of block.
    Summary {
        /// Trace files; several are merged by time (a peer's main and
        /// journal devices, traced separately).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Total I/O time of a trace replayed through a disk model.
    #[command(after_help = format!("{}\n\n{}", disk::HELP, replay::HELP))]
    Replay {
        /// Trace files, merged by time.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The disk model.
        #[arg(long, value_enum, default_value_t = disk::Model::Hdd5400)]
        model: disk::Model,
        /// Where the meta-data (journal, log) device and the data device sit.
        #[arg(long, value_enum, default_value_t = Layout::OneDisk)]
        layout: Layout,
        /// Disks without a write cache: writes wait for the platter.
        #[arg(long)]
        no_write_cache: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The model's own figures for a fio-like run: IOPS, MB/s and mean
    /// latency of `--ios` requests kept `--qd` at a time.
    #[command(after_help = disk::HELP)]
    Predict {
        /// The disk model.
        #[arg(long, value_enum, default_value_t = disk::Model::Hdd5400)]
        model: disk::Model,
        /// fio's --rw.
        #[arg(long, value_enum)]
        rw: disk::predict::Pattern,
        /// Request size, bytes (K, M suffixes).
        #[arg(long, value_parser = crate::args::parse_size, default_value = "4K")]
        bs: u64,
        /// Requests outstanding.
        #[arg(long, default_value_t = 1)]
        qd: usize,
        /// The range the requests fall in, from the start of the disk.
        #[arg(long, value_parser = crate::args::parse_size, default_value = "4G")]
        size: u64,
        /// The disk's size (what a seek's distance is a share of).
        #[arg(long, value_parser = crate::args::parse_size, default_value = "4G")]
        span: u64,
        /// Requests in all.
        #[arg(long, default_value_t = 4000)]
        ios: u64,
        /// A disk without a write cache.
        #[arg(long)]
        no_write_cache: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Serve IMAGE as the only file of a FUSE file system mounted on MNT
    /// (as MNT/image) and record every request made to it, until unmounted.
    #[command(after_help = serve::HELP)]
    Serve(serve::ServeArgs),
}

/// Where the two devices of a trace sit for a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Layout {
    /// Two partitions of one disk: meta-data first (outer tracks), data after.
    OneDisk,
    /// Each device on a disk of its own.
    TwoDisks,
}

/// A trace loaded from one or more files: the devices' sizes and the
/// requests in time order.
#[derive(Debug, Default)]
pub struct Trace {
    /// Blocks of each device, from the header lines (or the highest block seen).
    pub devices: BTreeMap<TraceDevice, u64>,
    /// Every request, sorted by start time.
    pub records: Vec<TraceRecord>,
}

/// Reads and merges trace files.
///
/// # Errors
/// A file cannot be read, is not a trace, or has a malformed line.
pub fn load(files: &[PathBuf]) -> Result<Trace> {
    let mut t = Trace::default();
    for path in files {
        let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        for (i, line) in BufReader::new(f).lines().enumerate() {
            let line = line.with_context(|| format!("cannot read {}", path.display()))?;
            if i == 0 && line.trim() != TRACE_HEADER {
                bail!("{} is not a DualFS trace (its first line is not {TRACE_HEADER:?})", path.display());
            }
            if let Some(rest) = line.strip_prefix("# device ") {
                let mut words = rest.split_ascii_whitespace();
                let dev = words.next().and_then(TraceDevice::from_letter);
                let blocks = words.find_map(|w| w.strip_prefix("blocks=")).and_then(|b| b.parse::<u64>().ok());
                if let (Some(d), Some(b)) = (dev, blocks) {
                    t.devices.insert(d, b);
                }
                continue;
            }
            match TraceRecord::parse(&line) {
                Ok(Some(r)) => t.records.push(r),
                Ok(None) => {}
                Err(e) => bail!("{}:{}: {e}", path.display(), i + 1),
            }
        }
    }
    for r in &t.records {
        let end = r.first.saturating_add(r.count);
        let size = t.devices.entry(r.device).or_insert(end);
        *size = (*size).max(end);
    }
    t.records.sort_by_key(|r| r.start_ns);
    Ok(t)
}

/// Wraps a volume's two devices in tracing devices writing to `path`
/// (`dualfs mount -o trace=FILE`). The trace file is completed when the
/// last of the two devices is dropped, that is when the volume is closed.
///
/// # Errors
/// The trace file cannot be created.
pub fn wrap(
    path: &Path,
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    meta_name: &Path,
    data_name: &Path,
) -> Result<(Arc<dyn BlockDevice>, Arc<dyn BlockDevice>)> {
    let sink = TraceSink::create(path).with_context(|| format!("cannot create trace file {}", path.display()))?;
    let m = TracingDevice::new(
        meta,
        TraceDevice::Meta,
        &meta_name.display().to_string(),
        sink.clone(),
        classify::meta_block,
    );
    let d = TracingDevice::new(data, TraceDevice::Data, &data_name.display().to_string(), sink, classify::data_block);
    Ok((Arc::new(m), Arc::new(d)))
}

/// Runs `dualfs trace`.
///
/// # Errors
/// Unreadable traces, or anything that stops `serve`.
pub fn run(args: &TraceArgs) -> Result<()> {
    match &args.what {
        TraceCommand::Summary { files, json } => {
            let s = summary::summarize(&load(files)?);
            if *json {
                println!("{}", serde_json::to_string_pretty(&summary::to_json(&s))?);
            } else {
                print!("{}", summary::to_text(&s));
            }
            Ok(())
        }
        TraceCommand::Replay { files, model, layout, no_write_cache, json } => {
            let r = replay::replay(&load(files)?, *model, *layout, !*no_write_cache);
            if *json {
                println!("{}", serde_json::to_string_pretty(&replay::to_json(&r))?);
            } else {
                print!("{}", replay::to_text(&r));
            }
            Ok(())
        }
        TraceCommand::Predict { model, rw, bs, qd, size, span, ios, no_write_cache, json } => {
            let p = disk::predict::closed_loop(*model, *span, !*no_write_cache, *rw, *bs, *size, *qd, *ios);
            if *json {
                let v = serde_json::json!({
                    "model": model.name(), "iops": p.iops, "mb_s": p.mb_s, "mean_latency_ms": p.mean_latency_ms,
                });
                println!("{v}");
            } else {
                println!(
                    "{}: {:.0} IOPS, {:.2} MB/s, {:.3} ms mean latency",
                    model.name(),
                    p.iops,
                    p.mb_s,
                    p.mean_latency_ms
                );
            }
            Ok(())
        }
        TraceCommand::Serve(a) => serve::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_of_two_devices_merge_in_time_order_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.trace");
        let b = dir.path().join("b.trace");
        std::fs::write(&a, "# dualfs-trace 1\n# device d blocks=1000 name=x\n5 1 d W 10 2 fs*2\n9 1 d F 0 0 -\n")
            .unwrap();
        std::fs::write(&b, "# dualfs-trace 1\n# device m blocks=100 name=y\n7 1 m W 3 1 journal*1\n").unwrap();
        let t = load(&[a.clone(), b]).unwrap();
        assert_eq!(t.devices[&TraceDevice::Data], 1000);
        assert_eq!(t.devices[&TraceDevice::Meta], 100);
        let times: Vec<u64> = t.records.iter().map(|r| r.start_ns).collect();
        assert_eq!(times, vec![5, 7, 9]);

        let bad = dir.path().join("bad.trace");
        std::fs::write(&bad, "hello\n").unwrap();
        assert!(format!("{:#}", load(&[bad]).unwrap_err()).contains("not a DualFS trace"));
        let broken = dir.path().join("broken.trace");
        std::fs::write(&broken, "# dualfs-trace 1\n1 2 3\n").unwrap();
        assert!(format!("{:#}", load(&[broken]).unwrap_err()).contains("broken.trace:2"));
    }
}
