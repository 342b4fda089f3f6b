//! The device layer: whole-block reads, writes and flushes.
//!
//! Everything above this module talks to a [`BlockDevice`]; the backends are a
//! file or block device ([`FileDevice`]) and memory ([`MemoryDevice`]). Test
//! harnesses stack their own implementations (recording, fault injection) on
//! the same seam.

mod aligned;
mod file;
mod memory;
mod mirror;
mod page;
mod switch;
pub mod tracing;

pub use aligned::AlignedBuf;
pub use file::FileDevice;
pub use memory::MemoryDevice;
pub use mirror::{Checker, DegradeHook, Healed, Mend, MirrorDevice, Verdict};
pub use page::{DataRun, PageBuf, SharedPage};
pub use switch::SwitchDevice;

use std::fmt;
use std::io;

use crate::error::{DeviceRole, Error, Result};
use crate::types::BLOCK_SIZE;

/// A device addressed in [`BLOCK_SIZE`] blocks.
///
/// Buffers are always a whole number of blocks. A write is not durable until a
/// later [`BlockDevice::flush`] returns; until then any subset of the written
/// sectors may be lost by a crash, which is exactly what the crash tests model.
pub trait BlockDevice: Send + Sync + fmt::Debug {
    /// Number of blocks the device holds.
    fn block_count(&self) -> u64;

    /// Reads `buf.len() / BLOCK_SIZE` blocks starting at `first`.
    ///
    /// # Errors
    /// The operating system's error, or `InvalidInput` beyond the end.
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()>;

    /// Writes `buf.len() / BLOCK_SIZE` blocks starting at `first`.
    ///
    /// # Errors
    /// The operating system's error, or `InvalidInput` beyond the end.
    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()>;

    /// Writes the blocks of `bufs`, one after another, starting at `first`:
    /// one request where the device can take the pieces where they lie (a
    /// write-back run of page buffers, see [`DataRun`]). By default the
    /// pieces are gathered into one buffer and written as one: a device
    /// that wraps another passes the call on, or the pages are copied.
    ///
    /// # Errors
    /// As [`BlockDevice::write_blocks`].
    fn write_blocks_vectored(&self, first: u64, bufs: &[&[u8]]) -> io::Result<()> {
        // Gathered page-aligned, in case an `O_DIRECT` device is below.
        let mut all = AlignedBuf::with_capacity(bufs.iter().map(|b| b.len()).sum());
        for b in bufs {
            all.extend_from_slice(b);
        }
        self.write_blocks(first, all.bytes())
    }

    /// Makes every completed write durable.
    ///
    /// # Errors
    /// The operating system's error.
    fn flush(&self) -> io::Result<()>;

    /// Tells the device that `count` blocks from `first` hold nothing the
    /// volume needs (TRIM: an SSD may erase them, a sparse image file gives
    /// their space back to its host). A later read of them may return
    /// zeros, the old bytes or anything else, so the volume discards only
    /// blocks that nothing, after any crash, will read before writing
    /// (DESIGN.md, "Discard"). Like a write, it is durable only after a
    /// later [`BlockDevice::flush`]. By default a device cannot discard.
    ///
    /// # Errors
    /// `Unsupported` where the device cannot discard; the operating
    /// system's error; `InvalidInput` beyond the end.
    fn discard(&self, first: u64, count: u64) -> io::Result<()> {
        let _ = (first, count);
        Err(io::Error::new(io::ErrorKind::Unsupported, "the device cannot discard"))
    }

    /// Advice: `count` blocks from `first` are about to be read. A device
    /// with a cache below it may start reading them now, without waiting,
    /// so that the read finds them there (the volume reads the next files
    /// of a directory listing ahead, DESIGN.md "Data space"). Nothing is
    /// promised and nothing fails: by default a device ignores it, and a
    /// device that wraps another passes it on.
    fn will_need(&self, first: u64, count: u64) {
        let _ = (first, count);
    }

    /// How many copies of each block a write keeps: 2 for a mirror
    /// ([`MirrorDevice`]); a device that wraps another passes it on.
    fn copies(&self) -> usize {
        1
    }

