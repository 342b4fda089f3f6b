//! Memory relief without a stream: past the dirty-data limit with many
//! small files, the background writer writes back until the dirty data is
//! a step under the limit, the files first dirtied longest ago first, and
//! not everything dirty (which sent PostMark's whole working set to the
//! disk once it passed the limit).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::{InodeNo, Timestamp};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

const LIMIT: usize = 4 << 20;
const FILES: usize = 1200;

fn stat(v: &Volume, name: &str) -> u64 {
    v.stats().into_iter().find(|(n, _)| *n == name).map(|(_, x)| x).unwrap()
}

#[test]
fn past_the_limit_small_files_are_written_back_to_the_limit_oldest_first() {
    let (meta, data) = (Arc::new(MemoryDevice::new(16384)), Arc::new(MemoryDevice::new(65536)));
    let mkfs = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &mkfs).unwrap();
    let secs = Arc::new(AtomicI64::new(1_700_000_000));
    let clock = {
        let secs = secs.clone();
        Arc::new(move || Timestamp::new(secs.load(Ordering::Relaxed), 0))
    };
    let options =
        MountOptions { commit_interval: Duration::from_secs(3600), dirty_data_limit: LIMIT, ..MountOptions::default() };
    let v = Volume::open_with_clock(meta.clone(), data.clone(), options, clock).unwrap();
    // 1,200 files of one block (4.7 MiB, under a quarter past the limit,
    // where a writer would wait), a hundred a second.
    for i in 0..FILES {
        if i % 100 == 0 {
            secs.fetch_add(1, Ordering::Relaxed);
        }
        let ino = v.create(InodeNo::ROOT, format!("f{i:04}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        v.write(ino, 0, &[(i % 251) as u8 + 1; 4096]).unwrap();
    }
    assert!(stat(&v, "dirty_data_bytes") as usize > LIMIT, "the files passed the limit");
    assert_eq!(stat(&v, "data_blocks_written"), 0, "nothing written before the background writer ran");
    // The background writer's turn (the writes asked for a relief).
    v.background_step(Duration::ZERO).unwrap();
    let dirty = stat(&v, "dirty_data_bytes") as usize;
    let written = stat(&v, "data_blocks_by_relief") as usize * 4096;
    assert!(dirty <= LIMIT, "{dirty} bytes dirty after the relief");
    let excess = FILES * 4096 - LIMIT;
    assert!(written <= excess + 2 * (LIMIT / 16), "the relief wrote {written} bytes for an excess of {excess}");
    // Oldest first: after a crash now, the first files are whole and the
    // last ones (their tails still waiting) empty.
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (Arc::new(meta.snapshot()), Arc::new(data.snapshot()));
    let r = Volume::open(m, d, MountOptions::default()).unwrap();
    let size = |name: &str| r.lookup(InodeNo::ROOT, name.as_bytes()).unwrap().size;
    assert_eq!(size("f0000"), 4096);
    assert_eq!(r.read(r.lookup(InodeNo::ROOT, b"f0000").unwrap().ino, 0, 4096).unwrap(), vec![1u8; 4096]);
    assert_eq!(size("f1199"), 0, "the youngest file was written before older ones");
}
