//! The IFile's tables as they sit in IFile blocks, and the index blocks that
//! say where those blocks are.
//!
//! Each table is an array of fixed-size entries cut into blocks of
//! [`TableId::per_block`] entries; block `i` of a table carries the name
//! `table << 32 | i` in its header.

use super::block::PAYLOAD_LEN;
use super::codec::{DecodeResult, Reader, Writer, bad, bounded};
use crate::types::{MetaBlock, Seq};

/// The tables of the IFile.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum TableId {
    /// Segment usage: live bytes, flags and last write per segment.
    SegmentUsage,
    /// Data-group descriptors: free blocks per group.
    GroupDesc,
    /// The data-block bitmap, one bit per data block.
    Bitmap,
    /// The inode map: inode number to inode-block address and generation.
    InodeMap,
    /// The node map: node id to block address.
    NodeMap,
}

impl TableId {
    /// Every table, in on-disk order.
    pub const ALL: [TableId; 5] =
        [TableId::SegmentUsage, TableId::GroupDesc, TableId::Bitmap, TableId::InodeMap, TableId::NodeMap];

    /// The byte stored on disk.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            TableId::SegmentUsage => 1,
            TableId::GroupDesc => 2,
            TableId::Bitmap => 3,
            TableId::InodeMap => 4,
            TableId::NodeMap => 5,
        }
    }

    /// The table a stored byte names.
    #[must_use]
    pub fn from_code(code: u8) -> Option<TableId> {
        TableId::ALL.into_iter().find(|t| t.code() == code)
    }

    /// Bytes per entry (for the bitmap: bytes per 64-bit word).
    #[must_use]
    pub fn entry_len(self) -> usize {
        match self {
            TableId::SegmentUsage | TableId::InodeMap => 16,
            TableId::GroupDesc | TableId::Bitmap | TableId::NodeMap => 8,
        }
    }

    /// Entries (bitmap words) per IFile block.
    #[must_use]
    pub fn per_block(self) -> usize {
        PAYLOAD_LEN / self.entry_len()
    }

    /// Name of block `index` of this table, as stored in its header.
    #[must_use]
    pub fn block_name(self, index: u32) -> u64 {
        u64::from(self.code()) << 32 | u64::from(index)
    }

    /// A name for messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            TableId::SegmentUsage => "segment usage table",
            TableId::GroupDesc => "data-group descriptor table",
            TableId::Bitmap => "data bitmap",
            TableId::InodeMap => "inode map",
            TableId::NodeMap => "node map",
        }
    }
}

/// One segment-usage entry.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SegUsage {
    /// Bytes of live inodes and blocks in the segment.
    pub live_bytes: u32,
    /// IFile table and index blocks of the checkpoint holding this entry
    /// that lie in the segment, but for those its own partial segments
    /// wrote (`SPARSE_IFILE`; without it written as 0 and not read).
    pub ifile_blocks: u32,
    /// Sequence of the last partial segment written into it.
    pub last_seq: Seq,
}

impl SegUsage {
    /// Appends the 16-byte encoding.
    pub fn encode(&self, w: &mut Writer) {
        w.u32(self.live_bytes).u32(self.ifile_blocks).u64(self.last_seq.0);
    }
    /// Reads one entry.
    ///
    /// # Errors
    /// Out of bytes.
    pub fn decode(r: &mut Reader<'_>) -> DecodeResult<SegUsage> {
        Ok(SegUsage { live_bytes: r.u32()?, ifile_blocks: r.u32()?, last_seq: Seq(r.u64()?) })
    }
}

/// Inode-map flag: the inode number is in use.
pub const IMAP_USED: u16 = 1;
/// Inode-map flag: the inode has no links but is still open (orphan list).
pub const IMAP_ORPHAN: u16 = 2;
const IMAP_KNOWN: u16 = IMAP_USED | IMAP_ORPHAN;

/// One inode-map entry. All zeros is the default (a free number of
/// generation 0), so a table of them can be allocated zeroed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, bytemuck::Zeroable)]
pub struct ImapEntry {
    /// Inode block holding the newest copy; 0 while it was never written.
    pub address: MetaBlock,
    /// Generation of the inode number, bumped at every reuse (NFS handles).
    pub generation: u32,
    /// `IMAP_*` flags.
    pub flags: u16,
    /// Encoded length of the record at `address`: the live bytes it holds in
    /// its segment, known without reading it.
    pub record_len: u16,
}