    /// Reads blocks whose check only the caller can make (raw data, which an
    /// fsync record names by checksum): `right(i, block)` says whether
    /// block `i` of the request holds what it should. A device keeping
    /// several copies (a mirror) answers each block from a copy that is
    /// right, and makes the others hold it where it may write; a device of
    /// one copy reads, as by default, and the caller's check decides.
    ///
    /// # Errors
    /// As [`BlockDevice::read_blocks`].
    fn read_checked(&self, first: u64, buf: &mut [u8], right: &dyn Fn(usize, &[u8]) -> bool) -> io::Result<()> {
        let _ = right;
        self.read_blocks(first, buf)
    }

    /// Reads the device's size again, after the image file or block device
    /// under it grew (`dualfs resize`), and returns it; [`block_count`]
    /// says it from then on. Devices of a fixed size keep theirs.
    ///
    /// # Errors
    /// The operating system's error.
    ///
    /// [`block_count`]: BlockDevice::block_count
    fn refresh_block_count(&self) -> io::Result<u64> {
        Ok(self.block_count())
    }
}

/// Reads `count` blocks of the volume's `role` device. This and [`write`]
/// and [`flush`] are how the engine talks to its devices: an error names the
/// device, the request and its first block.
///
/// # Errors
/// The device fails.
pub fn read(dev: &dyn BlockDevice, role: DeviceRole, first: u64, count: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; count * BLOCK_SIZE];
    dev.read_blocks(first, &mut buf).map_err(|source| Error::Io { device: role, op: "read", block: first, source })?;
    Ok(buf)
}

/// Reads whole blocks into `buf` from the volume's `role` device, each
/// checked by `right` (see [`BlockDevice::read_checked`]).
///
/// # Errors
/// The device fails.
pub fn read_checked(
    dev: &dyn BlockDevice,
    role: DeviceRole,
    first: u64,
    buf: &mut [u8],
    right: &dyn Fn(usize, &[u8]) -> bool,
) -> Result<()> {
    dev.read_checked(first, buf, right).map_err(|source| Error::Io { device: role, op: "read", block: first, source })
}

/// Reads whole blocks into `buf` from the volume's `role` device (see [`read`]).
///
/// # Errors
/// The device fails.
pub fn read_into(dev: &dyn BlockDevice, role: DeviceRole, first: u64, buf: &mut [u8]) -> Result<()> {
    dev.read_blocks(first, buf).map_err(|source| Error::Io { device: role, op: "read", block: first, source })
}

/// Writes whole blocks to the volume's `role` device (see [`read`]).
///
/// # Errors
/// The device fails.
pub fn write(dev: &dyn BlockDevice, role: DeviceRole, first: u64, buf: &[u8]) -> Result<()> {
    dev.write_blocks(first, buf).map_err(|source| Error::Io { device: role, op: "write", block: first, source })
}

/// Flushes the volume's `role` device (see [`read`]).
///
/// # Errors
/// The device fails.
pub fn flush(dev: &dyn BlockDevice, role: DeviceRole) -> Result<()> {
    dev.flush().map_err(|source| Error::Io { device: role, op: "flush", block: 0, source })
}

/// Discards `count` blocks of the volume's `role` device (see [`read`]).
/// A device that cannot discard is `NotSupported`.
///
/// # Errors
/// The device fails, or cannot discard.
pub fn discard(dev: &dyn BlockDevice, role: DeviceRole, first: u64, count: u64) -> Result<()> {
    dev.discard(first, count).map_err(|source| {
        if is_unsupported(&source) {
            Error::NotSupported
        } else {
            Error::Io { device: role, op: "discard", block: first, source }
        }
    })
}

/// Whether a device's error says it cannot discard (or a file system
/// under an image file cannot punch holes).
#[must_use]
pub fn is_unsupported(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Unsupported || matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOTTY))
}

/// Checks that a request is block-aligned and inside a device of `count` blocks.
pub(crate) fn check_range(count: u64, first: u64, len: usize) -> io::Result<()> {
    if !len.is_multiple_of(BLOCK_SIZE) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "buffer is not a whole number of blocks"));
    }
    let blocks = (len / BLOCK_SIZE) as u64;
    match first.checked_add(blocks) {
        Some(end) if end <= count => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("blocks {first}..+{blocks} lie beyond the end of a {count}-block device"),
        )),
    }
}
