//! `engine-bench`: the engine alone, without FUSE or the kernel: creates/s,
//! lookups/s, 4 KiB random writes/s, sequential write and read MB/s, and
//! meta-data bytes written per created file, on the in-memory and file
//! backends.
//!
//! Each figure includes the commit that makes the work durable (a `sync`),
//! so that a design that defers everything to unmount does not look fast.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use clap::Parser;
use dualfs_engine::Volume;
use dualfs_engine::device::tracing::{TraceDevice, TraceSink, TracingDevice};
use dualfs_engine::device::{BlockDevice, FileDevice, MemoryDevice};
use dualfs_engine::format::classify;
use dualfs_engine::types::{BLOCK_BYTES, InodeNo};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};
use serde_json::json;

/// Benchmarks of the DualFS engine alone.
#[derive(Parser, Debug)]
struct Args {
    /// Files created (and looked up), spread over directories of 1,000.
    #[arg(long, default_value_t = 100_000)]
    files: u64,
    /// 4 KiB random writes.
    #[arg(long, default_value_t = 50_000)]
    random_writes: u64,
    /// MiB written and read sequentially (also the random-write file's size).
    #[arg(long, default_value_t = 512)]
    seq_mib: u64,
    /// Backends to run: memory, file.
    #[arg(long, default_value = "memory,file")]
    backends: String,
    /// Where the file backend's images go (a temporary folder inside it).
    #[arg(long, default_value = "/var/tmp")]
    dir: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Wrap both devices in the tracing device, writing to this file (to
    /// measure what tracing costs).
    #[arg(long)]
    trace: Option<std::path::PathBuf>,
    /// Instead of the engine figures: nanoseconds per device request with
    /// and without the tracing device, over the memory device (the worst
    /// case for tracing: the request itself costs almost nothing).
    #[arg(long)]
    device_overhead: bool,
}

/// Counts bytes written to the device it wraps.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn BlockDevice>,
    written: AtomicU64,
}

impl BlockDevice for Counting {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_blocks(first, buf)
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        self.written.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.write_blocks(first, buf)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn engine<T>(r: dualfs_engine::Result<T>, what: &str) -> Result<T> {
    r.map_err(|e| anyhow!("{what}: {e}"))
}

fn devices(backend: &str, dir: &Path, meta_blocks: u64, data_blocks: u64) -> Result<[Arc<dyn BlockDevice>; 2]> {
    Ok(match backend {
        "memory" => [Arc::new(MemoryDevice::new(meta_blocks)), Arc::new(MemoryDevice::new(data_blocks))],
        "file" => {
            let mut out: Vec<Arc<dyn BlockDevice>> = Vec::new();
            for (name, blocks) in [("meta.img", meta_blocks), ("data.img", data_blocks)] {
                let p = dir.join(name);
                std::fs::File::create(&p)
                    .and_then(|f| f.set_len(blocks * BLOCK_BYTES))
                    .with_context(|| format!("cannot create {}", p.display()))?;
                out.push(Arc::new(FileDevice::open(&p, false, true).with_context(|| format!("{}", p.display()))?));
            }
            [out[0].clone(), out[1].clone()]
        }
        other => anyhow::bail!("unknown backend {other:?} (memory or file)"),
    })
}

fn rate(n: u64, t: Instant) -> f64 {
    n as f64 / t.elapsed().as_secs_f64()
}

fn run(backend: &str, a: &Args) -> Result<serde_json::Value> {
    let tmp = tempfile::Builder::new().prefix("dualfs-engine-bench").tempdir_in(&a.dir)?;
    let data_blocks = (a.seq_mib * 2 + 512) * 256;
    let meta_blocks = (data_blocks / 10).max(64 * 256);
    let [meta, data] = devices(backend, tmp.path(), meta_blocks, data_blocks)?;
    let [meta, data]: [Arc<dyn BlockDevice>; 2] = match &a.trace {
        Some(path) => {
            let sink = TraceSink::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            [
                Arc::new(TracingDevice::new(meta, TraceDevice::Meta, "meta", sink.clone(), classify::meta_block)),
                Arc::new(TracingDevice::new(data, TraceDevice::Data, "data", sink, classify::data_block)),
            ]
        }
        None => [meta, data],
    };
    engine(Volume::format(meta.clone(), data.clone(), &MkfsOptions::default()), "mkfs")?;
    let counting = Arc::new(Counting { inner: meta, written: AtomicU64::new(0) });
    let vol = engine(Volume::open(counting.clone(), data.clone(), MountOptions::default()), "open")?;
    let root = InodeNo::ROOT;
    let c = Creds::ROOT;

    // Creates: directories of 1,000 files, then one sync.
    let dirs = a.files.div_ceil(1000);
    let mut dir_inos = Vec::new();
    let before = counting.written.load(Ordering::Relaxed);
    let t = Instant::now();
    for d in 0..dirs {
        dir_inos.push(engine(vol.mkdir(root, format!("d{d}").as_bytes(), 0o755, c), "mkdir")?.ino);
    }
    for i in 0..a.files {
        engine(vol.create(dir_inos[(i / 1000) as usize], format!("file-{i}").as_bytes(), 0o644, c), "create")?;
    }
    engine(vol.sync(), "sync")?;
    let creates = rate(a.files, t);
    let meta_per_file = (counting.written.load(Ordering::Relaxed) - before) as f64 / a.files as f64;

    // Lookups, warm (everything just created is cached).
    let t = Instant::now();
    for i in 0..a.files {
        engine(vol.lookup(dir_inos[(i / 1000) as usize], format!("file-{i}").as_bytes()), "lookup")?;
    }
    let lookups = rate(a.files, t);

    // Sequential write and read of one file.
    let f = engine(vol.create(root, b"seq", 0o644, c), "create")?.ino;
    let chunk = vec![0x5au8; 1 << 20];
    let t = Instant::now();
    for i in 0..a.seq_mib {
        engine(vol.write(f, i << 20, &chunk), "write")?;
    }
    engine(vol.fsync(f), "fsync")?;
    let seq_write = a.seq_mib as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for i in 0..a.seq_mib {
        engine(vol.read(f, i << 20, 1 << 20), "read")?;
    }
    let seq_read = a.seq_mib as f64 / t.elapsed().as_secs_f64();

    // 4 KiB random writes over the sequential file, then fsync.
    let blocks = a.seq_mib * 256;
    let page = vec![0xa5u8; 4096];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let t = Instant::now();
    for _ in 0..a.random_writes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        engine(vol.write(f, (x % blocks) * 4096, &page), "write")?;
    }
    engine(vol.fsync(f), "fsync")?;
    let random = rate(a.random_writes, t);

