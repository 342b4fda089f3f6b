//! What each user, group and project uses: data blocks (an inode's
//! `blocks`) and inodes, kept as every inode record changes in the cache.
//! Nothing of it is stored: a volume with quotas counts it from the inodes
//! when it opens ([`crate::volume`]), so that it is exact after any crash
//! (DESIGN.md, "Quotas"; invariant Q1).

use rustc_hash::FxHashMap;

use crate::format::inode::InodeRecord;
use crate::format::quota::QuotaKind;

/// What one id uses.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Used {
    /// Data blocks of 4 KiB.
    pub blocks: u64,
    /// Inodes.
    pub inodes: u64,
}

/// The part of an inode record usage is counted from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Charge {
    uid: u32,
    gid: u32,
    project: u32,
    blocks: u64,
}

impl Charge {
    /// What `rec` is charged.
    #[must_use]
    pub fn of(rec: &InodeRecord) -> Charge {
        Charge { uid: rec.uid, gid: rec.gid, project: rec.project, blocks: rec.blocks }
    }

    fn ids(self) -> [(QuotaKind, u32); 3] {
        [(QuotaKind::User, self.uid), (QuotaKind::Group, self.gid), (QuotaKind::Project, self.project)]
    }
}

/// Usage per kind and id.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct QuotaUsage {
    used: FxHashMap<(QuotaKind, u32), Used>,
    /// A count went below zero: the counts no longer follow the inodes
    /// (fsck and the checks name it; the counts stay at zero).
    underflow: bool,
}

impl QuotaUsage {
    /// Counts `c` in (`add`) or out.
    pub fn count(&mut self, c: Charge, add: bool) {
        for key in c.ids() {
            let u = self.used.entry(key).or_default();
            if add {
                u.blocks += c.blocks;
                u.inodes += 1;
            } else {
                match (u.blocks.checked_sub(c.blocks), u.inodes.checked_sub(1)) {
                    (Some(b), Some(i)) => *u = Used { blocks: b, inodes: i },
                    _ => {
                        self.underflow = true;
                        *u = Used::default();
                    }
                }
                if *u == Used::default() {
                    self.used.remove(&key);
                }
            }
        }
    }

    /// Moves a record's charge from `before` to `after` (no change: nothing).
    pub fn change(&mut self, before: Charge, after: Charge) {
        if before != after {
            let moved = before.ids() != after.ids();
            if !(moved && crate::faults::active(crate::faults::Fault::QuotaChownKeepsUsage)) {
                // (The broken rule: an inode given to another id stays
                // charged to the one it left as well.)
                self.count(before, false);
            }
            self.count(after, true);
        }
    }

    /// What `id` of `kind` uses.
    #[must_use]
    pub fn get(&self, kind: QuotaKind, id: u32) -> Used {
        self.used.get(&(kind, id)).copied().unwrap_or_default()
    }

    /// Every id with usage, by kind and id.
    #[must_use]
    pub fn all(&self) -> Vec<((QuotaKind, u32), Used)> {
        let mut v: Vec<_> = self.used.iter().map(|(k, u)| (*k, *u)).collect();
        v.sort_unstable_by_key(|(k, _)| *k);
        v
    }

    /// Whether a count ever went below zero.
    #[must_use]
    pub fn underflowed(&self) -> bool {
        self.underflow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_moves_usage_between_ids() {
        let mut q = QuotaUsage::default();
        let rec = InodeRecord { uid: 5, gid: 6, project: 7, blocks: 10, ..InodeRecord::default() };
        q.count(Charge::of(&rec), true);
        assert_eq!(q.get(QuotaKind::User, 5), Used { blocks: 10, inodes: 1 });
        let moved = InodeRecord { uid: 8, ..rec.clone() };
        q.change(Charge::of(&rec), Charge::of(&moved));
        assert_eq!(q.get(QuotaKind::User, 5), Used::default());
        assert_eq!(q.get(QuotaKind::User, 8), Used { blocks: 10, inodes: 1 });
        assert_eq!(q.get(QuotaKind::Project, 7), Used { blocks: 10, inodes: 1 });
        q.count(Charge::of(&moved), false);
        assert!(q.all().is_empty() && !q.underflowed());
        q.count(Charge::of(&moved), false);
        assert!(q.underflowed());
    }
}
