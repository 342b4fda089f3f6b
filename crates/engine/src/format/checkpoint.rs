//! A checkpoint record: one of the two slots at blocks 1 and 2.
//!
//! It says where the IFile was written (through its index blocks) and where the
//! log continues, so that mount can load the IFile and roll forward from there.
//! Slots are written alternately; mount takes the valid one with the highest
//! number, so a torn newest slot falls back to the older one.

use super::codec::{DecodeResult, Reader, Writer, bad, bounded};
use super::ifile::{INDEX_PER_BLOCK, TableId};
use super::superblock::Geometry;
use crate::types::{BLOCK_SIZE, MetaBlock, SegmentNo, Seq, Timestamp};

/// `"DFCK"` little-endian.
pub const CHECKPOINT_MAGIC: u32 = u32::from_le_bytes(*b"DFCK");
const FIXED_LEN: usize = 112;
const INDEX_ENTRY_LEN: usize = 16;
/// Most index entries one checkpoint holds. Without `INDEX_RUNS` an entry
/// names one IFile index block; with it, a run of them at consecutive
/// addresses (1.5).
pub const MAX_INDEX_BLOCKS: usize = (BLOCK_SIZE - FIXED_LEN) / INDEX_ENTRY_LEN;
/// Bytes at the end of the slot a checkpoint of a sparse IFile keeps for
/// its [`SparseTail`] (1.7).
const TAIL_LEN: usize = 32;
/// Most index entries a checkpoint of a sparse IFile holds, its tail after
/// them.
pub const MAX_INDEX_BLOCKS_SPARSE: usize = (BLOCK_SIZE - FIXED_LEN - TAIL_LEN) / INDEX_ENTRY_LEN;
/// The tail's `flags`: it is there.
const TAIL_PRESENT: u32 = 1;
/// Most IFile index blocks the entries of one record may name once their
/// runs are expanded: far more than any geometry needs (a bitmap of
/// 2^20 index blocks maps about 60 PiB), and a bound on what a corrupt
/// record can make a reader allocate.
pub const MAX_INDEX_EXPANDED: usize = 1 << 20;

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

/// What a checkpoint of a sparse IFile (`SPARSE_IFILE`, 1.7) says besides
/// the index, so that a mount reads no table that grows with the devices:
/// where its own partial segments start (the IFile blocks there are in no
/// segment usage entry yet), and two sums of the segment usage table as
/// written.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SparseTail {
    /// Segment of the checkpoint's first partial segment.
    pub ifile_segment: SegmentNo,
    /// Its block offset in that segment.
    pub ifile_offset: u32,
    /// Segments in use whose entry holds no live byte and no IFile block.
    pub vacant_segments: u32,
    /// Live bytes of every segment, 4096 for each IFile block counted.
    pub live_bytes: u64,
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
    /// Its tail (volumes with `SPARSE_IFILE`).
    pub sparse: Option<SparseTail>,
}

