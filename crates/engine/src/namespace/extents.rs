//! Extent maps: which data-device blocks hold which file blocks.
//!
//! Up to [`MAX_INLINE_EXTENTS`] extents live in the inode; beyond that the map
//! moves to a B-tree keyed by first file block (value: `u64 physical,
//! u32 len, u8 flags`). Every change goes through one primitive,
//! [`Fs::replace_extents`]: read the extents around a range, compute their
//! replacement, write it back.

use super::Fs;
use super::btree;
use crate::error::{Error, Result};
use crate::format::codec::{Reader, Writer};
use crate::format::inode::{Body, EXTENT_UNWRITTEN, Extent, MAX_INLINE_EXTENTS, TreeRoot};
use crate::format::node::TreeKind;
use crate::types::{DataBlock, InodeNo};

/// Bytes of an extent's value in the tree.
pub(super) const EXTENT_VALUE_LEN: usize = 13;

fn encode(e: &Extent) -> Vec<u8> {
    let mut w = Writer::with_capacity(EXTENT_VALUE_LEN);
    w.u64(e.physical.0).u32(e.len).u8(if e.unwritten { EXTENT_UNWRITTEN } else { 0 });
    w.into_inner()
}

pub(super) fn decode(logical: u64, v: &[u8], ino: InodeNo) -> Result<Extent> {
    let bad = || Error::corrupt_meta("extent", 0, format!("malformed extent at file block {logical} of inode {ino}"));
    let mut r = Reader::new(v);
    let physical = DataBlock(r.u64().map_err(|_| bad())?);
    let len = r.u32().map_err(|_| bad())?;
    let flags = r.u8().map_err(|_| bad())?;
    if len == 0 || flags & !EXTENT_UNWRITTEN != 0 || r.remaining() != 0 || logical.checked_add(u64::from(len)).is_none()
    {
        return Err(bad());
    }
    Ok(Extent { logical, physical, len, unwritten: flags & EXTENT_UNWRITTEN != 0 })
}

/// Whether `b` can be appended to `a` as one extent.
fn joins(a: &Extent, b: &Extent) -> bool {
    a.logical_end() == b.logical
        && a.physical.0 + u64::from(a.len) == b.physical.0
        && a.unwritten == b.unwritten
        && u64::from(a.len) + u64::from(b.len) <= u64::from(u32::MAX)
}

/// Sorts and merges neighbours.
fn normalize(mut v: Vec<Extent>) -> Vec<Extent> {
    v.sort_by_key(|e| e.logical);
    let mut out: Vec<Extent> = Vec::with_capacity(v.len());
    for e in v {
        match out.last_mut() {
            Some(last) if joins(last, &e) => last.len += e.len,
            _ => out.push(e),
        }
    }
    out
}

/// The part of `e` inside `[start, end)`, if any.
fn clip(e: &Extent, start: u64, end: u64) -> Option<Extent> {
    let s = e.logical.max(start);
    let t = e.logical_end().min(end);
    (s < t).then(|| Extent {
        logical: s,
        physical: DataBlock(e.physical.0 + (s - e.logical)),
        len: (t - s) as u32,
        unwritten: e.unwritten,
    })
}

/// The file-block ranges whose mapping (data block, unwritten flag)
/// differs between `old` and `new`, merged: a split extent or a piece
/// marked written changes only its own blocks, not the whole extent's.
fn changed_ranges(old: &[Extent], new: &[Extent]) -> Vec<(u64, u64)> {
    let mut cuts: Vec<u64> = old.iter().chain(new).flat_map(|e| [e.logical, e.logical_end()]).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let at = |list: &[Extent], b: u64| {
        list.iter()
            .find(|e| e.logical <= b && b < e.logical_end())
            .map(|e| (e.physical.0 + (b - e.logical), e.unwritten))
    };
    let mut out: Vec<(u64, u64)> = Vec::new();
    for w in cuts.windows(2) {
        // Inside [w[0], w[1]) no extent starts or ends: one look decides.
        if at(old, w[0]) != at(new, w[0]) {
            match out.last_mut() {
                Some(last) if last.1 == w[0] => last.1 = w[1],
                _ => out.push((w[0], w[1])),
            }
        }
    }
    out
}

