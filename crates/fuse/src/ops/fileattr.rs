//! Inode flags through IOCTL: the kernel turns `chattr`'s and `lsattr`'s
//! FS_IOC_GETFLAGS / SETFLAGS and FS_IOC_FSGETXATTR / FSSETXATTR into
//! FUSE_IOCTL requests of fixed sizes (`fuse_priv_ioctl`, fs/fuse/ioctl.c:
//! a 4-byte flag word, a 28-byte `struct fsxattr`), for files and
//! directories alike, after checking who may change what (the owner;
//! CAP_LINUX_IMMUTABLE for immutable and append-only).

use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{
    FLAG_APPEND, FLAG_DIRSYNC, FLAG_IMMUTABLE, FLAG_NOATIME, FLAG_NODUMP, FLAG_PROJINHERIT, FLAG_SYNC,
};

use super::report;
use crate::DualFs;
use crate::answers::Errno;

/// `_IOR('f', 1, long)` and `_IOW('f', 2, long)`, and their 32-bit forms.
const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;
/// `_IOR('X', 31, struct fsxattr)` and `_IOW('X', 32, struct fsxattr)`.
const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
/// `struct fsxattr`.
const FSXATTR_LEN: usize = 28;

/// `FS_XFLAG_*` and the inode flag each stands for (DIRSYNC has none).
const XFLAGS: [(u32, u32); 6] = [
    (0x8, FLAG_IMMUTABLE),
    (0x10, FLAG_APPEND),
    (0x20, FLAG_SYNC),
    (0x40, FLAG_NOATIME),
    (0x80, FLAG_NODUMP),
    (0x200, FLAG_PROJINHERIT),
];

fn to_xflags(flags: u32) -> u32 {
    XFLAGS.iter().filter(|(_, f)| flags & f != 0).fold(0, |x, (xf, _)| x | xf)
}

/// The inode flags `xflags` stand for; None when one has no counterpart.
fn from_xflags(xflags: u32) -> Option<u32> {
    let known = XFLAGS.iter().fold(0, |x, (xf, _)| x | xf);
    (xflags & !known == 0).then(|| XFLAGS.iter().filter(|(xf, _)| xflags & xf != 0).fold(0, |f, (_, fl)| f | fl))
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

impl DualFs {
    /// IOCTL `cmd` with the caller's `data`; answers the bytes to copy out
    /// (at most `out_size`).
    ///
    /// # Errors
    /// ENOTTY for any other ioctl (isatty's TCGETS on every open by
    /// Python, say), EINVAL for short data, EOPNOTSUPP for flags DualFS
    /// does not keep; the engine's.
    pub fn fileattr_ioctl(&self, node: u64, cmd: u32, data: &[u8], out_size: u32) -> Result<Vec<u8>, Errno> {
        let ino = InodeNo(node);
        let mut out = match cmd {
            FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => {
                let a = self.vol.getattr(ino).map_err(|e| report("ioctl", &e))?;
                a.flags.to_ne_bytes().to_vec()
            }
            FS_IOC_FSGETXATTR => {
                let a = self.vol.getattr(ino).map_err(|e| report("ioctl", &e))?;
                let mut x = vec![0u8; FSXATTR_LEN];
                x[0..4].copy_from_slice(&to_xflags(a.flags).to_ne_bytes());
                x[12..16].copy_from_slice(&a.project.to_ne_bytes());
                x
            }
            FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => {
                let flags = u32_at(data, 0).ok_or(Errno::EINVAL)?;
                self.set_flags(node, flags, None)?;
                Vec::new()
            }
            FS_IOC_FSSETXATTR => {
                let (xflags, project) = (u32_at(data, 0).ok_or(Errno::EINVAL)?, u32_at(data, 12).ok_or(Errno::EINVAL)?);
                let flags = from_xflags(xflags).ok_or(Errno::EOPNOTSUPP)?;
                // DIRSYNC has no xflag: FSSETXATTR leaves it as it is.
                let kept = self.vol.getattr(ino).map_err(|e| report("ioctl", &e))?.flags & FLAG_DIRSYNC;
                self.set_flags(node, flags | kept, Some(project))?;
                Vec::new()
            }
            _ => return Err(Errno::ENOTTY),
        };
        out.truncate(out_size as usize);
        Ok(out)
    }

    /// Sets the flags of `node`. A file newly made immutable or append-only
    /// has the kernel write back its dirty pages first, which the volume
    /// would refuse after (see [`DualFs::lseek`] for how).
    fn set_flags(&self, node: u64, flags: u32, project: Option<u32>) -> Result<(), Errno> {
        let ino = InodeNo(node);
        let before = self.vol.getattr(ino).map_err(|e| report("ioctl", &e))?.flags;
        if flags & !before & (FLAG_IMMUTABLE | FLAG_APPEND) != 0 {
            self.write_back_kernel_pages(node, 0).map_err(|e| if e == Errno::ENOSYS { Errno::EAGAIN } else { e })?;
        }
        match self.vol.set_flags(ino, flags, project) {
            Ok(_) => {
                self.attributes_changed(node, true);
                // The new ctime, which the writeback cache would not show.
                self.forget_kernel_inode(node);
                Ok(())
            }
            Err(e) => Err(report("ioctl", &e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xflags_map_to_the_flags_they_name_and_back() {
        let all = FLAG_IMMUTABLE | FLAG_APPEND | FLAG_SYNC | FLAG_NOATIME | FLAG_NODUMP | FLAG_PROJINHERIT;
        assert_eq!(from_xflags(to_xflags(all)), Some(all));
        assert_eq!(to_xflags(FLAG_DIRSYNC), 0, "no xflag for dirsync");
        assert_eq!(from_xflags(0x1), None, "realtime is not kept");
    }
}
