//! Writable clones through the volume (DESIGN.md, "Writable clones"): make
//! one from a snapshot, and make one the live tree before a mount.

use std::sync::PoisonError;
use std::time::Instant;

use super::gate::SwitchPart;
use super::{Volume, lock};
use crate::error::{Error, Result};
use crate::faults::{self, Fault};
use crate::format::superblock::{INCOMPAT_CLONES, INCOMPAT_SNAPSHOTS};
use crate::namespace::Fs;
use crate::namespace::intents::Intents;
use crate::namespace::pages::WriteBack;
use crate::namespace::refs::Refs;

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
        self.mark_snapshot_records()?;
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

    /// Makes kept tree `name` the live one, keeping the live tree under
    /// its own name. Nothing happens if `name` is live already. Everything
    /// is committed and checkpointed first (what the outgoing tree's record
    /// keeps); the switch is then one checkpoint, whose slot write is the
    /// commit point: a crash before it shows the old tree, after it the new
    /// one, and each tree whole. Nothing may hold an inode of the volume
    /// (no open file, no kernel lookup): the same numbers name other files
    /// in the other tree.
    ///
    /// # Errors
    /// No such tree, a read-only snapshot, a tree or a volume in use, a
    /// read-only volume, a receive under way on the live tree, or a device
    /// fails.
    pub fn switch_tree(&self, name: &str) -> Result<()> {
        if self.live_tree() == name {
            return Ok(());
        }
        self.switch_live(name, true, &mut |_, _| {})?;
        // Whatever the gate entered last, the live tree is what the log
        // names now.
        self.gate_forget_entered();
        Ok(())
    }

    /// Makes kept tree `name` the live one (as [`Volume::switch_tree`]);
    /// `carry` is handed the outgoing tree's name and the references held
    /// in it, to keep, and leaves there those of the incoming tree. A
    /// `plain` switch is refused while anything holds a file or a view
    /// uses the incoming tree; the gate's switch carries both.
    pub(super) fn switch_live(&self, name: &str, plain: bool, carry: &mut dyn FnMut(&str, &mut Refs)) -> Result<()> {
        self.check_writable()?;
        if plain {
            self.refuse_tree_in_use(name, "made the live tree")?;
        }
        self.refuse_while_receiving(&format!("{name} is not made the live tree"))?;
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
            if plain && (fs.referenced_count() > 0 || !fs.replacing.is_empty()) {
                return Err(Error::SnapshotRefused(format!(
                    "the volume is in use ({} inodes referenced): mount {name} when nothing holds a file",
                    fs.referenced_count()
                )));
            }
        }
        let costs = &self.gate.costs;
        let t = Instant::now();
        let mut c = lock(&self.commit);
        costs.part(SwitchPart::Locks, t);
        let t = Instant::now();
        let before = lock(&self.fs).log.stats().data_blocks_written;
        self.commit_locked(&mut c, WriteBack::All)?;
        costs.commit_data(lock(&self.fs).log.stats().data_blocks_written.saturating_sub(before));
        costs.part(SwitchPart::Commit, t);
        let t = Instant::now();
        self.checkpoint_locked(&mut c, WriteBack::All)?;
        costs.part(SwitchPart::Checkpoint, t);
        let t = Instant::now();
        let now = self.now();
        let _home = lock(&self.home);
        let _reuse = self.reuse.write().unwrap_or_else(PoisonError::into_inner);
        let mut fs = lock(&self.fs);
        if fs.pages.dirty_bytes() > 0 || !fs.replacing.is_empty() {
            // Written back and released by the checkpoint above: a page
            // left dirty would be lost with the outgoing tree's namespace
            // state.
            return Err(Error::SnapshotRefused(format!("{name}: file data is still being written; try again")));
        }
        if plain {
            self.refuse_tree_in_use(name, "made the live tree")?;
        } else {
            self.refuse_tree_viewed(name)?;
        }
        let outgoing = fs.log.live_tree_name().to_string();
        fs.log.stage_switch(name, now)?;
        // What the namespace kept of the outgoing tree's files goes; the
        // references held in it stay with it.
        fs.pages = fs.pages.emptied();
        fs.intents = Intents::default();
        carry(&outgoing, fs.refs_mut());
        let written = if faults::active(Fault::SwitchListLater) {
            // Broken on purpose: the maps in one checkpoint, the list in
            // the next (a crash between shows the new tree under the old
            // name, and the old tree nowhere).
            let pending = fs.log.take_pending_list_change();
            let first = self.write_checkpoint(&mut fs, now);
            fs.log.restore_pending_list_change(pending);
            first.and_then(|()| self.write_checkpoint(&mut fs, now))
        } else {
            self.write_checkpoint(&mut fs, now)
        };
        if let Err(e) = &written {
            drop(fs);
            self.fail(e);
            return written;
        }
        drop(fs);
        // The incoming tree's limits and usage.
        let started = self.start_quotas();
        costs.part(SwitchPart::Switch, t);
        started
    }

    /// Seals, writes and completes a checkpoint of a log with nothing dirty.
    fn write_checkpoint(&self, fs: &mut Fs, now: crate::types::Timestamp) -> Result<()> {
        let sealed = fs.log.seal_checkpoint(now)?;
        sealed.write(&self.meta, &self.data)?;
        fs.log.complete_checkpoint(&sealed);
        Ok(())
    }
}
