//! Newtypes for every kind of number the engine handles.
//!
//! A block on the meta-data device and a block on the data device are different
//! things; so are an inode number and a node id. Keeping them apart in the type
//! system makes a whole class of mix-ups a compile error.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Size of every block on both devices, in bytes.
pub const BLOCK_SIZE: usize = 4096;
/// [`BLOCK_SIZE`] as a `u64`, for offset arithmetic.
pub const BLOCK_BYTES: u64 = BLOCK_SIZE as u64;

macro_rules! newtype {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, bytemuck::Zeroable)]
        pub struct $name(pub $inner);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

newtype!(
    /// A block number on the meta-data device.
    MetaBlock(u64),
    "m"
);
newtype!(
    /// A block number on the data device.
    DataBlock(u64),
    "d"
);
newtype!(
    /// A segment of the meta-data log.
    SegmentNo(u32),
    "seg"
);
newtype!(
    /// An inode number. Inode 1 is the root directory; 0 is never valid.
    InodeNo(u64),
    "ino"
);
newtype!(
    /// The name of a meta-data block (B-tree node or blob) in the node map.
    /// Parents refer to children by node id, never by address, so moving a
    /// block in the log rewrites only its node-map entry (no wandering tree).
    NodeId(u64),
    "node"
);
newtype!(
    /// A data-block group.
    GroupNo(u32),
    "grp"
);
newtype!(
    /// Sequence number of a partial segment; strictly increasing along the log.
    Seq(u64),
    "seq"
);

impl InodeNo {
    /// The root directory.
    pub const ROOT: InodeNo = InodeNo(1);
}

impl Seq {
    /// The sequence number that follows this one.
    #[must_use]
    pub fn next(self) -> Seq {
        Seq(self.0 + 1)
    }
}

/// A point in time with nanosecond precision, as stored in inodes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Timestamp {
    /// Seconds since the Unix epoch (may be negative).
    pub sec: i64,
    /// Nanoseconds, `0..1_000_000_000`.
    pub nsec: u32,
}

impl Timestamp {
    /// Builds a timestamp, folding an out-of-range nanosecond count into seconds.
    #[must_use]
    pub fn new(sec: i64, nsec: u32) -> Timestamp {
        Timestamp { sec: sec.saturating_add(i64::from(nsec / 1_000_000_000)), nsec: nsec % 1_000_000_000 }
    }

    /// The current wall-clock time.
    #[must_use]
    pub fn now() -> Timestamp {
        Timestamp::from(SystemTime::now())
    }

    /// The same instant as a `SystemTime`, saturating at the ends of
    /// `SystemTime` (to the epoch, where it cannot go).
    #[must_use]
    pub fn to_system_time(self) -> SystemTime {
        let nanos = Duration::from_nanos(u64::from(self.nsec));
        let whole = Duration::from_secs(self.sec.unsigned_abs());
        // `sec` may be negative; `nsec` always counts forwards from it.
        let base = if self.sec >= 0 { UNIX_EPOCH.checked_add(whole) } else { UNIX_EPOCH.checked_sub(whole) };
        base.and_then(|s| s.checked_add(nanos)).unwrap_or(UNIX_EPOCH)
    }

    /// Nanoseconds since the epoch, saturating.
    #[must_use]
    pub fn as_nanos(self) -> i128 {
        i128::from(self.sec) * 1_000_000_000 + i128::from(self.nsec)
    }
}

impl From<SystemTime> for Timestamp {
    /// Saturates past the ends of `i64` seconds.
    fn from(t: SystemTime) -> Timestamp {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp::new(i64::try_from(d.as_secs()).unwrap_or(i64::MAX), d.subsec_nanos()),
            Err(e) => {
                let d = e.duration();
                let sec = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                if d.subsec_nanos() == 0 {
                    Timestamp::new(-sec, 0)
                } else {
                    Timestamp::new(-sec - 1, 1_000_000_000 - d.subsec_nanos())
                }
            }
        }
    }
}

/// What an inode is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
}

impl FileKind {
    /// The `S_IFMT` bits of this kind.
    #[must_use]
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Regular => libc::S_IFREG,
            FileKind::Directory => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDevice => libc::S_IFCHR,
            FileKind::BlockDevice => libc::S_IFBLK,
        }
    }

    /// The kind named by the `S_IFMT` bits of `mode`, if any.
    #[must_use]
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::Regular,
            libc::S_IFDIR => FileKind::Directory,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            _ => return None,
        })
    }

    /// The one-byte code stored in directory entries (the `DT_*` values).
    #[must_use]
    pub fn dirent_type(self) -> u8 {
        match self {
            FileKind::Regular => libc::DT_REG,
            FileKind::Directory => libc::DT_DIR,
            FileKind::Symlink => libc::DT_LNK,
            FileKind::Fifo => libc::DT_FIFO,
            FileKind::Socket => libc::DT_SOCK,
            FileKind::CharDevice => libc::DT_CHR,
            FileKind::BlockDevice => libc::DT_BLK,
        }
    }

    /// The kind named by a `DT_*` code.
    #[must_use]
    pub fn from_dirent_type(t: u8) -> Option<FileKind> {
        Some(match t {
            libc::DT_REG => FileKind::Regular,
            libc::DT_DIR => FileKind::Directory,
            libc::DT_LNK => FileKind::Symlink,
            libc::DT_FIFO => FileKind::Fifo,
            libc::DT_SOCK => FileKind::Socket,
            libc::DT_CHR => FileKind::CharDevice,
            libc::DT_BLK => FileKind::BlockDevice,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_through_system_time_on_both_sides_of_the_epoch() {
        for (sec, nsec) in [(0, 0), (1_700_000_000, 123_456_789), (-1, 999_999_999), (-1, 0), (-86_400 * 365, 5)] {
            let t = Timestamp { sec, nsec };
            assert_eq!(Timestamp::from(t.to_system_time()), t, "{sec}.{nsec}");
        }
    }

    #[test]
    fn file_kind_codes_round_trip() {
        for k in [
            FileKind::Regular,
            FileKind::Directory,
            FileKind::Symlink,
            FileKind::Fifo,
            FileKind::Socket,
            FileKind::CharDevice,
            FileKind::BlockDevice,
        ] {
            assert_eq!(FileKind::from_mode(k.mode_bits() | 0o755), Some(k));
            assert_eq!(FileKind::from_dirent_type(k.dirent_type()), Some(k));
        }
        assert_eq!(FileKind::from_mode(0), None);
    }

    #[test]
    fn timestamp_folds_nanoseconds() {
        assert_eq!(Timestamp::new(1, 2_500_000_000), Timestamp { sec: 3, nsec: 500_000_000 });
    }
}
