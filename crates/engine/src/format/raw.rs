//! Where the encoders put each field, for tools that read and rewrite
//! blocks byte for byte without decoding them whole: `dualfs metadump`
//! replaces names in place, so that every length, offset and key stays as
//! it was, and reseals what covers the blocks it changed. A damaged or
//! unknown block must be read as far as it goes, never refused whole, so
//! these readers answer `None` where the bytes run out and check nothing
//! else. Every offset here is tested against the encoder that writes it.

use super::block::{BLOCK_MAGIC, BlockKind, HEADER_LEN, PAYLOAD_LEN};
use super::checksum;

/// The little-endian `u16` at `at`, if the bytes are there.
#[must_use]
pub fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

/// The little-endian `u32` at `at`, if the bytes are there.
#[must_use]
pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// The little-endian `u64` at `at`, if the bytes are there.
#[must_use]
pub fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// Writes `v` little-endian at `at`; false (nothing written) if the bytes
/// are not there.
pub fn put_u32(b: &mut [u8], at: usize, v: u32) -> bool {
    match at.checked_add(4).and_then(|end| b.get_mut(at..end)) {
        Some(dst) => {
            dst.copy_from_slice(&v.to_le_bytes());
            true
        }
        None => false,
    }
}

/// Writes `v` little-endian at `at`; false (nothing written) if the bytes
/// are not there.
pub fn put_u64(b: &mut [u8], at: usize, v: u64) -> bool {
    match at.checked_add(8).and_then(|end| b.get_mut(at..end)) {
        Some(dst) => {
            dst.copy_from_slice(&v.to_le_bytes());
            true
        }
        None => false,
    }
}

/// Writes `v` little-endian at `at`; false (nothing written) if the bytes
/// are not there.
pub fn put_u16(b: &mut [u8], at: usize, v: u16) -> bool {
    match at.checked_add(2).and_then(|end| b.get_mut(at..end)) {
        Some(dst) => {
            dst.copy_from_slice(&v.to_le_bytes());
            true
        }
        None => false,
    }
}

/// The CRC32C of every whole-block structure (meta-data block, superblock,
/// checkpoint slot) sits at this offset, taken with the field zeroed.
pub const CRC_AT: usize = 4;

/// Whether a whole block's stored CRC matches its bytes.
#[must_use]
pub fn verifies(block: &[u8]) -> bool {
    checksum::verify(block, CRC_AT)
}

/// Stores a whole block's CRC again after an edit.
pub fn reseal(block: &mut [u8]) {
    checksum::seal(block, CRC_AT);
}

/// The CRC a whole block stores.
#[must_use]
pub fn stored_crc(block: &[u8]) -> Option<u32> {
    u32_at(block, CRC_AT)
}

/// A meta-data block's header fields (FORMAT.md 3.3), read without
/// checking the checksum, the kind or the format version.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Header {
    /// The kind byte, known or not ([`BlockKind::from_code`]).
    pub kind: u8,
    /// Tree level of a node, index of a descriptor block.
    pub aux: u16,
    /// Payload bytes in use (at most [`PAYLOAD_LEN`]).
    pub payload_len: usize,
    /// The partial segment that wrote the block.
    pub seq: u64,
    /// Node id, table position, or the descriptor block count (first
    /// descriptor block).
    pub name: u64,
}

impl Header {
    /// Whether the kind byte names `kind`.
    #[must_use]
    pub fn is(&self, kind: BlockKind) -> bool {
        self.kind == kind.code()
    }
}

const HEADER_KIND_AT: usize = 8;
const HEADER_AUX_AT: usize = 10;
const HEADER_PAYLOAD_LEN_AT: usize = 12;
const HEADER_SEQ_AT: usize = 32;
const HEADER_NAME_AT: usize = 48;

