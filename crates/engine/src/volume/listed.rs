//! Read-ahead across files, in the order their directory lists them.
//!
//! `grep -r`, `tar c` and `cp -r` read a directory's files one after
//! another in the order readdir gave them. DualFS lists a directory by the
//! hash of its names, while the files' data lies in the order it was
//! written, so one file's neighbour in the listing is seldom its neighbour
//! on the device, no read continues the one before, and every cold small
//! file waits for a device request of its own. The volume remembers the
//! regular files of the directories listed lately, in listed order; a read
//! of the start of one that the reader reaches in that order asks the data
//! device for the next files' blocks ([`BlockDevice::will_need`]), so that
//! they are in its cache when their reads come (DESIGN.md, "Data space").
//!
//! The window starts at [`FIRST_WINDOW`] bytes and doubles up to
//! [`MAX_WINDOW`] while the reader follows, as the kernel's read-ahead
//! does within a file; a read out of order asks for nothing more. Only
//! files small enough to be read through the device's cache are asked for
//! (`FileDevice::BUFFERED_READ_MAX`): a larger one is read direct, and
//! pages read ahead for it would be read twice.
//!
//! [`BlockDevice::will_need`]: crate::device::BlockDevice::will_need

use std::collections::{HashMap, VecDeque};

use crate::device::FileDevice;
use crate::error::Error;
use crate::namespace::Fs;
use crate::namespace::file::ReadPiece;
use crate::types::{BLOCK_SIZE, FileKind, InodeNo};

/// Bytes the first step reads ahead.
pub const FIRST_WINDOW: u64 = 128 * 1024;
/// Bytes a step reads ahead at most.
pub const MAX_WINDOW: u64 = 2 << 20;
/// Files one step asks for at most (each is a system call).
const STEP_FILES: usize = 64;
/// A directory listed within this many listings of the newest one whose
/// files were read is read ahead as soon as it is listed: its reader is
/// reading the directories it lists (`grep -r`), and its first file would
/// otherwise wait. A lister that reads nothing (`find`, `ls -l`) never
/// gets there.
const EAGER_SPAN: u64 = 8;
/// Listings remembered, the most recent kept.
const LISTINGS: usize = 64;
/// Files remembered across all listings.
const FILES: usize = 1 << 16;

/// One directory's regular files, in listed order, and how far a reader
/// of them got.
#[derive(Debug)]
struct Listing {
    dir: InodeNo,
    files: Vec<InodeNo>,
    /// Files before this index were asked for (or read).
    ahead: usize,
    /// The first file of the last step: a read of it starts the next.
    mark: usize,
    /// The last file read from its start.
    last: Option<usize>,
    /// Bytes the next step asks for.
    window: u64,
    /// To be read ahead before its first read (see [`EAGER_SPAN`]).
    eager: bool,
}

/// Device runs (first block, blocks) to ask for ahead of a read.
pub(crate) type Runs = Vec<(u64, u64)>;

/// The listings of the directories listed lately (see the module's text).
#[derive(Debug, Default)]
pub(crate) struct Listed {
    listings: HashMap<u64, Listing>,
    /// Listing ids, oldest first.
    order: VecDeque<u64>,
    /// A file's listing and its index there (the newest listing naming it).
    at: HashMap<InodeNo, (u64, usize)>,
    next_id: u64,
    /// The newest listing a file was read from.
    last_read: Option<u64>,
}

