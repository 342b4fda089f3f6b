//! Snapshots through the volume: make, delete and list them, and open one
//! read-only beside the live volume (DESIGN.md, "Snapshots").

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{MountOptions, Volume, lock};
use crate::device::{self, BlockDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::format::superblock::{
    FORMAT_MINOR_SNAPSHOT_RECORDS, INCOMPAT_FSYNC_LOG, INCOMPAT_SNAPSHOT_RECORDS, INCOMPAT_SNAPSHOTS, Role, Superblock,
};
use crate::meta_log::Log;
use crate::meta_log::mount::OpenReport;
use crate::meta_log::snapshot::{SnapshotInfo, SnapshotSpace};
use crate::namespace::pages::WriteBack;
use crate::types::{BLOCK_BYTES, Timestamp};

/// What `dualfs snapshot list` shows of one snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotView {
    /// Its id (never reused on the volume).
    pub id: u64,
    /// Its name.
    pub name: String,
    /// When it was made.
    pub created: Timestamp,
    /// The checkpoint it keeps.
    pub checkpoint: u64,
    /// Bytes of data only it holds: what deleting it frees on the data device.
    pub data_only_bytes: u64,
    /// Bytes of data it shares with the live volume or other snapshots.
    pub data_shared_bytes: u64,
    /// Bytes of meta-data segments only it keeps.
    pub meta_only_bytes: u64,
    /// Meta-data blocks its image reaches.
    pub meta_blocks: u64,
    /// A writable tree (a clone, or a tree once live), not a snapshot.
    pub writable: bool,
}

impl Volume {
    /// Makes snapshot `name` of the volume as it is now: every change made
    /// before the call is in it, none made after. Atomic: the checkpoint
    /// that records it is one slot write; a crash before it leaves no
    /// snapshot, after it a whole one. Returns its id.
    ///
    /// # Errors
    /// A bad or taken name, too many snapshots, a read-only volume, a
    /// receive under way (its tree is incomplete), or a device fails.
    pub fn snapshot_create(&self, name: &str) -> Result<u64> {
        self.check_writable()?;
        self.refuse_while_receiving(&format!("snapshot {name} is not made"))?;
        if let Some(why) = lock(&self.fs).log.snapshot_refusal(name) {
            return Err(Error::SnapshotRefused(why));
        }
        let mut c = lock(&self.commit);
        self.mark_features(INCOMPAT_SNAPSHOTS, 3)?;
        self.mark_snapshot_records()?;
        // The snapshot keeps the checkpoint written here: the commit lock
        // is held from it to the one recording the snapshot, so that no
        // commit or fsync decides where data goes in between (the data
        // device is as that checkpoint's bitmap says).
        self.commit_locked(&mut c, WriteBack::All)?;
        self.checkpoint_locked(&mut c, WriteBack::All)?;
        {
            let now = self.now();
            let mut fs = lock(&self.fs);
            fs.log.stage_snapshot(name, now)?;
        }
        self.checkpoint_locked(&mut c, WriteBack::All)?;
        drop(c);
        // Its id only: counting its space is a pass over every snapshot's
        // bitmap, which `snapshot list` makes when asked.
        let fs = lock(&self.fs);
        fs.log
            .snapshots()
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.id)
            .ok_or_else(|| Error::SnapshotRefused(format!("snapshot {name} was not recorded")))
    }

    /// Deletes snapshot `name`: with the checkpoint that records it, the
    /// segments only it kept become free; the data blocks only it kept
    /// with the checkpoint after that one, written before the call
    /// returns (with `-o discard` they are discarded by then).
    ///
    /// # Errors
    /// No such snapshot, one in use beside the live tree
    /// ([`Volume::open_tree`]), the base of a receive under way, a
    /// read-only volume, or a device fails.
    pub fn snapshot_delete(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        if let Some(id) = self.receive_base()
            && self.snapshot_list().iter().any(|s| s.id == id && s.name == name)
        {
            return Err(Error::SnapshotRefused(format!(
                "{name} is the base of the receive under way on this volume, the tree it goes back to: finish \
                 the receive (receive the same stream again) or abandon it (`dualfs receive --abort`) first"
            )));
        }
        let mut c = lock(&self.commit);
        {
            let mut fs = lock(&self.fs);
            self.refuse_tree_in_use(name, "deleted")?;
            self.refuse_tree_held(name, "deleted")?;
            fs.log.stage_snapshot_delete(name)?;
        }
        self.commit_locked(&mut c, WriteBack::All)?;
        self.checkpoint_locked(&mut c, WriteBack::All)?;
        // The checkpoint before that one, which a mount falls back to when
        // the newer slot is lost, still lists the snapshot: its blocks are
        // let go by the next checkpoint, written now so that the space is
        // back when the call returns. What the first one made free goes to
        // the device meanwhile, as a turn of the background writer may.
        self.discard_queued();
        if lock(&self.fs).log.deleted_snapshots_retiring() {
            self.checkpoint_locked(&mut c, WriteBack::All)?;
        }
        drop(c);
        self.discard_queued();
        Ok(())
    }

    /// The snapshots, oldest first, with the space each holds.
    #[must_use]
    pub fn snapshot_list(&self) -> Vec<SnapshotView> {
        let mut fs = lock(&self.fs);
        // Counting each one's space takes every bitmap whole (a mount
        // left them on disk).
        if let Err(e) = fs.log.load_snapshot_bitmaps() {
            log::error!("the snapshots' bitmaps cannot be read to count their space: {e}");
        }
        let log = &fs.log;
        let segment_bytes = u64::from(log.superblock().segment_blocks) * BLOCK_BYTES;
        log.snapshots().iter().zip(log.snapshot_spaces()).map(|(s, space)| view(s, space, segment_bytes)).collect()
    }

    /// Snapshot `name` with the space it holds.
    #[must_use]
    pub fn snapshot_view(&self, name: &str) -> Option<SnapshotView> {
        self.snapshot_list().into_iter().find(|s| s.name == name)
    }
}

