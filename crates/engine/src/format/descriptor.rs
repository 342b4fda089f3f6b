//! The partial-segment descriptor (paper §3.2, Figure 1).
//!
//! It heads every partial segment and says everything roll-forward and the
//! cleaner need without reading the blocks themselves: sequence, time, where
//! the log goes next, the checksum chain, who owns each block (the finfo
//! runs), which inodes each inode block holds, and the change records that
//! bring the IFile up to date.
//!
//! The descriptor is a byte stream spread over one or more descriptor blocks.
//! The first block's payload starts with `u32 desc_crc, u32 stream_len`; the
//! stream follows and continues in the payloads of the following blocks.

use super::block::{BlockKind, PAYLOAD_LEN};
use super::checksum;
use super::codec::{DecodeResult, Reader, Writer, bad, bounded};
use super::fsync::FsyncRecord;
use crate::types::{DataBlock, InodeNo, NodeId, SegmentNo, Seq, Timestamp};

/// What a partial segment carries.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PsKind {
    /// Meta-data written by file-system operations (rolled forward).
    Normal,
    /// IFile blocks written by a checkpoint (skipped by roll-forward).
    Checkpoint,
    /// Fsync records and the raw data blocks they carry: what one or more
    /// fsyncs made durable without a commit group (see [`super::fsync`]).
    /// Since format 1.1.
    Fsync,
}

impl PsKind {
    /// The code stored in the descriptor.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            PsKind::Normal => 1,
            PsKind::Checkpoint => 2,
            PsKind::Fsync => 3,
        }
    }
}

/// Owner and name of one body block.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Summary {
    /// What the block is.
    pub kind: BlockKind,
    /// The inode it belongs to (0 for IFile blocks).
    pub owner: InodeNo,
    /// Its node id, or IFile table position.
    pub name: u64,
}

/// One inode in an inode block, as the descriptor lists it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct InodeSummary {
    /// The inode.
    pub ino: InodeNo,
    /// Its generation.
    pub generation: u32,
    /// Encoded length of its record.
    pub len: u16,
}

/// A change record: how the IFile changes beyond the block placements the
/// summaries already imply.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Change {
    /// A node id was released.
    NodeFree(NodeId),
    /// An inode number was released; `generation` is the one its next use gets.
    InodeFree {
        /// The inode.
        ino: InodeNo,
        /// Generation for the next use of the number.
        generation: u32,
    },
    /// Data blocks were allocated.
    DataAlloc {
        /// First block.
        start: DataBlock,
        /// Number of blocks.
        len: u32,
    },
    /// Data blocks were freed.
    DataFree {
        /// First block.
        start: DataBlock,
        /// Number of blocks.
        len: u32,
    },
    /// The inode lost its last link while open: it joins the orphan list.
    OrphanAdd(InodeNo),
    /// The orphan was reclaimed or relinked.
    OrphanRemove(InodeNo),
}

impl Change {
    /// Bytes this record takes in a descriptor.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        match self {
            Change::NodeFree(_) | Change::OrphanAdd(_) | Change::OrphanRemove(_) => 9,
            Change::InodeFree { .. } => 13,
            Change::DataAlloc { .. } | Change::DataFree { .. } => 13,
        }
    }
}

/// Descriptor flag: this partial segment ends a commit group. A group (one
/// or more partial segments ending with this flag) is the unit roll-forward
/// applies: a group whose last partial segment is missing or invalid is
/// discarded whole.
pub const PS_GROUP_END: u8 = 1;

/// A decoded descriptor.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Descriptor {
    /// What the partial segment carries.
    pub kind: PsKind,
    /// `PS_*` flags.
    pub flags: u8,
    /// Its sequence number.
    pub seq: Seq,
    /// When it was sealed.
    pub time: Timestamp,
    /// Segment it sits in.
    pub segment: SegmentNo,
    /// Block offset of its first descriptor block inside the segment.
    pub offset: u32,
    /// Where the log continues once this segment is left.
    pub next_segment: SegmentNo,
    /// Descriptor checksum of the previous partial segment.
    pub prev_crc: u32,
    /// CRC32C over the stored CRCs of the body blocks, in order.
    pub body_crc: u32,
    /// Summaries of the body blocks before the inode blocks.
    pub blocks: Vec<Summary>,
    /// For each inode block (after the other blocks): its inodes.
    pub inode_blocks: Vec<Vec<InodeSummary>>,
    /// Change records, applied in order.
    pub changes: Vec<Change>,
    /// Fsync records (kind `Fsync` only; the other kinds have none). Each
    /// [`FsyncRecord::Data`] among them names the next raw body block.
    pub fsync: Vec<FsyncRecord>,
}

