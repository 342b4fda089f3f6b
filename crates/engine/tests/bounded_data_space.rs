//! The data space's group table and bitmap held within a budget: the
//! allocator reads a group's bitmap when it first allocates or frees
//! there, and without a bound every group touched stays for as long as
//! the volume is mounted (4 MiB of bitmap a TiB of data touched). With a
//! budget of two blocks, the blocks go again at the background writer's
//! next turn, those changed since the last checkpoint and those under a
//! free not yet durable stay, groups given back are read again (and their
//! counts checked again) when written to, and the volume checks clean.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

/// Group-table and bitmap blocks kept.
const KEEP: u64 = 2;

/// Directories, each bound to a group of its own.
const DIRS: usize = 24;

fn options(budget: Option<usize>) -> MountOptions {
    MountOptions { commit_interval: Duration::ZERO, data_space_bytes: budget, ..MountOptions::default() }
}

fn stat(v: &Volume, name: &str) -> u64 {
    v.stats().into_iter().find(|(k, _)| *k == name).map(|(_, n)| n).unwrap()
}

fn held(v: &Volume) -> u64 {
    stat(v, "bitmap_blocks_loaded") + stat(v, "group_blocks_loaded")
}

fn dir(v: &Volume, i: usize) -> InodeNo {
    v.lookup(InodeNo::ROOT, format!("d{i}").as_bytes()).unwrap().ino
}

/// A file `name` of 8 KiB of `fill` in every directory: every group is
/// allocated in.
fn spread(v: &Volume, name: &str, fill: u8) {
    for i in 0..DIRS {
        let f = v.create(dir(v, i), name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        v.write(f, 0, &[fill; 8192]).unwrap();
    }
    v.commit().unwrap();
}

fn fsck(meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) {
    let report = dualfs_engine::check::check(meta.clone(), data.clone()).unwrap();
    assert!(report.is_clean(), "fsck: {:#?}", report.problems);
}

#[test]
fn groups_touched_are_given_back_down_to_the_budget() {
    // 4 GiB of data in 32 groups of 128 MiB; a bitmap block covers a bit
    // less than a group, so groups straddle bitmap blocks.
    let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(1 << 16));
    let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(1 << 20));
    let mkfs = MkfsOptions { group_blocks: 32768, identity_seed: Some(5), ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &mkfs).unwrap();
    let v = Volume::open(meta.clone(), data.clone(), options(None)).unwrap();
    for i in 0..DIRS {
        v.mkdir(InodeNo::ROOT, format!("d{i}").as_bytes(), 0o755, Creds::ROOT).unwrap();
    }
    spread(&v, "a", 1);
    v.checkpoint().unwrap();
    v.tick().unwrap();
    let whole = held(&v);
    assert!(whole > DIRS as u64, "{whole} group-table and bitmap blocks in memory");
    v.close().unwrap();

    let v = Volume::open(meta.clone(), data.clone(), options(Some(KEEP as usize * 4096))).unwrap();
    spread(&v, "b", 2);
    assert!(held(&v) > DIRS as u64, "every group written to is read");
    // Changed since the checkpoint: kept through a turn.
    v.tick().unwrap();
    assert!(held(&v) >= DIRS as u64, "blocks changed since the checkpoint were given back");
    v.checkpoint().unwrap();
    v.tick().unwrap();
    let loaded = held(&v);
    assert!(loaded <= KEEP, "{loaded} group-table and bitmap blocks in memory, the budget is {KEEP}");

    // Frees in every group, then writes there again: groups given back are
    // read again, a free not yet durable keeps its group through a turn.
    for i in 0..DIRS {
        v.unlink(dir(&v, i), b"a").unwrap();
    }
    v.commit().unwrap();
    v.tick().unwrap();
    spread(&v, "c", 3);
    v.checkpoint().unwrap();
    // The frees became durable with that checkpoint and changed the
    // bitmap again: the next one writes it, and then it may go.
    v.checkpoint().unwrap();
    v.tick().unwrap();
    let loaded = held(&v);
    assert!(loaded <= KEEP, "{loaded} group-table and bitmap blocks in memory after frees, the budget is {KEEP}");
    spread(&v, "d", 4);
    v.close().unwrap();
    fsck(&meta, &data);

    let v = Volume::open(meta.clone(), data.clone(), options(None)).unwrap();
    for i in 0..DIRS {
        assert!(v.lookup(dir(&v, i), b"a").is_err());
        for (name, fill) in [("b", 2u8), ("c", 3), ("d", 4)] {
            let f = v.lookup(dir(&v, i), name.as_bytes()).unwrap().ino;
            assert_eq!(v.read(f, 0, 8192).unwrap(), vec![fill; 8192], "d{i}/{name}");
        }
    }
}
