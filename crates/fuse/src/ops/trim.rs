//! FITRIM (`fstrim MOUNTPOINT`): the free space of both devices discarded.
//!
//! The kernel passes FITRIM on a FUSE mount to the server as an ordinary
//! ioctl: its number says `_IOWR` of 24 bytes, so the `struct
//! fstrim_range` comes in and goes back with `len` set to the bytes
//! discarded, as ext4 answers.

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
        let r = self.vol.trim(range).map_err(|e| report("fitrim", &e))?;
        if r.meta_unsupported {
            log::info!("fitrim: the meta-data device cannot discard; only the data device's free space was");
        }
        Ok(answer_range(range, r.bytes()))
    }
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
}
