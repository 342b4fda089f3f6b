//! fsck's repair on a corpus of volumes broken with valid checksums (every
//! breaker of `common`), on damaged blocks, and on a reported loss: each
//! repair is listed, the result passes fsck and mounts, and a second
//! repair finds nothing.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{Rig, breakers, clock, options};
use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::repair::{Prepared, Severity, prepare_with_clock};
use dualfs_engine::types::{BLOCK_SIZE, InodeNo};
use dualfs_engine::volume::{Creds, MountOptions};

fn prepare(rig: &Rig) -> Prepared {
    prepare_with_clock(rig.meta.clone(), rig.data.clone(), clock()).unwrap()
}

/// Repairs the rig's volume, checks the result, and that a second repair
/// finds nothing; returns the repairs made.
fn repair(rig: &Rig, what: &str) -> Prepared {
    let p = prepare(rig);
    assert!(!p.is_empty(), "{what}: nothing to repair");
    let after = p.after.as_ref().unwrap();
    assert!(
        after.is_clean(),
        "{what}: the repaired volume is not clean: {:#?}\nrepairs: {:#?}",
        after.problems,
        p.repairs
    );
    p.write(rig.meta.as_ref(), rig.data.as_ref()).unwrap();
    let left = rig.fsck();
    assert!(left.is_empty(), "{what}: fsck after the repair: {left:#?}");
    let again = prepare(rig);
    assert!(again.is_empty(), "{what}: a second repair finds {:#?}", again.repairs);
    let vol = Volume::open_with_clock(rig.meta.clone(), rig.data.clone(), options(), clock()).unwrap();
    assert!(!vol.open_report().is_damaged(), "{what}: {:?}", vol.open_report());
    vol.close().unwrap();
    p
}

#[test]
fn a_clean_volume_needs_no_repair_and_nothing_is_written() {
    let rig = Rig::new();
    let before: Vec<Vec<u8>> = (0..rig.meta.block_count()).map(|b| rig.read(b)).collect();
    let p = prepare(&rig);
    assert!(p.is_empty(), "{:#?}", p.repairs);
    assert_eq!(p.blocks_written, (0, 0));
    p.write(rig.meta.as_ref(), rig.data.as_ref()).unwrap();
    assert!((0..rig.meta.block_count()).all(|b| rig.read(b) == before[b as usize]));
}

#[test]
fn every_breaker_is_repaired() {
    for b in breakers() {
        let rig = Rig::new();
        (b.apply)(&rig);
        let p = repair(&rig, b.name);
        println!("{}: {} repairs", b.name, p.repairs.len());
        for r in &p.repairs {
            println!("  [{}] {r}", r.severity.name());
        }
    }
}

#[test]
fn nothing_is_written_before_write() {
    let rig = Rig::new();
    (breakers()[0].apply)(&rig);
    let before: Vec<Vec<u8>> = (0..rig.meta.block_count()).map(|b| rig.read(b)).collect();
    let p = prepare(&rig);
    assert!(!p.is_empty());
    assert!(p.blocks_written.0 > 0);
    assert!((0..rig.meta.block_count()).all(|b| rig.read(b) == before[b as usize]), "staged writes reached the disk");
    drop(p);
    assert!(!rig.fsck().is_empty());
}

#[test]
fn blocks_two_files_claim_are_copied_and_both_files_keep_their_bytes() {
    let rig = Rig::new();
    (breakers().into_iter().find(|b| b.name == "data blocks mapped twice").unwrap().apply)(&rig);
    let p = repair(&rig, "mapped twice");
    assert!(p.repairs.iter().any(|r| r.action.contains("copied")), "{:#?}", p.repairs);
    let vol = rig.open();
    let a = rig.lookup(&vol, "data");
    let b = rig.lookup(&vol, "thief");
    assert_eq!(vol.read(a, 0, 40_000).unwrap(), vec![7u8; 40_000]);
    assert_eq!(vol.read(b, 0, 40_000).unwrap(), vec![7u8; 40_000]);
}

#[test]
fn what_no_directory_reaches_goes_to_lost_and_found() {
    let rig = Rig::new();
    (breakers().into_iter().find(|b| b.name == "directory no directory names").unwrap().apply)(&rig);
    let p = repair(&rig, "unreachable directory");
    assert!(p.severity() == Some(Severity::Changes), "{:#?}", p.repairs);
    let vol = rig.open();
    let lf = vol.lookup(InodeNo::ROOT, b"lost+found").unwrap();
    let mut names = Vec::new();
    vol.readdir(lf.ino, 0, &mut |e| {
        names.push(String::from_utf8_lossy(&e.name).into_owned());
        true
    })
    .unwrap();
    let sub = names.iter().find(|n| n.starts_with('#')).expect("the directory in lost+found");
    let sub = vol.lookup(lf.ino, sub.as_bytes()).unwrap().ino;
    let inner = vol.lookup(sub, b"inner").unwrap().ino;
    assert_eq!(vol.read(inner, 0, 100).unwrap(), b"inner contents");
}

#[test]
fn only_safe_repairs_are_safe() {
    let rig = Rig::new();
    (breakers().into_iter().find(|b| b.name == "link count").unwrap().apply)(&rig);
    assert_eq!(prepare(&rig).severity(), Some(Severity::Safe));
    let rig = Rig::new();
    (breakers().into_iter().find(|b| b.name == "entry naming a free inode").unwrap().apply)(&rig);
    assert_eq!(prepare(&rig).severity(), Some(Severity::Loses));
}

