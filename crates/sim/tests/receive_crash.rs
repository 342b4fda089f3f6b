//! Crashes during a receive: every crash state of an incremental receive
//! (recorded on the explorer's recording devices: cuts at flushes and
//! writes, random subsets of what was in flight, torn blocks) mounts, and
//! is the base tree, or is marked as a receive under way, or is the new
//! tree; receiving the same stream again then gives the new tree exactly,
//! with its snapshot, and fsck finds nothing (DESIGN.md, "Send and
//! receive"). With the mark's rule broken on purpose
//! (`Fault::ReceiveWithoutMark`), some crash state fails this.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use dualfs_engine::Volume;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::faults::{self, Fault};
use dualfs_engine::types::{FileKind, InodeNo};
use dualfs_engine::volume::{
    AtimeMode, Creds, MkfsOptions, MountOptions, RECEIVED_XATTR, RECEIVING_XATTR, RenameFlags, SetAttr, SetMode, send,
};
use dualfs_sim::crash::Recording;
use dualfs_sim::image::{Fill, Image, OverlayDevice};
use dualfs_sim::record::{Dev, Recorder, RecordingDevice};
use dualfs_sim::workload::fixed_clock;

const META_BLOCKS: u64 = 4096;
const DATA_BLOCKS: u64 = 16384;

fn options() -> MountOptions {
    MountOptions { atime: AtimeMode::NoAtime, commit_interval: std::time::Duration::ZERO, ..MountOptions::default() }
}

fn devices(m: &Arc<Image>, d: &Arc<Image>) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    (Arc::new(OverlayDevice::new(m.clone())), Arc::new(OverlayDevice::new(d.clone())))
}

fn blank() -> (Arc<Image>, Arc<Image>) {
    (Arc::new(Image::new(META_BLOCKS, Fill::Zero)), Arc::new(Image::new(DATA_BLOCKS, Fill::Zero)))
}

/// Runs `f` on a volume over `base`, closes it, and returns the images after.
fn evolve(base: (Arc<Image>, Arc<Image>), mkfs: bool, f: impl FnOnce(&Volume)) -> (Arc<Image>, Arc<Image>) {
    let rec = Arc::new(Recorder::default());
    let m = Arc::new(RecordingDevice::new(Dev::Meta, base.0, rec.clone()));
    let d = Arc::new(RecordingDevice::new(Dev::Data, base.1, rec));
    if mkfs {
        let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
        Volume::format(m.clone(), d.clone(), &opts).unwrap();
    }
    let vol = Volume::open_with_clock(m.clone(), d.clone(), options(), fixed_clock()).unwrap();
    f(&vol);
    vol.close().unwrap();
    (m.freeze(), d.freeze())
}

/// What the tree shows, by path (ctime and atime aside: a receive sets them
/// exactly, but the source's were stamped by a fixed clock anyway).
fn tree(vol: &Volume) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![(String::new(), InodeNo::ROOT)];
    while let Some((path, ino)) = todo.pop() {
        // Mid-receive, an entry may name an inode not made yet.
        let Ok(a) = vol.getattr(ino) else {
            out.insert(path, format!("{} missing", ino.0));
            continue;
        };
        let content = match a.kind {
            FileKind::Regular => format!("{:?}", vol.read(ino, 0, a.size as usize).unwrap()),
            FileKind::Symlink => format!("{:?}", vol.readlink(ino).unwrap()),
            FileKind::Directory => {
                let mut names = Vec::new();
                vol.readdir(ino, 0, &mut |l| {
                    if l.name != b"." && l.name != b".." {
                        names.push((l.name, l.ino));
                    }
                    true
                })
                .unwrap();
                names.sort();
                for (n, child) in &names {
                    todo.push((format!("{path}/{}", String::from_utf8_lossy(n)), *child));
                }
                format!(
                    "{:?}",
                    names.iter().map(|(n, i)| (String::from_utf8_lossy(n).into_owned(), i.0)).collect::<Vec<_>>()
                )
            }
            _ => String::new(),
        };
        let mut x: Vec<(Vec<u8>, Vec<u8>)> = vol
            .listxattr(ino)
            .unwrap()
            .into_iter()
            .filter(|n| ino != InodeNo::ROOT || (n != RECEIVED_XATTR && n != RECEIVING_XATTR))
            .map(|n| {
                let v = vol.getxattr(ino, &n).unwrap();
                (n, v)
            })
            .collect();
        x.sort();
        let line = format!(
            "{} {} {:o} {:?} {} {} {} {} {:?} {content} {x:?}",
            a.ino.0, a.generation, a.perm, a.kind, a.uid, a.nlink, a.size, a.rdev, a.mtime
        );
        out.insert(path, line);
    }
    out
}

struct Setup {
    /// The mirror holding snapshot s0, before the increment.
    base: (Arc<Image>, Arc<Image>),
    /// The increment s0 -> s1.
    increment: Vec<u8>,
    /// The trees of s0 and s1.
    s0: BTreeMap<String, String>,
    s1: BTreeMap<String, String>,
}

