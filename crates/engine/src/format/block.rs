//! The header every block in a log segment starts with.
//!
//! A meta-data block identifies itself: magic, kind, checksum, its own address,
//! the volume it belongs to, the partial segment that wrote it, its owner and
//! its name. That catches misdirected writes, stale blocks from an earlier pass
//! of the log and blocks from another volume, each with its own message.

use super::checksum;
use super::codec::{DecodeResult, Reader, Writer, bad};
use crate::types::{BLOCK_SIZE, InodeNo, MetaBlock, Seq};

/// `"DFSM"` little-endian: DualFS meta-data block.
pub const BLOCK_MAGIC: u32 = u32::from_le_bytes(*b"DFSM");
/// Version of the block layout, checked on every read.
pub const BLOCK_FORMAT: u8 = 1;
/// Size of the header.
pub const HEADER_LEN: usize = 56;
/// Bytes left for the payload.
pub const PAYLOAD_LEN: usize = BLOCK_SIZE - HEADER_LEN;
/// Offset of the CRC inside the header.
const CRC_OFFSET: usize = 4;

/// What a meta-data block holds.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum BlockKind {
    /// One block of a partial-segment descriptor.
    Descriptor,
    /// Packed inode records.
    Inodes,
    /// A B-tree node (directory entries, extents or extended attributes).
    Node,
    /// A piece of a large value (long symlink target, large xattr value).
    Blob,
    /// A block of one IFile table.
    IFileTable,
    /// An index block listing where IFile table blocks live.
    IFileIndex,
    /// The list of snapshots a checkpoint names (1.3).
    SnapshotList,
    /// One snapshot: its name and the checkpoint it keeps (1.3).
    Snapshot,
}

impl BlockKind {
    /// The byte stored on disk.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            BlockKind::Descriptor => 1,
            BlockKind::Inodes => 2,
            BlockKind::Node => 3,
            BlockKind::Blob => 4,
            BlockKind::IFileTable => 5,
            BlockKind::IFileIndex => 6,
            BlockKind::SnapshotList => 7,
            BlockKind::Snapshot => 8,
        }
    }

    /// The kind a stored byte names.
    #[must_use]
    pub fn from_code(code: u8) -> Option<BlockKind> {
        Some(match code {
            1 => BlockKind::Descriptor,
            2 => BlockKind::Inodes,
            3 => BlockKind::Node,
            4 => BlockKind::Blob,
            5 => BlockKind::IFileTable,
            6 => BlockKind::IFileIndex,
            7 => BlockKind::SnapshotList,
            8 => BlockKind::Snapshot,
            _ => return None,
        })
    }

    /// A name for messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            BlockKind::Descriptor => "partial-segment descriptor",
            BlockKind::Inodes => "inode block",
            BlockKind::Node => "B-tree node",
            BlockKind::Blob => "blob block",
            BlockKind::IFileTable => "IFile block",
            BlockKind::IFileIndex => "IFile index block",
            BlockKind::SnapshotList => "snapshot list block",
            BlockKind::Snapshot => "snapshot block",
        }
    }
}

/// The decoded header of a meta-data block.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BlockHeader {
    /// What the block holds.
    pub kind: BlockKind,
    /// A small kind-specific field (tree level for nodes, index for descriptors).
    pub aux: u16,
    /// Payload bytes in use; the rest of the block is zero.
    pub payload_len: u32,
    /// The volume the block belongs to.
    pub volume_id: u64,
    /// Where the block was written.
    pub address: MetaBlock,
    /// The partial segment that wrote it.
    pub seq: Seq,
    /// The inode that owns it (0 for IFile blocks).
    pub owner: InodeNo,
    /// Its name: a node id, an IFile table position, or 0.
    pub name: u64,
}

/// Builds a whole block from a header and a payload of at most [`PAYLOAD_LEN`] bytes.
///
/// # Panics
/// If the payload is too large: callers size payloads from [`PAYLOAD_LEN`], so
/// an oversized one is a bug, not bad input.
#[must_use]
pub fn seal_block(header: &BlockHeader, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() <= PAYLOAD_LEN, "payload of {} bytes does not fit a block", payload.len());
    let mut w = Writer::with_capacity(BLOCK_SIZE);
    w.u32(BLOCK_MAGIC)
        .u32(0)
        .u8(header.kind.code())
        .u8(BLOCK_FORMAT)
        .u16(header.aux)
        .u32(payload.len() as u32)
        .u64(header.volume_id)
        .u64(header.address.0)
        .u64(header.seq.0)
        .u64(header.owner.0)
        .u64(header.name)
        .bytes(payload);
    let mut block = w.into_inner();
    block.resize(BLOCK_SIZE, 0);
    checksum::seal(&mut block, CRC_OFFSET);
    block
}

/// The CRC stored in a sealed block's header.
#[must_use]
pub fn stored_crc(block: &[u8]) -> u32 {
    u32::from_le_bytes([block[4], block[5], block[6], block[7]])
}

