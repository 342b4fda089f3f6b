//! Numbers of the protocol: versions, struct sizes, opcodes and flags, as
//! `include/uapi/linux/fuse.h` names them.

/// The protocol major version spoken.
pub const KERNEL_VERSION: u32 = 7;
/// The highest minor version whose structs are written here (7.42 added
/// FUSE_OVER_IO_URING); the reply to INIT takes the smaller of this and the
/// kernel's.
pub const KERNEL_MINOR_VERSION: u32 = 44;
/// The node id of the root directory.
pub const ROOT_ID: u64 = 1;

/// `struct fuse_in_header`.
pub const IN_HEADER_LEN: usize = 40;
/// `struct fuse_out_header`.
pub const OUT_HEADER_LEN: usize = 16;
/// `struct fuse_attr`.
pub const ATTR_LEN: usize = 88;
/// `struct fuse_entry_out`.
pub const ENTRY_OUT_LEN: usize = 40 + ATTR_LEN;
/// `struct fuse_attr_out`.
pub const ATTR_OUT_LEN: usize = 16 + ATTR_LEN;
/// `struct fuse_open_out`.
pub const OPEN_OUT_LEN: usize = 16;
/// `struct fuse_statfs_out`.
pub const STATFS_OUT_LEN: usize = 80;
/// `struct fuse_init_out`.
pub const INIT_OUT_LEN: usize = 64;
/// `struct fuse_dirent` without its name.
pub const DIRENT_LEN: usize = 24;
/// `struct fuse_uring_req_header`: in/out header area, op header area,
/// `struct fuse_uring_ent_in_out`.
pub const URING_HEADER_AREA: usize = 128;
/// Size of `struct fuse_uring_req_header`.
pub const URING_REQ_HEADER_LEN: usize = 2 * URING_HEADER_AREA + 32;

/// Opcodes (`enum fuse_opcode`).
pub mod opcode {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const GETLK: u32 = 31;
    pub const SETLK: u32 = 32;
    pub const SETLKW: u32 = 33;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const BMAP: u32 = 37;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const POLL: u32 = 40;
    pub const NOTIFY_REPLY: u32 = 41;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
    pub const SETUPMAPPING: u32 = 48;
    pub const REMOVEMAPPING: u32 = 49;
    pub const SYNCFS: u32 = 50;
    pub const TMPFILE: u32 = 51;
    pub const STATX: u32 = 52;
    pub const COPY_FILE_RANGE_64: u32 = 53;
}

