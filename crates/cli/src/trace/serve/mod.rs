//! `dualfs trace serve`: trace any file system at the block level, and run
//! it on an emulated disk.
//!
//! Kernel file systems cannot be traced from inside on these machines (no
//! blktrace), so the trace is taken one level down: IMAGE is served as the
//! single file `image` of a small FUSE file system (over `dualfs-wire`'s
//! /dev/fuse transport), every open in direct-I/O mode (no page cache
//! between the loop device and this process), and a loop device is set up
//! on `MNT/image`. Every request the loop device sends — read, write,
//! flush, discard — reaches this process and is recorded in the same
//! format as a DualFS mount's own trace.
//!
//! With `--model`, each request is also answered only when the modelled
//! disk would have completed it (see [`emulate`]): the file system on the
//! loop device runs, unchanged, on an emulated disk. `MNT/stats` reads as
//! JSON: the requests seen (by size), the model's counters, how late the
//! answers went out and the server's own CPU time.

mod emulate;

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::Args;
use dualfs_engine::device::tracing::{BlockClass, TraceDevice, TraceOp, TraceRecord, TraceSink};
use dualfs_engine::types::BLOCK_BYTES;
use dualfs_wire::abi::{Attr, EntryOut, InHeader, InitIn, InitOut, Kstatfs, ReplyBuf, Request, fopen, init_flags};
use dualfs_wire::{Handler, Outcome, Server, Transports};
use serde_json::{Value, json};

use super::disk::{self, Model, Op};
use emulate::Emulator;

pub const HELP: &str = "\
Serves until unmounted (fusermount3 -u MNT). Typical use, for ext4 with its
journal on a second device:

  dualfs trace serve main.img /tmp/t-main --out main.trace --device d &
  dualfs trace serve jrnl.img /tmp/t-jrnl --out jrnl.trace --device m &
  losetup --direct-io=on -f --show /tmp/t-main/image     # /dev/loop0
  losetup --direct-io=on -f --show /tmp/t-jrnl/image     # /dev/loop1
  mkfs.ext4 -J device=/dev/loop1 /dev/loop0 ...
  dualfs trace summary main.trace jrnl.trace

Blocks of the main device are classed `fs`, of a journal or log device
`journal` (the peer's blocks are not decoded).

On an emulated disk (--model), two partitions of one disk are two files of
one server: --parts 408M,3688M serves MNT/p0 and MNT/p1 beside MNT/image,
consecutive ranges of the image, and one head serves them all. Set up a disk's loop device with its discards off
(echo 0 > /sys/block/loopN/queue/discard_max_bytes: a disk has none, and
a punched hole then reaches the server only as a write of zeros) and
rotational (echo 1 > /sys/block/loopN/queue/rotational: a loop device over
a FUSE file says it is not).";

/// Arguments of `dualfs trace serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The image file to expose.
    pub image: PathBuf,
    /// An empty directory to mount on; the image appears as MNT/image.
    pub mountpoint: PathBuf,
    /// The trace file to write (none: no trace).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Which device this image is: d (main or data device) or m (journal,
    /// log or meta-data device).
    #[arg(long, default_value = "d", value_parser = ["d", "m"])]
    pub device: String,
    /// Answer each request when this disk model would have completed it.
    #[arg(long, value_enum)]
    pub model: Option<Model>,
    /// The emulated disk has its write cache off.
    #[arg(long)]
    pub no_write_cache: bool,
    /// Also serve consecutive ranges of the image of these sizes (K, M, G
    /// suffixes) as files p0, p1, ...: a disk's partitions.
    #[arg(long, value_delimiter = ',', value_parser = crate::args::parse_size)]
    pub parts: Vec<u64>,
    /// Threads reading requests: the most requests the disk can have
    /// waiting at once (a loop device sends up to its queue depth).
    #[arg(long, default_value_t = 40)]
    pub threads: usize,
}

const ROOT: u64 = 1;
const STATS: u64 = 2;
/// The whole image; partitions follow it.
const IMAGE: u64 = 3;
const VALID: Duration = Duration::from_secs(3600);
/// The largest request the kernel may send (with MAX_PAGES).
const MAX_WRITE: u32 = 1 << 20;
const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const DT_DIR: u32 = 4;
const DT_REG: u32 = 8;
const FALLOC_FL_PUNCH_HOLE: u32 = 0x02;
const FALLOC_FL_ZERO_RANGE: u32 = 0x10;