impl ImapEntry {
    /// Whether the inode number is allocated.
    #[must_use]
    pub fn in_use(&self) -> bool {
        self.flags & IMAP_USED != 0
    }
    /// Appends the 16-byte encoding.
    pub fn encode(&self, w: &mut Writer) {
        w.u64(self.address.0).u32(self.generation).u16(self.flags).u16(self.record_len);
    }
    /// Reads one entry.
    ///
    /// # Errors
    /// Out of bytes or unknown flags.
    pub fn decode(r: &mut Reader<'_>) -> DecodeResult<ImapEntry> {
        let e = ImapEntry { address: MetaBlock(r.u64()?), generation: r.u32()?, flags: r.u16()?, record_len: r.u16()? };
        if e.flags & !IMAP_KNOWN != 0 {
            bad!("unknown inode-map flags {:#x}", e.flags);
        }
        if !e.in_use() && e.flags != 0 {
            bad!("free inode-map entry has flags {:#x}", e.flags);
        }
        Ok(e)
    }
}

/// One data-group descriptor.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct GroupDesc {
    /// Free blocks in the group.
    pub free_blocks: u32,
    /// Directories bound to the group (for choosing the emptiest one).
    pub directories: u32,
}

impl GroupDesc {
    /// Appends the 8-byte encoding.
    pub fn encode(&self, w: &mut Writer) {
        w.u32(self.free_blocks).u32(self.directories);
    }
    /// Reads one entry.
    ///
    /// # Errors
    /// Out of bytes.
    pub fn decode(r: &mut Reader<'_>) -> DecodeResult<GroupDesc> {
        Ok(GroupDesc { free_blocks: r.u32()?, directories: r.u32()? })
    }
}

const INDEX_FIXED: usize = 12;
/// Table-block addresses one index block can list.
pub const INDEX_PER_BLOCK: usize = (PAYLOAD_LEN - INDEX_FIXED) / 8;

/// An IFile index block: the addresses of consecutive blocks of one table.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct IndexBlock {
    /// The table.
    pub table: TableId,
    /// Number of the first table block listed.
    pub first: u32,
    /// Where each listed block lives.
    pub addresses: Vec<MetaBlock>,
}

impl IndexBlock {
    /// Encodes the payload.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        debug_assert!(self.addresses.len() <= INDEX_PER_BLOCK);
        let mut w = Writer::with_capacity(PAYLOAD_LEN);
        w.u8(self.table.code()).zeros(3).u32(self.first).u32(self.addresses.len() as u32);
        for a in &self.addresses {
            w.u64(a.0);
        }
        w.into_inner()
    }

    /// Decodes a payload.
    ///
    /// # Errors
    /// Unknown table, bad count, or out of bytes.
    pub fn decode(payload: &[u8]) -> DecodeResult<IndexBlock> {
        let mut r = Reader::new(payload);
        let code = r.u8()?;
        let Some(table) = TableId::from_code(code) else { bad!("unknown IFile table {code}") };
        r.reserved(3)?;
        let first = r.u32()?;
        let n = r.u32()?;
        let n = bounded(u64::from(n), "index entry", INDEX_PER_BLOCK)?;
        let mut addresses = Vec::with_capacity(n);
        for _ in 0..n {
            addresses.push(MetaBlock(r.u64()?));
        }
        if r.remaining() != 0 {
            bad!("{} trailing bytes", r.remaining());
        }
        Ok(IndexBlock { table, first, addresses })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let mut w = Writer::new();
        let s = SegUsage { live_bytes: 5, ifile_blocks: 0, last_seq: Seq(9) };
        let i = ImapEntry { address: MetaBlock(7), generation: 3, flags: IMAP_USED | IMAP_ORPHAN, record_len: 200 };
        let g = GroupDesc { free_blocks: 11, directories: 2 };
        s.encode(&mut w);
        i.encode(&mut w);
        g.encode(&mut w);
        let b = w.into_inner();
        let mut r = Reader::new(&b);
        assert_eq!(SegUsage::decode(&mut r).unwrap(), s);
        assert_eq!(ImapEntry::decode(&mut r).unwrap(), i);
        assert_eq!(GroupDesc::decode(&mut r).unwrap(), g);
    }

    #[test]
    fn bad_imap_flags_are_refused() {
        let mut w = Writer::new();
        ImapEntry { address: MetaBlock(1), generation: 0, flags: IMAP_ORPHAN, record_len: 0 }.encode(&mut w);
        assert!(ImapEntry::decode(&mut Reader::new(&w.into_inner())).is_err());
    }

    #[test]
    fn index_block_round_trip_and_truncation() {
        let ib = IndexBlock { table: TableId::NodeMap, first: 4, addresses: vec![MetaBlock(1), MetaBlock(99)] };
        let p = ib.encode();
        assert_eq!(IndexBlock::decode(&p).unwrap(), ib);
        for n in 0..p.len() {
            assert!(IndexBlock::decode(&p[..n]).is_err());
        }
    }

    #[test]
    fn tables_fill_a_payload() {
        for t in TableId::ALL {
            assert!(t.per_block() * t.entry_len() <= PAYLOAD_LEN);
            assert_eq!(TableId::from_code(t.code()), Some(t));
        }
    }
}
