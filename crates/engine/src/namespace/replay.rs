//! Replaying fsync records at mount: the state roll-forward reached (the
//! last complete commit group), changed as the fsync partial segments after
//! it say, in log order (`format::fsync`).
//!
//! Replay goes through the namespace's own operations (directory inserts,
//! extent maps, frees), so what it builds is an ordinary dirty state that
//! the recovery commit writes as one group. Nothing is committed before
//! every record is replayed: a commit group is what folds fsync records
//! away, and one written halfway would leave the rest unreplayed after a
//! second crash.
//!
//! Every record is checked against the state it applies to; one that does
//! not fit (an inode in use where a new one is created, a data block owned
//! by someone else, a name taken) is reported as corruption, never applied
//! over what is there.

use std::collections::{BTreeMap, HashMap};

use super::Fs;
use crate::error::{Error, Result};
use crate::format::descriptor::Change;
use crate::format::fsync::{FSYNC_MAPPED, FSYNC_NEW, FsyncRecord};
use crate::format::inode::{Body, Extent, InodeRecord};
use crate::format::name::FileName;
use crate::meta_log::fsync::PendingFsync;
use crate::types::{DataBlock, FileKind, InodeNo, MetaBlock};

/// What replay did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Fsync partial segments replayed.
    pub partial_segments: u64,
    /// Records applied.
    pub records: u64,
    /// Inodes created.
    pub inodes_created: u64,
    /// Data blocks put back from copies.
    pub data_blocks: u64,
}

fn bad(at: MetaBlock, why: String) -> Error {
    Error::corrupt_meta("fsync record", at.0, why)
}

/// The blocks of `a` not in `b`, as runs (both lists of `(start, len)`).
fn minus(a: &[(u64, u32)], b: &[(u64, u32)]) -> Vec<(DataBlock, u32)> {
    let mut out = Vec::new();
    for &(s, n) in a {
        let mut pieces = vec![(s, s + u64::from(n))];
        for &(bs, bn) in b {
            let be = bs + u64::from(bn);
            pieces = pieces
                .into_iter()
                .flat_map(|(ps, pe)| [(ps, pe.min(bs)), (ps.max(be), pe)])
                .filter(|(ps, pe)| ps < pe)
                .collect();
        }
        out.extend(pieces.into_iter().map(|(ps, pe)| (DataBlock(ps), (pe - ps) as u32)));
    }
    out
}

fn runs(extents: &[Extent]) -> Vec<(u64, u32)> {
    extents.iter().map(|e| (e.physical.0, e.len)).collect()
}