/// Requests seen, by operation and size in bytes.
type Sizes = BTreeMap<(&'static str, u64), u64>;

/// A served file: a range of the image.
#[derive(Debug)]
struct Part {
    name: String,
    offset: u64,
    size: u64,
}

#[derive(Debug)]
struct ImageFs {
    file: File,
    size: u64,
    /// The image itself, then the partitions; inode IMAGE + index.
    parts: Vec<Part>,
    device: TraceDevice,
    class: BlockClass,
    sink: Option<Arc<TraceSink>>,
    emulator: Option<Arc<Emulator>>,
    created_s: i64,
    sizes: Mutex<Sizes>,
    /// Open handles of `stats`: the snapshot each reads.
    snapshots: Mutex<HashMap<u64, Vec<u8>>>,
    next_fh: AtomicU64,
    started: Instant,
}

fn errno(e: &std::io::Error) -> Outcome {
    Outcome::Error(e.raw_os_error().unwrap_or(libc::EIO))
}

fn cpu_seconds() -> f64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).map_or(0.0, |u| {
        let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        tv(u.user_time()) + tv(u.system_time())
    })
}

impl ImageFs {
    fn part(&self, ino: u64) -> Option<&Part> {
        self.parts.get(usize::try_from(ino.checked_sub(IMAGE)?).ok()?)
    }

