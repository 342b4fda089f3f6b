//! Shrinking the data space: a limit past which nothing is handed out
//! while the data mover empties the groups there, then the cut of the
//! tables that the next checkpoint commits (DESIGN.md, "Resize").

use super::DataSpace;
use crate::error::Result;
use crate::table::Fresh;
use crate::types::{DataBlock, GroupNo};

impl DataSpace {
    /// Stops handing out blocks at or past `n` (a shrink under way), or
    /// lets it again (`None`). Blocks there count as held: free ones are
    /// not available, and write-back moves written ones elsewhere
    /// ([`DataSpace::is_held`]). The groups past `n` are read first.
    ///
    /// # Panics
    /// More is reserved than stays available: the caller checks
    /// ([`DataSpace::free_below`]) first.
    ///
    /// # Errors
    /// A group's bitmap cannot be loaded.
    pub fn limit_blocks(&mut self, n: Option<u64>) -> Result<()> {
        if let Some(n) = n {
            self.load_from(n)?;
        }
        self.hold_whole()?;
        self.limit = n.unwrap_or(u64::MAX);
        self.held_only = self.count_held_only();
        // Asserts that the reservations still fit.
        let _ = self.available();
        Ok(())
    }

    /// The limit a shrink set, if one is under way.
    #[must_use]
    pub fn limit(&self) -> Option<u64> {
        (self.limit != u64::MAX).then_some(self.limit)
    }

    /// Whether block `b` lies past a shrink's new end (a block there is
    /// never written in place, whatever a fault says of snapshots).
    #[must_use]
    pub fn past_limit(&self, b: u64) -> bool {
        b >= self.limit
    }

    /// Group `g`, or, when it lies past a shrink's end, a group below it
    /// (the same one for every inode of `g`): what a file created in a
    /// directory of `g`, or found there by the mover, is bound to.
    #[must_use]
    pub fn usable_group(&self, g: GroupNo) -> GroupNo {
        let below = self.limit.div_ceil(u64::from(self.group_blocks)).max(1);
        if u64::from(g.0) < below { g } else { GroupNo((u64::from(g.0) % below) as u32) }
    }

    /// Blocks at or past `n` in use in the bitmap (mapped, or freed and
    /// not yet durably so).
    ///
    /// # Errors
    /// A group's bitmap cannot be loaded.
    pub fn used_from(&mut self, n: u64) -> Result<u64> {
        if n >= self.total {
            return Ok(0);
        }
        self.load_from(n)?;
        Ok(self.total - n - self.count_free(n, self.total))
    }

    /// Blocks available (free, not reserved, not held) below `n`.
    ///
    /// # Errors
    /// A group's bitmap cannot be loaded.
    pub fn free_below(&mut self, n: u64) -> Result<u64> {
        if n >= self.total {
            return Ok(self.available());
        }
        self.load_from(n)?;
        let free_past = self.count_free(n, self.total);
        let held_past = if self.limit <= n {
            free_past
        } else {
            (n..self.total).filter(|&b| !self.bit(b) && self.is_held(b)).count() as u64
        };
        Ok(self.available().saturating_sub(free_past - held_past))
    }

    /// Cuts the space to its first `n` blocks, all of which past `n` are
    /// free (a shrink's commit point is the checkpoint after this): the
    /// bitmap and group table end at `n`, the last group may be partial.
    /// `force` cuts whatever is in use there: the deliberately broken rule
    /// of `Fault::ShrinkBeforeEmpty` for the data device.
    ///
    /// # Panics
    /// A block past `n` in use without `force`, or `n` not below the size.
    ///
    /// # Errors
    /// A group's bitmap cannot be loaded.
    pub fn shrink(&mut self, n: u64, force: bool) -> Result<()> {
        assert!(n > 0 && n <= self.total, "shrinking {} data blocks to {n}", self.total);
        self.load_all()?;
        self.settle();
        if force {
            self.pending.retain(|&(_, s, _)| s.0 < n);
            self.pending_ranges.retain(|&s, _| s < n);
            self.pending_blocks = self.pending.iter().map(|p| u64::from(p.2)).sum();
        } else {
            assert_eq!(self.count_free(n, self.total), self.total - n, "data blocks past {n} still in use");
        }
        assert!(
            self.pending_ranges.range(n..).next().is_none(),
            "a pending free past the new end {n} of the data space"
        );
        let words = n.div_ceil(64) as usize;
        self.bitmap.set_fresh(Fresh::Bitmap { total: n });
        self.groups.set_fresh(Fresh::Groups { total: n, group_blocks: self.group_blocks });
        self.bitmap.truncate(words);
        // Bits past the end of the device are permanently "in use".
        let tail = n % 64;
        if tail != 0 {
            self.bitmap.update(words - 1, |w| *w |= !0u64 << tail);
        }
        self.held.truncate(if self.held.is_empty() { 0 } else { words });
        let groups = n.div_ceil(u64::from(self.group_blocks)) as usize;
        self.groups.truncate(groups);
        self.cursor.retain(|&g, _| (g as usize) < groups);
        self.total = n;
        self.limit = u64::MAX;
        self.recount();
        self.held_only = self.count_held_only();
        Ok(())
    }

