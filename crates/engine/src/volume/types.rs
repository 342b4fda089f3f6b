//! The types of the engine API: what callers pass in and get back.

use std::time::Duration;

use crate::format::inode::InodeRecord;
use crate::types::{BLOCK_BYTES, FileKind, InodeNo, Timestamp};

/// Attributes of an inode, as `stat` shows them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Attr {
    /// Inode number.
    pub ino: InodeNo,
    /// Generation of the inode number (for NFS file handles).
    pub generation: u32,
    /// What it is.
    pub kind: FileKind,
    /// Permission bits including set-id and sticky (`0o7777`).
    pub perm: u32,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number.
    pub rdev: u64,
    /// Size in bytes.
    pub size: u64,
    /// Space used, in 512-byte units.
    pub blocks: u64,
    /// Last access.
    pub atime: Timestamp,
    /// Last modification.
    pub mtime: Timestamp,
    /// Last status change.
    pub ctime: Timestamp,
    /// Creation.
    pub crtime: Timestamp,
    /// Preferred I/O size.
    pub blksize: u32,
    /// Inode flags (`chattr`; `format::inode::FLAG_*`).
    pub flags: u32,
    /// Project id.
    pub project: u32,
}

impl Attr {
    /// The attributes of a stored inode.
    #[must_use]
    pub fn from_record(r: &InodeRecord) -> Attr {
        let kind = FileKind::from_mode(r.mode).unwrap_or(FileKind::Regular);
        let size = match kind {
            // A directory's size is its entry count, so that `ls -l` says
            // something useful without a block-based layout to report.
            FileKind::Directory => match &r.body {
                crate::format::inode::Body::Tree(t) => t.count,
                crate::format::inode::Body::Entries(e) => e.len() as u64,
                _ => 0,
            },
            _ => r.size,
        };
        Attr {
            ino: r.ino,
            generation: r.generation,
            kind,
            perm: r.mode & 0o7777,
            nlink: r.nlink,
            uid: r.uid,
            gid: r.gid,
            rdev: r.rdev,
            size,
            blocks: r.blocks * (BLOCK_BYTES / 512),
            atime: r.atime,
            mtime: r.mtime,
            ctime: r.ctime,
            crtime: r.crtime,
            blksize: BLOCK_BYTES as u32,
            flags: r.flags,
            project: r.project,
        }
    }
}

/// A timestamp to set.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TimeSet {
    /// The current time.
    Now,
    /// A given time.
    At(Timestamp),
}

/// Which attributes `setattr` changes; `None` leaves one alone.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct SetAttr {
    /// New permission bits (`0o7777`).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate or extend).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<TimeSet>,
    /// New modification time.
    pub mtime: Option<TimeSet>,
    /// New change time (only ever set explicitly by privileged callers).
    pub ctime: Option<Timestamp>,
    /// Whether a new size stamps mtime and ctime (`truncate`). A caller
    /// that owns the times (the kernel's writeback cache, which sends them
    /// when a size change should move them) passes [`Stamp::Keep`].
    pub size_stamp: Stamp,
    /// Who truncates or changes the owner: what a new size or owner drops
    /// of the set-id bits depends on it ([`Changer`]).
    pub changer: Changer,
}

/// Who changes a file in a way that may drop its set-id bits (a write, a
/// truncation, an fallocate, a chown), for Linux's rule
/// (`setattr_should_drop_suidgid`, `setattr_should_drop_sgid`, 6.2 and
/// later): set-user-id goes unless the changer has CAP_FSETID; set-group-id
/// goes when the file is group-executable, or when the changer is neither
/// in the file's group nor has CAP_FSETID. A chown drops set-user-id
/// whoever makes it, and set-group-id by the same group rule.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub enum Changer {
    /// Has CAP_FSETID.
    #[default]
    Privileged,
    /// Lacks CAP_FSETID; its filesystem group id and supplementary groups.
    Unprivileged {
        /// Every group the changer is in.
        groups: Vec<u32>,
    },
}

impl Changer {
    /// Whether the changer keeps the set-group-id bit of a file of group
    /// `gid` that is not group-executable.
    #[must_use]
    pub fn keeps_sgid_of(&self, gid: u32) -> bool {
        match self {
            Changer::Privileged => true,
            Changer::Unprivileged { groups } => groups.contains(&gid),
        }
    }