impl Checkpoint {
    /// Encodes into one block.
    ///
    /// # Panics
    /// With more than [`MAX_INDEX_BLOCKS`] index entries; the IFile writer
    /// refuses to grow that far, so more is a bug. `runs`: the volume has
    /// `INDEX_RUNS`, so an entry may name a run of index blocks.
    #[must_use]
    pub fn encode(&self, runs: bool) -> Vec<u8> {
        let entries = index_entries(&self.index, runs);
        let max = if self.sparse.is_some() { MAX_INDEX_BLOCKS_SPARSE } else { MAX_INDEX_BLOCKS };
        assert!(entries.len() <= max);
        let mut w = Writer::with_capacity(BLOCK_SIZE);
        w.u32(CHECKPOINT_MAGIC)
            .u32(0)
            .u16(super::superblock::FORMAT_MAJOR)
            .u16(super::superblock::FORMAT_MINOR)
            .u32(entries.len() as u32);
        self.encode_core(&mut w);
        w.u64(self.snapshot_list.map_or(0, |a| a.0));
        let g = self.geometry.unwrap_or(Geometry { segment_count: 0, data_blocks: 0 });
        w.u32(g.segment_count).u32(0).u64(g.data_blocks).zeros(FIXED_LEN - 112);
        debug_assert_eq!(w.len(), FIXED_LEN);
        for e in &entries {
            e.encode(&mut w);
        }
        if let Some(t) = &self.sparse {
            w.zeros(BLOCK_SIZE - TAIL_LEN - w.len());
            w.u32(t.ifile_segment.0)
                .u32(t.ifile_offset)
                .u32(t.vacant_segments)
                .u32(TAIL_PRESENT)
                .u64(t.live_bytes)
                .zeros(8);
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
        let index = decode_index(&mut r, n)?;
        let sparse = if n <= MAX_INDEX_BLOCKS_SPARSE { decode_tail(block)? } else { None };
        let end = if sparse.is_some() { BLOCK_SIZE - TAIL_LEN } else { BLOCK_SIZE };
        r.reserved(r.remaining().min(end - r.position()))?;
        Ok(Checkpoint {
            number,
            time,
            log,
            inode_count,
            node_count,
            free_data_blocks,
            index,
            snapshot_list,
            geometry,
            sparse,
        })
    }
}

/// The tail of a checkpoint slot, if its `flags` say it is there (3.2).
fn decode_tail(block: &[u8]) -> DecodeResult<Option<SparseTail>> {
    let Some(tail) = block.get(BLOCK_SIZE - TAIL_LEN..BLOCK_SIZE) else { bad!("a checkpoint slot is one block") };
    let mut r = Reader::new(tail);
    let (segment, offset, vacant, flags) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
    let live_bytes = r.u64()?;
    match flags {
        0 => {
            // No tail: the bytes are reserved (checked with the rest).
            Ok(None)
        }
        TAIL_PRESENT => {
            r.reserved(8)?;
            Ok(Some(SparseTail {
                ifile_segment: SegmentNo(segment),
                ifile_offset: offset,
                vacant_segments: vacant,
                live_bytes,
            }))
        }
        f => bad!("checkpoint tail flags {f:#x} are unknown"),
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
            sparse: None,
        })
    }
}

/// One encoded index entry (3.2): an index block and the `more` index
/// blocks after it, listing the table's next chunks, at the next addresses.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IndexEntry {
    /// The first block of the run.
    pub head: IndexRef,
    /// Further index blocks in the run (0 without `INDEX_RUNS`).
    pub more: u16,
}

impl IndexEntry {
    /// 16 bytes: table, 1 reserved, `more`, first, address (3.2).
    pub(super) fn encode(&self, w: &mut Writer) {
        let h = self.head;
        w.u8(h.table.code()).zeros(1).u16(self.more).u32(h.first).u64(h.address.0);
    }

    /// Reads what [`IndexEntry::encode`] wrote.
    ///
    /// # Errors
    /// An unknown table, the reserved byte set, short input.
    pub(super) fn decode(r: &mut Reader<'_>) -> DecodeResult<IndexEntry> {
        let code = r.u8()?;
        let Some(table) = TableId::from_code(code) else { bad!("unknown IFile table {code}") };
        r.reserved(1)?;
        let more = r.u16()?;
        Ok(IndexEntry { head: IndexRef { table, first: r.u32()?, address: MetaBlock(r.u64()?) }, more })
    }

    /// The index blocks the run names, in order.
    ///
    /// # Errors
    /// The run's chunk numbers or addresses overflow.
    fn expand(&self) -> DecodeResult<impl Iterator<Item = IndexRef> + use<>> {
        let h = self.head;
        let span = u64::from(self.more) * INDEX_PER_BLOCK as u64;
        if u64::from(h.first) + span > u64::from(u32::MAX) || h.address.0.checked_add(u64::from(self.more)).is_none() {
            bad!("an index run of {} blocks from table block {} overflows", u32::from(self.more) + 1, h.first);
        }
        Ok((0..=u32::from(self.more)).map(move |k| IndexRef {
            table: h.table,
            first: h.first + k * INDEX_PER_BLOCK as u32,
            address: MetaBlock(h.address.0 + u64::from(k)),
        }))
    }
}

