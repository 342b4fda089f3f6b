//! The page cache: file data between `write` and the data device, by inode
//! and file block, each page dirty, queued for the next partial segment, or
//! in flight. The file operations that fill it are in [`super::file`]; the
//! write-back that empties it is in [`super::writeback`].

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use std::sync::Arc;

use super::spare::SparePages;
use crate::device::{DataRun, PageBuf, SharedPage};
use crate::types::{BLOCK_SIZE, DataBlock, InodeNo, Timestamp};

/// Where a page stands between `write` and the disk.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PageState {
    /// Changed since last queued; `reserved` when it holds a reservation for
    /// a block not yet allocated.
    Dirty {
        /// Holds a data-block reservation.
        reserved: bool,
    },
    /// Allocated at `at`, waiting for the next partial segment.
    Queued {
        /// Its data block.
        at: DataBlock,
    },
    /// Being written to `at` by commit `commit`; dropped once that is durable.
    InFlight {
        /// Its data block.
        at: DataBlock,
        /// The commit writing it.
        commit: u64,
    },
}

/// A cached block of file data.
#[derive(Debug)]
pub struct Page {
    /// Shared with the run of a commit writing it, if one is.
    pub(super) data: SharedPage,
    pub(super) state: PageState,
}

impl Page {
    pub(super) fn new(data: Box<PageBuf>, state: PageState) -> Page {
        Page { data: Arc::new(data), state }
    }

    /// The bytes, to change: copied first if a commit's run being written
    /// still holds them (it writes what it was sealed with).
    pub(super) fn bytes_mut(&mut self) -> &mut [u8; BLOCK_SIZE] {
        &mut Arc::make_mut(&mut self.data).0
    }
}

/// Dirty and in-flight file data, by inode and file block.
#[derive(Debug, Default)]
pub struct PageCache {
    pub(super) files: FxHashMap<InodeNo, BTreeMap<u64, Page>>,
    pub(super) dirty_pages: usize,
    /// Buffers of pages that went, for the next pages ([`SparePages`]).
    spare: SparePages,
    /// Per file, the pages holding a reservation (`Dirty { reserved: true }`):
    /// blocks the file will have once written back, which `stat` counts.
    pub(super) reserved: FxHashMap<InodeNo, u64>,
    /// Per file with dirty pages: when a write first dirtied it, and its
    /// size then (a file missing here counts as old: its pages go with the
    /// next commit).
    pub(super) dirtied: FxHashMap<InodeNo, Dirtied>,
    /// Per commit, the pages [`PageCache::take_queued`] handed it, so that
    /// [`PageCache::drop_in_flight`] visits those and not every page held
    /// (a stream's step visited all 35,000 of them under the volume lock).
    handed: FxHashMap<u64, Vec<(InodeNo, u64)>>,
    /// `Fault::OutgrownInlineStale` only: inline bytes as they were when
    /// each file outgrew its inode (empty in any other build or run).
    pub(super) stale_inline: FxHashMap<InodeNo, Vec<u8>>,
}

/// When and how a file was first dirtied, which bounds what a commit may
/// leave of it for later.
#[derive(Debug, Clone, Copy)]
pub(super) struct Dirtied {
    /// When a write first dirtied it (`i64::MIN`: expired, nothing waits).
    pub at: Timestamp,
    /// Its size then: the size on disk is never capped below it.
    pub floor: u64,
    /// Blocks below this one go with the next commit unless it records
    /// the file inline again (`outgrown`): they hold bytes that were
    /// durable inline before the file outgrew its inode.
    pub keep_below: u64,
    /// For an inline file with a record that may be durable, which outgrew
    /// its inode since: that record's size (its size at the last commit,
    /// or in an fsync record since). While nothing of the file is mapped,
    /// a commit may record it inline again at that size, with page 0's
    /// bytes, in place of writing block 0 (see [`Fs::outgrown_record`]).
    ///
    /// [`Fs::outgrown_record`]: super::Fs::outgrown_record
    pub outgrown: Option<u64>,
}