    /// The mode a write, truncation or fallocate by this changer leaves of
    /// a regular file's `mode` of group `gid`.
    #[must_use]
    pub fn after_write(&self, mode: u32, gid: u32) -> u32 {
        match self {
            Changer::Privileged => mode,
            Changer::Unprivileged { .. } => self.after_chown(mode, gid),
        }
    }

    /// The mode a chown by this changer leaves of a non-directory's `mode`
    /// of (former) group `gid`.
    #[must_use]
    pub fn after_chown(&self, mode: u32, gid: u32) -> u32 {
        let mut mode = mode & !S_ISUID;
        if mode & S_ISGID != 0 && (mode & S_IXGRP != 0 || !self.keeps_sgid_of(gid)) {
            mode &= !S_ISGID;
        }
        mode
    }
}

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_IXGRP: u32 = 0o0010;

/// Who creates an inode: its owner, and the creating process's umask.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Creds {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Permission bits to clear from the mode asked for, unless the
    /// directory has a default ACL, which then decides instead (POSIX.1e).
    /// Zero when the caller has applied the umask itself.
    pub umask: u32,
}

impl Creds {
    /// root:root, no umask.
    pub const ROOT: Creds = Creds { uid: 0, gid: 0, umask: 0 };
}

/// `renameat2` flags.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct RenameFlags {
    /// Fail with `EEXIST` rather than replace.
    pub noreplace: bool,
    /// Swap the two names.
    pub exchange: bool,
    /// `RENAME_WHITEOUT`: leave a whiteout (a character device 0:0, mode
    /// 0) owned by this uid and gid under the old name, in the rename's
    /// commit group (overlayfs's upper layer asks for it).
    pub whiteout: Option<(u32, u32)>,
}

/// `fallocate` modes: none of the range modes allocates the range (mode
/// 0); at most one of them may be set.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct FallocateMode {
    /// Do not change the file size.
    pub keep_size: bool,
    /// Deallocate the range (requires `keep_size`).
    pub punch_hole: bool,
    /// Zero the range (deallocate, then allocate unwritten).
    pub zero_range: bool,
    /// Remove the range and move what follows down (`FALLOC_FL_COLLAPSE_RANGE`).
    pub collapse_range: bool,
    /// Insert a hole of the range's length at its offset, moving what
    /// follows up (`FALLOC_FL_INSERT_RANGE`).
    pub insert_range: bool,
    /// Give the file its own copies of the blocks a snapshot shares in the
    /// range, then allocate the range as mode 0 (`FALLOC_FL_UNSHARE_RANGE`).
    pub unshare_range: bool,
}

