//! Every decoder takes arbitrary bytes, and mutations of valid encodings,
//! without panicking: it decodes or says why not. (A property-based fuzzer
//! that runs on stable Rust in the ordinary test run.)
#![allow(clippy::unwrap_used)]

use dualfs_engine::format::block::{self, BlockHeader, BlockKind, PAYLOAD_LEN};
use dualfs_engine::format::inode::InodeRecord;
use dualfs_engine::format::inode_block;
use dualfs_engine::types::{InodeNo, MetaBlock, Seq};
use dualfs_sim::decode;
use proptest::prelude::*;

fn decode_everything(bytes: &[u8]) {
    decode::decode_everything(bytes, MetaBlock(7));
}

/// Valid encodings of each structure, to mutate.
fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let header = BlockHeader {
        kind: BlockKind::Node,
        aux: 0,
        payload_len: 4,
        volume_id: 1,
        address: MetaBlock(7),
        seq: Seq(3),
        owner: InodeNo(2),
        name: 5,
    };
    out.push(block::seal_block(&header, &[1, 0, 0, 0]));
    let mut rec = InodeRecord { ino: InodeNo(9), mode: libc::S_IFREG | 0o644, ..InodeRecord::default() };
    rec.body = dualfs_engine::format::inode::Body::Inline(b"hello".to_vec());
    let mut w = dualfs_engine::format::codec::Writer::new();
    rec.encode(&mut w);
    let rec_bytes = w.into_inner();
    out.push(rec_bytes.clone());
    out.push(inode_block::encode(&[&rec, &InodeRecord { ino: InodeNo(10), ..rec.clone() }]));
    out.push(vec![0u8; PAYLOAD_LEN]);
    let mut q = dualfs_engine::format::quota::QuotaTable::default();
    let limits = dualfs_engine::format::quota::Limits { block_soft: 1, block_hard: 2, inode_soft: 3, inode_hard: 4 };
    for id in [5, 1000] {
        let e = dualfs_engine::format::quota::QuotaEntry { limits, block_grace_end: 9, inode_grace_end: 0 };
        q.entries.insert((dualfs_engine::format::quota::QuotaKind::User, id), e);
    }
    out.push(q.encode());
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
        decode_everything(&bytes);
    }

    #[test]
    fn mutated_encodings_never_panic(which in 0usize..5, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
        let mut b = seeds()[which].clone();
        for (at, x) in flips {
            let i = at % b.len();
            b[i] ^= x | 1;
        }
        let keep = b.len() - cut % (b.len() / 4 + 1);
        b.truncate(keep);
        decode_everything(&b);
    }
}
