//! Discarding free data blocks: `-o discard` and trims (FITRIM, `dualfs
//! trim`).
//!
//! A block may be discarded only when the allocator could hand it out:
//! the commit group that freed it is durable (so no crash shows it mapped
//! again), no snapshot or kept tree holds it, and it lies inside the data
//! space. A discard is then no more than the overwrite the allocator
//! already allows. While it is queued or under way the block stays free
//! in the bitmap, so that a checkpoint writes the truth, but it is *busy*:
//! never handed out until the discard returned, so that a discard never
//! lands after a new owner's write (DESIGN.md, "Discard").

use std::collections::{BTreeMap, HashMap};

use super::DataSpace;
use crate::error::Result;
use crate::faults::{self, Fault};
use crate::types::{DataBlock, GroupNo};

/// A range on its way to the device: `busy` when its blocks are kept from
/// the allocator meanwhile (always, but for the broken rule that discards
/// blocks still in use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Discard {
    /// First block.
    pub start: u64,
    /// Blocks.
    pub len: u32,
    busy: bool,
}

/// The discard state of a data space.
#[derive(Clone, Debug, Default)]
pub(super) struct Discards {
    /// `-o discard`: blocks released go to `queue`.
    on: bool,
    /// Free blocks queued or being discarded, one bit per block by
    /// bitmap word: never handed out meanwhile.
    busy: BTreeMap<usize, u64>,
    busy_blocks: u64,
    /// Released ranges waiting for the background discard.
    queue: Vec<Discard>,
    /// Groups whose free blocks a trim discarded, and nothing freed there
    /// since, with the least run it discarded (a second trim skips them,
    /// as ext4's does).
    trimmed: HashMap<u32, u64>,
}

impl DataSpace {
    /// Turns continuous discard (`-o discard`) on or off.
    pub fn set_discard(&mut self, on: bool) {
        self.discards.on = on;
    }

    pub(super) fn busy_word(&self, w: usize) -> u64 {
        self.discards.busy.get(&w).copied().unwrap_or(0)
    }

    /// Whether block `b` is being discarded (free, not to be handed out).
    #[must_use]
    pub fn is_busy(&self, b: u64) -> bool {
        self.busy_word((b / 64) as usize) >> (b % 64) & 1 != 0
    }

    /// Free blocks being discarded.
    #[must_use]
    pub fn busy_blocks(&self) -> u64 {
        self.discards.busy_blocks
    }

    fn set_busy(&mut self, start: u64, len: u64, busy: bool) {
        for b in start..start + len {
            let w = (b / 64) as usize;
            let bit = 1u64 << (b % 64);
            let word = self.discards.busy.entry(w).or_default();
            assert_eq!(*word & bit != 0, !busy, "data block {b} made busy twice or freed from busy twice");
            *word ^= bit;
            if *word == 0 {
                self.discards.busy.remove(&w);
            }
        }
        if busy {
            self.discards.busy_blocks += len;
        } else {
            self.discards.busy_blocks -= len;
        }
    }

    /// A released range (its free durable, the blocks free in the bitmap
    /// now): its groups are no longer trimmed, and with `-o discard` the
    /// blocks no snapshot holds are queued, busy until discarded.
    pub(super) fn released(&mut self, start: DataBlock, len: u32) {
        let end = start.0 + u64::from(len);
        let (g0, g1) = (self.group_of(start).0, self.group_of(DataBlock(end - 1)).0);
        for g in g0..=g1 {
            self.discards.trimmed.remove(&g);
        }
        if !self.discards.on {
            return;
        }
        let broken = faults::active(Fault::DiscardHeld);
        let mut b = start.0;
        while b < end {
            if self.is_held(b) && !broken {
                b += 1;
                continue;
            }
            let run_start = b;
            while b < end && (broken || !self.is_held(b)) {
                b += 1;
            }
            let n = b - run_start;
            // The broken rule may discard held blocks: those are not free
            // to make busy, so they go unguarded.
            let busy = !broken;
            if busy {
                self.set_busy(run_start, n, true);
            }
            self.discards.queue.push(Discard { start: run_start, len: n as u32, busy });
        }
    }

