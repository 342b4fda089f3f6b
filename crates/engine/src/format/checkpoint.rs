//! A checkpoint record: one of the two slots at blocks 1 and 2.
//!
//! It says where the IFile was written (through its index blocks) and where the
//! log continues, so that mount can load the IFile and roll forward from there.
//! Slots are written alternately; mount takes the valid one with the highest
//! number, so a torn newest slot falls back to the older one.

use super::codec::{DecodeResult, Reader, Writer, bad, bounded};
use super::ifile::TableId;
use super::superblock::Geometry;
use crate::types::{BLOCK_SIZE, MetaBlock, SegmentNo, Seq, Timestamp};

/// `"DFCK"` little-endian.
pub const CHECKPOINT_MAGIC: u32 = u32::from_le_bytes(*b"DFCK");
const FIXED_LEN: usize = 112;
const INDEX_ENTRY_LEN: usize = 16;
/// Most IFile index blocks one checkpoint can name.
pub const MAX_INDEX_BLOCKS: usize = (BLOCK_SIZE - FIXED_LEN) / INDEX_ENTRY_LEN;

/// Where one IFile index block lives and which table blocks it lists.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IndexRef {
    /// The table it indexes.
    pub table: TableId,
    /// Number of the first table block it lists.
    pub first: u32,
    /// Its address.
    pub address: MetaBlock,
}

/// Where the log continues after a checkpoint: the next partial segment is
/// expected at `segment`/`offset` with sequence `seq`, and must name
/// `prev_crc` as its predecessor's descriptor checksum.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LogPosition {
    /// Sequence number of the next partial segment.
    pub seq: Seq,
    /// Segment it is written in.
    pub segment: SegmentNo,
    /// Block offset inside that segment.
    pub offset: u32,
    /// Segment the log moves to when this one is full.
    pub next_segment: SegmentNo,
    /// Descriptor checksum of the partial segment before it.
    pub prev_crc: u32,
}

/// A decoded checkpoint.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Checkpoint {
    /// Increases by one with every checkpoint; slot = number % 2.
    pub number: u64,
    /// When it was written.
    pub time: Timestamp,
    /// Where roll-forward starts.
    pub log: LogPosition,
    /// Entries in the inode map.
    pub inode_count: u64,
    /// Entries in the node map.
    pub node_count: u64,
    /// Free data blocks (a cross-check for the bitmaps).
    pub free_data_blocks: u64,
    /// Where the IFile is.
    pub index: Vec<IndexRef>,
    /// The snapshot list block (format 1.3), if the volume holds snapshots.
    pub snapshot_list: Option<MetaBlock>,
    /// The segment count and data blocks in use (volumes with
    /// `INCOMPAT_RESIZED`); `None`: the superblock's.
    pub geometry: Option<Geometry>,
}

impl Checkpoint {
    /// Encodes into one block.
    ///
    /// # Panics
    /// With more than [`MAX_INDEX_BLOCKS`] index blocks; the IFile writer
    /// refuses to grow that far, so more is a bug.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.index.len() <= MAX_INDEX_BLOCKS);
        let mut w = Writer::with_capacity(BLOCK_SIZE);
        w.u32(CHECKPOINT_MAGIC)
            .u32(0)
            .u16(super::superblock::FORMAT_MAJOR)
            .u16(super::superblock::FORMAT_MINOR)
            .u32(self.index.len() as u32);
        self.encode_core(&mut w);
        w.u64(self.snapshot_list.map_or(0, |a| a.0));
        let g = self.geometry.unwrap_or(Geometry { segment_count: 0, data_blocks: 0 });
        w.u32(g.segment_count).u32(0).u64(g.data_blocks).zeros(FIXED_LEN - 112);
        debug_assert_eq!(w.len(), FIXED_LEN);
        for e in &self.index {
            e.encode(&mut w);
        }
        super::record::seal(w.into_inner())
    }

    /// Decodes and validates a checkpoint slot.
    ///
    /// # Errors
    /// Empty slot, bad checksum, unsupported version, or bad fields.
    pub fn decode(block: &[u8]) -> DecodeResult<Checkpoint> {
        let (mut r, _minor) = super::record::open(block, CHECKPOINT_MAGIC, "no checkpoint in this slot")?;
        let n = r.u32()?;
        let n = bounded(u64::from(n), "index block", MAX_INDEX_BLOCKS)?;
        let Checkpoint { number, time, log, inode_count, node_count, free_data_blocks, .. } =
            Checkpoint::decode_core(&mut r)?;
        let snapshot_list = Some(MetaBlock(r.u64()?)).filter(|a| a.0 != 0);
        let segment_count = r.u32()?;
        r.reserved(4)?;
        let data_blocks = r.u64()?;
        r.reserved(FIXED_LEN - 112)?;
        let geometry = match (segment_count, data_blocks) {
            (0, 0) => None,
            (s, d) if s >= 16 && d >= 256 => Some(Geometry { segment_count: s, data_blocks: d }),
            (s, d) => bad!("geometry of {s} segments and {d} data blocks is out of range"),
        };
        let index = (0..n).map(|_| IndexRef::decode(&mut r)).collect::<DecodeResult<Vec<_>>>()?;
        r.reserved(r.remaining().min(BLOCK_SIZE - r.position()))?;
        Ok(Checkpoint { number, time, log, inode_count, node_count, free_data_blocks, index, snapshot_list, geometry })
    }
}