/// The most index entries a checkpoint of an IFile of `index_blocks` index
/// blocks takes once all of them are written together: one each without
/// runs; with them, a run per table, broken again where the checkpoint's
/// partial segments break (each at least half a segment of
/// `segment_blocks`, but the first).
#[must_use]
pub fn index_entries_bound(index_blocks: usize, segment_blocks: u32, runs: bool) -> usize {
    if runs { 6 + index_blocks.div_ceil(segment_blocks as usize / 2) } else { index_blocks }
}

/// IFile index blocks for tables of these lengths (entries).
#[must_use]
pub fn index_blocks_for(segments: u64, groups: u64, data_blocks: u64, inodes: u64, nodes: u64) -> usize {
    let chunks = |entries: u64, t: TableId| entries.div_ceil(t.per_block() as u64).div_ceil(INDEX_PER_BLOCK as u64);
    (chunks(segments, TableId::SegmentUsage)
        + chunks(groups, TableId::GroupDesc)
        + chunks(data_blocks.div_ceil(64), TableId::Bitmap)
        + chunks(inodes, TableId::InodeMap)
        + chunks(nodes, TableId::NodeMap)) as usize
}

/// The entries that encode `index` (sorted by table and chunk): one per
/// index block, or with `runs` one per run of consecutive chunks of a
/// table written at consecutive addresses.
#[must_use]
pub fn index_entries(index: &[IndexRef], runs: bool) -> Vec<IndexEntry> {
    let mut out: Vec<IndexEntry> = Vec::new();
    for r in index {
        if let Some(last) = out.last_mut().filter(|_| runs) {
            let n = u64::from(last.more) + 1;
            let h = last.head;
            let follows = h.table == r.table
                && u64::from(h.first) + n * INDEX_PER_BLOCK as u64 == u64::from(r.first)
                && h.address.0 + n == r.address.0;
            if follows && last.more < u16::MAX {
                last.more += 1;
                continue;
            }
        }
        out.push(IndexEntry { head: *r, more: 0 });
    }
    out
}

