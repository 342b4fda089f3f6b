//! A small volume in memory and ways to break it with every checksum
//! valid: what the invariant tests show fsck naming, and what the repair
//! tests show repaired.

#![allow(clippy::unwrap_used, dead_code)]

pub mod disk;

use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::check::{Invariant, check};
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::format::block::{self, BlockKind};
use dualfs_engine::format::checkpoint::Checkpoint;
use dualfs_engine::format::ifile::{INDEX_PER_BLOCK, IndexBlock, TableId};
use dualfs_engine::format::inode::{Body, Extent};
use dualfs_engine::format::name::FileName;
use dualfs_engine::format::superblock::CHECKPOINT_SLOTS;
use dualfs_engine::types::{BLOCK_SIZE, DataBlock, FileKind, InodeNo, MetaBlock, Timestamp};
use dualfs_engine::volume::{Clock, Creds, MkfsOptions, MountOptions};

pub struct Rig {
    pub meta: Arc<MemoryDevice>,
    pub data: Arc<MemoryDevice>,
}

pub fn clock() -> Clock {
    Arc::new(|| Timestamp::new(1_700_000_000, 0))
}

impl Rig {
    /// A closed volume with files, a directory large enough for a B-tree,
    /// a file on the data device, a subdirectory and a symlink.
    pub fn new() -> Rig {
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
        let sub = vol.mkdir(d, b"sub", 0o755, Creds::ROOT).unwrap().ino;
        let g = vol.create(sub, b"inner", 0o644, Creds::ROOT).unwrap().ino;
        vol.write(g, 0, b"inner contents").unwrap();
        vol.symlink(InodeNo::ROOT, b"link", b"d/sub/inner", Creds::ROOT).unwrap();
        vol.close().unwrap();
        rig
    }

    pub fn open(&self) -> Volume {
        Volume::open_with_clock(self.meta.clone(), self.data.clone(), options(), clock()).unwrap()
    }

    pub fn read(&self, b: u64) -> Vec<u8> {
        let mut buf = vec![0u8; BLOCK_SIZE];
        self.meta.read_blocks(b, &mut buf).unwrap();
        buf
    }

    pub fn volume_id(&self) -> u64 {
        dualfs_engine::meta_log::Log::read_superblocks(self.meta.as_ref(), self.data.as_ref()).unwrap().volume_id()
    }

    /// Rewrites block `at` with its payload changed by `f`, its checksum
    /// sealed again: valid, and wrong.
    pub fn reseal(&self, at: MetaBlock, f: impl FnOnce(&mut Vec<u8>)) {
        let raw = self.read(at.0);
        let (h, payload) = block::open_block(&raw, at, self.volume_id()).unwrap();
        let mut payload = payload.to_vec();
        f(&mut payload);
        self.meta.write_blocks(at.0, &block::seal_block(&h, &payload)).unwrap();
    }

