//! `mount-bench`: system calls through a mounted file system, timed one
//! phase at a time, so that DualFS through FUSE can be put next to ext4
//! and fuse2fs (bench/micro.py runs it on each, counts the FUSE requests
//! each phase sends and remounts between phases where a cold cache is
//! wanted).
//!
//! Each phase prints one JSON line: the phase, the operations done, the
//! seconds they took and the microseconds per operation.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use rustix::fs::{AtFlags, CWD, StatxFlags};
use serde_json::json;

/// Timed system calls through a mount.
#[derive(Parser, Debug)]
struct Args {
    /// create (create+close), stat (of every file made by create),
    /// readdir (list the files' directory, names only), ls-l (list it and stat every entry),
    /// append (4 KiB appends to one file), getattr-rt (statx with
    /// AT_STATX_FORCE_SYNC: one GETATTR round trip each on FUSE), unlink.
    phase: String,
    /// The directory to work in (on the file system under test).
    dir: PathBuf,
    /// Files (create, stat, unlink) or operations (append, getattr-rt).
    #[arg(long, default_value_t = 10_000)]
    n: u64,
    /// Listings of the directory (readdir).
    #[arg(long, default_value_t = 1)]
    repeat: u64,
}

fn file(dir: &Path, i: u64) -> PathBuf {
    dir.join(format!("f{i:06}"))
}

fn main() -> Result<()> {
    let a = Args::parse();
    let files = a.dir.join("files");
    let (ops, secs) = match a.phase.as_str() {
        "create" => {
            fs::create_dir_all(&files).context("cannot make the files' directory")?;
            timed(a.n, || {
                for i in 0..a.n {
                    drop(OpenOptions::new().write(true).create_new(true).mode(0o644).open(file(&files, i))?);
                }
                Ok(())
            })?
        }
        "stat" => timed(a.n, || stat_all(&files, a.n))?,
        "readdir" => {
            let mut entries = 0;
            let t = Instant::now();
            for _ in 0..a.repeat {
                entries += fs::read_dir(&files)?.count() as u64;
            }
            (entries, t.elapsed().as_secs_f64())
        }
        "ls-l" => {
            let t = Instant::now();
            let mut entries = 0;
            for e in fs::read_dir(&files)? {
                let e = e?;
                fs::symlink_metadata(e.path())?;
                entries += 1;
            }
            (entries, t.elapsed().as_secs_f64())
        }
        "append" => {
            let mut f = OpenOptions::new().append(true).create(true).open(a.dir.join("appended"))?;
            let block = vec![0x5au8; 4096];
            timed(a.n, || {
                for _ in 0..a.n {
                    f.write_all(&block)?;
                }
                Ok(())
            })?
        }
        "getattr-rt" => {
            let p = a.dir.join("probe");
            drop(File::create(&p)?);
            timed(a.n, || {
                for _ in 0..a.n {
                    rustix::fs::statx(CWD, &p, AtFlags::STATX_FORCE_SYNC, StatxFlags::BASIC_STATS)?;
                }
                Ok(())
            })?
        }
        "unlink" => timed(a.n, || {
            for i in 0..a.n {
                fs::remove_file(file(&files, i))?;
            }
            Ok(())
        })?,
        other => bail!("unknown phase {other}"),
    };
    let us = if ops == 0 { 0.0 } else { secs * 1e6 / ops as f64 };
    println!("{}", json!({ "phase": a.phase, "ops": ops, "seconds": secs, "us_per_op": us }));
    Ok(())
}

fn stat_all(files: &Path, n: u64) -> Result<()> {
    for i in 0..n {
        fs::symlink_metadata(file(files, i))?;
    }
    Ok(())
}

fn timed(ops: u64, f: impl FnOnce() -> Result<()>) -> Result<(u64, f64)> {
    let t = Instant::now();
    f()?;
    Ok((ops, t.elapsed().as_secs_f64()))
}
