//! What a block holds, as the block tracer ([`crate::device::tracing`])
//! names it: the classifiers handed to [`TracingDevice`](crate::device::tracing::TracingDevice).

use super::block::{BLOCK_MAGIC, BlockKind, HEADER_LEN};
use super::checkpoint::CHECKPOINT_MAGIC;
use super::node::TreeKind;
use crate::device::tracing::BlockClass;

fn le_u32(block: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&block[at..at + 4]);
    u32::from_le_bytes(b)
}

/// Classifies one block of the meta-data device from its address and bytes.
///
/// Only the magic, the kind byte and (for B-tree nodes) the tree-kind byte
/// are looked at: no checksum is verified, since the trace wants to know
/// what the engine meant to write or found, not whether it is intact.
#[must_use]
pub fn meta_block(address: u64, block: &[u8]) -> BlockClass {
    if address == 0 {
        return BlockClass::Superblock;
    }
    if block.len() < HEADER_LEN + 1 {
        return BlockClass::Unknown;
    }
    match le_u32(block, 0) {
        CHECKPOINT_MAGIC => BlockClass::Checkpoint,
        BLOCK_MAGIC => match BlockKind::from_code(block[8]) {
            Some(BlockKind::Descriptor) => BlockClass::Descriptor,
            Some(BlockKind::Inodes) => BlockClass::Inode,
            Some(BlockKind::Node) => match TreeKind::from_code(block[HEADER_LEN]) {
                Some(TreeKind::Directory) => BlockClass::Dir,
                Some(TreeKind::Extents) => BlockClass::Extent,
                Some(TreeKind::Xattrs) => BlockClass::Xattr,
                None => BlockClass::Unknown,
            },
            Some(BlockKind::Blob) => BlockClass::Blob,
            Some(BlockKind::IFileTable) => BlockClass::IFile,
            Some(BlockKind::IFileIndex) => BlockClass::IFileIndex,
            Some(BlockKind::SnapshotList | BlockKind::Snapshot) => BlockClass::Snapshot,
            None => BlockClass::Unknown,
        },
        _ => BlockClass::Unknown,
    }
}

/// Classifies one block of the data device: block 0 is the superblock copy,
/// every other block file contents.
#[must_use]
pub fn data_block(address: u64, _block: &[u8]) -> BlockClass {
    if address == 0 { BlockClass::Superblock } else { BlockClass::Data }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::block::{BlockHeader, seal_block};
    use crate::types::{BLOCK_SIZE, InodeNo, MetaBlock, Seq};

    fn sealed(kind: BlockKind, address: u64, payload: &[u8]) -> Vec<u8> {
        let h = BlockHeader {
            kind,
            aux: 0,
            payload_len: payload.len() as u32,
            volume_id: 7,
            address: MetaBlock(address),
            seq: Seq(1),
            owner: InodeNo(1),
            name: 0,
        };
        seal_block(&h, payload)
    }

    #[test]
    fn meta_blocks_are_classified_by_their_headers() {
        assert_eq!(meta_block(0, &[0u8; BLOCK_SIZE]), BlockClass::Superblock);
        assert_eq!(meta_block(9, &sealed(BlockKind::Descriptor, 9, b"x")), BlockClass::Descriptor);
        assert_eq!(meta_block(9, &sealed(BlockKind::Inodes, 9, b"x")), BlockClass::Inode);
        assert_eq!(meta_block(9, &sealed(BlockKind::Node, 9, &[1, 0])), BlockClass::Dir);
        assert_eq!(meta_block(9, &sealed(BlockKind::Node, 9, &[2, 0])), BlockClass::Extent);
        assert_eq!(meta_block(9, &sealed(BlockKind::Node, 9, &[3, 0])), BlockClass::Xattr);
        assert_eq!(meta_block(9, &sealed(BlockKind::Blob, 9, b"x")), BlockClass::Blob);
        assert_eq!(meta_block(9, &sealed(BlockKind::IFileTable, 9, b"x")), BlockClass::IFile);
        assert_eq!(meta_block(9, &sealed(BlockKind::IFileIndex, 9, b"x")), BlockClass::IFileIndex);
        let mut ck = vec![0u8; BLOCK_SIZE];
        ck[..4].copy_from_slice(&CHECKPOINT_MAGIC.to_le_bytes());
        assert_eq!(meta_block(1, &ck), BlockClass::Checkpoint);
        assert_eq!(meta_block(5, &[0u8; BLOCK_SIZE]), BlockClass::Unknown);
    }

    #[test]
    fn data_blocks_are_the_superblock_copy_or_contents() {
        assert_eq!(data_block(0, &[7u8; BLOCK_SIZE]), BlockClass::Superblock);
        assert_eq!(data_block(1, &sealed(BlockKind::Node, 1, &[1, 0])), BlockClass::Data);
    }
}