impl FallocateMode {
    /// Mode 0: allocate the range, growing the file.
    pub const ALLOCATE: FallocateMode = FallocateMode {
        keep_size: false,
        punch_hole: false,
        zero_range: false,
        collapse_range: false,
        insert_range: false,
        unshare_range: false,
    };
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`.
    pub const PUNCH_HOLE: FallocateMode = FallocateMode { keep_size: true, punch_hole: true, ..Self::ALLOCATE };
    /// `FALLOC_FL_COLLAPSE_RANGE`.
    pub const COLLAPSE_RANGE: FallocateMode = FallocateMode { collapse_range: true, ..Self::ALLOCATE };
    /// `FALLOC_FL_INSERT_RANGE`.
    pub const INSERT_RANGE: FallocateMode = FallocateMode { insert_range: true, ..Self::ALLOCATE };
    /// `FALLOC_FL_UNSHARE_RANGE` (the size grows as with mode 0).
    pub const UNSHARE_RANGE: FallocateMode = FallocateMode { unshare_range: true, ..Self::ALLOCATE };

    /// Checks the combination as Linux's `vfs_fallocate` does: one range
    /// mode at most, punching keeps the size, collapse and insert change it.
    ///
    /// # Errors
    /// `NotSupported` for two range modes or a punch that would change the
    /// size; `Invalid` for a collapse or insert told to keep the size.
    pub fn check(&self) -> crate::error::Result<()> {
        let modes = [self.punch_hole, self.zero_range, self.collapse_range, self.insert_range, self.unshare_range];
        if modes.into_iter().filter(|&m| m).count() > 1 || (self.punch_hole && !self.keep_size) {
            return Err(crate::error::Error::NotSupported);
        }
        if (self.collapse_range || self.insert_range) && self.keep_size {
            return Err(crate::error::Error::Invalid("collapse or insert range cannot keep the size"));
        }
        Ok(())
    }
}

/// Space and inode figures for `statfs`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct StatFs {
    /// Block size.
    pub bsize: u32,
    /// Data-device blocks.
    pub blocks: u64,
    /// Free data-device blocks.
    pub bfree: u64,
    /// Free data-device blocks for unprivileged users.
    pub bavail: u64,
    /// Inodes in use plus those that could still be created.
    pub files: u64,
    /// Inodes that could still be created (grows with the meta-data device's free space).
    pub ffree: u64,
    /// Longest name.
    pub namelen: u32,
    /// Meta-data device segments.
    pub meta_segments: u64,
    /// Free meta-data device segments.
    pub meta_free_segments: u64,
}

/// When reading a file or listing a directory updates its access time.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum AtimeMode {
    /// Never.
    NoAtime,
    /// When the access time is not after the last modification or status
    /// change, or is a day old (Linux's default): `atime > mtime` still
    /// tells whether a file was read since it changed, at one meta-data
    /// write a day per file read.
    #[default]
    Relatime,
    /// On every access.
    StrictAtime,
}

/// What a crash may show of the operations before it (`-o order=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Order {
    /// Every operation up to the last durable point, then some of the
    /// later ones: a periodic commit may leave a file's newly written end
    /// for later (delayed tails), a file being rewritten after `O_TRUNC`
    /// keeps its old contents until closed, data overwritten in place may
    /// be newer than the meta-data around it, and an fsync makes only its
    /// file durable (DESIGN.md, the table of guarantees).
    #[default]
    Default,
    /// A prefix of every operation, data included (LinLogFS's in-order
    /// semantics): no delayed tails, no held replacements, overwrites go
    /// to new blocks, and an fsync makes every earlier operation durable
    /// too (with a record when nothing else is dirty, else a commit).
    Strict,
}

/// How the volume is opened.
#[derive(Clone, Copy, Debug)]
pub struct MountOptions {
    /// Refuse every change, and do not write even the recovery checkpoint.
    pub read_only: bool,
    /// Seal the active partial segment at least this often.
    pub commit_interval: Duration,
    /// How long a periodic commit may leave the newly written end of a
    /// file unwritten (its inode records the shorter size meanwhile, as
    /// ext4's delayed allocation does). Zero writes every byte at every
    /// commit, so that a crash shows a prefix of all operations.
    pub data_expire: Duration,
    /// Write a checkpoint after this many log blocks (bounds recovery time).
    pub checkpoint_blocks: u64,
    /// Dirty file data that forces a commit (of every byte). 256 MiB: with
    /// 64 MiB PostMark's 160 MiB working set forced a full commit every
    /// few seconds (850 MiB written in 100,000 transactions; 313 MiB now).
    pub dirty_data_limit: usize,
    /// Decoded inodes and nodes kept in memory.
    pub cache_budget: usize,
    /// An inode map of this many blocks or more (250 inodes a block) is
    /// left on disk at open and read while the volume serves
    /// ([`crate::Volume::finish_loading`]), so that opening takes the same time
    /// whatever the number of files. 256 by default
    /// (`DUALFS_LAZY_INODE_MAP_MIN_BLOCKS` overrides it, for tests).
    pub lazy_inode_map_min_blocks: usize,
    /// Bytes of memory the decoded inodes and nodes may take (`-o cache=`
    /// gives half of its size to them and the inode map, half to
    /// `dirty_data_limit`).
    pub cache_bytes: usize,
    /// Bytes of inode-map blocks kept in memory (`-o cache=` gives an
    /// eighth of its size): clean blocks past it are given back between
    /// operations and read again when needed. None (the default, for the
    /// tools that walk the whole map): every block read stays.
    /// `DUALFS_INODE_MAP_BYTES` sets a default, for tests.
    pub inode_map_bytes: Option<usize>,
    /// Bytes of segment-usage blocks kept in memory (`-o cache=` gives a
    /// thirty-second of its size): clean blocks past it are given back
    /// between operations and read again when needed. None (the default,
    /// for the tools): every block read stays.
    pub usage_table_bytes: Option<usize>,
    /// Bytes of the data space's group-table and bitmap blocks kept in
    /// memory (`-o cache=` gives a share): clean blocks past it are given
    /// back at the background writer's turns and read again when the
    /// allocator or a free needs them. None (the default, for the tools):
    /// every block read stays.
    pub data_space_bytes: Option<usize>,
    /// Free segments below which the cleaner runs (None: derived from the
    /// device size).
    pub clean_threshold: Option<u32>,
    /// When reads update access times.
    pub atime: AtimeMode,
    /// What a crash may show (`order=strict` implies `data_expire=0`).
    pub order: Order,
    /// Open a volume whose log lost commits that had been made durable
    /// (see `OpenReport::loss`) for writing anyway, accepting the state
    /// before the loss: the next checkpoint makes it permanent. Without
    /// it such a volume opens only read-only.
    pub accept_loss: bool,
    /// When no checkpoint loads (damage to the IFile both checkpoints
    /// share), rebuild the volume from a scan of its log and write that,
    /// as `fsck -y` would, then open it (`recover=rebuild`; see
    /// [`crate::repair::rescue`]). Without it such a volume opens only
    /// read-only, showing the rebuilt state without writing it.
    pub rebuild: bool,
    /// Discard freed data blocks and emptied log segments in the
    /// background (`-o discard`), once no crash can need them.
    pub discard: bool,
    /// Open at the newest loadable checkpoint without rolling the log
    /// forward (`-o norecovery`): read-only, and never writable.
    pub no_recovery: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            commit_interval: Duration::from_secs(5),
            data_expire: Duration::from_secs(30),
            checkpoint_blocks: 4096,
            dirty_data_limit: 256 << 20,
            cache_budget: 262_144,
            lazy_inode_map_min_blocks: crate::meta_log::lazy_imap::lazy_inode_map_min_blocks(),
            cache_bytes: 256 << 20,
            inode_map_bytes: crate::meta_log::lazy_imap::default_inode_map_bytes(),
            usage_table_bytes: None,
            data_space_bytes: None,
            clean_threshold: None,
            atime: AtimeMode::Relatime,
            order: Order::Default,
            accept_loss: false,
            rebuild: false,
            discard: false,
            no_recovery: false,
        }
    }
}

