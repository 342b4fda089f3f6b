//! Writable clones through the volume (DESIGN.md, "Writable clones"): make
//! one from a snapshot, and make one the live tree before a mount.

use super::{Volume, lock};
use crate::error::{Error, Result};
use crate::format::superblock::{INCOMPAT_CLONES, INCOMPAT_SNAPSHOTS};
use crate::meta_log::Log;
use crate::namespace::pages::WriteBack;

impl Volume {
    /// Makes `name` a writable clone of snapshot (or kept tree) `source`.
    /// Atomic as a snapshot is: one checkpoint records it. The clone shares
    /// every block with its source and depends on nothing: deleting the
    /// source later frees only what neither holds. Returns its id.
    ///
    /// # Errors
    /// A bad or taken name, no such source, a read-only volume, or a device
    /// fails.
    pub fn clone_create(&self, source: &str, name: &str) -> Result<u64> {
        self.check_writable()?;
        if let Some(why) = lock(&self.fs).log.snapshot_refusal(name) {
            return Err(Error::SnapshotRefused(why));
        }
        let mut c = lock(&self.commit);
        self.mark_features(INCOMPAT_SNAPSHOTS | INCOMPAT_CLONES, 4)?;
        let now = self.now();
        let id = lock(&self.fs).log.stage_clone(source, name, now)?;
        self.commit_locked(&mut c, WriteBack::All)?;
        self.checkpoint_locked(&mut c, WriteBack::All)?;
        Ok(id)
    }

    /// The live tree's name ([`crate::format::snapshot::DEFAULT_TREE`]
    /// until a clone is mounted).
    #[must_use]
    pub fn live_tree(&self) -> String {
        lock(&self.fs).log.live_tree_name().to_string()
    }

    /// Makes kept tree `name` the live one, keeping the live tree under its
    /// own name, and closes the volume: open it again to use the tree.
    /// Nothing happens if `name` is live already. The live tree is closed
    /// first (a checkpoint: what its record keeps); the switch is then one
    /// checkpoint, whose slot write is the commit point.
    ///
    /// # Errors
    /// No such tree, a read-only snapshot, a read-only volume, or a device
    /// fails.
    pub fn switch_tree(self, name: &str) -> Result<()> {
        if self.live_tree() == name {
            return self.close();
        }
        self.check_writable()?;
        // Refused before anything is written.
        {
            let fs = lock(&self.fs);
            match fs.log.snapshots().iter().find(|s| s.name == name) {
                None => return Err(Error::NoSnapshot(name.to_string())),
                Some(s) if !s.writable => {
                    return Err(Error::SnapshotRefused(format!(
                        "{name} is a read-only snapshot: make a writable clone of it (dualfs clone {name} NEW) \
                         and mount that"
                    )));
                }
                Some(_) => {}
            }
        }
        let (meta, data, clock) = (self.meta.clone(), self.data.clone(), self.clock.clone());
        self.close()?;
        let (mut log, _) = Log::open(meta.clone(), data.clone())?;
        log.stage_switch(name, clock.now())?;
        let sealed = log.seal_checkpoint(clock.now())?;
        sealed.write(&meta, &data)?;
        log.complete_checkpoint(&sealed);
        Ok(())
    }
}