/// Bytes of the stream before the summaries.
pub const FIXED_STREAM_LEN: usize = 60;
/// Bytes before the stream in the first descriptor block.
pub const FIRST_PREFIX: usize = 8;
/// Bytes of one summary inside a finfo run.
pub const SUMMARY_LEN: usize = 9;
/// Bytes of a finfo run's header.
pub const FINFO_HEADER_LEN: usize = 10;
/// Bytes of one inode-list entry.
pub const INODE_SUMMARY_LEN: usize = 14;
/// Bytes of an inode list's count.
pub const INODE_LIST_HEADER_LEN: usize = 2;

impl Descriptor {
    /// Body blocks (everything after the descriptor).
    #[must_use]
    pub fn body_blocks(&self) -> usize {
        self.blocks.len() + self.inode_blocks.len() + self.data_copies()
    }

    /// Raw data blocks an fsync partial segment carries (one per
    /// [`FsyncRecord::Data`]).
    #[must_use]
    pub fn data_copies(&self) -> usize {
        self.fsync.iter().filter(|r| matches!(r, FsyncRecord::Data { .. })).count()
    }

    /// Length of the stream this descriptor encodes to.
    #[must_use]
    pub fn stream_len(&self) -> usize {
        let mut n = FIXED_STREAM_LEN;
        let mut i = 0;
        while i < self.blocks.len() {
            let owner = self.blocks[i].owner;
            let run = self.blocks[i..].iter().take(u16::MAX as usize).take_while(|s| s.owner == owner).count();
            n += FINFO_HEADER_LEN + run * SUMMARY_LEN;
            i += run;
        }
        n += self.inode_blocks.iter().map(|b| 2 + b.len() * 14).sum::<usize>();
        n += self.changes.iter().map(Change::encoded_len).sum::<usize>();
        n += self.fsync.iter().map(FsyncRecord::encoded_len).sum::<usize>();
        n
    }

    /// Descriptor blocks needed.
    #[must_use]
    pub fn desc_blocks(&self) -> usize {
        (self.stream_len() + FIRST_PREFIX).div_ceil(PAYLOAD_LEN)
    }

    /// All blocks of the partial segment.
    #[must_use]
    pub fn total_blocks(&self) -> usize {
        self.desc_blocks() + self.body_blocks()
    }

    /// Encodes into descriptor-block payloads; returns them with the
    /// descriptor checksum.
    #[must_use]
    pub fn encode(&self) -> (Vec<Vec<u8>>, u32) {
        let desc_blocks = self.desc_blocks();
        let mut w = Writer::with_capacity(self.stream_len());
        // An fsync partial segment counts its raw data blocks where the
        // others count summaries, and its records where they count changes.
        let (n_blocks, n_records) = match self.kind {
            PsKind::Fsync => (self.data_copies(), self.fsync.len()),
            _ => (self.blocks.len(), self.changes.len()),
        };
        w.u8(self.kind.code())
            .u8(self.flags)
            .zeros(2)
            .u64(self.seq.0)
            .timestamp(self.time)
            .u32(self.segment.0)
            .u32(self.offset)
            .u32(self.next_segment.0)
            .u32(self.prev_crc)
            .u32(self.body_crc)
            .u32(n_blocks as u32)
            .u32(self.inode_blocks.len() as u32)
            .u32(n_records as u32)
            .u32(desc_blocks as u32);
        debug_assert_eq!(w.len(), FIXED_STREAM_LEN);
        let mut i = 0;
        while i < self.blocks.len() {
            let owner = self.blocks[i].owner;
            let run = self.blocks[i..].iter().take(u16::MAX as usize).take_while(|s| s.owner == owner).count();
            w.u64(owner.0).u16(run as u16);
            for s in &self.blocks[i..i + run] {
                w.u8(s.kind.code()).u64(s.name);
            }
            i += run;
        }
        for b in &self.inode_blocks {
            w.u16(b.len() as u16);
            for i in b {
                w.u64(i.ino.0).u32(i.generation).u16(i.len);
            }
        }
        for c in &self.changes {
            match *c {
                Change::NodeFree(n) => w.u8(1).u64(n.0),
                Change::InodeFree { ino, generation } => w.u8(2).u64(ino.0).u32(generation),
                Change::DataAlloc { start, len } => w.u8(3).u64(start.0).u32(len),
                Change::DataFree { start, len } => w.u8(4).u64(start.0).u32(len),
                Change::OrphanAdd(i) => w.u8(5).u64(i.0),
                Change::OrphanRemove(i) => w.u8(6).u64(i.0),
            };
        }
        for f in &self.fsync {
            f.encode(&mut w);
        }
        let stream = w.into_inner();
        debug_assert_eq!(stream.len(), self.stream_len());
        let crc = checksum::crc32c(&stream);
        let mut all = Writer::with_capacity(stream.len() + FIRST_PREFIX);
        all.u32(crc).u32(stream.len() as u32).bytes(&stream);
        let all = all.into_inner();
        let payloads: Vec<Vec<u8>> = all.chunks(PAYLOAD_LEN).map(<[u8]>::to_vec).collect();
        debug_assert_eq!(payloads.len(), desc_blocks);
        (payloads, crc)
    }

