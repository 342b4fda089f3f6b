//! Bringing a log into memory: a fresh one for mkfs, or an existing one
//! from its superblocks, newest valid checkpoint and roll-forward.

use std::fmt;
use std::sync::Arc;

use super::beyond::Beyond;

use super::checkpoint::DurableCheckpoint;
use super::recovery::RecoveryReport;
use super::{Log, LogStats, MetaCache};
use crate::data_space::DataSpace;
use crate::device::{self, BlockDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::format::checkpoint::{Checkpoint, LogPosition};
use crate::format::superblock::{
    CHECKPOINT_SLOTS, INCOMPAT_CLONES, INCOMPAT_INODE_FLAGS, INCOMPAT_QUOTA, INCOMPAT_RESIZED, INCOMPAT_SNAPSHOTS,
    Role, Superblock,
};
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
    /// Damage no crash explains, one sentence each, whether or not it cost
    /// anything: a checkpoint whose slot is intact but whose IFile is not,
    /// IFile blocks walked over, commits lost.
    pub damage: Vec<String>,
    /// Commits that had been made durable and could not be applied.
    pub loss: Option<Loss>,
    /// The meta-data device's superblock did not decode and the data
    /// device's copy was used: a writable open writes it back.
    pub superblock_from_copy: bool,
    /// Counts of the checkpoint that disagreed with what they derive from
    /// and were recounted (segment live bytes): fsck names them (I7), the
    /// next checkpoint writes them right.
    pub recounted: Vec<String>,
    /// The two superblock copies differed in what a resize changes only
    /// (geometry, the `RESIZED` feature): a resize was cut between them;
    /// or the data device's copy did not decode while the meta-data
    /// device's did (a rewrite torn by a crash). The meta-data device's was
    /// taken; a writable open rewrites the data device's.
    pub data_superblock_stale: bool,
    /// One superblock copy did not decode and the other, which belongs to
    /// the volume, was used (said in words): what a crash tearing one of
    /// the two writes of a superblock rewrite leaves (resize, `tune`, a
    /// feature bit set), with nothing lost. Not damage; fsck says it, and
    /// a writable open writes the copy again.
    pub superblock_repair: Option<String>,
}

/// How the data device's superblock copy stands against the meta-data
/// device's.
#[derive(Clone, Debug, PartialEq, Eq)]
enum DataCopy {
    /// The same (or lacking only a feature bit set since).
    Same,
    /// Lagging by a resize cut between the two writes.
    Stale,
    /// A write of it torn by a crash (why it does not decode).
    Torn(String),
}

impl OpenReport {
    /// Whether opening met damage that a crash cannot explain.
    #[must_use]
    pub fn is_damaged(&self) -> bool {
        !self.damage.is_empty() || self.loss.is_some()
    }
}

/// Commits that were made durable (acknowledged) and that opening could
/// not apply: what falling back or a damaged block costs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// The first sequence number not applied.
    pub first: Seq,
    /// The highest sequence number known to have been durable.
    pub acknowledged_through: Seq,
    /// Valid partial segments found past the damage, which cannot be
    /// applied without what the damage took.
    pub beyond: Option<Beyond>,
    /// Where roll-forward stopped, and why.
    pub stop: String,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "commits with sequence numbers {}..={} had been made durable and cannot be applied (roll-forward stopped: {})",
            self.first.0, self.acknowledged_through.0, self.stop
        )?;
        if let Some(b) = &self.beyond {
            write!(
                f,
                "; {} valid partial segments ({} commit groups, up to sequence {}) lie beyond and are lost with them",
                b.partial_segments, b.groups, b.last.0
            )?;
        }
        Ok(())
    }
}