/// What `snapshot list` shows of snapshot `s`.
fn view(s: &SnapshotInfo, space: SnapshotSpace, segment_bytes: u64) -> SnapshotView {
    SnapshotView {
        id: s.id,
        name: s.name.clone(),
        created: s.created,
        checkpoint: s.checkpoint.number,
        data_only_bytes: space.data_only * BLOCK_BYTES,
        data_shared_bytes: space.data_shared * BLOCK_BYTES,
        meta_only_bytes: space.meta_segments_only * segment_bytes,
        meta_blocks: s.meta_blocks,
        writable: s.writable,
    }
}

impl Volume {
    /// Sets `INCOMPAT_SNAPSHOT_RECORDS` (format 1.11) before the first
    /// record of a volume made for current readers (with the fsync log):
    /// one made for older readers stays readable by them.
    pub(super) fn mark_snapshot_records(&self) -> Result<()> {
        if lock(&self.fs).log.superblock().incompat & INCOMPAT_FSYNC_LOG == 0 {
            return Ok(());
        }
        self.mark_features(INCOMPAT_SNAPSHOT_RECORDS, FORMAT_MINOR_SNAPSHOT_RECORDS)
    }

    /// Sets `bits` (`INCOMPAT_SNAPSHOTS`, format 1.3; `INCOMPAT_CLONES`,
    /// 1.4: `minor`) on both superblocks the first time: the meta-data copy
    /// first, then the data copy, each flushed (as `dualfs tune` does).
    /// Before any snapshot or clone is recorded, so that no reader unaware
    /// of them ever reuses what one keeps.
    pub(super) fn mark_features(&self, bits: u64, minor: u16) -> Result<()> {
        let mut fs = lock(&self.fs);
        let sb = self.degraded_superblock(fs.log.superblock().clone());
        if sb.incompat & bits == bits {
            // The data copy may lack the bit still (a crash between the two
            // writes, which mount accepts): it is written again then.
            let want = Superblock { role: Role::Data, ..sb }.encode();
            let have = device::read(self.data.as_ref(), DeviceRole::Data, 0, 1)?;
            if have != want {
                let written = device::write(self.data.as_ref(), DeviceRole::Data, 0, &want)
                    .and_then(|()| device::flush(self.data.as_ref(), DeviceRole::Data));
                if let Err(e) = written {
                    drop(fs);
                    self.fail(&e);
                    return Err(e);
                }
            }
            return Ok(());
        }
        let new = Superblock { incompat: sb.incompat | bits, minor: sb.minor.max(minor), ..sb };
        let written = device::write(self.meta.as_ref(), DeviceRole::Meta, 0, &new.encode())
            .and_then(|()| device::flush(self.meta.as_ref(), DeviceRole::Meta))
            .and_then(|()| {
                let data_copy = Superblock { role: Role::Data, ..new.clone() };
                device::write(self.data.as_ref(), DeviceRole::Data, 0, &data_copy.encode())
            })
            .and_then(|()| device::flush(self.data.as_ref(), DeviceRole::Data));
        if let Err(e) = written {
            drop(fs);
            self.fail(&e);
            return Err(e);
        }
        fs.log.set_superblock(new);
        Ok(())
    }

    /// Opens snapshot `name` of the volume on `meta` and `data`, read-only:
    /// the IFile its checkpoint names, with no roll-forward (the snapshot
    /// is that checkpoint). The live volume may be mounted meanwhile: what
    /// a snapshot reaches is never moved nor overwritten while it exists.
    ///
    /// # Errors
    /// No such snapshot; the volume or the snapshot's image cannot be read.
    pub fn open_snapshot(
        meta: Arc<dyn BlockDevice>,
        data: Arc<dyn BlockDevice>,
        name: &str,
        options: MountOptions,
    ) -> Result<Volume> {
        let (live, live_report) = Log::open(meta.clone(), data.clone())?;
        let Some(s) = live.snapshots().iter().find(|s| s.name == name) else {
            return Err(Error::NoSnapshot(name.to_string()));
        };
        if s.writable {
            // Mounting that tree would move what this mount reads.
            return Err(Error::SnapshotRefused(format!(
                "{name} is a writable tree, not a snapshot: mount it with -o clone={name}"
            )));
        }
        let image = live.open_image(&s.checkpoint)?;
        drop(live);
        Volume::over_image(image, live_report, meta, data, name, options)
    }

    /// A read-only volume over a snapshot's image, loaded whole (by
    /// [`Log::open_image`]) beside the live volume, whose open said
    /// `live_report`.
    ///
    /// # Errors
    /// Replaying nothing cannot fail; kept for [`Volume::assemble`]'s.
    pub(super) fn over_image(
        image: Log,
        live_report: OpenReport,
        meta: Arc<dyn BlockDevice>,
        data: Arc<dyn BlockDevice>,
        name: &str,
        options: MountOptions,
    ) -> Result<Volume> {
        let options = MountOptions { read_only: true, ..options };
        // What opening the live volume found is not the snapshot's: its
        // image was loaded whole, with nothing to roll forward.
        let report = OpenReport {
            checkpoint: image.checkpoint_number(),
            fell_back: None,
            damage: Vec::new(),
            loss: None,
            recounted: Vec::new(),
            superblock_repair: None,
            ..live_report
        };
        let why = format!("snapshot {name} is read-only");
        let vol = Volume::assemble(image, report, meta, data, options, Some(why), super::SystemClock::shared())?;
        debug_assert!(vol.no_writes.load(Ordering::Acquire));
        Ok(vol)
    }
}
