//! Crashes during a migration (`dualfs migrate`): three devices are
//! written (the old one, its replacement, and the device that stays), which
//! the explorer's two-device recordings cannot express, so this test
//! records them itself. Every cut of the recording (each write and flush),
//! with only what was flushed, with everything written, with a random
//! subset of the writes in flight, and with a superblock write torn, must
//! leave a pair that mounts (the new one or the old one: what a user tries
//! after a crash) with every file fsync'd before the cut intact, and no
//! pair that mounts may lack one. With the rule that the replacement is
//! flushed before the superblocks name it broken on purpose
//! (`Fault::MigrateCopyUnsynced`), some crash state fails this, for each
//! device. A copy step's older contents left over blocks written while it
//! was read ahead (`Fault::MigrateCopyOverWrites`) is checked directly:
//! the recordings cannot time a write into that window.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex, PoisonError};

use dualfs_engine::Volume;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::error::DeviceRole;
use dualfs_engine::faults::{self, Fault};
use dualfs_engine::types::{BLOCK_SIZE, InodeNo};
use dualfs_engine::volume::{AtimeMode, Creds, MkfsOptions, MountOptions};
use dualfs_sim::image::{Fill, Image, OverlayDevice};
use dualfs_sim::three_devices::{Choice, Ev, Events, Files, Rec, build, push};
use dualfs_sim::workload::fixed_clock;

const META_BLOCKS: u64 = 3072;
const DATA_BLOCKS: u64 = 8192;
/// Indices of the three devices in a recording.
const META: usize = 0;
const DATA: usize = 1;
const NEW: usize = 2;

fn options() -> MountOptions {
    MountOptions { atime: AtimeMode::NoAtime, commit_interval: std::time::Duration::ZERO, ..MountOptions::default() }
}

fn bytes(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 13 + seed * 29) % 253) as u8).collect()
}

/// The volume before the migration: files written and closed (durable).
fn base() -> ([Arc<Image>; 2], Files) {
    let m = Arc::new(OverlayDevice::new(Arc::new(Image::new(META_BLOCKS, Fill::Zero))));
    let d = Arc::new(OverlayDevice::new(Arc::new(Image::new(DATA_BLOCKS, Fill::Zero))));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 4096, ..MkfsOptions::default() };
    Volume::format(m.clone(), d.clone(), &opts).unwrap();
    let v = Volume::open_with_clock(m.clone(), d.clone(), options(), fixed_clock()).unwrap();
    let mut files = Vec::new();
    for i in 0..40 {
        let name = format!("base-{i}");
        let f = v.create(InodeNo::ROOT, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        let data = bytes(i, 500 + i * 6000);
        v.write(f, 0, &data).unwrap();
        files.push((name, data));
    }
    // Freed space: the copy skips it, and the log has old segments.
    for i in 0..10 {
        v.unlink(InodeNo::ROOT, format!("base-{i}").as_bytes()).unwrap();
    }
    files.drain(..10);
    v.close().unwrap();
    ([m.freeze(), d.freeze()], files)
}

/// Records a migration of `role` of `base`, files written and fsync'd
/// between the copy's steps; the starting images and the events.
fn record(base: &[Arc<Image>; 2], role: DeviceRole) -> ([Arc<Image>; 3], Vec<Ev>) {
    let ev: Events = Arc::default();
    let blocks = match role {
        DeviceRole::Meta => META_BLOCKS,
        DeviceRole::Data => DATA_BLOCKS,
    };
    let start = [base[0].clone(), base[1].clone(), Arc::new(Image::new(blocks, Fill::Zero))];
    let dev = |i: usize| Arc::new(Rec { dev: i, live: OverlayDevice::new(start[i].clone()), ev: ev.clone() });
    let (m, d, n) = (dev(META), dev(DATA), dev(NEW));
    let v = Volume::open_with_clock(m, d, options(), fixed_clock()).unwrap();
    let mut step = 0;
    v.migrate(role, n, &mut |_, _| {
        step += 1;
        let name = format!("during-{step}");
        let f = v.create(InodeNo::ROOT, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        let data = bytes(100 + step, 2000 + step * 3000);
        v.write(f, 0, &data).unwrap();
        v.fsync(f).unwrap();
        push(&ev, Ev::Synced(name, data));
    })
    .unwrap();
    let f = v.create(InodeNo::ROOT, b"after", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &bytes(7, 20_000)).unwrap();
    v.fsync(f).unwrap();
    push(&ev, Ev::Synced("after".into(), bytes(7, 20_000)));
    v.close().unwrap();
    let events = ev.lock().unwrap_or_else(PoisonError::into_inner).clone();
    (start, events)
}

/// Whether the pair mounts, and if it does, which promised file it lacks.
fn try_pair(meta: &Arc<Image>, data: &Arc<Image>, files: &Files) -> Option<Result<(), String>> {
    let m: Arc<dyn BlockDevice> = Arc::new(OverlayDevice::new(meta.clone()));
    let d: Arc<dyn BlockDevice> = Arc::new(OverlayDevice::new(data.clone()));
    let v = Volume::open_with_clock(m, d, options(), fixed_clock()).ok()?;
    for (name, want) in files {
        let got = v.lookup(InodeNo::ROOT, name.as_bytes()).and_then(|a| v.read(a.ino, 0, want.len() + 1));
        match got {
            Ok(g) if g == *want => {}
            Ok(g) => return Some(Err(format!("{name}: {} bytes, not the {} fsync'd", g.len(), want.len()))),
            Err(e) => return Some(Err(format!("{name}: {e}"))),
        }
    }
    v.close().ok()?;
    Some(Ok(()))
}

/// Every crash state of a migration of `role`, checked; the failures.
fn explore(role: DeviceRole) -> (usize, Vec<String>) {
    let (images, base_files) = base();
    let (start, events) = record(&images, role);
    let cuts: Vec<usize> = (0..=events.len()).collect();
    let failures = Mutex::new(Vec::new());
    let states = std::sync::atomic::AtomicUsize::new(0);
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&cut) = cuts.get(i) else { break };
                    let mut files = base_files.clone();
                    files.extend(events[..cut].iter().filter_map(|e| match e {
                        Ev::Synced(n, d) => Some((n.clone(), d.clone())),
                        _ => None,
                    }));
                    let mut choices = vec![Choice::Flushed, Choice::All, Choice::Random(cut as u64 * 7919)];
                    if let Some(Ev::Write(_, 0, _)) = events[..cut].last() {
                        choices.extend([Choice::Torn(true), Choice::Torn(false)]);
                    }
                    for choice in choices {
                        states.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let img = build(&start, &events, cut, choice);
                        let (old, new) = match role {
                            DeviceRole::Meta => ((&img[META], &img[DATA]), (&img[NEW], &img[DATA])),
                            DeviceRole::Data => ((&img[META], &img[DATA]), (&img[META], &img[NEW])),
                        };
                        let tried = [try_pair(new.0, new.1, &files), try_pair(old.0, old.1, &files)];
                        let why = match tried {
                            [None, None] => Some("neither the new pair nor the old one mounts".to_string()),
                            [Some(Err(e)), _] => Some(format!("the new pair mounts without {e}")),
                            [_, Some(Err(e))] => Some(format!("the old pair mounts without {e}")),
                            _ => None,
                        };
                        if let Some(why) = why {
                            let mut f = failures.lock().unwrap_or_else(PoisonError::into_inner);
                            f.push(format!("cut {cut}/{} {choice:?}: {why}", events.len()));
                        }
                    }
                }
            });
        }
    });
    let mut f = failures.into_inner().unwrap_or_else(PoisonError::into_inner);
    f.sort();
    (states.into_inner(), f)
}

