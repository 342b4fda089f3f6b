//! Changing the meta-data mirror of a volume in use (`dualfs mirror`):
//! crashes during a resync, and what remove leaves.
//!
//! A resync (`add` beside the one copy of an unmirrored volume, `replace`
//! of the missing copy of a degraded one) writes three devices (the copy
//! kept, the data device, the new copy), recorded here as
//! `migrate_crash.rs` records a migration, files written and fsync'd
//! between the copy's steps. Every cut of the recording (each write and
//! flush), with only what was flushed, everything written, or a random
//! part of what was in flight, must leave: the copy kept mounting (as a
//! user would mount after the crash: both copies, else the kept one,
//! else it with `-o degraded`) with every file fsync'd before the cut;
//! and the new copy either refused on its own or whole, with every such
//! file, and whole whenever the data device names it in sync. With the
//! rule that the new copy is named in sync only once its copy is flushed
//! broken on purpose (`Fault::MirrorSyncBeforeCopy`), some cut must fail
//! this. A failure prints its cut; `DUALFS_MIRROR_REPLAY=CUT` runs one.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex, PoisonError};

use dualfs_engine::Volume;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::faults::{self, Fault};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{AtimeMode, Creds, MirrorChange, MkfsOptions, MountOptions};
use dualfs_sim::image::{Fill, Image, OverlayDevice};
use dualfs_sim::three_devices::{Choice, Ev, Events, Files, Rec, build, push};
use dualfs_sim::workload::fixed_clock;

type Dev = Arc<dyn BlockDevice>;

const META_BLOCKS: u64 = 3072;
const DATA_BLOCKS: u64 = 8192;
/// Indices of the three devices in a recording.
const KEPT: usize = 0;
const DATA: usize = 1;
const NEW: usize = 2;

fn options() -> MountOptions {
    MountOptions { atime: AtimeMode::NoAtime, commit_interval: std::time::Duration::ZERO, ..MountOptions::default() }
}

fn bytes(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 13 + seed * 29) % 253) as u8).collect()
}

fn overlay(img: &Arc<Image>) -> Arc<OverlayDevice> {
    Arc::new(OverlayDevice::new(img.clone()))
}

fn open(copies: &[Dev], data: &Dev, degraded: bool) -> dualfs_engine::Result<Volume> {
    let a = Volume::assemble_meta(copies, data, degraded, true)?;
    let v = Volume::open(a.meta.clone(), data.clone(), options())?;
    v.attach_mirror(&a);
    Ok(v)
}

/// The volume before the resync, files written and closed: unmirrored
/// (`add`), or mirrored and mounted once degraded on its first copy, the
/// second lost (`replace`). The copy kept, the data device, the files.
fn base(degraded: bool) -> ([Arc<Image>; 2], Files) {
    let m = overlay(&Arc::new(Image::new(META_BLOCKS, Fill::Zero)));
    let d = overlay(&Arc::new(Image::new(DATA_BLOCKS, Fill::Zero)));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 4096, ..MkfsOptions::default() };
    if degraded {
        let lost = overlay(&Arc::new(Image::new(META_BLOCKS, Fill::Zero)));
        Volume::format_mirrored([m.clone(), lost], d.clone(), &opts).unwrap();
    } else {
        Volume::format(m.clone(), d.clone(), &opts).unwrap();
    }
    let (md, dd): (Dev, Dev) = (m.clone(), d.clone());
    let v = open(&[md], &dd, degraded).unwrap();
    let mut files = Vec::new();
    for i in 0..30 {
        let name = format!("base-{i}");
        let f = v.create(InodeNo::ROOT, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        let data = bytes(i, 500 + i * 5000);
        v.write(f, 0, &data).unwrap();
        files.push((name, data));
    }
    for i in 0..8 {
        v.unlink(InodeNo::ROOT, format!("base-{i}").as_bytes()).unwrap();
    }
    files.drain(..8);
    v.close().unwrap();
    ([m.freeze(), d.freeze()], files)
}

