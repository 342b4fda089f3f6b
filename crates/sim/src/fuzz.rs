//! The targets of the coverage-guided fuzzer (`fuzz/`, afl++) and of the
//! regression test that replays its corpus and findings in the ordinary
//! suite (`tests/fuzz_corpus.rs`). Each target takes arbitrary bytes and
//! must return, whatever they are: an error is an answer, a panic or a hang
//! is a finding.
//!
//! - [`decode`]: every decoder of the on-disk format over one block.
//! - [`image`]: a small volume holding every kind of structure, its
//!   meta-data blocks patched as the input says (the checksums sealed again
//!   when it asks, so that wrong contents get past them), then fsck, the
//!   repair fsck -y would write, a mount, a bounded walk of the tree and a
//!   few operations chosen by the input, and a close.

use std::sync::{Arc, OnceLock};

use dualfs_engine::Volume;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::format::{block, checksum};
use dualfs_engine::types::{BLOCK_SIZE, InodeNo, MetaBlock};
use dualfs_engine::volume::{Creds, RenameFlags, SetAttr, SetMode};

use crate::crash::{Choice, StateSpec};
use crate::explorer::{Config, Explorer};
use crate::image::{Block, Image, OverlayDevice};
use crate::workload::fixed_clock;
use crate::workloads;

/// The decoders over `bytes` as they are and with their checksums sealed
/// again ([`crate::decode::decode_everything`]).
pub fn decode(bytes: &[u8]) {
    crate::decode::decode_everything(bytes, MetaBlock(7));
}

/// The undamaged volume the image target patches: (meta, data, the meta
/// blocks written, which patches index).
fn base() -> &'static (Arc<Image>, Arc<Image>, Vec<u64>) {
    static BASE: OnceLock<(Arc<Image>, Arc<Image>, Vec<u64>)> = OnceLock::new();
    BASE.get_or_init(|| {
        let ex = Explorer::new(Config::default(), &workloads::setup()).expect("base image");
        let w = workloads::every_structure("fuzz", 120, 20);
        let run = ex.record(&w).expect("workload");
        let img = run.recording.build(&StateSpec { cut: run.recording.events.len(), choice: Choice::All });
        let blocks = img.meta.written().into_iter().map(|(no, _)| no).collect();
        (img.meta, img.data, blocks)
    })
}

/// How many meta-data blocks of the base image a patch can name.
#[must_use]
pub fn image_blocks() -> usize {
    base().2.len()
}

/// Input layout: byte 0 flags (bit 0: seal checksums again; bit 1: write
/// the repair and mount the repaired volume), bytes 1..5 four operations,
/// then patches of `[block index][offset lo][offset hi][len - 1][bytes]`.
pub fn image(input: &[u8]) {
    let (meta, data, blocks) = base();
    let Some((&flags, rest)) = input.split_first() else { return };
    let (ops, mut patches) = rest.split_at(rest.len().min(4));
    let m = Arc::new(OverlayDevice::new(meta.clone()));
    let mut touched = Vec::new();
    while patches.len() >= 4 {
        let no = blocks[usize::from(patches[0]) % blocks.len()];
        let off = usize::from(u16::from_le_bytes([patches[1], patches[2]])) % BLOCK_SIZE;
        let len = (usize::from(patches[3]) + 1).min(patches.len() - 4).min(BLOCK_SIZE - off);
        let mut b: Vec<u8> = m.block(no).to_vec();
        b[off..off + len].copy_from_slice(&patches[4..4 + len]);
        m.put(no, to_block(&b));
        touched.push(no);
        patches = &patches[4 + len..];
    }
    if flags & 1 != 0 {
        for &no in &touched {
            let mut b: Vec<u8> = m.block(no).to_vec();
            reseal(&mut b, no);
            m.put(no, to_block(&b));
        }
    }
    let meta = m.freeze();
    let devices = || -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
        (Arc::new(OverlayDevice::new(meta.clone())), Arc::new(OverlayDevice::new(data.clone())))
    };
    let (cm, cd) = devices();
    let _ = dualfs_engine::check::check(cm, cd);
    let (rm, rd) = devices();
    let (meta, data) = match dualfs_engine::repair::prepare_with_clock(rm.clone(), rd.clone(), fixed_clock()) {
        Ok(p) if flags & 2 != 0 => {
            if p.write(rm.as_ref(), rd.as_ref()).is_err() {
                return;
            }
            (rm, rd)
        }
        _ => devices(),
    };
    let Ok(vol) = Volume::open_with_clock(meta, data, Config::default().mount, fixed_clock()) else { return };
    walk(&vol);
    for &op in ops {
        operate(&vol, op);
    }
    let _ = vol.close();
}

/// [`walk`], for the other targets.
pub fn walk_public(vol: &Volume) {
    walk(vol);
}

/// Everything the mount serves, as a user's tools would ask for it, bounded
/// (a damaged image may claim a huge file or a directory loop): every
/// entry's attributes, at most 64 KiB at the start and end of each file,
/// links and extended attributes.
fn walk(vol: &Volume) {
    use dualfs_engine::types::FileKind;
    let mut stack = vec![InodeNo::ROOT];
    let mut budget = 2000usize;
    while let Some(ino) = stack.pop() {
        budget = match budget.checked_sub(1) {
            Some(b) => b,
            None => return,
        };
        let Ok(a) = vol.getattr(ino) else { continue };
        match a.kind {
            FileKind::Directory => {
                let _ = vol.readdir(ino, 0, &mut |l| {
                    if l.name != b"." && l.name != b".." {
                        stack.push(l.ino);
                    }
                    stack.len() < 4000
                });
            }
            FileKind::Regular => {
                let _ = vol.read(ino, 0, 65536);
                let _ = vol.read(ino, a.size.saturating_sub(65536), 65536);
            }
            FileKind::Symlink => {
                let _ = vol.readlink(ino);
            }
            _ => {}
        }
        for n in vol.listxattr(ino).unwrap_or_default() {
            let _ = vol.getxattr(ino, &n);
        }
    }
}