/// Zeroing each block the volume uses on the meta-data device, one at a
/// time: every result the repair gives is clean, mounts, and needs nothing more.
#[test]
fn every_single_zeroed_meta_data_block_is_repaired() {
    let rig = Rig::new();
    let image: Vec<Vec<u8>> = (0..rig.meta.block_count()).map(|b| rig.read(b)).collect();
    let used: Vec<u64> = (0..image.len() as u64).filter(|&b| image[b as usize].iter().any(|&x| x != 0)).collect();
    let mut repaired = 0;
    for b in &used {
        let meta = Arc::new(MemoryDevice::new(image.len() as u64));
        for (i, blk) in image.iter().enumerate() {
            if i as u64 != *b && blk.iter().any(|&x| x != 0) {
                meta.write_blocks(i as u64, blk).unwrap();
            }
        }
        let data = Arc::new(MemoryDevice::new(rig.data.block_count()));
        let mut buf = vec![0u8; rig.data.block_count() as usize * BLOCK_SIZE];
        rig.data.read_blocks(0, &mut buf).unwrap();
        data.write_blocks(0, &buf).unwrap();
        let damaged = Rig { meta, data };
        if !prepare(&damaged).is_empty() {
            repair(&damaged, &format!("block {b} zeroed"));
            repaired += 1;
        }
    }
    println!("{} used meta-data blocks zeroed one at a time: {repaired} needed a repair, all repaired", used.len());
}

#[test]
fn a_reported_loss_is_repaired_to_the_older_state_and_listed() {
    let rig = Rig::new();
    let vol = rig.open();
    for c in 0..4 {
        for i in 0..10 {
            let f = vol.create(InodeNo::ROOT, format!("c{c}-{i}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
            vol.write(f, 0, &[c as u8; 300]).unwrap();
        }
        vol.fsync(InodeNo::ROOT).unwrap();
    }
    drop(vol);
    // The descriptor of the second commit after the checkpoint.
    let id = rig.volume_id();
    let mut descs: Vec<(u64, u64)> = (0..rig.meta.block_count())
        .filter_map(|b| {
            let raw = rig.read(b);
            let (h, _) = dualfs_engine::format::block::open_block_of_kind(
                &raw,
                dualfs_engine::types::MetaBlock(b),
                id,
                dualfs_engine::format::block::BlockKind::Descriptor,
            )
            .ok()?;
            (h.aux == 0).then_some((h.seq.0, b))
        })
        .collect();
    descs.sort_unstable();
    let victim = descs[descs.len() - 3].1;
    rig.meta.write_blocks(victim, &[0u8; BLOCK_SIZE]).unwrap();
    assert!(Volume::open_with_clock(rig.meta.clone(), rig.data.clone(), options(), clock()).is_err());
    let p = repair(&rig, "loss");
    let loss = p.repairs.iter().find(|r| r.action.contains("loss is accepted")).expect("the loss listed");
    assert_eq!(loss.severity, Severity::Loses);
    let vol =
        Volume::open_with_clock(rig.meta.clone(), rig.data.clone(), MountOptions { ..options() }, clock()).unwrap();
    assert!(vol.lookup(InodeNo::ROOT, b"c0-9").is_ok());
    assert!(vol.lookup(InodeNo::ROOT, b"c3-0").is_err());
}

/// Both checkpoint slots gone: the maps come from a scan of the log, and
/// every file is where it was, with its bytes.
#[test]
fn with_no_checkpoint_left_the_ifile_is_rebuilt_from_the_log() {
    let rig = Rig::new();
    let vol = rig.open();
    let f = vol.create(InodeNo::ROOT, b"after-checkpoint", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(f, 0, &[3u8; 12_000]).unwrap();
    vol.fsync(f).unwrap();
    drop(vol);
    for slot in [1, 2] {
        rig.meta.write_blocks(slot, &[0u8; BLOCK_SIZE]).unwrap();
    }
    assert!(Volume::open_with_clock(rig.meta.clone(), rig.data.clone(), options(), clock()).is_err());
    let p = repair(&rig, "no checkpoint");
    assert!(p.source.contains("rebuilt"), "{}", p.source);
    let vol = rig.open();
    let d = vol.lookup(InodeNo::ROOT, b"d").unwrap().ino;
    for i in 0..120 {
        vol.lookup(d, format!("a-rather-long-file-name-{i:04}").as_bytes()).unwrap();
    }
    let data = rig.lookup(&vol, "data");
    assert!(vol.read(data, 0, 40_000).unwrap() == vec![7u8; 40_000]);
    let after = rig.lookup(&vol, "after-checkpoint");
    assert!(vol.read(after, 0, 12_000).unwrap() == vec![3u8; 12_000]);
    assert_eq!(vol.readlink(rig.lookup(&vol, "link")).unwrap(), b"d/sub/inner");
}

/// The second name of a directory goes, the one its `..` names stays.
#[test]
fn a_directory_keeps_the_name_its_dot_dot_names() {
    let rig = Rig::new();
    (breakers().into_iter().find(|b| b.name == "directory with two names").unwrap().apply)(&rig);
    repair(&rig, "two names");
    let vol = rig.open();
    assert!(vol.lookup(InodeNo::ROOT, b"again").is_err());
    let inner = rig.lookup(&vol, "d/sub/inner");
    assert_eq!(vol.read(inner, 0, 100).unwrap(), b"inner contents");
}