    /// From the first descriptor block's payload: the descriptor checksum and
    /// how many descriptor blocks there are.
    ///
    /// # Errors
    /// A payload too short to hold the prefix and fixed fields.
    pub fn peek(first: &[u8]) -> DecodeResult<(u32, usize)> {
        let mut r = Reader::new(first);
        let crc = r.u32()?;
        let len = r.u32()? as usize;
        Ok((crc, (len + FIRST_PREFIX).div_ceil(PAYLOAD_LEN)))
    }

    /// Decodes a descriptor from all of its blocks' payloads, in order.
    /// `max_blocks` bounds the counts (the segment size).
    ///
    /// # Errors
    /// Checksum mismatch or any malformed field.
    pub fn decode(payloads: &[&[u8]], max_blocks: usize) -> DecodeResult<(Descriptor, u32)> {
        let Some(first) = payloads.first() else { bad!("no descriptor blocks") };
        let (crc, n) = Descriptor::peek(first)?;
        if n != payloads.len() {
            bad!("stream needs {n} descriptor blocks, {} given", payloads.len());
        }
        let mut all = Vec::with_capacity(n * PAYLOAD_LEN);
        for p in payloads {
            all.extend_from_slice(p);
        }
        let mut r = Reader::new(&all);
        r.u32()?;
        let len = r.u32()? as usize;
        let stream = r.bytes(len)?;
        if r.remaining() != 0 {
            bad!("{} bytes after the descriptor stream", r.remaining());
        }
        if checksum::crc32c(stream) != crc {
            bad!("descriptor checksum mismatch");
        }
        let d = decode_stream(stream, n, max_blocks)?;
        Ok((d, crc))
    }
}

