//! `dualfs trace serve`: trace any file system at the block level.
//!
//! Kernel file systems cannot be traced from inside on these machines (no
//! blktrace), so the trace is taken one level down: IMAGE is served as the
//! single file `image` of a small FUSE file system, every open in direct-I/O
//! mode (no page cache between the loop device and this process), and a
//! loop device is set up on `MNT/image`. Every request the loop device
//! sends — read, write, fsync — reaches this process and is recorded in the
//! same format as a DualFS mount's own trace. The file system under test
//! runs on the loop device unchanged.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::Args;
use dualfs_engine::device::tracing::{BlockClass, TraceDevice, TraceOp, TraceRecord, TraceSink};
use dualfs_engine::types::BLOCK_BYTES;
use dualfs_wire::abi::{
    self, Attr, EntryOut, InHeader, InitIn, InitOut, Kstatfs, ReplyBuf, Request, fopen, init_flags,
};
use dualfs_wire::{Handler, Outcome, Server, Transports};

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
`journal` (the peer's blocks are not decoded).";

/// Arguments of `dualfs trace serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The image file to expose.
    pub image: PathBuf,
    /// An empty directory to mount on; the image appears as MNT/image.
    pub mountpoint: PathBuf,
    /// The trace file to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Which device this image is: d (main or data device) or m (journal,
    /// log or meta-data device).
    #[arg(long, default_value = "d", value_parser = ["d", "m"])]
    pub device: String,
}

const ROOT: u64 = abi::ROOT_ID;
const IMAGE: u64 = 2;
const NAME: &[u8] = b"image";
const TTL: Duration = Duration::from_secs(3600);
const DT_DIR: u32 = 4;
const DT_REG: u32 = 8;
/// Large requests pass whole, as they would to a disk.
const MAX_WRITE: u32 = 1 << 20;

#[derive(Debug)]
struct ImageFs {
    file: File,
    size: u64,
    device: TraceDevice,
    class: BlockClass,
    sink: Arc<TraceSink>,
    /// Seconds since the epoch: every time of both nodes.
    created: i64,
}

impl ImageFs {
    fn attr(&self, ino: u64) -> Attr {
        let dir = ino == ROOT;
        Attr {
            ino,
            size: if dir { 0 } else { self.size },
            blocks: if dir { 0 } else { self.size.div_ceil(512) },
            atime: self.created,
            mtime: self.created,
            ctime: self.created,
            mode: if dir { libc::S_IFDIR | 0o755 } else { libc::S_IFREG | 0o600 },
            nlink: if dir { 2 } else { 1 },
            blksize: 4096,
            ..Attr::default()
        }
    }

    fn entry(&self, ino: u64) -> EntryOut {
        EntryOut { nodeid: ino, generation: 0, entry_valid: TTL, attr_valid: TTL, attr: self.attr(ino) }
    }

    /// Records a request of `len` bytes at byte `offset`, as the 4 KiB
    /// blocks it touches (loop devices send 512-byte sectors; nearly all
    /// requests are whole blocks).
    fn record(&self, start: Instant, op: TraceOp, offset: u64, len: u64) {
        let (first, count) = if op == TraceOp::Flush {
            (0, 0)
        } else {
            let first = offset / BLOCK_BYTES;
            (first, (offset + len).div_ceil(BLOCK_BYTES) - first)
        };
        let classes =
            if count == 0 { Vec::new() } else { vec![(self.class, u32::try_from(count).unwrap_or(u32::MAX))] };
        self.sink.record(&TraceRecord {
            start_ns: self.sink.now_ns(start),
            duration_ns: u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX),
            device: self.device,
            op,
            first,
            count,
            classes,
        });
    }
}

fn errno(e: &std::io::Error) -> Outcome {
    Outcome::Error(e.raw_os_error().unwrap_or(libc::EIO))
}

impl Handler for ImageFs {
    fn init(&self, _offer: &InitIn) -> InitOut {
        InitOut {
            flags: init_flags::ASYNC_READ | init_flags::BIG_WRITES,
            max_write: MAX_WRITE,
            max_pages: u16::try_from(MAX_WRITE / 4096).unwrap_or(1),
            ..InitOut::default()
        }
    }

