//! Receive meets streams that are wrong in ways a checksum does not catch:
//! real streams with fields changed and every frame's CRC32C sealed again
//! (numbers out of order, records in the wrong inode's section, sizes that
//! disagree, names that are not names). Each must be received or refused,
//! never panic, and leave a volume that mounts.

use dualfs_engine::format::checksum::crc32c;
use dualfs_engine::format::stream::{FRAME_CRC_LEN, FRAME_HEAD_LEN, PRELUDE_LEN};
use dualfs_sim::rng::Rng;
use dualfs_sim::stream_fuzz::{stream_seeds, stream_target};

/// Where each frame of `s` starts and how long its payload is.
fn frames(s: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = PRELUDE_LEN;
    while at + FRAME_HEAD_LEN <= s.len() {
        let len = u32::from_le_bytes([s[at + 4], s[at + 5], s[at + 6], s[at + 7]]) as usize;
        out.push((at, len));
        at += FRAME_HEAD_LEN + len + FRAME_CRC_LEN;
    }
    out
}

fn reseal(s: &mut [u8], at: usize, len: usize) {
    let end = at + FRAME_HEAD_LEN + len;
    let crc = crc32c(&s[at..end]);
    s[end..end + 4].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn resealed_mutations_of_real_streams_are_received_or_refused() {
    let mut rng = Rng::new(0x5e4d);
    for seed in stream_seeds() {
        // Byte 0 is the target's flag; the stream follows.
        let (flag, stream) = seed.split_first().expect("seed");
        let fr = frames(stream);
        assert!(fr.len() > 3, "a real stream has records");
        for _ in 0..150 {
            let mut s = stream.to_vec();
            let (at, len) = fr[rng.below(fr.len() as u64) as usize];
            if len == 0 {
                continue;
            }
            for _ in 0..=rng.below(3) {
                let i = at + FRAME_HEAD_LEN + rng.below(len as u64) as usize;
                s[i] = rng.next_u64() as u8;
            }
            reseal(&mut s, at, len);
            let mut input = vec![*flag];
            input.extend_from_slice(&s);
            stream_target(&input);
        }
    }
}
