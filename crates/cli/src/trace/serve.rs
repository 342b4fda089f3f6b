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

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use clap::Args;
use dualfs_engine::device::tracing::{BlockClass, TraceDevice, TraceOp, TraceRecord, TraceSink};
use dualfs_engine::types::BLOCK_BYTES;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, LockOwner,
    MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite,
    Request, Session, WriteFlags,
};

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

const ROOT: INodeNo = INodeNo(1);
const IMAGE: INodeNo = INodeNo(2);
const NAME: &str = "image";
const TTL: Duration = Duration::from_secs(3600);

#[derive(Debug)]
struct ImageFs {
    file: File,
    size: u64,
    device: TraceDevice,
    class: BlockClass,
    sink: Arc<TraceSink>,
    created: SystemTime,
}

impl ImageFs {
    fn attr(&self, ino: INodeNo) -> FileAttr {
        let dir = ino == ROOT;
        FileAttr {
            ino,
            size: if dir { 0 } else { self.size },
            blocks: if dir { 0 } else { self.size.div_ceil(512) },
            atime: self.created,
            mtime: self.created,
            ctime: self.created,
            crtime: self.created,
            kind: if dir { FileType::Directory } else { FileType::RegularFile },
            perm: if dir { 0o755 } else { 0o600 },
            nlink: if dir { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
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

fn errno(e: &std::io::Error) -> Errno {
    e.raw_os_error().map_or(Errno::EIO, Errno::from_i32)
}

impl Filesystem for ImageFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Large requests pass whole, as they would to a disk.
        if let Err(max) = config.set_max_write(1 << 20) {
            let _ = config.set_max_write(max);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == ROOT && name == NAME {
            reply.entry(&TTL, &self.attr(IMAGE), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == ROOT || ino == IMAGE {
            reply.attr(&TTL, &self.attr(ino));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino == IMAGE {
            // No page cache: every request of the loop device reaches us.
            reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
        } else {
            reply.error(Errno::EISDIR);
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let start = Instant::now();
        let len = u64::from(size).min(self.size.saturating_sub(offset));
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
        match self.file.read_exact_at(&mut buf, offset) {
            Ok(()) => {
                self.record(start, TraceOp::Read, offset, len);
                reply.data(&buf);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let start = Instant::now();
        if offset.saturating_add(data.len() as u64) > self.size {
            reply.error(Errno::ENOSPC);
            return;
        }
        match self.file.write_all_at(data, offset) {
            Ok(()) => {
                self.record(start, TraceOp::Write, offset, data.len() as u64);
                reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX));
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let start = Instant::now();
        match self.file.sync_data() {
            Ok(()) => {
                self.record(start, TraceOp::Flush, 0, 0);
                reply.ok();
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino != ROOT {
            reply.error(Errno::ENOTDIR);
            return;
        }
        let entries =
            [(ROOT, FileType::Directory, "."), (ROOT, FileType::Directory, ".."), (IMAGE, FileType::RegularFile, NAME)];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(usize::try_from(offset).unwrap_or(usize::MAX)) {
            if reply.add(*ino, i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
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
    let fs = ImageFs { file, size, device, class, sink: sink.clone(), created: SystemTime::now() };
    let mut config = fuser::Config::default();
    config.mount_options =
        vec![MountOption::FSName("dualfs-trace".into()), MountOption::RW, MountOption::DefaultPermissions];
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(2);
    let session = Session::new(fs, &args.mountpoint, &config)
        .with_context(|| format!("cannot mount on {}", args.mountpoint.display()))?;
    let served = session.run();
    sink.flush().with_context(|| format!("cannot write {}", args.out.display()))?;
    served.context("the FUSE session ended with an error")
}
