//! The segment usage table, read a block at a time.
//!
//! On a volume with a sparse IFile a mount reads no block of it: an entry
//! is read when first needed (the log picking a segment, the cleaner), and
//! a change to one whose block is on disk waits as a delta, applied when
//! the block comes in (at the latest when the next checkpoint writes it).
//! Only segments that held something get such a delta (a live object
//! leaves it, an IFile block is rewritten): the segments the log writes
//! into are read when picked. Two sums are kept over every segment, so
//! that nothing has to walk the table: how many hold nothing (*vacant*:
//! no live byte, no IFile block counted) and the live bytes in all.

use std::collections::BTreeMap;

use super::IFile;
use crate::error::{Error, Result};
use crate::format::ifile::SegUsage;
use crate::table::TableSource;
use crate::types::{BLOCK_BYTES, SegmentNo, Seq};

/// A change to a segment's entry whose block is not at hand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SegDelta {
    live: i64,
    ifile: i64,
    seq: Seq,
}

/// When segments came to hold nothing, for discarding them: a segment
/// emptied may still be read by the checkpoints sealed before it was
/// (their maps point into it), so it is discarded only once the two
/// newest checkpoints were sealed after it ([`crate::meta_log`], "Discard").
#[derive(Clone, Debug, Default)]
pub(crate) struct Emptied {
    /// Segments holding nothing, with the first checkpoint sealed after
    /// they came to (0: not tagged yet). A segment empty since the volume
    /// was opened is not listed.
    pub(crate) since: BTreeMap<u32, u64>,
    /// Segments that came to hold nothing since the last tagging.
    pub(crate) untagged: Vec<u32>,
    /// Segments discarded and not written since.
    pub(crate) discarded: std::collections::BTreeSet<u32>,
}

impl Emptied {
    fn changed(&mut self, s: SegmentNo, before: bool, after: bool) {
        match (before, after) {
            (false, true) => {
                self.since.insert(s.0, 0);
                self.untagged.push(s.0);
            }
            (true, false) => {
                self.since.remove(&s.0);
            }
            _ => {}
        }
    }

    /// Tags the segments emptied since the last call with checkpoint `n`
    /// (the first one to be sealed after them).
    pub(crate) fn tag(&mut self, n: u64) {
        for s in self.untagged.drain(..) {
            if let Some(t) = self.since.get_mut(&s)
                && *t == 0
            {
                *t = n;
            }
        }
    }
}

/// Whether an entry holds nothing the volume needs.
fn vacant(u: &SegUsage) -> bool {
    u.live_bytes == 0 && u.ifile_blocks == 0
}

/// What an entry adds to the live bytes in all.
fn weight(u: &SegUsage) -> u64 {
    u64::from(u.live_bytes) + u64::from(u.ifile_blocks) * BLOCK_BYTES
}

impl IFile {
    /// The usage block holding segment `s`'s entry.
    #[must_use]
    pub fn usage_block_of(&self, s: SegmentNo) -> u32 {
        (s.0 as usize / self.segments.per_block()) as u32
    }

    /// The usage entry of `s`, if it is at hand: its block in memory or
    /// never written, and no change waiting for it.
    #[must_use]
    pub fn segment_known(&self, s: SegmentNo) -> Option<SegUsage> {
        (self.segments.is_loaded(self.usage_block_of(s)) && !self.seg_pending.contains_key(&s.0))
            .then(|| self.segments.get(s.0 as usize))
    }

    /// The usage entry of `seg`.
    ///
    /// # Panics
    /// Its block is on disk and not read ([`IFile::load_usage_block`]).
    #[must_use]
    pub fn segment(&self, seg: SegmentNo) -> SegUsage {
        assert!(!self.seg_pending.contains_key(&seg.0), "segment {} read with a change waiting for it", seg.0);
        self.segments.get(seg.0 as usize)
    }

    /// Segments in use holding nothing: no live byte, no IFile block
    /// counted in their entry.
    #[must_use]
    pub fn vacant_segments(&self) -> u64 {
        self.vacant
    }

    /// Live bytes of all segments, 4096 for each IFile block counted in
    /// the table.
    #[must_use]
    pub fn live_total(&self) -> u64 {
        self.live_total
    }

