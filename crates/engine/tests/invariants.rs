//! Each invariant of docs/DESIGN.md that one image can show, broken on
//! purpose in a volume whose checksums are all valid, and named by fsck
//! with its id. (I1, I3, I6 and I9 are rules about the order of writes:
//! no single image breaks them, and the crash explorer's fault tests show
//! each one caught: crates/sim/tests/faults.rs.)

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::check::{Invariant, check};
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::format::block::{self, BlockKind};
use dualfs_engine::format::checkpoint::Checkpoint;
use dualfs_engine::format::ifile::{INDEX_PER_BLOCK, IndexBlock, TableId};
use dualfs_engine::format::superblock::CHECKPOINT_SLOTS;
use dualfs_engine::types::{BLOCK_SIZE, InodeNo, MetaBlock, Timestamp};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

struct Rig {
    meta: Arc<MemoryDevice>,
    data: Arc<MemoryDevice>,
}

impl Rig {
    /// A closed volume with files, a directory large enough for a B-tree
    /// and a file on the data device.
    fn new() -> Rig {
        let (meta, data) = (Arc::new(MemoryDevice::new(8192)), Arc::new(MemoryDevice::new(16384)));
        let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
        Volume::format(meta.clone(), data.clone(), &opts).unwrap();
        let rig = Rig { meta, data };
        let vol = rig.open();
        let d = vol.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
        for i in 0..120 {
            vol.create(d, format!("a-rather-long-file-name-{i:04}").as_bytes(), 0o644, Creds::ROOT).unwrap();
        }
        let f = vol.create(InodeNo::ROOT, b"data", 0o644, Creds::ROOT).unwrap().ino;
        vol.write(f, 0, &[7u8; 40_000]).unwrap();
        vol.close().unwrap();
        rig
    }

    fn open(&self) -> Volume {
        let options = MountOptions { commit_interval: Duration::ZERO, ..MountOptions::default() };
        Volume::open_with_clock(
            self.meta.clone(),
            self.data.clone(),
            options,
            Arc::new(|| Timestamp::new(1_700_000_000, 0)),
        )
        .unwrap()
    }

    fn read(&self, b: u64) -> Vec<u8> {
        let mut buf = vec![0u8; BLOCK_SIZE];
        self.meta.read_blocks(b, &mut buf).unwrap();
        buf
    }

    fn volume_id(&self) -> u64 {
        dualfs_engine::meta_log::Log::read_superblocks(self.meta.as_ref(), self.data.as_ref()).unwrap().volume_id()
    }

    /// Rewrites block `at` with its payload changed by `f`, its checksum
    /// sealed again: valid, and wrong.
    fn reseal(&self, at: MetaBlock, f: impl FnOnce(&mut Vec<u8>)) {
        let raw = self.read(at.0);
        let (h, payload) = block::open_block(&raw, at, self.volume_id()).unwrap();
        let mut payload = payload.to_vec();
        f(&mut payload);
        self.meta.write_blocks(at.0, &block::seal_block(&h, &payload)).unwrap();
    }

    /// Where block `b` of IFile table `table` of the newest checkpoint is.
    fn table_block(&self, table: TableId, b: u32) -> MetaBlock {
        let c =
            CHECKPOINT_SLOTS.iter().filter_map(|s| Checkpoint::decode(&self.read(s.0)).ok()).max_by_key(|c| c.number);
        let c = c.unwrap();
        let first = b / INDEX_PER_BLOCK as u32 * INDEX_PER_BLOCK as u32;
        let r = c.index.iter().find(|r| r.table == table && r.first == first).unwrap();
        let raw = self.read(r.address.0);
        let (_, payload) = block::open_block_of_kind(&raw, r.address, self.volume_id(), BlockKind::IFileIndex).unwrap();
        IndexBlock::decode(payload).unwrap().addresses[(b - first) as usize]
    }

    /// The node map entry `id` (its address).
    fn node_address(&self, id: usize) -> u64 {
        let at = self.table_block(TableId::NodeMap, 0);
        let raw = self.read(at.0);
        let (_, p) = block::open_block(&raw, at, self.volume_id()).unwrap();
        u64::from_le_bytes(p[id * 8..id * 8 + 8].try_into().unwrap())
    }

    /// The invariants fsck names.
    fn fsck(&self) -> Vec<(Option<Invariant>, String)> {
        let r = check(self.meta.clone(), self.data.clone()).unwrap();
        r.problems.iter().map(|p| (p.invariant, p.to_string())).collect()
    }

    fn assert_names(&self, want: Invariant) {
        let found = self.fsck();
        assert!(!found.is_empty(), "fsck found nothing");
        assert!(found.iter().all(|(i, _)| *i == Some(want)), "{want:?} expected, fsck found {found:#?}");
        for (_, m) in &found {
            assert!(m.starts_with(&format!("[{}]", want.id())), "{m}");
        }
    }
}

#[test]
fn an_undamaged_volume_breaks_nothing() {
    assert!(Rig::new().fsck().is_empty());
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
    vol.with_fs(|fs| fs.set_orphan(f, false));
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