/// What a commit may leave behind of a file's dirty data.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WriteBack {
    /// Every dirty page, and every file held for replacement (sync, fsync,
    /// unmount, memory pressure in strict order).
    All,
    /// A commit or checkpoint made for room (the active group full, the
    /// log's own checkpoint every so many blocks, the inode map's budget,
    /// the cleaner, a full log), which nobody asked to be durable: as
    /// [`WriteBack::Expired`], files held for replacement stay held and
    /// the delayed tails of files first dirtied after this time wait.
    /// Writing them here sent PostMark's whole working set (250 MiB) to
    /// the data device at its first checkpoint, for files about to be
    /// deleted.
    Room(Timestamp),
    /// A periodic commit: the delayed tail of files first dirtied after
    /// this time may wait (see [`Fs::delayed_tail`]).
    Expired(Timestamp),
    /// One step of a commit made to relieve memory: every dirty page but
    /// the delayed tails beyond this many blocks (all files together),
    /// which wait for the next step; their inodes record the size the
    /// written data reaches, as for a delayed tail.
    Chunk(u64),
}

impl PageCache {
    /// Pages held (dirty, queued or being written), and spare buffers.
    #[must_use]
    pub fn held_pages(&self) -> (usize, usize) {
        (self.files.values().map(BTreeMap::len).sum(), self.spare.len())
    }

    /// The spare buffers, shared with writers that fill whole pages before
    /// taking the volume lock ([`super::spare::Prefilled`]).
    #[must_use]
    pub fn spare(&self) -> &SparePages {
        &self.spare
    }

    /// An empty cache keeping this one's spare buffers (and their limit).
    #[must_use]
    pub fn emptied(&self) -> PageCache {
        PageCache { spare: self.spare.clone(), ..PageCache::default() }
    }

    /// Bytes of dirty pages.
    #[must_use]
    pub fn dirty_bytes(&self) -> usize {
        self.dirty_pages * BLOCK_SIZE
    }

    /// Files with pages not yet queued.
    #[must_use]
    pub fn dirty_files(&self) -> Vec<InodeNo> {
        let mut v: Vec<InodeNo> = self
            .files
            .iter()
            .filter(|(_, p)| p.values().any(|p| matches!(p.state, PageState::Dirty { .. })))
            .map(|(i, _)| *i)
            .collect();
        v.sort_unstable();
        v
    }

    /// [`PageCache::dirty_files`], the files first dirtied longest ago
    /// first (a file with no note counts as oldest: it is due).
    #[must_use]
    pub fn dirty_files_oldest_first(&self) -> Vec<InodeNo> {
        let mut v = self.dirty_files();
        v.sort_by_key(|i| (self.dirtied.get(i).map_or(Timestamp::new(i64::MIN, 0), |d| d.at), *i));
        v
    }

    /// Whether `ino` has pages not yet queued.
    #[must_use]
    pub fn has_dirty(&self, ino: InodeNo) -> bool {
        self.files.get(&ino).is_some_and(|p| p.values().any(|p| matches!(p.state, PageState::Dirty { .. })))
    }

    /// Whether `ino` has any cached page (dirty, queued or in flight).
    #[must_use]
    pub fn has_pages(&self, ino: InodeNo) -> bool {
        self.files.contains_key(&ino)
    }

    /// Pages cached for `ino`.
    #[must_use]
    pub fn file_pages(&self, ino: InodeNo) -> usize {
        self.files.get(&ino).map_or(0, BTreeMap::len)
    }

    pub(super) fn page(&self, ino: InodeNo, block: u64) -> Option<&Page> {
        self.files.get(&ino)?.get(&block)
    }

    /// Notes that a write is about to dirty `ino`, `size` bytes long, at
    /// `now` (a file already dirty keeps its older note).
    pub fn note_dirtied(&mut self, ino: InodeNo, now: Timestamp, size: u64) {
        self.dirtied.entry(ino).or_insert(Dirtied { at: now, floor: size, keep_below: 0, outgrown: None });
    }

    /// Notes that `ino`, an inline file whose record may be durable,
    /// outgrew its inode at `size` bytes, `logged` the size an fsync
    /// record carried since the last commit: block 0 goes with the next
    /// commit unless that commit records the file inline again at the size
    /// of its last record. Returns that size. (An inline file has no
    /// pages, so its note dates from its first write since the last
    /// commit: its floor is the size that commit saw.)
    pub fn outgrown(&mut self, ino: InodeNo, size: u64, logged: Option<u64>) -> Option<u64> {
        let d = self.dirtied.get_mut(&ino)?;
        let durable = d.floor.max(logged.unwrap_or(0)).min(size);
        d.keep_below = d.keep_below.max(1);
        d.outgrown = Some(durable);
        Some(durable)
    }

