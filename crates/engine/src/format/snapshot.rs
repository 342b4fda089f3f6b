//! Snapshots on disk (format 1.3, `INCOMPAT_SNAPSHOTS`): the snapshot list
//! block a checkpoint names, and one snapshot block per snapshot holding
//! the checkpoint record it froze (FORMAT.md 3.15, 3.16).
//!
//! A snapshot is a checkpoint kept: its IFile, and everything that IFile
//! reaches, stays where it is, so that the volume it describes can be
//! loaded again exactly as a checkpoint is loaded at mount.

use super::block::PAYLOAD_LEN;
use super::checkpoint::{Checkpoint, decode_index, index_entries};
use super::codec::{DecodeResult, Reader, Writer, bad, bounded};
use crate::types::{MetaBlock, SegmentNo, Timestamp};

/// Longest snapshot name, in bytes of UTF-8.
pub const NAME_MAX: usize = 64;
const LIST_FIXED: usize = 16;
const LIST_ENTRY: usize = 16;
/// The live tree's name after the entries: length, 7 reserved bytes, name.
const LIVE_NAME_BYTES: usize = 8 + NAME_MAX;
/// List flag: the live tree's name follows the entries (format 1.4).
const LIST_LIVE_NAMED: u32 = 1;
/// List flag: the count of free data blocks the snapshots hold follows
/// (format 1.11, `INCOMPAT_SNAPSHOT_RECORDS`).
const LIST_HELD_FREE: u32 = 2;
/// Where the live tree's name starts in a list of `entries` entries.
pub(crate) fn live_name_at(entries: usize) -> usize {
    LIST_FIXED + LIST_ENTRY * entries + 8
}
/// Most snapshots a volume holds (one list block).
pub const MAX_SNAPSHOTS: usize = (PAYLOAD_LEN - LIST_FIXED) / LIST_ENTRY;
/// Most snapshots and trees a list naming the live tree holds, with room
/// for the held count after the name.
pub const MAX_SNAPSHOTS_NAMED: usize = (PAYLOAD_LEN - LIST_FIXED - LIVE_NAME_BYTES - 8) / LIST_ENTRY;
/// Most a list naming the live tree is read with (one more than
/// [`MAX_SNAPSHOTS_NAMED`]: what format 1.4 to 1.10 allowed).
const MAX_SNAPSHOTS_NAMED_READ: usize = (PAYLOAD_LEN - LIST_FIXED - LIVE_NAME_BYTES) / LIST_ENTRY;
/// Record flag: a writable tree, kept while another is live (format 1.4).
const RECORD_WRITABLE: u8 = 1;
/// Record flag: what the image pins follows its index (format 1.11,
/// `INCOMPAT_SNAPSHOT_RECORDS`).
const RECORD_PINS: u8 = 2;
/// The pins' fixed part: meta-data blocks, run count, reserved.
const PINS_FIXED: usize = 16;
/// One run of pinned segments: first, count.
const PINS_RUN: usize = 8;
/// What the live tree is called while no list names it.
pub const DEFAULT_TREE: &str = "main";
const SNAP_FIXED: usize = 168;
/// Where a snapshot record's name starts: after its id, creation time,
/// name length, flags and two reserved bytes.
pub(crate) const RECORD_NAME_AT: usize = 24;
/// Most index entries a snapshot's checkpoint may hold (a checkpoint may
/// hold a few more: such a volume refuses new snapshots).
pub const MAX_SNAPSHOT_INDEX: usize = (PAYLOAD_LEN - SNAP_FIXED) / 16;

/// One entry of the snapshot list.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ListEntry {
    /// The snapshot's id (never reused on this volume).
    pub id: u64,
    /// Its snapshot block.
    pub address: MetaBlock,
}

/// The snapshot list: every snapshot and kept tree the volume holds,
/// oldest first, and the live tree's name when it is not [`DEFAULT_TREE`].
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct SnapshotList {
    /// The id the next snapshot gets.
    pub next_id: u64,
    /// The snapshots.
    pub entries: Vec<ListEntry>,
    /// The live tree's name, if it is not [`DEFAULT_TREE`] (format 1.4).
    pub live_name: Option<String>,
    /// Data blocks free in the live bitmap that a listed snapshot or
    /// tree holds, as of the checkpoint naming the list (format 1.11).
    pub held_free: Option<u64>,
}