/// Records a resync of `base`, files written and fsync'd between the
/// copy's steps; the starting images and the events.
fn record(base: &[Arc<Image>; 2], degraded: bool) -> ([Arc<Image>; 3], Vec<Ev>) {
    let ev: Events = Arc::default();
    let start = [base[0].clone(), base[1].clone(), Arc::new(Image::new(META_BLOCKS, Fill::Zero))];
    let dev = |i: usize| Arc::new(Rec { dev: i, live: OverlayDevice::new(start[i].clone()), ev: ev.clone() });
    let (m, d, n): (Dev, Dev, Dev) = (dev(KEPT), dev(DATA), dev(NEW));
    let a = Volume::assemble_meta(&[m], &d, degraded, true).unwrap();
    let v = Volume::open_with_clock(a.meta.clone(), d, options(), fixed_clock()).unwrap();
    v.attach_mirror(&a);
    let mut step = 0;
    let change = if degraded { MirrorChange::Replace(None, n) } else { MirrorChange::Add(n) };
    let r = v
        .mirror_change(change, &mut |_, _| {
            step += 1;
            let name = format!("during-{step}");
            let f = v.create(InodeNo::ROOT, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
            let data = bytes(100 + step, 2000 + step * 3000);
            v.write(f, 0, &data).unwrap();
            v.fsync(f).unwrap();
            push(&ev, Ev::Synced(name, data));
        })
        .unwrap();
    assert_eq!((r.copies, v.mirror_in_use()), (2, vec![true, true]));
    let f = v.create(InodeNo::ROOT, b"after", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &bytes(7, 20_000)).unwrap();
    v.fsync(f).unwrap();
    push(&ev, Ev::Synced("after".into(), bytes(7, 20_000)));
    v.close().unwrap();
    let events = ev.lock().unwrap_or_else(PoisonError::into_inner).clone();
    (start, events)
}

/// Which promised file `v` lacks, if any.
fn lacks(v: &Volume, files: &Files) -> Option<String> {
    for (name, want) in files {
        let got = v.lookup(InodeNo::ROOT, name.as_bytes()).and_then(|a| v.read(a.ino, 0, want.len() + 1));
        match got {
            Ok(g) if g == *want => {}
            Ok(g) => return Some(format!("{name}: {} bytes, not the {} fsync'd", g.len(), want.len())),
            Err(e) => return Some(format!("{name}: {e}")),
        }
    }
    None
}

/// Opens `copies` and `data` (fresh overlays of the images); `None` when
/// refused, else which promised file it lacks.
fn try_open(copies: &[&Arc<Image>], data: &Arc<Image>, degraded: bool, files: &Files) -> Option<Option<String>> {
    let copies: Vec<Dev> = copies.iter().map(|c| overlay(c) as Dev).collect();
    let d: Dev = overlay(data);
    let v = open(&copies, &d, degraded).ok()?;
    let lack = lacks(&v, files);
    drop(v);
    Some(lack)
}

/// What is wrong with crash state `img`, if anything.
fn judge(img: &[Arc<Image>; 3], files: &Files) -> Option<String> {
    let (kept, data, new) = (&img[KEPT], &img[DATA], &img[NEW]);
    // As a user would mount after the crash.
    let tries = [(vec![kept, new], false), (vec![kept], false), (vec![kept], true)];
    match tries.iter().find_map(|(c, deg)| try_open(c, data, *deg, files)) {
        None => return Some("the copy kept does not mount".into()),
        Some(Some(lack)) => return Some(format!("the copy kept mounts without {lack}")),
        Some(None) => {}
    }
    let named_in_sync = {
        let copies: Vec<Dev> = vec![overlay(kept), overlay(new)];
        Volume::assemble_meta(&copies, &(overlay(data) as Dev), false, false).is_ok_and(|a| a.mirror.is_some())
    };
    match (try_open(&[new], data, true, files), named_in_sync) {
        (Some(Some(lack)), _) => Some(format!("the new copy mounts on its own without {lack}")),
        (None, true) => Some("the new copy is named in sync but does not mount on its own".into()),
        _ => None,
    }
}

/// Every crash state of a resync, checked; the number of states and the
/// failures.
fn explore(degraded: bool) -> (usize, Vec<String>) {
    let (images, base_files) = base(degraded);
    let (start, events) = record(&images, degraded);
    let only: Option<usize> = std::env::var("DUALFS_MIRROR_REPLAY").ok().and_then(|s| s.parse().ok());
    let cuts: Vec<usize> = match only {
        Some(c) => vec![c],
        None => (0..=events.len()).collect(),
    };
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
                    for choice in [Choice::Flushed, Choice::All, Choice::Random(cut as u64 * 7919)] {
                        states.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let img = build(&start, &events, cut, choice);
                        if let Some(why) = judge(&img, &files) {
                            let mut f = failures.lock().unwrap_or_else(PoisonError::into_inner);
                            f.push(format!(
                                "cut {cut}/{} {choice:?}: {why} (replay: DUALFS_MIRROR_REPLAY={cut})",
                                events.len()
                            ));
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
fn every_crash_during_a_mirror_add_leaves_the_new_copy_refused_or_whole() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    let (states, failures) = explore(false);
    println!("{states} crash states");
    assert!(states > 300, "the resync wrote little: {states} states");
    assert!(failures.is_empty(), "{} of {states}: {failures:#?}", failures.len());
}

#[test]
fn every_crash_during_a_replace_of_a_degraded_mirror_leaves_the_new_copy_refused_or_whole() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    let (states, failures) = explore(true);
    println!("{states} crash states");
    assert!(states > 300, "the resync wrote little: {states} states");
    assert!(failures.is_empty(), "{} of {states}: {failures:#?}", failures.len());
}

#[test]
fn a_copy_named_in_sync_before_it_is_copied_is_caught() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[Fault::MirrorSyncBeforeCopy]);
    let (states, failures) = explore(false);
    faults::set(&[]);
    assert!(!failures.is_empty(), "the crash test missed the broken rule in {states} states");
    println!("caught in {} of {states} states, first: {}", failures.len(), failures[0]);
}