impl Log {
    /// An empty log over a freshly formatted pair of devices.
    #[must_use]
    pub fn fresh(sb: Superblock, meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>) -> Log {
        let geometry =
            SegmentGeometry { first_block: sb.first_segment_block, blocks: sb.segment_blocks, count: sb.segment_count };
        let mut ifile = IFile::new(geometry, sb.sparse_ifile());
        ifile.rebuild_free_lists();
        let space = DataSpace::new(sb.data_blocks, sb.group_blocks, sb.sparse_ifile());
        let count = sb.segment_count;
        let head =
            LogPosition { seq: Seq(1), segment: SegmentNo(0), offset: 0, next_segment: SegmentNo(1), prev_crc: 0 };
        Log {
            volume_id: sb.volume_id(),
            on_disk: sb.clone(),
            usable_segments: sb.segment_count,
            segment_limit: u32::MAX,
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
            vouched: Seq(0),
            detached: false,
            twin_next: false,
            ckpt: DurableCheckpoint { number: 0, log: head, ..DurableCheckpoint::default() },
            blocks_since_checkpoint: 0,
            // The superblock decoder refuses fewer than 16 segments.
            free_segments_cached: count - 2,
            group_limit: super::DEFAULT_GROUP_BLOCKS,
            stats: LogStats::default(),
            readahead: super::readahead::ReadAhead::default(),
            recounted: Vec::new(),
            inode_map_keep: None,
            usage_keep: None,
            space_keep: None,
            checkpoint_unwritten: false,
            pending_fsync: Vec::new(),
            snaps: super::snapshot::Snapshots::default(),
            last_record: None,
            index_entry_limit: crate::format::snapshot::MAX_SNAPSHOT_INDEX,
            previous: None,
            opened_at: 0,
            older_lists_other: false,
        }
    }

    /// The superblock with the geometry checkpoint `c` was written at: its
    /// own on a resized volume, which must lie within the devices' reach
    /// that the superblock names.
    ///
    /// # Errors
    /// The checkpoint names a geometry beyond the superblock's.
    fn in_use(sb: &Superblock, c: &Checkpoint) -> Result<Superblock> {
        let Some(g) = c.geometry else { return Ok(sb.clone()) };
        match sb.with_geometry(g) {
            Some(s) if g.segment_count <= sb.segment_count && g.data_blocks <= sb.data_blocks => Ok(s),
            _ => Err(Error::corrupt_meta(
                "checkpoint",
                0,
                format!(
                    "it names {} segments and {} data blocks, beyond the superblock's {} and {}",
                    g.segment_count, g.data_blocks, sb.segment_count, sb.data_blocks
                ),
            )),
        }
    }

