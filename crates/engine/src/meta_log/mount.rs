//! Bringing a log into memory: a fresh one for mkfs, or an existing one
//! from its superblocks, newest valid checkpoint and roll-forward.

use std::sync::Arc;

use super::checkpoint::DurableCheckpoint;
use super::recovery::RecoveryReport;
use super::{Log, LogStats, MetaCache};
use crate::data_space::DataSpace;
use crate::device::{self, BlockDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::format::checkpoint::{Checkpoint, LogPosition};
use crate::format::superblock::{CHECKPOINT_SLOTS, Role, Superblock};
use crate::ifile::{IFile, SegmentGeometry};
use crate::types::{SegmentNo, Seq};

/// What `Log::open` found.
#[derive(Clone, Debug)]
pub struct OpenReport {
    /// Number of the checkpoint mounted from.
    pub checkpoint: u64,
    /// Whether the newest slot was unusable and the older one was taken.
    pub fell_back: Option<String>,
    /// The roll-forward.
    pub recovery: RecoveryReport,
}

impl Log {
    /// An empty log over a freshly formatted pair of devices.
    #[must_use]
    pub fn fresh(sb: Superblock, meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>) -> Log {
        let geometry =
            SegmentGeometry { first_block: sb.first_segment_block, blocks: sb.segment_blocks, count: sb.segment_count };
        let mut ifile = IFile::new(geometry);
        ifile.rebuild_free_lists();
        let space = DataSpace::new(sb.data_blocks, sb.group_blocks);
        let count = sb.segment_count;
        let head =
            LogPosition { seq: Seq(1), segment: SegmentNo(0), offset: 0, next_segment: SegmentNo(1), prev_crc: 0 };
        Log {
            volume_id: sb.volume_id(),
            sb,
            meta,
            data,
            ifile,
            space,
            cache: MetaCache::new(),
            head,
            changes: Vec::new(),
            change_bytes: 0,
            durable: Seq(0),
            ckpt: DurableCheckpoint { number: 0, log: head, ..DurableCheckpoint::default() },
            blocks_since_checkpoint: 0,
            free_segments_cached: count.saturating_sub(2),
            group_limit: super::DEFAULT_GROUP_BLOCKS,
            stats: LogStats::default(),
            readahead: super::readahead::ReadAhead::default(),
            pending_fsync: Vec::new(),
        }
    }

    /// Reads and pairs the two superblocks.
    ///
    /// # Errors
    /// Either device is not DualFS, or they belong to different volumes, or
    /// a device is smaller than its superblock says.
    pub fn read_superblocks(meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<Superblock> {
        let read_sb = |dev: &dyn BlockDevice, role: DeviceRole| -> Result<Superblock> {
            if dev.block_count() == 0 {
                return Err(Error::WrongVolume(format!("the {role} is empty (0 bytes)")));
            }
            let raw = device::read(dev, role, 0, 1)?;
            Superblock::decode(&raw).map_err(|e| {
                if e.0.contains("bad magic") {
                    Error::WrongVolume(format!("the {role} holds no DualFS volume"))
                } else {
                    Error::Corrupt { structure: "superblock", device: role, block: 0, reason: e.0 }
                }
            })
        };
        let m = read_sb(meta, DeviceRole::Meta)?;
        let d = read_sb(data, DeviceRole::Data)?;
        if m.role != Role::Meta {
            return Err(Error::WrongVolume("the device given as meta-data device is a DualFS data device".into()));
        }
        if d.role != Role::Data {
            return Err(Error::WrongVolume("the device given as data device is a DualFS meta-data device".into()));
        }
        if m.volume_uuid != d.volume_uuid || m.data_uuid != d.data_uuid || m.meta_uuid != d.meta_uuid {
            return Err(Error::WrongVolume(format!(
                "the data device belongs to volume {}, the meta-data device to volume {}: they are not a pair",
                uuid::Uuid::from_bytes(d.volume_uuid),
                uuid::Uuid::from_bytes(m.volume_uuid)
            )));
        }
        let same = Superblock { role: Role::Data, ..m.clone() };
        if same != d {
            return Err(Error::Corrupt {
                structure: "superblock",
                device: DeviceRole::Data,
                block: 0,
                reason: "the copy on the data device disagrees with the meta-data device's".into(),
            });
        }
        if meta.block_count() < m.meta_blocks {
            return Err(Error::Corrupt {
                structure: "meta-data device",
                device: DeviceRole::Meta,
                block: meta.block_count(),
                reason: format!(
                    "device has {} blocks but the volume needs {} (truncated image?)",
                    meta.block_count(),
                    m.meta_blocks
                ),
            });
        }
        if data.block_count() < m.data_blocks {
            return Err(Error::Corrupt {
                structure: "data device",
                device: DeviceRole::Data,
                block: data.block_count(),
                reason: format!(
                    "device has {} blocks but the volume needs {} (truncated image?)",
                    data.block_count(),
                    m.data_blocks
                ),
            });
        }
        Ok(m)
    }

    /// Opens an existing volume: newest valid checkpoint, then roll-forward.
    ///
    /// # Errors
    /// Superblock problems; no usable checkpoint; I/O errors.
    pub fn open(meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>) -> Result<(Log, OpenReport)> {
        let sb = Log::read_superblocks(meta.as_ref(), data.as_ref())?;
        let mut slots: Vec<(Checkpoint, u64)> = Vec::new();
        let mut slot_errors: Vec<String> = Vec::new();
        for slot in CHECKPOINT_SLOTS {
            let raw = device::read(meta.as_ref(), DeviceRole::Meta, slot.0, 1)?;
            match Checkpoint::decode(&raw) {
                Ok(c) => slots.push((c, slot.0)),
                Err(e) => slot_errors.push(format!("slot at block {}: {e}", slot.0)),
            }
        }
        slots.sort_by_key(|(c, _)| std::cmp::Reverse(c.number));
        let mut last_err = None;
        for (i, (c, slot)) in slots.iter().enumerate() {
            let mut log = Log::fresh(sb.clone(), meta.clone(), data.clone());
            match log.load_checkpoint(c) {
                Ok(()) => {
                    // A slot that does not decode for another reason than
                    // being empty held a newer checkpoint whose write was torn.
                    let fell_back = if i > 0 {
                        last_err.as_ref().map(|e: &Error| e.to_string())
                    } else {
                        slot_errors.iter().find(|e| !e.contains("bad magic")).cloned()
                    };
                    let recovery = log.roll_forward()?;
                    return Ok((log, OpenReport { checkpoint: c.number, fell_back, recovery }));
                }
                Err(e) => {
                    log::warn!("checkpoint {} in slot at block {slot} is unusable: {e}", c.number);
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| Error::Corrupt {
            structure: "checkpoint",
            device: DeviceRole::Meta,
            block: CHECKPOINT_SLOTS[0].0,
            reason: format!("no valid checkpoint in either slot ({})", slot_errors.join("; ")),
        }))
    }
}