/// The header of a block that carries the meta-data block magic and a
/// payload length that fits; `None` for anything else.
#[must_use]
pub fn header(block: &[u8]) -> Option<Header> {
    if u32_at(block, 0)? != BLOCK_MAGIC {
        return None;
    }
    let payload_len = u32_at(block, HEADER_PAYLOAD_LEN_AT)? as usize;
    if payload_len > PAYLOAD_LEN || block.len() < HEADER_LEN + payload_len {
        return None;
    }
    Some(Header {
        kind: *block.get(HEADER_KIND_AT)?,
        aux: u16_at(block, HEADER_AUX_AT)?,
        payload_len,
        seq: u64_at(block, HEADER_SEQ_AT)?,
        name: u64_at(block, HEADER_NAME_AT)?,
    })
}

/// A block's payload, as far as its header says it goes.
#[must_use]
pub fn payload<'a>(block: &'a [u8], h: &Header) -> Option<&'a [u8]> {
    block.get(HEADER_LEN..HEADER_LEN + h.payload_len)
}

/// A block's payload, mutable.
pub fn payload_mut<'a>(block: &'a mut [u8], h: &Header) -> Option<&'a mut [u8]> {
    block.get_mut(HEADER_LEN..HEADER_LEN + h.payload_len)
}

/// Superblock and checkpoint slot (FORMAT.md 2, 4): the format's minor
/// version, the superblock's incompat feature word, and the checkpoint's
/// log position: the sequence of the newest partial segment and the
/// descriptor CRC that chains to it.
pub const MINOR_AT: usize = 10;
/// The superblock's `incompat` feature word.
pub const SUPER_INCOMPAT_AT: usize = 32;
/// A checkpoint slot's log sequence.
pub const CHECKPOINT_LOG_SEQ_AT: usize = 40;
/// A checkpoint slot's `prev_crc` (the descriptor CRC of the partial
/// segment before the log position).
pub const CHECKPOINT_PREV_CRC_AT: usize = 60;

/// A descriptor's first payload (FORMAT.md 3.4): `desc_crc`, the stream's
/// length, then the stream.
pub const DESC_CRC_AT: usize = 0;
/// The stream's length, in the first payload.
pub const DESC_STREAM_LEN_AT: usize = 4;
/// Where the stream begins in the first payload.
pub const DESC_STREAM_AT: usize = super::descriptor::FIRST_PREFIX;
/// In the stream: the partial segment's kind ([`super::descriptor::PsKind`]).
pub const STREAM_KIND_AT: usize = 0;
/// In the stream: the CRC of the partial segment before.
pub const STREAM_PREV_CRC_AT: usize = 36;
/// In the stream: the CRC of the body blocks' CRCs.
pub const STREAM_BODY_CRC_AT: usize = 40;
/// In the stream: summary blocks, or an fsync's raw data copies.
pub const STREAM_BLOCKS_AT: usize = 44;
/// In the stream: inode blocks.
pub const STREAM_INODE_BLOCKS_AT: usize = 48;
/// In the stream: changes, or an fsync's records.
pub const STREAM_RECORDS_AT: usize = 52;
/// Where the records of an fsync stream begin.
pub const STREAM_FIXED_LEN: usize = super::descriptor::FIXED_STREAM_LEN;

/// The tags of an fsync stream's records (FORMAT.md 3.4.8).
pub const FSYNC_INODE: u8 = 1;
/// A range of extents.
pub const FSYNC_RANGE: u8 = 2;
/// A directory entry.
pub const FSYNC_LINK: u8 = 3;
/// A raw data copy's place and CRC.
pub const FSYNC_DATA: u8 = 4;
/// Data blocks written in place.
pub const FSYNC_WRITTEN: u8 = 5;
/// An inode record's length sits at this offset of its fsync record; the
/// record follows at [`FSYNC_INODE_RECORD_AT`].
pub const FSYNC_INODE_LEN_AT: usize = 2;
/// Where an fsync inode record's inode record begins.
pub const FSYNC_INODE_RECORD_AT: usize = 4;
/// A range record's extent count, then 21-byte extents from
/// [`FSYNC_RANGE_FIXED`].
pub const FSYNC_RANGE_COUNT_AT: usize = 25;
/// The fixed part of a range record.
pub const FSYNC_RANGE_FIXED: usize = 27;
/// A link record's name length; the name follows.
pub const FSYNC_LINK_NAME_LEN_AT: usize = 18;
/// The fixed part of a link record.
pub const FSYNC_LINK_FIXED: usize = 19;
/// A data record's CRC of its raw copy.
pub const FSYNC_DATA_CRC_AT: usize = 25;
/// A data record's length.
pub const FSYNC_DATA_LEN: usize = 29;
/// A written record's length.
pub const FSYNC_WRITTEN_LEN: usize = 13;

