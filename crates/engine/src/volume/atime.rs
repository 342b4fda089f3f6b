//! Access times: reading a file, listing a directory or reading a symbolic
//! link sets the access time to now when the mount's [`AtimeMode`] says so.
//!
//! Cheap by construction: the rule is checked under the lock the read takes
//! anyway, and an access time that need not change costs nothing. One that
//! must is set in memory there and then, and goes to the log with the next
//! commit like any other inode change. It is never worth failing a read
//! for, nor a commit or a checkpoint of its own on a full meta-data device:
//! on a read-only or failed volume, or without room, it stays as it is.

use super::{AtimeMode, Volume, lock};
use crate::format::inode::InodeRecord;
use crate::format::inode::{FLAG_IMMUTABLE, FLAG_NOATIME};
use crate::meta_log::segments::OpKind;
use crate::namespace::Fs;
use crate::types::{InodeNo, Timestamp};

/// Seconds after which relatime updates an access time anyway.
const RELATIME_MAX_AGE_SECS: i64 = 24 * 60 * 60;

/// Whether an access at `now` updates `rec`'s access time under `mode`
/// (the rule of Linux's `atime_needs_update` and `relatime_need_update`).
#[must_use]
pub fn atime_due(rec: &InodeRecord, now: Timestamp, mode: AtimeMode) -> bool {
    // An immutable inode does not change; a noatime one keeps its time.
    if rec.flags & (FLAG_NOATIME | FLAG_IMMUTABLE) != 0 {
        return false;
    }
    let due = match mode {
        AtimeMode::NoAtime => false,
        AtimeMode::StrictAtime => true,
        AtimeMode::Relatime => {
            rec.atime <= rec.mtime
                || rec.atime <= rec.ctime
                || now.sec.saturating_sub(rec.atime.sec) >= RELATIME_MAX_AGE_SECS
        }
    };
    due && rec.atime != now
}

/// What became of an access-time update tried under the lock.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Touch {
    /// Done, or nothing to do.
    Settled,
    /// The active partial segment must be sealed first.
    AfterCommit,
}

impl Volume {
    /// Whether reading `ino` now would update its access time: the FUSE
    /// adapter lets such a file's reads reach the engine rather than the
    /// kernel's page cache.
    #[must_use]
    pub fn access_due(&self, ino: InodeNo) -> bool {
        if !self.atime_enabled() {
            return false;
        }
        let now = self.now();
        self.read_op(|fs| Ok(atime_due(fs.inode(ino)?, now, self.options.atime))).unwrap_or(false)
    }

    fn atime_enabled(&self) -> bool {
        self.options.atime != AtimeMode::NoAtime && self.check_writable().is_ok()
    }

    /// Updates `ino`'s access time if it is due, under the lock the caller
    /// holds.
    pub(super) fn touch_atime_locked(&self, fs: &mut Fs, ino: InodeNo) -> Touch {
        if !self.atime_enabled() {
            return Touch::Settled;
        }
        let now = self.now();
        if !fs.inode(ino).is_ok_and(|rec| atime_due(rec, now, self.options.atime)) {
            return Touch::Settled;
        }
        if fs.log.needs_seal() {
            return Touch::AfterCommit;
        }
        if fs.log.check_meta_space(OpKind::Grow).is_ok()
            && let Ok(mut rec) = fs.inode_mut(ino)
        {
            rec.atime = now;
        }
        Touch::Settled
    }

    /// Finishes an update [`Volume::touch_atime_locked`] could not do: commits,
    /// then tries once more. Called without locks.
    pub(super) fn touch_atime_after(&self, ino: InodeNo, touch: Touch) {
        if touch == Touch::AfterCommit && self.commit_for_room().is_ok() {
            let _ = self.touch_atime_locked(&mut lock(&self.fs), ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(atime: i64, mtime: i64, ctime: i64) -> InodeRecord {
        InodeRecord {
            atime: Timestamp::new(atime, 0),
            mtime: Timestamp::new(mtime, 0),
            ctime: Timestamp::new(ctime, 0),
            ..InodeRecord::default()
        }
    }

    #[test]
    fn relatime_updates_after_a_change_or_a_day() {
        let now = Timestamp::new(1_000_000, 0);
        let r = AtimeMode::Relatime;
        assert!(atime_due(&rec(500, 500, 400), now, r), "atime == mtime");
        assert!(atime_due(&rec(500, 400, 600), now, r), "changed since read");
        assert!(!atime_due(&rec(999_000, 400, 400), now, r), "read since the change, within a day");
        assert!(atime_due(&rec(1_000_000 - 86_400, 400, 400), now, r), "a day old");
        assert!(!atime_due(&rec(1_000_000, 1_000_000, 1_000_000), now, r), "already now");
    }

    #[test]
    fn strictatime_always_and_noatime_never() {
        let now = Timestamp::new(1_000_000, 0);
        let read = rec(999_999, 400, 400);
        assert!(atime_due(&read, now, AtimeMode::StrictAtime));
        assert!(!atime_due(&rec(500, 600, 600), now, AtimeMode::NoAtime));
    }
}
