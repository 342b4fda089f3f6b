//! Snapshots on disk (format 1.3, `INCOMPAT_SNAPSHOTS`): the snapshot list
//! block a checkpoint names, and one snapshot block per snapshot holding
//! the checkpoint record it froze (FORMAT.md 3.15, 3.16).
//!
//! A snapshot is a checkpoint kept: its IFile, and everything that IFile
//! reaches, stays where it is, so that the volume it describes can be
//! loaded again exactly as a checkpoint is loaded at mount.

use super::block::PAYLOAD_LEN;
use super::checkpoint::{Checkpoint, IndexRef};
use super::codec::{DecodeResult, Reader, Writer, bad, bounded};
use crate::types::{MetaBlock, Timestamp};

/// Longest snapshot name, in bytes of UTF-8.
pub const NAME_MAX: usize = 64;
const LIST_FIXED: usize = 16;
const LIST_ENTRY: usize = 16;
/// Most snapshots a volume holds (one list block).
pub const MAX_SNAPSHOTS: usize = (PAYLOAD_LEN - LIST_FIXED) / LIST_ENTRY;
const SNAP_FIXED: usize = 168;
/// Most IFile index blocks a snapshot's checkpoint may name (a checkpoint
/// may name a few more: such a volume refuses new snapshots).
pub const MAX_SNAPSHOT_INDEX: usize = (PAYLOAD_LEN - SNAP_FIXED) / 16;

/// One entry of the snapshot list.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ListEntry {
    /// The snapshot's id (never reused on this volume).
    pub id: u64,
    /// Its snapshot block.
    pub address: MetaBlock,
}

/// The snapshot list: every snapshot the volume holds, oldest first.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct SnapshotList {
    /// The id the next snapshot gets.
    pub next_id: u64,
    /// The snapshots.
    pub entries: Vec<ListEntry>,
}

impl SnapshotList {
    /// Encodes the payload of a snapshot list block.
    ///
    /// # Panics
    /// More than [`MAX_SNAPSHOTS`] entries: the engine refuses to make more.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.entries.len() <= MAX_SNAPSHOTS);
        let mut w = Writer::with_capacity(LIST_FIXED + LIST_ENTRY * self.entries.len());
        w.u32(self.entries.len() as u32).u32(0).u64(self.next_id);
        for e in &self.entries {
            w.u64(e.id).u64(e.address.0);
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
        let n = bounded(u64::from(r.u32()?), "snapshot", MAX_SNAPSHOTS)?;
        r.reserved(4)?;
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
        if r.remaining() != 0 {
            bad!("{} bytes follow the snapshot list", r.remaining());
        }
        Ok(SnapshotList { next_id, entries })
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
    /// A bad name or too many index blocks: the engine checks both first.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        assert!(bad_name(&self.name).is_none());
        let c = &self.checkpoint;
        assert!(c.index.len() <= MAX_SNAPSHOT_INDEX);
        let mut w = Writer::with_capacity(SNAP_FIXED + 16 * c.index.len());
        let mut name = [0u8; NAME_MAX];
        name[..self.name.len()].copy_from_slice(self.name.as_bytes());
        w.u64(self.id).timestamp(self.created).u8(self.name.len() as u8).zeros(3).bytes(&name);
        c.encode_core(&mut w);
        w.u32(c.index.len() as u32).u32(0);
        debug_assert_eq!(w.len(), SNAP_FIXED);
        for e in &c.index {
            e.encode(&mut w);
        }
        w.into_inner()
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
        r.reserved(3)?;
        let raw = r.bytes(NAME_MAX)?;
        if len > NAME_MAX || raw[len..].iter().any(|&b| b != 0) {
            bad!("snapshot name of {len} bytes, or bytes after it");
        }
        let Ok(name) = std::str::from_utf8(&raw[..len]) else { bad!("snapshot name is not UTF-8") };
        if let Some(why) = bad_name(name) {
            bad!("{why}");
        }
        if id == 0 {
            bad!("snapshot id 0");
        }
        let core = Checkpoint::decode_core(&mut r)?;
        let n = bounded(u64::from(r.u32()?), "index block", MAX_SNAPSHOT_INDEX)?;
        r.reserved(4)?;
        let index = (0..n).map(|_| IndexRef::decode(&mut r)).collect::<DecodeResult<Vec<_>>>()?;
        if r.remaining() != 0 {
            bad!("{} bytes follow the snapshot's index", r.remaining());
        }
        let checkpoint = Checkpoint { index, ..core };
        Ok(SnapshotRecord { id, created, name: name.to_string(), checkpoint })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::checkpoint::LogPosition;
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
            },
        }
    }

    #[test]
    fn records_and_lists_round_trip() {
        assert_eq!(SnapshotRecord::decode(&sample().encode()).unwrap(), sample());
        let list = SnapshotList {
            next_id: 9,
            entries: vec![ListEntry { id: 2, address: MetaBlock(77) }, ListEntry { id: 8, address: MetaBlock(90) }],
        };
        assert_eq!(SnapshotList::decode(&list.encode()).unwrap(), list);
    }

    #[test]
    fn truncations_and_bad_fields_are_refused() {
        let b = sample().encode();
        for n in 0..b.len() {
            assert!(SnapshotRecord::decode(&b[..n]).is_err(), "{n}");
        }
        let mut bad = b.clone();
        bad[20] = 65; // name longer than 64
        assert!(SnapshotRecord::decode(&bad).is_err());
        let mut bad = b;
        bad[24] = b'/';
        assert!(SnapshotRecord::decode(&bad).is_err());
        let list = SnapshotList { next_id: 2, entries: vec![ListEntry { id: 2, address: MetaBlock(7) }] };
        assert!(SnapshotList::decode(&list.encode()).is_err(), "an id not below next_id");
    }

    #[test]
    fn names_are_checked() {
        assert!(bad_name("daily-2026-11-23").is_none());
        for n in ["", "a/b", ".", "..", "x\ny", &"n".repeat(65)] {
            assert!(bad_name(n).is_some(), "{n:?}");
        }
    }
}