/// The fault switch is process-wide: the tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn every_crash_during_a_migration_of_the_meta_data_device_leaves_a_pair_with_every_fsync() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    let (states, failures) = explore(DeviceRole::Meta);
    println!("{states} crash states");
    assert!(states > 1000, "the migration wrote little: {states} states");
    assert!(failures.is_empty(), "{} of {states}: {failures:#?}", failures.len());
}

#[test]
fn every_crash_during_a_migration_of_the_data_device_leaves_a_pair_with_every_fsync() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    let (states, failures) = explore(DeviceRole::Data);
    println!("{states} crash states");
    assert!(states > 1000, "the migration wrote little: {states} states");
    assert!(failures.is_empty(), "{} of {states}: {failures:#?}", failures.len());
}

/// An old device that says when a read covered block `watched`.
#[derive(Debug)]
struct Gate {
    dev: OverlayDevice,
    watched: u64,
    seen: std::sync::atomic::AtomicBool,
}

impl BlockDevice for Gate {
    fn block_count(&self) -> u64 {
        self.dev.block_count()
    }
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.dev.read_blocks(first, buf)?;
        if (first..first + (buf.len() / BLOCK_SIZE) as u64).contains(&self.watched) {
            self.seen.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(())
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> std::io::Result<()> {
        self.dev.write_blocks(first, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.dev.flush()
    }
}

/// Copies 40 blocks in steps of 10 and writes block 20 once its step was
/// read ahead; whether the replacement ends with the new block 20.
fn write_during_read_ahead() -> bool {
    use dualfs_engine::device::SwitchDevice;
    use std::sync::atomic::Ordering::SeqCst;
    let old = Arc::new(Gate {
        dev: OverlayDevice::new(Arc::new(Image::new(64, Fill::Zero))),
        watched: 20,
        seen: Default::default(),
    });
    old.write_blocks(20, &[1u8; BLOCK_SIZE]).unwrap();
    let new = Arc::new(OverlayDevice::new(Arc::new(Image::new(64, Fill::Zero))));
    let s = SwitchDevice::new(old.clone());
    s.start_mirror(new.clone());
    s.copy_runs(&[(1, 40)], 10, &mut |done| {
        if done == 10 {
            let t = std::time::Instant::now();
            while !old.seen.load(SeqCst) && t.elapsed().as_secs() < 10 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            s.write_blocks(20, &[2u8; BLOCK_SIZE]).unwrap();
        }
    })
    .unwrap();
    assert!(old.seen.load(SeqCst), "the step was never read ahead");
    new.block(20)[0] == 2
}

/// The copier reads a step ahead while the volume writes: a write to that
/// step must reach the replacement over the step's older copy. With the
/// rule broken (`Fault::MigrateCopyOverWrites`) the replacement keeps the
/// older block; the crash states above cannot time the write into the
/// read-ahead window, so this check drives it directly.
#[test]
fn a_write_into_a_step_read_ahead_reaches_the_replacement_unless_the_rule_is_broken() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    assert!(write_during_read_ahead(), "the replacement kept the step's older block");
    faults::set(&[Fault::MigrateCopyOverWrites]);
    let kept_new = write_during_read_ahead();
    faults::set(&[]);
    assert!(!kept_new, "the check missed the broken rule");
}

#[test]
fn superblocks_naming_a_copy_not_yet_durable_lose_files() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    for role in [DeviceRole::Meta, DeviceRole::Data] {
        faults::set(&[Fault::MigrateCopyUnsynced]);
        let (_, failures) = explore(role);
        faults::set(&[]);
        assert!(!failures.is_empty(), "the crash test missed the broken rule migrating the {role}");
        println!("{role}: caught in {} states, first: {}", failures.len(), failures[0]);
    }
}
