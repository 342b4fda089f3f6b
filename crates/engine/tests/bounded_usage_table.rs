//! The segment usage table held within a budget: the cleaner's choice of
//! victims reads it whole, and without a bound every block read stays for
//! as long as the volume is mounted (24 MiB at 15 TiB with a meta-data
//! device a tenth of it). With a budget of one block, the blocks go again
//! at the background writer's next turn, those changed since the last
//! checkpoint stay, the log goes on reading entries as it picks segments,
//! a clean reads the table again, and the volume checks clean.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{CleanRequest, Creds, MkfsOptions, MountOptions};

/// Blocks of usage table kept.
const KEEP: u64 = 1;

fn options(budget: Option<usize>) -> MountOptions {
    MountOptions { commit_interval: Duration::ZERO, usage_table_bytes: budget, ..MountOptions::default() }
}

fn stat(v: &Volume, name: &str) -> u64 {
    v.stats().into_iter().find(|(k, _)| *k == name).map(|(_, n)| n).unwrap()
}

/// Rewrites 300 small files until the log has written into the segments
/// of three usage blocks (some 500 segments of 128 blocks).
fn age(v: &Volume) {
    let dir = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
    let files: Vec<InodeNo> =
        (0..300).map(|i| v.create(dir, format!("f{i}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino).collect();
    let mut round = 0u32;
    while stat(v, "usage_blocks_loaded") < 3 {
        for &f in &files {
            v.write(f, 0, &[round as u8; 1000]).unwrap();
        }
        v.commit().unwrap();
        round += 1;
        assert!(round < 20_000, "the log never reached a third usage block");
    }
}

fn fsck(meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) {
    let report = dualfs_engine::check::check(meta.clone(), data.clone()).unwrap();
    assert!(report.is_clean(), "fsck: {:#?}", report.problems);
}

#[test]
fn the_usage_table_read_whole_is_given_back_down_to_its_budget() {
    let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(2048 * 128 + 256));
    let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(1 << 18));
    let mkfs = MkfsOptions { segment_blocks: 128, identity_seed: Some(3), ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &mkfs).unwrap();
    let v = Volume::open(meta.clone(), data.clone(), options(None)).unwrap();
    age(&v);
    v.close().unwrap();

    // Without a budget, what the cleaner's choice read stays.
    let v = Volume::open(meta.clone(), data.clone(), options(None)).unwrap();
    v.segment_utilization().unwrap();
    let f = v.lookup(v.lookup(InodeNo::ROOT, b"d").unwrap().ino, b"f1").unwrap().ino;
    v.write(f, 0, b"one more").unwrap();
    v.commit().unwrap();
    let whole = stat(&v, "usage_blocks_loaded");
    assert!(whole >= 3, "{whole} usage blocks in memory");
    v.close().unwrap();

    // With one: the background writer's next turn gives them back.
    let v = Volume::open(meta.clone(), data.clone(), options(Some(KEEP as usize * 4096))).unwrap();
    v.segment_utilization().unwrap();
    assert_eq!(stat(&v, "usage_blocks_loaded"), whole, "the cleaner's choice reads the whole table");
    v.write(f, 0, b"and more").unwrap();
    v.commit().unwrap();
    v.tick().unwrap();
    let loaded = stat(&v, "usage_blocks_loaded");
    assert!(loaded <= KEEP + 1, "{loaded} usage blocks in memory, the budget is {KEEP} (and the log's own)");
    // The log goes on: segments picked read their entries again, a
    // checkpoint writes what changed, and everything checks.
    for round in 0..400u32 {
        v.write(f, 0, &[round as u8; 1000]).unwrap();
        v.commit().unwrap();
    }
    v.checkpoint().unwrap();
    // A clean reads the whole table again and moves what it chose, its
    // entries at hand throughout.
    let report = v.clean(CleanRequest { max_segments: 8, ..CleanRequest::default() }, &mut |_, _| {}).unwrap();
    assert!(report.cleaner.segments_read > 0, "{report:?}");
    v.write(f, 0, b"last").unwrap();
    v.commit().unwrap();
    v.checkpoint().unwrap();
    v.tick().unwrap();
    let loaded = stat(&v, "usage_blocks_loaded");
    assert!(loaded <= KEEP + 1, "{loaded} usage blocks in memory after the log moved on");
    v.close().unwrap();
    fsck(&meta, &data);
    let v = Volume::open(meta.clone(), data.clone(), options(None)).unwrap();
    assert_eq!(v.read(f, 0, 4).unwrap(), b"last");
}