    /// Where block `b` of IFile table `table` of the newest checkpoint is.
    pub fn table_block(&self, table: TableId, b: u32) -> MetaBlock {
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
    pub fn node_address(&self, id: usize) -> u64 {
        let at = self.table_block(TableId::NodeMap, 0);
        let raw = self.read(at.0);
        let (_, p) = block::open_block(&raw, at, self.volume_id()).unwrap();
        u64::from_le_bytes(p[id * 8..id * 8 + 8].try_into().unwrap())
    }

    /// The problems fsck finds, with their invariants.
    pub fn fsck(&self) -> Vec<(Option<Invariant>, String)> {
        let r = check(self.meta.clone(), self.data.clone()).unwrap();
        r.problems.iter().map(|p| (p.invariant, p.to_string())).collect()
    }

    pub fn assert_names(&self, want: Invariant) {
        let found = self.fsck();
        assert!(!found.is_empty(), "fsck found nothing");
        assert!(found.iter().all(|(i, _)| *i == Some(want)), "{want:?} expected, fsck found {found:#?}");
        for (_, m) in &found {
            assert!(m.starts_with(&format!("[{}]", want.id())), "{m}");
        }
    }

    /// Changes the volume through the engine with `f`, commits, and closes
    /// it (a checkpoint): what `f` did is on disk with valid checksums.
    pub fn corrupt(&self, f: impl FnOnce(&Volume)) {
        let vol = self.open();
        f(&vol);
        vol.commit().unwrap();
        vol.close().unwrap();
    }

    pub fn lookup(&self, vol: &Volume, path: &str) -> InodeNo {
        let mut at = InodeNo::ROOT;
        for part in path.split('/') {
            at = vol.lookup(at, part.as_bytes()).unwrap().ino;
        }
        at
    }

    /// The whole contents of the file at `path`.
    pub fn read_all(&self, vol: &Volume, path: &str) -> Vec<u8> {
        let ino = self.lookup(vol, path);
        let size = vol.getattr(ino).unwrap().size;
        vol.read(ino, 0, size as usize).unwrap()
    }

    /// fsck finds nothing.
    pub fn assert_fsck_clean(&self) {
        let found = self.fsck();
        assert!(found.is_empty(), "{found:#?}");
    }
}

pub fn options() -> MountOptions {
    MountOptions { commit_interval: Duration::ZERO, ..MountOptions::default() }
}

/// One way to break the rig's volume with valid checksums, and the
/// invariant fsck must name for it.
pub struct Breaker {
    pub name: &'static str,
    pub invariant: Invariant,
    pub apply: fn(&Rig),
}

fn link_count(rig: &Rig) {
    rig.corrupt(|vol| {
        let f = rig.lookup(vol, "data");
        vol.with_fs(|fs| fs.inode_mut(f).unwrap().nlink = 10_878_977);
    });
}

fn mapped_twice(rig: &Rig) {
    rig.corrupt(|vol| {
        let f = rig.lookup(vol, "data");
        let g = vol.create(InodeNo::ROOT, b"thief", 0o644, Creds::ROOT).unwrap().ino;
        vol.with_fs(|fs| {
            let r = fs.inode(f).unwrap().clone();
            let mut rec = fs.inode_mut(g).unwrap();
            rec.body = r.body;
            rec.size = r.size;
            rec.blocks = r.blocks;
        });
    });
}

fn orphan_off_the_list(rig: &Rig) {
    let vol = rig.open();
    let f = vol.create(InodeNo::ROOT, b"doomed", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(f, 0, b"held open").unwrap();
    vol.open_file(f).unwrap();
    vol.unlink(InodeNo::ROOT, b"doomed").unwrap();
    // Unlinked while open: an orphan. Take it off the list (the rule
    // broken), then crash with the file open.
    vol.with_fs(|fs| fs.set_orphan(f, false)).unwrap();
    vol.commit().unwrap();
    drop(vol);
}

fn undecodable_node(rig: &Rig) {
    let at = rig.node_address(1);
    rig.reseal(MetaBlock(at), |p| p[0] = 9);
}

fn live_bytes(rig: &Rig) {
    let at = rig.table_block(TableId::SegmentUsage, 0);
    rig.reseal(at, |p| {
        let live = u32::from_le_bytes(p[0..4].try_into().unwrap());
        p[0..4].copy_from_slice(&(live + 4096).to_le_bytes());
    });
}

fn node_overwritten(rig: &Rig) {
    let (a1, a2) = (rig.node_address(1), rig.node_address(2));
    let other = rig.read(a2);
    let (h, p) = block::open_block(&other, MetaBlock(a2), rig.volume_id()).unwrap();
    let moved = block::seal_block(&block::BlockHeader { address: MetaBlock(a1), ..h }, p);
    rig.meta.write_blocks(a1, &moved).unwrap();
}

fn size_above_maximum(rig: &Rig) {
    rig.corrupt(|vol| {
        let f = vol.create(InodeNo::ROOT, b"huge", 0o644, Creds::ROOT).unwrap().ino;
        vol.write(f, 0, &[1u8; 9000]).unwrap();
        vol.commit().unwrap();
        vol.with_fs(|fs| fs.inode_mut(f).unwrap().size = u64::MAX - 7);
    });
}

fn extent_outside_the_device(rig: &Rig) {
    rig.corrupt(|vol| {
        let f = rig.lookup(vol, "data");
        vol.with_fs(|fs| {
            let mut rec = fs.inode_mut(f).unwrap();
            if let Body::Extents(e) = &mut rec.body {
                e.push(Extent { logical: 100, physical: DataBlock(1 << 40), len: 2, unwritten: false });
            }
            rec.size = 102 * 4096;
        });
    });
}

fn unreachable_file(rig: &Rig) {
    rig.corrupt(|vol| {
        let d = rig.lookup(vol, "d/sub");
        vol.with_fs(|fs| {
            let e = fs.dir_lookup(d, b"inner").unwrap().unwrap();
            fs.dir_remove(d, e.position).unwrap();
        });
    });
}

fn unreachable_directory(rig: &Rig) {
    rig.corrupt(|vol| {
        let d = rig.lookup(vol, "d");
        vol.with_fs(|fs| {
            let e = fs.dir_lookup(d, b"sub").unwrap().unwrap();
            fs.dir_remove(d, e.position).unwrap();
        });
    });
}

fn directory_named_twice(rig: &Rig) {
    rig.corrupt(|vol| {
        let sub = rig.lookup(vol, "d/sub");
        vol.with_fs(|fs| {
            fs.dir_insert(InodeNo::ROOT, &FileName::new(b"again").unwrap(), sub, FileKind::Directory).unwrap();
        });
    });
}

fn wrong_dot_dot(rig: &Rig) {
    rig.corrupt(|vol| {
        let sub = rig.lookup(vol, "d/sub");
        vol.with_fs(|fs| fs.inode_mut(sub).unwrap().parent = InodeNo::ROOT);
    });
}

fn entry_of_a_free_inode(rig: &Rig) {
    rig.corrupt(|vol| {
        vol.with_fs(|fs| {
            fs.dir_insert(InodeNo::ROOT, &FileName::new(b"ghost").unwrap(), InodeNo(4000), FileKind::Regular).unwrap();
        });
    });
}

fn entry_of_the_wrong_type(rig: &Rig) {
    rig.corrupt(|vol| {
        let f = rig.lookup(vol, "data");
        vol.with_fs(|fs| {
            let e = fs.dir_lookup(InodeNo::ROOT, b"data").unwrap().unwrap();
            fs.dir_replace(InodeNo::ROOT, &e, f, FileKind::Symlink).unwrap();
        });
    });
}

fn blocks_marked_free(rig: &Rig) {
    rig.corrupt(|vol| {
        let f = rig.lookup(vol, "data");
        vol.with_fs(|fs| {
            let Body::Extents(e) = fs.inode(f).unwrap().body.clone() else { panic!("extents") };
            fs.log.space_mut().mark_free(e[0].physical, e[0].len).unwrap();
        });
    });
}

fn blocks_leaked(rig: &Rig) {
    rig.corrupt(|vol| {
        vol.with_fs(|fs| {
            fs.log.space_mut().mark_used(DataBlock(9000), 40).unwrap();
        });
    });
}

fn inline_size(rig: &Rig) {
    rig.corrupt(|vol| {
        let g = rig.lookup(vol, "d/sub/inner");
        vol.with_fs(|fs| fs.inode_mut(g).unwrap().size = 3);
    });
}

fn block_count(rig: &Rig) {
    rig.corrupt(|vol| {
        let f = rig.lookup(vol, "data");
        vol.with_fs(|fs| fs.inode_mut(f).unwrap().blocks = 1);
    });
}

fn written_beyond_the_end(rig: &Rig) {
    rig.corrupt(|vol| {
        let f = rig.lookup(vol, "data");
        vol.with_fs(|fs| fs.inode_mut(f).unwrap().size = 100);
    });
}

/// Every breaker, with the invariant fsck names for it.
pub fn breakers() -> Vec<Breaker> {
    use Invariant::{I2, I4, I5, I7, I8};
    vec![
        Breaker { name: "link count", invariant: I8, apply: link_count },
        Breaker { name: "data blocks mapped twice", invariant: I8, apply: mapped_twice },
        Breaker { name: "orphan off the list", invariant: I4, apply: orphan_off_the_list },
        Breaker { name: "undecodable node", invariant: I5, apply: undecodable_node },
        Breaker { name: "live bytes", invariant: I7, apply: live_bytes },
        Breaker { name: "live node overwritten", invariant: I2, apply: node_overwritten },
        Breaker { name: "size above the maximum", invariant: I5, apply: size_above_maximum },
        Breaker { name: "extent outside the device", invariant: I8, apply: extent_outside_the_device },
        Breaker { name: "file no directory names", invariant: I8, apply: unreachable_file },
        Breaker { name: "directory no directory names", invariant: I8, apply: unreachable_directory },
        Breaker { name: "directory with two names", invariant: I8, apply: directory_named_twice },
        Breaker { name: "wrong '..'", invariant: I8, apply: wrong_dot_dot },
        Breaker { name: "entry naming a free inode", invariant: I8, apply: entry_of_a_free_inode },
        Breaker { name: "entry of the wrong type", invariant: I8, apply: entry_of_the_wrong_type },
        Breaker { name: "used blocks marked free", invariant: I8, apply: blocks_marked_free },
        Breaker { name: "unused blocks marked used", invariant: I8, apply: blocks_leaked },
        Breaker { name: "inline data and size disagree", invariant: I8, apply: inline_size },
        Breaker { name: "block count", invariant: I8, apply: block_count },
        Breaker { name: "written blocks beyond the end", invariant: I8, apply: written_beyond_the_end },
    ]
}