    /// Usage blocks with a change waiting for them.
    #[must_use]
    pub fn usage_blocks_waiting(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.seg_pending.keys().map(|&s| self.usage_block_of(SegmentNo(s))).collect();
        v.dedup();
        v
    }

    /// Reads usage block `b` through `source` if it is not at hand, then
    /// applies the changes waiting for its entries. A block read must show
    /// no write at or after `before` (the durable checkpoint's log
    /// position): it holds what that checkpoint wrote.
    ///
    /// # Errors
    /// It cannot be read or does not decode, or an entry is newer than it
    /// can be.
    pub fn load_usage_block(&mut self, b: u32, source: &dyn TableSource, before: Seq) -> Result<()> {
        if !self.segments.is_loaded(b) {
            let c = b / crate::table::CHUNK_BLOCKS as u32;
            self.segments.load_chunk(c, source)?;
        }
        if !self.segments.is_loaded(b) {
            let at = self.segments.address(b);
            let payload = source.read_block(self.segments.id(), b, at)?;
            self.take_usage_block(b, at, &payload, before)?;
        }
        self.apply_waiting(b);
        Ok(())
    }

    /// Takes usage block `b`, read at `at` (its chunk's addresses known),
    /// if it is not in memory: no entry may show a write at or after
    /// `before`. Then applies the changes waiting for its entries.
    ///
    /// # Errors
    /// It does not decode, or an entry is newer than it can be.
    pub fn take_usage_block(&mut self, b: u32, at: crate::types::MetaBlock, payload: &[u8], before: Seq) -> Result<()> {
        if !self.segments.is_in_memory(b) {
            let block = self
                .segments
                .decode_detached(b, payload)
                .map_err(|e| Error::corrupt_meta("segment usage table", at.0, e.0))?;
            let start = b as usize * self.segments.per_block();
            let n = self.segments.per_block().min(self.segments.len() - start);
            if let Some((k, u)) = block[..n].iter().enumerate().find(|(_, u)| u.last_seq >= before) {
                return Err(Error::corrupt_meta(
                    "segment usage table",
                    at.0,
                    format!(
                        "segment {} was last written at sequence {}, not before the checkpoint's {}",
                        start + k,
                        u.last_seq.0,
                        before.0
                    ),
                ));
            }
            self.segments
                .decode_block(b, payload)
                .map_err(|e| Error::corrupt_meta("segment usage table", at.0, e.0))?;
        }
        self.apply_waiting(b);
        Ok(())
    }

    /// Applies the changes waiting for the entries of usage block `b`
    /// (now at hand).
    fn apply_waiting(&mut self, b: u32) {
        let per = self.segments.per_block() as u32;
        let waiting: Vec<(u32, SegDelta)> =
            self.seg_pending.range(b * per..(b + 1) * per).map(|(&s, &d)| (s, d)).collect();
        for (s, d) in waiting {
            self.seg_pending.remove(&s);
            // What the sums counted for the entry stands until now.
            self.change_segment(SegmentNo(s), |u| {
                u.live_bytes = clamp(i64::from(u.live_bytes) + d.live);
                u.ifile_blocks = clamp(i64::from(u.ifile_blocks) + d.ifile);
                u.last_seq = u.last_seq.max(d.seq);
            });
            // The live bytes in all took the delta when it was made.
            self.live_total = self.live_total.wrapping_sub((d.live + d.ifile * BLOCK_BYTES as i64) as u64);
        }
    }

    /// Gives back clean usage blocks (unchanged since the checkpoint last
    /// written, which holds them), sweeping on from where the last sweep
    /// stopped, until at most `keep` are in memory; never a block
    /// `pinned` names. Returns how many went. A block given back is read
    /// again when an entry of it is needed, and a change to one of its
    /// entries meanwhile waits as a delta, as for a block never read.
    pub fn evict_usage_blocks(&mut self, keep: usize, pinned: &[u32]) -> usize {
        let count = self.segments.block_count();
        let mut evicted = 0;
        for _ in 0..count {
            if self.segments.loaded_blocks() <= keep {
                break;
            }
            let b = self.usage_hand % count;
            self.usage_hand = (b + 1) % count;
            if pinned.contains(&(b as u32)) {
                continue;
            }
            if self.segments.is_evictable(b as u32) {
                self.segments.evict(b as u32);
                evicted += 1;
            }
        }
        evicted
    }