    /// A deleted snapshot's `bitmap` is held no longer (the caller set the
    /// held set without it, once no checkpoint a mount may start from
    /// lists it): with `-o discard` its blocks now free, held by nothing
    /// else and not being discarded are queued, busy until discarded.
    /// Blocks of it still in use, or whose free is not durable yet, are
    /// queued by their release, as any free.
    pub fn let_go(&mut self, bitmap: &[u64]) {
        if !self.discards.on {
            return;
        }
        let mut run: Option<(u64, u64)> = None;
        let mut runs = Vec::new();
        for (w, &word) in bitmap.iter().enumerate().take(self.bitmap.len()) {
            let mut m = word & !self.bitmap.get(w) & !self.held_word(w) & !self.busy_word(w);
            while m != 0 {
                let b = w as u64 * 64 + u64::from(m.trailing_zeros());
                m &= m - 1;
                if b >= self.total || self.is_held(b) {
                    continue;
                }
                match &mut run {
                    Some((s, n)) if *s + *n == b && *n < u64::from(super::MAX_EXTENT_BLOCKS) => *n += 1,
                    _ => runs.extend(run.replace((b, 1))),
                }
            }
        }
        runs.extend(run);
        for (start, n) in runs {
            self.set_busy(start, n, true);
            self.discards.queue.push(Discard { start, len: n as u32, busy: true });
        }
    }

    /// The broken rule [`Fault::DiscardBeforeDurable`]: a range just
    /// freed, still in use until its free is durable, queued at once.
    pub(super) fn discard_at_free(&mut self, start: DataBlock, len: u32) {
        if self.discards.on && faults::active(Fault::DiscardBeforeDurable) {
            self.discards.queue.push(Discard { start: start.0, len, busy: false });
        }
    }

    /// Every group may hold free blocks no trim discarded.
    pub(super) fn forget_trimmed(&mut self) {
        self.discards.trimmed.clear();
    }

    /// Takes the queued ranges to discard (they stay busy until
    /// [`DataSpace::discarded`]).
    pub fn take_discards(&mut self) -> Vec<Discard> {
        std::mem::take(&mut self.discards.queue)
    }

    /// Whether ranges wait for the background discard.
    #[must_use]
    pub fn discards_queued(&self) -> bool {
        !self.discards.queue.is_empty()
    }

    /// The ranges taken were discarded (or given up): their blocks may be
    /// handed out again.
    pub fn discarded(&mut self, done: &[Discard]) {
        for d in done {
            if d.busy {
                self.set_busy(d.start, u64::from(d.len), false);
            }
        }
    }

