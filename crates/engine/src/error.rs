//! The one error type of the engine, grouped by cause.
//!
//! [`Error::errno`] is the only place an errno is chosen; the FUSE adapter and
//! any other front end use it as is.

use std::fmt;

/// Which of the two devices an error concerns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DeviceRole {
    /// The meta-data device (the log).
    Meta,
    /// The data device (the groups).
    Data,
}

impl fmt::Display for DeviceRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceRole::Meta => "meta-data device",
            DeviceRole::Data => "data device",
        })
    }
}

/// Every failure the engine can report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such file or directory, or no such inode.
    #[error("no such file or directory")]
    NotFound,
    /// The name is already taken.
    #[error("file exists")]
    Exists,
    /// A directory was expected.
    #[error("not a directory")]
    NotDir,
    /// A non-directory was expected.
    #[error("is a directory")]
    IsDir,
    /// The directory is not empty.
    #[error("directory not empty")]
    NotEmpty,
    /// A name longer than 255 bytes.
    #[error("file name too long")]
    NameTooLong,
    /// Invalid argument: the reason is for people, not programs.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// Not a symbolic link (readlink).
    #[error("not a symbolic link")]
    NotSymlink,
    /// Write or truncate beyond the maximum file size.
    #[error("file too large")]
    FileTooBig,
    /// A device has no room left.
    #[error("no space left on the {0}")]
    NoSpace(DeviceRole),
    /// The extended attribute does not exist.
    #[error("no such extended attribute")]
    NoXattr,
    /// The extended attribute is too large, or the set of them is.
    #[error("extended attribute too large")]
    XattrTooBig,
    /// Too many hard links.
    #[error("too many links")]
    TooManyLinks,
    /// The operation is not supported by this file system.
    #[error("operation not supported")]
    NotSupported,
    /// Operation not permitted (as opposed to access denied).
    #[error("operation not permitted")]
    NotPermitted,
    /// The volume is mounted read-only, or was turned read-only after an I/O error.
    #[error("read-only file system: {0}")]
    ReadOnly(String),
    /// A device operation failed.
    #[error("I/O error on the {device} ({op} at block {block}): {source}")]
    Io {
        /// Which device.
        device: DeviceRole,
        /// What was being done: "read", "write", "flush".
        op: &'static str,
        /// The first block of the request.
        block: u64,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// An on-disk structure failed validation.
    #[error("corrupt {structure} at block {block} of the {device}: {reason}")]
    Corrupt {
        /// Which structure: "superblock", "checkpoint", "inode block", ...
        structure: &'static str,
        /// Which device.
        device: DeviceRole,
        /// Where.
        block: u64,
        /// What was wrong.
        reason: String,
    },
    /// The two devices do not belong together, or are not DualFS at all.
    #[error("{0}")]
    WrongVolume(String),
    /// Seeking past the end of the file for data or a hole.
    #[error("no such device or address (offset beyond the end of file)")]
    NoSuchOffset,
    /// An operation on a fifo that only seekable files have (`fallocate`).
    #[error("illegal seek (a fifo)")]
    IllegalSeek,
    /// An operation on a device or socket node that only regular files
    /// have here (`fallocate`: the kernel sends a device's to its driver).
    #[error("no such device (not a regular file)")]
    NoDevice,
    /// Opening found commits that had been made durable and cannot be
    /// applied: writing would make the loss permanent, so the volume opens
    /// read-only or with the loss accepted (`MountOptions::accept_loss`).
    #[error("{0}")]
    Damaged(String),
    /// A resize or migration that cannot be done, and why, for people.
    #[error("cannot resize: {0}")]
    Resize(String),
    /// A migration to another device that cannot be done, and why.
    #[error("cannot migrate: {0}")]
    Migrate(String),
    /// A change of the meta-data mirror (`dualfs mirror`) that cannot be
    /// done, and why.
    #[error("cannot change the meta-data mirror: {0}")]
    Mirror(String),
    /// The device is in use or the volume busy.
    #[error("device or resource busy: {0}")]
    Busy(String),
    /// A reader met a meta-data block that is not in memory while the
    /// volume lock forbade reading it: the volume reads the block with the
    /// lock released and runs the reader again. Never returned by a
    /// [`crate::Volume`] method.
    #[error("meta-data block {0} must be read first")]
    MustRead(u64),
    /// A snapshot cannot be made or deleted as asked (the reason in words).
    #[error("{0}")]
    SnapshotRefused(String),
    /// No snapshot of that name.
    #[error("no snapshot named {0}")]
    NoSnapshot(String),
    /// A send stream that cannot be read or written: truncated, corrupted,
    /// of another version, or inconsistent (the reason in words).
    #[error("send stream: {0}")]
    Stream(String),
    /// A receive refused before it changed anything: the stream does not
    /// fit this volume (the reason in words).
    #[error("cannot receive: {0}")]
    ReceiveRefused(String),
    /// A user's, group's or project's quota would be passed (a hard
    /// limit, or a soft one whose grace time ran out).
    #[error("disk quota exceeded")]
    QuotaExceeded,
    /// A rename or link into a directory of another project under project
    /// inheritance: the caller copies instead, as across file systems.
    #[error("invalid cross-device link (another project)")]
    CrossProject,
    /// The volume was shut down (FS_IOC_SHUTDOWN): every call fails and
    /// nothing more is written until it is closed; the next open recovers.
    #[error("the volume was shut down; unmount it, and the next mount recovers it")]
    ShutDown,
}

