//! fsck's repair (`dualfs fsck -p`, `-y`): rebuild from what is intact.
//!
//! The IFile comes from the newest usable checkpoint and roll-forward, as
//! a mount gets it (commits lost to damage are given up: the volume goes
//! back to its state before them, and that is listed), or, when no
//! checkpoint loads, from a scan of the whole log ([`Log::rebuild`]).
//! Every live record and node is then read again, leniently
//! ([`salvage`]); each inode's structures are kept when sound and rebuilt
//! from their readable parts when not; the namespace is made whole
//! ([`namespace`]: a root, entries naming inodes in use, one name per
//! directory, `lost+found` for what nothing reaches, link counts, no block
//! in two files); and what the IFile derives (segment usage, the bitmap,
//! group counts) is recounted from the result. The changes are written
//! through the namespace's own operations, then a checkpoint ([`apply`]).
//!
//! Nothing reaches the disks while this runs: repair writes to staged
//! devices ([`staged`]), checks the result with fsck, and
//! [`Prepared::write`] replays the writes, in order, when the caller (the
//! user's `-p` or `-y`) says so. Every repair is listed, with whether it
//! only sets right what the volume derives ([`Severity::Safe`], what `-p`
//! may do), changes what a user sees, or gives up something unreadable.

mod apply;
mod namespace;
pub mod rescue;
mod salvage;
mod staged;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;

use crate::check::{CheckReport, check};
use crate::device::{self, BlockDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::format::quota::{self, QUOTA_XATTR, QuotaTable};
use crate::format::stream::{RECEIVING_XATTR, describe_mark};
use crate::format::superblock::INCOMPAT_QUOTA;
use crate::format::superblock::{Role, Superblock};
use crate::meta_log::Log;
use crate::meta_log::mount::OpenReport;
use crate::meta_log::recovery::{LogEnd, RecoveryReport, Stop};
use crate::types::{InodeNo, SegmentNo, Seq};
use crate::volume::{Clock, SystemClock};
use staged::{Journal, StagedDevice};

/// How much a repair changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Sets right what the volume derives or what nobody sees (counts, the
    /// bitmap, segment usage, link counts, types, positions, unreferenced
    /// blocks): `-p` does these.
    Safe,
    /// Changes what a user sees without giving up anything readable (a
    /// file moved to lost+found, a size set to where the data ends, a copy
    /// of blocks two files claim).
    Changes,
    /// Gives up what cannot be read (an inode, an entry, a damaged part of
    /// a tree, commits lost to damage).
    Loses,
}

impl Severity {
    /// A word for people and JSON.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Severity::Safe => "safe",
            Severity::Changes => "changes",
            Severity::Loses => "loses",
        }
    }
}

/// One repair: what was wrong and what is done about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    /// How much it changes.
    pub severity: Severity,
    /// The inode concerned, if any.
    pub ino: Option<InodeNo>,
    /// What is wrong.
    pub problem: String,
    /// What repair does about it.
    pub action: String,
}

impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(i) = self.ino {
            write!(f, "inode {i}: ")?;
        }
        write!(f, "{}: {}", self.problem, self.action)
    }
}

/// A repair worked out on staged devices, not yet written.
#[derive(Debug)]
pub struct Prepared {
    /// Every repair, in the order found.
    pub repairs: Vec<Repair>,
    /// Where the IFile came from, in plain words.
    pub source: String,
    /// fsck of the volume as repaired (None when there was nothing to do).
    pub after: Option<CheckReport>,
    /// A receive under way, in words: its tree is left as it is (the
    /// namespace is not repaired) until it is finished or abandoned.
    pub receiving: Option<String>,
    /// Blocks the repair writes (meta-data, data), counting rewrites.
    pub blocks_written: (u64, u64),
    journal: Arc<Journal>,
    /// The devices as the repair leaves them (its writes in memory over
    /// the real devices), for a read-only look before anything is written.
    staged: (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>),
}

impl Prepared {
    /// Whether there is nothing to repair.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.repairs.is_empty()
    }

    /// The most any repair changes.
    #[must_use]
    pub fn severity(&self) -> Option<Severity> {
        self.repairs.iter().map(|r| r.severity).max()
    }

    /// The meta-data and data devices as the repair leaves them, with
    /// nothing written to the real ones: a volume opened read-only on
    /// them shows the repaired state.
    #[must_use]
    pub fn staged(&self) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
        self.staged.clone()
    }

    /// Writes the repair to the devices it was prepared on: every write
    /// and flush in the order repair made them.
    ///
    /// # Errors
    /// A device fails (the volume is then as an interrupted repair leaves
    /// it: as before, or needing a repair again).
    pub fn write(&self, meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<()> {
        self.journal.replay(meta, data).map_err(|source| Error::Io {
            device: DeviceRole::Meta,
            op: "write",
            block: 0,
            source,
        })
    }
}

