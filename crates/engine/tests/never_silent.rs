//! Damage is never silent: a damaged block that costs acknowledged commits
//! is reported with what it costs, fsck lists it, and the volume opens only
//! read-only until the loss is accepted; damage that costs nothing (the
//! IFile blocks of a newer checkpoint) is reported too, and costs nothing.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::check::check;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::format::block::{self, BlockKind};
use dualfs_engine::format::checkpoint::Checkpoint;
use dualfs_engine::format::ifile::IndexBlock;
use dualfs_engine::format::superblock::CHECKPOINT_SLOTS;
use dualfs_engine::types::{BLOCK_SIZE, InodeNo, MetaBlock, Seq, Timestamp};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};
use dualfs_engine::{Error, Volume};

struct Rig {
    meta: Arc<MemoryDevice>,
    data: Arc<MemoryDevice>,
}

fn clock() -> dualfs_engine::volume::Clock {
    Arc::new(|| Timestamp::new(1_700_000_000, 0))
}

fn options() -> MountOptions {
    MountOptions { commit_interval: Duration::ZERO, ..MountOptions::default() }
}

impl Rig {
    fn new() -> Rig {
        let (meta, data) = (Arc::new(MemoryDevice::new(8192)), Arc::new(MemoryDevice::new(16384)));
        let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
        Volume::format(meta.clone(), data.clone(), &opts).unwrap();
        Rig { meta, data }
    }

    fn open(&self, options: MountOptions) -> dualfs_engine::Result<Volume> {
        Volume::open_with_clock(self.meta.clone(), self.data.clone(), options, clock())
    }

    fn read(&self, b: u64) -> Vec<u8> {
        let mut buf = vec![0u8; BLOCK_SIZE];
        self.meta.read_blocks(b, &mut buf).unwrap();
        buf
    }

    fn zero(&self, b: u64) {
        self.meta.write_blocks(b, &[0u8; BLOCK_SIZE]).unwrap();
    }

    /// Every descriptor (first block) written, with its sequence number.
    fn descriptors(&self) -> Vec<(u64, Seq)> {
        let id = self.volume_id();
        let mut out: Vec<(u64, Seq)> = (0..self.meta.block_count())
            .filter_map(|b| {
                let raw = self.read(b);
                let (h, _) = block::open_block_of_kind(&raw, MetaBlock(b), id, BlockKind::Descriptor).ok()?;
                (h.aux == 0).then_some((b, h.seq))
            })
            .collect();
        out.sort_by_key(|(_, s)| *s);
        out
    }

    fn volume_id(&self) -> u64 {
        dualfs_engine::meta_log::Log::read_superblocks(self.meta.as_ref(), self.data.as_ref()).unwrap().volume_id()
    }

    fn newest_checkpoint(&self) -> Checkpoint {
        CHECKPOINT_SLOTS
            .iter()
            .filter_map(|s| Checkpoint::decode(&self.read(s.0)).ok())
            .max_by_key(|c| c.number)
            .unwrap()
    }

    fn fsck_messages(&self) -> Vec<String> {
        let r = check(self.meta.clone(), self.data.clone()).unwrap();
        r.problems.iter().map(ToString::to_string).collect()
    }
}