    /// Makes `ino`'s dirty pages go with the next commit, whatever their
    /// age: a truncation, an allocation or an inline file's bytes moving to
    /// a page changed what the delayed tail may hide.
    pub fn expire(&mut self, ino: InodeNo) {
        self.dirtied.insert(ino, Dirtied { at: Timestamp::new(i64::MIN, 0), floor: 0, keep_below: 0, outgrown: None });
    }

    /// Forgets the notes of files with no dirty page left.
    pub fn forget_clean(&mut self) {
        let files = &self.files;
        self.dirtied.retain(|ino, _| {
            files.get(ino).is_some_and(|p| p.values().any(|p| matches!(p.state, PageState::Dirty { .. })))
        });
        let dirtied = &self.dirtied;
        self.stale_inline.retain(|ino, _| dirtied.contains_key(ino));
    }

    /// Blocks `ino` holds reservations for: written, not yet allocated.
    /// Kept as a count, so that `getattr` need not walk the pages.
    #[must_use]
    pub fn reserved_blocks(&self, ino: InodeNo) -> u64 {
        let n = self.reserved.get(&ino).copied().unwrap_or(0);
        debug_assert_eq!(
            n,
            self.files
                .get(&ino)
                .map_or(0, |f| f.values().filter(|p| p.state == PageState::Dirty { reserved: true }).count() as u64),
            "reserved-page count of inode {ino}"
        );
        n
    }

    pub(super) fn count_reserved(&mut self, ino: InodeNo, added: u64, removed: u64) {
        let n = self.reserved.entry(ino).or_default();
        assert!(*n + added >= removed, "reserved-page count of inode {ino} below zero");
        *n = *n + added - removed;
        if *n == 0 {
            self.reserved.remove(&ino);
        }
    }

    /// Hands at most `max` queued pages to write `commit`, copying their
    /// bytes, coalescing neighbours first (by data block).
    pub fn take_queued_up_to(&mut self, commit: u64, max: usize) -> Vec<(DataBlock, Vec<u8>)> {
        let mut found: Vec<(DataBlock, InodeNo, u64)> = Vec::new();
        for (&ino, pages) in &self.files {
            for (&b, p) in pages {
                if let PageState::Queued { at } = p.state {
                    found.push((at, ino, b));
                }
            }
        }
        found.sort_unstable_by_key(|f| f.0);
        found.truncate(max);
        let mut out = Vec::with_capacity(found.len());
        for (at, ino, b) in found {
            if let Some(p) = self.files.get_mut(&ino).and_then(|f| f.get_mut(&b)) {
                out.push((at, p.data.to_vec()));
                p.state = PageState::InFlight { at, commit };
            }
        }
        out
    }

    /// Puts a block of `ino` in the cache, queued for the next commit to
    /// write at `at` (a data copy replayed from an fsync record).
    pub fn insert_queued(&mut self, ino: InodeNo, block: u64, at: DataBlock, data: &[u8]) {
        let mut page = PageBuf::zeroed();
        let n = data.len().min(BLOCK_SIZE);
        page[..n].copy_from_slice(&data[..n]);
        if let Some(old) = self.files.entry(ino).or_default().insert(block, Page::new(page, PageState::Queued { at }))
            && let PageState::Dirty { reserved } = old.state
        {
            self.dirty_pages -= 1;
            self.count_reserved(ino, 0, u64::from(reserved));
        }
    }

    /// Keeps at most half of `dirty_limit` bytes of spare buffers: they are
    /// memory the cache limit is meant to bound, beside the dirty pages.
    pub fn limit_spare(&mut self, dirty_limit: usize) {
        self.spare.limit(dirty_limit);
    }

    /// Gives back the spare buffers a stream needed once no page is held.
    pub fn trim_spare(&mut self) {
        if self.files.is_empty() {
            self.spare.trim_idle();
        }
    }

