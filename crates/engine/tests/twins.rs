//! The last acknowledged write survives one damaged block: the partial
//! segments an fsync or a directory's fsync waits for are written twice in
//! one request (FORMAT.md 3.4.9), and roll-forward takes the twin when the
//! original fails a check. Each case zeroes one block of the last partial
//! segments written, in a snapshot of the devices taken as a power cut
//! would leave them, and checks that the acknowledged file is there, whole,
//! and fsck is clean.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::{BLOCK_SIZE, InodeNo};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

fn options() -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), dirty_data_limit: 256 << 20, ..MountOptions::default() }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed).wrapping_add((i >> 12) as u8)).collect()
}

fn rig() -> (Arc<MemoryDevice>, Arc<MemoryDevice>) {
    let (meta, data) = (Arc::new(MemoryDevice::new(16384)), Arc::new(MemoryDevice::new(65536)));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    (meta, data)
}

fn read_path(v: &Volume, path: &str) -> Option<Vec<u8>> {
    let mut ino = InodeNo::ROOT;
    for c in path.split('/') {
        ino = v.lookup(ino, c.as_bytes()).ok()?.ino;
    }
    let a = v.getattr(ino).ok()?;
    v.read(ino, 0, a.size as usize + 1).ok()
}

/// The blocks of the meta-data device that differ between `before` and
/// `after`: what the last acknowledged write put there.
fn written_since(before: &MemoryDevice, after: &MemoryDevice) -> Vec<u64> {
    let (mut b, mut a) = (vec![0u8; BLOCK_SIZE], vec![0u8; BLOCK_SIZE]);
    (0..after.block_count())
        .filter(|&i| {
            before.read_blocks(i, &mut b).unwrap();
            after.read_blocks(i, &mut a).unwrap();
            a != b
        })
        .collect()
}

/// For each block the last acknowledged write put on the meta-data device:
/// zero it in a copy of the crashed devices, open, and check `path` holds
/// `want` and fsck is clean. Returns how many of those opens took a twin.
fn every_block_of_the_last_write_may_be_lost(
    meta_before: &MemoryDevice,
    meta: &MemoryDevice,
    data: &MemoryDevice,
    path: &str,
    want: &[u8],
) -> usize {
    let blocks = written_since(meta_before, meta);
    assert!(blocks.len() >= 2, "the write went out with its twin: {blocks:?}");
    let mut twins = 0;
    for &b in &blocks {
        let m = meta.snapshot();
        m.write_blocks(b, &[0u8; BLOCK_SIZE]).unwrap();
        let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (Arc::new(m), Arc::new(data.snapshot()));
        let v = Volume::open(m.clone(), d.clone(), options()).unwrap();
        assert_eq!(read_path(&v, path).as_deref(), Some(want), "{path} with block {b} zeroed");
        assert!(!v.open_report().is_damaged(), "{:?}", v.open_report().damage);
        twins += usize::from(!v.open_report().recovery.twins_taken.is_empty());
        v.close().unwrap();
        let r = dualfs_engine::check::check(m, d).unwrap();
        assert!(r.is_clean(), "fsck with block {b} zeroed, after recovery: {:#?}", r.problems);
    }
    twins
}

