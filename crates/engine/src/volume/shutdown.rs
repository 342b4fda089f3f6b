//! Shutting a volume down while it is mounted (`FS_IOC_SHUTDOWN`,
//! xfstests' godown): what was handed to the volume goes to the log, then
//! every call fails and nothing more is written, until the volume is
//! closed; the next open recovers by roll-forward as after a crash
//! (DESIGN.md, "Shutting down a mounted volume").

use std::sync::atomic::Ordering;

use super::{Volume, lock};
use crate::error::{Error, Result};
use crate::namespace::pages::WriteBack;

impl Volume {
    /// Shuts the volume down: commits what it was handed (as XFS's
    /// shutdown that flushes its log), then fails every call with
    /// [`Error::ShutDown`] and writes nothing more; [`Volume::close`] then
    /// writes no checkpoint. Shutting down twice is harmless.
    ///
    /// # Errors
    /// The last commit failed (the volume is shut down all the same: what
    /// it could not write is lost as in a crash).
    pub fn shut_down(&self) -> Result<()> {
        let mut c = lock(&self.commit);
        if self.is_shut_down() {
            return Ok(());
        }
        let flushed =
            if self.no_writes.load(Ordering::Acquire) { Ok(()) } else { self.commit_locked(&mut c, WriteBack::All) };
        // With the commit lock held, no commit is under way: none follows.
        {
            let _fs = lock(&self.fs);
            self.shut.store(true, Ordering::Release);
            self.no_writes.store(true, Ordering::Release);
        }
        match &flushed {
            Ok(()) => log::warn!("DualFS volume shut down: what it was handed is in its log; nothing more is written"),
            Err(e) => log::error!("DualFS volume shut down; its last commit failed ({e}): the next mount recovers"),
        }
        flushed
    }

    /// Whether [`Volume::shut_down`] ran.
    #[must_use]
    pub fn is_shut_down(&self) -> bool {
        self.shut.load(Ordering::Acquire)
    }

    /// [`Error::ShutDown`] once the volume is shut down.
    pub(super) fn check_up(&self) -> Result<()> {
        if self.is_shut_down() { Err(Error::ShutDown) } else { Ok(()) }
    }
}
