//! Scrub reads every live meta-data block and every allocated data block
//! and names what does not read back right, by block and by file: damage
//! of several kinds is put in chosen blocks and the report must name them.

#![allow(clippy::unwrap_used)]

mod common;

use std::io;
use std::sync::Arc;

use common::Rig;
use dualfs_engine::check::scrub::{ScrubOptions, ScrubReport, scrub_unmounted};
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::format::block;
use dualfs_engine::format::ifile::TableId;
use dualfs_engine::meta_log::Log;
use dualfs_engine::meta_log::live::{LiveBlock, LiveKind};
use dualfs_engine::types::{BLOCK_SIZE, InodeNo, MetaBlock};
use dualfs_engine::volume::Creds;

fn scrub(rig: &Rig, data: Arc<dyn BlockDevice>) -> ScrubReport {
    scrub_unmounted(rig.meta.clone(), data, ScrubOptions::default(), &mut |_, _| true).unwrap()
}

fn live(rig: &Rig) -> Vec<LiveBlock> {
    let (mut log, _) = Log::open(rig.meta.clone(), rig.data.clone()).unwrap();
    log.live_blocks(true).unwrap()
}

fn ino(rig: &Rig, path: &[&str]) -> InodeNo {
    let vol = rig.open();
    let mut at = InodeNo::ROOT;
    for p in path {
        at = vol.lookup(at, p.as_bytes()).unwrap().ino;
    }
    vol.close().unwrap();
    at
}

/// Flips a byte in the payload: the checksum no longer holds.
fn flip(rig: &Rig, at: u64) {
    let mut raw = rig.read(at);
    raw[BLOCK_SIZE / 2] ^= 0x5a;
    rig.meta.write_blocks(at, &raw).unwrap();
}

#[test]
fn a_clean_volume_scrubs_clean_and_reads_everything() {
    let rig = Rig::new();
    let r = scrub(&rig, rig.data.clone());
    assert!(r.bad_meta.is_empty() && r.data_errors.is_empty(), "{r:#?}");
    assert!(r.meta_blocks >= live(&rig).len() as u64, "{r:#?}");
    // The 40,000-byte file: 10 blocks (the small one is inline).
    assert_eq!(r.data_blocks, 10, "{r:#?}");
    assert_eq!((r.corrected(), r.uncorrectable()), (0, 0));
}

#[test]
fn a_damaged_inode_block_is_named_with_its_files_paths() {
    let rig = Rig::new();
    let keep = [InodeNo::ROOT, ino(&rig, &["d"]), ino(&rig, &["d", "sub"])];
    // A block of the directory's files alone, so that their paths stay reachable.
    let b = live(&rig)
        .into_iter()
        .find(|b| matches!(&b.kind, LiveKind::Inodes(v) if v.len() > 3 && v.iter().all(|i| !keep.contains(i))))
        .unwrap();
    let LiveKind::Inodes(inos) = &b.kind else { unreachable!() };
    flip(&rig, b.at.0);
    let r = scrub(&rig, rig.data.clone());
    assert_eq!(r.bad_meta.len(), 1, "{r:#?}");
    let bad = &r.bad_meta[0];
    assert_eq!((bad.block, bad.structure.as_str(), bad.repaired), (b.at.0, "inode block", false));
    for i in inos {
        let k = bad.inodes.iter().position(|x| x == i).unwrap_or_else(|| panic!("inode {i} not named: {bad:#?}"));
        let path = bad.paths[k].as_deref().unwrap_or_else(|| panic!("no path for inode {i}: {bad:#?}"));
        assert!(path.starts_with("/d/a-rather-long-file-name-"), "{path}");
    }
    assert_eq!(r.uncorrectable(), 1);
}

#[test]
fn a_damaged_directory_node_names_the_directory() {
    let rig = Rig::new();
    let d = ino(&rig, &["d"]);
    let vid = rig.volume_id();
    let b = live(&rig)
        .into_iter()
        .find(|b| {
            matches!(b.kind, LiveKind::Node(_)) && block::open_block(&rig.read(b.at.0), b.at, vid).unwrap().0.owner == d
        })
        .unwrap();
    // Zeroed, as a lost write leaves it: nothing of its header is left to
    // say whose it was; the descriptor's summary does.
    rig.meta.write_blocks(b.at.0, &[0u8; BLOCK_SIZE]).unwrap();
    let r = scrub(&rig, rig.data.clone());
    let bad: Vec<_> = r.bad_meta.iter().filter(|x| x.block == b.at.0).collect();
    assert_eq!(bad.len(), 1, "{r:#?}");
    assert!(bad[0].structure.starts_with("node "), "{bad:#?}");
    assert_eq!(bad[0].inodes, vec![d]);
    assert_eq!(bad[0].paths, vec![Some("/d".to_string())]);
}

#[test]
fn a_node_of_another_identity_is_damage_though_its_checksum_holds() {
    let rig = Rig::new();
    let nodes: Vec<_> = live(&rig).into_iter().filter(|b| matches!(b.kind, LiveKind::Node(_))).collect();
    // Node A's block copied over node B's, sealed for B's address: a valid
    // block holding the wrong node (a misdirected write).
    let (a, b) = (&nodes[0], &nodes[1]);
    let vid = rig.volume_id();
    let raw = rig.read(a.at.0);
    let (mut h, payload) = block::open_block(&raw, a.at, vid).unwrap();
    h.address = b.at;
    rig.meta.write_blocks(b.at.0, &block::seal_block(&h, payload)).unwrap();
    let r = scrub(&rig, rig.data.clone());
    let bad = r.bad_meta.iter().find(|x| x.block == b.at.0).unwrap_or_else(|| panic!("{r:#?}"));
    assert!(bad.error.contains("instead of"), "{bad:#?}");
}