impl SnapshotList {
    /// Encodes the payload of a snapshot list block.
    ///
    /// # Panics
    /// More than [`MAX_SNAPSHOTS`] entries ([`MAX_SNAPSHOTS_NAMED`] with a
    /// live name), or a bad live name: the engine refuses both first.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let max = if self.live_name.is_some() { MAX_SNAPSHOTS_NAMED_READ } else { MAX_SNAPSHOTS };
        assert!(self.entries.len() <= max);
        let named = if self.live_name.is_some() { LIVE_NAME_BYTES } else { 0 };
        // A list read from an older volume may fill the block: its count
        // stays out then (and the held set is read whole at mount).
        let held_free =
            self.held_free.filter(|_| LIST_FIXED + LIST_ENTRY * self.entries.len() + named + 8 <= PAYLOAD_LEN);
        let flags = if self.live_name.is_some() { LIST_LIVE_NAMED } else { 0 }
            | if held_free.is_some() { LIST_HELD_FREE } else { 0 };
        let mut w = Writer::with_capacity(LIST_FIXED + LIST_ENTRY * self.entries.len() + LIVE_NAME_BYTES + 8);
        w.u32(self.entries.len() as u32).u32(flags).u64(self.next_id);
        for e in &self.entries {
            w.u64(e.id).u64(e.address.0);
        }
        if let Some(name) = &self.live_name {
            assert!(bad_name(name).is_none());
            w.u8(name.len() as u8).zeros(7).bytes(&padded(name));
        }
        if let Some(n) = held_free {
            w.u64(n);
        }
        w.into_inner()
    }

    /// Decodes a snapshot list block's payload.
    ///
    /// # Errors
    /// Counts out of range, ids not increasing or not below `next_id`,
    /// trailing bytes.
    pub fn decode(payload: &[u8]) -> DecodeResult<SnapshotList> {
        let mut r = Reader::new(payload);
        let n = u64::from(r.u32()?);
        let flags = r.u32()?;
        if flags & !(LIST_LIVE_NAMED | LIST_HELD_FREE) != 0 {
            bad!("unknown snapshot list flags {flags:#x}");
        }
        let named = flags & LIST_LIVE_NAMED != 0;
        let n = bounded(n, "snapshot", if named { MAX_SNAPSHOTS_NAMED_READ } else { MAX_SNAPSHOTS })?;
        let next_id = r.u64()?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let id = r.u64()?;
            let address = MetaBlock(r.u64()?);
            if id == 0 || id >= next_id || entries.last().is_some_and(|l: &ListEntry| l.id >= id) {
                bad!("snapshot id {id} is 0, not below the next id {next_id}, or out of order");
            }
            entries.push(ListEntry { id, address });
        }
        let live_name = if named {
            let len = usize::from(r.u8()?);
            r.reserved(7)?;
            Some(decode_name(len, r.bytes(NAME_MAX)?)?)
        } else {
            None
        };
        let held_free = if flags & LIST_HELD_FREE != 0 { Some(r.u64()?) } else { None };
        if r.remaining() != 0 {
            bad!("{} bytes follow the snapshot list", r.remaining());
        }
        Ok(SnapshotList { next_id, entries, live_name, held_free })
    }
}

/// One snapshot: its name and the checkpoint it keeps.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SnapshotRecord {
    /// Its id (the block header's `name`).
    pub id: u64,
    /// When it was made.
    pub created: Timestamp,
    /// Its name.
    pub name: String,
    /// The checkpoint it froze.
    pub checkpoint: Checkpoint,
    /// A writable tree kept while another is live (a clone, or the tree
    /// that was live before one was mounted), not a read-only snapshot.
    pub writable: bool,
    /// What its image pins (format 1.11), when the record carries it.
    pub pins: Option<Pins>,
}

/// What a snapshot's image pins in the log, so that a mount need not walk
/// the image to find it.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Pins {
    /// Meta-data blocks the image reaches.
    pub meta_blocks: u64,
    /// The segments holding them, ascending, each once.
    pub segments: Vec<SegmentNo>,
}

