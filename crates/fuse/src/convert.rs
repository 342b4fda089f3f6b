//! Translations between the kernel's vocabulary (its flag words, uapi
//! <linux/fuse.h> and <fcntl.h>) and the engine's. Pure functions: no
//! I/O, no state.

use dualfs_engine::Error;
use dualfs_engine::types::FileKind;
use dualfs_engine::volume::{Attr, FallocateMode, RenameFlags, SetMode, Whence};

use crate::answers::Errno;

/// The errno the kernel should see for an engine error; the engine chooses it.
#[must_use]
pub fn errno(e: &Error) -> Errno {
    Errno::from_i32(e.errno())
}

/// What one READDIRPLUS entry takes, for a name of up to 40 bytes: the
/// kernel's `fuse_direntplus` (a 128-byte `fuse_entry_out`, a 24-byte
/// `fuse_dirent`) and the name, padded to 8 bytes.
const DIRENTPLUS_BYTES: u64 = 128 + 24 + 40;

/// The largest listing buffer worth asking for: glibc takes no larger a
/// directory's `st_blksize` (it reads one as bogus), and the kernel sends
/// no larger a READDIR(PLUS) than the 256 pages both transports negotiate.
const LISTING_MAX_BYTES: u64 = 1 << 20;

/// The `st_blksize` the kernel is given for an inode: the engine's, but for
/// a directory whose whole listing with attributes fits in one request,
/// for which it is the buffer that listing needs (a power of two).
///
/// Why: glibc's opendir sizes its getdents buffer from the directory's
/// `st_blksize` (32 KiB at least, 1 MiB at most), Linux 6.16+ sizes a
/// READDIR(PLUS) request from that buffer, and under
/// FUSE_READDIRPLUS_AUTO only the chunk at offset 0 carries attributes
/// unless a lookup came between two chunks. A walk that reads a directory
/// whole before it stats the names (`find -size`, `tar c`, `rm -rf`)
/// therefore got the attributes of the first 32 KiB (about 190 entries)
/// and looked up every later name on its own: 1,868 LOOKUPs of the
/// suite's `find`, all in its five directories of more than 190 entries.
/// A directory too large for one request keeps the kernel's chunks: a
/// larger first chunk would not save the rest's lookups, and would make
/// a plain listing of it load and send thousands of inodes.
#[must_use]
pub fn blksize(a: &Attr) -> u32 {
    if a.kind != FileKind::Directory {
        return a.blksize;
    }
    // The engine's size of a directory is its entry count; "." and ".." come too.
    let need = a.size.saturating_add(2).saturating_mul(DIRENTPLUS_BYTES);
    if need > LISTING_MAX_BYTES {
        return a.blksize;
    }
    u32::try_from(need.next_power_of_two()).map_or(a.blksize, |b| b.max(a.blksize))
}

/// `renameat2` flags, a whiteout owned by `owner` (uid, gid); a bit a
/// future kernel invents cannot be honoured.
///
/// # Errors
/// `EINVAL` for unknown bits.
pub fn rename_flags(bits: u32, owner: (u32, u32)) -> Result<RenameFlags, Errno> {
    let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE | libc::RENAME_WHITEOUT;
    if bits & !known != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(RenameFlags {
        noreplace: bits & libc::RENAME_NOREPLACE != 0,
        exchange: bits & libc::RENAME_EXCHANGE != 0,
        whiteout: (bits & libc::RENAME_WHITEOUT != 0).then_some(owner),
    })
}

/// `fallocate` mode bits: keep-size, punch-hole, zero-range, collapse,
/// insert and unshare (Linux 6.18's FUSE passes only the first three on;
/// the others reach a server only from a kernel that passes them).
///
/// # Errors
/// `EOPNOTSUPP` for any other bit (`FALLOC_FL_WRITE_ZEROES`,
/// `FALLOC_FL_NO_HIDE_STALE`) and for combinations `vfs_fallocate` refuses
/// so; `EINVAL` for collapse or insert with keep-size.
pub fn fallocate_mode(mode: i32) -> Result<FallocateMode, Errno> {
    let known = libc::FALLOC_FL_KEEP_SIZE
        | libc::FALLOC_FL_PUNCH_HOLE
        | libc::FALLOC_FL_ZERO_RANGE
        | libc::FALLOC_FL_COLLAPSE_RANGE
        | libc::FALLOC_FL_INSERT_RANGE
        | libc::FALLOC_FL_UNSHARE_RANGE;
    if mode & !known != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    let m = FallocateMode {
        keep_size: mode & libc::FALLOC_FL_KEEP_SIZE != 0,
        punch_hole: mode & libc::FALLOC_FL_PUNCH_HOLE != 0,
        zero_range: mode & libc::FALLOC_FL_ZERO_RANGE != 0,
        collapse_range: mode & libc::FALLOC_FL_COLLAPSE_RANGE != 0,
        insert_range: mode & libc::FALLOC_FL_INSERT_RANGE != 0,
        unshare_range: mode & libc::FALLOC_FL_UNSHARE_RANGE != 0,
    };
    m.check().map_err(|e| errno(&e))?;
    Ok(m)
}

/// `setxattr` flags.
///
/// # Errors
/// `EINVAL` for unknown bits, or CREATE and REPLACE together (no mode of
/// the engine can honour both).
pub fn xattr_mode(flags: i32) -> Result<SetMode, Errno> {
    match flags {
        0 => Ok(SetMode::Any),
        libc::XATTR_CREATE => Ok(SetMode::Create),
        libc::XATTR_REPLACE => Ok(SetMode::Replace),
        _ => Err(Errno::EINVAL),
    }
}

