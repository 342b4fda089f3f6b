//! Kept trees served beside the live one: a snapshot or a clone opened
//! through the live volume reads its own image while the live tree is
//! written, and is neither deleted nor made the live tree while open.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{Rig, options};
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