    fn handle(&self, h: &InHeader, req: Request<'_>, out: &mut ReplyBuf<'_>) -> Outcome {
        match req {
            Request::Lookup { name } if h.nodeid == ROOT && name == NAME => {
                out.entry_out(&self.entry(IMAGE));
                Outcome::Reply
            }
            Request::Lookup { .. } => Outcome::Error(libc::ENOENT),
            Request::Getattr { .. } if h.nodeid == ROOT || h.nodeid == IMAGE => {
                out.attr_out(&self.attr(h.nodeid), TTL);
                Outcome::Reply
            }
            Request::Getattr { .. } => Outcome::Error(libc::ENOENT),
            // No page cache: every request of the loop device reaches us.
            Request::Open { .. } if h.nodeid == IMAGE => {
                out.open_out(0, fopen::DIRECT_IO);
                Outcome::Reply
            }
            Request::Open { .. } => Outcome::Error(libc::EISDIR),
            Request::Opendir { .. } => {
                out.open_out(0, 0);
                Outcome::Reply
            }
            Request::Read { offset, size, .. } => {
                let start = Instant::now();
                let len = u64::from(size).min(self.size.saturating_sub(offset));
                let spare = out.spare();
                let n = usize::try_from(len).unwrap_or(usize::MAX).min(spare.len());
                match self.file.read_exact_at(&mut spare[..n], offset) {
                    Ok(()) => {
                        out.advance(n);
                        self.record(start, TraceOp::Read, offset, n as u64);
                        Outcome::Reply
                    }
                    Err(e) => errno(&e),
                }
            }
            Request::Write { offset, data, .. } => {
                let start = Instant::now();
                if offset.saturating_add(data.len() as u64) > self.size {
                    return Outcome::Error(libc::ENOSPC);
                }
                match self.file.write_all_at(data, offset) {
                    Ok(()) => {
                        self.record(start, TraceOp::Write, offset, data.len() as u64);
                        out.write_out(u32::try_from(data.len()).unwrap_or(u32::MAX));
                        Outcome::Reply
                    }
                    Err(e) => errno(&e),
                }
            }
            Request::Fsync { .. } => {
                let start = Instant::now();
                match self.file.sync_data() {
                    Ok(()) => {
                        self.record(start, TraceOp::Flush, 0, 0);
                        Outcome::Reply
                    }
                    Err(e) => errno(&e),
                }
            }
            Request::Flush { .. } | Request::Release { .. } | Request::Releasedir { .. } => Outcome::Reply,
            Request::Readdir { offset, size, .. } if h.nodeid == ROOT => {
                let entries = [(ROOT, DT_DIR, b".".as_slice()), (ROOT, DT_DIR, b".."), (IMAGE, DT_REG, NAME)];
                let skip = usize::try_from(offset).unwrap_or(usize::MAX);
                for (i, (ino, kind, name)) in (1u64..).zip(entries).skip(skip) {
                    if !out.push_dirent(size as usize, ino, i, kind, name) {
                        break;
                    }
                }
                Outcome::Reply
            }
            Request::Readdir { .. } => Outcome::Error(libc::ENOTDIR),
            Request::Statfs => {
                out.statfs_out(&Kstatfs { bsize: 512, namelen: 255, frsize: 512, ..Kstatfs::default() });
                Outcome::Reply
            }
            Request::Forget { .. } | Request::BatchForget { .. } | Request::Interrupt { .. } => Outcome::NoReply,
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
    let sink = TraceSink::create(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    sink.comment(&format!("device {} blocks={} name={}", device.letter(), size / BLOCK_BYTES, args.image.display()));
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let created = i64::try_from(created).unwrap_or(i64::MAX);
    let fs = ImageFs { file, size, device, class, sink: sink.clone(), created };
    let options = ["fsname=dualfs-trace", "rw", "default_permissions", "allow_other"];
    // /dev/fuse read by two threads, what the traces so far were taken with.
    let transports = Transports { uring: false, dev_threads: 2, ..Transports::default() };
    let server = Server::start(&args.mountpoint, &options, Arc::new(fs), transports)
        .with_context(|| format!("cannot mount on {}", args.mountpoint.display()))?;
    let served = server.wait();
    sink.flush().with_context(|| format!("cannot write {}", args.out.display()))?;
    served.map(|_| ()).context("the FUSE session ended with an error")
}