impl Pins {
    /// The segments as runs `(first, count)`.
    fn runs(&self) -> Vec<(u32, u32)> {
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for s in &self.segments {
            match runs.last_mut() {
                Some((first, n)) if *first + *n == s.0 => *n += 1,
                _ => runs.push((s.0, 1)),
            }
        }
        runs
    }

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Pins> {
        let meta_blocks = r.u64()?;
        let n = bounded(u64::from(r.u32()?), "pinned segment run", PAYLOAD_LEN / PINS_RUN)?;
        r.reserved(4)?;
        let mut segments: Vec<SegmentNo> = Vec::new();
        for _ in 0..n {
            let first = r.u32()?;
            let count = r.u32()?;
            let end = first.checked_add(count).filter(|_| count > 0);
            let Some(end) = end else { bad!("a run of {count} pinned segments from {first}") };
            if segments.last().is_some_and(|l| l.0 >= first) {
                bad!("pinned segment runs out of order at segment {first}");
            }
            segments.extend((first..end).map(SegmentNo));
        }
        Ok(Pins { meta_blocks, segments })
    }
}

/// A name NUL-padded to [`NAME_MAX`] bytes.
fn padded(name: &str) -> [u8; NAME_MAX] {
    let mut raw = [0u8; NAME_MAX];
    raw[..name.len()].copy_from_slice(name.as_bytes());
    raw
}

/// A name of `len` bytes from its NUL-padded field, checked.
fn decode_name(len: usize, raw: &[u8]) -> DecodeResult<String> {
    if len > NAME_MAX || raw[len..].iter().any(|&b| b != 0) {
        bad!("snapshot name of {len} bytes, or bytes after it");
    }
    let Ok(name) = std::str::from_utf8(&raw[..len]) else { bad!("snapshot name is not UTF-8") };
    if let Some(why) = bad_name(name) {
        bad!("{why}");
    }
    Ok(name.to_string())
}

/// Why a snapshot name is refused, if it is.
#[must_use]
pub fn bad_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("a snapshot name may not be empty")
    } else if name.len() > NAME_MAX {
        Some("a snapshot name is at most 64 bytes")
    } else if name.contains(['/', '\0']) || name.chars().any(char::is_control) {
        Some("a snapshot name may not hold '/', NUL or control characters")
    } else if name == "." || name == ".." {
        Some("a snapshot may not be named . or ..")
    } else {
        None
    }
}

impl SnapshotRecord {
    /// Encodes the payload of a snapshot block.
    ///
    /// # Panics
    /// A bad name or too many index entries: the engine checks both first.
    /// `runs`: the volume has `INDEX_RUNS` (3.2).
    #[must_use]
    pub fn encode(&self, runs: bool) -> Vec<u8> {
        assert!(bad_name(&self.name).is_none());
        let c = &self.checkpoint;
        let entries = index_entries(&c.index, runs);
        assert!(entries.len() <= MAX_SNAPSHOT_INDEX);
        // Pins that do not fit the block stay out: the image is walked
        // at mount then, as a record without them is.
        let runs = self
            .pins
            .as_ref()
            .map(Pins::runs)
            .filter(|runs| SNAP_FIXED + 16 * entries.len() + PINS_FIXED + PINS_RUN * runs.len() <= PAYLOAD_LEN);
        let mut w = Writer::with_capacity(SNAP_FIXED + 16 * entries.len());
        let flags = if self.writable { RECORD_WRITABLE } else { 0 } | if runs.is_some() { RECORD_PINS } else { 0 };
        w.u64(self.id).timestamp(self.created).u8(self.name.len() as u8).u8(flags).zeros(2).bytes(&padded(&self.name));
        c.encode_core(&mut w);
        w.u32(entries.len() as u32).u32(0);
        debug_assert_eq!(w.len(), SNAP_FIXED);
        for e in &entries {
            e.encode(&mut w);
        }
        if let (Some(runs), Some(pins)) = (runs, &self.pins) {
            w.u64(pins.meta_blocks).u32(runs.len() as u32).u32(0);
            for (first, n) in runs {
                w.u32(first).u32(n);
            }
        }
        w.into_inner()
    }