impl Fs {
    /// The extent covering file block `block`, if any.
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn extent_at(&mut self, ino: InodeNo, block: u64) -> Result<Option<Extent>> {
        match &self.log.inode(ino)?.body {
            Body::Extents(v) => Ok(v.iter().find(|e| e.logical <= block && block < e.logical_end()).copied()),
            Body::Tree(t) => {
                let root = t.root;
                match btree::last_le(&mut self.log.tree(ino), Some(root), block)? {
                    Some((k, v)) => {
                        let e = decode(k, &v, ino)?;
                        Ok((block < e.logical_end()).then_some(e))
                    }
                    None => Ok(None),
                }
            }
            _ => Ok(None),
        }
    }

    /// Extents overlapping `[start, end)`, plus those touching it on either
    /// side (so that replacements can merge with them), in order.
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn extents_around(&mut self, ino: InodeNo, start: u64, end: u64) -> Result<Vec<Extent>> {
        let lo = start.saturating_sub(1);
        match &self.log.inode(ino)?.body {
            Body::Extents(v) => Ok(v.iter().filter(|e| e.logical_end() > lo && e.logical <= end).copied().collect()),
            Body::Tree(t) => {
                let root = Some(t.root);
                let mut out = Vec::new();
                if let Some((k, v)) = btree::last_le(&mut self.log.tree(ino), root, lo)? {
                    let e = decode(k, &v, ino)?;
                    if e.logical_end() > lo {
                        out.push(e);
                    }
                }
                let mut bad = None;
                btree::scan(&mut self.log.tree(ino), root, lo, &mut |k, v| {
                    if k > end {
                        return false;
                    }
                    match decode(k, v, ino) {
                        Ok(e) => {
                            if out.last().is_none_or(|l: &Extent| l.logical < e.logical) {
                                out.push(e);
                            }
                            true
                        }
                        Err(e) => {
                            bad = Some(e);
                            false
                        }
                    }
                })?;
                bad.map_or(Ok(out), Err)
            }
            _ => Ok(Vec::new()),
        }
    }

    /// The first extent ending after `block` (for SEEK_DATA and hole sizes).
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn next_extent(&mut self, ino: InodeNo, block: u64) -> Result<Option<Extent>> {
        if let Some(e) = self.extent_at(ino, block)? {
            return Ok(Some(e));
        }
        match &self.log.inode(ino)?.body {
            Body::Extents(v) => Ok(v.iter().find(|e| e.logical > block).copied()),
            Body::Tree(t) => {
                let root = Some(t.root);
                let mut found = None;
                btree::scan(&mut self.log.tree(ino), root, block, &mut |k, v| {
                    found = Some((k, v.to_vec()));
                    false
                })?;
                found.map(|(k, v)| decode(k, &v, ino)).transpose()
            }
            _ => Ok(None),
        }
    }