    /// The free runs of group `g` inside `[from, to)` of at least `min`
    /// blocks that may be discarded now (free, held by no snapshot, past
    /// no shrink's end, not being discarded already), made busy: the
    /// caller discards them and gives them back ([`DataSpace::discarded`]).
    /// Nothing when the group was trimmed since its last free with a run
    /// no longer than `min`.
    ///
    /// # Errors
    /// The group's bitmap cannot be read.
    pub fn trim_group(&mut self, g: GroupNo, from: u64, to: u64, min: u64) -> Result<Vec<Discard>> {
        let (gs, ge) = self.group_range(g);
        let (from, to) = (from.max(gs), to.min(ge));
        let whole = from == gs && to == ge;
        if from >= to || (whole && self.discards.trimmed.get(&g.0).is_some_and(|&m| m <= min)) {
            return Ok(Vec::new());
        }
        self.load_group(g)?;
        let mut runs = Vec::new();
        let mut b = from;
        let usable = |s: &DataSpace, b: u64| !s.bit(b) && !s.is_held(b) && !s.is_busy(b);
        while b < to {
            // Whole words in use (or held) are skipped at once.
            let w = (b / 64) as usize;
            if b % 64 == 0 && (self.bitmap.get(w) | self.held_word(w) | self.busy_word(w)) == !0 {
                b += 64;
                continue;
            }
            if !usable(self, b) {
                b += 1;
                continue;
            }
            let s = b;
            while b < to && b - s < u64::from(super::MAX_EXTENT_BLOCKS) && usable(self, b) {
                b += 1;
            }
            if b - s >= min.max(1) {
                runs.push(Discard { start: s, len: (b - s) as u32, busy: true });
            }
        }
        for r in &runs {
            self.set_busy(r.start, u64::from(r.len), true);
        }
        if whole {
            self.discards.trimmed.insert(g.0, min);
        }
        Ok(runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space_with_frees() -> (DataSpace, DataBlock) {
        let mut s = DataSpace::new(1000, 256, false);
        s.set_discard(true);
        s.reserve(100).unwrap();
        let (a, n) = s.allocate(DataBlock(1), 100).unwrap().unwrap();
        assert_eq!(n, 100);
        s.free_deferred(DataBlock(a.0 + 10), 20).unwrap();
        (s, a)
    }

    #[test]
    fn a_free_is_queued_for_discard_only_once_durable_and_stays_busy_until_discarded() {
        let (mut s, a) = space_with_frees();
        assert!(s.take_discards().is_empty(), "queued before its group was sealed");
        s.seal_frees(crate::types::Seq(3));
        s.release(crate::types::Seq(2));
        assert!(s.take_discards().is_empty(), "queued before its group was durable");
        let before = s.available();
        s.release(crate::types::Seq(3));
        let d = s.take_discards();
        assert_eq!(d, vec![Discard { start: a.0 + 10, len: 20, busy: true }]);
        assert_eq!(s.available(), before, "busy blocks are not available");
        s.reserve(s.available()).unwrap();
        while let Some((b, n)) = s.allocate(DataBlock(0), 1000).unwrap() {
            assert!(b.0 + u64::from(n) <= a.0 + 10 || b.0 >= a.0 + 30, "busy block handed out at {b:?}+{n}");
        }
        s.discarded(&d);
        assert_eq!(s.available(), 20);
        s.reserve(20).unwrap();
        assert_eq!(s.allocate(DataBlock(0), 20).unwrap(), Some((DataBlock(a.0 + 10), 20)));
    }

    #[test]
    fn blocks_a_snapshot_holds_are_never_queued() {
        let (mut s, a) = space_with_frees();
        let mut held = vec![0u64; s.bitmap.len()];
        for b in a.0 + 15..a.0 + 20 {
            held[(b / 64) as usize] |= 1 << (b % 64);
        }
        s.set_held(held);
        s.seal_frees(crate::types::Seq(1));
        s.release(crate::types::Seq(1));
        let d: Vec<(u64, u32)> = s.take_discards().iter().map(|d| (d.start, d.len)).collect();
        assert_eq!(d, vec![(a.0 + 10, 5), (a.0 + 20, 10)]);
    }

    #[test]
    fn a_deleted_snapshots_blocks_let_go_are_queued_when_free_and_held_by_no_other() {
        let (mut s, a) = space_with_frees();
        let mut deleted = vec![0u64; s.bitmap.len()];
        let mut other = vec![0u64; s.bitmap.len()];
        // The deleted snapshot held blocks a+5..a+40: in use (a+5..a+10,
        // a+30..a+40), freed (a+10..a+30, its free still pending until
        // sealed) and free (a+100..a+104, never allocated).
        for b in (a.0 + 5..a.0 + 40).chain(a.0 + 100..a.0 + 104) {
            deleted[(b / 64) as usize] |= 1 << (b % 64);
        }
        let b = a.0 + 101;
        other[(b / 64) as usize] |= 1 << (b % 64);
        s.set_held(other);
        s.let_go(&deleted);
        let d: Vec<(u64, u32)> = s.take_discards().iter().map(|d| (d.start, d.len)).collect();
        assert_eq!(d, vec![(a.0 + 100, 1), (a.0 + 102, 2)], "only free blocks no other snapshot holds");
        assert!(s.is_busy(a.0 + 100) && !s.is_busy(a.0 + 101));
        // The pending free is queued by its release, as any.
        s.seal_frees(crate::types::Seq(1));
        s.release(crate::types::Seq(1));
        let d: Vec<(u64, u32)> = s.take_discards().iter().map(|d| (d.start, d.len)).collect();
        assert_eq!(d, vec![(a.0 + 10, 20)]);
    }

    #[test]
    fn a_trim_takes_free_runs_once_and_again_after_a_free() {
        let mut s = DataSpace::new(1024, 256, false);
        s.reserve(300).unwrap();
        let (a, _) = s.allocate(DataBlock(1), 300).unwrap().unwrap();
        // Group 0 is full but block 0; group 1 holds 44 used blocks.
        let runs = s.trim_group(GroupNo(1), 0, u64::MAX, 1).unwrap();
        assert_eq!(runs.iter().map(|r| (r.start, r.len)).collect::<Vec<_>>(), vec![(301, 211)]);
        s.discarded(&runs);
        assert!(s.trim_group(GroupNo(1), 0, u64::MAX, 1).unwrap().is_empty(), "trimmed, nothing freed since");
        assert!(s.trim_group(GroupNo(0), 0, u64::MAX, 1).unwrap().is_empty(), "nothing free");
        s.free_deferred(DataBlock(a.0 + 260), 4).unwrap();
        s.seal_frees(crate::types::Seq(1));
        s.release(crate::types::Seq(1));
        let runs = s.trim_group(GroupNo(1), 0, u64::MAX, 1).unwrap();
        assert_eq!(runs.iter().map(|r| (r.start, r.len)).collect::<Vec<_>>(), vec![(261, 4), (301, 211)]);
        s.discarded(&runs);
        let runs = s.trim_group(GroupNo(1), 0, u64::MAX, 100).unwrap();
        assert!(runs.is_empty(), "trimmed with shorter runs already");
        let runs = s.trim_group(GroupNo(2), 600, 700, 50).unwrap();
        assert_eq!(runs.iter().map(|r| (r.start, r.len)).collect::<Vec<_>>(), vec![(600, 100)]);
    }
}