/// Shorthand used everywhere in the engine.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The errno a POSIX caller should see.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound => libc::ENOENT,
            Error::Exists => libc::EEXIST,
            Error::NotDir => libc::ENOTDIR,
            Error::IsDir => libc::EISDIR,
            Error::NotEmpty => libc::ENOTEMPTY,
            Error::NameTooLong => libc::ENAMETOOLONG,
            Error::Invalid(_) => libc::EINVAL,
            Error::NotSymlink => libc::EINVAL,
            Error::FileTooBig => libc::EFBIG,
            Error::NoSpace(_) => libc::ENOSPC,
            Error::NoXattr => libc::ENODATA,
            Error::XattrTooBig => libc::E2BIG,
            Error::TooManyLinks => libc::EMLINK,
            Error::NotSupported => libc::EOPNOTSUPP,
            Error::NotPermitted => libc::EPERM,
            Error::ReadOnly(_) => libc::EROFS,
            Error::Io { .. } => libc::EIO,
            Error::Corrupt { .. } => libc::EUCLEAN,
            Error::WrongVolume(_) => libc::EINVAL,
            Error::Busy(_) => libc::EBUSY,
            Error::Resize(_) | Error::Migrate(_) | Error::Mirror(_) => libc::EINVAL,
            Error::Damaged(_) => libc::EUCLEAN,
            Error::NoSuchOffset => libc::ENXIO,
            Error::IllegalSeek => libc::ESPIPE,
            Error::NoDevice => libc::ENODEV,
            Error::MustRead(_) => libc::EIO,
            Error::SnapshotRefused(_) => libc::EINVAL,
            Error::NoSnapshot(_) => libc::ENOENT,
            Error::Stream(_) => libc::EBADMSG,
            Error::ReceiveRefused(_) => libc::EINVAL,
            Error::QuotaExceeded => libc::EDQUOT,
            Error::CrossProject => libc::EXDEV,
            Error::ShutDown => libc::EIO,
        }
    }

    /// A corruption error on the meta-data device.
    pub(crate) fn corrupt_meta(structure: &'static str, block: u64, reason: impl Into<String>) -> Error {
        Error::Corrupt { structure, device: DeviceRole::Meta, block, reason: reason.into() }
    }
}