    /// Whether [`SnapshotRecord::encode`] keeps its pins (they fit the block).
    #[must_use]
    pub fn pins_fit(&self, runs: bool) -> bool {
        let entries = index_entries(&self.checkpoint.index, runs).len();
        self.pins
            .as_ref()
            .is_some_and(|p| SNAP_FIXED + 16 * entries + PINS_FIXED + PINS_RUN * p.runs().len() <= PAYLOAD_LEN)
    }

    /// Decodes a snapshot block's payload.
    ///
    /// # Errors
    /// A bad name, counts out of range, unknown tables, trailing bytes.
    pub fn decode(payload: &[u8]) -> DecodeResult<SnapshotRecord> {
        let mut r = Reader::new(payload);
        let id = r.u64()?;
        let created = r.timestamp()?;
        let len = usize::from(r.u8()?);
        let flags = r.u8()?;
        if flags & !(RECORD_WRITABLE | RECORD_PINS) != 0 {
            bad!("unknown snapshot flags {flags:#x}");
        }
        r.reserved(2)?;
        let name = decode_name(len, r.bytes(NAME_MAX)?)?;
        if id == 0 {
            bad!("snapshot id 0");
        }
        let core = Checkpoint::decode_core(&mut r)?;
        let n = bounded(u64::from(r.u32()?), "index block", MAX_SNAPSHOT_INDEX)?;
        r.reserved(4)?;
        let index = decode_index(&mut r, n)?;
        let pins = if flags & RECORD_PINS != 0 { Some(Pins::decode(&mut r)?) } else { None };
        if r.remaining() != 0 {
            bad!("{} bytes follow the snapshot's index", r.remaining());
        }
        let checkpoint = Checkpoint { index, ..core };
        Ok(SnapshotRecord { id, created, name, checkpoint, writable: flags & RECORD_WRITABLE != 0, pins })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::checkpoint::{IndexRef, LogPosition};
    use crate::format::ifile::TableId;
    use crate::types::{SegmentNo, Seq};

    fn sample() -> SnapshotRecord {
        SnapshotRecord {
            id: 3,
            created: Timestamp { sec: 1_700_000_000, nsec: 7 },
            name: "before-upgrade".into(),
            checkpoint: Checkpoint {
                number: 9,
                time: Timestamp { sec: 1_700_000_000, nsec: 5 },
                log: LogPosition {
                    seq: Seq(40),
                    segment: SegmentNo(2),
                    offset: 9,
                    next_segment: SegmentNo(3),
                    prev_crc: 0xABCD,
                },
                inode_count: 252,
                node_count: 505,
                free_data_blocks: 1000,
                index: vec![IndexRef { table: TableId::InodeMap, first: 0, address: MetaBlock(300) }],
                snapshot_list: None,
                geometry: None,
                sparse: None,
            },
            writable: false,
            pins: None,
        }
    }

    #[test]
    fn pins_and_the_held_count_round_trip_and_truncations_are_refused() {
        let segs = [3u32, 4, 5, 9, 200, 201].map(SegmentNo).to_vec();
        let rec = SnapshotRecord { pins: Some(Pins { meta_blocks: 77, segments: segs }), ..sample() };
        let b = rec.encode(true);
        assert_eq!(SnapshotRecord::decode(&b).unwrap(), rec);
        for n in 0..b.len() {
            assert!(SnapshotRecord::decode(&b[..n]).is_err(), "{n}");
        }
        // Runs out of order, or of no segment, are refused.
        let mut bad = b.clone();
        let runs_at = b.len() - 3 * PINS_RUN;
        bad[runs_at + 12..runs_at + 16].copy_from_slice(&0u32.to_le_bytes());
        assert!(SnapshotRecord::decode(&bad).is_err(), "a run of no segment");
        let mut bad = b;
        bad[runs_at + 8..runs_at + 12].copy_from_slice(&1u32.to_le_bytes());
        assert!(SnapshotRecord::decode(&bad).is_err(), "runs out of order");
        // Pins too many for the block stay out, and say so.
        let many = (0..2000u32).map(|s| SegmentNo(s * 2)).collect();
        let big = SnapshotRecord { pins: Some(Pins { meta_blocks: 1, segments: many }), ..sample() };
        assert!(!big.pins_fit(true));
        assert_eq!(SnapshotRecord::decode(&big.encode(true)).unwrap().pins, None);
        let list = SnapshotList {
            next_id: 9,
            entries: vec![ListEntry { id: 2, address: MetaBlock(77) }],
            live_name: Some("t".into()),
            held_free: Some(12345),
        };
        let b = list.encode();
        assert_eq!(SnapshotList::decode(&b).unwrap(), list);
        for n in 0..b.len() {
            assert!(SnapshotList::decode(&b[..n]).is_err(), "{n}");
        }
    }

    #[test]
    fn records_and_lists_round_trip() {
        assert_eq!(SnapshotRecord::decode(&sample().encode(false)).unwrap(), sample());
        let tree = SnapshotRecord { writable: true, ..sample() };
        assert_eq!(SnapshotRecord::decode(&tree.encode(true)).unwrap(), tree);
        let mut list = SnapshotList {
            next_id: 9,
            entries: vec![ListEntry { id: 2, address: MetaBlock(77) }, ListEntry { id: 8, address: MetaBlock(90) }],
            live_name: None,
            held_free: None,
        };
        assert_eq!(SnapshotList::decode(&list.encode()).unwrap(), list);
        list.live_name = Some("what-if".into());
        assert_eq!(SnapshotList::decode(&list.encode()).unwrap(), list);
        let full = SnapshotList {
            next_id: 1000,
            entries: (1..=MAX_SNAPSHOTS_NAMED as u64).map(|id| ListEntry { id, address: MetaBlock(id) }).collect(),
            live_name: Some("n".repeat(NAME_MAX)),
            held_free: Some(u64::MAX),
        };
        assert!(full.encode().len() <= PAYLOAD_LEN);
        assert_eq!(SnapshotList::decode(&full.encode()).unwrap(), full);
    }

    #[test]
    fn truncations_and_bad_fields_are_refused() {
        let b = sample().encode(false);
        for n in 0..b.len() {
            assert!(SnapshotRecord::decode(&b[..n]).is_err(), "{n}");
        }
        let mut bad = b.clone();
        bad[20] = 65; // name longer than 64
        assert!(SnapshotRecord::decode(&bad).is_err());
        let mut bad = b;
        bad[24] = b'/';
        assert!(SnapshotRecord::decode(&bad).is_err());
        let list = SnapshotList {
            next_id: 2,
            entries: vec![ListEntry { id: 2, address: MetaBlock(7) }],
            live_name: None,
            held_free: None,
        };
        assert!(SnapshotList::decode(&list.encode()).is_err(), "an id not below next_id");
        let mut flagged = sample().encode(false);
        flagged[21] = 4;
        assert!(SnapshotRecord::decode(&flagged).is_err(), "an unknown record flag");
        let named =
            SnapshotList { next_id: 3, entries: Vec::new(), live_name: Some("t".into()), held_free: None }.encode();
        for n in 0..named.len() {
            assert!(SnapshotList::decode(&named[..n]).is_err(), "{n}");
        }
        let mut bad = named.clone();
        bad[4] = 5;
        assert!(SnapshotList::decode(&bad).is_err(), "an unknown list flag");
        let mut bad = named;
        bad[24] = b'/';
        assert!(SnapshotList::decode(&bad).is_err(), "a bad live name");
    }

    #[test]
    fn names_are_checked() {
        assert!(bad_name("daily-2026-11-23").is_none());
        for n in ["", "a/b", ".", "..", "x\ny", &"n".repeat(65)] {
            assert!(bad_name(n).is_some(), "{n:?}");
        }
    }

    #[test]
    fn names_are_where_the_raw_readers_find_them() {
        use crate::format::raw::{live_tree_name, snapshot_name};
        let b = sample().encode(false);
        assert_eq!(&b[snapshot_name(&b).unwrap()], b"before-upgrade");
        assert_eq!(snapshot_name(&b[..40]), None);
        let mut list = SnapshotList {
            next_id: 9,
            entries: vec![ListEntry { id: 2, address: MetaBlock(77) }, ListEntry { id: 8, address: MetaBlock(90) }],
            live_name: Some("what-if".into()),
            held_free: Some(3),
        };
        let b = list.encode();
        assert_eq!(&b[live_tree_name(&b).unwrap()], b"what-if");
        list.live_name = None;
        assert_eq!(live_tree_name(&list.encode()), None);
    }
}