/// An inode block's record table (FORMAT.md 3.5): a `u16` count, then per
/// record `u64 ino, u16 offset, u16 length`.
const INODE_TABLE_AT: usize = 2;
const INODE_TABLE_ENTRY: usize = 12;

/// The record ranges of an inode block's payload, as far as its table is
/// sound.
#[must_use]
pub fn inode_records(payload: &[u8]) -> Vec<std::ops::Range<usize>> {
    let Some(count) = u16_at(payload, 0).map(usize::from) else { return Vec::new() };
    let table_end = INODE_TABLE_AT + INODE_TABLE_ENTRY * count;
    // No more records than a block can hold, whatever the count says.
    let most = (PAYLOAD_LEN - INODE_TABLE_AT) / (INODE_TABLE_ENTRY + INODE_FIXED_LEN);
    let mut out = Vec::new();
    for i in 0..count.min(most) {
        let entry = INODE_TABLE_AT + INODE_TABLE_ENTRY * i;
        let (Some(off), Some(len)) = (u16_at(payload, entry + 8), u16_at(payload, entry + 10)) else { break };
        let (off, len) = (usize::from(off), usize::from(len));
        if len < INODE_FIXED_LEN || off + len > payload.len() || off < table_end {
            break;
        }
        out.push(off..off + len);
    }
    out
}

/// An inode record (FORMAT.md 3.6): its fixed part's length.
pub const INODE_FIXED_LEN: usize = super::inode::FIXED_LEN;
/// The record's mode.
pub const INODE_MODE_AT: usize = 12;
/// The body's kind ([`BODY_INLINE`], [`BODY_BLOB`], [`BODY_ENTRIES`]...).
pub const INODE_BODY_KIND_AT: usize = 116;
/// The inline xattrs' kind ([`XATTRS_INLINE`] or a tree).
pub const INODE_XATTR_KIND_AT: usize = 117;
/// The body's length.
pub const INODE_BODY_LEN_AT: usize = 118;
/// The inline xattrs' length.
pub const INODE_XATTR_LEN_AT: usize = 120;
/// Inline bytes: file data or a symlink target.
pub const BODY_INLINE: u8 = 1;
/// A long value's blob list: `u32 len, u16 count, u64 node ids`.
pub const BODY_BLOB: u8 = 4;
/// Inline directory entries: `u16 count`, then entries as in a leaf.
pub const BODY_ENTRIES: u8 = 5;
/// A blob body's node count; the ids follow at [`BLOB_IDS_AT`].
pub const BLOB_COUNT_AT: usize = 4;
/// A blob body's first node id.
pub const BLOB_IDS_AT: usize = 6;
/// Inline xattrs: `u16 count`, then `u8 name_len, u16 value_len, name,
/// value` each.
pub const XATTRS_INLINE: u8 = 0;

/// A B-tree node's payload (FORMAT.md 3.8): tree kind, a zero byte, the
/// entry count, then entries; a leaf's are `u64 key, u16 len, value`.
pub const NODE_TREE_AT: usize = 0;
/// The node's entry count.
pub const NODE_COUNT_AT: usize = 2;
/// Where a node's entries begin.
pub const NODE_ENTRIES_AT: usize = super::node::NODE_HEADER_LEN;
/// A leaf entry's fixed part (key and value length).
pub const LEAF_ENTRY_FIXED: usize = 10;
/// A directory entry's value: `u64 ino, u8 type`, then the name from here.
pub const DIRENT_NAME_AT: usize = 9;
/// An xattr tree value: `u8 form, u8 name_len, name`, then the value
/// inline (form [`XATTR_VALUE_INLINE`]) or a blob list.
pub const XATTR_VALUE_INLINE: u8 = 0;