#[test]
fn a_file_fsync_survives_any_one_zeroed_block_of_its_record() {
    let (meta, data) = rig();
    let v = Volume::open(meta.clone(), data.clone(), options()).unwrap();
    for i in 0..100 {
        let f = v.create(InodeNo::ROOT, format!("small{i}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        v.write(f, 0, &bytes(100 + i, i as u8)).unwrap();
    }
    v.commit().unwrap();
    let before = meta.snapshot();
    let f = v.create(InodeNo::ROOT, b"synced", 0o644, Creds::ROOT).unwrap().ino;
    let want = bytes(256 << 10, 7);
    v.write(f, 0, &want).unwrap();
    v.fsync(f).unwrap();
    let stats = v.stats();
    let twin_blocks = stats.iter().find(|(n, _)| *n == "twin_blocks_written").unwrap().1;
    assert!(twin_blocks >= 1, "the record was twinned");
    let twins = every_block_of_the_last_write_may_be_lost(&before, &meta, &data, "synced", &want);
    assert!(twins >= 1, "some zeroed block made the mount take the twin");
}

#[test]
fn a_small_fsync_with_its_data_in_the_record_survives_any_one_zeroed_block() {
    let (meta, data) = rig();
    let v = Volume::open(meta.clone(), data.clone(), options()).unwrap();
    let f = v.create(InodeNo::ROOT, b"small", 0o644, Creds::ROOT).unwrap().ino;
    v.commit().unwrap();
    let before = meta.snapshot();
    let want = bytes(12 << 10, 9);
    v.write(f, 0, &want).unwrap();
    v.fsync(f).unwrap();
    every_block_of_the_last_write_may_be_lost(&before, &meta, &data, "small", &want);
}

#[test]
fn a_directory_fsync_survives_any_one_zeroed_block_of_its_commit() {
    let (meta, data) = rig();
    let v = Volume::open(meta.clone(), data.clone(), options()).unwrap();
    let d = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
    v.commit().unwrap();
    let before = meta.snapshot();
    let f = v.create(d, b"new", 0o644, Creds::ROOT).unwrap().ino;
    let want = bytes(5000, 3);
    v.write(f, 0, &want).unwrap();
    v.fsync(d).unwrap();
    every_block_of_the_last_write_may_be_lost(&before, &meta, &data, "d/new", &want);
}

/// A crash that leaves an fsync's twin in part and its original not at all
/// ends the log cleanly where the original was expected; the log must not
/// resume there with the same sequence number, where a later torn write
/// could complete the old twin and bring back what recovery discarded.
#[test]
fn a_twin_left_behind_an_unwritten_original_moves_the_log_on() {
    let (meta, data) = rig();
    let v = Volume::open(meta.clone(), data.clone(), options()).unwrap();
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    v.commit().unwrap();
    let before = meta.snapshot();
    v.write(f, 0, &bytes(5000, 5)).unwrap();
    v.fsync(f).unwrap();
    drop(v);
    let blocks = written_since(&before, &meta);
    let (original, twin) = blocks.split_at(blocks.len() / 2);
    // The original never landed; of the twin, all but a sector of its
    // descriptor did.
    for &b in original {
        meta.write_blocks(b, &[0u8; BLOCK_SIZE]).unwrap();
    }
    let mut raw = vec![0u8; BLOCK_SIZE];
    meta.read_blocks(twin[0], &mut raw).unwrap();
    raw[512..1024].fill(0);
    raw[600] = 1;
    meta.write_blocks(twin[0], &raw).unwrap();
    let v = Volume::open(meta.clone(), data.clone(), options()).unwrap();
    let rec = &v.open_report().recovery;
    assert!(rec.end.is_clean() && rec.twins_taken.is_empty(), "{rec:?}");
    let (head, sb) = v.with_fs(|fs| (fs.log.head(), fs.log.superblock().clone()));
    let segment_of = |b: u64| (b - sb.first_segment_block) / u64::from(sb.segment_blocks);
    assert_ne!(u64::from(head.segment.0), segment_of(original[0]), "the log resumes where the twin lies");
    assert!(read_path(&v, "f").unwrap().is_empty(), "the fsync never completed");
    // The log moved on, so the open wrote a checkpoint naming where: what
    // is fsync'd now survives the next crash.
    let g = v.create(InodeNo::ROOT, b"g", 0o644, Creds::ROOT).unwrap().ino;
    v.write(g, 0, &bytes(3000, 6)).unwrap();
    v.fsync(g).unwrap();
    drop(v);
    let v = Volume::open(meta.clone(), data.clone(), options()).unwrap();
    assert_eq!(read_path(&v, "g"), Some(bytes(3000, 6)), "the fsync after the recovery was lost");
}

/// A crash that cuts short a commit group of several partial segments
/// (twinned groups reach over more segments) after two or more landed:
/// recovery drops the group and its checkpoint must lie past every
/// sequence number the group's segments carry, or the next open refuses
/// the checkpoint's usage table and falls back to the one before.
#[test]
fn a_group_cut_short_after_several_partial_segments_leaves_a_checkpoint_that_loads() {
    let (meta, data) = rig();
    let v = Volume::open(meta.clone(), data.clone(), options()).unwrap();
    v.commit().unwrap();
    let before = meta.snapshot();
    for i in 0..6000 {
        v.create(InodeNo::ROOT, format!("f{i:05}").as_bytes(), 0o644, Creds::ROOT).unwrap();
    }
    v.fsync(InodeNo::ROOT).unwrap();
    drop(v);
    let sb = dualfs_engine::meta_log::Log::open(meta.clone(), data.clone()).unwrap().0.superblock().clone();
    let segment_of = |b: u64| (b - sb.first_segment_block) / u64::from(sb.segment_blocks);
    let blocks = written_since(&before, &meta);
    let last = segment_of(*blocks.last().unwrap());
    let segments: std::collections::BTreeSet<u64> = blocks.iter().map(|&b| segment_of(b)).collect();
    assert!(segments.len() >= 3, "the commit reached over three segments: {segments:?}");
    // The last segment's partial segment and its twin never landed.
    for &b in blocks.iter().filter(|&&b| segment_of(b) == last) {
        meta.write_blocks(b, &[0u8; BLOCK_SIZE]).unwrap();
    }
    let v = Volume::open(meta.clone(), data.clone(), options()).unwrap();
    let rec = &v.open_report().recovery;
    assert!(!rec.end.is_clean(), "the group was cut short: {:?}", rec.end);
    assert!(v.lookup(InodeNo::ROOT, b"f00000").is_err(), "the cut-short group was dropped");
    v.close().unwrap();
    let r = dualfs_engine::check::check(meta.clone(), data.clone()).unwrap();
    assert!(r.is_clean(), "fsck after the recovery: {:#?}", r.problems);
    let v = Volume::open(meta.clone(), data.clone(), options()).unwrap();
    assert!(v.open_report().fell_back.is_none(), "{:?}", v.open_report().fell_back);
}
