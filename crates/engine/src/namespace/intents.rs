//! What changed since the last commit group was sealed, as far as an fsync
//! record needs to know it.
//!
//! An fsync record says, for one file, what the durable state must become:
//! its inode, the ranges of its block map that changed, and, for a file
//! created since the last commit group, the name it was created with and
//! the new directories above it (`format::fsync`). Everything here is
//! *since the last seal*: every commit group sealed before an fsync is
//! durable when the fsync runs (both hold the commit lock), so the last
//! seal is the state replay starts from. Sealing clears it all
//! ([`Intents::sealed`]).
//!
//! Some changes cannot be said this way, or not cheaply; a file they touch
//! is *tangled* and its fsync commits everything instead (ext4's fast
//! commits call such inodes ineligible): a new inode renamed, linked or
//! unlinked after it was created, or created under a name removed since
//! the last seal (replay would meet the old entry).

use rustc_hash::{FxHashMap, FxHashSet};

use crate::format::inode::InodeRecord;
use crate::format::name::FileName;
use crate::types::{FileKind, InodeNo};

/// The name an inode was created with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Birth {
    /// Its directory.
    pub dir: InodeNo,
    /// Its name there.
    pub name: FileName,
    /// What it is.
    pub kind: FileKind,
}

/// Changes since the last seal that fsync records are built from.
#[derive(Debug, Default)]
pub struct Intents {
    /// Inodes created since the last seal, with the name each got first
    /// (None until it is linked).
    born: FxHashMap<InodeNo, Option<Birth>>,
    /// New inodes whose names changed after their birth.
    tangled: FxHashSet<InodeNo>,
    /// Names removed since the last seal, by directory (looked up by a
    /// borrowed name at every link: no copy of it).
    removed: FxHashMap<InodeNo, FxHashSet<Box<[u8]>>>,
    /// Per file, the file-block ranges whose mapping changed since a record
    /// last carried the file (or since the seal), merged and sorted: a
    /// record carries only these, and replay applies records in order.
    mapped: FxHashMap<InodeNo, Vec<(u64, u64)>>,
    /// Files whose size or mapping changed since an fsync record last
    /// carried them (or since the seal): fdatasync must log them.
    unlogged: FxHashSet<InodeNo>,
    /// New inodes whose birth an fsync record already carries.
    birth_logged: FxHashSet<InodeNo>,
    /// Each file's inode as the last fsync record carried it.
    logged: FxHashMap<InodeNo, InodeRecord>,
    /// Files with data copies in an fsync record since the seal: an
    /// in-place write of theirs would be undone by replaying the copy.
    copied: FxHashSet<InodeNo>,
}

impl Intents {
    /// A commit group was sealed: what it wrote is the new starting point.
    /// `substituted` are the files it wrote with another record than the
    /// one in memory (a delayed tail's shorter size, a held file's old
    /// contents): their whole map and size still differ from the disk's.
    pub fn sealed(&mut self, substituted: impl IntoIterator<Item = InodeNo>) {
        *self = Intents::default();
        for ino in substituted {
            self.mapped.insert(ino, vec![(0, u64::MAX)]);
            self.unlogged.insert(ino);
        }
    }

    /// `ino` was just created.
    pub fn created(&mut self, ino: InodeNo) {
        self.born.insert(ino, None);
    }

    /// `dir` got the entry `name` for `ino`.
    pub fn linked(&mut self, dir: InodeNo, name: &FileName, ino: InodeNo, kind: FileKind) {
        match self.born.get_mut(&ino) {
            Some(b @ None) => {
                if self.removed.get(&dir).is_some_and(|names| names.contains(name.as_bytes())) {
                    self.tangled.insert(ino);
                }
                *b = Some(Birth { dir, name: name.clone(), kind });
            }
            Some(Some(_)) => {
                self.tangled.insert(ino);
            }
            None => {}
        }
    }

    /// `ino`, which had no name (an unnamed O_TMPFILE file, an orphan on
    /// disk), got one: replaying a record would leave it an orphan, so
    /// only a commit says it.
    pub fn named_orphan(&mut self, ino: InodeNo) {
        self.tangled.insert(ino);
    }

    /// The entry `name` of `dir`, naming `ino`, was removed or pointed elsewhere.
    pub fn unlinked(&mut self, dir: InodeNo, name: &[u8], ino: InodeNo) {
        self.removed.entry(dir).or_default().insert(name.into());
        if self.born.contains_key(&ino) {
            self.tangled.insert(ino);
        }
    }

