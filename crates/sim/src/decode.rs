//! Every decoder of the on-disk format run over the same bytes, for the
//! tests that show decoding never panics (`tests/decode_fuzz.rs` on
//! arbitrary and mutated encodings, `tests/damage.rs` on mutated blocks of a
//! real volume).

use dualfs_engine::format::{
    block, checkpoint, checksum, descriptor, ifile, inode, inode_block, node, quota, superblock,
};
use dualfs_engine::types::MetaBlock;

/// Runs every decoder that could read `bytes`, as block `address` of a
/// volume: first on the bytes as they are, then after sealing again the
/// checksums that would stop a decoder early (the record checksum of a
/// superblock or checkpoint, the block checksum, the descriptor's stream
/// checksum), so that mutations reach the fields behind them.
pub fn decode_everything(bytes: &[u8], address: MetaBlock) {
    let _ = superblock::Superblock::decode(bytes);
    let _ = checkpoint::Checkpoint::decode(bytes);
    decode_payload(bytes, &[0, 1, 2, 17]);
    let _ = inode::InodeRecord::decode(bytes);
    let _ = quota::QuotaTable::decode(bytes);
    if bytes.len() < 8 {
        return;
    }
    let mut sealed = bytes.to_vec();
    checksum::seal(&mut sealed, 4);
    // The quota record's checksum is at offset 4 too.
    let _ = quota::QuotaTable::decode(&sealed);
    let _ = superblock::Superblock::decode(&sealed);
    let _ = checkpoint::Checkpoint::decode(&sealed);
    let volume_id = sealed.get(16..24).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes);
    let Ok((h, payload)) = block::open_block(&sealed, address, volume_id) else { return };
    let mut p = payload.to_vec();
    decode_payload(&p, &[h.aux]);
    // The descriptor's own checksum over its stream, sealed again.
    if p.len() >= 8 {
        let len = (u32::from_le_bytes([p[4], p[5], p[6], p[7]]) as usize).min(p.len() - 8);
        let crc = checksum::crc32c(&p[8..8 + len]);
        p[..4].copy_from_slice(&crc.to_le_bytes());
        let _ = descriptor::Descriptor::decode(&[&p], 128);
    }
}

/// The decoders of block payloads; nodes at each of `levels`.
fn decode_payload(p: &[u8], levels: &[u16]) {
    let _ = inode_block::decode_all(p);
    for &level in levels {
        let _ = node::Node::decode(p, level);
    }
    let _ = ifile::IndexBlock::decode(p);
    let _ = descriptor::Descriptor::peek(p);
    let _ = descriptor::Descriptor::decode(&[p], 256);
    let _ = block::open_block(p, MetaBlock(7), 1);
}