fn decode_stream(stream: &[u8], desc_blocks: usize, max_blocks: usize) -> DecodeResult<Descriptor> {
    let mut r = Reader::new(stream);
    let kind = match r.u8()? {
        1 => PsKind::Normal,
        2 => PsKind::Checkpoint,
        3 => PsKind::Fsync,
        k => bad!("unknown partial-segment kind {k}"),
    };
    let flags = r.u8()?;
    if flags & !PS_GROUP_END != 0 {
        bad!("unknown partial-segment flags {flags:#x}");
    }
    r.reserved(2)?;
    let seq = Seq(r.u64()?);
    let time = r.timestamp()?;
    let segment = SegmentNo(r.u32()?);
    let offset = r.u32()?;
    let next_segment = SegmentNo(r.u32()?);
    let prev_crc = r.u32()?;
    let body_crc = r.u32()?;
    let n_blocks = bounded(u64::from(r.u32()?), "summary", max_blocks)?;
    let n_inode_blocks = bounded(u64::from(r.u32()?), "inode block", max_blocks)?;
    let n_changes = bounded(u64::from(r.u32()?), "change record", stream.len())?;
    if r.u32()? as usize != desc_blocks {
        bad!("descriptor block count disagrees with its stream length");
    }
    if desc_blocks + n_blocks + n_inode_blocks > max_blocks {
        bad!("{} blocks do not fit a segment of {max_blocks}", desc_blocks + n_blocks + n_inode_blocks);
    }
    if kind == PsKind::Fsync {
        return decode_fsync_stream(
            r,
            FsyncHeader { flags, seq, time, segment, offset, next_segment, prev_crc, body_crc },
            n_blocks,
            n_inode_blocks,
            n_changes,
        );
    }
    let mut blocks = Vec::with_capacity(n_blocks);
    while blocks.len() < n_blocks {
        let owner = InodeNo(r.u64()?);
        let run = usize::from(r.u16()?);
        if run == 0 || blocks.len() + run > n_blocks {
            bad!("finfo of inode {owner} claims {run} blocks");
        }
        for _ in 0..run {
            let code = r.u8()?;
            let kind = match BlockKind::from_code(code) {
                Some(
                    k @ (BlockKind::Node
                    | BlockKind::Blob
                    | BlockKind::IFileTable
                    | BlockKind::IFileIndex
                    | BlockKind::SnapshotList
                    | BlockKind::Snapshot),
                ) => k,
                _ => bad!("summary names block kind {code}, which cannot be a body block"),
            };
            blocks.push(Summary { kind, owner, name: r.u64()? });
        }
    }
    let mut inode_blocks = Vec::with_capacity(n_inode_blocks);
    for _ in 0..n_inode_blocks {
        let n = usize::from(r.u16()?);
        if n == 0 || n * 14 > r.remaining() {
            bad!("inode list of {n} entries");
        }
        let mut list = Vec::with_capacity(n);
        let mut bytes = 0usize;
        for _ in 0..n {
            let s = InodeSummary { ino: InodeNo(r.u64()?), generation: r.u32()?, len: r.u16()? };
            if usize::from(s.len) < super::inode::FIXED_LEN {
                bad!("inode {} listed with a record of {} bytes", s.ino, s.len);
            }
            bytes += usize::from(s.len);
            list.push(s);
        }
        // The records must fit the inode block the list describes: the
        // live bytes they count are bounded by the blocks that hold them.
        if super::inode_block::packed_len(n, bytes) > super::block::PAYLOAD_LEN {
            bad!("inode list of {n} records, {bytes} bytes, does not fit an inode block");
        }
        inode_blocks.push(list);
    }
    let mut changes = Vec::with_capacity(n_changes);
    for _ in 0..n_changes {
        changes.push(match r.u8()? {
            1 => Change::NodeFree(NodeId(r.u64()?)),
            2 => Change::InodeFree { ino: InodeNo(r.u64()?), generation: r.u32()? },
            3 => Change::DataAlloc { start: DataBlock(r.u64()?), len: r.u32()? },
            4 => Change::DataFree { start: DataBlock(r.u64()?), len: r.u32()? },
            5 => Change::OrphanAdd(InodeNo(r.u64()?)),
            6 => Change::OrphanRemove(InodeNo(r.u64()?)),
            t => bad!("unknown change record {t}"),
        });
    }
    if r.remaining() != 0 {
        bad!("{} trailing bytes in the descriptor stream", r.remaining());
    }
    Ok(Descriptor {
        kind,
        flags,
        seq,
        time,
        segment,
        offset,
        next_segment,
        prev_crc,
        body_crc,
        blocks,
        inode_blocks,
        changes,
        fsync: Vec::new(),
    })
}

/// The fixed fields of a descriptor, passed on to the fsync decoder.
struct FsyncHeader {
    flags: u8,
    seq: Seq,
    time: Timestamp,
    segment: SegmentNo,
    offset: u32,
    next_segment: SegmentNo,
    prev_crc: u32,
    body_crc: u32,
}