    /// Replaces the extents `old` (as returned by [`Fs::extents_around`])
    /// with `new`, merging neighbours, moving between inline and tree form.
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn replace_extents(&mut self, ino: InodeNo, old: &[Extent], new: Vec<Extent>) -> Result<()> {
        // Every change of a block map passes here: an fsync record carries
        // the ranges whose mapping it changed (`namespace::intents`).
        for (s, t) in changed_ranges(old, &new) {
            self.intents.remapped(ino, s, t);
        }
        let new = normalize(new);
        let body = self.log.inode(ino)?.body.clone();
        match body {
            Body::Empty | Body::Extents(_) => {
                let mut all: Vec<Extent> = match body {
                    Body::Extents(v) => v,
                    _ => Vec::new(),
                };
                all.retain(|e| !old.iter().any(|o| o.logical == e.logical));
                all.extend(new);
                let all = normalize(all);
                if all.len() <= MAX_INLINE_EXTENTS {
                    self.log.inode_mut(ino)?.body = if all.is_empty() { Body::Empty } else { Body::Extents(all) };
                    return Ok(());
                }
                // Outgrew the inode: move the whole map into a tree.
                let mut root = None;
                for e in &all {
                    root =
                        Some(btree::insert(&mut self.log.tree(ino), root, TreeKind::Extents, e.logical, encode(e))?.0);
                }
                let root = root.ok_or(Error::Invalid("empty extent tree"))?;
                self.log.inode_mut(ino)?.body = Body::Tree(TreeRoot { root, count: all.len() as u64 });
                Ok(())
            }
            Body::Tree(t) => {
                let mut root = Some(t.root);
                let mut count = t.count;
                for o in old {
                    let (r, prev) = btree::remove(&mut self.log.tree(ino), root, o.logical)?;
                    root = r;
                    if prev.is_some() {
                        count -= 1;
                    }
                }
                for e in &new {
                    let (r, prev) =
                        btree::insert(&mut self.log.tree(ino), root, TreeKind::Extents, e.logical, encode(e))?;
                    root = Some(r);
                    if prev.is_none() {
                        count += 1;
                    }
                }
                self.log.inode_mut(ino)?.body = match root {
                    Some(root) => Body::Tree(TreeRoot { root, count }),
                    None => Body::Empty,
                };
                Ok(())
            }
            Body::Inline(_) | Body::Blob { .. } | Body::Entries(_) => {
                Err(Error::corrupt_meta("inode", 0, format!("inode {ino} has no extent map")))
            }
        }
    }

    /// Maps `[e.logical, e.logical_end())`, which must be unmapped.
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn add_extent(&mut self, ino: InodeNo, e: Extent) -> Result<()> {
        let around = self.extents_around(ino, e.logical, e.logical_end())?;
        debug_assert!(
            around.iter().all(|a| clip(a, e.logical, e.logical_end()).is_none()),
            "{e:?} overlaps {around:?}"
        );
        let mut new = around.clone();
        new.push(e);
        self.replace_extents(ino, &around, new)
    }

    /// Unmaps file blocks `[start, end)`, visiting at most `max` extents;
    /// returns the freed data ranges and whether the whole range is done.
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn unmap_range(
        &mut self,
        ino: InodeNo,
        start: u64,
        end: u64,
        max: usize,
    ) -> Result<(Vec<(DataBlock, u32)>, bool)> {
        let around = self.extents_around(ino, start, end)?;
        let overlapping: Vec<Extent> = around.iter().filter(|e| clip(e, start, end).is_some()).copied().collect();
        let done = overlapping.len() <= max;
        let take: Vec<Extent> = overlapping.into_iter().take(max).collect();
        let mut freed = Vec::new();
        let mut keep = Vec::new();
        for e in &take {
            if let Some(c) = clip(e, start, end) {
                freed.push((c.physical, c.len));
            }
            if let Some(before) = clip(e, 0, start) {
                keep.push(before);
            }
            if let Some(after) = clip(e, end, u64::MAX) {
                keep.push(after);
            }
        }
        if !take.is_empty() {
            self.replace_extents(ino, &take, keep)?;
        }
        Ok((freed, done))
    }

