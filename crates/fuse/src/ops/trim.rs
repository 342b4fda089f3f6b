//! FITRIM (`fstrim MOUNTPOINT`): the free space of both devices discarded.
//!
//! The kernel passes FITRIM on a FUSE mount to the server as an ordinary
//! ioctl: its number says `_IOWR` of 24 bytes, so the `struct
//! fstrim_range` comes in and goes back with `len` set to the bytes
//! discarded, as ext4 answers.
//!
//! Its range and its count are in the bytes statfs shows, the data
//! device's (docs/DESIGN.md, "Discard"): a range starting at or past the
//! data device's end is EINVAL, and the count is the data device's bytes
//! discarded. A range reaching the data device's end takes the log's free
//! segments too (they lie after it in the volume's address space, which
//! `dualfs trim` uses), counted in the log and `dualfs stats`, not in the
//! answer: a file system never says it trimmed more than its size.

use dualfs_engine::volume::TrimRange;

use super::report;
use crate::DualFs;
use crate::answers::{Caller, Errno};

/// `FITRIM`, `_IOWR('X', 121, struct fstrim_range)` in `linux/fs.h`.
pub const FITRIM: u32 = 0xC018_5879;

/// Bytes of `struct fstrim_range`: start, len, minlen.
const RANGE_BYTES: usize = 24;

fn word(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[i * 8..i * 8 + 8]);
    u64::from_ne_bytes(w)
}

/// The range a FITRIM asks for.
///
/// # Errors
/// EINVAL: fewer bytes than a `struct fstrim_range`.
pub fn parse_range(data: &[u8]) -> Result<TrimRange, Errno> {
    if data.len() < RANGE_BYTES {
        return Err(Errno::EINVAL);
    }
    Ok(TrimRange { start: word(data, 0), len: word(data, 1), min_len: word(data, 2) })
}

/// The range FITRIM gives back: `len` is the bytes discarded.
#[must_use]
pub fn answer_range(asked: TrimRange, discarded: u64) -> Vec<u8> {
    [asked.start, discarded, asked.min_len].iter().flat_map(|w| w.to_ne_bytes()).collect()
}

impl DualFs {
    /// FITRIM: discards the free space inside the range asked for.
    ///
    /// # Errors
    /// EPERM for a caller other than root (ext4 asks CAP_SYS_ADMIN; FUSE
    /// passes no capabilities, so root stands for it); EINVAL for a bad
    /// range; EOPNOTSUPP when the data device cannot discard; EROFS; the
    /// engine's.
    pub fn fitrim(&self, caller: Caller, data: &[u8]) -> Result<Vec<u8>, Errno> {
        if caller.uid != 0 {
            return Err(Errno::EPERM);
        }
        let range = parse_range(data)?;
        let (data_bytes, _) = self.vol.data_space();
        let r = self.vol.trim(volume_range(range, data_bytes)?).map_err(|e| report("fitrim", &e))?;
        if r.meta_unsupported {
            log::info!("fitrim: the meta-data device cannot discard; only the data device's free space was");
        } else if r.meta_bytes > 0 {
            log::info!("fitrim: {} bytes of free log segments discarded besides", r.meta_bytes);
        }
        Ok(answer_range(range, r.data_bytes))
    }
}

/// The volume's range (data device, then meta-data device) for a FITRIM
/// range in statfs's bytes (the data device of `data_bytes`): the same
/// start; to the volume's end when it reaches the data device's end, so
/// that the log is trimmed too.
///
/// # Errors
/// EINVAL: the range starts at or past the data device's end.
pub fn volume_range(asked: TrimRange, data_bytes: u64) -> Result<TrimRange, Errno> {
    if asked.start >= data_bytes {
        return Err(Errno::EINVAL);
    }
    let len = if asked.start.saturating_add(asked.len) >= data_bytes { u64::MAX } else { asked.len };
    Ok(TrimRange { len, ..asked })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_goes_back_with_the_bytes_discarded() {
        let asked: Vec<u8> = [4096u64, u64::MAX, 8192].iter().flat_map(|w| w.to_ne_bytes()).collect();
        let r = parse_range(&asked).unwrap();
        assert_eq!(r, TrimRange { start: 4096, len: u64::MAX, min_len: 8192 });
        let back = answer_range(r, 1 << 20);
        assert_eq!(parse_range(&back).unwrap(), TrimRange { start: 4096, len: 1 << 20, min_len: 8192 });
        assert_eq!(parse_range(&asked[..16]), Err(Errno::EINVAL));
    }

    #[test]
    fn the_range_is_in_the_data_devices_bytes_and_reaching_its_end_takes_the_log() {
        let data = 1 << 30;
        let r = |start, len| TrimRange { start, len, min_len: 0 };
        assert_eq!(volume_range(r(0, 4096), data), Ok(r(0, 4096)), "inside: as asked");
        assert_eq!(volume_range(r(10 << 20, u64::MAX), data), Ok(r(10 << 20, u64::MAX)));
        assert_eq!(volume_range(r(0, data), data), Ok(r(0, u64::MAX)), "to the end: the log too");
        assert_eq!(volume_range(r(data, 4096), data), Err(Errno::EINVAL), "past statfs's size");
        assert_eq!(volume_range(r(u64::MAX, 1 << 20), data), Err(Errno::EINVAL));
    }
}