    /// The mapping of file blocks `[start, end)` of `ino` changed.
    pub fn remapped(&mut self, ino: InodeNo, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let v = self.mapped.entry(ino).or_default();
        v.push((start, end));
        v.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for &(s, e) in v.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *v = merged;
        self.unlogged.insert(ino);
    }

    /// The size of `ino` changed.
    pub fn resized(&mut self, ino: InodeNo) {
        self.unlogged.insert(ino);
    }

    /// Whether `ino` was created since the last seal, and under which name.
    #[must_use]
    pub fn birth(&self, ino: InodeNo) -> Option<Option<&Birth>> {
        self.born.get(&ino).map(Option::as_ref)
    }

    /// Whether `ino` is new and its names changed since: only a commit says that.
    #[must_use]
    pub fn is_tangled(&self, ino: InodeNo) -> bool {
        self.tangled.contains(&ino)
    }

    /// The changed ranges of `ino`'s map.
    #[must_use]
    pub fn ranges(&self, ino: InodeNo) -> &[(u64, u64)] {
        self.mapped.get(&ino).map_or(&[], Vec::as_slice)
    }

    /// Whether `ino`'s size or map changed since a record last carried it.
    #[must_use]
    pub fn is_unlogged(&self, ino: InodeNo) -> bool {
        self.unlogged.contains(&ino)
    }

    /// Whether a record since the seal carries data copies of `ino`.
    #[must_use]
    pub fn has_copies(&self, ino: InodeNo) -> bool {
        self.copied.contains(&ino)
    }

    /// Whether a record since the seal carries the birth of `ino`.
    #[must_use]
    pub fn birth_is_logged(&self, ino: InodeNo) -> bool {
        self.birth_logged.contains(&ino)
    }

    /// The inode the last record since the seal carried for `ino`.
    #[must_use]
    pub fn logged_image(&self, ino: InodeNo) -> Option<&InodeRecord> {
        self.logged.get(&ino)
    }

    /// An fsync record carrying `image` (and data copies if `copies`) was
    /// sealed for `ino`.
    pub fn logged(&mut self, ino: InodeNo, image: InodeRecord, copies: bool) {
        self.unlogged.remove(&ino);
        self.mapped.remove(&ino);
        self.logged.insert(ino, image);
        if copies {
            self.copied.insert(ino);
        }
    }

    /// An fsync record carries the birth of `ino`.
    pub fn birth_logged(&mut self, ino: InodeNo) {
        self.birth_logged.insert(ino);
    }

    /// Whether any inode was created since the last seal.
    #[must_use]
    pub fn any_born(&self) -> bool {
        !self.born.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> FileName {
        FileName::new(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_new_inode_keeps_its_birth_until_its_names_change() {
        let mut i = Intents::default();
        i.created(InodeNo(9));
        i.linked(InodeNo(1), &name("a"), InodeNo(9), FileKind::Regular);
        assert_eq!(i.birth(InodeNo(9)).flatten().map(|b| b.dir), Some(InodeNo(1)));
        assert!(!i.is_tangled(InodeNo(9)));
        i.unlinked(InodeNo(1), b"a", InodeNo(9));
        assert!(i.is_tangled(InodeNo(9)));
        i.sealed([]);
        assert!(i.birth(InodeNo(9)).is_none() && !i.is_tangled(InodeNo(9)));
    }

    #[test]
    fn a_name_removed_since_the_seal_tangles_the_inode_born_under_it() {
        let mut i = Intents::default();
        i.unlinked(InodeNo(1), b"a", InodeNo(5));
        i.created(InodeNo(9));
        i.linked(InodeNo(1), &name("a"), InodeNo(9), FileKind::Regular);
        assert!(i.is_tangled(InodeNo(9)));
        assert!(!i.is_tangled(InodeNo(5)), "an inode older than the seal is never tangled");
    }

    #[test]
    fn ranges_merge_and_substituted_files_are_whole() {
        let mut i = Intents::default();
        i.remapped(InodeNo(3), 10, 20);
        i.remapped(InodeNo(3), 0, 5);
        i.remapped(InodeNo(3), 5, 12);
        assert_eq!(i.ranges(InodeNo(3)), &[(0, 20)]);
        i.sealed([InodeNo(4)]);
        assert!(i.ranges(InodeNo(3)).is_empty());
        assert_eq!(i.ranges(InodeNo(4)), &[(0, u64::MAX)]);
        assert!(i.is_unlogged(InodeNo(4)));
    }
}
