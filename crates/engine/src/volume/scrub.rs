//! Scrub of a mounted volume: the check layer's scrub with the volume's
//! locks. The list of live blocks is made under the file system's lock;
//! the blocks are read without it, so requests go on meanwhile; a block
//! that fails is looked at again under the commit lock too, when no
//! commit group or checkpoint is half written. A mirrored volume's copies
//! are read one by one from the mirror the mount runs on, and a block bad
//! on one is mended from the other under the mirror's write lock.

use std::sync::Arc;

use super::{Volume, lock};
use crate::check::scrub::{self, ScrubHost};
use crate::device::{BlockDevice, MirrorDevice};
use crate::error::Result;
use crate::meta_log::Log;

pub use crate::check::scrub::{BadMeta, DataError, ScrubOptions, ScrubReport};

impl ScrubHost for Volume {
    fn with_log<R>(&self, settled: bool, f: impl FnOnce(&mut Log) -> R) -> R {
        // Lock order: commit before fs.
        let _commit = settled.then(|| lock(&self.commit));
        f(&mut lock(&self.fs).log)
    }

    fn meta(&self) -> Arc<dyn BlockDevice> {
        self.meta.clone()
    }

    fn data(&self) -> Arc<dyn BlockDevice> {
        self.data.clone()
    }

    fn mirror(&self) -> Option<Arc<MirrorDevice>> {
        self.attached().as_ref().and_then(|a| a.mirror.clone())
    }

    fn degraded(&self) -> Option<String> {
        self.degraded_because()
    }
}

impl Volume {
    /// Scrubs the volume while it stays in use (see
    /// [`crate::check::scrub`]), after a commit, so that it reads what was
    /// written before it began. `progress(done, total)` in bytes; false
    /// stops it.
    ///
    /// # Errors
    /// The commit fails, or the maps cannot be read.
    pub fn scrub(&self, opts: ScrubOptions, progress: &mut dyn FnMut(u64, u64) -> bool) -> Result<ScrubReport> {
        if !self.is_read_only() {
            self.commit()?;
        }
        scrub::scrub(self, opts, progress)
    }
}