    /// Changes segment `s`'s entry, at hand, keeping the sums.
    fn change_segment(&mut self, s: SegmentNo, f: impl FnOnce(&mut SegUsage)) {
        let before = self.segments.get(s.0 as usize);
        let mut after = before;
        f(&mut after);
        if after == before {
            return;
        }
        self.segments.set(s.0 as usize, after);
        self.live_total = self.live_total.wrapping_add(weight(&after)).wrapping_sub(weight(&before));
        match (vacant(&before), vacant(&after)) {
            (true, false) => self.vacant -= 1,
            (false, true) => self.vacant += 1,
            _ => {}
        }
        self.emptied.changed(s, vacant(&before), vacant(&after));
    }

    /// Forgets what segment `s` holds (the broken rule of
    /// `Fault::ShrinkBeforeEmpty` cutting it off anyway).
    pub fn forget_segment(&mut self, s: SegmentNo) {
        self.change_segment(s, |u| {
            u.live_bytes = 0;
            u.ifile_blocks = 0;
        });
    }

    /// Sets segment `s`'s live bytes (a recount), its entry at hand.
    pub(super) fn change_segment_live(&mut self, s: SegmentNo, v: u32) {
        self.change_segment(s, |u| u.live_bytes = v);
    }

    /// Adds `delta` to segment `s`'s entry: at once if its block is at
    /// hand, else when it comes in.
    fn delta(&mut self, s: SegmentNo, live: i64, ifile: i64, seq: Seq) {
        if self.segment_known(s).is_some() {
            // The sums are trusted until checked against the maps; after
            // that every change adds and takes what the maps say, and a
            // wrong sum is a bug (a segment holds at most 65,536 blocks).
            let checked = self.live_checked && self.inodes_complete();
            self.change_segment(s, |u| {
                let l = i64::from(u.live_bytes) + live;
                if checked {
                    assert!(l >= 0, "segment {}: {} live bytes leave, {} were there", s.0, -live, u.live_bytes);
                    assert!(
                        l <= i64::from(u32::MAX),
                        "segment {}: {} live bytes and {live} more overflow",
                        s.0,
                        u.live_bytes
                    );
                }
                u.live_bytes = clamp(l);
                let i = i64::from(u.ifile_blocks) + ifile;
                let broken = crate::faults::active(crate::faults::Fault::UncountedCheckpointBlocks);
                assert!(i >= 0 || broken, "segment {}: {} IFile blocks and {ifile} more", s.0, u.ifile_blocks);
                u.ifile_blocks = clamp(i);
                u.last_seq = u.last_seq.max(seq);
            });
            return;
        }
        let d = self.seg_pending.entry(s.0).or_default();
        d.live += live;
        d.ifile += ifile;
        d.seq = d.seq.max(seq);
        self.live_total = self.live_total.wrapping_add((live + ifile * BLOCK_BYTES as i64) as u64);
    }

    /// Adds `bytes` to what lives in the segment holding `at`.
    pub(super) fn usage_add(&mut self, seg: SegmentNo, bytes: u32) {
        self.delta(seg, i64::from(bytes), 0, Seq(0));
    }

    /// Takes `bytes` from what lives in `seg`.
    pub(super) fn usage_sub(&mut self, seg: SegmentNo, bytes: u32) {
        self.delta(seg, -i64::from(bytes), 0, Seq(0));
    }

    /// Adds `n` (negative: takes) to the IFile blocks counted in `seg`.
    pub fn add_ifile_blocks(&mut self, seg: SegmentNo, n: i64) {
        if n != 0 {
            self.delta(seg, 0, n, Seq(0));
        }
    }

    /// Records that partial segment `seq` was written into `seg`.
    pub fn note_write(&mut self, seg: SegmentNo, seq: Seq) {
        self.emptied.discarded.remove(&seg.0);
        self.delta(seg, 0, 0, seq);
        let newest = self.written_since.entry(seg.0).or_default();
        *newest = (*newest).max(seq);
    }

    /// The durable checkpoint's log position is now `from`: segments
    /// written before it are no longer written since.
    pub fn checkpoint_moved(&mut self, from: Seq) {
        self.written_since.retain(|_, seq| *seq >= from);
    }