/// Where a snapshot block's name is (FORMAT.md 3.16): its bytes, the
/// NUL padding after them excluded, when the payload decodes as a
/// snapshot record (a record that does not is left alone).
#[must_use]
pub fn snapshot_name(payload: &[u8]) -> Option<std::ops::Range<usize>> {
    let record = super::snapshot::SnapshotRecord::decode(payload).ok()?;
    let at = super::snapshot::RECORD_NAME_AT;
    Some(at..at + record.name.len())
}

/// Where a snapshot list's live tree name is (FORMAT.md 3.15), when the
/// payload decodes as a list that names it.
#[must_use]
pub fn live_tree_name(payload: &[u8]) -> Option<std::ops::Range<usize>> {
    let list = super::snapshot::SnapshotList::decode(payload).ok()?;
    let len = list.live_name?.len();
    let at = super::snapshot::live_name_at(list.entries.len());
    Some(at..at + len)
}

/// The code of a tree kind, as a node's first byte holds it.
#[must_use]
pub fn tree_code(kind: super::node::TreeKind) -> u8 {
    kind.code()
}

#[cfg(test)]
mod tests {
    use super::super::block::{BlockHeader, seal_block};
    use super::super::codec::Writer;
    use super::super::descriptor::{Descriptor, PS_GROUP_END, PsKind};
    use super::super::fsync::{FSYNC_NEW, FsyncRecord};
    use super::super::inode::{Body, InodeRecord, Xattrs};
    use super::super::node::{Entries, Node, TreeKind};
    use super::*;
    use crate::types::{DataBlock, FileKind, InodeNo, MetaBlock, NodeId, SegmentNo, Seq, Timestamp};

