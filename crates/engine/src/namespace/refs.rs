//! References held on inodes from outside (kernel lookups, open files).
//!
//! The kernel holds a reference on every inode it caches, and after a
//! `find` over ten million files that is ten million of them, almost all
//! exactly one. A hash map of counts took 17 bytes a slot and kept its
//! largest size (285 MiB at ten million); here one reference is one bit in
//! a bitmap indexed by inode number (numbers are handed out lowest first,
//! so the bitmap is dense: 1.2 MiB at ten million), and only inodes held
//! more than once (open files, a hard link looked up twice) have a count.

use rustc_hash::FxHashMap;

use crate::types::InodeNo;

/// The reference counts of every inode held from outside.
#[derive(Debug, Default)]
pub struct Refs {
    /// Inodes held exactly once, a bit each.
    once: Vec<u64>,
    /// How many bits of `once` are set.
    once_count: usize,
    /// Inodes held more than once, with their counts (never 0 or 1).
    many: FxHashMap<InodeNo, u64>,
}

impl Refs {
    /// Inodes with references.
    #[must_use]
    pub fn len(&self) -> usize {
        self.once_count + self.many.len()
    }

    /// Whether no inode is referenced.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn bit(ino: InodeNo) -> (usize, u64) {
        ((ino.0 / 64) as usize, 1u64 << (ino.0 % 64))
    }

    fn held_once(&self, ino: InodeNo) -> bool {
        let (w, m) = Refs::bit(ino);
        self.once.get(w).is_some_and(|x| x & m != 0)
    }

    fn set_once(&mut self, ino: InodeNo, on: bool) {
        let (w, m) = Refs::bit(ino);
        if on {
            if w >= self.once.len() {
                self.once.resize(w + 1, 0);
            }
            self.once[w] |= m;
            self.once_count += 1;
        } else {
            self.once[w] &= !m;
            self.once_count -= 1;
            // Words past the last reference go, and with them their memory
            // once the bitmap is a quarter full.
            while self.once.last() == Some(&0) {
                self.once.pop();
            }
            if self.once.capacity() > 4 * self.once.len() + 1024 {
                self.once.shrink_to_fit();
            }
        }
    }

    /// References to `ino`.
    #[must_use]
    pub fn get(&self, ino: InodeNo) -> u64 {
        if self.held_once(ino) { 1 } else { self.many.get(&ino).copied().unwrap_or(0) }
    }

    /// Takes `n` more references to `ino`.
    pub fn take(&mut self, ino: InodeNo, n: u64) {
        if n == 0 {
            return;
        }
        let had = self.get(ino);
        self.put(ino, had, had.saturating_add(n));
    }

    /// Drops up to `n` references to `ino`; returns how many remain.
    pub fn drop_refs(&mut self, ino: InodeNo, n: u64) -> u64 {
        let had = self.get(ino);
        let left = had.saturating_sub(n);
        self.put(ino, had, left);
        left
    }

    /// Moves `ino` from `had` references to `now`.
    fn put(&mut self, ino: InodeNo, had: u64, now: u64) {
        if had == now {
            return;
        }
        match had {
            0 => {}
            1 => self.set_once(ino, false),
            _ => {
                self.many.remove(&ino);
                // A hash map keeps its largest size: give the slots back
                // once it is a quarter full (O(1) a removal over time).
                if self.many.capacity() > 4 * self.many.len() + 4096 {
                    self.many.shrink_to_fit();
                }
            }
        }
        match now {
            0 => {}
            1 => self.set_once(ino, true),
            _ => {
                self.many.insert(ino, now);
            }
        }
    }

    /// Every referenced inode.
    #[must_use]
    pub fn inodes(&self) -> Vec<InodeNo> {
        let once = self.once.iter().enumerate().flat_map(|(w, &bits)| {
            (0..64).filter(move |b| bits & (1u64 << b) != 0).map(move |b| InodeNo(w as u64 * 64 + b))
        });
        once.chain(self.many.keys().copied()).collect()
    }

    /// Bytes the table holds (its memory), for tests and stats.
    #[must_use]
    pub fn memory(&self) -> usize {
        self.once.capacity() * 8 + self.many.capacity() * (std::mem::size_of::<(InodeNo, u64)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_move_between_the_bitmap_and_the_map() {
        let mut r = Refs::default();
        r.take(InodeNo(5), 1);
        r.take(InodeNo(700), 2);
        assert_eq!((r.get(InodeNo(5)), r.get(InodeNo(700)), r.get(InodeNo(6))), (1, 2, 0));
        r.take(InodeNo(5), 3);
        assert_eq!(r.get(InodeNo(5)), 4);
        assert_eq!(r.drop_refs(InodeNo(5), 3), 1);
        assert_eq!(r.drop_refs(InodeNo(700), 1), 1);
        assert_eq!(r.len(), 2);
        let mut all = r.inodes();
        all.sort();
        assert_eq!(all, vec![InodeNo(5), InodeNo(700)]);
        assert_eq!(r.drop_refs(InodeNo(5), 9), 0, "more forgotten than held leaves none");
        assert_eq!(r.drop_refs(InodeNo(700), 1), 0);
        assert_eq!(r.drop_refs(InodeNo(8), 1), 0, "nothing held, nothing dropped");
        assert!(r.is_empty());
        assert!(r.memory() < 1024, "{} bytes for no reference", r.memory());
    }

    #[test]
    fn a_million_single_references_take_a_bit_each() {
        let mut r = Refs::default();
        for i in 1..=1_000_000 {
            r.take(InodeNo(i), 1);
        }
        assert_eq!(r.len(), 1_000_000);
        assert!(r.memory() < 200 << 10, "{} bytes for a million references", r.memory());
        for i in 1..=1_000_000 {
            r.drop_refs(InodeNo(i), 1);
        }
        assert!(r.memory() < 16 << 10, "{} bytes kept after every reference went", r.memory());
    }
}
