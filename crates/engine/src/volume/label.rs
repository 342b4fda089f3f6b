//! The volume's label while it is mounted (`FS_IOC_GETFSLABEL`,
//! `FS_IOC_SETFSLABEL`): the superblocks' label field, which mkfs and
//! `dualfs tune` set on an unmounted volume.

use super::{Volume, lock};
use crate::error::{Error, Result};

impl Volume {
    /// The label (empty when none was given).
    #[must_use]
    pub fn label(&self) -> String {
        lock(&self.fs).log.superblock_on_disk().label_str()
    }

    /// Sets the label: both superblocks written and flushed, the meta-data
    /// device's first (a crash between leaves the data device's copy
    /// stale, which the next open writes again).
    ///
    /// # Errors
    /// `Invalid` for a label over 64 bytes or with a NUL; read-only; a
    /// device fails.
    pub fn set_label(&self, label: &str) -> Result<()> {
        // Superblocks are written by one resize, migration or label at a time.
        let _one_at_a_time = lock(&self.cleaning);
        self.check_writable()?;
        let mut sb = lock(&self.fs).log.superblock_on_disk().clone();
        sb.set_label(label).map_err(|_| Error::Invalid("a label is at most 64 bytes, without NUL"))?;
        self.write_superblocks(&sb)
    }
}