/// Remove leaves the volume unmirrored on the copy kept, which mounts
/// without a mirror or `-o degraded`; the removed copy is refused on its
/// own and as the mirror.
#[test]
fn a_removed_copy_is_never_taken_again() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    let mk = || overlay(&Arc::new(Image::new(META_BLOCKS, Fill::Zero)));
    let (a, b, d) = (mk(), mk(), overlay(&Arc::new(Image::new(DATA_BLOCKS, Fill::Zero))));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 4096, ..MkfsOptions::default() };
    Volume::format_mirrored([a.clone(), b.clone()], d.clone(), &opts).unwrap();
    let (ad, bd, dd): (Dev, Dev, Dev) = (a.clone(), b.clone(), d.clone());
    let v = open(&[ad.clone(), bd.clone()], &dd, false).unwrap();
    let f = v.create(InodeNo::ROOT, b"kept", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &bytes(3, 30_000)).unwrap();
    assert!(v.mirror_change(MirrorChange::Remove(None), &mut |_, _| {}).is_err(), "no copy named");
    assert!(v.mirror_change(MirrorChange::Add(mk()), &mut |_, _| {}).is_err(), "two copies in use already");
    v.mirror_change(MirrorChange::Remove(Some(1)), &mut |_, _| {}).unwrap();
    assert_eq!(v.mirror_in_use(), vec![true]);
    assert!(!v.stats().iter().any(|(n, _)| *n == "mirror_degraded"));
    let g = v.create(InodeNo::ROOT, b"after", 0o644, Creds::ROOT).unwrap().ino;
    v.write(g, 0, &bytes(4, 10_000)).unwrap();
    assert!(v.mirror_change(MirrorChange::Remove(Some(0)), &mut |_, _| {}).is_err(), "unmirrored");
    v.close().unwrap();
    let files: Files = vec![("kept".into(), bytes(3, 30_000)), ("after".into(), bytes(4, 10_000))];
    let v = open(std::slice::from_ref(&ad), &dd, false).unwrap();
    assert_eq!(lacks(&v, &files), None);
    v.close().unwrap();
    let e = open(&[ad, bd.clone()], &dd, false).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("one meta-data device"), "the removed copy taken as the mirror: {e}");
    let e = open(&[bd], &dd, true).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("no longer counts"), "the removed copy taken on its own: {e}");
}

