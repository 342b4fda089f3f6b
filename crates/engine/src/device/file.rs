//! A device backed by an image file or a block device, with positional I/O.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::num::NonZeroU64;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{Advice, fadvise};

use super::{BlockDevice, check_range};
use crate::types::{BLOCK_BYTES, BLOCK_SIZE};

/// An image file or a block device.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    path: PathBuf,
    /// Whole blocks the file or device holds; read again by
    /// [`BlockDevice::refresh_block_count`] after it grew.
    blocks: AtomicU64,
    /// Opened with `O_DIRECT`: I/O goes from our buffers to the device,
    /// not through a second page cache (see [`FileDevice::open_direct`]).
    direct: bool,
    /// Beside a direct `file`, the same device opened buffered: small
    /// reads go through the device's page cache and our read-ahead (see
    /// [`FileDevice::BUFFERED_READ_MAX`]).
    reader: Option<File>,
    /// A block device (discarded with BLKDISCARD), not an image file
    /// (discarded by punching holes).
    block_device: bool,
    /// Where the last read through `reader` ended (bytes): a read that
    /// starts within [`FileDevice::READ_AHEAD`] of it continues a run.
    read_end: AtomicU64,
}

/// What `O_DIRECT` asks of a buffer's address (and of offsets and
/// lengths, which are whole blocks here anyway).
const DIRECT_ALIGN: usize = 4096;

/// A zeroed buffer of `len` bytes at an address `O_DIRECT` takes: a
/// larger vector and the aligned window inside it.
fn aligned(len: usize) -> (Vec<u8>, usize) {
    let v = vec![0u8; len + DIRECT_ALIGN];
    let off = (DIRECT_ALIGN - v.as_ptr() as usize % DIRECT_ALIGN) % DIRECT_ALIGN;
    (v, off)
}

fn is_aligned(buf: &[u8]) -> bool {
    (buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN)
}

impl FileDevice {
    /// Reads of at most this many bytes go through the page cache when the
    /// device is otherwise direct (DESIGN.md, "Data space"): a cold small
    /// file is one 4 KiB request, and without the device's read-ahead each of
    /// tar's files cost a request of its own; untar lays them out one after
    /// another, so the read-ahead ([`FileDevice::READ_AHEAD`]) brings the next
    /// ones in. Larger reads (a sequential reader's, through the mount's 2 MiB
    /// read-ahead) stay direct, without the copy into the device's page
    /// cache. Coherent: Linux
    /// drops cached pages over a direct write's range, before the write and
    /// again after it, waiting for a read of them in flight, and the volume
    /// never reads a block while it writes it (tests/small_reads.rs).
    pub const BUFFERED_READ_MAX: usize = 128 * 1024;

    /// The read-ahead of the buffered descriptor, whatever the device's
    /// own (DESIGN.md, "Data space"): a read that continues the one
    /// before brings in this much after it; any other reads exactly its
    /// blocks. A loop device's read-ahead follows its backing file system
    /// (2.5 MiB where measured): with it a cold grep read 160-259 MiB of
    /// data, with this 111.
    pub const READ_AHEAD: u64 = 128 * 1024;

    /// Opens `path` for reading and, unless `read_only`, writing.
    ///
    /// With `exclusive`, takes an advisory lock on the file so that a second
    /// mount of the same volume is refused while this one lives.
    ///
    /// # Errors
    /// The open or lock fails; `WouldBlock` means another process holds the lock.
    pub fn open(path: &Path, read_only: bool, exclusive: bool) -> io::Result<FileDevice> {
        FileDevice::open_with(path, read_only, exclusive, false)
    }

    /// As [`FileDevice::open`], with `O_DIRECT` where the file system
    /// allows it (not tmpfs, for one: then as `open`). For the data
    /// device of a mount: file data arrives from the kernel's page cache,
    /// through FUSE, and a buffered write would copy it into a second
    /// page cache, the device's, before writing it back; large reads would
    /// keep a second copy of what the kernel caches above us. Reads up to
    /// [`FileDevice::BUFFERED_READ_MAX`] go through a second, buffered
    /// descriptor, for the device's read-ahead.
    ///
    /// # Errors
    /// As [`FileDevice::open`].
    pub fn open_direct(path: &Path, read_only: bool, exclusive: bool) -> io::Result<FileDevice> {
        FileDevice::open_with(path, read_only, exclusive, true)
    }