impl Fs {
    /// Replays `pending` (roll-forward's fsync partial segments, in log
    /// order) over the current state.
    ///
    /// # Errors
    /// `Corrupt` when a record does not fit the state it applies to; I/O
    /// errors reading meta-data.
    pub fn replay_fsync(&mut self, pending: Vec<PendingFsync>) -> Result<ReplayReport> {
        let mut report = ReplayReport::default();
        // Copies by data block: a later copy, or a later in-place write of
        // the block, supersedes an earlier one.
        let mut copies: BTreeMap<u64, (InodeNo, u64, Vec<u8>)> = BTreeMap::new();
        for ps in pending {
            report.partial_segments += 1;
            let mut blocks: HashMap<InodeNo, u64> = HashMap::new();
            let mut data = ps.copies.into_iter();
            let at = ps.at;
            for rec in ps.records {
                report.records += 1;
                match rec {
                    FsyncRecord::Inode { flags, record } => {
                        blocks.insert(record.ino, record.blocks);
                        if flags & FSYNC_NEW != 0 {
                            report.inodes_created += 1;
                        }
                        self.replay_inode(at, flags, record)?;
                    }
                    FsyncRecord::Range { ino, first, end, extents } => {
                        let freed = self.replay_range(at, ino, first, end, &extents)?;
                        // An inode whose record came before sets its count
                        // below; any other counts its frees down.
                        if freed > 0 && !blocks.contains_key(&ino) {
                            self.take_blocks(ino, freed)?;
                        }
                    }
                    FsyncRecord::Link { dir, ino, kind, name } => self.replay_link(at, dir, ino, kind, &name)?,
                    FsyncRecord::Data { ino, block, at: home, .. } => {
                        let bytes = data.next().ok_or_else(|| bad(at, format!("no data copy for inode {ino}")))?;
                        copies.insert(home.0, (ino, block, bytes));
                    }
                    FsyncRecord::Written { start, len } => {
                        let gone: Vec<u64> = copies.range(start.0..start.0 + u64::from(len)).map(|(k, _)| *k).collect();
                        for k in gone {
                            copies.remove(&k);
                        }
                    }
                }
            }
            // The block count is the record's once its map is in place
            // (frees during replay counted down from the old one).
            for (ino, n) in blocks {
                self.log.inode_mut(ino)?.blocks = n;
            }
        }
        // Each file's written blocks by data block, read once: a collapse or
        // an insert after a copy was made moves its block within the file.
        let mut maps: HashMap<InodeNo, Vec<Extent>> = HashMap::new();
        for (at, (ino, _, bytes)) in copies {
            if self.log.inode(ino).is_err() {
                continue;
            }
            let map = match maps.entry(ino) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    let mut m = self.extents_around(ino, 0, u64::MAX)?;
                    m.retain(|e| !e.unwritten);
                    m.sort_unstable_by_key(|e| e.physical.0);
                    v.insert(m)
                }
            };
            // A copy whose block the file no longer maps (written) is stale.
            let i = map.partition_point(|e| e.physical.0 + u64::from(e.len) <= at);
            let Some(e) = map.get(i).filter(|e| e.physical.0 <= at) else { continue };
            let now = e.logical + (at - e.physical.0);
            self.pages.insert_queued(ino, now, DataBlock(at), &bytes);
            report.data_blocks += 1;
        }
        Ok(report)
    }

    fn replay_inode(&mut self, at: MetaBlock, flags: u8, mut rec: InodeRecord) -> Result<()> {
        let ino = rec.ino;
        let dir = FileKind::from_mode(rec.mode) == Some(FileKind::Directory);
        if flags & FSYNC_NEW != 0 {
            // Links are counted as their records are replayed.
            rec.nlink = if dir { 2 } else { 0 };
            if flags & FSYNC_MAPPED != 0 || dir {
                rec.body = Body::Empty;
            }
            let ino = rec.ino;
            return self.log.claim_inode(rec).map_err(|_| bad(at, format!("it creates inode {ino}, which is in use")));
        }
        let base = match self.log.inode(ino) {
            Ok(b) => b.clone(),
            Err(Error::NotFound) => return Err(bad(at, format!("it changes inode {ino}, which is not in use"))),
            Err(e) => return Err(e),
        };
        if base.generation != rec.generation || base.mode & libc::S_IFMT != rec.mode & libc::S_IFMT {
            return Err(bad(at, format!("it changes inode {ino} of another generation or kind")));
        }
        rec.nlink = base.nlink;
        rec.parent = base.parent;
        if flags & FSYNC_MAPPED != 0 {
            // The map stays; range records change it.
            rec.body = match base.body {
                Body::Inline(_) => Body::Empty,
                other => other,
            };
        } else if matches!(base.body, Body::Extents(_) | Body::Tree(_)) {
            // Back to inline bytes (or nothing): the old blocks go.
            // The record replaces the inode, block count included.
            let (freed, _) = self.unmap_range(ino, 0, u64::MAX, usize::MAX)?;
            self.free_ranges(ino, &freed)?;
            self.discard_pages(ino);
        }
        *self.log.inode_mut(ino)? = rec;
        Ok(())
    }

    /// Returns how many blocks it freed (the caller counts them).
    fn replay_range(&mut self, at: MetaBlock, ino: InodeNo, first: u64, end: u64, extents: &[Extent]) -> Result<u64> {
        let rec = self.log.inode(ino).map_err(|_| bad(at, format!("it maps blocks of inode {ino}, not in use")))?;
        if !matches!(rec.body, Body::Empty | Body::Extents(_) | Body::Tree(_)) {
            return Err(bad(at, format!("it maps blocks of inode {ino}, which has no block map")));
        }
        let (old, _) = self.unmap_range(ino, first, end, usize::MAX)?;
        let old: Vec<(u64, u32)> = old.iter().map(|&(b, n)| (b.0, n)).collect();
        let new = runs(extents);
        let gained = minus(&new, &old);
        for &(start, len) in &gained {
            if !self.log.space_mut().all_free(start, len)? {
                return Err(bad(
                    at,
                    format!(
                        "it gives inode {ino} data blocks {}..{} that are in use",
                        start.0,
                        start.0 + u64::from(len)
                    ),
                ));
            }
        }
        for e in extents {
            self.add_extent(ino, *e)?;
        }
        for (start, len) in gained {
            self.log.space_mut().mark_used(start, len)?;
            self.log.record(Change::DataAlloc { start, len });
        }
        self.free_ranges(ino, &minus(&old, &new))
    }

    fn replay_link(&mut self, at: MetaBlock, dir: InodeNo, ino: InodeNo, kind: FileKind, name: &[u8]) -> Result<()> {
        let name = FileName::new(name).map_err(|_| bad(at, format!("it names inode {ino} with an invalid name")))?;
        let d = self.log.inode(dir).map_err(|_| bad(at, format!("it links inode {ino} into {dir}, not in use")))?;
        if FileKind::from_mode(d.mode) != Some(FileKind::Directory) {
            return Err(bad(at, format!("it links inode {ino} into {dir}, not a directory")));
        }
        let target = self.log.inode(ino).map_err(|_| bad(at, format!("it links inode {ino}, not in use")))?;
        if FileKind::from_mode(target.mode) != Some(kind) {
            return Err(bad(at, format!("it links inode {ino} as another kind")));
        }
        match self.dir_lookup(dir, name.as_bytes())? {
            Some(e) if e.ino == ino => return Ok(()),
            Some(e) => {
                return Err(bad(at, format!("it links inode {ino} under a name inode {} has", e.ino)));
            }
            None => {}
        }
        self.dir_insert(dir, &name, ino, kind)?;
        if kind == FileKind::Directory {
            self.log.inode_mut(dir)?.nlink += 1;
        } else {
            self.log.inode_mut(ino)?.nlink += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minus_keeps_the_blocks_only_the_first_has() {
        assert_eq!(minus(&[(10, 5)], &[(12, 1)]), vec![(DataBlock(10), 2), (DataBlock(13), 2)]);
        assert_eq!(minus(&[(10, 2)], &[(0, 100)]), vec![]);
        assert_eq!(minus(&[(10, 2)], &[]), vec![(DataBlock(10), 2)]);
    }
}
