//! Writable clones: a clone of a snapshot is a tree of its own, mounted in
//! place of the live one; each tree keeps its changes while another is
//! live, they share what neither changed, and none depends on another.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Rig, clock, options};
use dualfs_engine::Volume;
use dualfs_engine::error::Error;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::Creds;

fn exists(vol: &Volume, name: &[u8]) -> bool {
    vol.lookup(InodeNo::ROOT, name).is_ok()
}

/// Makes `name` the live tree and opens the volume again (closed first:
/// what a create looked up is then let go, as a mount's end lets go of
/// the kernel's lookups).
fn switch(rig: &Rig, vol: Volume, name: &str) -> Volume {
    vol.close().unwrap();
    let vol = rig.open();
    vol.switch_tree(name).unwrap();
    assert_eq!(vol.live_tree(), name);
    vol.close().unwrap();
    rig.assert_fsck_clean();
    let vol = rig.open();
    assert_eq!(vol.live_tree(), name);
    vol
}

#[test]
fn each_tree_keeps_its_own_changes() {
    let rig = Rig::new();
    let vol = rig.open();
    let original = rig.read_all(&vol, "data");
    vol.snapshot_create("s").unwrap();
    let f = rig.lookup(&vol, "data");
    vol.write(f, 0, &[1u8; 10_000]).unwrap();
    vol.create(InodeNo::ROOT, b"in-main", 0o644, Creds::ROOT).unwrap();
    vol.clone_create("s", "c").unwrap();
    assert_eq!(vol.live_tree(), "main");
    let views = vol.snapshot_list();
    assert!(views.iter().any(|v| v.name == "c" && v.writable), "{views:?}");
    assert!(views.iter().any(|v| v.name == "s" && !v.writable), "{views:?}");

    // The clone starts as the snapshot was, and takes writes of its own.
    let vol = switch(&rig, vol, "c");
    assert_eq!(rig.read_all(&vol, "data"), original);
    assert!(!exists(&vol, b"in-main"));
    let f = rig.lookup(&vol, "data");
    vol.write(f, 5_000, &[2u8; 30_000]).unwrap();
    let g = vol.create(InodeNo::ROOT, b"in-c", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(g, 0, &[3u8; 50_000]).unwrap();
    let d = rig.lookup(&vol, "d/sub");
    vol.unlink(d, b"inner").unwrap();
    let in_c = rig.read_all(&vol, "data");

    // The tree that was live is as it was left.
    let vol = switch(&rig, vol, "main");
    let data = rig.read_all(&vol, "data");
    assert_eq!(&data[..10_000], &[1u8; 10_000][..]);
    assert_eq!(&data[10_000..], &original[10_000..]);
    assert!(exists(&vol, b"in-main") && !exists(&vol, b"in-c"));
    assert_eq!(rig.read_all(&vol, "d/sub/inner"), b"inner contents");
    // Writes here do not reach the clone's blocks.
    let f = rig.lookup(&vol, "data");
    vol.write(f, 0, &[4u8; 40_000]).unwrap();

    let vol = switch(&rig, vol, "c");
    assert_eq!(rig.read_all(&vol, "data"), in_c);
    assert_eq!(rig.read_all(&vol, "in-c"), vec![3u8; 50_000]);
    let d = rig.lookup(&vol, "d/sub");
    assert!(matches!(vol.lookup(d, b"inner"), Err(Error::NotFound)));

    // The clone depends on nothing: its origin goes, and it stays whole.
    vol.snapshot_delete("s").unwrap();
    vol.close().unwrap();
    rig.assert_fsck_clean();
    let vol = rig.open();
    assert_eq!(rig.read_all(&vol, "data"), in_c);
    vol.close().unwrap();
}

#[test]
fn clones_of_clones_and_the_space_they_hold() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.sync().unwrap();
    let free_before = vol.statfs().bfree;
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let vol = switch(&rig, vol, "c");
    let f = vol.create(InodeNo::ROOT, b"big", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(f, 0, &vec![5u8; 1 << 20]).unwrap();
    vol.snapshot_create("c-1").unwrap();
    vol.clone_create("c-1", "cc").unwrap();
    vol.write(f, 0, &vec![6u8; 1 << 20]).unwrap();
    let vol = switch(&rig, vol, "cc");
    assert_eq!(rig.read_all(&vol, "big"), vec![5u8; 1 << 20]);
    vol.write(rig.lookup(&vol, "big"), 0, &vec![7u8; 1 << 20]).unwrap();
    let vol = switch(&rig, vol, "c");
    assert_eq!(rig.read_all(&vol, "big"), vec![6u8; 1 << 20]);
    // Back on main, deleting every other tree and snapshot gives all back.
    let vol = switch(&rig, vol, "main");
    assert!(!exists(&vol, b"big"));
    for name in ["cc", "c-1", "c", "s"] {
        vol.snapshot_delete(name).unwrap();
    }
    vol.sync().unwrap();
    assert!(vol.snapshot_list().is_empty());
    assert_eq!(vol.statfs().bfree, free_before, "df is back to where it was");
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn refusals_say_why() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("s").unwrap();
    assert!(matches!(vol.clone_create("nope", "c"), Err(Error::NoSnapshot(_))));
    assert!(matches!(vol.clone_create("main", "c"), Err(Error::SnapshotRefused(_))), "the live tree");
    assert!(matches!(vol.clone_create("s", "s"), Err(Error::SnapshotRefused(_))), "a taken name");
    assert!(matches!(vol.clone_create("s", "main"), Err(Error::SnapshotRefused(_))), "the live tree's name");
    vol.clone_create("s", "c").unwrap();
    // A writable tree is not mounted as a snapshot: mounting it as the
    // live tree would move what that mount reads.
    let e = Volume::open_snapshot(rig.meta.clone(), rig.data.clone(), "c", options()).err().unwrap();
    assert!(e.to_string().contains("-o clone=c"), "{e}");
    // Nor sent: it may become the live tree and change at the next mount.
    let e = dualfs_engine::volume::send(rig.meta.clone(), rig.data.clone(), None, "c", &mut Vec::new()).err().unwrap();
    assert!(e.to_string().contains("writable tree"), "{e}");
    let vol = switch(&rig, vol, "c");
    assert!(matches!(vol.snapshot_delete("c"), Err(Error::SnapshotRefused(_))), "the live tree");
    let e = vol.switch_tree("s").err().unwrap();
    assert!(e.to_string().contains("read-only snapshot"), "{e}");
    assert_eq!(vol.live_tree(), "c");
    // Nothing may hold a file of the tree that goes.
    let f = vol.create(InodeNo::ROOT, b"held", 0o644, Creds::ROOT).unwrap().ino;
    let e = vol.switch_tree("main").err().unwrap();
    assert!(e.to_string().contains("in use"), "{e}");
    vol.forget(f, 1).unwrap();
    vol.close().unwrap();
    let vol = Volume::open_with_clock(rig.meta.clone(), rig.data.clone(), options(), clock()).unwrap();
    assert_eq!(vol.live_tree(), "c");
    // Deleting the tree that was live is allowed; the live one keeps its name.
    vol.snapshot_delete("main").unwrap();
    vol.snapshot_delete("s").unwrap();
    vol.close().unwrap();
    rig.assert_fsck_clean();
    let vol = rig.open();
    assert_eq!(vol.live_tree(), "c");
    assert!(vol.snapshot_list().is_empty());
    vol.close().unwrap();
}

/// I15: the live tree's name is no kept tree's; a list saying otherwise is
/// refused at mount (the tree to serve would be ambiguous).
#[test]
fn a_list_naming_the_live_tree_twice_is_refused_i15() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let vol = switch(&rig, vol, "c");
    vol.close().unwrap();
    let list_at = {
        let (log, _) = dualfs_engine::meta_log::Log::open(rig.meta.clone(), rig.data.clone()).unwrap();
        log.last_checkpoint().and_then(|c| c.snapshot_list).unwrap()
    };
    // Two entries (s, main), then the live name: call it main.
    rig.reseal(list_at, |p| {
        let at = 16 + 2 * 16;
        assert_eq!(&p[at..at + 1], &[1]);
        p[at] = 4;
        p[at + 8..at + 12].copy_from_slice(b"main");
    });
    let e = Volume::open_with_clock(rig.meta.clone(), rig.data.clone(), options(), clock()).err().unwrap();
    assert!(e.to_string().contains("names the live tree main"), "{e}");
}