    fn attr(&self, ino: u64) -> Attr {
        let (mode, size, nlink) = match (ino, self.part(ino)) {
            (ROOT, _) => (S_IFDIR | 0o755, 0, 2),
            (_, Some(p)) => (S_IFREG | 0o600, p.size, 1),
            // Read through direct I/O: the size only has to be large enough.
            _ => (S_IFREG | 0o444, 1 << 20, 1),
        };
        let t = self.created_s;
        Attr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            mode,
            nlink,
            blksize: 4096,
            ..Attr::default()
        }
    }

    fn entry(&self, ino: u64) -> EntryOut {
        EntryOut { nodeid: ino, generation: 1, entry_valid: VALID, attr_valid: VALID, attr: self.attr(ino) }
    }

    /// Counts the request, runs it through the model, and records it in
    /// the trace as the 4 KiB blocks it touches (loop devices send 512-byte
    /// sectors; nearly all requests are whole blocks).
    fn account(&self, start: Instant, op: Op, offset: u64, len: u64) {
        let name = match op {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Discard => "discard",
            Op::Zero => "zero",
        };
        *self.sizes.lock().unwrap_or_else(PoisonError::into_inner).entry((name, len)).or_default() += 1;
        if let Some(e) = &self.emulator {
            e.serve(disk::Request { op, offset, len });
        }
        let Some(sink) = &self.sink else { return };
        let top = match op {
            Op::Read => TraceOp::Read,
            Op::Write | Op::Zero => TraceOp::Write,
            Op::Flush => TraceOp::Flush,
            // The trace format has no discard.
            Op::Discard => return,
        };
        let (first, count) = if top == TraceOp::Flush {
            (0, 0)
        } else {
            let first = offset / BLOCK_BYTES;
            (first, (offset + len).div_ceil(BLOCK_BYTES) - first)
        };
        let classes =
            if count == 0 { Vec::new() } else { vec![(self.class, u32::try_from(count).unwrap_or(u32::MAX))] };
        sink.record(&TraceRecord {
            start_ns: sink.now_ns(start),
            duration_ns: u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX),
            device: self.device,
            op: top,
            first,
            count,
            classes,
        });
    }

    fn stats(&self) -> Value {
        let sizes = self.sizes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut by_op: BTreeMap<&str, serde_json::Map<String, Value>> = BTreeMap::new();
        for ((op, len), n) in sizes.iter() {
            by_op.entry(op).or_default().insert(len.to_string(), json!(n));
        }
        json!({
            "device": self.device.letter().to_string(),
            "size_bytes": self.size,
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "cpu_s": cpu_seconds(),
            "sizes": by_op,
            "emulation": self.emulator.as_ref().map(|e| e.to_json()),
        })
    }

    fn read(&self, ino: u64, fh: u64, offset: u64, size: u32, out: &mut ReplyBuf<'_>) -> Outcome {
        if ino == STATS {
            let snaps = self.snapshots.lock().unwrap_or_else(PoisonError::into_inner);
            let snap = snaps.get(&fh).map_or(&[][..], Vec::as_slice);
            let from = usize::try_from(offset).unwrap_or(usize::MAX).min(snap.len());
            let to = from.saturating_add(size as usize).min(snap.len());
            out.push(&snap[from..to]);
            return Outcome::Reply;
        }
        let Some(part) = self.part(ino) else { return Outcome::Error(libc::EBADF) };
        let start = Instant::now();
        let len = u64::from(size).min(part.size.saturating_sub(offset));
        let offset = part.offset + offset;
        let n = usize::try_from(len).unwrap_or(0);
        let spare = out.spare();
        if n > spare.len() {
            return Outcome::Error(libc::EINVAL);
        }
        if let Err(e) = self.file.read_exact_at(&mut spare[..n], offset) {
            return errno(&e);
        }
        out.advance(n);
        self.account(start, Op::Read, offset, len);
        Outcome::Reply
    }

    fn write(&self, ino: u64, offset: u64, data: &[u8], out: &mut ReplyBuf<'_>) -> Outcome {
        let Some(part) = self.part(ino) else { return Outcome::Error(libc::EBADF) };
        let start = Instant::now();
        if offset.saturating_add(data.len() as u64) > part.size {
            return Outcome::Error(libc::ENOSPC);
        }
        let offset = part.offset + offset;
        if let Err(e) = self.file.write_all_at(data, offset) {
            return errno(&e);
        }
        self.account(start, Op::Write, offset, data.len() as u64);
        out.write_out(u32::try_from(data.len()).unwrap_or(u32::MAX));
        Outcome::Reply
    }

    fn fsync(&self) -> Outcome {
        let start = Instant::now();
        // On an emulated disk the model's flush stands for the image's:
        // the host's own flush would only add its noise.
        if self.emulator.is_none()
            && let Err(e) = self.file.sync_data()
        {
            return errno(&e);
        }
        self.account(start, Op::Flush, 0, 0);
        Outcome::Reply
    }

    /// A loop device's discard and write-zeroes both arrive as a punched
    /// hole (write-zeroes with REQ_NOUNMAP as a zeroed range): the image
    /// gets the hole, the model a write of zeros on a disk (which has no
    /// discard: its loop device should say so) and a discard on an SSD.
    fn fallocate(&self, ino: u64, offset: u64, length: u64, mode: u32) -> Outcome {
        let Some(part) = self.part(ino) else { return Outcome::Error(libc::EBADF) };
        let start = Instant::now();
        if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) == 0 {
            return Outcome::Reply;
        }
        let length = length.min(part.size.saturating_sub(offset));
        let offset = part.offset + offset;
        let (Ok(off), Ok(len)) = (i64::try_from(offset), i64::try_from(length)) else {
            return Outcome::Error(libc::EINVAL);
        };
        let flags = nix::fcntl::FallocateFlags::from_bits_truncate(mode.cast_signed());
        if let Err(e) = nix::fcntl::fallocate(&self.file, flags, off, len) {
            return Outcome::Error(e as i32);
        }
        let disk = self.emulator.as_ref().is_some_and(|e| e.model() != Model::Ssd);
        let op = if disk { Op::Zero } else { Op::Discard };
        self.account(start, op, offset, length);
        Outcome::Reply
    }

    fn open(&self, ino: u64, out: &mut ReplyBuf<'_>) -> Outcome {
        match ino {
            _ if self.part(ino).is_some() => out.open_out(0, fopen::DIRECT_IO),
            STATS => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                let mut text = serde_json::to_vec_pretty(&self.stats()).unwrap_or_default();
                text.push(b'\n');
                self.snapshots.lock().unwrap_or_else(PoisonError::into_inner).insert(fh, text);
                out.open_out(fh, fopen::DIRECT_IO);
            }
            _ => return Outcome::Error(libc::EISDIR),
        }
        Outcome::Reply
    }

    fn readdir(&self, ino: u64, offset: u64, size: u32, out: &mut ReplyBuf<'_>) -> Outcome {
        if ino != ROOT {
            return Outcome::Error(libc::ENOTDIR);
        }
        let mut entries: Vec<(u64, u32, &[u8])> =
            vec![(ROOT, DT_DIR, b"."), (ROOT, DT_DIR, b".."), (STATS, DT_REG, b"stats")];
        entries.extend((IMAGE..).zip(&self.parts).map(|(ino, p)| (ino, DT_REG, p.name.as_bytes())));
        let max = usize::try_from(size).unwrap_or(usize::MAX);
        for (i, (ino, kind, name)) in (1u64..).zip(entries).skip(usize::try_from(offset).unwrap_or(usize::MAX)) {
            if !out.push_dirent(max, ino, i, kind, name) {
                break;
            }
        }
        Outcome::Reply
    }
}

impl Handler for ImageFs {
    fn init(&self, _offer: &InitIn) -> InitOut {
        InitOut {
            // ASYNC_DIO: a loop device's concurrent requests reach us
            // concurrently, as they would reach a disk's queue.
            flags: init_flags::ASYNC_READ | init_flags::BIG_WRITES | init_flags::ASYNC_DIO,
            max_write: MAX_WRITE,
            max_pages: u16::try_from(MAX_WRITE / 4096).unwrap_or(256),
            // Asynchronous direct I/O goes as background requests: room for
            // a loop device's queue.
            max_background: 128,
            congestion_threshold: 96,
            ..InitOut::default()
        }
    }