/// How `mkfs` lays out a new volume.
#[derive(Clone, Debug)]
pub struct MkfsOptions {
    /// Blocks per log segment (default 256 = 1 MiB).
    pub segment_blocks: u32,
    /// Blocks per data group (default 32768 = 128 MiB).
    pub group_blocks: u32,
    /// Files up to this size live in the inode (default 1024).
    pub inline_max: u32,
    /// Overwrite devices that already hold a file system.
    pub force: bool,
    /// A name for people.
    pub label: String,
    /// Where time comes from (tests fix it).
    pub now: Timestamp,
    /// Derive the volume's UUIDs and name-hash key from this number instead
    /// of drawing them at random, so that a test builds the same images,
    /// byte for byte, on every run (the crash explorer replays from a string).
    pub identity_seed: Option<u64>,
    /// Let fsync write fsync records instead of committing everything
    /// (format 1.1's `INCOMPAT_FSYNC_LOG`; on by default). Off makes a
    /// volume that format 1.0 readers can mount, whose fsync commits.
    pub fsync_log: bool,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            segment_blocks: 256,
            group_blocks: 32768,
            inline_max: 1024,
            force: false,
            label: String::new(),
            now: Timestamp::now(),
            identity_seed: None,
            fsync_log: true,
        }
    }
}

/// One entry of a directory listing.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Listing {
    /// Name.
    pub name: Vec<u8>,
    /// Inode.
    pub ino: InodeNo,
    /// Kind.
    pub kind: FileKind,
    /// Offset to pass to continue after this entry.
    pub next: u64,
}

/// Whether a write stamps mtime and ctime.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Stamp {
    /// Set them to the current time (POSIX `write`).
    #[default]
    Now,
    /// Leave them: the caller sets them itself.
    Keep,
}