/// Works out the repair of the volume on `meta` and `data`, which must not
/// be mounted; nothing is written until [`Prepared::write`].
///
/// # Errors
/// The devices hold no volume whose superblock can be read, or a device
/// fails; everything else is a repair.
pub fn prepare(meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>) -> Result<Prepared> {
    prepare_with_clock(meta, data, SystemClock::shared())
}

/// [`prepare`], stamping what it writes with `clock`.
///
/// # Errors
/// As [`prepare`].
pub fn prepare_with_clock(meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>, clock: Clock) -> Result<Prepared> {
    let journal = Arc::new(Journal::default());
    let sm: Arc<dyn BlockDevice> = Arc::new(StagedDevice::new(meta, true, journal.clone()));
    let sd: Arc<dyn BlockDevice> = Arc::new(StagedDevice::new(data, false, journal.clone()));
    let mut repairs = Vec::new();

    let (sb, sb_note, data_copy) = superblocks(sm.as_ref(), sd.as_ref())?;
    if let Some(n) = &sb_note {
        repairs.push(Repair {
            severity: Severity::Safe,
            ino: None,
            problem: n.clone(),
            action: "written again from the copy".into(),
        });
    }
    if let Some(why) = &data_copy {
        repairs.push(Repair {
            severity: Severity::Changes,
            ino: None,
            problem: why.clone(),
            action: "the data device's copy is written again from the meta-data device's".into(),
        });
    }
    let (log, report, source) = match Log::open_with_superblock(sm.clone(), sd.clone(), sb.clone(), sb_note.clone()) {
        Ok((log, report)) => {
            let source = format!(
                "checkpoint {}, roll-forward of {} partial segments (log end: {})",
                report.checkpoint, report.recovery.partial_segments, report.recovery.end
            );
            opened(&report, &mut repairs);
            (log, report, source)
        }
        Err(e @ (Error::Io { .. } | Error::WrongVolume(_))) => return Err(e),
        Err(e) => {
            let (log, r) = Log::rebuild(sm.clone(), sd.clone())?;
            repairs.push(Repair {
                severity: Severity::Changes,
                ino: None,
                problem: format!("no checkpoint can be loaded ({e})"),
                action: format!(
                    "the inode and node maps are rebuilt from the log: {} valid partial segments, {} commit groups \
                     and {} IFile blocks replayed",
                    r.partial_segments, r.groups, r.table_blocks
                ),
            });
            let source = format!("rebuilt from a scan of the log (up to sequence {})", r.last_seq.0);
            let report = rebuilt_report(log.checkpoint_number(), format!("{e}"));
            (log, report, source)
        }
    };

    let before = repairs.len();
    let (mut plan, receiving) = plan(&log, &mut repairs);
    let derived = derived_repairs(&log, &mut plan);
    repairs.splice(before..before, derived);
    if repairs.is_empty() {
        return Ok(Prepared {
            repairs,
            source,
            after: None,
            receiving,
            blocks_written: (0, 0),
            journal,
            staged: (sm, sd),
        });
    }
    if sb_note.is_some() || data_copy.is_some() {
        let raw = sb.encode();
        device::write(sm.as_ref(), DeviceRole::Meta, 0, &raw)?;
        let copy = Superblock { role: Role::Data, ..sb.clone() };
        device::write(sd.as_ref(), DeviceRole::Data, 0, &copy.encode())?;
        device::flush(sd.as_ref(), DeviceRole::Data)?;
        device::flush(sm.as_ref(), DeviceRole::Meta)?;
    }
    apply::apply(log, report, sm.clone(), sd.clone(), plan, clock)?;
    let after = check(sm.clone(), sd.clone())?;
    let blocks_written = journal.blocks_written();
    Ok(Prepared { repairs, source, after: Some(after), receiving, blocks_written, journal, staged: (sm, sd) })
}