/// A degraded volume's copy dropped while mounted is replaced: the mirror
/// is whole again (`mirror_degraded` 0), and the new copy alone holds
/// every file.
#[test]
fn replace_repairs_a_mirror_degraded_while_mounted() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    let mk = || overlay(&Arc::new(Image::new(META_BLOCKS, Fill::Zero)));
    let (a, c, d) = (mk(), mk(), overlay(&Arc::new(Image::new(DATA_BLOCKS, Fill::Zero))));
    let b = Arc::new(Failing { dev: mk(), failing: std::sync::atomic::AtomicBool::new(false) });
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 4096, ..MkfsOptions::default() };
    Volume::format_mirrored([a.clone(), b.clone()], d.clone(), &opts).unwrap();
    let (ad, bd, cd, dd): (Dev, Dev, Dev, Dev) = (a.clone(), b.clone(), c.clone(), d.clone());
    let v = open(&[ad.clone(), bd], &dd, false).unwrap();
    let stat = |v: &Volume, n: &str| v.stats().iter().find(|(k, _)| *k == n).map(|(_, x)| *x);
    let mut files = Files::new();
    for i in 0..20 {
        if i == 10 {
            b.failing.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let name = format!("f{i}");
        let f = v.create(InodeNo::ROOT, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        v.write(f, 0, &bytes(i, 3000 + i * 1000)).unwrap();
        v.fsync(f).unwrap();
        files.push((name, bytes(i, 3000 + i * 1000)));
    }
    assert_eq!(stat(&v, "mirror_degraded"), Some(1));
    assert_eq!(v.mirror_in_use(), vec![true, false]);
    // The copy in use alone is not the one to replace.
    assert!(v.mirror_change(MirrorChange::Replace(Some(0), mk()), &mut |_, _| {}).is_err());
    v.mirror_change(MirrorChange::Replace(Some(1), cd.clone()), &mut |_, _| {}).unwrap();
    assert_eq!(stat(&v, "mirror_degraded"), Some(0));
    assert_eq!(v.mirror_in_use(), vec![true, true]);
    v.close().unwrap();
    // Both copies: in sync, no -o degraded needed.
    let v = open(&[ad, cd.clone()], &dd, false).unwrap();
    assert_eq!(stat(&v, "mirror_degraded"), Some(0));
    assert_eq!(lacks(&v, &files), None);
    v.close().unwrap();
    // Copy 1 lost: the new copy alone, degraded, holds everything.
    let v = open(std::slice::from_ref(&cd), &dd, true).unwrap();
    assert_eq!(lacks(&v, &files), None);
    drop(v);
}

/// A copy that fails every write once `failing` is set.
#[derive(Debug)]
struct Failing {
    dev: Arc<OverlayDevice>,
    failing: std::sync::atomic::AtomicBool,
}

impl BlockDevice for Failing {
    fn block_count(&self) -> u64 {
        self.dev.block_count()
    }
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.dev.read_blocks(first, buf)
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> std::io::Result<()> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::other("the device is gone"));
        }
        self.dev.write_blocks(first, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::other("the device is gone"));
        }
        self.dev.flush()
    }
}