/// A preallocated block is shared like any other: the live tree and a
/// clone of a snapshot taken before either wrote it both map it
/// unwritten, and neither may write it in place, or the other reads what
/// it wrote. (Found by the model test: fallocate, snapshot, clone, a
/// write in each tree.)
#[test]
fn a_preallocated_block_a_snapshot_holds_is_written_to_a_new_block_in_every_tree() {
    use dualfs_engine::volume::FallocateMode;
    let rig = Rig::new();
    let vol = rig.open();
    let f = vol.create(InodeNo::ROOT, b"pre", 0o644, Creds::ROOT).unwrap().ino;
    vol.fallocate(f, 8 * 4096, 3 * 4096, FallocateMode::default()).unwrap();
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    vol.write(f, 27_838, &[1u8; 13_123]).unwrap();
    let in_main = rig.read_all(&vol, "pre");

    let vol = switch(&rig, vol, "c");
    let f = rig.lookup(&vol, "pre");
    vol.write(f, 12_862, &[2u8; 19_907]).unwrap();
    let in_c = rig.read_all(&vol, "pre");
    assert!(in_c[12_862..32_769].iter().all(|&b| b == 2), "the clone's write");
    assert!(in_c[32_769..].iter().all(|&b| b == 0), "the clone reads the live tree's write");

    let vol = switch(&rig, vol, "main");
    assert!(rig.read_all(&vol, "pre") == in_main, "the clone's write reached the live tree");
    let vol = switch(&rig, vol, "c");
    assert!(rig.read_all(&vol, "pre") == in_c, "the clone lost its write");
    vol.close().unwrap();
}