impl Listed {
    /// `dir` was listed from `offset`: these entries, in order. A listing
    /// from the start replaces the directory's earlier one; a listing that
    /// goes on from further in adds the files it has not named yet.
    pub(crate) fn listed(&mut self, dir: InodeNo, offset: u64, entries: &[(InodeNo, FileKind)]) {
        let existing = self.order.iter().rev().copied().find(|id| self.listings.get(id).is_some_and(|l| l.dir == dir));
        let id = match existing {
            Some(id) if offset > 0 => id,
            _ => {
                if let Some(old) = existing {
                    self.drop_listing(old);
                }
                if entries.iter().all(|(_, k)| *k != FileKind::Regular) {
                    return;
                }
                let id = self.next_id;
                self.next_id += 1;
                let eager = self.last_read.is_some_and(|r| id - r <= EAGER_SPAN);
                let listing =
                    Listing { dir, files: Vec::new(), ahead: 0, mark: 0, last: None, window: FIRST_WINDOW, eager };
                self.listings.insert(id, listing);
                self.order.push_back(id);
                id
            }
        };
        // Room: the oldest listings go, never this one.
        while self.order.len() > LISTINGS || self.at.len() + entries.len() > FILES {
            match self.order.front().copied() {
                Some(oldest) if oldest != id => self.drop_listing(oldest),
                _ => break,
            }
        }
        let Some(listing) = self.listings.get_mut(&id) else { return };
        for &(ino, kind) in entries {
            if kind != FileKind::Regular || self.at.get(&ino).is_some_and(|&(l, _)| l == id) {
                continue;
            }
            if self.at.len() >= FILES {
                // A directory larger than what is remembered: its first
                // files are read ahead, the rest are read as they come.
                break;
            }
            self.at.insert(ino, (id, listing.files.len()));
            listing.files.push(ino);
        }
    }

    fn drop_listing(&mut self, id: u64) {
        if let Some(l) = self.listings.remove(&id) {
            for ino in l.files {
                if self.at.get(&ino).is_some_and(|&(i, _)| i == id) {
                    self.at.remove(&ino);
                }
            }
        }
        self.order.retain(|&i| i != id);
    }

    /// `ino` is read from its start: the runs of the data device to ask
    /// for ahead of it, if the reader follows a listing and has reached
    /// the point where the next step starts. Planned under the file-system
    /// lock; a file whose meta-data is not in memory is passed over (its
    /// read will find it), never read for.
    pub(crate) fn ahead(&mut self, fs: &mut Fs, ino: InodeNo) -> Runs {
        let Some(&(id, k)) = self.at.get(&ino) else { return Vec::new() };
        let Some(l) = self.listings.get_mut(&id) else { return Vec::new() };
        self.last_read = Some(self.last_read.map_or(id, |r| r.max(id)));
        l.eager = false;
        let follows = l.last.is_some_and(|j| k > j);
        let step = match l.last {
            // The first read of the listing.
            None => true,
            // The reader reached the last step's first file, or went past
            // everything asked for.
            Some(_) if follows && (k >= l.mark) => true,
            _ => false,
        };
        if !follows && l.last.is_some() {
            // Out of order: ask for nothing until it follows again.
            l.window = FIRST_WINDOW;
            l.last = Some(k);
            return Vec::new();
        }
        l.last = Some(k);
        if !step {
            return Vec::new();
        }
        let from = l.ahead.max(k + 1);
        if from > k + 1 {
            // Still ahead of the reader: this step goes on from there, and
            // the window grows.
            l.window = (l.window * 2).min(MAX_WINDOW);
        }
        let mut runs: Runs = Vec::new();
        let mut bytes = 0u64;
        let mut next = from;
        while next < l.files.len() && next < from + STEP_FILES && bytes < l.window {
            let file = l.files[next];
            next += 1;
            // Never read for: a cold file is passed over.
            bytes += plan_runs(fs, file, &mut runs).unwrap_or(0);
        }
        l.mark = from;
        l.ahead = l.ahead.max(next);
        joined(runs)
    }

    /// The first files of `dir`'s listing, if it is to be read ahead as
    /// soon as it is listed ([`EAGER_SPAN`]) and has not been yet: once
    /// only. [`Listed::eager_asked`] says how many were asked for.
    pub(crate) fn eager(&mut self, dir: InodeNo) -> Option<(u64, Vec<InodeNo>, u64)> {
        let id = self.order.iter().rev().copied().find(|id| self.listings.get(id).is_some_and(|l| l.dir == dir))?;
        let l = self.listings.get_mut(&id)?;
        if !l.eager || l.last.is_some() || l.ahead > 0 {
            return None;
        }
        l.eager = false;
        Some((id, l.files.iter().take(STEP_FILES).copied().collect(), l.window))
    }

    /// The first `n` files of listing `id` were asked for ahead of their
    /// reads: a read of the first goes on after them.
    pub(crate) fn eager_asked(&mut self, id: u64, n: usize) {
        if let Some(l) = self.listings.get_mut(&id) {
            l.ahead = l.ahead.max(n);
        }
    }
}