/// Reads `n` index entries and expands their runs, at most
/// [`MAX_INDEX_EXPANDED`] index blocks in all.
///
/// # Errors
/// A bad entry, an overflowing run, too many index blocks.
pub(super) fn decode_index(r: &mut Reader<'_>, n: usize) -> DecodeResult<Vec<IndexRef>> {
    let mut index = Vec::with_capacity(n);
    for _ in 0..n {
        let e = IndexEntry::decode(r)?;
        if index.len() + usize::from(e.more) + 1 > MAX_INDEX_EXPANDED {
            bad!("the index names more than {MAX_INDEX_EXPANDED} index blocks");
        }
        index.extend(e.expand()?);
    }
    Ok(index)
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
            sparse: None,
        }
    }

    #[test]
    fn a_sparse_tail_round_trips_and_leaves_room_for_fewer_entries() {
        let tail = SparseTail {
            ifile_segment: SegmentNo(9),
            ifile_offset: 200,
            vacant_segments: 1_500_000,
            live_bytes: 1 << 40,
        };
        let c = Checkpoint { sparse: Some(tail), ..sample() };
        assert_eq!(Checkpoint::decode(&c.encode(true)).unwrap(), c);
        // A slot without a tail decodes as one, its tail bytes reserved.
        assert_eq!(Checkpoint::decode(&sample().encode(true)).unwrap().sparse, None);
        let mut block = c.encode(true);
        block[BLOCK_SIZE - TAIL_LEN + 12] = 3;
        assert!(Checkpoint::decode(&super::super::record::seal(block[..].to_vec())).is_err(), "unknown tail flags");
        assert_eq!(MAX_INDEX_BLOCKS_SPARSE, 247);
    }

    #[test]
    fn geometry_round_trips_and_is_range_checked() {
        let c = Checkpoint { geometry: Some(Geometry { segment_count: 40, data_blocks: 70_000 }), ..sample() };
        assert_eq!(Checkpoint::decode(&c.encode(true)).unwrap(), c);
        let tiny = Checkpoint { geometry: Some(Geometry { segment_count: 3, data_blocks: 70_000 }), ..sample() };
        assert!(Checkpoint::decode(&tiny.encode(false)).is_err());
    }

    #[test]
    fn round_trip() {
        assert_eq!(Checkpoint::decode(&sample().encode(false)).unwrap(), sample());
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let block = sample().encode(false);
        for bit in 0..BLOCK_SIZE * 8 {
            let mut b = block.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Checkpoint::decode(&b).is_err(), "bit {bit}");
        }
    }

    /// A bitmap of 600 index blocks written in two runs, and single
    /// blocks around it.
    fn with_runs() -> Checkpoint {
        let per = INDEX_PER_BLOCK as u32;
        let mut index = vec![IndexRef { table: TableId::SegmentUsage, first: 0, address: MetaBlock(300) }];
        index.extend((0..600u32).map(|c| IndexRef {
            table: TableId::Bitmap,
            first: c * per,
            address: MetaBlock(if c < 400 { 1000 + u64::from(c) } else { 5000 + u64::from(c) }),
        }));
        index.push(IndexRef { table: TableId::InodeMap, first: 0, address: MetaBlock(1400) });
        Checkpoint { index, ..sample() }
    }

    #[test]
    fn runs_of_index_blocks_take_one_entry_each() {
        let c = with_runs();
        let entries = index_entries(&c.index, true);
        assert_eq!(entries.len(), 4, "{entries:?}");
        assert_eq!(entries[1].more, 399);
        assert_eq!(Checkpoint::decode(&c.encode(true)).unwrap(), c);
        // Without INDEX_RUNS every block is an entry, too many for a slot.
        assert_eq!(index_entries(&c.index, false).len(), 602);
        // A block of the run elsewhere splits it.
        let mut split = c.clone();
        split.index[100].address = MetaBlock(9000);
        assert_eq!(index_entries(&split.index, true).len(), 6);
        assert_eq!(Checkpoint::decode(&split.encode(true)).unwrap(), split);
    }

    #[test]
    fn runs_that_overflow_or_name_too_much_are_refused() {
        let entry = |first: u32, address: u64, more: u16| {
            let mut w = Writer::with_capacity(16);
            IndexEntry { head: IndexRef { table: TableId::Bitmap, first, address: MetaBlock(address) }, more }
                .encode(&mut w);
            w.into_inner()
        };
        let read = |bytes: &[u8], n: usize| decode_index(&mut Reader::new(bytes), n);
        assert_eq!(read(&entry(0, 10, 2), 1).unwrap().len(), 3);
        assert!(read(&entry(u32::MAX - 10, 10, 1), 1).is_err(), "chunk numbers past u32");
        assert!(read(&entry(0, u64::MAX, 1), 1).is_err(), "addresses past u64");
        let many: Vec<u8> = (0..17).flat_map(|i| entry(0, i * 70_000, u16::MAX)).collect();
        assert!(read(&many, 17).is_err(), "more than MAX_INDEX_EXPANDED blocks");
    }

    #[test]
    fn truncated_and_empty_slots_are_errors() {
        assert!(Checkpoint::decode(&sample().encode(false)[..64]).is_err());
        assert!(Checkpoint::decode(&[0u8; BLOCK_SIZE]).is_err());
    }
}