fn to_block(b: &[u8]) -> Block {
    let mut out = [0u8; BLOCK_SIZE];
    out.copy_from_slice(b);
    Arc::new(out)
}

/// Seals a patched block's checksums again: a descriptor's stream checksum
/// (one-block streams), then the block's or the superblock's or the
/// checkpoint's own (all at offset 4).
fn reseal(b: &mut [u8], no: u64) {
    checksum::seal(b, 4);
    let volume_id = u64::from_le_bytes(b[16..24].try_into().unwrap_or_default());
    let kind = match block::open_block(b, MetaBlock(no), volume_id) {
        Ok((h, _)) => h.kind,
        Err(_) => return,
    };
    if kind == block::BlockKind::Descriptor {
        let p = &mut b[block::HEADER_LEN..];
        let len = (u32::from_le_bytes([p[4], p[5], p[6], p[7]]) as usize).min(p.len() - 8);
        let crc = checksum::crc32c(&p[8..8 + len]);
        p[..4].copy_from_slice(&crc.to_le_bytes());
        checksum::seal(b, 4);
    }
}

/// One operation of the image target, chosen by `op`; its result is
/// ignored (errors are answers).
fn operate(vol: &Volume, op: u8) {
    let name = format!("fz{}", op >> 3);
    let root = InodeNo::ROOT;
    let entry = |dir: &[u8], n: u8| -> Option<(InodeNo, Vec<u8>)> {
        let d = vol.lookup(root, dir).ok()?.ino;
        let mut found = None;
        let mut i = 0u8;
        let _ = vol.readdir(d, 0, &mut |l| {
            if i == n {
                found = Some(l.name.clone());
                return false;
            }
            i = i.wrapping_add(1);
            true
        });
        found.map(|f| (d, f))
    };
    match op & 7 {
        0 => {
            if let Ok(a) = vol.create(root, name.as_bytes(), 0o644, Creds::ROOT) {
                let _ = vol.write(a.ino, 0, &[0x5a; 5000]);
                let _ = vol.fsync(a.ino);
            }
        }
        1 => {
            if let Some((d, n)) = entry(b"D", op >> 3) {
                let _ = vol.unlink(d, &n);
            }
        }
        2 => {
            let _ = vol.mkdir(root, name.as_bytes(), 0o755, Creds::ROOT);
        }
        3 => {
            if let Some((d, n)) = entry(b"D", op >> 3) {
                let _ = vol.rename(d, &n, root, name.as_bytes(), RenameFlags::default());
            }
        }
        4 => {
            if let Ok(a) = vol.lookup(vol.lookup(root, b"A").map_or(root, |a| a.ino), b"frag") {
                let _ = vol.setattr(a.ino, &SetAttr { size: Some(u64::from(op >> 3) * 4096), ..SetAttr::default() });
                let _ = vol.write(a.ino, 70_000, &[7; 100]);
            }
        }
        5 => {
            if let Ok(a) = vol.lookup(root, b"A") {
                let _ = vol.setxattr(a.ino, b"user.fz", &vec![1; usize::from(op) * 20], SetMode::Any);
                let _ = vol.listxattr(a.ino);
            }
        }
        6 => {
            let _ = vol.checkpoint();
        }
        _ => {
            if let Some((d, n)) = entry(b"B", op >> 3) {
                let _ = vol.unlink(d, &n);
                let _ = vol.rmdir(d, &n);
            }
            let _ = vol.sync();
        }
    }
}

/// Seed inputs for the fuzzer (`examples/fuzz_seeds.rs`): for `decode`,
/// the first meta-data block of each kind in the base image, and its first
/// blocks (superblock, checkpoint slots); for `image`, the untouched image
/// with each operation, and a patch of a few bytes into each such block,
/// checksums sealed again, repaired and not.
#[must_use]
pub fn seeds() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let (meta, _, blocks) = base();
    let mut kinds = std::collections::BTreeSet::new();
    let mut picked = Vec::new();
    for (i, &no) in blocks.iter().enumerate() {
        let b = meta.block(no);
        let volume_id = u64::from_le_bytes(b[16..24].try_into().unwrap_or_default());
        let kind = block::open_block(&b[..], MetaBlock(no), volume_id).map(|(h, _)| h.kind.code()).unwrap_or(255);
        if no < 4 || kinds.insert(kind) {
            picked.push((i, b));
        }
    }
    let decode = picked.iter().map(|(_, b)| b.to_vec()).collect();
    let mut image = vec![vec![0, 0, 1, 2, 3], vec![2, 4, 5, 6, 7]];
    for (i, _) in &picked {
        let i = u8::try_from(*i).unwrap_or(u8::MAX);
        for flags in [1u8, 3] {
            image.push(vec![flags, 0x08, 0x11, 0x1a, 0x23, i, 64, 0, 3, 0xff, 0x00, 0x7f, 0x80]);
        }
    }
    (decode, image)
}
