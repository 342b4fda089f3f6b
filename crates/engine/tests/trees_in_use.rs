//! Kept trees served beside the live one: a snapshot or a clone opened
//! through the live volume reads its own image while the live tree is
//! written, and is neither deleted nor made the live tree while open.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::thread;

use common::{Rig, options};
use dualfs_engine::Volume;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::error::Error;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::Creds;

#[test]
fn a_tree_in_use_is_neither_deleted_nor_made_live() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let s = vol.open_tree("s", "/mnt/s", options()).unwrap();
    let c = vol.open_tree("c", "/mnt/c", options()).unwrap();
    let again = vol.open_tree("s", "/mnt/s2", options()).unwrap();
    assert_eq!(vol.tree_users("s"), ["/mnt/s", "/mnt/s2"]);

    let e = vol.snapshot_delete("s").unwrap_err();
    assert!(matches!(e, Error::Busy(_)), "{e}");
    assert!(e.to_string().contains("/mnt/s, /mnt/s2"), "{e}");
    let e = vol.snapshot_delete("c").unwrap_err();
    assert!(e.to_string().contains("/mnt/c"), "{e}");
    let e = vol.switch_tree("c").unwrap_err();
    assert!(matches!(e, Error::Busy(_)) && e.to_string().contains("/mnt/c"), "{e}");
    assert_eq!(vol.live_tree(), "main");

    // Each view holds its tree until it goes, and no longer.
    drop(s);
    assert!(vol.snapshot_delete("s").is_err(), "still open at /mnt/s2");
    again.close().unwrap();
    vol.snapshot_delete("s").unwrap();
    drop(c);
    assert!(vol.tree_users("c").is_empty());
    vol.snapshot_delete("c").unwrap();
    assert!(vol.snapshot_list().is_empty());
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn a_view_reads_its_tree_while_the_live_tree_changes() {
    let rig = Rig::new();
    let vol = rig.open();
    let original = rig.read_all(&vol, "data");
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let s = vol.open_tree("s", "/mnt/s", options()).unwrap();
    let c = vol.open_tree("c", "/mnt/c", options()).unwrap();

    // The live tree overwrites, removes and fills: blocks the views hold
    // are not handed out under them.
    let f = rig.lookup(&vol, "data");
    vol.write(f, 0, &vec![7u8; original.len()]).unwrap();
    vol.unlink(InodeNo::ROOT, b"data").unwrap();
    for i in 0..20 {
        let g = vol.create(InodeNo::ROOT, format!("new{i}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        vol.write(g, 0, &[i as u8; 64 * 1024]).unwrap();
    }
    vol.sync().unwrap();
    for view in [&s, &c] {
        assert!(view.is_read_only());
        assert_eq!(rig.read_all(view, "data"), original);
        assert!(view.lookup(InodeNo::ROOT, b"new0").is_err());
        let e = view.create(InodeNo::ROOT, b"x", 0o644, Creds::ROOT).unwrap_err();
        assert!(matches!(e, Error::ReadOnly(_)), "{e}");
    }
    assert!(vol.lookup(InodeNo::ROOT, b"data").is_err());
    let e = vol.open_tree("main", "/mnt/m", options()).unwrap_err();
    assert!(matches!(e, Error::SnapshotRefused(_)), "{e}");
    assert!(matches!(vol.open_tree("nope", "/mnt/n", options()), Err(Error::NoSnapshot(_))));

    drop((s, c));
    vol.close().unwrap();
    rig.assert_fsck_clean();
    // Both trees as they were, the live one as it became.
    let vol = rig.open();
    assert!(vol.lookup(InodeNo::ROOT, b"new19").is_ok());
    // A view through handles of its own outlives the volume.
    let own: (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (rig.meta.clone(), rig.data.clone());
    let c = vol.open_tree_on(own, "c", "/mnt/c", options()).unwrap();
    vol.close().unwrap();
    assert_eq!(rig.read_all(&c, "data"), original);
}

/// The names in the root of the tree entered.
fn names(vol: &Volume) -> Vec<String> {
    let mut v = Vec::new();
    vol.readdir(InodeNo::ROOT, 0, &mut |e| {
        v.push(String::from_utf8_lossy(&e.name).into_owned());
        true
    })
    .unwrap();
    v.retain(|n| n != "." && n != "..");
    v.sort();
    v
}

#[test]
fn two_writable_trees_written_at_once_keep_their_own_files_through_a_crash() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let before = names(&vol);
    // Two writers, one a tree, each entering its tree before each
    // operation; fsyncs in both.
    thread::scope(|scope| {
        for tree in ["main", "c"] {
            let vol = &vol;
            scope.spawn(move || {
                for i in 0..12 {
                    let name = format!("{tree}-{i}");
                    let g = vol.enter_tree(tree).unwrap();
                    let f = vol.create(InodeNo::ROOT, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
                    vol.write(f, 0, &vec![i as u8 + 1; 9000]).unwrap();
                    vol.fsync(f).unwrap();
                    drop(g);
                }
            });
        }
    });
    let mine = |tree: &str| {
        let mut want = before.clone();
        want.extend((0..12).map(|i| format!("{tree}-{i}")));
        want.sort();
        want
    };
    for tree in ["main", "c", "main"] {
        let _g = vol.enter_tree(tree).unwrap();
        assert_eq!(names(&vol), mine(tree), "{tree}");
        assert_eq!(rig.read_all(&vol, &format!("{tree}-7")), vec![8u8; 9000]);
    }
    // A crash now (the devices as they are, the volume never closed): each
    // tree has every file its fsyncs made durable.
    let _g = vol.enter_tree("c").unwrap();
    let (meta, data) = (Arc::new(rig.meta.snapshot()), Arc::new(rig.data.snapshot()));
    let crashed = Rig { meta, data };
    let after = crashed.open();
    assert_eq!(after.live_tree(), "c");
    assert_eq!(names(&after), mine("c"));
    let main = after.open_tree("main", "/mnt/m", options()).unwrap();
    assert_eq!(names(&main), mine("main"));
    drop(main);
    drop(after.enter_tree("main").unwrap());
    assert_eq!(names(&after), mine("main"));
    after.close().unwrap();
    crashed.assert_fsck_clean();
}

#[test]
fn a_file_held_in_a_tree_left_lives_until_its_tree_lets_go() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let g = vol.enter_tree("c").unwrap();
    let f = rig.lookup(&vol, "data");
    vol.remember(f, 1);
    vol.unlink(InodeNo::ROOT, b"data").unwrap();
    drop(g);
    // The live tree's own file of the same number is written and removed
    // while the clone's is held.
    let g = vol.enter_tree("main").unwrap();
    assert_eq!(rig.lookup(&vol, "data"), f);
    assert_eq!(vol.references(f), 0);
    vol.write(f, 0, &[9u8; 5000]).unwrap();
    vol.unlink(InodeNo::ROOT, b"data").unwrap();
    vol.sync().unwrap();
    assert!(vol.getattr(f).is_err(), "main's file goes with its last name");
    drop(g);
    let e = vol.snapshot_delete("c").unwrap_err();
    assert!(matches!(e, Error::Busy(_)), "{e}");
    let g = vol.enter_tree("c").unwrap();
    assert_eq!(vol.references(f), 1);
    assert_eq!(vol.read(f, 0, 40_000).unwrap(), vec![7u8; 40_000]);
    vol.forget(f, 1).unwrap();
    assert!(vol.getattr(f).is_err(), "the clone's file goes with its last reference");
    drop(g);
    drop(vol.enter_tree("main").unwrap());
    vol.snapshot_delete("c").unwrap();
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn an_orphan_left_in_a_kept_tree_by_a_crash_goes_when_it_is_entered() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let g = vol.enter_tree("c").unwrap();
    let f = rig.lookup(&vol, "data");
    vol.remember(f, 1);
    vol.unlink(InodeNo::ROOT, b"data").unwrap();
    drop(g);
    drop(vol.enter_tree("main").unwrap());
    let crashed = Rig { meta: Arc::new(rig.meta.snapshot()), data: Arc::new(rig.data.snapshot()) };
    drop(vol);
    let vol = crashed.open();
    assert_eq!(vol.live_tree(), "main");
    drop(vol.enter_tree("c").unwrap());
    assert!(vol.getattr(f).is_err(), "nothing holds it after the crash");
    drop(vol.enter_tree("main").unwrap());
    vol.close().unwrap();
    crashed.assert_fsck_clean();
}