/// `fuse_setattr_in.valid`: which fields a SETATTR sets.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const LOCKOWNER: u32 = 1 << 9;
    pub const CTIME: u32 = 1 << 10;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_setattr_in.valid`: the mode is to be set.
pub const FATTR_MODE: u32 = fattr::MODE;
/// `fuse_setattr_in.valid`: the owner is to be set.
pub const FATTR_UID: u32 = fattr::UID;
/// `fuse_setattr_in.valid`: the group is to be set.
pub const FATTR_GID: u32 = fattr::GID;
/// `fuse_setattr_in.valid`: the size is to be set.
pub const FATTR_SIZE: u32 = fattr::SIZE;

/// `fuse_open_out.open_flags`.
pub mod fopen {
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const KEEP_CACHE: u32 = 1 << 1;
    pub const NONSEEKABLE: u32 = 1 << 2;
    pub const CACHE_DIR: u32 = 1 << 3;
    pub const STREAM: u32 = 1 << 4;
    pub const NOFLUSH: u32 = 1 << 5;
    pub const PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
    pub const PASSTHROUGH: u32 = 1 << 7;
}

/// Flags of single requests: GETATTR, RELEASE, WRITE, READ, IOCTL.
pub mod req_flags {
    /// `getattr_flags`: `fh` is valid.
    pub const GETATTR_FH: u32 = 1 << 0;
    pub const RELEASE_FLUSH: u32 = 1 << 0;
    pub const RELEASE_FLOCK_UNLOCK: u32 = 1 << 1;
    pub const WRITE_CACHE: u32 = 1 << 0;
    pub const WRITE_LOCKOWNER: u32 = 1 << 1;
    pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
    pub const READ_LOCKOWNER: u32 = 1 << 1;
    pub const IOCTL_COMPAT: u32 = 1 << 0;
    pub const IOCTL_UNRESTRICTED: u32 = 1 << 1;
    pub const IOCTL_RETRY: u32 = 1 << 2;
    pub const IOCTL_32BIT: u32 = 1 << 3;
    pub const IOCTL_DIR: u32 = 1 << 4;
    pub const IOCTL_COMPAT_X32: u32 = 1 << 5;
    /// `setxattr_flags`: clear the SGID bit when setting a POSIX ACL.
    pub const SETXATTR_ACL_KILL_SGID: u32 = 1 << 0;
}

/// INIT flags (`flags | flags2 << 32`).
pub mod init_flags {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const POSIX_LOCKS: u64 = 1 << 1;
    pub const FILE_OPS: u64 = 1 << 2;
    pub const ATOMIC_O_TRUNC: u64 = 1 << 3;
    pub const EXPORT_SUPPORT: u64 = 1 << 4;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const DONT_MASK: u64 = 1 << 6;
    pub const SPLICE_WRITE: u64 = 1 << 7;
    pub const SPLICE_MOVE: u64 = 1 << 8;
    pub const SPLICE_READ: u64 = 1 << 9;
    pub const FLOCK_LOCKS: u64 = 1 << 10;
    pub const HAS_IOCTL_DIR: u64 = 1 << 11;
    pub const AUTO_INVAL_DATA: u64 = 1 << 12;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const ASYNC_DIO: u64 = 1 << 15;
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    pub const NO_OPEN_SUPPORT: u64 = 1 << 17;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const HANDLE_KILLPRIV: u64 = 1 << 19;
    pub const POSIX_ACL: u64 = 1 << 20;
    pub const ABORT_ERROR: u64 = 1 << 21;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    pub const NO_OPENDIR_SUPPORT: u64 = 1 << 24;
    pub const EXPLICIT_INVAL_DATA: u64 = 1 << 25;
    pub const MAP_ALIGNMENT: u64 = 1 << 26;
    pub const SUBMOUNTS: u64 = 1 << 27;
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const SETXATTR_EXT: u64 = 1 << 29;
    pub const INIT_EXT: u64 = 1 << 30;
    pub const SECURITY_CTX: u64 = 1 << 32;
    pub const HAS_INODE_DAX: u64 = 1 << 33;
    pub const CREATE_SUPP_GROUP: u64 = 1 << 34;
    pub const HAS_EXPIRE_ONLY: u64 = 1 << 35;
    pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
    pub const PASSTHROUGH: u64 = 1 << 37;
    pub const NO_EXPORT_SUPPORT: u64 = 1 << 38;
    pub const HAS_RESEND: u64 = 1 << 39;
    pub const ALLOW_IDMAP: u64 = 1 << 40;
    pub const OVER_IO_URING: u64 = 1 << 41;
    pub const REQUEST_TIMEOUT: u64 = 1 << 42;
}

/// Notification codes (`enum fuse_notify_code`), sent in the error field of
/// an out header whose unique is 0.
pub mod notify_code {
    pub const POLL: i32 = 1;
    pub const INVAL_INODE: i32 = 2;
    pub const INVAL_ENTRY: i32 = 3;
    pub const STORE: i32 = 4;
    pub const RETRIEVE: i32 = 5;
    pub const DELETE: i32 = 6;
}

/// `fuse_notify_inval_entry_out.flags`: only expire the entry, do not drop
/// it (FUSE_HAS_EXPIRE_ONLY).
pub const FUSE_EXPIRE_ONLY: u32 = 1 << 0;

/// io_uring command opcodes (`enum fuse_uring_cmd`), the SQE's `cmd_op`.
pub mod uring_cmd {
    pub const REGISTER: u32 = 1;
    pub const COMMIT_AND_FETCH: u32 = 2;
}