/// The superblock to repair with: the pair as a mount reads it, or, when
/// the data device's copy is damaged or disagrees, the meta-data device's
/// own (the third value says why the copy is written again).
fn superblocks(meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<(Superblock, Option<String>, Option<String>)> {
    let err = match Log::read_superblocks_noting(meta, data) {
        Ok((sb, note)) => return Ok((sb, note, None)),
        Err(e) => e,
    };
    let raw = device::read(meta, DeviceRole::Meta, 0, 1)?;
    let Ok(m) = Superblock::decode(&raw) else { return Err(err) };
    if m.role != Role::Meta || meta.block_count() < m.meta_blocks || data.block_count() < m.data_blocks {
        return Err(err);
    }
    let raw = device::read(data, DeviceRole::Data, 0, 1)?;
    let why = match Superblock::decode(&raw) {
        Ok(d) if d.volume_uuid != m.volume_uuid || d.role != Role::Data => {
            // Another volume's device: never written over.
            return Err(err);
        }
        Ok(_) => format!("the data device's superblock copy disagrees with the meta-data device's ({err})"),
        Err(e) => format!("the data device's superblock copy is damaged ({})", e.0),
    };
    Ok((m, None, Some(why)))
}

/// What opening found that repair lists: a loss accepted, damage met.
fn opened(report: &OpenReport, repairs: &mut Vec<Repair>) {
    if let Some(loss) = &report.loss {
        repairs.push(Repair {
            severity: Severity::Loses,
            ino: None,
            problem: loss.to_string(),
            action: format!(
                "the loss is accepted: the volume is repaired to its state before sequence {}",
                loss.first.0
            ),
        });
    }
    for r in &report.recounted {
        repairs.push(Repair {
            severity: Severity::Safe,
            ino: None,
            problem: r.clone(),
            action: "written right".into(),
        });
    }
    for d in &report.damage {
        if report.loss.as_ref().is_some_and(|l| *d == l.to_string()) {
            continue;
        }
        if d.contains("superblock") {
            continue;
        }
        repairs.push(Repair {
            severity: Severity::Safe,
            ino: None,
            problem: d.clone(),
            action: "a new checkpoint replaces what is damaged".into(),
        });
    }
}

/// A report for a log rebuilt from a scan (no checkpoint, no roll-forward).
fn rebuilt_report(checkpoint: u64, why: String) -> OpenReport {
    OpenReport {
        checkpoint,
        fell_back: Some(why),
        recovery: RecoveryReport {
            partial_segments: 0,
            blocks_scanned: 0,
            end: LogEnd { reason: Stop::PastSegmentEnd { segment: SegmentNo(0), offset: 0 }, next_segment: None },
            beyond: None,
            first_unapplied: Seq(0),
            walked_over: Vec::new(),
            inconsistent: Vec::new(),
            micros: 0,
            fsync_pending: 0,
            fsync_folded: 0,
        },
        damage: Vec::new(),
        loss: None,
        superblock_from_copy: false,
        data_superblock_stale: false,
        superblock_repair: None,
        recounted: Vec::new(),
    }
}

/// Reads everything, then plans: per inode, then the namespace, then
/// which file keeps each data block. A receive under way (the root's mark,
/// returned in words) keeps its namespace as it is: the entries naming
/// inodes it has not made yet and the link counts it sets at its end are
/// what finishing or abandoning it settles, not damage to repair
/// (lost+found would take files the receive is about to name).
fn plan(log: &Log, repairs: &mut Vec<Repair>) -> (apply::Plan, Option<String>) {
    let loaded = salvage::load(log, repairs);
    let mut lost: Vec<InodeNo> = loaded.lost.clone();
    let mut items = BTreeMap::new();
    {
        let mut s = salvage::Salvager { log, loaded: &loaded, claimed: Default::default(), repairs };
        for (ino, rec) in &loaded.records {
            match s.inode(*ino, rec) {
                Some(item) => {
                    items.insert(*ino, item);
                }
                None => lost.push(*ino),
            }
        }
    }
    lost.retain(|i| !items.contains_key(i));
    let orphans: HashSet<InodeNo> = log.ifile().orphans().into_iter().collect();
    let receiving = items
        .get(&InodeNo::ROOT)
        .and_then(|r| r.xattrs.iter().find(|(n, _)| n == RECEIVING_XATTR))
        .map(|(_, v)| describe_mark(v));
    let ns =
        if receiving.is_some() { namespace::NsPlan::default() } else { namespace::plan(&mut items, &orphans, repairs) };
    namespace::resolve_claims(&mut items, repairs);
    if log.superblock().incompat & INCOMPAT_QUOTA != 0
        && let Some(root) = items.get_mut(&InodeNo::ROOT)
    {
        quota_record(root, repairs);
    }
    if ns.new_root && !lost.contains(&InodeNo::ROOT) && log.ifile().inode(InodeNo::ROOT).is_some_and(|e| e.in_use()) {
        // A root that is no directory is cleared before the new one is made.
        lost.push(InodeNo::ROOT);
    }
    lost.sort_unstable();
    lost.dedup();
    (apply::Plan { items, ns, lost }, receiving)
}

/// A quota record that does not decode (Q1) is rebuilt from what of it
/// reads as written ([`quota::salvage`]); the repair says what was kept
/// and what was reset.
fn quota_record(root: &mut salvage::Item, repairs: &mut Vec<Repair>) {
    let Some((_, value)) = root.xattrs.iter_mut().find(|(n, _)| n == QUOTA_XATTR) else { return };
    let Err(e) = QuotaTable::decode(value) else { return };
    let s = quota::salvage(value);
    *value = s.table.encode();
    root.rewrite_xattrs = true;
    let grace = if s.grace_kept { "the grace times kept" } else { "the grace times reset to seven days" };
    repairs.push(Repair {
        severity: if s.dropped > 0 { Severity::Loses } else { Severity::Changes },
        ino: Some(InodeNo::ROOT),
        problem: format!("the quota record does not decode ({e})"),
        action: format!(
            "rebuilt from what reads as written: the limits of {} ids kept as read (no checksum vouches for them \
             now: look at them with `dualfs quota report`), {} entries that do not read as one dropped, {grace}, \
             running grace periods restarted; usage is counted from the inodes, as at every mount",
            s.kept, s.dropped
        ),
    });
}

/// What the IFile derives and says otherwise: segment usage, the bitmap,
/// group counts, record lengths and generations in the inode map, nodes
/// nothing keeps.
fn derived_repairs(log: &Log, plan: &mut apply::Plan) -> Vec<Repair> {
    let mut out = Vec::new();
    let safe =
        |problem: String, action: &str| Repair { severity: Severity::Safe, ino: None, problem, action: action.into() };
    let live = log.ifile().live_bytes_from_maps();
    let wrong = live
        .iter()
        .enumerate()
        .filter(|(s, want)| u64::from(log.ifile().segments.get(*s).live_bytes) != **want)
        .count();
    if wrong > 0 {
        out.push(safe(format!("{wrong} segments' live bytes disagree with the inodes and nodes in them"), "recounted"));
    }
    let sound: HashSet<_> = plan.items.values().flat_map(|i| i.body_nodes.iter().chain(&i.xattr_nodes)).collect();
    let stray = (1..log.ifile().nodes.len() as u64)
        .map(crate::types::NodeId)
        .filter(|id| log.ifile().node_address(*id).0 != 0 && !sound.contains(id))
        .count();
    if stray > 0 {
        out.push(safe(format!("{stray} allocated nodes belong to no sound structure, or cannot be read"), "freed"));
    }
    // The bitmap as the files kept will have it.
    let mut space = log.space().clone();
    let used: Vec<_> = plan
        .items
        .values()
        .filter_map(|i| match &i.content {
            salvage::Content::Extents(e) => Some(e.iter().map(|e| (e.physical, e.len))),
            _ => None,
        })
        .flatten()
        .collect();
    let groups_before: Vec<u32> = (0..space.groups.len()).map(|g| space.groups.get(g).free_blocks).collect();
    let (were_free, were_used) = space.rebuild_bitmap(&used);
    if were_free > 0 {
        out.push(safe(format!("{were_free} data blocks in use by files are marked free"), "marked in use"));
    }
    if were_used > 0 {
        out.push(safe(format!("{were_used} data blocks are marked in use but no file maps them"), "marked free"));
    }
    let groups_wrong = (0..space.groups.len()).filter(|&g| space.groups.get(g).free_blocks != groups_before[g]).count();
    if groups_wrong > 0 && were_free == 0 && were_used == 0 {
        out.push(safe(format!("{groups_wrong} data groups' free counts disagree with the bitmap"), "recounted"));
    }
    for (ino, item) in &mut plan.items {
        if *ino == InodeNo::ROOT && plan.ns.new_root {
            continue;
        }
        let Some(e) = log.ifile().inode(*ino) else { continue };
        if e.generation != item.was.generation {
            out.push(Repair {
                severity: Severity::Safe,
                ino: Some(*ino),
                problem: format!("generation {} but the inode map says {}", item.was.generation, e.generation),
                action: "the map takes the record's".into(),
            });
            item.rewrite_record = true;
        } else if usize::from(e.record_len) != item.was.encoded_len() {
            out.push(Repair {
                severity: Severity::Safe,
                ino: Some(*ino),
                problem: format!(
                    "record length {} in the inode map, {} in the record",
                    e.record_len,
                    item.was.encoded_len()
                ),
                action: "the record is written again".into(),
            });
            item.rewrite_record = true;
        }
    }
    out
}