/// Checks a block read from `address` and returns its header and payload.
///
/// The magic is looked at before the checksum only to tell "never written
/// or overwritten by something else" from "damaged"; nothing else is
/// trusted before the checksum verifies.
///
/// # Errors
/// Bad magic, checksum, version, kind, address or volume, in that order of checking.
pub fn open_block(block: &[u8], address: MetaBlock, volume_id: u64) -> DecodeResult<(BlockHeader, &[u8])> {
    if block.len() != BLOCK_SIZE {
        bad!("block is {} bytes, not {BLOCK_SIZE}", block.len());
    }
    let mut r = Reader::new(block);
    let magic = r.u32()?;
    if magic != BLOCK_MAGIC {
        bad!("bad magic {magic:#010x}: not a DualFS meta-data block (unwritten or overwritten)");
    }
    if !checksum::verify(block, CRC_OFFSET) {
        bad!("checksum mismatch (torn or damaged write)");
    }
    r.u32()?;
    let code = r.u8()?;
    let Some(kind) = BlockKind::from_code(code) else { bad!("unknown block kind {code}") };
    let format = r.u8()?;
    if format != BLOCK_FORMAT {
        bad!("block format {format} is not supported (expected {BLOCK_FORMAT})");
    }
    let aux = r.u16()?;
    let payload_len = r.u32()?;
    let header = BlockHeader {
        kind,
        aux,
        payload_len,
        volume_id: r.u64()?,
        address: MetaBlock(r.u64()?),
        seq: Seq(r.u64()?),
        owner: InodeNo(r.u64()?),
        name: r.u64()?,
    };
    if payload_len as usize > PAYLOAD_LEN {
        bad!("payload length {payload_len} exceeds {PAYLOAD_LEN}");
    }
    if header.volume_id != volume_id {
        bad!("belongs to volume {:#018x}, not this one ({volume_id:#018x})", header.volume_id);
    }
    if header.address != address {
        bad!("was written for block {} (misdirected write)", header.address.0);
    }
    let payload = &block[HEADER_LEN..HEADER_LEN + payload_len as usize];
    Ok((header, payload))
}

/// Whether `block` begins with the meta-data block magic. A block that
/// does not never opens ([`open_block`]): a scan over blocks mostly never
/// written (the search past the log's end) passes them over without
/// building the error that says so.
#[must_use]
pub fn has_magic(block: &[u8]) -> bool {
    block.get(..4) == Some(&BLOCK_MAGIC.to_le_bytes()[..])
}

/// Decodes a block and checks that it is of the `expected` kind.
///
/// # Errors
/// As [`open_block`], or the kind differs.
pub fn open_block_of_kind(
    block: &[u8],
    address: MetaBlock,
    volume_id: u64,
    expected: BlockKind,
) -> DecodeResult<(BlockHeader, &[u8])> {
    let (header, payload) = open_block(block, address, volume_id)?;
    if header.kind != expected {
        bad!("holds a {} where a {} was expected", header.kind.name(), expected.name());
    }
    Ok((header, payload))
}

/// What a copy of the meta-data mirror holds at `address`, for
/// [`crate::device::MirrorDevice`]: a sealed block or record whose checksum
/// (and, for a log block, address and volume) holds is good; a block of
/// zeros, or one with a magic whose checks fail, is bad; anything else
/// (the raw data copies an fsync record carries) cannot be judged.
#[must_use]
pub fn mirror_verdict(block: &[u8], address: u64, volume_id: u64) -> crate::device::Verdict {
    use crate::device::Verdict;
    if block.len() != BLOCK_SIZE || block.iter().all(|&b| b == 0) {
        return Verdict::Bad;
    }
    let magic = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
    let good = match magic {
        BLOCK_MAGIC => open_block(block, MetaBlock(address), volume_id).is_ok(),
        super::superblock::SUPER_MAGIC | super::checkpoint::CHECKPOINT_MAGIC => {
            super::record::open(block, magic, "").is_ok()
        }
        _ => return Verdict::Unknown,
    };
    if good { Verdict::Good } else { Verdict::Bad }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> BlockHeader {
        BlockHeader {
            kind: BlockKind::Node,
            aux: 2,
            payload_len: 5,
            volume_id: 0xABCD,
            address: MetaBlock(77),
            seq: Seq(9),
            owner: InodeNo(3),
            name: 11,
        }
    }

    #[test]
    fn round_trip() {
        let block = seal_block(&header(), b"hello");
        let (h, p) = open_block(&block, MetaBlock(77), 0xABCD).unwrap();
        assert_eq!(h, header());
        assert_eq!(p, b"hello");
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let block = seal_block(&header(), b"hello");
        for bit in 0..BLOCK_SIZE * 8 {
            let mut b = block.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(open_block(&b, MetaBlock(77), 0xABCD).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn wrong_address_and_wrong_volume_are_named() {
        let block = seal_block(&header(), b"x");
        let e = open_block(&block, MetaBlock(78), 0xABCD).unwrap_err();
        assert!(e.0.contains("misdirected"), "{e}");
        let e = open_block(&block, MetaBlock(77), 0x1).unwrap_err();
        assert!(e.0.contains("volume"), "{e}");
        let e = open_block_of_kind(&block, MetaBlock(77), 0xABCD, BlockKind::Blob).unwrap_err();
        assert!(e.0.contains("blob"), "{e}");
    }

    #[test]
    fn truncated_block_is_an_error() {
        let block = seal_block(&header(), b"x");
        assert!(open_block(&block[..100], MetaBlock(77), 0xABCD).is_err());
        assert!(open_block(&[0u8; BLOCK_SIZE], MetaBlock(77), 0xABCD).is_err());
    }
}