    /// Segments written into since the durable checkpoint's log position.
    #[must_use]
    pub fn written_since_checkpoint(&self) -> &BTreeMap<u32, Seq> {
        &self.written_since
    }

    /// Sets the sums a checkpoint recorded (a mount that leaves the table
    /// on disk), or recounts them from the whole table.
    ///
    /// # Panics
    /// Recounting, and a block is on disk.
    pub fn set_usage_sums(&mut self, recorded: Option<(u64, u64)>) {
        let (vacant_n, live) = match recorded {
            Some(sums) => sums,
            None => (0..self.segments.len())
                .map(|s| self.segments.get(s))
                .fold((0, 0), |(v, l), u| (v + u64::from(vacant(&u)), l + weight(&u))),
        };
        self.vacant = vacant_n;
        self.live_total = live;
    }

    /// Whether segment `s` holds nothing as its entry says (false when the
    /// entry is not at hand: it is then counted as the checkpoint wrote it).
    #[must_use]
    pub fn is_vacant(&self, s: SegmentNo) -> Option<bool> {
        self.segment_known(s).map(|u| vacant(&u))
    }

    /// The entries of usage block `b` with `adjust` added to their IFile
    /// blocks (what a checkpoint writes for them), and what that does to
    /// the vacant count and the live bytes in all.
    ///
    /// # Panics
    /// The block is not at hand, or an entry would count fewer than no
    /// IFile block.
    #[must_use]
    pub fn usage_block_adjusted(&self, b: u32, adjust: &BTreeMap<u32, i64>) -> (Vec<u8>, i64, i64) {
        let per = self.segments.per_block() as u32;
        let mut entries = self.segments.block_entries(b).into_owned();
        let (mut dv, mut dl) = (0i64, 0i64);
        for (&s, &n) in adjust.range(b * per..(b + 1) * per) {
            let u = &mut entries[(s - b * per) as usize];
            let before = *u;
            let i = i64::from(u.ifile_blocks) + n;
            // (The broken rule counts blocks nowhere, then takes them off.)
            let broken = crate::faults::active(crate::faults::Fault::UncountedCheckpointBlocks);
            assert!(i >= 0 || broken, "segment {s}: {} IFile blocks and {n} more", u.ifile_blocks);
            u.ifile_blocks = clamp(i);
            dv += i64::from(vacant(u)) - i64::from(vacant(&before));
            dl += (i64::from(u.ifile_blocks) - i64::from(before.ifile_blocks)) * BLOCK_BYTES as i64;
        }
        let mut w = crate::format::codec::Writer::with_capacity(entries.len() * 16);
        for e in &entries {
            e.encode(&mut w);
        }
        (w.into_inner(), dv, dl)
    }

    /// Adds a written checkpoint's `adjust` to the IFile blocks in memory,
    /// whose blocks it wrote so: they stay as clean as they were.
    pub fn apply_written_adjustment(&mut self, adjust: &BTreeMap<u32, i64>) {
        for (&s, &n) in adjust {
            let seg = SegmentNo(s);
            // Sealing read the block and made it dirty; nothing gives a
            // usage block back while a checkpoint is being written.
            let before =
                self.segment_known(seg).unwrap_or_else(|| panic!("segment {s} left memory during a checkpoint"));
            let mut after = before;
            after.ifile_blocks = clamp(i64::from(before.ifile_blocks) + n);
            self.segments.set_quietly(s as usize, after);
            self.live_total = self.live_total.wrapping_add(weight(&after)).wrapping_sub(weight(&before));
            match (vacant(&before), vacant(&after)) {
                (true, false) => self.vacant -= 1,
                (false, true) => self.vacant += 1,
                _ => {}
            }
            self.emptied.changed(seg, vacant(&before), vacant(&after));
        }
    }
}