    /// Free blocks that snapshots or the limit keep from being handed out.
    pub(super) fn count_held_only(&self) -> u64 {
        let words = self.bitmap.len();
        let first = if self.held.is_empty() && self.held_lazy.is_none() {
            (self.limit / 64).min(words as u64) as usize
        } else {
            0
        };
        let mut n = 0;
        for i in first..words {
            let lo = i as u64 * 64;
            let past = if self.limit >= lo + 64 {
                0
            } else if self.limit <= lo {
                !0u64
            } else {
                !0u64 << (self.limit - lo)
            };
            // Blocks being discarded count as such, not twice.
            let mask = (self.held_word(i) | past) & !self.busy_word(i);
            if mask != 0 {
                n += u64::from((mask & !self.bitmap.get(i)).count_ones());
            }
        }
        n
    }

    /// The runs of blocks in use `(first, count)`, in the live bitmap or
    /// held by a snapshot, in order: what a migration to another data
    /// device copies (every group's bitmap is read first).
    ///
    /// # Errors
    /// A group's bitmap cannot be loaded.
    pub fn used_runs(&mut self) -> Result<Vec<(u64, u64)>> {
        self.load_from(0)?;
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut b = 0;
        while b < self.total {
            let w = (b / 64) as usize;
            let word = self.bitmap.get(w) | self.held_word(w);
            if b % 64 == 0 && (word == 0 || word == !0) && b + 64 <= self.total {
                if word != 0 {
                    match runs.last_mut() {
                        Some((first, count)) if *first + *count == b => *count += 64,
                        _ => runs.push((b, 64)),
                    }
                }
                b += 64;
                continue;
            }
            if word >> (b % 64) & 1 != 0 {
                match runs.last_mut() {
                    Some((first, count)) if *first + *count == b => *count += 1,
                    _ => runs.push((b, 1)),
                }
            }
            b += 1;
        }
        Ok(runs)
    }

    /// Reads the bitmap of every group from the one holding block `n` on.
    fn load_from(&mut self, n: u64) -> Result<()> {
        if self.total == 0 {
            return Ok(());
        }
        let first = self.group_of(DataBlock(n.min(self.total - 1))).0;
        for g in first..self.groups.len() as u32 {
            self.load_group(GroupNo(g))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_past_the_limit_is_handed_out_and_a_cut_keeps_the_rest() {
        let mut s = DataSpace::new(1000, 256, false);
        s.reserve(100).unwrap();
        let (a, n) = s.allocate(DataBlock(700), 100).unwrap().unwrap();
        assert_eq!((a, n), (DataBlock(700), 100));
        assert_eq!(s.used_from(600).unwrap(), 100);
        let before = s.available();
        s.limit_blocks(Some(600)).unwrap();
        assert_eq!(s.available(), before - 300, "the free blocks past the limit are not available");
        assert!(s.is_held(650) && !s.is_held(599));
        s.reserve(s.available()).unwrap();
        let mut got = 0;
        while let Some((b, len)) = s.allocate(DataBlock(650), 1000).unwrap() {
            assert!(b.0 + u64::from(len) <= 600, "{b:?}+{len} past the limit");
            got += u64::from(len);
        }
        assert_eq!(got, 599);
        // The mover's free of what lay past the limit stays unavailable.
        s.free_deferred(a, n).unwrap();
        s.seal_frees(crate::types::Seq(1));
        s.release(crate::types::Seq(1));
        assert_eq!(s.available(), 0);
        assert_eq!(s.used_from(600).unwrap(), 0);
        s.shrink(600, false).unwrap();
        assert_eq!(s.total_blocks(), 600);
        assert_eq!(s.groups.len(), 3);
        assert_eq!(s.free_blocks(), 0);
        assert_eq!(s.groups.get(2).free_blocks, 0);
        assert_eq!(s.limit(), None);
    }

    #[test]
    #[should_panic(expected = "still in use")]
    fn cutting_blocks_still_in_use_is_a_bug_asserted() {
        let mut s = DataSpace::new(1000, 256, false);
        s.reserve(10).unwrap();
        s.allocate(DataBlock(900), 10).unwrap().unwrap();
        s.shrink(600, false).unwrap();
    }
}
