//! Writable trees in one log (DESIGN.md, "Writable clones"): a clone is a
//! snapshot record marked writable, and mounting it makes it the live tree
//! while the tree that was live is kept as such a record. The log, its
//! segment usage and the data device stay one; what changes is which
//! inode map, node map, bitmap and group descriptors are the live ones.

use super::Log;
use super::snapshot::{Pending, SnapshotInfo};
use crate::error::{Error, Result};
use crate::format::checkpoint::Checkpoint;
use crate::format::snapshot::{self, DEFAULT_TREE};
use crate::types::{MetaBlock, Timestamp};

impl Log {
    /// The live tree's name the checkpoint being sealed records.
    pub(super) fn pending_live_name(&self) -> Option<String> {
        match &self.snaps.pending {
            Some(Pending::Switch { name, .. }) => (name != DEFAULT_TREE).then(|| name.clone()),
            _ => self.snaps.live_name.clone(),
        }
    }

    /// Makes `name` a writable clone of snapshot or kept tree `source`
    /// with the next checkpoint. It shares every block with its source and
    /// depends on nothing: its record keeps what its image reaches, so the
    /// source may be deleted first. Returns its id.
    ///
    /// # Errors
    /// A bad or taken name, no such source, the live tree as source, or a
    /// damaged source.
    pub fn stage_clone(&mut self, source: &str, name: &str, now: Timestamp) -> Result<u64> {
        if let Some(why) = self.snapshot_refusal(name) {
            return Err(Error::SnapshotRefused(why));
        }
        // Its bitmap is held already; a change of the list reads them all.
        self.load_snapshot_bitmaps()?;
        let Some(s) = self.snaps.all.iter().find(|s| s.name == source) else {
            if self.live_tree_name() == source {
                return Err(Error::SnapshotRefused(format!(
                    "{source} is the live tree: snapshot it first (dualfs snapshot create), then clone the snapshot"
                )));
            }
            return Err(Error::NoSnapshot(source.to_string()));
        };
        if s.bitmap.is_empty() {
            return Err(Error::SnapshotRefused(format!("{source} is damaged: its image does not load")));
        }
        let id = self.snaps.next_id.max(1);
        let info = SnapshotInfo {
            id,
            name: name.to_string(),
            created: now,
            address: MetaBlock(0),
            writable: true,
            ..s.clone()
        };
        for seg in &info.segments {
            *self.snaps.pins.entry(*seg).or_default() += 1;
        }
        // Its bitmap is its source's, held already.
        self.snaps.pending = Some(Pending::Create(Box::new(info)));
        Ok(id)
    }

    /// Makes kept tree `name` the live one with the next checkpoint, and
    /// keeps the live tree as a writable record under its own name. The
    /// caller has just written a checkpoint with nothing after it: that
    /// checkpoint is what the outgoing tree keeps. The IFile's maps, the
    /// bitmap and the group descriptors become the incoming tree's (all
    /// rewritten by the checkpoint, which is the commit point: a crash
    /// before its slot mounts the old tree, after it the new one).
    ///
    /// # Errors
    /// No such tree, a read-only snapshot, a damaged image, a full list,
    /// or meta-data not yet checkpointed.
    pub fn stage_switch(&mut self, name: &str, now: Timestamp) -> Result<()> {
        self.load_snapshot_bitmaps()?;
        let Some(target) = self.snaps.all.iter().find(|s| s.name == name).cloned() else {
            return Err(Error::NoSnapshot(name.to_string()));
        };
        if !target.writable {
            return Err(Error::SnapshotRefused(format!(
                "{name} is a read-only snapshot: make a writable clone of it (dualfs clone {name} NEW) and mount that"
            )));
        }
        if target.bitmap.is_empty() {
            return Err(Error::SnapshotRefused(format!("{name} is damaged: its image does not load")));
        }
        if self.snaps.all.len() > snapshot::MAX_SNAPSHOTS_NAMED {
            return Err(Error::SnapshotRefused(format!(
                "the volume holds {} snapshots and trees; mounting a clone needs at most {}",
                self.snaps.all.len(),
                snapshot::MAX_SNAPSHOTS_NAMED
            )));
        }
        if self.has_dirty() || self.snaps.pending.is_some() {
            return Err(Error::SnapshotRefused("the volume has changes not checkpointed".into()));
        }
        // (A snapshot record keeps no tail: its image is read whole.)
        let Some(c) = self.last_record.clone().map(|c| Checkpoint { sparse: None, ..c }) else {
            return Err(Error::SnapshotRefused("no checkpoint was written to keep".into()));
        };
        // The outgoing tree's inode map is not read whole: what it reaches
        // is counted from its blocks on disk, and the incoming map's blocks
        // are compared with its blocks by address where they are not in
        // memory (`Table::adopt`). The incoming tree's map is held whole
        // until the switch's checkpoint, its commit point, has written the
        // blocks that differ (DESIGN.md, "The inode map is held within a
        // budget").
        self.space.load_all()?;
        self.load_ifile_index()?;
        self.load_segment_usage()?;
        let image = self.open_image(&target.checkpoint)?;
        // What the outgoing tree reaches is counted before its maps go.
        let id = self.snaps.next_id.max(1);
        let keep = SnapshotInfo {
            writable: true,
            ..self.info_from(id, self.live_tree_name().to_string(), now, MetaBlock(0), c)?
        };
        for seg in &keep.segments {
            *self.snaps.pins.entry(*seg).or_default() += 1;
        }
        self.space.add_held(&keep.bitmap);
        self.space.adopt_tree(image.space);
        self.ifile.adopt_tree(image.ifile);
        // Inode numbers and node ids name the incoming tree's objects now.
        self.cache.clear();
        self.snaps.pending = Some(Pending::Switch { keep: Box::new(keep), live: target.id, name: name.to_string() });
        self.recount_free_segments();
        Ok(())
    }

    /// Takes the pending list change out (the `SwitchListLater` fault).
    pub(crate) fn take_pending_list_change(&mut self) -> Option<Pending> {
        self.snaps.pending.take()
    }

    /// Puts a pending list change back.
    pub(crate) fn restore_pending_list_change(&mut self, pending: Option<Pending>) {
        self.snaps.pending = pending;
    }
}
