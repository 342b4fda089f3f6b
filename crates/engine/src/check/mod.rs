//! fsck: an independent walk of the whole volume that checks every invariant
//! of `docs/DESIGN.md`.
//!
//! The IFile is brought up to date the way mount does it (newest checkpoint
//! plus roll-forward, in memory, nothing written). Everything else is read
//! straight from the devices and decoded again here, not taken from the
//! engine's caches: every inode block, every node, every directory, extent
//! map and xattr set, and the result is compared with the IFile.

mod flags;
mod marks;
pub mod scrub;
mod space;
pub mod tree;
mod walk;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::device::BlockDevice;
use crate::error::Result;
use crate::format::inode::InodeRecord;
use crate::meta_log::Log;
use crate::meta_log::mount::OpenReport;
use crate::types::{InodeNo, NodeId};

/// The invariants of docs/DESIGN.md, by id: what a [`Problem`] breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// I1 data before meta-data.
    I1,
    /// I2 no reuse before a durable free.
    I2,
    /// I3 fsync durable on both devices.
    I3,
    /// I4 orphans.
    I4,
    /// I5 hostile images: every structure decodes or is refused.
    I5,
    /// I6 one operation, one group.
    I6,
    /// I7 live bytes.
    I7,
    /// I8 namespace.
    I8,
    /// I9 replacement.
    I9,
    /// I12 snapshot images complete.
    I12,
    /// I13 snapshot blocks never reused.
    I13,
    /// I20 snapshot records match their images.
    I20,
    /// Q1 quota usage follows the inodes; the quota record is whole.
    Q1,
}

impl Invariant {
    /// The id and name, as docs/DESIGN.md writes them.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Invariant::I1 => "I1 data before meta-data",
            Invariant::I2 => "I2 no reuse before a durable free",
            Invariant::I3 => "I3 fsync durable",
            Invariant::I4 => "I4 orphans",
            Invariant::I5 => "I5 hostile images",
            Invariant::I6 => "I6 one operation, one group",
            Invariant::I7 => "I7 live bytes",
            Invariant::I8 => "I8 namespace",
            Invariant::I9 => "I9 replacement",
            Invariant::I12 => "I12 snapshot images complete",
            Invariant::I13 => "I13 snapshot blocks never reused",
            Invariant::I20 => "I20 snapshot records match their images",
            Invariant::Q1 => "Q1 quota usage and record",
        }
    }

    /// The short id ("I8").
    #[must_use]
    pub fn id(self) -> &'static str {
        self.name().split(' ').next().unwrap_or("I?")
    }
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The invariant it breaks; None for damage found while opening the
    /// volume (a checkpoint that does not load, commits lost), which is
    /// no broken rule of the engine's.
    pub invariant: Option<Invariant>,
    /// The structure concerned ("inode", "directory", "extent map", "bitmap", ...).
    pub structure: &'static str,
    /// The inode concerned, if any.
    pub ino: Option<InodeNo>,
    /// The block concerned, if any.
    pub block: Option<u64>,
    /// What is wrong, in plain words.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(i) = self.invariant {
            write!(f, "[{}] ", i.id())?;
        }
        write!(f, "{}", self.structure)?;
        if let Some(i) = self.ino {
            write!(f, " of inode {i}")?;
        }
        if let Some(b) = self.block {
            write!(f, " at block {b}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Counts of what the walk saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckStats {
    /// Inodes in use.
    pub inodes: u64,
    /// Directories.
    pub directories: u64,
    /// Regular files.
    pub files: u64,
    /// Files keeping their bytes inline.
    pub inline_files: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Other inodes (devices, fifos, sockets).
    pub special: u64,
    /// Directory entries.
    pub entries: u64,
    /// Meta-data nodes and blobs in use.
    pub nodes: u64,
    /// Data blocks mapped by files.
    pub data_blocks: u64,
    /// Inodes on the orphan list.
    pub orphans: u64,
}

/// What fsck found.
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// Every broken invariant.
    pub problems: Vec<Problem>,
    /// A receive under way on the live tree, in words (its mark on the
    /// root); its tree is incomplete until it ends.
    pub receiving: Option<String>,
    /// While a receive is under way: the namespace disagreements it
    /// explains (entries naming inodes it has not made yet, link counts and
    /// `..` it sets at its end), which are no problems until it ends.
    pub explained: Vec<Problem>,
    /// Counts.
    pub stats: CheckStats,
    /// What mounting would do: checkpoint, roll-forward.
    pub open: OpenReport,
}

impl CheckReport {
    /// Whether the volume is consistent.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Everything fsck decoded from the devices.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub inodes: HashMap<InodeNo, InodeRecord>,
    pub nodes: HashMap<NodeId, (InodeNo, crate::meta_log::Object)>,
}

