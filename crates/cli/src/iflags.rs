//! Inode flags and project ids put on files outside the volume (`dualfs
//! get`): what `chattr` and `chattr -p` would do, through
//! FS_IOC_SETFLAGS and FS_IOC_FSSETXATTR on the copy.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use dualfs_engine::format::inode::flag_letters;
use rustix::fs::IFlags;

/// `struct fsxattr` of linux/fs.h (FS_IOC_FSGETXATTR / FS_IOC_FSSETXATTR).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}

const FS_IOC_FSGETXATTR: rustix::ioctl::Opcode = rustix::ioctl::opcode::read::<FsXattr>(b'X', 31);
const FS_IOC_FSSETXATTR: rustix::ioctl::Opcode = rustix::ioctl::opcode::write::<FsXattr>(b'X', 32);

/// Sets project `project` (unless 0) and then `flags` (added to the
/// file's own, such as ext4's extents flag) on the regular file or
/// directory at `path`. Returns what could not be set, in words.
pub fn apply(path: &Path, flags: u32, project: u32) -> Result<(), String> {
    // O_NOFOLLOW: the copy was just made, a symlink there is not ours.
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("inode flags {} and project {project} not set: {e}", flag_letters(flags)))?;
    let mut failed = Vec::new();
    if project != 0
        && let Err(e) = set_project(&file, project)
    {
        failed.push(format!("project {project} not set: {e}"));
    }
    if flags != 0 {
        let set = rustix::fs::ioctl_getflags(&file)
            .and_then(|own| rustix::fs::ioctl_setflags(&file, own | IFlags::from_bits_retain(flags)));
        if let Err(e) = set {
            failed.push(format!("inode flags {} not set: {e}", flag_letters(flags)));
        }
    }
    if failed.is_empty() { Ok(()) } else { Err(failed.join("; ")) }
}

#[allow(unsafe_code)]
fn set_project(file: &File, project: u32) -> rustix::io::Result<()> {
    // SAFETY: both opcodes take a `struct fsxattr`, which `FsXattr` is.
    let mut x = unsafe { rustix::ioctl::ioctl(file, rustix::ioctl::Getter::<FS_IOC_FSGETXATTR, FsXattr>::new())? };
    x.projid = project;
    // SAFETY: as above.
    unsafe { rustix::ioctl::ioctl(file, rustix::ioctl::Setter::<FS_IOC_FSSETXATTR, FsXattr>::new(x)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_opcodes_are_the_kernels() {
        assert_eq!(std::mem::size_of::<FsXattr>(), 28);
        assert_eq!(FS_IOC_FSGETXATTR as u64, 0x801c_581f);
        assert_eq!(FS_IOC_FSSETXATTR as u64, 0x401c_5820);
    }
}
