//! BLKDISCARD on a block device and FITRIM on a mounted file system,
//! behind safe functions.
//!
//! The engine and the CLI forbid unsafe code; an ioctl through rustix
//! needs an unsafe constructor (the argument type of an opcode is the
//! caller's promise), so the ones they need live here, each promise
//! stated once.

use std::io;
use std::os::fd::AsFd;

use rustix::ioctl::{Opcode, Setter, Updater, ioctl, opcode};

/// `BLKDISCARD`, `_IO(0x12, 119)` in `linux/fs.h`: its argument is a
/// pointer to two `u64`, the byte offset and length.
const BLKDISCARD: Opcode = opcode::none(0x12, 119);

/// Tells the block device under `fd` that `len` bytes at `offset` hold
/// nothing (BLKDISCARD). Both must be multiples of the device's logical
/// block size. What a later read of the range returns is the device's
/// business (zeros on most, the old bytes or anything on some).
///
/// # Errors
/// The kernel's: `EOPNOTSUPP` where the device cannot discard, `EINVAL`
/// for a misaligned range, `ENOTTY` when `fd` is no block device.
pub fn discard(fd: impl AsFd, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: BLKDISCARD reads a `[u64; 2]` (offset, length) through the
    // pointer, which `Setter` takes to its own copy of that array for the
    // duration of the call; the kernel writes nothing back.
    #[allow(unsafe_code)]
    let request = unsafe { Setter::<BLKDISCARD, [u64; 2]>::new([offset, len]) };
    // SAFETY: the request is the opcode's argument type, as said above.
    #[allow(unsafe_code)]
    let done = unsafe { ioctl(fd, request) };
    done.map_err(io::Error::from)
}

/// `FITRIM`, `_IOWR('X', 121, struct fstrim_range)` in `linux/fs.h`: the
/// range is three `u64` (start, len, minlen), and the file system writes
/// the bytes it discarded into `len`.
const FITRIM: Opcode = opcode::read_write::<[u64; 3]>(b'X', 121);

/// Asks the file system mounted where `fd` was opened (any file or
/// directory of it) to discard its free space inside `len` bytes from
/// `start`, in free runs of at least `min_len` bytes (FITRIM, what
/// `fstrim` does); returns the bytes discarded.
///
/// # Errors
/// The kernel's or the file system's: `EOPNOTSUPP` where it cannot
/// discard, `EPERM` without CAP_SYS_ADMIN, `EINVAL` for a bad range.
pub fn fitrim(fd: impl AsFd, start: u64, len: u64, min_len: u64) -> io::Result<u64> {
    let mut range = [start, len, min_len];
    // SAFETY: FITRIM reads and writes a `struct fstrim_range`, three `u64`
    // in this order, through the pointer, which `Updater` takes to
    // `range` for the duration of the call.
    #[allow(unsafe_code)]
    let request = unsafe { Updater::<FITRIM, [u64; 3]>::new(&mut range) };
    // SAFETY: the request is the opcode's argument type, as said above.
    #[allow(unsafe_code)]
    let done = unsafe { ioctl(fd, request) };
    done.map_err(io::Error::from)?;
    Ok(range[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_no_block_device() -> io::Result<()> {
        let f = std::fs::File::open("/proc/self/exe")?;
        let e = discard(&f, 0, 4096).expect_err("a file takes no BLKDISCARD");
        assert_eq!(e.raw_os_error(), Some(rustix::io::Errno::NOTTY.raw_os_error()));
        Ok(())
    }

    #[test]
    fn fitrim_is_the_kernels_number() {
        assert_eq!(FITRIM, 0xC018_5879);
    }
}