    /// Moves every extent from file block `from` on by `delta` blocks, an
    /// extent crossing `from` cut there first (a collapse or an insert).
    /// The blocks moved onto hold no extent: a collapse unmapped them, an
    /// insert moves up. A map in a tree is rewritten key by key, without
    /// [`Fs::replace_extents`]' comparison of the two lists (quadratic),
    /// and the whole moved range is noted as remapped for fsync records.
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn shift_extents(&mut self, ino: InodeNo, from: u64, delta: i64) -> Result<()> {
        let tail: Vec<Extent> =
            self.extents_around(ino, from, u64::MAX)?.into_iter().filter(|e| e.logical_end() > from).collect();
        if tail.is_empty() {
            return Ok(());
        }
        let mut new = Vec::with_capacity(tail.len() + 1);
        for e in &tail {
            new.extend(clip(e, 0, from));
            if let Some(after) = clip(e, from, u64::MAX) {
                let logical = after.logical.checked_add_signed(delta).ok_or(Error::FileTooBig)?;
                new.push(Extent { logical, ..after });
            }
        }
        let lowest = from.checked_add_signed(delta.min(0)).unwrap_or(0);
        debug_assert!(
            delta > 0 || self.extents_around(ino, lowest, from)?.iter().all(|e| clip(e, lowest, from).is_none()),
            "extents of inode {ino} in the way of a shift"
        );
        // One range from the lowest block moved onto: a block moving between
        // two ranges of a record would be gained by one while the other still
        // maps it, which replay refuses.
        self.intents.remapped(ino, lowest, u64::MAX);
        let Body::Tree(t) = self.log.inode(ino)?.body.clone() else {
            return self.replace_extents(ino, &tail, new);
        };
        let (mut root, mut count) = (Some(t.root), t.count);
        for o in &tail {
            let (r, prev) = btree::remove(&mut self.log.tree(ino), root, o.logical)?;
            root = r;
            count -= u64::from(prev.is_some());
        }
        for e in &new {
            let (r, prev) = btree::insert(&mut self.log.tree(ino), root, TreeKind::Extents, e.logical, encode(e))?;
            root = Some(r);
            count += u64::from(prev.is_none());
        }
        self.log.inode_mut(ino)?.body = match root {
            Some(root) => Body::Tree(TreeRoot { root, count }),
            None => Body::Empty,
        };
        Ok(())
    }

    /// Marks `[start, end)` as written wherever it is allocated unwritten.
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn mark_written(&mut self, ino: InodeNo, start: u64, end: u64) -> Result<()> {
        let around = self.extents_around(ino, start, end)?;
        if !around.iter().any(|e| e.unwritten && clip(e, start, end).is_some()) {
            return Ok(());
        }
        let mut new = Vec::new();
        for e in &around {
            for part in [clip(e, 0, start), clip(e, start, end), clip(e, end, u64::MAX)].into_iter().flatten() {
                let inside = part.logical >= start && part.logical_end() <= end;
                new.push(Extent { unwritten: part.unwritten && !inside, ..part });
            }
        }
        self.replace_extents(ino, &around, new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(l: u64, p: u64, n: u32) -> Extent {
        Extent { logical: l, physical: DataBlock(p), len: n, unwritten: false }
    }

    #[test]
    fn normalize_merges_contiguous_runs_only() {
        let v = normalize(vec![e(10, 110, 5), e(0, 100, 10), e(15, 200, 1)]);
        assert_eq!(v, vec![e(0, 100, 15), e(15, 200, 1)]);
    }

    #[test]
    fn only_the_blocks_whose_mapping_changed_are_a_changed_range() {
        let whole = Extent { unwritten: true, ..e(0, 100, 50) };
        let written = vec![
            Extent { unwritten: true, ..e(0, 100, 10) },
            e(10, 110, 2),
            Extent { unwritten: true, ..e(12, 112, 38) },
        ];
        assert_eq!(changed_ranges(&[whole], &written), vec![(10, 12)]);
        assert_eq!(changed_ranges(&[e(0, 100, 4)], &[e(0, 100, 2), e(2, 300, 2)]), vec![(2, 4)]);
        assert_eq!(changed_ranges(&[e(0, 100, 4)], &[]), vec![(0, 4)]);
        assert_eq!(changed_ranges(&[], &[e(7, 9, 1)]), vec![(7, 8)]);
    }

    #[test]
    fn clip_keeps_physical_offsets() {
        assert_eq!(clip(&e(10, 100, 10), 12, 15), Some(e(12, 102, 3)));
        assert_eq!(clip(&e(10, 100, 10), 20, 30), None);
    }
}