    /// Reads and pairs the two superblocks.
    ///
    /// # Errors
    /// Either device is not DualFS, or they belong to different volumes, or
    /// a device is smaller than its superblock says.
    pub fn read_superblocks(meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<Superblock> {
        Log::read_superblocks_noting(meta, data).map(|(sb, _)| sb)
    }

    /// [`Log::read_superblocks`], taking the data device's copy when the
    /// meta-data device's own is damaged (and the device's blocks show it
    /// belongs to the volume); says so in the second value.
    ///
    /// # Errors
    /// As [`Log::read_superblocks`].
    pub fn read_superblocks_noting(
        meta: &dyn BlockDevice,
        data: &dyn BlockDevice,
    ) -> Result<(Superblock, Option<String>)> {
        match Log::read_superblocks_strict(meta, data) {
            Ok((sb, DataCopy::Torn(why))) => Ok((
                sb,
                Some(format!(
                    "the data device's superblock copy does not decode ({why}); the meta-data device's was used"
                )),
            )),
            Ok((sb, _)) => Ok((sb, None)),
            Err(e) => match Log::superblock_from_data_copy(meta, data)? {
                Some(sb) => Ok((
                    sb,
                    Some(format!(
                        "the meta-data device's superblock does not decode ({e}); the copy on the data device was \
                         used"
                    )),
                )),
                None => Err(e),
            },
        }
    }

    /// The data device's superblock copy, as the meta-data device's, when
    /// the meta-data device's own does not decode and one of its log
    /// blocks carries the volume's id at its own address (the blocks
    /// identify themselves: another device would not).
    fn superblock_from_data_copy(meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<Option<Superblock>> {
        let raw = device::read(meta, DeviceRole::Meta, 0, 1)?;
        if Superblock::decode(&raw).is_ok() || data.block_count() == 0 {
            return Ok(None);
        }
        let raw = device::read(data, DeviceRole::Data, 0, 1)?;
        let Ok(d) = Superblock::decode(&raw) else { return Ok(None) };
        if d.role != Role::Data || meta.block_count() < d.meta_blocks {
            return Ok(None);
        }
        let vid = d.volume_id();
        for s in 0..u64::from(d.segment_count.min(64)) {
            let at = d.first_segment_block + s * u64::from(d.segment_blocks);
            let raw = device::read(meta, DeviceRole::Meta, at, 1)?;
            if crate::format::block::open_block(&raw, crate::types::MetaBlock(at), vid).is_ok() {
                return Ok(Some(Superblock { role: Role::Meta, ..d }));
            }
        }
        Ok(None)
    }

    /// Whether the data device's copy lags the meta-data device's by a
    /// resize cut between their writes: the two differ only in what a
    /// resize writes (geometry, the `RESIZED` feature and minor version).
    #[must_use]
    pub fn lags_by_a_resize(m: &Superblock, d: &Superblock) -> bool {
        let aligned = Superblock {
            role: m.role,
            minor: m.minor,
            incompat: (d.incompat & !INCOMPAT_RESIZED) | (m.incompat & INCOMPAT_RESIZED),
            meta_blocks: m.meta_blocks,
            data_blocks: m.data_blocks,
            group_count: m.group_count,
            segment_count: m.segment_count,
            ..d.clone()
        };
        aligned == *m
    }

    /// Both superblocks, paired; `true` when the data device's copy lags
    /// by a resize cut short (and the meta-data device's was taken).
    ///
    /// # Errors
    /// As [`Log::read_superblocks`].
    pub fn read_superblocks_paired(meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<(Superblock, bool)> {
        Log::read_superblocks_strict(meta, data).map(|(sb, copy)| (sb, copy != DataCopy::Same))
    }

    fn read_superblocks_strict(meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<(Superblock, DataCopy)> {
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
        let d = match read_sb(data, DeviceRole::Data) {
            Ok(d) => d,
            Err(e @ Error::Corrupt { .. }) if m.role == Role::Meta && Log::torn_copy_of(&m, data)? => {
                // Its first sector names this volume and its devices: a
                // rewrite of it was torn by a crash (the meta-data device's
                // copy is written, and flushed, first).
                Log::check_reach(&m, meta, data)?;
                return Ok((m, DataCopy::Torn(e.to_string())));
            }
            Err(e) => return Err(e),
        };
        if m.role != Role::Meta {
            return Err(Error::WrongVolume("the device given as meta-data device is a DualFS data device".into()));
        }
        if d.role != Role::Data {
            return Err(Error::WrongVolume("the device given as data device is a DualFS meta-data device".into()));
        }
        if m.volume_uuid == d.volume_uuid && (m.data_uuid != d.data_uuid || m.meta_uuid != d.meta_uuid) {
            // `dualfs migrate` gives the device it moves to a new uuid.
            let u = uuid::Uuid::from_bytes;
            return Err(Error::WrongVolume(format!(
                "both devices are of volume {}, but they are not a pair: the meta-data device names meta-data \
                 device {} and data device {}, the data device names {} and {}. `dualfs migrate` moved one of \
                 them to another device, which the other now pairs with: give that one (after a crash during a \
                 migration, the new device; if that pair is refused too, the old one)",
                u(m.volume_uuid),
                u(m.meta_uuid),
                u(m.data_uuid),
                u(d.meta_uuid),
                u(d.data_uuid)
            )));
        }
        if m.volume_uuid != d.volume_uuid || m.data_uuid != d.data_uuid || m.meta_uuid != d.meta_uuid {
            return Err(Error::WrongVolume(format!(
                "the data device belongs to volume {}, the meta-data device to volume {}: they are not a pair",
                uuid::Uuid::from_bytes(d.volume_uuid),
                uuid::Uuid::from_bytes(m.volume_uuid)
            )));
        }
        let same = Superblock { role: Role::Data, ..m.clone() };
        // A crash between the two writes that set INCOMPAT_SNAPSHOTS or
        // INCOMPAT_CLONES (the meta-data copy first) leaves the data copy
        // without them: the meta-data copy is the volume's, and the next
        // snapshot or clone made rewrites the data copy
        // (`Volume::mark_features`).
        let snapshots_cut = |d: &Superblock| {
            let set_later = m.incompat
                & (INCOMPAT_SNAPSHOTS
                    | INCOMPAT_CLONES
                    | INCOMPAT_INODE_FLAGS
                    | INCOMPAT_QUOTA
                    | crate::format::superblock::INCOMPAT_SNAPSHOT_RECORDS);
            set_later != 0 && Superblock { incompat: d.incompat | set_later, minor: m.minor, ..d.clone() } == same
        };
        let stale = same != d && Log::lags_by_a_resize(&m, &d);
        // The mirror's fields alone differ: a change of the mirror (a copy
        // added, removed or marked degraded) writes the meta-data copies
        // first and the data device's superblock last, each with a higher
        // generation. A copy ahead of the data device is what a crash
        // between leaves, and the data device's word on the mirror stands;
        // a copy behind it missed that change and is not the volume's.
        let mirror_fields_only = same != d
            && Superblock {
                meta_copies: d.meta_copies,
                mirror_state: d.mirror_state,
                mirror_generation: d.mirror_generation,
                ..same.clone()
            } == d;
        if mirror_fields_only && m.mirror_generation > d.mirror_generation {
            Log::check_reach(&m, meta, data)?;
            return Ok((Superblock { role: Role::Meta, ..d }, DataCopy::Same));
        }
        if mirror_fields_only {
            return Err(Error::WrongVolume(format!(
                "the meta-data device is a copy the volume's mirror no longer counts (mirror generation {}, the \
                 volume's is {}): it was removed from the mirror, replaced, or missed writes while the volume ran \
                 on the other copy",
                m.mirror_generation, d.mirror_generation
            )));
        }
        if same != d && !snapshots_cut(&d) && !stale {
            return Err(Error::Corrupt {
                structure: "superblock",
                device: DeviceRole::Data,
                block: 0,
                reason: "the copy on the data device disagrees with the meta-data device's".into(),
            });
        }
        Log::check_reach(&m, meta, data)?;
        Ok((m, if stale { DataCopy::Stale } else { DataCopy::Same }))
    }

    /// Whether the data device's block 0, which does not decode, is a torn
    /// write of `m`'s copy: its first sector (written whole or not at all
    /// by the device) carries the magic and the three identities of `m`.
    fn torn_copy_of(m: &Superblock, data: &dyn BlockDevice) -> Result<bool> {
        if data.block_count() == 0 {
            return Ok(false);
        }
        let raw = device::read(data, DeviceRole::Data, 0, 1)?;
        let ids = [m.volume_uuid, m.meta_uuid, m.data_uuid].concat();
        Ok(raw.get(..4) == Some(&crate::format::superblock::SUPER_MAGIC.to_le_bytes()[..])
            && raw.get(40..88) == Some(&ids[..]))
    }

    /// Both devices hold what superblock `m` says the volume needs.
    fn check_reach(m: &Superblock, meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<()> {
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
        Ok(())
    }

    /// Opens an existing volume: newest valid checkpoint, then roll-forward.
    ///
    /// # Errors
    /// Superblock problems; no usable checkpoint; I/O errors.
    pub fn open(meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>) -> Result<(Log, OpenReport)> {
        let (sb, sb_note) = Log::read_superblocks_noting(meta.as_ref(), data.as_ref())?;
        Log::open_with_superblock(meta, data, sb, sb_note)
    }

    /// [`Log::open`] with the superblock already read (`sb_note`: the
    /// damage met reading it, if any).
    ///
    /// # Errors
    /// No usable checkpoint; I/O errors.
    pub fn open_with_superblock(
        meta: Arc<dyn BlockDevice>,
        data: Arc<dyn BlockDevice>,
        sb: Superblock,
        sb_note: Option<String>,
    ) -> Result<(Log, OpenReport)> {
        Log::open_loading(meta, data, sb, sb_note, None, true)
    }

    /// [`Log::open`] for serving a mount: the data bitmap is left on disk
    /// and read a group at a time when first needed, so that opening takes
    /// the same time whatever the data device's size. A volume whose IFile
    /// turns out damaged on the way is opened again the complete way, so
    /// that falling back to the older checkpoint works as it does for fsck.
    ///
    /// # Errors
    /// As [`Log::open`].
    /// An inode map of `imap_min_blocks` blocks or more is left on disk
    /// too ([`super::lazy_imap`]).
    /// Without `roll_forward` (`-o norecovery`) the log after the
    /// checkpoint is not read at all ([`Log::stay_at_checkpoint`]).
    pub fn open_lazily(
        meta: Arc<dyn BlockDevice>,
        data: Arc<dyn BlockDevice>,
        imap_min_blocks: usize,
        roll_forward: bool,
    ) -> Result<(Log, OpenReport)> {
        let (sb, sb_note) = Log::read_superblocks_noting(meta.as_ref(), data.as_ref())?;
        let (m, d, s, n) = (meta.clone(), data.clone(), sb.clone(), sb_note.clone());
        match Log::open_loading(m, d, s, n, Some(imap_min_blocks), roll_forward) {
            Ok((log, report)) if report.fell_back.is_none() && !report.is_damaged() => Ok((log, report)),
            Ok(_) | Err(Error::Corrupt { .. }) => Log::open_loading(meta, data, sb, sb_note, None, roll_forward),
            Err(e) => Err(e),
        }
    }

    fn open_loading(
        meta: Arc<dyn BlockDevice>,
        data: Arc<dyn BlockDevice>,
        sb: Superblock,
        sb_note: Option<String>,
        lazy: Option<usize>,
        roll_forward: bool,
    ) -> Result<(Log, OpenReport)> {
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
            let opened = Log::in_use(&sb, c).and_then(|in_use| {
                let mut log = Log::fresh(in_use, meta.clone(), data.clone());
                log.on_disk = sb.clone();
                log.load_checkpoint(c, lazy).map(|()| log)
            });
            match opened {
                Ok(mut log) => {
                    // A slot that does not decode for another reason than
                    // being empty held a newer checkpoint whose write was torn.
                    let fell_back = if i > 0 {
                        last_err.as_ref().map(|e: &Error| e.to_string())
                    } else {
                        slot_errors.iter().find(|e| !e.contains("bad magic")).cloned()
                    };
                    let recovery = if roll_forward { log.roll_forward()? } else { log.stay_at_checkpoint()? };
                    // Segments roll-forward emptied wait for two checkpoints.
                    log.opened_at = c.number;
                    log.older_lists_other = slots.get(i + 1).is_some_and(|(o, _)| o.snapshot_list != c.snapshot_list);
                    log.tag_emptied();
                    // A slot is written after the IFile it names is durable,
                    // and that IFile is kept until a newer slot is: a newer
                    // checkpoint that decodes and does not load is damage,
                    // and everything before its log position was durable.
                    let newer = slots[..i].first().map(|(n, _)| n);
                    let mut report = judge(c.number, fell_back, recovery, newer, last_err.as_ref());
                    report.recounted = std::mem::take(&mut log.recounted);
                    // Which copy was used, and whether the other is to be
                    // written again (stale or torn).
                    match Log::read_superblocks_strict(meta.as_ref(), data.as_ref()) {
                        Ok((_, copy)) => report.data_superblock_stale = copy != DataCopy::Same,
                        Err(_) => report.superblock_from_copy = sb_note.is_some(),
                    }
                    for r in &report.recounted {
                        log::warn!("{r}");
                    }
                    if let Some(note) = &sb_note {
                        log::warn!("{note}");
                    }
                    report.superblock_repair = sb_note.clone();
                    for d in &report.damage {
                        log::error!("{d}");
                    }
                    return Ok((log, report));
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

/// What opening from checkpoint `number` found, with the damage and the
/// loss it proves: a newer checkpoint that did not load (`newer`, with the
/// reason), IFile blocks walked over, acknowledged commits not applied.
fn judge(
    number: u64,
    fell_back: Option<String>,
    recovery: RecoveryReport,
    newer: Option<&Checkpoint>,
    newer_err: Option<&Error>,
) -> OpenReport {
    let mut damage = recovery.walked_over.clone();
    damage.extend(
        recovery.inconsistent.iter().map(|w| format!("roll-forward met a change record at odds with the IFile: {w}")),
    );
    let mut through: Option<Seq> = recovery.beyond.as_ref().and_then(|b| b.acknowledged_through);
    if let Some(n) = newer {
        damage.push(format!(
            "checkpoint {} cannot be loaded ({}); the volume was opened from checkpoint {number}",
            n.number,
            newer_err.map_or_else(|| "unknown reason".to_string(), ToString::to_string)
        ));
        // The checkpoint decoder refuses a log position of sequence 0.
        let before = Seq(n.log.seq.0 - 1);
        through = Some(through.map_or(before, |t| t.max(before)));
    }
    let first = recovery.first_unapplied;
    let loss = through.filter(|t| *t >= first).map(|t| Loss {
        first,
        acknowledged_through: t,
        beyond: recovery.beyond.clone(),
        stop: recovery.end.to_string(),
    });
    if let Some(l) = &loss {
        damage.push(l.to_string());
    }
    OpenReport {
        checkpoint: number,
        fell_back,
        recovery,
        damage,
        loss,
        superblock_from_copy: false,
        recounted: Vec::new(),
        data_superblock_stale: false,
        superblock_repair: None,
    }
}