/// What an `lseek` asks for: the engine answers SEEK_DATA and SEEK_HOLE;
/// the kernel answers SEEK_SET/CUR/END itself and never sends them.
pub fn whence(w: i32) -> Option<Whence> {
    match w {
        libc::SEEK_DATA => Some(Whence::Data),
        libc::SEEK_HOLE => Some(Whence::Hole),
        _ => None,
    }
}

/// The kind of node `mknod` asks for, from the type bits of its mode.
///
/// # Errors
/// `EINVAL` for type bits that name no kind of file.
pub fn mknod_kind(mode: u32) -> Result<FileKind, Errno> {
    // mknod(2) with no type bits makes a regular file.
    if mode & libc::S_IFMT == 0 {
        return Ok(FileKind::Regular);
    }
    FileKind::from_mode(mode).ok_or(Errno::EINVAL)
}

/// `listxattr`'s reply: every name followed by a NUL.
pub fn xattr_names(names: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(names.iter().map(|n| n.len() + 1).sum());
    for n in names {
        out.extend_from_slice(n);
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use dualfs_engine::types::Timestamp;

    use super::*;

    #[test]
    fn rename_whiteout_is_refused() {
        assert_eq!(rename_flags(libc::RENAME_WHITEOUT, (7, 8)).unwrap().whiteout, Some((7, 8)));
        assert_eq!(rename_flags(1 << 3, (0, 0)), Err(Errno::EINVAL));
        let f = rename_flags(libc::RENAME_EXCHANGE, (0, 0)).unwrap();
        assert!(f.exchange && !f.noreplace && f.whiteout.is_none());
        assert_eq!(rename_flags(0, (0, 0)).unwrap(), RenameFlags::default());
    }

    #[test]
    fn fallocate_modes_combine_as_vfs_fallocate_allows() {
        use libc::{
            FALLOC_FL_COLLAPSE_RANGE as COLLAPSE, FALLOC_FL_INSERT_RANGE as INSERT, FALLOC_FL_KEEP_SIZE as KEEP,
            FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_UNSHARE_RANGE as UNSHARE, FALLOC_FL_ZERO_RANGE as ZERO,
        };
        assert!(fallocate_mode(COLLAPSE).unwrap().collapse_range);
        assert!(fallocate_mode(INSERT).unwrap().insert_range);
        let u = fallocate_mode(UNSHARE | KEEP).unwrap();
        assert!(u.unshare_range && u.keep_size);
        assert_eq!(fallocate_mode(COLLAPSE | KEEP), Err(Errno::EINVAL));
        assert_eq!(fallocate_mode(INSERT | KEEP), Err(Errno::EINVAL));
        assert_eq!(fallocate_mode(COLLAPSE | INSERT), Err(Errno::EOPNOTSUPP));
        assert_eq!(fallocate_mode(COLLAPSE | PUNCH | KEEP), Err(Errno::EOPNOTSUPP));
        assert_eq!(fallocate_mode(PUNCH | ZERO | KEEP), Err(Errno::EOPNOTSUPP));
        assert_eq!(fallocate_mode(UNSHARE | ZERO), Err(Errno::EOPNOTSUPP));
        assert_eq!(fallocate_mode(PUNCH), Err(Errno::EOPNOTSUPP));
        assert_eq!(fallocate_mode(0x80), Err(Errno::EOPNOTSUPP), "FALLOC_FL_WRITE_ZEROES");
        let m = fallocate_mode(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE).unwrap();
        assert!(m.punch_hole && m.keep_size && !m.zero_range);
    }

    #[test]
    fn xattr_create_and_replace_together_are_invalid() {
        assert_eq!(xattr_mode(libc::XATTR_CREATE | libc::XATTR_REPLACE), Err(Errno::EINVAL));
        assert_eq!(xattr_mode(0), Ok(SetMode::Any));
    }

    #[test]
    fn mknod_without_type_bits_makes_a_regular_file() {
        assert_eq!(mknod_kind(0o644), Ok(FileKind::Regular));
        assert_eq!(mknod_kind(libc::S_IFIFO | 0o600), Ok(FileKind::Fifo));
        assert_eq!(mknod_kind(0o170000), Err(Errno::EINVAL));
    }

    fn directory(entries: u64) -> Attr {
        Attr {
            ino: dualfs_engine::types::InodeNo(5),
            generation: 1,
            kind: FileKind::Directory,
            perm: 0o755,
            nlink: 2,
            uid: 0,
            gid: 0,
            rdev: 0,
            size: entries,
            blocks: 8,
            atime: Timestamp::default(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            crtime: Timestamp::default(),
            blksize: 4096,
            flags: 0,
            project: 0,
        }
    }

    #[test]
    fn a_directory_asks_for_a_buffer_that_holds_its_whole_listing_with_attributes() {
        // Small: within glibc's 32 KiB floor, the buffer is what it was.
        assert_eq!(blksize(&directory(10)), 4096);
        // The suite's include/linux: 1,468 entries need 282,240 bytes.
        let b = blksize(&directory(1_468));
        assert_eq!(b, 512 * 1024);
        assert!(u64::from(b) >= 1_470 * DIRENTPLUS_BYTES);
        assert_eq!(blksize(&directory(5_000)), 1 << 20);
        // Larger than one request: the kernel's own chunks, as before.
        assert_eq!(blksize(&directory(50_000)), 4096);
        assert_eq!(blksize(&directory(u64::MAX)), 4096);
        let mut file = directory(1_468);
        file.kind = FileKind::Regular;
        assert_eq!(blksize(&file), 4096);
    }

    #[test]
    fn xattr_names_are_nul_terminated() {
        assert_eq!(xattr_names(&[b"user.a".to_vec(), b"user.bc".to_vec()]), b"user.a\0user.bc\0");
    }
}
