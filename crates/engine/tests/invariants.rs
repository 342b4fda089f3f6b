//! Each invariant of docs/DESIGN.md that one image can show, broken on
//! purpose in a volume whose checksums are all valid, and named by fsck
//! with its id. (I1, I3, I6 and I9 are rules about the order of writes:
//! no single image breaks them, and the crash explorer's fault tests show
//! each one caught: crates/sim/tests/faults.rs.)

#![allow(clippy::unwrap_used)]

mod common;

use common::{Rig, breakers};
use dualfs_engine::check::Invariant;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::format::block;
use dualfs_engine::format::ifile::TableId;
use dualfs_engine::types::{InodeNo, MetaBlock};
use dualfs_engine::volume::Creds;

#[test]
fn an_undamaged_volume_breaks_nothing() {
    assert!(Rig::new().fsck().is_empty());
}

/// Every way the repair tests break a volume is named by fsck, with the
/// invariant it breaks among what fsck finds.
#[test]
fn every_breaker_is_named_with_its_invariant() {
    for b in breakers() {
        let rig = Rig::new();
        (b.apply)(&rig);
        let found = rig.fsck();
        assert!(
            found.iter().any(|(i, _)| *i == Some(b.invariant)),
            "{}: {:?} expected, fsck found {found:#?}",
            b.name,
            b.invariant
        );
    }
}

#[test]
fn i2_a_live_node_overwritten_is_named() {
    let rig = Rig::new();
    // Node 1's block now holds node 2: what reusing a live segment does.
    let (a1, a2) = (rig.node_address(1), rig.node_address(2));
    assert!(a1 != 0 && a2 != 0);
    let other = rig.read(a2);
    let (h, p) = block::open_block(&other, MetaBlock(a2), rig.volume_id()).unwrap();
    let moved = block::seal_block(&block::BlockHeader { address: MetaBlock(a1), ..h }, p);
    rig.meta.write_blocks(a1, &moved).unwrap();
    let found = rig.fsck();
    assert!(found.iter().any(|(i, m)| *i == Some(Invariant::I2) && m.contains("instead of")), "{found:#?}");
}

#[test]
fn i4_an_unlinked_inode_off_the_orphan_list_is_named() {
    let rig = Rig::new();
    let vol = rig.open();
    let f = vol.create(InodeNo::ROOT, b"doomed", 0o644, Creds::ROOT).unwrap().ino;
    vol.open_file(f).unwrap();
    vol.unlink(InodeNo::ROOT, b"doomed").unwrap();
    // Unlinked while open: an orphan. Take it off the list (the rule broken).
    vol.with_fs(|fs| fs.set_orphan(f, false)).unwrap();
    vol.commit().unwrap();
    drop(vol);
    rig.assert_names(Invariant::I4);
}

#[test]
fn i5_a_node_that_does_not_decode_is_named() {
    let rig = Rig::new();
    let at = rig.node_address(1);
    rig.reseal(MetaBlock(at), |p| p[0] = 9);
    let found = rig.fsck();
    assert!(found.iter().any(|(i, _)| *i == Some(Invariant::I5)), "{found:#?}");
}

#[test]
fn i7_wrong_live_bytes_are_named() {
    let rig = Rig::new();
    let at = rig.table_block(TableId::SegmentUsage, 0);
    rig.reseal(at, |p| {
        let live = u32::from_le_bytes(p[0..4].try_into().unwrap());
        p[0..4].copy_from_slice(&(live + 4096).to_le_bytes());
    });
    rig.assert_names(Invariant::I7);
}

#[test]
fn i8_a_wrong_link_count_is_named() {
    let rig = Rig::new();
    let vol = rig.open();
    let f = vol.lookup(InodeNo::ROOT, b"data").unwrap().ino;
    vol.with_fs(|fs| fs.inode_mut(f).unwrap().nlink = 10_878_977);
    vol.commit().unwrap();
    drop(vol);
    let found = rig.fsck();
    assert_eq!(found.len(), 1, "{found:#?}");
    rig.assert_names(Invariant::I8);
}

#[test]
fn i8_a_data_block_mapped_twice_is_named() {
    let rig = Rig::new();
    let vol = rig.open();
    let f = vol.lookup(InodeNo::ROOT, b"data").unwrap().ino;
    let g = vol.create(InodeNo::ROOT, b"thief", 0o644, Creds::ROOT).unwrap().ino;
    vol.with_fs(|fs| {
        let body = fs.inode(f).unwrap().body.clone();
        let (size, blocks) = (fs.inode(f).unwrap().size, fs.inode(f).unwrap().blocks);
        let mut rec = fs.inode_mut(g).unwrap();
        rec.body = body;
        rec.size = size;
        rec.blocks = blocks;
    });
    vol.commit().unwrap();
    drop(vol);
    let found = rig.fsck();
    assert!(found.iter().any(|(_, m)| m.contains("also mapped")), "{found:#?}");
    rig.assert_names(Invariant::I8);
}

#[test]
fn i5_a_size_above_the_maximum_is_corruption_not_an_endless_file() {
    let rig = Rig::new();
    let vol = rig.open();
    let f = vol.create(InodeNo::ROOT, b"huge", 0o644, Creds::ROOT).unwrap().ino;
    vol.with_fs(|fs| fs.inode_mut(f).unwrap().size = u64::MAX - 7);
    vol.commit().unwrap();
    drop(vol);
    let found = rig.fsck();
    assert!(found.iter().any(|(i, m)| *i == Some(Invariant::I5) && m.contains("above the maximum")), "{found:#?}");
    let vol = rig.open();
    match vol.lookup(InodeNo::ROOT, b"huge") {
        Err(e) => assert_eq!(e.errno(), libc::EUCLEAN, "{e}"),
        Ok(a) => panic!("a file of size {} was served", a.size),
    }
}

/// What the mount meets of damage is a corruption error (EUCLEAN) for the
/// operation, never a panic of an allocator or a count clamped to zero:
/// deleting a file whose blocks the bitmap says are free, unlinking a
/// name of an inode with no links.
#[test]
fn damage_met_by_an_operation_is_a_corruption_error_not_a_panic() {
    for (breaker, path) in [("used blocks marked free", "data"), ("link count", "data")] {
        let rig = Rig::new();
        let b = breakers().into_iter().find(|b| b.name == breaker).unwrap();
        (b.apply)(&rig);
        if breaker == "link count" {
            rig.corrupt(|vol| {
                let f = rig.lookup(vol, path);
                vol.with_fs(|fs| fs.inode_mut(f).unwrap().nlink = 0);
            });
        }
        let vol = rig.open();
        match vol.unlink(InodeNo::ROOT, path.as_bytes()) {
            Err(e) => assert_eq!(e.errno(), libc::EUCLEAN, "{breaker}: {e}"),
            Ok(()) => {
                // The free comes with the commit that makes room or closes.
                let e = vol.close().expect_err("the damage is met at the latest when the volume closes");
                assert_eq!(e.errno(), libc::EUCLEAN, "{breaker}: {e}");
                continue;
            }
        }
        assert!(vol.create(InodeNo::ROOT, b"after", 0o644, Creds::ROOT).is_err(), "{breaker}: still writable");
    }
}