    #[test]
    fn readers_stop_where_the_bytes_end() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(u16_at(&b, 0), Some(0x0201));
        assert_eq!(u32_at(&b, 5), Some(0x0908_0706));
        assert_eq!(u64_at(&b, 1), Some(0x0908_0706_0504_0302));
        assert_eq!(u16_at(&b, 8), None);
        assert_eq!(u32_at(&b, 6), None);
        assert_eq!(u64_at(&b, usize::MAX), None);
        let mut m = b;
        assert!(put_u32(&mut m, 5, 7) && u32_at(&m, 5) == Some(7));
        assert!(!put_u64(&mut m, 2, 7) && m == [1, 2, 3, 4, 5, 7, 0, 0, 0]);
        assert!(put_u16(&mut m, 0, 0xabcd) && u16_at(&m, 0) == Some(0xabcd));
    }

    #[test]
    fn the_header_is_where_the_block_encoder_puts_it() {
        let h = BlockHeader {
            kind: BlockKind::Node,
            aux: 3,
            payload_len: 5,
            volume_id: 7,
            address: MetaBlock(9),
            seq: Seq(11),
            owner: InodeNo(13),
            name: 15,
        };
        let mut block = seal_block(&h, b"hello");
        let got = header(&block).unwrap();
        assert_eq!(got, Header { kind: BlockKind::Node.code(), aux: 3, payload_len: 5, seq: 11, name: 15 });
        assert!(got.is(BlockKind::Node) && !got.is(BlockKind::Blob));
        assert_eq!(payload(&block, &got), Some(&b"hello"[..]));
        assert!(verifies(&block));
        assert_eq!(stored_crc(&block), Some(super::super::block::stored_crc(&block)));
        payload_mut(&mut block, &got).unwrap()[0] = b'j';
        assert!(!verifies(&block));
        reseal(&mut block);
        assert!(verifies(&block));
        // Not a meta-data block, or a payload length past the block.
        assert_eq!(header(&[0u8; 4096]), None);
        put_u32(&mut block, HEADER_PAYLOAD_LEN_AT, PAYLOAD_LEN as u32 + 1);
        assert_eq!(header(&block), None);
        assert_eq!(header(&block[..20]), None);
    }

    fn record(ino: u64, mode: u32, body: Body, xattrs: Xattrs) -> InodeRecord {
        InodeRecord { ino: InodeNo(ino), generation: 1, mode, nlink: 1, body, xattrs, ..InodeRecord::default() }
    }

    #[test]
    fn inode_record_fields_are_where_its_encoder_puts_them() {
        let pairs = vec![(b"user.a".to_vec(), b"xy".to_vec())];
        let entries = vec![(5u64, [&7u64.to_le_bytes()[..], &[1u8], b"name"].concat())];
        let records = [
            record(2, 0o120_777, Body::Inline(b"a/b".to_vec()), Xattrs::Inline(pairs.clone())),
            record(3, 0o120_777, Body::Blob { len: 9000, nodes: vec![NodeId(40), NodeId(41)] }, Xattrs::default()),
            record(4, 0o040_755, Body::Entries(entries), Xattrs::default()),
        ];
        let refs: Vec<&InodeRecord> = records.iter().collect();
        let payload = super::super::inode_block::encode(&refs);
        let ranges = inode_records(&payload);
        assert_eq!(ranges.len(), 3);
        for (r, want) in ranges.iter().zip(&records) {
            let rec = &payload[r.clone()];
            assert_eq!(u32_at(rec, INODE_MODE_AT), Some(want.mode));
            assert_eq!(usize::from(u16_at(rec, INODE_BODY_LEN_AT).unwrap()), want.body_len());
            assert_eq!(usize::from(u16_at(rec, INODE_XATTR_LEN_AT).unwrap()), want.xattr_len());
            assert_eq!(rec.len(), INODE_FIXED_LEN + want.body_len() + want.xattr_len());
        }
        let first = &payload[ranges[0].clone()];
        assert_eq!((first[INODE_BODY_KIND_AT], first[INODE_XATTR_KIND_AT]), (BODY_INLINE, XATTRS_INLINE));
        assert_eq!(&first[INODE_FIXED_LEN..INODE_FIXED_LEN + 3], b"a/b");
        let xattrs = &first[INODE_FIXED_LEN + 3..];
        assert_eq!((u16_at(xattrs, 0), xattrs[2], u16_at(xattrs, 3)), (Some(1), 6, Some(2)));
        assert_eq!(&xattrs[5..], b"user.axy");
        let blob = &payload[ranges[1].clone()];
        assert_eq!(blob[INODE_BODY_KIND_AT], BODY_BLOB);
        let body = &blob[INODE_FIXED_LEN..];
        assert_eq!(u16_at(body, BLOB_COUNT_AT), Some(2));
        assert_eq!((u64_at(body, BLOB_IDS_AT), u64_at(body, BLOB_IDS_AT + 8)), (Some(40), Some(41)));
        let dir = &payload[ranges[2].clone()];
        assert_eq!(dir[INODE_BODY_KIND_AT], BODY_ENTRIES);
        let body = &dir[INODE_FIXED_LEN..];
        assert_eq!(u16_at(body, 0), Some(1));
        let value = &body[2 + LEAF_ENTRY_FIXED..];
        assert_eq!(&value[DIRENT_NAME_AT..], b"name");
        // A table that points outside its payload yields what came before.
        let mut cut = payload.clone();
        put_u16(&mut cut, INODE_TABLE_AT + INODE_TABLE_ENTRY + 8, u16::MAX);
        assert_eq!(inode_records(&cut).len(), 1);
        assert!(inode_records(&[]).is_empty());
    }

    #[test]
    fn node_fields_are_where_its_encoder_puts_them() {
        let value = [&[XATTR_VALUE_INLINE, 6][..], b"user.a", b"v"].concat();
        let node = Node { tree: TreeKind::Xattrs, level: 0, entries: Entries::Leaf(vec![(77, value.clone())]) };
        let p = node.encode();
        assert_eq!(p[NODE_TREE_AT], tree_code(TreeKind::Xattrs));
        assert_eq!(u16_at(&p, NODE_COUNT_AT), Some(1));
        assert_eq!(u64_at(&p, NODE_ENTRIES_AT), Some(77));
        assert_eq!(usize::from(u16_at(&p, NODE_ENTRIES_AT + 8).unwrap()), value.len());
        assert_eq!(&p[NODE_ENTRIES_AT + LEAF_ENTRY_FIXED..], &value[..]);
        assert_eq!(tree_code(TreeKind::Directory), 1);
    }

    #[test]
    fn descriptor_and_fsync_fields_are_where_their_encoders_put_them() {
        let link =
            FsyncRecord::Link { dir: InodeNo(1), ino: InodeNo(7), kind: FileKind::Regular, name: b"nm".to_vec() };
        let inode =
            FsyncRecord::Inode { flags: FSYNC_NEW, record: record(7, 0o100_644, Body::Empty, Xattrs::default()) };
        let d = Descriptor {
            kind: PsKind::Fsync,
            flags: PS_GROUP_END,
            seq: Seq(9),
            time: Timestamp::default(),
            segment: SegmentNo(1),
            offset: 4,
            next_segment: SegmentNo(2),
            prev_crc: 0x5555,
            body_crc: 0x6666,
            blocks: Vec::new(),
            inode_blocks: Vec::new(),
            changes: Vec::new(),
            fsync: vec![
                inode.clone(),
                FsyncRecord::Range { ino: InodeNo(7), first: 0, end: 1, extents: Vec::new() },
                link.clone(),
                FsyncRecord::Data { ino: InodeNo(7), block: 0, at: DataBlock(90), crc: 0x7777 },
                FsyncRecord::Written { start: DataBlock(3), len: 1 },
            ],
        };
        let (payloads, crc) = d.encode();
        let p = &payloads[0];
        assert_eq!(u32_at(p, DESC_CRC_AT), Some(crc));
        let s = &p[DESC_STREAM_AT..];
        assert_eq!(u32_at(p, DESC_STREAM_LEN_AT).map(|l| l as usize), Some(s.len()));
        assert_eq!(s[STREAM_KIND_AT], PsKind::Fsync.code());
        assert_eq!(u32_at(s, STREAM_PREV_CRC_AT), Some(0x5555));
        assert_eq!(u32_at(s, STREAM_BODY_CRC_AT), Some(0x6666));
        assert_eq!(u32_at(s, STREAM_BLOCKS_AT), Some(1));
        assert_eq!(u32_at(s, STREAM_INODE_BLOCKS_AT), Some(0));
        assert_eq!(u32_at(s, STREAM_RECORDS_AT), Some(5));
        // Walk the records by the lengths given here: they must end where
        // the stream does.
        let mut at = STREAM_FIXED_LEN;
        let mut tags = Vec::new();
        while at < s.len() {
            tags.push(s[at]);
            at += match s[at] {
                FSYNC_INODE => FSYNC_INODE_RECORD_AT + usize::from(u16_at(s, at + FSYNC_INODE_LEN_AT).unwrap()),
                FSYNC_RANGE => FSYNC_RANGE_FIXED + 21 * usize::from(u16_at(s, at + FSYNC_RANGE_COUNT_AT).unwrap()),
                FSYNC_LINK => {
                    let n = usize::from(s[at + FSYNC_LINK_NAME_LEN_AT]);
                    assert_eq!(&s[at + FSYNC_LINK_FIXED..at + FSYNC_LINK_FIXED + n], b"nm");
                    FSYNC_LINK_FIXED + n
                }
                FSYNC_DATA => {
                    assert_eq!(u32_at(s, at + FSYNC_DATA_CRC_AT), Some(0x7777));
                    FSYNC_DATA_LEN
                }
                FSYNC_WRITTEN => FSYNC_WRITTEN_LEN,
                t => panic!("tag {t}"),
            };
        }
        assert_eq!(at, s.len());
        assert_eq!(tags, [FSYNC_INODE, FSYNC_RANGE, FSYNC_LINK, FSYNC_DATA, FSYNC_WRITTEN]);
        let mut w = Writer::with_capacity(64);
        link.encode(&mut w);
        assert_eq!(w.into_inner().len(), FSYNC_LINK_FIXED + 2);
    }
}