fn setup() -> Setup {
    let mut streams = (Vec::new(), Vec::new());
    let source = evolve(blank(), true, |v| {
        let r = InodeNo::ROOT;
        let d = v.mkdir(r, b"d", 0o755, Creds::ROOT).unwrap().ino;
        for i in 0..40u32 {
            let f = v.create(d, format!("file-{i}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
            v.write(f, 0, &vec![i as u8; 300 + i as usize * 700]).unwrap();
        }
        let big = v.create(r, b"big", 0o600, Creds::ROOT).unwrap().ino;
        v.write(big, 0, &[1u8; 200_000]).unwrap();
        v.symlink(r, b"link", b"d/file-3", Creds::ROOT).unwrap();
        v.setxattr(big, b"user.k", b"v", SetMode::Any).unwrap();
        v.snapshot_create("s0").unwrap();
        for i in 0..20u32 {
            v.unlink(d, format!("file-{i}").as_bytes()).unwrap();
        }
        v.sync().unwrap();
        // Enough records that the receive commits in the middle.
        let e = v.mkdir(r, b"e", 0o700, Creds::ROOT).unwrap().ino;
        for i in 0..400u32 {
            let f = v.create(e, format!("new-{i}").as_bytes(), 0o640, Creds::ROOT).unwrap().ino;
            v.write(f, 0, &vec![i as u8; 100 + (i as usize % 7) * 1000]).unwrap();
        }
        v.write(big, 50_000, &[2u8; 60_000]).unwrap();
        v.setattr(big, &SetAttr { size: Some(150_000), ..SetAttr::default() }).unwrap();
        v.rename(d, b"file-30", e, b"moved", RenameFlags::default()).unwrap();
        v.removexattr(big, b"user.k").unwrap();
        v.snapshot_create("s1").unwrap();
    });
    let (m, d) = devices(&source.0, &source.1);
    send(m.clone(), d.clone(), None, "s0", &mut streams.0).unwrap();
    let r = send(m.clone(), d.clone(), Some("s0"), "s1", &mut streams.1).unwrap();
    assert!(r.counts.records > 1024, "the receive commits in the middle: {r:?}");
    let snap = |name: &str| tree(&Volume::open_snapshot(m.clone(), d.clone(), name, options()).unwrap());
    let (s0, s1) = (snap("s0"), snap("s1"));
    let base = evolve(blank(), true, |v| {
        v.receive(&mut &streams.0[..]).unwrap();
    });
    Setup { base, increment: streams.1, s0, s1 }
}

/// What a crash state must satisfy: it mounts; it is s0, or marked as a
/// receive under way, or s1 (with its snapshot or without); receiving the
/// increment again (unless done) gives s1 and its snapshot; fsck is clean.
fn check(s: &Setup, meta: &Arc<Image>, data: &Arc<Image>) -> Result<(), String> {
    let (m, d) = devices(meta, data);
    let vol = Volume::open_with_clock(m.clone(), d.clone(), options(), fixed_clock())
        .map_err(|e| format!("the crash state does not mount: {e}"))?;
    let pending = vol.getxattr(InodeNo::ROOT, RECEIVING_XATTR).is_ok();
    let done = vol.snapshot_list().iter().any(|x| x.name == "s1");
    if !done {
        if !pending && ![&s.s0, &s.s1].contains(&&tree(&vol)) {
            return Err("neither the base tree nor the new one, and not marked as a receive under way".into());
        }
        vol.receive(&mut &s.increment[..]).map_err(|e| format!("receiving the stream again: {e}"))?;
    }
    if tree(&vol) != s.s1 {
        return Err("after the receive, the tree is not the source's".into());
    }
    vol.close().map_err(|e| e.to_string())?;
    let found = dualfs_engine::check::check(m.clone(), d.clone()).map_err(|e| e.to_string())?;
    if !found.problems.is_empty() {
        return Err(format!("fsck: {:?}", found.problems));
    }
    let snap = Volume::open_snapshot(m, d, "s1", options()).map_err(|e| e.to_string())?;
    if tree(&snap) != s.s1 {
        return Err("snapshot s1 is not the source's s1".into());
    }
    Ok(())
}

/// Every crash state of the recorded receive, checked; the failures.
fn explore(s: &Setup, budget: usize) -> Vec<String> {
    let rec = Arc::new(Recorder::default());
    let m = Arc::new(RecordingDevice::new(Dev::Meta, s.base.0.clone(), rec.clone()));
    let d = Arc::new(RecordingDevice::new(Dev::Data, s.base.1.clone(), rec.clone()));
    let vol = Volume::open_with_clock(m, d, options(), fixed_clock()).unwrap();
    vol.receive(&mut &s.increment[..]).unwrap();
    vol.close().unwrap();
    let recording = Recording { meta: s.base.0.clone(), data: s.base.1.clone(), mirror: None, events: rec.events() };
    let mut failures = Vec::new();
    for spec in recording.states(0x5e4d, budget) {
        let img = recording.build(&spec);
        if let Err(why) = check(s, &img.meta, &img.data) {
            failures.push(format!("{spec}: {why}"));
        }
    }
    failures
}

/// The fault switch is process-wide: the tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn every_crash_during_a_receive_is_finished_by_receiving_again() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    let s = setup();
    let failures = explore(&s, 120);
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn without_the_mark_a_crash_leaves_a_tree_nobody_can_finish() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    let s = setup();
    faults::set(&[Fault::ReceiveWithoutMark]);
    let failures = explore(&s, 120);
    faults::set(&[]);
    assert!(!failures.is_empty(), "the explorer missed the broken rule");
    println!("caught: {}", failures[0]);
}
