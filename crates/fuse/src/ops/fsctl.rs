//! The volume's own ioctls, which the kernel passes to a FUSE server as
//! ordinary ones (`do_vfs_ioctl` knows none of them, fs/ioctl.c): the
//! label (`FS_IOC_GETFSLABEL`, `FS_IOC_SETFSLABEL`, as `xfs_io -c label`
//! and `btrfs filesystem label` ask) and `FS_IOC_SHUTDOWN` (xfstests'
//! godown).
//!
//! Restricted FUSE ioctls carry the bytes their number declares: the
//! label's 256 (`FSLABEL_MAX`) in or out; shutdown is `_IOR` of a `u32`,
//! so its flag never reaches the server (`fuse_do_ioctl`,
//! fs/ioctl.c: only `_IOC_WRITE` numbers copy in). DESIGN.md, "Shutting
//! down a mounted volume", says what DualFS does without it.

use super::report;
use crate::DualFs;
use crate::answers::{Caller, Errno};

/// `FS_IOC_GETFSLABEL`, `_IOR(0x94, 49, char[FSLABEL_MAX])`.
pub const FS_IOC_GETFSLABEL: u32 = 0x8100_9431;
/// `FS_IOC_SETFSLABEL`, `_IOW(0x94, 50, char[FSLABEL_MAX])`.
pub const FS_IOC_SETFSLABEL: u32 = 0x4100_9432;
/// `FS_IOC_SHUTDOWN`, `_IOR('X', 125, __u32)`.
pub const FS_IOC_SHUTDOWN: u32 = 0x8004_587d;
/// `FSLABEL_MAX`: the label's bytes in both ioctls, NUL-terminated.
const FSLABEL_MAX: usize = 256;

/// The label as `FS_IOC_GETFSLABEL` gives it: NUL-padded to `FSLABEL_MAX`.
#[must_use]
pub fn label_bytes(label: &str) -> Vec<u8> {
    let mut b = vec![0u8; FSLABEL_MAX];
    let n = label.len().min(FSLABEL_MAX - 1);
    b[..n].copy_from_slice(&label.as_bytes()[..n]);
    b
}

/// The label `FS_IOC_SETFSLABEL` asks for: the bytes before the first NUL.
///
/// # Errors
/// EINVAL without a NUL in `FSLABEL_MAX` bytes (the kernel's file systems
/// refuse it so) or for bytes that are not UTF-8 (the superblock's label
/// is text).
pub fn parse_label(data: &[u8]) -> Result<String, Errno> {
    let end = data.iter().take(FSLABEL_MAX).position(|&b| b == 0).ok_or(Errno::EINVAL)?;
    String::from_utf8(data[..end].to_vec()).map_err(|_| Errno::EINVAL)
}

impl DualFs {
    /// The volume's ioctls; `None` for any other number.
    pub(super) fn fsctl_ioctl(&self, caller: Caller, cmd: u32, data: &[u8]) -> Option<Result<Vec<u8>, Errno>> {
        Some(match cmd {
            FS_IOC_GETFSLABEL => Ok(label_bytes(&self.vol.label())),
            FS_IOC_SETFSLABEL => self.set_label(caller, data),
            FS_IOC_SHUTDOWN => self.shut_down(caller),
            _ => return None,
        })
    }

    /// FS_IOC_SETFSLABEL: both superblocks written before the answer.
    ///
    /// # Errors
    /// EPERM for a caller other than root (ext4 and XFS ask
    /// CAP_SYS_ADMIN; FUSE passes no capabilities, so root stands for it);
    /// EINVAL for a label over 64 bytes; EROFS; the engine's.
    fn set_label(&self, caller: Caller, data: &[u8]) -> Result<Vec<u8>, Errno> {
        if caller.uid != 0 {
            return Err(Errno::EPERM);
        }
        let label = parse_label(data)?;
        self.vol.set_label(&label).map_err(|e| report("setfslabel", &e))?;
        Ok(Vec::new())
    }

    /// FS_IOC_SHUTDOWN: the volume commits what it holds and then fails
    /// every request with EIO until it is unmounted (the next mount
    /// recovers), whatever flag the caller passed, which FUSE does not
    /// pass on.
    ///
    /// # Errors
    /// EPERM for a caller other than root (CAP_SYS_ADMIN, as above); EIO
    /// when the last commit failed (the volume is shut down all the same).
    fn shut_down(&self, caller: Caller) -> Result<Vec<u8>, Errno> {
        if caller.uid != 0 {
            return Err(Errno::EPERM);
        }
        self.vol.shut_down().map_err(|e| report("shutdown", &e))?;
        // The flag's bytes go back unchanged: an `_IOR` answer is copied out.
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_goes_out_padded_and_comes_in_up_to_its_nul() {
        let out = label_bytes("home");
        assert_eq!(out.len(), FSLABEL_MAX);
        assert_eq!(parse_label(&out).unwrap(), "home");
        assert_eq!(parse_label(&[b'x'; FSLABEL_MAX]), Err(Errno::EINVAL));
        assert_eq!(parse_label(&[0xff, 0]), Err(Errno::EINVAL));
        assert_eq!(parse_label(&[0]).unwrap(), "");
    }
}