    fn handle(&self, h: &InHeader, req: Request<'_>, out: &mut ReplyBuf<'_>) -> Outcome {
        match req {
            Request::Forget { .. } | Request::BatchForget { .. } | Request::Interrupt { .. } => Outcome::NoReply,
            Request::Lookup { name } if h.nodeid == ROOT => {
                let part = (IMAGE..).zip(&self.parts).find(|(_, p)| p.name.as_bytes() == name).map(|(i, _)| i);
                match part.or((name == b"stats").then_some(STATS)) {
                    Some(ino) => out.entry_out(&self.entry(ino)),
                    None => return Outcome::Error(libc::ENOENT),
                }
                Outcome::Reply
            }
            Request::Lookup { .. } => Outcome::Error(libc::ENOTDIR),
            Request::Getattr { .. } | Request::Setattr(_) if h.nodeid <= STATS || self.part(h.nodeid).is_some() => {
                out.attr_out(&self.attr(h.nodeid), VALID);
                Outcome::Reply
            }
            Request::Open { .. } => self.open(h.nodeid, out),
            Request::Read { fh, offset, size, .. } => self.read(h.nodeid, fh, offset, size, out),
            Request::Write { offset, data, .. } => self.write(h.nodeid, offset, data, out),
            Request::Fsync { .. } if self.part(h.nodeid).is_some() => self.fsync(),
            Request::Fallocate { offset, length, mode, .. } => self.fallocate(h.nodeid, offset, length, mode),
            Request::Release { fh, .. } => {
                if h.nodeid == STATS {
                    self.snapshots.lock().unwrap_or_else(PoisonError::into_inner).remove(&fh);
                }
                Outcome::Reply
            }
            Request::Flush { .. } | Request::Fsync { .. } | Request::Releasedir { .. } => Outcome::Reply,
            Request::Opendir { .. } => {
                out.open_out(0, 0);
                Outcome::Reply
            }
            Request::Readdir { offset, size, .. } => self.readdir(h.nodeid, offset, size, out),
            Request::Statfs => {
                let blocks = self.size / 4096;
                out.statfs_out(&Kstatfs {
                    blocks,
                    bsize: 4096,
                    namelen: 255,
                    frsize: 4096,
                    files: 3,
                    ..Kstatfs::default()
                });
                Outcome::Reply
            }
            // ENOSYS once and the kernel stops asking (xattrs and the rest).
            _ => Outcome::Error(libc::ENOSYS),
        }
    }
}

/// Runs `dualfs trace serve` in the foreground until the mount goes away.
///
/// # Errors
/// The image or trace file cannot be opened, or the mount fails.
pub fn run(args: &ServeArgs) -> Result<()> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&args.image)
        .with_context(|| format!("cannot open {}", args.image.display()))?;
    let size = file.metadata().with_context(|| format!("cannot examine {}", args.image.display()))?.len();
    if size == 0 {
        bail!("{} is empty", args.image.display());
    }
    let device = if args.device == "m" { TraceDevice::Meta } else { TraceDevice::Data };
    let class = if device == TraceDevice::Meta { BlockClass::Journal } else { BlockClass::Fs };
    let sink = match &args.out {
        Some(out) => {
            let sink = TraceSink::create(out).with_context(|| format!("cannot create {}", out.display()))?;
            sink.comment(&format!(
                "device {} blocks={} name={}",
                device.letter(),
                size / BLOCK_BYTES,
                args.image.display()
            ));
            Some(sink)
        }
        None => None,
    };
    let mut parts = vec![Part { name: "image".into(), offset: 0, size }];
    let mut at = 0u64;
    for (i, &len) in args.parts.iter().enumerate() {
        if at.saturating_add(len) > size {
            bail!("the partitions end past the image ({size} bytes)");
        }
        parts.push(Part { name: format!("p{i}"), offset: at, size: len });
        at += len;
    }
    let emulator = args.model.map(|m| Emulator::start(m, size, !args.no_write_cache));
    let created_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    let fs = Arc::new(ImageFs {
        file,
        size,
        parts,
        device,
        class,
        sink: sink.clone(),
        emulator: emulator.clone(),
        created_s,
        sizes: Mutex::new(BTreeMap::new()),
        snapshots: Mutex::new(HashMap::new()),
        next_fh: AtomicU64::new(1),
        started: Instant::now(),
    });
    let options = ["fsname=dualfs-trace", "subtype=dualfs-trace", "allow_other", "default_permissions"];
    let transports = Transports { uring: false, dev_threads: args.threads.max(1), ..Transports::default() };
    let server = Server::start(&args.mountpoint, &options, fs, transports)
        .with_context(|| format!("cannot mount on {}", args.mountpoint.display()))?;
    let served = server.wait();
    if let Some(e) = &emulator {
        e.stop();
    }
    if let (Some(sink), Some(out)) = (&sink, &args.out) {
        sink.flush().with_context(|| format!("cannot write {}", out.display()))?;
    }
    served.map(|_| ()).context("the FUSE session ended with an error")
}