    /// Hands every queued page to commit `commit`, in runs of consecutive
    /// blocks (at most `max_run` blocks each) that share the pages'
    /// buffers: nothing is copied (see [`DataRun`]).
    pub fn take_queued(&mut self, commit: u64, max_run: usize) -> Vec<(DataBlock, DataRun)> {
        let mut queued: Vec<(DataBlock, &mut Page)> = Vec::new();
        let mut handed = Vec::new();
        for (&ino, pages) in &mut self.files {
            for (&b, p) in pages.iter_mut() {
                if let PageState::Queued { at } = p.state {
                    p.state = PageState::InFlight { at, commit };
                    queued.push((at, p));
                    handed.push((ino, b));
                }
            }
        }
        if !handed.is_empty() {
            self.handed.insert(commit, handed);
        }
        queued.sort_unstable_by_key(|(at, _)| *at);
        let mut out: Vec<(DataBlock, DataRun)> = Vec::new();
        let mut i = 0;
        while i < queued.len() {
            let start = queued[i].0;
            let mut n = 1;
            while i + n < queued.len() && n < max_run && queued[i + n].0.0 == start.0 + n as u64 {
                n += 1;
            }
            let run = queued[i..i + n].iter().map(|(_, p)| Arc::clone(&p.data)).collect();
            out.push((start, DataRun::Pages(run)));
            i += n;
        }
        out
    }

    /// Pages handed to commit `commit` go back to the queue (it will not
    /// write them: another will).
    pub fn requeue(&mut self, commit: u64) {
        self.handed.remove(&commit);
        for pages in self.files.values_mut() {
            for p in pages.values_mut() {
                if let PageState::InFlight { at, commit: c } = p.state
                    && c == commit
                {
                    p.state = PageState::Queued { at };
                }
            }
        }
    }

    /// Commit `commit` is durable: its pages may go (the kernel caches data).
    pub fn drop_in_flight(&mut self, commit: u64) {
        if let Some(handed) = self.handed.remove(&commit) {
            self.drop_handed(commit, &handed);
            return;
        }
        let mut went = Vec::new();
        self.files.retain(|_, pages| {
            let gone: Vec<u64> = pages
                .iter()
                .filter(|(_, p)| matches!(p.state, PageState::InFlight { commit: c, .. } if c == commit))
                .map(|(b, _)| *b)
                .collect();
            for b in gone {
                if let Some(p) = pages.remove(&b) {
                    went.push(p.data);
                }
            }
            !pages.is_empty()
        });
        self.spare.recycle(went);
    }

    /// [`PageCache::drop_in_flight`] of the pages `take_queued` handed to
    /// `commit` (ids are never shared between it and an fsync's pages). A
    /// page dirtied again since, or gone, is left alone.
    fn drop_handed(&mut self, commit: u64, handed: &[(InodeNo, u64)]) {
        let mut went = Vec::with_capacity(handed.len());
        for &(ino, b) in handed {
            let Some(pages) = self.files.get_mut(&ino) else { continue };
            if pages.get(&b).is_some_and(|p| matches!(p.state, PageState::InFlight { commit: c, .. } if c == commit))
                && let Some(p) = pages.remove(&b)
            {
                went.push(p.data);
                if pages.is_empty() {
                    self.files.remove(&ino);
                }
            }
        }
        self.spare.recycle(went);
    }

    /// Keeps the buffer of a page that went or got another, unless a run
    /// still holds it.
    pub(super) fn recycle(&mut self, data: SharedPage) {
        self.spare.recycle([data]);
    }

    /// A page buffer, zeroed unless `covered` (the caller overwrites all
    /// of it at once): never another file's bytes, for what a write does
    /// not cover reads as zeros. A stream's pages are all covered, and
    /// clearing each reused buffer first was a second pass over its bytes.
    pub(super) fn new_buffer(&mut self, covered: bool) -> Box<PageBuf> {
        match self.spare.take() {
            Some(mut b) => {
                if !covered {
                    b.fill(0);
                }
                b
            }
            None => PageBuf::zeroed(),
        }
    }

    /// Moves every page of `ino` at block `from` or after by `delta` blocks
    /// (a collapsed or inserted range: the extents move with them, so each
    /// page stays over the block it was over, and its state, reservation
    /// and data block stay right). Pages a commit is writing move too, and
    /// so do the notes of which pages each commit was handed, so that the
    /// commit's end drops them where they now are. The caller made sure
    /// the blocks the pages move onto hold none (a collapse discards the
    /// range first; an insert moves up).
    pub(super) fn shift(&mut self, ino: InodeNo, from: u64, delta: i64) {
        let moved = |b: u64| b.checked_add_signed(delta).unwrap_or(b);
        if let Some(pages) = self.files.get_mut(&ino) {
            let tail = pages.split_off(&from);
            debug_assert!(
                tail.keys().next().is_none_or(|&b| pages.range(moved(b)..).next().is_none()),
                "pages shifted onto pages of inode {ino}"
            );
            pages.extend(tail.into_iter().map(|(b, p)| (moved(b), p)));
        }
        for handed in self.handed.values_mut() {
            for (i, b) in handed.iter_mut() {
                if *i == ino && *b >= from {
                    *b = moved(*b);
                }
            }
        }
    }

