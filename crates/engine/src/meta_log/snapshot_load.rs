//! What a mount reads of the snapshot list: every kept tree's record, its
//! pins and what it holds, lazily where the records carry them.

use std::collections::BTreeSet;

use super::Log;
use super::snapshot::SnapshotInfo;
use crate::error::{Error, Result};
use crate::format::block::{self, BlockKind};
use crate::format::snapshot::{SnapshotList, SnapshotRecord};
use crate::format::superblock::{INCOMPAT_CLONES, INCOMPAT_SNAPSHOTS};
use crate::types::{MetaBlock, SegmentNo};

impl Log {
    /// Reads the snapshot list a checkpoint names and what every kept
    /// tree pins and holds. A mount (the live bitmap left on disk) of a
    /// list carrying the held count reads each record's pins and leaves
    /// every bitmap on disk ([`Log::hold_snapshots_lazily`]); otherwise
    /// (fsck, an older volume) each image is loaded and walked, and what
    /// the records say is checked against it. An image's inode map of
    /// `lazy_from` blocks or more is left on disk, as the live one is,
    /// and read without being kept to count what it reaches.
    pub(crate) fn load_snapshots(&mut self, list_at: MetaBlock, lazy_from: Option<usize>) -> Result<()> {
        if self.sb.incompat & INCOMPAT_SNAPSHOTS == 0 {
            return Err(Error::corrupt_meta(
                "checkpoint",
                0,
                "names a snapshot list on a volume without the SNAPSHOTS feature",
            ));
        }
        let raw = self.read_meta(list_at, 1)?;
        let (_, payload) = block::open_block_of_kind(&raw, list_at, self.volume_id, BlockKind::SnapshotList)
            .map_err(|e| Error::corrupt_meta("snapshot list", list_at.0, e.0))?;
        let list = SnapshotList::decode(payload).map_err(|e| Error::corrupt_meta("snapshot list", list_at.0, e.0))?;
        let records = self.snapshot_records_on();
        if list.held_free.is_some() && !records {
            return Err(Error::corrupt_meta(
                "snapshot list",
                list_at.0,
                "carries a held count on a volume without the SNAPSHOT_RECORDS feature",
            ));
        }
        // Lazily: a mount, and the list carries what no mount should count.
        let lazy = !self.space.fully_loaded() && list.held_free.is_some();
        let mut all = Vec::with_capacity(list.entries.len());
        let mut problems = Vec::new();
        for e in &list.entries {
            let raw = self.read_meta(e.address, 1)?;
            let (h, payload) = block::open_block_of_kind(&raw, e.address, self.volume_id, BlockKind::Snapshot)
                .map_err(|err| Error::corrupt_meta("snapshot block", e.address.0, err.0))?;
            let rec = SnapshotRecord::decode(payload)
                .map_err(|err| Error::corrupt_meta("snapshot block", e.address.0, err.0))?;
            if h.name != e.id || rec.id != e.id {
                return Err(Error::corrupt_meta("snapshot block", e.address.0, "is not the snapshot the list names"));
            }
            if rec.pins.is_some() && !records {
                return Err(Error::corrupt_meta(
                    "snapshot block",
                    e.address.0,
                    "carries pins on a volume without the SNAPSHOT_RECORDS feature",
                ));
            }
            if lazy && let Some(info) = self.info_from_record(&rec, e.address)? {
                all.push(info);
                continue;
            }
            let info = self.open_image_with(&rec.checkpoint, lazy_from).and_then(|image| {
                image.info_from(rec.id, rec.name.clone(), rec.created, e.address, rec.checkpoint.clone())
            });
            match info {
                Ok(info) => {
                    let mut info = SnapshotInfo {
                        writable: rec.writable,
                        // A record unable to hold its pins is not rewritten.
                        recorded: rec.pins.is_some() || (records && !rec.pins_fit(self.sb.index_runs())),
                        ..info
                    };
                    if let Some(s) = self.ifile.geometry().segment_of(e.address) {
                        info.segments.insert(s);
                    }
                    problems.extend(self.check_record(&rec, &info));
                    if lazy {
                        // Walked for its pins; its bitmap stays on disk.
                        info.bitmap = Vec::new();
                        info.lazy = true;
                    }
                    all.push(info);
                }
                Err(err) => {
                    // Damage to one snapshot must not cost the volume: it is
                    // kept (and its own blocks pinned) for fsck to name and
                    // the user to delete; what its image reached is unknown.
                    log::error!("snapshot {} is damaged: its image does not load: {err}", rec.name);
                    let geometry = self.ifile.geometry();
                    let segments: BTreeSet<SegmentNo> = std::iter::once(e.address)
                        .chain(rec.checkpoint.index.iter().map(|r| r.address))
                        .filter_map(|a| geometry.segment_of(a))
                        .collect();
                    all.push(SnapshotInfo {
                        id: rec.id,
                        name: rec.name,
                        created: rec.created,
                        address: e.address,
                        checkpoint: rec.checkpoint,
                        segments,
                        meta_blocks: 0,
                        bitmap: Vec::new(),
                        writable: rec.writable,
                        lazy: false,
                        damaged: true,
                        recorded: true,
                    });
                }
            }
        }
        if let Some(live) = &list.live_name
            && all.iter().any(|s| &s.name == live)
        {
            return Err(Error::corrupt_meta(
                "snapshot list",
                list_at.0,
                format!("names the live tree {live}, and a kept snapshot or tree of that name"),
            ));
        }
        if (list.live_name.is_some() || all.iter().any(|s| s.writable)) && self.sb.incompat & INCOMPAT_CLONES == 0 {
            return Err(Error::corrupt_meta(
                "snapshot list",
                list_at.0,
                "names writable trees on a volume without the CLONES feature",
            ));
        }
        self.snaps = super::snapshot::Snapshots {
            list: Some(list_at),
            next_id: list.next_id,
            all,
            live_name: list.live_name,
            list_held: list.held_free,
            record_problems: problems,
            ..Default::default()
        };
        if let (true, Some(held_free)) = (lazy, list.held_free) {
            self.recount_pins();
            return self.hold_snapshots_lazily(held_free);
        }
        if !self.snaps.all.is_empty() {
            // The held set is counted against the live bitmap, word by word;
            // the segments snapshots keep are counted out of the free ones.
            self.space.load_all()?;
            self.load_segment_usage()?;
        }
        self.repin_snapshots();
        self.check_held_count(list.held_free);
        Ok(())
    }
}
