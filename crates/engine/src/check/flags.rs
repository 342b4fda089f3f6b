//! Inode flags and project ids (format 1.6): only a volume marked
//! `INCOMPAT_INODE_FLAGS` may carry them, since an older reader would
//! refuse the records or ignore what immutable and append-only forbid,
//! and each kind keeps only its own flags (`format::inode::flags_for`).
//! Unknown flags never get this far: the record's decoder refuses them,
//! and the walk names its inode block (I5).

use super::walk::problem;
use super::{Invariant, Loaded, Problem};
use crate::format::inode::flags_for;
use crate::format::quota::{QUOTA_XATTR, QuotaTable};
use crate::format::superblock::{INCOMPAT_INODE_FLAGS, INCOMPAT_QUOTA};
use crate::types::FileKind;

/// I8: every loaded inode's flags and project against the feature bit
/// (`incompat` of the superblock) and its kind.
pub(super) fn check_flags(incompat: u64, loaded: &Loaded, problems: &mut Vec<Problem>) {
    let mut inodes: Vec<_> = loaded.inodes.iter().collect();
    inodes.sort_unstable_by_key(|(ino, _)| **ino);
    for (&ino, rec) in inodes {
        if (rec.flags != 0 || rec.project != 0) && incompat & INCOMPAT_INODE_FLAGS == 0 {
            problems.push(problem(
                Invariant::I8,
                "inode",
                Some(ino),
                None,
                format!(
                    "has inode flags {:#x} and project {} on a volume not marked INODE_FLAGS (format 1.6), which \
                     an older reader would misread",
                    rec.flags, rec.project
                ),
            ));
        }
        let Some(kind) = FileKind::from_mode(rec.mode) else { continue };
        let extra = rec.flags & !flags_for(kind);
        if extra != 0 {
            problems.push(problem(
                Invariant::I8,
                "inode",
                Some(ino),
                None,
                format!("a {} with inode flags {extra:#x} that its kind does not keep", kind_word(kind)),
            ));
        }
    }
}

/// Q1 as an image shows it: on a volume marked `INCOMPAT_QUOTA` the
/// root's quota record, if there, decodes (checksum, order, lengths); on
/// one not marked there is none (an older reader would ignore its limits).
/// Usage is not stored (it is counted from the inodes at open), so what Q1
/// says of usage is checked on a running volume
/// (`Volume::verify_quota_usage`), not on an image.
pub(super) fn check_quota(incompat: u64, loaded: &Loaded, problems: &mut Vec<Problem>) {
    let Some(value) = super::marks::root_xattr(loaded, QUOTA_XATTR) else { return };
    let root = Some(crate::types::InodeNo::ROOT);
    if incompat & INCOMPAT_QUOTA == 0 {
        problems.push(problem(
            Invariant::Q1,
            "quota record",
            root,
            None,
            "the root holds a quota record on a volume not marked QUOTA (format 1.9)".to_string(),
        ));
    } else if let Err(e) = QuotaTable::decode(&value) {
        problems.push(problem(Invariant::Q1, "quota record", root, None, format!("does not decode: {e}")));
    }
}

fn kind_word(kind: FileKind) -> &'static str {
    match kind {
        FileKind::Regular => "regular file",
        FileKind::Directory => "directory",
        FileKind::Symlink => "symbolic link",
        _ => "special file",
    }
}