    /// Forgets that commits were handed pages of `ino` in `[from, to)`
    /// (discarded: other pages may move there).
    pub(super) fn forget_handed(&mut self, ino: InodeNo, from: u64, to: u64) {
        for handed in self.handed.values_mut() {
            handed.retain(|&(i, b)| i != ino || b < from || b >= to);
        }
    }

    /// Removes pages of `ino` at blocks `>= from` (and `< to`); returns how
    /// many held reservations.
    pub(super) fn discard(&mut self, ino: InodeNo, from: u64, to: u64) -> u64 {
        let Some(pages) = self.files.get_mut(&ino) else {
            return 0;
        };
        let doomed: Vec<u64> = pages.range(from..to).map(|(b, _)| *b).collect();
        let mut reserved = 0;
        let mut went = Vec::with_capacity(doomed.len());
        for b in doomed {
            if let Some(p) = pages.remove(&b) {
                if let PageState::Dirty { reserved: r } = p.state {
                    self.dirty_pages -= 1;
                    reserved += u64::from(r);
                }
                went.push(p.data);
            }
        }
        self.spare.recycle(went);
        if pages.is_empty() {
            self.files.remove(&ino);
        }
        self.count_reserved(ino, 0, reserved);
        reserved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run shares the pages' buffers; a write to a page it holds copies
    /// the buffer first, so the run writes the bytes it was sealed with,
    /// and the buffers come back for reuse once both let go.
    #[test]
    fn a_write_during_write_back_leaves_the_run_as_sealed() {
        let mut cache = PageCache::default();
        let ino = InodeNo(7);
        cache.insert_queued(ino, 0, DataBlock(100), &[1u8; BLOCK_SIZE]);
        cache.insert_queued(ino, 1, DataBlock(101), &[2u8; BLOCK_SIZE]);
        cache.insert_queued(ino, 5, DataBlock(300), &[3u8; BLOCK_SIZE]);
        let mut runs = cache.take_queued(1, 2048);
        assert_eq!(runs.len(), 2);
        assert_eq!((runs[0].0, runs[0].1.blocks()), (DataBlock(100), 2));
        let p = cache.files.get_mut(&ino).and_then(|f| f.get_mut(&1)).unwrap();
        p.state = PageState::Dirty { reserved: false };
        p.bytes_mut().fill(9);
        let sealed = runs[0].1.to_vec();
        assert!(sealed[..BLOCK_SIZE].iter().all(|&b| b == 1));
        assert!(sealed[BLOCK_SIZE..].iter().all(|&b| b == 2), "the run keeps the sealed bytes");
        assert!(cache.page(ino, 1).unwrap().data.iter().all(|&b| b == 9));
        runs.clear();
        cache.drop_in_flight(1);
        assert_eq!(cache.held_pages(), (1, 2), "the written pages' buffers are kept for reuse");
    }

    /// A small dirty-data limit (a small `cache=`) bounds the spare buffers
    /// too: half of it, not the stream's 64 MiB.
    #[test]
    fn spare_buffers_stay_within_half_the_dirty_limit() {
        let mut cache = PageCache::default();
        cache.limit_spare(8 * BLOCK_SIZE);
        let ino = InodeNo(7);
        for b in 0..10 {
            cache.insert_queued(ino, b, DataBlock(100 + b), &[1u8; BLOCK_SIZE]);
        }
        drop(cache.take_queued(1, 2048));
        cache.drop_in_flight(1);
        assert_eq!(cache.held_pages(), (0, 4), "four spares kept of ten pages written");
        let mut unlimited = PageCache::default();
        for b in 0..10 {
            unlimited.insert_queued(ino, b, DataBlock(100 + b), &[1u8; BLOCK_SIZE]);
        }
        drop(unlimited.take_queued(1, 2048));
        unlimited.drop_in_flight(1);
        assert_eq!(unlimited.held_pages(), (0, 10));
    }
}