fn clamp(v: i64) -> u32 {
    v.clamp(0, i64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ifile::TableId;
    use crate::ifile::SegmentGeometry;
    use crate::table::{Fresh, Table};
    use crate::types::MetaBlock;

    /// Block 1 of the usage table on disk: segment 300 holds 8,000 live
    /// bytes and 2 IFile blocks there, every other entry is fresh.
    #[derive(Debug)]
    struct Disk;
    impl TableSource for Disk {
        fn read_block(&self, _: TableId, b: u32, _: MetaBlock) -> Result<Vec<u8>> {
            assert_eq!(b, 1);
            let mut t: Table<SegUsage> = Table::new(TableId::SegmentUsage, 600, Fresh::Default, true);
            t.set(300, SegUsage { live_bytes: 8000, ifile_blocks: 2, last_seq: Seq(5) });
            Ok(t.encode_block(1))
        }
        fn read_index(&self, _: TableId, _: u32, _: MetaBlock) -> Result<Vec<MetaBlock>> {
            Ok(vec![MetaBlock(0), MetaBlock(77)])
        }
    }

    #[test]
    fn a_change_to_an_entry_on_disk_waits_for_its_block_and_the_sums_follow() {
        let g = SegmentGeometry { first_block: 128, blocks: 128, count: 600 };
        let mut f = IFile::for_load(g, true, 1, 1);
        f.segments.set_index_address(0, MetaBlock(70));
        // As the checkpoint recorded: 599 segments hold nothing.
        f.set_usage_sums(Some((599, 8000 + 2 * 4096)));
        assert_eq!(f.segment_known(SegmentNo(300)), None);
        // An inode of 4,000 bytes leaves segment 300, an IFile block too.
        f.usage_sub(SegmentNo(300), 4000);
        f.add_ifile_blocks(SegmentNo(300), -1);
        f.note_write(SegmentNo(301), Seq(9));
        assert_eq!(f.usage_blocks_waiting(), vec![1]);
        assert_eq!(f.live_total(), 4000 + 4096, "the sum takes the change at once");
        assert_eq!(f.vacant_segments(), 599, "the entries' vacancy waits for them");
        f.load_usage_block(1, &Disk, Seq(6)).unwrap();
        assert_eq!(f.segment(SegmentNo(300)), SegUsage { live_bytes: 4000, ifile_blocks: 1, last_seq: Seq(5) });
        assert_eq!(f.segment(SegmentNo(301)).last_seq, Seq(9));
        assert_eq!(f.live_total(), 4000 + 4096);
        assert!(f.usage_blocks_waiting().is_empty());
        // The last of it leaves: the segment holds nothing now.
        f.usage_sub(SegmentNo(300), 4000);
        f.add_ifile_blocks(SegmentNo(300), -1);
        assert_eq!((f.vacant_segments(), f.live_total()), (600, 0));
        // A block written after the checkpoint it belongs to is damage.
        let mut f = IFile::for_load(g, true, 1, 1);
        f.segments.set_index_address(0, MetaBlock(70));
        assert!(f.load_usage_block(1, &Disk, Seq(5)).is_err(), "segment 300 was written at sequence 5");
    }

    #[test]
    fn a_clean_usage_block_given_back_is_read_again_and_a_change_meanwhile_waits() {
        let g = SegmentGeometry { first_block: 128, blocks: 128, count: 600 };
        let mut f = IFile::for_load(g, true, 1, 1);
        f.segments.set_index_address(0, MetaBlock(70));
        f.set_usage_sums(Some((599, 8000 + 2 * 4096)));
        f.load_usage_block(1, &Disk, Seq(6)).unwrap();
        assert_eq!(f.segments.loaded_blocks(), 1);
        // Pinned, it stays; not pinned and clean, it goes.
        assert_eq!(f.evict_usage_blocks(0, &[1]), 0);
        assert_eq!(f.evict_usage_blocks(0, &[]), 1);
        assert_eq!((f.segments.loaded_blocks(), f.segment_known(SegmentNo(300))), (0, None));
        // A change meanwhile waits for the block, the sums take it at once.
        f.usage_sub(SegmentNo(300), 3000);
        assert_eq!(f.live_total(), 5000 + 2 * 4096);
        f.load_usage_block(1, &Disk, Seq(6)).unwrap();
        assert_eq!(f.segment(SegmentNo(300)), SegUsage { live_bytes: 5000, ifile_blocks: 2, last_seq: Seq(5) });
        // Changed since the checkpoint, it stays whatever the budget.
        assert_eq!(f.evict_usage_blocks(0, &[]), 0, "a dirty usage block was given back");
        assert_eq!(f.segments.loaded_blocks(), 1);
    }
}
