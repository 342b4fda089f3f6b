//! Requests on open files: OPEN, READ, WRITE, FLUSH, RELEASE, FSYNC,
//! FALLOCATE, LSEEK, COPY_FILE_RANGE, IOCTL.

use dualfs_engine::Error;
use dualfs_engine::device::{AlignedBuf, FileDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::Stamp;
use dualfs_engine::volume::{FLAG_APPEND, FLAG_IMMUTABLE, FLAG_SYNC};

use super::report;
use crate::DualFs;
use crate::answers::{
    Caller, Errno, FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE, FUSE_WRITE_CACHE, FUSE_WRITE_KILL_SUIDGID, Opened,
};
use crate::convert;
use crate::requests::Op;

/// Most bytes one `copy_file_range` request copies; the caller loops.
const COPY_MAX: u64 = 64 << 20;
/// Bytes read and written at a time by `copy_file_range`.
const COPY_CHUNK: u64 = 1 << 20;

fn ino(n: u64) -> InodeNo {
    InodeNo(n)
}

impl DualFs {
    /// OPEN with the `open(2)` flags.
    ///
    /// Stateless handles: the kernel's lookup reference keeps an open,
    /// unlinked file alive. Keeping the page cache across opens is safe
    /// because nobody but this kernel changes the volume. But reads the
    /// cache answers never reach the engine, which keeps access times:
    /// when a read would update one (under relatime, once after each
    /// change), the cache is dropped so that this open's reads arrive.
    ///
    /// # Errors
    /// The engine's.
    pub fn open(&self, node: u64, flags: i32) -> Result<Opened, Errno> {
        let _t = self.requests.time(Op::Open);
        let acc = flags & libc::O_ACCMODE;
        let reads = acc != libc::O_WRONLY;
        let writes = acc != libc::O_RDONLY;
        let direct = if writes { self.write_open_flags(ino(node)) } else { 0 };
        match self.vol.getattr(ino(node)) {
            // Immutable: no opening for writing; append-only: only with
            // O_APPEND (ext4's `may_open`, which a FUSE inode's missing
            // S_IMMUTABLE and S_APPEND keep the kernel from doing).
            Ok(a) if writes && a.flags & FLAG_IMMUTABLE != 0 => Err(Errno::EPERM),
            Ok(a) if writes && a.flags & FLAG_APPEND != 0 && flags & libc::O_APPEND == 0 => Err(Errno::EPERM),
            // A sync file's writes come to the volume, which makes each
            // durable before it answers: the kernel's cache would hold them.
            Ok(a) if writes && a.flags & FLAG_SYNC != 0 => Ok(Opened { fh: 0, flags: direct | FOPEN_DIRECT_IO }),
            Ok(_) if direct != 0 => Ok(Opened { fh: 0, flags: direct }),
            Ok(_) if reads && self.vol.access_due(ino(node)) => Ok(Opened { fh: 0, flags: 0 }),
            Ok(_) => Ok(Opened { fh: 0, flags: FOPEN_KEEP_CACHE }),
            Err(e) => Err(report("open", &e)),
        }
    }

    /// READ of at most `size` bytes at `offset`, handed to `reply` (which
    /// sends them). The bytes are read into a buffer the serving thread
    /// keeps from one READ to the next. A large READ's buffer is a huge page,
    /// so that 1 MiB is one device request (see `AlignedBuf::huge_pages`);
    /// a small one's is not, since the device reads it through its page
    /// cache (`FileDevice::BUFFERED_READ_MAX`), and a thread that serves
    /// only small READs (tar's, grep's) need not hold 2 MiB.
    ///
    /// # Errors
    /// The engine's.
    pub fn read<R>(&self, node: u64, offset: u64, size: u32, reply: impl FnOnce(&[u8]) -> R) -> Result<R, Errno> {
        thread_local! {
            static SMALL: std::cell::RefCell<AlignedBuf> = std::cell::RefCell::new(AlignedBuf::new());
            static LARGE: std::cell::RefCell<AlignedBuf> = std::cell::RefCell::new(AlignedBuf::huge_pages());
        }
        let _t = self.requests.time(Op::Read);
        let buffer = if size as usize > FileDevice::BUFFERED_READ_MAX { &LARGE } else { &SMALL };
        buffer.with(|b| {
            // A reply that reads again on this thread (none does) gets a
            // buffer of its own rather than a panic.
            let mut own = AlignedBuf::new();
            let mut held = b.try_borrow_mut();
            let buf = match held.as_deref_mut() {
                Ok(buf) => buf,
                Err(_) => &mut own,
            };
            self.vol.read_into(ino(node), offset, size as usize, buf).map_err(|e| report("read", &e))?;
            Ok(reply(buf.bytes()))
        })
    }

    /// WRITE of `data` at `offset`, with the kernel's `write_flags`.
    ///
    /// # Errors
    /// The engine's.
    pub fn write(&self, caller: Caller, node: u64, offset: u64, data: &[u8], write_flags: u32) -> Result<u32, Errno> {
        let _t = self.requests.time(Op::Write);
        // Pages written back from the kernel's cache carry times the kernel
        // already owns (it sends them with a setattr); a direct write does not.
        let cached = write_flags & FUSE_WRITE_CACHE != 0;
        let stamp = if cached { Stamp::Keep } else { Stamp::Now };
        // The kernel flags the writes of callers without CAP_FSETID, and
        // sends a write from its cache only when it found nothing to drop
        // (FUSE_HANDLE_KILLPRIV_V2). An O_DIRECT write under the writeback
        // cache goes unflagged: one straight from a caller other than root
        // stands for one without CAP_FSETID, as for truncation. Page-cache
        // write-back carries the flusher's credentials, so only the flag
        // speaks for it.
        let unprivileged = write_flags & FUSE_WRITE_KILL_SUIDGID != 0 || (!cached && caller.uid != 0);
        match self.drop_privileges(caller, node, !unprivileged) {
            Ok(dropped) => self.attributes_changed(node, dropped),
            Err(e) => return Err(report("write", &e)),
        }
        if let Some(w) = self.window.get() {
            w.write(node, data.len());
        }
        match self.vol.write_with(ino(node), offset, data, stamp) {
            // max_write bounds a request far below 4 GiB.
            Ok(n) => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => Err(report("write", &e)),
        }
    }

    /// FLUSH: always ENOSYS, after its work.
    ///
    /// close(2) is not a durability point; fsync is. But the kernel has
    /// sent the file's dirty pages by now, so a rewrite after O_TRUNC is
    /// complete: the volume commits it whole (replace semantics).
    ///
    /// # Errors
    /// ENOSYS makes the kernel stop sending FLUSH (it sets no_flush and
    /// close(2) returns 0): one round trip less per close. It still writes
    /// a file's dirty pages at every close, and RELEASE, sent after the
    /// last close of an open file, ends a rewrite from then on.
    pub fn flush(&self, node: u64) -> Result<(), Errno> {
        let _t = self.requests.time(Op::Flush);
        self.vol.file_closed(ino(node));
        Err(Errno::ENOSYS)
    }

    /// RELEASE: the end of a rewrite (see [`DualFs::flush`]), FLUSH being
    /// answered once only.
    pub fn release(&self, node: u64) {
        let _t = self.requests.time(Op::Release);
        self.vol.file_closed(ino(node));
    }

    /// FSYNC (`datasync`: only what reading the data back needs).
    ///
    /// # Errors
    /// The engine's.
    pub fn fsync(&self, node: u64, datasync: bool) -> Result<(), Errno> {
        let _t = self.requests.time(Op::Fsync);
        if let Some(w) = self.window.get() {
            w.fsync(node);
        }
        let r = if datasync { self.vol.fdatasync(ino(node)) } else { self.vol.fsync(ino(node)) };
        r.map_err(|e| report("fsync", &e))
    }

    /// IOCTL `cmd` on `node` with the caller's bytes `data`: FITRIM, the
    /// label, shutdown, and the inode flags' (at most `out_size` bytes back).
    ///
    /// # Errors
    /// ENOTTY is what a file system says to an ioctl it does not know
    /// (isatty's TCGETS on every open by Python, say); FITRIM's and the
    /// flags'.
    pub fn ioctl(&self, caller: Caller, node: u64, cmd: u32, data: &[u8], out_size: u32) -> Result<Vec<u8>, Errno> {
        let _t = self.requests.time(Op::Ioctl);
        if let Some(r) = self.fsctl_ioctl(caller, cmd, data) {
            return r;
        }
        match cmd {
            super::FITRIM => self.fitrim(caller, data),
            _ => self.fileattr_ioctl(node, cmd, data, out_size),
        }
    }

    /// FALLOCATE with the `fallocate(2)` mode bits.
    ///
    /// # Errors
    /// EOPNOTSUPP for modes the engine lacks; the engine's.
    pub fn fallocate(&self, caller: Caller, node: u64, offset: u64, length: u64, mode: i32) -> Result<(), Errno> {
        let _t = self.requests.time(Op::Fallocate);
        let mode = convert::fallocate_mode(mode)?;
        // As ext4's `file_modified`: every mode drops file capabilities, and
        // the set-id bits unless the caller may keep them (root stands for
        // CAP_FSETID; the kernel does not say).
        let r = self.drop_privileges(caller, node, caller.uid == 0).and_then(|dropped| {
            self.attributes_changed(node, dropped);
            self.vol.fallocate(ino(node), offset, length, mode)
        });
        r.map_err(|e| report("fallocate", &e))
    }

    /// Drops what a change of the data by `caller` drops (the set-id bits
    /// by the engine's rule, file capabilities always).
    fn drop_privileges(&self, caller: Caller, node: u64, privileged: bool) -> Result<bool, Error> {
        let mode = if privileged { 0 } else { self.vol.getattr(ino(node))?.perm };
        self.vol.drop_privileges(ino(node), &crate::caller::changer(caller, privileged, mode))
    }

    /// LSEEK: the engine answers SEEK_DATA and SEEK_HOLE, once it holds
    /// every byte the kernel holds of the file.
    ///
    /// Under the writeback cache the kernel may hold dirty pages of a file
    /// open for writing, which read(2) returns and the volume has not seen
    /// (a byte written at 4096 of an empty file: the volume says ENXIO).
    /// The kernel sends LSEEK without writing them back first, so the
    /// adapter has it do so: an inode invalidation from `offset` on makes
    /// the kernel write back (launder) its dirty pages there before it
    /// returns (`invalidate_inode_pages2_range`; the kernel holds the inode
    /// lock for the LSEEK, which the write-back does not take). The clean
    /// pages of that range are dropped with them, so a file nobody holds
    /// open for writing, which has no dirty page, is answered at once.
    ///
    /// The write-back is served by the other threads; when as many LSEEKs
    /// wait as may ([`crate::AdapterOptions::lseek_flushes`]), or there is
    /// no way to notify the kernel, the answer is ENOSYS, after which the
    /// kernel answers every LSEEK of the mount itself from its own size
    /// (data up to the end, no holes): correct, but blind to holes.
    ///
    /// # Errors
    /// EINVAL for a negative offset or an unknown whence, EOVERFLOW;
    /// ENOSYS as above; the engine's (ENXIO past the end).
    pub fn lseek(&self, node: u64, offset: i64, whence: i32) -> Result<i64, Errno> {
        let _t = self.requests.time(Op::Lseek);
        let Ok(from) = u64::try_from(offset) else {
            // As ext4 and XFS: no data or hole lies before the start.
            return Err(if convert::whence(whence).is_some() { Errno::ENXIO } else { Errno::EINVAL });
        };
        let r = match convert::whence(whence) {
            Some(w) => {
                self.write_back_kernel_pages(node, offset)?;
                self.vol.seek(ino(node), from, w)
            }
            // The kernel answers the other whence values itself; should one
            // come, SEEK_SET and SEEK_END have an answer without a position.
            None if whence == libc::SEEK_SET => Ok(from),
            None if whence == libc::SEEK_END => self.vol.getattr(ino(node)).map(|a| a.size.saturating_add(from)),
            None => return Err(Errno::EINVAL),
        };
        match r.map(i64::try_from) {
            Ok(Ok(pos)) => Ok(pos),
            Ok(Err(_)) => Err(Errno::EOVERFLOW),
            Err(e) => Err(report("lseek", &e)),
        }
    }

    /// Has the kernel write back the dirty pages of `node` from `offset`
    /// on, if it may hold any (see [`DualFs::lseek`]).
    pub(super) fn write_back_kernel_pages(&self, node: u64, offset: i64) -> Result<(), Errno> {
        if !self.writeback() || !self.writers.any(node) {
            return Ok(());
        }
        let slot = self.writers.flush_slot(self.options.lseek_flushes);
        let notifier = self.notifier.get();
        let (Some(_slot), Some(n)) = (slot, notifier) else {
            log::warn!(
                "lseek of inode {node}: cannot have the kernel write back its pages now; \
                 the kernel answers SEEK_DATA and SEEK_HOLE itself from now on (no holes)"
            );
            return Err(Errno::ENOSYS);
        };
        // ENOENT: the kernel no longer caches the inode, so holds no page.
        match n.inval_inode(node, offset, 0) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => {
                log::warn!("lseek of inode {node}: the kernel's write-back failed: {e}");
                Err(Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO)))
            }
        }
    }

    /// COPY_FILE_RANGE: copies through the engine, at most [`COPY_MAX`]
    /// bytes per request; answers the bytes copied.
    ///
    /// # Errors
    /// EINVAL for any flag; the engine's, when nothing was copied.
    pub fn copy_file_range(
        &self,
        from: u64,
        from_off: u64,
        to: u64,
        to_off: u64,
        len: u64,
        flags: u64,
    ) -> Result<u32, Errno> {
        let _t = self.requests.time(Op::CopyFileRange);
        if flags != 0 {
            return Err(Errno::EINVAL);
        }
        match self.copy_range(ino(from), from_off, ino(to), to_off, len) {
            Ok(n) => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => Err(report("copy_file_range", &e)),
        }
    }

    fn copy_range(&self, from: InodeNo, from_off: u64, to: InodeNo, to_off: u64, len: u64) -> Result<u64, Error> {
        let want = len.min(COPY_MAX);
        let mut done = 0u64;
        while done < want {
            let chunk = (want - done).min(COPY_CHUNK) as usize;
            let data = match self.vol.read(from, from_off + done, chunk) {
                Ok(d) => d,
                Err(e) if done > 0 => {
                    log::debug!("copy_file_range stopped after {done} bytes: {e}");
                    break;
                }
                Err(e) => return Err(e),
            };
            if data.is_empty() {
                break;
            }
            match self.vol.write(to, to_off + done, &data) {
                Ok(n) => done += n as u64,
                Err(e) if done > 0 => {
                    log::debug!("copy_file_range stopped after {done} bytes: {e}");
                    break;
                }
                Err(e) => return Err(e),
            }
            if data.len() < chunk {
                break;
            }
        }
        Ok(done)
    }
}
