//! Going back to the last complete tree: what a receive under way ends in
//! when it is refused, cut short or abandoned (`dualfs receive --abort`),
//! and where finishing one starts (DESIGN.md, "Receive: a receive under
//! way is a state every tool knows").
//!
//! The last complete tree of an incremental receive is its base snapshot,
//! which the live tree equalled (access times aside) when the receive
//! began. The rollback is the comparison send makes, run from the live
//! tree to that snapshot, and its records applied to the live tree: it
//! costs what the receive had changed. A full receive began on an empty
//! volume: going back frees every inode but the root and empties the root.
//! Like a receive, a rollback states and does not edit, so a rollback cut
//! by a crash is finished by running it again.

use super::super::send::{DiffOptions, DiffSink, diff};
use super::super::{MountOptions, Volume};
use super::apply::{Apply, is_mark};
use super::{COMMIT_EVERY, Marker, Touched};
use crate::error::{Error, Result};
use crate::format::stream::{InodeAttrs, Record};
use crate::types::InodeNo;

/// Applies a comparison's records, committing as a receive does.
struct Back<'a, 'b> {
    apply: &'b mut Apply<'a>,
    vol: &'a Volume,
    records: u64,
    inodes: u64,
}

impl DiffSink for Back<'_, '_> {
    fn record(&mut self, rec: Record) -> Result<()> {
        // The marks on the root are left to the caller (Apply skips them).
        if matches!(rec, Record::Inode(_) | Record::Gone(_)) {
            self.inodes += 1;
        }
        self.apply.record(rec)?;
        self.records += 1;
        if self.records.is_multiple_of(COMMIT_EVERY) {
            self.vol.commit()?;
            self.apply.freed.clear();
        }
        Ok(())
    }
}

impl Volume {
    /// Brings the live tree back to the last complete tree of the receive
    /// `marker` names, leaving the mark (the caller removes it, or applies
    /// the stream again). Returns the inodes it changed.
    /// `root` is the root's attributes before the receive, when known
    /// (otherwise they are the root's now, which a receive sets only in the
    /// commit that ends it).
    pub(super) fn roll_back(&self, marker: &Marker, root: Option<&InodeAttrs>, touched: &mut Touched) -> Result<u64> {
        self.commit()?;
        let mut apply = Apply::new(self, touched, false);
        let mut back = Back { apply: &mut apply, vol: self, records: 0, inodes: 0 };
        match marker.base {
            Some(id) => {
                let name = self.snapshot_list().into_iter().find(|s| s.id == id).map(|s| s.name).ok_or_else(|| {
                    Error::ReceiveRefused(format!(
                        "the receive under way started from the snapshot of id {id}, which this volume no longer \
                         holds: the tree cannot be brought back"
                    ))
                })?;
                let base = Volume::open_snapshot(self.meta.clone(), self.data.clone(), &name, MountOptions::default())?;
                diff(Some(self), &base, DiffOptions::default(), &mut back)?;
            }
            None => self.to_empty(&mut back, root)?,
        }
        let inodes = back.inodes;
        apply.finish()?;
        self.commit()?;
        Ok(inodes)
    }

    /// The records that make the live tree an empty volume: the root
    /// without entries or attributes (its marks aside), every other inode gone.
    fn to_empty(&self, back: &mut Back<'_, '_>, before: Option<&InodeAttrs>) -> Result<()> {
        self.finish_loading()?;
        let root = match before {
            Some(a) => a.clone(),
            None => self.with_fs(|fs| fs.inode(InodeNo::ROOT).map(super::super::send::attrs_of))?,
        };
        let mut names = Vec::new();
        self.with_fs(|fs| {
            fs.dir_scan(InodeNo::ROOT, 0, &mut |e| {
                names.push(e.name);
                true
            })
        })?;
        let xattrs = self.with_fs(|fs| fs.xattr_list(InodeNo::ROOT))?;
        back.record(Record::Inode(InodeAttrs { nlink: 2, size: 0, ..root }))?;
        for name in names {
            back.record(Record::Unlink { name })?;
        }
        for name in xattrs.into_iter().filter(|n| !is_mark(InodeNo::ROOT, n)) {
            back.record(Record::XattrRemove { name })?;
        }
        let count = self.with_fs(|fs| fs.log.ifile().inodes.len()) as u64;
        for i in InodeNo::ROOT.0 + 1..count {
            if self.with_fs(|fs| fs.log.ifile().inode(InodeNo(i)).is_some_and(|e| e.in_use())) {
                back.record(Record::Gone(InodeNo(i)))?;
            }
        }
        Ok(())
    }
}