    fn open_with(path: &Path, read_only: bool, exclusive: bool, direct: bool) -> io::Result<FileDevice> {
        let open = |flags: i32| OpenOptions::new().read(true).write(!read_only).custom_flags(flags).open(path);
        let (mut file, direct) = if direct {
            match open(libc::O_DIRECT) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(0)?, false),
                Err(e) => return Err(e),
            }
        } else {
            (open(0)?, false)
        };
        if exclusive {
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!("{} is in use by another DualFS process", path.display()),
                    ));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        // Not locked: the lock above is the volume's, taken once.
        let reader = if direct { Some(OpenOptions::new().read(true).open(path)?) } else { None };
        if let Some(r) = &reader {
            // The kernel's read-ahead off for this descriptor: ours is
            // `READ_AHEAD`. Advice only: refused, the device's stays.
            if let Err(e) = fadvise(r, 0, None, Advice::Random) {
                log::debug!("{}: read-ahead advice refused ({e}); the device's own applies", path.display());
            }
        }
        // Seeking to the end gives the size of block devices as well as files.
        let bytes = file.seek(SeekFrom::End(0))?;
        let block_device = file.metadata()?.file_type().is_block_device();
        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            blocks: AtomicU64::new(bytes / BLOCK_BYTES),
            direct,
            reader,
            block_device,
            read_end: AtomicU64::new(u64::MAX),
        })
    }

    /// The path this device was opened from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl BlockDevice for FileDevice {
    fn block_count(&self) -> u64 {
        self.blocks.load(Ordering::Acquire)
    }

    fn refresh_block_count(&self) -> io::Result<u64> {
        let bytes = (&self.file).seek(SeekFrom::End(0))?;
        self.blocks.store(bytes / BLOCK_BYTES, Ordering::Release);
        Ok(bytes / BLOCK_BYTES)
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(self.block_count(), first, buf.len())?;
        if let Some(reader) = &self.reader
            && buf.len() <= FileDevice::BUFFERED_READ_MAX
        {
            let at = first * BLOCK_BYTES;
            let end = at + buf.len() as u64;
            let last = self.read_end.swap(end, Ordering::Relaxed);
            if at >= last && at - last < FileDevice::READ_AHEAD {
                // A run (untar lays a directory's files one after another):
                // one request for these blocks and the window after them,
                // started before the read waits for its own. Advice only.
                let window = NonZeroU64::new(end - at + FileDevice::READ_AHEAD);
                if let Err(e) = fadvise(reader, at, window, Advice::WillNeed) {
                    log::debug!("{}: read-ahead refused ({e})", self.path.display());
                }
            }
            return reader.read_exact_at(buf, at);
        }
        if self.direct && !is_aligned(buf) {
            let (mut bounce, off) = aligned(buf.len());
            let window = &mut bounce[off..off + buf.len()];
            self.file.read_exact_at(window, first * BLOCK_BYTES)?;
            buf.copy_from_slice(window);
            return Ok(());
        }
        self.file.read_exact_at(buf, first * BLOCK_BYTES)
    }

    /// Through the page cache the small reads use: the buffered reader
    /// beside a direct device, the file itself otherwise. A direct device
    /// without a reader has no cache to fill.
    fn will_need(&self, first: u64, count: u64) {
        let cached = match &self.reader {
            Some(r) => r,
            None if !self.direct => &self.file,
            None => return,
        };
        let Some(len) = count.checked_mul(BLOCK_BYTES).and_then(NonZeroU64::new) else { return };
        if first.checked_add(count).is_none_or(|end| end > self.block_count()) {
            return;
        }
        if let Err(e) = fadvise(cached, first * BLOCK_BYTES, Some(len), Advice::WillNeed) {
            log::debug!("{}: read-ahead refused ({e})", self.path.display());
        }
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        check_range(self.block_count(), first, buf.len())?;
        if self.direct && !is_aligned(buf) {
            let (mut bounce, off) = aligned(buf.len());
            bounce[off..off + buf.len()].copy_from_slice(buf);
            return self.file.write_all_at(&bounce[off..off + buf.len()], first * BLOCK_BYTES);
        }
        self.file.write_all_at(buf, first * BLOCK_BYTES)
    }

    fn write_blocks_vectored(&self, first: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(self.block_count(), first, total)?;
        if self.direct && !bufs.iter().all(|b| is_aligned(b) && b.len().is_multiple_of(DIRECT_ALIGN)) {
            return self.write_blocks(first, &bufs.concat());
        }
        let mut at = first * BLOCK_BYTES;
        for chunk in bufs.chunks(IOV_MAX) {
            let want: usize = chunk.iter().map(|b| b.len()).sum();
            let slices: Vec<io::IoSlice<'_>> = chunk.iter().map(|b| io::IoSlice::new(b)).collect();
            let mut done = rustix::io::pwritev(&self.file, &slices, at)?;
            // A short write (rare: a signal, a full file system under an
            // image) finishes piece by piece.
            let mut pos = at;
            for b in chunk {
                if done >= b.len() {
                    done -= b.len();
                } else {
                    self.file.write_all_at(&b[done..], pos + done as u64)?;
                    done = 0;
                }
                pos += b.len() as u64;
            }
            at += want as u64;
        }
        Ok(())
    }

    /// Several requests in flight: scattered 4 KiB writes to a loop device
    /// went at 5,800 a second one at a time, 22,300 eight at a time.
    fn write_runs(&self, runs: &[(u64, &[&[u8]])]) -> Result<(), (u64, io::Error)> {
        super::write_runs_at_once(self, runs)
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// A block device gets BLKDISCARD; an image file has holes punched
    /// (its size kept), so that a sparse image gives the space back to
    /// the file system holding it. The kernel drops the cached pages of
    /// the range either way, so the buffered reader sees what the device
    /// holds.
    fn discard(&self, first: u64, count: u64) -> io::Result<()> {
        check_range(
            self.block_count(),
            first,
            usize::try_from(count).unwrap_or(usize::MAX).saturating_mul(BLOCK_SIZE),
        )?;
        if count == 0 {
            return Ok(());
        }
        let (offset, len) = (first * BLOCK_BYTES, count * BLOCK_BYTES);
        if self.block_device {
            return dualfs_blkdev::discard(&self.file, offset, len);
        }
        let mode = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
        rustix::fs::fallocate(&self.file, mode, offset, len).map_err(io::Error::from)
    }
}