/// The rest of an fsync partial segment's stream: its records, which must
/// name exactly `n_copies` raw data blocks.
fn decode_fsync_stream(
    mut r: Reader<'_>,
    h: FsyncHeader,
    n_copies: usize,
    n_inode_blocks: usize,
    n_records: usize,
) -> DecodeResult<Descriptor> {
    if n_inode_blocks != 0 {
        bad!("an fsync partial segment lists {n_inode_blocks} inode blocks");
    }
    if h.flags & PS_GROUP_END == 0 {
        bad!("an fsync partial segment must end its group");
    }
    let mut fsync = Vec::with_capacity(n_records.min(r.remaining()));
    for _ in 0..n_records {
        fsync.push(FsyncRecord::decode(&mut r)?);
    }
    if r.remaining() != 0 {
        bad!("{} trailing bytes in the descriptor stream", r.remaining());
    }
    let d = Descriptor {
        kind: PsKind::Fsync,
        flags: h.flags,
        seq: h.seq,
        time: h.time,
        segment: h.segment,
        offset: h.offset,
        next_segment: h.next_segment,
        prev_crc: h.prev_crc,
        body_crc: h.body_crc,
        blocks: Vec::new(),
        inode_blocks: Vec::new(),
        changes: Vec::new(),
        fsync,
    };
    if d.data_copies() != n_copies {
        bad!("an fsync partial segment counts {n_copies} data blocks but its records name {}", d.data_copies());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n_blocks: usize) -> Descriptor {
        Descriptor {
            kind: PsKind::Normal,
            flags: PS_GROUP_END,
            seq: Seq(12),
            time: Timestamp { sec: 99, nsec: 1 },
            segment: SegmentNo(4),
            offset: 8,
            next_segment: SegmentNo(5),
            prev_crc: 0x1234_5678,
            body_crc: 0x9ABC_DEF0,
            blocks: (0..n_blocks)
                .map(|i| Summary { kind: BlockKind::Node, owner: InodeNo(1 + i as u64 / 3), name: i as u64 + 100 })
                .collect(),
            inode_blocks: vec![
                vec![
                    InodeSummary { ino: InodeNo(1), generation: 0, len: 140 },
                    InodeSummary { ino: InodeNo(2), generation: 5, len: 200 },
                ],
                vec![InodeSummary { ino: InodeNo(9), generation: 1, len: 136 }],
            ],
            changes: vec![
                Change::NodeFree(NodeId(4)),
                Change::InodeFree { ino: InodeNo(3), generation: 2 },
                Change::DataAlloc { start: DataBlock(100), len: 8 },
                Change::DataFree { start: DataBlock(50), len: 1 },
                Change::OrphanAdd(InodeNo(7)),
                Change::OrphanRemove(InodeNo(7)),
            ],
            fsync: Vec::new(),
        }
    }

    fn fsync_sample() -> Descriptor {
        let records = crate::format::fsync::tests::samples();
        Descriptor {
            kind: PsKind::Fsync,
            blocks: Vec::new(),
            inode_blocks: Vec::new(),
            changes: Vec::new(),
            fsync: records,
            ..sample(0)
        }
    }

    #[test]
    fn an_fsync_descriptor_round_trips_and_counts_its_data_blocks() {
        let d = fsync_sample();
        assert_eq!(d.data_copies(), 1);
        assert_eq!(d.total_blocks(), d.desc_blocks() + 1);
        assert_eq!(round_trip(&d), d);
        let mut open = d.clone();
        open.flags = 0;
        let (payloads, _) = open.encode();
        assert!(Descriptor::decode(&[&payloads[0]], 100_000).is_err(), "an fsync partial segment ends its group");
    }

    fn round_trip(d: &Descriptor) -> Descriptor {
        let (payloads, crc) = d.encode();
        assert_eq!(payloads.len(), d.desc_blocks());
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let (out, crc2) = Descriptor::decode(&refs, 100_000).unwrap();
        assert_eq!(crc, crc2);
        out
    }

    #[test]
    fn round_trip_small_and_multi_block() {
        let d = sample(10);
        assert_eq!(round_trip(&d), d);
        let big = sample(2000);
        assert!(big.desc_blocks() > 1);
        assert_eq!(round_trip(&big), big);
    }

    #[test]
    fn any_flipped_bit_is_detected() {
        let (payloads, _) = sample(5).encode();
        let p = &payloads[0];
        for bit in 0..p.len() * 8 {
            let mut b = p.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Descriptor::decode(&[&b], 100_000).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn truncation_is_an_error() {
        let (payloads, _) = sample(5).encode();
        for n in 0..payloads[0].len() {
            assert!(Descriptor::decode(&[&payloads[0][..n]], 100_000).is_err(), "prefix {n}");
        }
    }

    #[test]
    fn counts_beyond_the_segment_are_refused() {
        let (payloads, _) = sample(10).encode();
        assert!(Descriptor::decode(&[&payloads[0]], 8).is_err());
    }
}