/// Checks the volume on `meta` and `data`, which must not be mounted.
///
/// # Errors
/// Only when the volume cannot be opened at all (no superblock, no valid
/// checkpoint, I/O failure); every inconsistency past that is a [`Problem`].
pub fn check(meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>) -> Result<CheckReport> {
    let (log, open) = Log::open(meta, data)?;
    // Damage met while opening comes first: what it cost is what matters most.
    let mut problems: Vec<Problem> = open
        .damage
        .iter()
        .map(|d| Problem { invariant: None, structure: "log", ino: None, block: None, message: d.clone() })
        .collect();
    // One superblock copy did not decode (a rewrite torn by a crash, or
    // damage): the other was used, and a writable mount writes it again.
    problems.extend(open.superblock_repair.iter().map(|r| Problem {
        invariant: None,
        structure: "superblock",
        ino: None,
        block: Some(0),
        message: format!("{r}; a writable mount (or `dualfs fsck -p`) writes it again"),
    }));
    // Live bytes the checkpoint had wrong were recounted when it was loaded.
    // So were data groups' free counts (a lazy mount would refuse them).
    problems.extend(open.recounted.iter().map(|r| Problem {
        invariant: Some(if r.starts_with("data group") { Invariant::I8 } else { Invariant::I7 }),
        structure: if r.starts_with("data group") { "group descriptor" } else { "segment usage" },
        ino: None,
        block: None,
        message: r.clone(),
    }));
    let mut stats = CheckStats::default();
    let loaded = walk::load(&log, &mut problems);
    let receiving = marks::root_xattr(&loaded, crate::format::stream::RECEIVING_XATTR);
    let mut explained = Vec::new();
    let explains = receiving.as_ref().map(|_| &mut explained);
    walk::check_namespace(&log, &loaded, &mut problems, explains, &mut stats);
    flags::check_flags(log.superblock().incompat, &loaded, &mut problems);
    flags::check_quota(log.superblock().incompat, &loaded, &mut problems);
    space::check_space(&log, &loaded, &mut problems, &mut stats);
    check_snapshots(&log, &loaded, &mut problems);
    let receiving = receiving.map(|m| crate::format::stream::describe_mark(&m));
    Ok(CheckReport { problems, receiving, explained, stats, open })
}

/// I12: every snapshot's image loads and passes the checks the live
/// volume does (its namespace, its bitmap against its extents, its
/// segment usage); I13: a data block the live volume and a snapshot both
/// map belongs to the same file in both (the allocator never
/// handed a held block to anything else), and so between two snapshots.
fn check_snapshots(log: &Log, loaded: &Loaded, problems: &mut Vec<Problem>) {
    // I20: what the records carry (pins, the held count), against a walk
    // of every image and the bitmaps, made when the volume was opened.
    problems.extend(log.snapshot_record_problems().iter().map(|m| Problem {
        invariant: Some(Invariant::I20),
        structure: "snapshot record",
        ino: None,
        block: None,
        message: m.clone(),
    }));
    let damaged_before = problems.iter().filter(|p| p.invariant == Some(Invariant::I12)).count();
    let mut maps = vec![("the live volume".to_string(), space::data_map(loaded))];
    for s in log.snapshots() {
        let image = match log.open_image(&s.checkpoint) {
            Ok(i) => i,
            Err(e) => {
                problems.push(Problem {
                    invariant: Some(Invariant::I12),
                    structure: "snapshot",
                    ino: None,
                    block: Some(s.address.0),
                    message: format!("snapshot {}: its image does not load: {e}", s.name),
                });
                continue;
            }
        };
        let mut found = Vec::new();
        let mut stats = CheckStats::default();
        let image_loaded = walk::load(&image, &mut found);
        walk::check_namespace(&image, &image_loaded, &mut found, None, &mut stats);
        space::check_space(&image, &image_loaded, &mut found, &mut stats);
        for p in found {
            problems.push(Problem {
                invariant: Some(Invariant::I12),
                message: format!("snapshot {}: {}", s.name, p),
                ..p
            });
        }
        maps.push((format!("snapshot {}", s.name), space::data_map(&image_loaded)));
    }
    // A damaged image's bitmap makes the held count wrong too: the image
    // is what is named then.
    let damaged = problems.iter().filter(|p| p.invariant == Some(Invariant::I12)).count() > damaged_before;
    if let (Some(m), false) = (log.snapshot_held_count_problem(), damaged) {
        problems.push(Problem {
            invariant: Some(Invariant::I20),
            structure: "snapshot list",
            ino: None,
            block: None,
            message: m.to_string(),
        });
    }
    for i in 0..maps.len() {
        for j in i + 1..maps.len() {
            same_where_shared(&maps[i], &maps[j], problems);
        }
    }
}

type DataMap = (String, Vec<(u64, u64, InodeNo, u64)>);

/// I13 between two trees: a two-pointer sweep over their extents, sorted
/// by data block (disjoint within each tree, or I8 says so).
fn same_where_shared(a: &DataMap, b: &DataMap, problems: &mut Vec<Problem>) {
    let (mut i, mut j) = (0, 0);
    let (xs, ys) = (&a.1, &b.1);
    while i < xs.len() && j < ys.len() {
        let (x, y) = (xs[i], ys[j]);
        let lo = x.0.max(y.0);
        let (x_end, y_end) = (x.0.saturating_add(x.1), y.0.saturating_add(y.1));
        // The same file, not the same file block: a collapse or an insert
        // moves a block within its file without changing its bytes.
        if lo < x_end.min(y_end) && x.2 != y.2 {
            problems.push(Problem {
                invariant: Some(Invariant::I13),
                structure: "extent map",
                ino: Some(y.2),
                block: Some(lo),
                message: format!(
                    "data block {lo} is block {} of inode {} in {} but block {} of inode {} in {}",
                    x.3 + (lo - x.0),
                    x.2,
                    a.0,
                    y.3 + (lo - y.0),
                    y.2,
                    b.0
                ),
            });
        }
        if x_end <= y_end {
            i += 1;
        } else {
            j += 1;
        }
    }
}