/// Pieces one `pwritev` takes (Linux's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks written and read through `O_DIRECT` from buffers at any
    /// address (the unaligned ones through a bounce buffer) are the bytes
    /// a buffered open sees.
    #[test]
    fn direct_io_takes_buffers_at_any_address() {
        // /var/tmp is a disk file system where /tmp may be tmpfs, which
        // refuses O_DIRECT (then the device falls back to buffered I/O).
        let dir = Path::new("/var/tmp");
        let dir = if dir.is_dir() { dir.to_path_buf() } else { std::env::temp_dir() };
        let path = dir.join(format!("dualfs-direct-{}", std::process::id()));
        std::fs::File::create(&path).unwrap().set_len(64 * BLOCK_BYTES).unwrap();
        let dev = FileDevice::open_direct(&path, false, false).unwrap();
        let pattern: Vec<u8> = (0..3 * 4096 + 1).map(|i| (i * 7 % 251) as u8).collect();
        // An aligned window of 2 blocks, and 2 blocks at an odd address.
        let (mut a, off) = aligned(2 * 4096);
        a[off..off + 8192].copy_from_slice(&pattern[..8192]);
        dev.write_blocks(3, &a[off..off + 8192]).unwrap();
        dev.write_blocks(10, &pattern[1..8193]).unwrap();
        let mut back = vec![0u8; 8193];
        dev.read_blocks(10, &mut back[1..]).unwrap();
        assert_eq!(back[1..], pattern[1..8193]);
        dev.flush().unwrap();
        let plain = FileDevice::open(&path, true, false).unwrap();
        let mut first = vec![0u8; 8192];
        plain.read_blocks(3, &mut first).unwrap();
        assert_eq!(first, pattern[..8192]);
        std::fs::remove_file(&path).unwrap();
    }

    /// Discarding an image file's blocks punches holes: they read as
    /// zeros, the file keeps its size and holds less.
    #[test]
    fn discarding_an_image_file_punches_holes() {
        let dir = Path::new("/var/tmp");
        let dir = if dir.is_dir() { dir.to_path_buf() } else { std::env::temp_dir() };
        let path = dir.join(format!("dualfs-discard-{}", std::process::id()));
        std::fs::File::create(&path).unwrap().set_len(256 * BLOCK_BYTES).unwrap();
        let dev = FileDevice::open_direct(&path, false, false).unwrap();
        let (mut a, off) = aligned(256 * 4096);
        a[off..off + 256 * 4096].fill(9);
        dev.write_blocks(0, &a[off..off + 256 * 4096]).unwrap();
        dev.flush().unwrap();
        let held = |p: &Path| std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(p).unwrap());
        let before = held(&path);
        dev.discard(16, 128).unwrap();
        dev.flush().unwrap();
        assert!(held(&path) + 128 * 8 <= before, "{} sectors before, {} after", before, held(&path));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 256 * BLOCK_BYTES);
        let mut back = vec![1u8; 4096];
        dev.read_blocks(20, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0));
        dev.read_blocks(15, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 9));
        assert!(dev.discard(250, 7).is_err(), "past the end");
        std::fs::remove_file(&path).unwrap();
    }

    /// A vectored write of page buffers (more than one `pwritev` takes)
    /// and of unaligned pieces lands as the pieces laid end to end.
    #[test]
    fn vectored_writes_land_in_order() {
        let dir = Path::new("/var/tmp");
        let dir = if dir.is_dir() { dir.to_path_buf() } else { std::env::temp_dir() };
        let path = dir.join(format!("dualfs-vectored-{}", std::process::id()));
        let n = IOV_MAX + 3;
        std::fs::File::create(&path).unwrap().set_len((n as u64 + 8) * BLOCK_BYTES).unwrap();
        let dev = FileDevice::open_direct(&path, false, false).unwrap();
        let pages: Vec<Box<crate::device::PageBuf>> = (0..n)
            .map(|i| {
                let mut p = crate::device::PageBuf::zeroed();
                p.fill((i % 251) as u8);
                p
            })
            .collect();
        let bufs: Vec<&[u8]> = pages.iter().map(|p| &p.0[..]).collect();
        dev.write_blocks_vectored(2, &bufs).unwrap();
        let odd = vec![7u8; 4097];
        dev.write_blocks_vectored(0, &[&odd[1..], bufs[0]]).unwrap();
        dev.flush().unwrap();
        let plain = FileDevice::open(&path, true, false).unwrap();
        let mut back = vec![0u8; (n + 2) * 4096];
        plain.read_blocks(0, &mut back).unwrap();
        assert!(back[..4096].iter().all(|&b| b == 7));
        assert!(back[4096..8192].iter().all(|&b| b == 0));
        for i in 0..n {
            assert!(back[(i + 2) * 4096..(i + 3) * 4096].iter().all(|&b| b == (i % 251) as u8), "block {i}");
        }
        std::fs::remove_file(&path).unwrap();
    }

    /// Scattered runs, of one buffer or of page buffers, land where they
    /// go when written together.
    #[test]
    fn scattered_runs_land_in_place() {
        let dir = Path::new("/var/tmp");
        let dir = if dir.is_dir() { dir.to_path_buf() } else { std::env::temp_dir() };
        let path = dir.join(format!("dualfs-runs-{}", std::process::id()));
        std::fs::File::create(&path).unwrap().set_len(200 * BLOCK_BYTES).unwrap();
        let dev = FileDevice::open_direct(&path, false, false).unwrap();
        let pages: Vec<Box<crate::device::PageBuf>> = (0..40)
            .map(|i| {
                let mut p = crate::device::PageBuf::zeroed();
                p.fill(i as u8 + 1);
                p
            })
            .collect();
        // Run i: block 5i, of one page (even i) or two (odd i).
        let pieces: Vec<Vec<&[u8]>> = (0..20)
            .map(|i| {
                if i % 2 == 0 { vec![&pages[2 * i].0[..]] } else { vec![&pages[2 * i].0[..], &pages[2 * i + 1].0[..]] }
            })
            .collect();
        let runs: Vec<(u64, &[&[u8]])> = pieces.iter().enumerate().map(|(i, p)| (5 * i as u64, p.as_slice())).collect();
        dev.write_runs(&runs).unwrap();
        dev.flush().unwrap();
        let plain = FileDevice::open(&path, true, false).unwrap();
        let mut back = vec![0u8; 100 * 4096];
        plain.read_blocks(0, &mut back).unwrap();
        for b in 0..100 {
            let (i, k) = (b / 5, b % 5);
            let want = match k {
                0 => 2 * i as u8 + 1,
                1 if i % 2 == 1 => 2 * i as u8 + 2,
                _ => 0,
            };
            assert!(back[b * 4096..(b + 1) * 4096].iter().all(|&x| x == want), "block {b}");
        }
        std::fs::remove_file(&path).unwrap();
    }
}