impl Checkpoint {
    /// Writes the fields a checkpoint slot and a snapshot record carry
    /// alike (FORMAT.md 3.2 bytes 16–87, 3.16): number, time, 4 reserved
    /// bytes, log position, counts.
    pub(super) fn encode_core(&self, w: &mut Writer) {
        w.u64(self.number)
            .timestamp(self.time)
            .u32(0)
            .u64(self.log.seq.0)
            .u32(self.log.segment.0)
            .u32(self.log.offset)
            .u32(self.log.next_segment.0)
            .u32(self.log.prev_crc)
            .u64(self.inode_count)
            .u64(self.node_count)
            .u64(self.free_data_blocks);
    }

    /// Reads what [`Checkpoint::encode_core`] wrote, into a checkpoint
    /// with no index, snapshot list or geometry.
    ///
    /// # Errors
    /// A number or log sequence of 0, a bad time, short input.
    pub(super) fn decode_core(r: &mut Reader<'_>) -> DecodeResult<Checkpoint> {
        let number = r.u64()?;
        let time = r.timestamp()?;
        r.reserved(4)?;
        let log = LogPosition {
            seq: Seq(r.u64()?),
            segment: SegmentNo(r.u32()?),
            offset: r.u32()?,
            next_segment: SegmentNo(r.u32()?),
            prev_crc: r.u32()?,
        };
        if number == 0 || log.seq.0 == 0 {
            bad!("checkpoint number {number} or log sequence {} is 0", log.seq.0);
        }
        Ok(Checkpoint {
            number,
            time,
            log,
            inode_count: r.u64()?,
            node_count: r.u64()?,
            free_data_blocks: r.u64()?,
            index: Vec::new(),
            snapshot_list: None,
            geometry: None,
        })
    }
}

impl IndexRef {
    /// 16 bytes: table, 3 reserved, first, address (3.2).
    pub(super) fn encode(&self, w: &mut Writer) {
        w.u8(self.table.code()).zeros(3).u32(self.first).u64(self.address.0);
    }

    /// Reads what [`IndexRef::encode`] wrote.
    ///
    /// # Errors
    /// An unknown table, reserved bytes set, short input.
    pub(super) fn decode(r: &mut Reader<'_>) -> DecodeResult<IndexRef> {
        let code = r.u8()?;
        let Some(table) = TableId::from_code(code) else { bad!("unknown IFile table {code}") };
        r.reserved(3)?;
        Ok(IndexRef { table, first: r.u32()?, address: MetaBlock(r.u64()?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        Checkpoint {
            number: 7,
            time: Timestamp { sec: 100, nsec: 5 },
            log: LogPosition {
                seq: Seq(42),
                segment: SegmentNo(3),
                offset: 17,
                next_segment: SegmentNo(4),
                prev_crc: 0xDEAD_BEEF,
            },
            inode_count: 1000,
            node_count: 12,
            free_data_blocks: 99,
            index: vec![
                IndexRef { table: TableId::SegmentUsage, first: 0, address: MetaBlock(300) },
                IndexRef { table: TableId::InodeMap, first: 0, address: MetaBlock(301) },
            ],
            snapshot_list: Some(MetaBlock(555)),
            geometry: None,
        }
    }

    #[test]
    fn geometry_round_trips_and_is_range_checked() {
        let c = Checkpoint { geometry: Some(Geometry { segment_count: 40, data_blocks: 70_000 }), ..sample() };
        assert_eq!(Checkpoint::decode(&c.encode()).unwrap(), c);
        let tiny = Checkpoint { geometry: Some(Geometry { segment_count: 3, data_blocks: 70_000 }), ..sample() };
        assert!(Checkpoint::decode(&tiny.encode()).is_err());
    }

    #[test]
    fn round_trip() {
        assert_eq!(Checkpoint::decode(&sample().encode()).unwrap(), sample());
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let block = sample().encode();
        for bit in 0..BLOCK_SIZE * 8 {
            let mut b = block.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Checkpoint::decode(&b).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn truncated_and_empty_slots_are_errors() {
        assert!(Checkpoint::decode(&sample().encode()[..64]).is_err());
        assert!(Checkpoint::decode(&[0u8; BLOCK_SIZE]).is_err());
    }
}