/// Makes `commits` commit groups of ten files each after a checkpoint, and
/// "crashes" (drops the volume unclosed).
fn files_in_commits(rig: &Rig, commits: usize) {
    let vol = rig.open(options()).unwrap();
    for c in 0..commits {
        for i in 0..10 {
            let f = vol.create(InodeNo::ROOT, format!("c{c}-{i}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
            vol.write(f, 0, &[c as u8; 300]).unwrap();
        }
        vol.fsync(InodeNo::ROOT).unwrap();
    }
}

#[test]
fn a_zeroed_descriptor_before_acknowledged_commits_is_a_reported_loss() {
    let rig = Rig::new();
    let before = rig.descriptors().len();
    files_in_commits(&rig, 5);
    let after: Vec<(u64, Seq)> = rig.descriptors().into_iter().skip(before).collect();
    assert_eq!(after.len(), 5, "one partial segment per commit: {after:?}");
    let (victim, lost_seq) = after[1];
    rig.zero(victim);

    // Writing would make the loss permanent: refused, with what it costs.
    match rig.open(options()) {
        Err(Error::Damaged(msg)) => {
            assert!(msg.contains(&format!("{}..=", lost_seq.0)), "{msg}");
            assert!(msg.contains("-o ro") && msg.contains("recover=older"), "{msg}");
        }
        other => panic!("a damaged log opened for writing: {:?}", other.map(|v| v.open_report().clone())),
    }
    // Read-only shows what is left and says what is lost.
    let ro = rig.open(MountOptions { read_only: true, ..options() }).unwrap();
    let loss = ro.open_report().loss.clone().expect("a loss");
    assert_eq!(loss.first, lost_seq);
    assert_eq!(loss.beyond.as_ref().unwrap().partial_segments, 3, "{loss}");
    assert!(loss.acknowledged_through >= after[3].1, "{loss}");
    assert!(ro.lookup(InodeNo::ROOT, b"c0-0").is_ok());
    assert!(ro.lookup(InodeNo::ROOT, b"c1-0").is_err());
    drop(ro);
    // fsck says so (and exits 4 in the CLI).
    let msgs = rig.fsck_messages();
    assert!(msgs.iter().any(|m| m.contains("had been made durable")), "{msgs:?}");

    // Accepting the loss: the volume opens writable, and is whole again.
    let vol = rig.open(MountOptions { accept_loss: true, ..options() }).unwrap();
    let f = vol.create(InodeNo::ROOT, b"after", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(f, 0, b"new work").unwrap();
    vol.close().unwrap();
    assert!(rig.fsck_messages().is_empty(), "{:?}", rig.fsck_messages());
    let vol = rig.open(options()).unwrap();
    assert!(!vol.open_report().is_damaged(), "{:?}", vol.open_report());
    assert!(vol.lookup(InodeNo::ROOT, b"after").is_ok());
}

#[test]
fn a_damaged_body_block_before_acknowledged_commits_is_a_reported_loss() {
    let rig = Rig::new();
    let before = rig.descriptors().len();
    files_in_commits(&rig, 4);
    let after: Vec<(u64, Seq)> = rig.descriptors().into_iter().skip(before).collect();
    // The first body block of the first commit after the checkpoint.
    let body = after[0].0 + 1;
    let mut raw = rig.read(body);
    raw[200] ^= 0x40;
    rig.meta.write_blocks(body, &raw).unwrap();
    assert!(matches!(rig.open(options()), Err(Error::Damaged(_))));
    let ro = rig.open(MountOptions { read_only: true, ..options() }).unwrap();
    let loss = ro.open_report().loss.clone().expect("a loss");
    assert_eq!(loss.first, after[0].1);
    assert!(loss.stop.contains("body"), "{loss}");
}

#[test]
fn damaged_ifile_blocks_of_the_newest_checkpoint_cost_nothing_and_are_reported() {
    // The case that showed it: 100 files, unmount, mount, an fsync'd 256 KiB
    // file, a crash; then one IFile block of the newest checkpoint zeroed.
    let rig = Rig::new();
    let vol = rig.open(options()).unwrap();
    for i in 0..100 {
        vol.create(InodeNo::ROOT, format!("f{i}").as_bytes(), 0o644, Creds::ROOT).unwrap();
    }
    vol.close().unwrap();
    let vol = rig.open(options()).unwrap();
    let big = vol.create(InodeNo::ROOT, b"big", 0o644, Creds::ROOT).unwrap().ino;
    let bytes: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
    vol.write(big, 0, &bytes).unwrap();
    vol.fsync(big).unwrap();
    drop(vol);

    // A table block the newest checkpoint wrote itself (the older one
    // names another address for it).
    let newest = rig.newest_checkpoint();
    let id = rig.volume_id();
    let index = newest.index.iter().find(|r| r.table.name() == "inode map").unwrap();
    let raw = rig.read(index.address.0);
    let (_, payload) = block::open_block_of_kind(&raw, index.address, id, BlockKind::IFileIndex).unwrap();
    let table_block = IndexBlock::decode(payload).unwrap().addresses[0];
    rig.zero(table_block.0);

    let vol = rig.open(options()).unwrap();
    let report = vol.open_report().clone();
    assert!(report.fell_back.is_some(), "{report:?}");
    assert!(report.loss.is_none(), "nothing acknowledged was lost: {report:?}");
    assert!(
        report.damage.iter().any(|d| d.contains(&format!("checkpoint {} cannot be loaded", newest.number))),
        "{report:?}"
    );
    let big = vol.lookup(InodeNo::ROOT, b"big").unwrap().ino;
    assert_eq!(vol.read(big, 0, bytes.len()).unwrap(), bytes, "the fsync'd file survives");
    assert!(vol.lookup(InodeNo::ROOT, b"f99").is_ok());
    drop(vol);
}

#[test]
fn fsck_reports_a_newer_checkpoint_that_does_not_load() {
    let rig = Rig::new();
    let vol = rig.open(options()).unwrap();
    for i in 0..20 {
        vol.create(InodeNo::ROOT, format!("f{i}").as_bytes(), 0o644, Creds::ROOT).unwrap();
    }
    vol.close().unwrap();
    let newest = rig.newest_checkpoint();
    let index = &newest.index[0];
    rig.zero(index.address.0);
    let msgs = rig.fsck_messages();
    assert!(msgs.iter().any(|m| m.contains("cannot be loaded")), "{msgs:?}");
}

#[test]
fn a_damaged_meta_data_superblock_is_read_from_the_data_copy_and_written_again() {
    let rig = Rig::new();
    let vol = rig.open(options()).unwrap();
    vol.create(InodeNo::ROOT, b"kept", 0o644, Creds::ROOT).unwrap();
    vol.close().unwrap();
    rig.zero(0);
    let msgs = rig.fsck_messages();
    assert!(msgs.iter().any(|m| m.contains("superblock does not decode")), "{msgs:?}");
    let ro = rig.open(MountOptions { read_only: true, ..options() }).unwrap();
    assert!(ro.lookup(InodeNo::ROOT, b"kept").is_ok());
    drop(ro);
    // A writable mount repairs it.
    rig.open(options()).unwrap().close().unwrap();
    assert!(rig.fsck_messages().is_empty(), "{:?}", rig.fsck_messages());
}