/// Plans the eager step of a listing: the runs of the first `files` up to
/// `window` bytes, and how many files that took. The inodes are loaded as
/// a read loads them (`MustRead` goes up to `Volume::read_op`, which reads
/// and comes back): a lister about to stat them (readdirplus) would load
/// them anyway.
pub(crate) fn plan_eager(fs: &mut Fs, files: &[InodeNo], window: u64) -> crate::error::Result<(Runs, usize)> {
    let mut runs = Vec::new();
    let mut bytes = 0;
    let mut n = 0;
    for &file in files {
        if bytes >= window {
            break;
        }
        bytes += plan_runs(fs, file, &mut runs)?;
        n += 1;
    }
    Ok((joined(runs), n))
}

/// `runs` in device order, neighbours joined: fewer and longer requests.
fn joined(mut runs: Runs) -> Runs {
    runs.sort_unstable();
    let mut out: Runs = Vec::with_capacity(runs.len());
    for (first, count) in runs {
        match out.last_mut() {
            Some((f, c)) if *f + *c >= first => *c = (*c).max(first + count - *f),
            _ => out.push((first, count)),
        }
    }
    out
}

/// Adds the device runs of `ino`'s data to `runs` if the whole file is
/// read through the device's cache; returns their bytes. Fails only with
/// `MustRead` (its meta-data is not in memory); a file gone or no longer
/// regular adds nothing (its own read, if it comes, finds out).
fn plan_runs(fs: &mut Fs, ino: InodeNo, runs: &mut Runs) -> crate::error::Result<u64> {
    let must_read = |e: Error| if matches!(e, Error::MustRead(_)) { Err(e) } else { Ok(0) };
    let size = match fs.inode(ino) {
        Ok(rec) => rec.size,
        Err(e) => return must_read(e),
    };
    if size == 0 || size > FileDevice::BUFFERED_READ_MAX as u64 {
        return Ok(0);
    }
    let plan = match fs.read_plan(ino, 0, usize::try_from(size).unwrap_or(usize::MAX)) {
        Ok(p) => p,
        Err(e) => return must_read(e),
    };
    let mut bytes = 0;
    for piece in plan {
        let ReadPiece::Device { at, skip, len } = piece else { continue };
        let blocks = (skip + len).div_ceil(BLOCK_SIZE) as u64;
        bytes += blocks * BLOCK_SIZE as u64;
        runs.push((at.0, blocks));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(n: u64) -> Vec<(InodeNo, FileKind)> {
        (0..n).map(|i| (InodeNo(100 + i), if i % 5 == 4 { FileKind::Directory } else { FileKind::Regular })).collect()
    }

    #[test]
    fn a_listing_keeps_its_regular_files_in_order_and_goes_on_without_repeats() {
        let mut l = Listed::default();
        let e = files(10);
        l.listed(InodeNo(2), 0, &e[..6]);
        // Continued from inside what was listed: the repeats are left out.
        l.listed(InodeNo(2), 4, &e[3..]);
        let (id, _) = l.at[&InodeNo(100)];
        let want: Vec<InodeNo> = e.iter().filter(|(_, k)| *k == FileKind::Regular).map(|(i, _)| *i).collect();
        assert_eq!(l.listings[&id].files, want);
        for (n, ino) in want.iter().enumerate() {
            assert_eq!(l.at[ino], (id, n));
        }
        // Listed again from the start: a fresh listing replaces it.
        l.listed(InodeNo(2), 0, &e[..3]);
        assert_eq!(l.order.len(), 1);
        assert!(!l.at.contains_key(&InodeNo(105)));
    }

    #[test]
    fn old_listings_are_forgotten() {
        let mut l = Listed::default();
        for d in 0..(LISTINGS as u64 + 10) {
            l.listed(InodeNo(1000 + d), 0, &[(InodeNo(5000 + d), FileKind::Regular)]);
        }
        assert_eq!(l.order.len(), LISTINGS);
        assert_eq!(l.listings.len(), LISTINGS);
        assert!(!l.at.contains_key(&InodeNo(5000)));
        assert!(l.at.contains_key(&InodeNo(5000 + LISTINGS as u64 + 9)));
    }
}