#[test]
fn a_mounted_volume_scrubs_its_ifile_and_finds_a_damaged_table_block() {
    let rig = Rig::new();
    let at = rig.table_block(TableId::SegmentUsage, 0);
    let vol = rig.open();
    let clean = vol.scrub(ScrubOptions::default(), &mut |_, _| true).unwrap();
    assert!(clean.bad_meta.is_empty(), "{clean:#?}");
    // Loaded at the open; the copy on disk goes bad under the mount.
    flip(&rig, at.0);
    let r = vol.scrub(ScrubOptions { meta_only: true, ..ScrubOptions::default() }, &mut |_, _| true).unwrap();
    assert_eq!(r.bad_meta.len(), 1, "{r:#?}");
    assert_eq!((r.bad_meta[0].block, r.bad_meta[0].structure.as_str()), (at.0, "segment usage table block 0"));
    assert!(r.bad_meta[0].inodes.is_empty());
    assert_eq!(r.data_blocks, 0);
    drop(vol);
}

/// A data device whose reads of chosen blocks fail, as a disk's bad sector.
#[derive(Debug)]
struct BadSectors {
    inner: Arc<MemoryDevice>,
    bad: Vec<u64>,
}

impl BlockDevice for BadSectors {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        let n = (buf.len() / BLOCK_SIZE) as u64;
        if self.bad.iter().any(|b| (first..first + n).contains(b)) {
            return Err(io::Error::from_raw_os_error(libc_eio()));
        }
        self.inner.read_blocks(first, buf)
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        self.inner.write_blocks(first, buf)
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn libc_eio() -> i32 {
    5
}

#[test]
fn a_data_block_that_fails_to_read_is_named_with_its_file() {
    let rig = Rig::new();
    let f = ino(&rig, &["data"]);
    // The file's blocks are the only ones of sevens.
    let sevens: Vec<u64> = (0..rig.data.block_count())
        .filter(|&b| {
            let mut buf = vec![0u8; BLOCK_SIZE];
            rig.data.read_blocks(b, &mut buf).unwrap();
            buf.iter().all(|&x| x == 7)
        })
        .collect();
    assert_eq!(sevens.len(), 9, "40,000 bytes: nine whole blocks of sevens");
    let bad = sevens[4];
    let data = Arc::new(BadSectors { inner: rig.data.clone(), bad: vec![bad] });
    let r = scrub(&rig, data);
    assert!(r.bad_meta.is_empty(), "{r:#?}");
    assert_eq!(r.data_errors.len(), 1, "{r:#?}");
    let e = &r.data_errors[0];
    assert_eq!((e.block, e.ino, e.file_block, e.path.as_deref()), (bad, f, 4, Some("/data")));
    assert_eq!(r.uncorrectable(), 1);
}

#[test]
fn a_snapshots_own_block_is_scrubbed_and_named_by_its_tree() {
    let rig = Rig::new();
    let d = ino(&rig, &["d"]);
    let vol = rig.open();
    vol.snapshot_create("before").unwrap();
    // The live tree moves on: every file of the directory changes, so the
    // snapshot's records of them stay in blocks only the snapshot reaches.
    for i in 0..120 {
        let f = vol.lookup(d, format!("a-rather-long-file-name-{i:04}").as_bytes()).unwrap().ino;
        vol.write(f, 0, b"changed after the snapshot").unwrap();
    }
    vol.create(InodeNo::ROOT, b"later", 0o644, Creds::ROOT).unwrap();
    vol.close().unwrap();
    let (log, _) = Log::open(rig.meta.clone(), rig.data.clone()).unwrap();
    let s = log.snapshots()[0].checkpoint.clone();
    let mut image = log.open_image(&s).unwrap();
    let live_now: Vec<MetaBlock> = live(&rig).iter().map(|b| b.at).collect();
    let own = image
        .live_blocks(false)
        .unwrap()
        .into_iter()
        .find(|b| matches!(&b.kind, LiveKind::Inodes(v) if v.len() > 3) && !live_now.contains(&b.at))
        .unwrap();
    let LiveKind::Inodes(inos) = &own.kind else { unreachable!() };
    flip(&rig, own.at.0);
    let r = scrub(&rig, rig.data.clone());
    let bad = r.bad_meta.iter().find(|x| x.block == own.at.0).unwrap_or_else(|| panic!("{r:#?}"));
    assert_eq!(bad.tree, "snapshot before");
    assert!(inos.iter().all(|i| bad.inodes.contains(i)), "{bad:#?}");
}

#[test]
fn a_scrub_stops_when_asked_and_keeps_to_its_rate() {
    let rig = Rig::new();
    let mut calls = 0;
    let r = scrub_unmounted(rig.meta.clone(), rig.data.clone(), ScrubOptions::default(), &mut |_, _| {
        calls += 1;
        false
    })
    .unwrap();
    assert!(r.stopped && calls == 1, "{r:#?}");
    let started = std::time::Instant::now();
    let r = scrub_unmounted(
        rig.meta.clone(),
        rig.data.clone(),
        ScrubOptions { rate: Some(1 << 20), meta_only: true },
        &mut |_, _| true,
    )
    .unwrap();
    // At 1 MiB/s, what was read took at least its size in seconds.
    let floor = r.bytes() as f64 / f64::from(1 << 20) * 0.9;
    assert!(started.elapsed().as_secs_f64() >= floor, "{:?} for {} bytes", started.elapsed(), r.bytes());
}
