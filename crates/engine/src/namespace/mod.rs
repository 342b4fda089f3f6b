//! The namespace: inodes, directories, extent maps, extended attributes and
//! file data, all built on one B-tree and the meta-data log.
//!
//! [`Fs`] is the whole file system behind the volume lock. Its methods
//! implement single steps of POSIX operations; [`crate::volume`] checks
//! arguments, orders the steps, and decides when partial segments are sealed.

pub mod acl;
pub mod blob;
pub mod btree;
pub mod dir;
pub mod extents;
pub mod file;
pub mod fsync;
pub mod inode;
pub mod intents;
pub mod pages;
pub mod quota;
pub mod refs;
pub mod relocate;
pub mod replace;
pub mod replay;
pub mod shift;
pub mod spare;
pub mod writeback;
pub mod xattr;

pub use crate::format::name::FileName;
pub use pages::PageCache;

use crate::meta_log::Log;
use crate::types::InodeNo;

/// Tunables of a mounted volume.
#[derive(Clone, Copy, Debug)]
pub struct FsConfig {
    /// Files up to this size keep their bytes in the inode.
    pub inline_max: u32,
    /// Dirty file data (bytes) that forces a commit.
    pub dirty_data_limit: usize,
    /// Decoded inodes and nodes kept in memory.
    pub cache_budget: usize,
    /// Bytes of memory they may take (`-o cache=`, half of it).
    pub cache_bytes: usize,
    /// Keep a file's old contents on disk while it is rewritten after a
    /// truncation to zero ([`replace`]). Off where a crash must show a
    /// prefix of the operations (`data_expire=0`): the truncation is one.
    pub hold_replacements: bool,
    /// `order=strict`: a crash shows a prefix of all operations, data
    /// included. Overwrites go to new blocks (the old ones stay until the
    /// commit that frees them is durable), and an fsync writes a record only
    /// when it leaves nothing else dirty.
    pub strict: bool,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            inline_max: 1024,
            dirty_data_limit: 256 << 20,
            cache_budget: 262_144,
            cache_bytes: 256 << 20,
            hold_replacements: true,
            strict: false,
        }
    }
}

/// The file system behind the volume lock.
#[derive(Debug)]
pub struct Fs {
    /// The meta-data log, IFile, allocator and cache.
    pub log: Log,
    /// Dirty file data.
    pub pages: PageCache,
    /// Tunables.
    pub config: FsConfig,
    /// Files being rewritten after a truncation to zero.
    pub replacing: replace::Replacements,
    /// Changes since the last seal that fsync records are built from.
    pub intents: intents::Intents,
    /// References held from outside (open files, kernel lookups): an inode
    /// with no links lives until they are gone.
    refs: refs::Refs,
    /// Quota limits and grace times, on a volume that keeps quotas.
    pub(crate) quota: Option<crate::format::quota::QuotaTable>,
    /// The time of the operation under way, for grace times (set by the
    /// volume as each operation starts).
    pub quota_now: crate::types::Timestamp,
}

impl Fs {
    /// Wraps a log.
    #[must_use]
    pub fn new(log: Log, config: FsConfig) -> Fs {
        let mut pages = PageCache::default();
        pages.limit_spare(config.dirty_data_limit);
        Fs {
            log,
            pages,
            config,
            replacing: replace::Replacements::default(),
            intents: intents::Intents::default(),
            refs: refs::Refs::default(),
            quota: None,
            quota_now: crate::types::Timestamp::default(),
        }
    }

    /// Inodes with outside references.
    #[must_use]
    pub fn referenced_count(&self) -> usize {
        self.refs.len()
    }

    /// Outside references to `ino`.
    #[must_use]
    pub fn refs(&self, ino: InodeNo) -> u64 {
        self.refs.get(ino)
    }

    /// Takes `n` references to `ino`.
    pub fn take_refs(&mut self, ino: InodeNo, n: u64) {
        self.refs.take(ino, n);
    }

    /// Drops up to `n` references; returns how many remain.
    pub fn drop_refs(&mut self, ino: InodeNo, n: u64) -> u64 {
        self.refs.drop_refs(ino, n)
    }

    /// The reference table, to keep with a tree that stops being live
    /// while the kernel still holds its inodes.
    pub fn refs_mut(&mut self) -> &mut refs::Refs {
        &mut self.refs
    }

    /// Bytes the reference table holds, for tests and stats.
    #[must_use]
    pub fn refs_memory(&self) -> usize {
        self.refs.memory()
    }

    /// Every inode with outside references.
    #[must_use]
    pub fn referenced(&self) -> Vec<InodeNo> {
        self.refs.inodes()
    }
}