    // Lookups, cold: a fresh mount of the same devices.
    engine(vol.close(), "close")?;
    let meta = counting.inner.clone();
    let vol = engine(Volume::open(meta, data, MountOptions::default()), "reopen")?;
    let t = Instant::now();
    for d in 0..dirs {
        let dino = engine(vol.lookup(root, format!("d{d}").as_bytes()), "lookup")?.ino;
        for i in d * 1000..((d + 1) * 1000).min(a.files) {
            engine(vol.lookup(dino, format!("file-{i}").as_bytes()), "lookup")?;
        }
    }
    let cold = rate(a.files, t);
    engine(vol.close(), "close")?;
    Ok(json!({
        "backend": backend,
        "traced": a.trace.is_some(),
        "files": a.files,
        "creates_per_s": creates,
        "lookups_per_s_warm": lookups,
        "lookups_per_s_cold": cold,
        "random_4k_writes_per_s": random,
        "seq_write_mib_s": seq_write,
        "seq_read_mib_s": seq_read,
        "meta_bytes_per_created_file": meta_per_file,
    }))
}

/// Nanoseconds per request of `blocks` blocks, alternating writes and reads.
fn per_request_ns(dev: &dyn BlockDevice, blocks: usize, requests: u64) -> Result<f64> {
    let mut buf = vec![0x11u8; blocks * 4096];
    let span = dev.block_count() - blocks as u64;
    let t = Instant::now();
    for i in 0..requests {
        let first = (i * 7919 * blocks as u64) % span;
        if i % 2 == 0 {
            dev.write_blocks(first, &buf)?;
        } else {
            dev.read_blocks(first, &mut buf)?;
        }
    }
    Ok(t.elapsed().as_nanos() as f64 / requests as f64)
}

fn device_overhead(a: &Args) -> Result<()> {
    let tmp = tempfile::Builder::new().prefix("dualfs-trace-cost").tempdir_in(&a.dir)?;
    let sink = TraceSink::create(&tmp.path().join("t.trace"))?;
    let mut rows = Vec::new();
    for blocks in [1usize, 16, 256] {
        let plain: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(1 << 16));
        let traced = TracingDevice::new(plain.clone(), TraceDevice::Meta, "meta", sink.clone(), classify::meta_block);
        let n = 200_000 / blocks as u64;
        // Warm both (the memory device allocates on first write).
        per_request_ns(plain.as_ref(), blocks, n)?;
        let base = per_request_ns(plain.as_ref(), blocks, n)?;
        let with = per_request_ns(&traced, blocks, n)?;
        rows.push(json!({ "blocks": blocks, "plain_ns": base, "traced_ns": with, "overhead_ns": with - base }));
    }
    println!("{}", serde_json::to_string_pretty(&rows)?);
    Ok(())
}

fn main() -> Result<()> {
    let a = Args::parse();
    if a.device_overhead {
        return device_overhead(&a);
    }
    let mut all = Vec::new();
    for b in a.backends.split(',') {
        all.push(run(b.trim(), &a)?);
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    println!(
        "{:<8} {:>11} {:>13} {:>13} {:>12} {:>11} {:>11} {:>14}",
        "backend",
        "creates/s",
        "lookups/s",
        "cold look/s",
        "4K rand w/s",
        "seq W MiB/s",
        "seq R MiB/s",
        "meta B/create"
    );
    for r in &all {
        let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
        println!(
            "{:<8} {:>11.0} {:>13.0} {:>13.0} {:>12.0} {:>11.0} {:>11.0} {:>14.0}",
            r["backend"].as_str().unwrap_or("?"),
            f("creates_per_s"),
            f("lookups_per_s_warm"),
            f("lookups_per_s_cold"),
            f("random_4k_writes_per_s"),
            f("seq_write_mib_s"),
            f("seq_read_mib_s"),
            f("meta_bytes_per_created_file")
        );
    }
    Ok(())
}
