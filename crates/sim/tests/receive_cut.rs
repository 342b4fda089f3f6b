//! A receive cut at every record boundary, and every crash on the way.
//!
//! The increment of the structural fuzz target's source (a directory
//! moved, one removed with its files, a name taken by another type, hard
//! links, a new nested tree) is cut after each of its records and
//! received by a mirror holding its base, on the explorer's recording
//! devices; so is the full stream of that base, received by an empty
//! volume. Each cut receive is refused and leaves the mirror as it was.
//! Each crash state of its recording (the mark committed, the records
//! before the cut made durable by the rollback's first commit, the
//! rollback part done, the mark removed; cuts at flushes and writes,
//! in-flight subsets, torn blocks) must be one every tool knows:
//!
//! - fsck finds no problem, and reports a receive under way exactly when
//!   the mark is there (the namespace disagreements it explains are
//!   listed apart);
//! - repair plans nothing for the namespace (nothing goes to lost+found)
//!   and leaves the mark; what follows runs on the volume it repaired;
//! - it mounts, and shows the mirror as it was unless the receive is
//!   marked under way;
//! - receiving the whole stream then gives the new tree and its snapshot,
//!   fsck clean; and `receive_abort` (when marked) gives the old tree back,
//!   which then takes the stream.
//!
//! With the mark's rule broken on purpose (`Fault::ReceiveWithoutMark`),
//! fsck calls some state broken: the test says which.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use dualfs_engine::Volume;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::faults::{self, Fault};
use dualfs_engine::format::stream::{FRAME_CRC_LEN, FRAME_HEAD_LEN, PRELUDE_LEN, Record};
use dualfs_engine::types::{FileKind, InodeNo};
use dualfs_engine::volume::{AtimeMode, MkfsOptions, MountOptions, RECEIVING_XATTR, Touched, send};
use dualfs_sim::crash::{Choice, Recording, StateSpec};
use dualfs_sim::image::{Fill, Image, OverlayDevice};
use dualfs_sim::record::{Dev, Event, Recorder, RecordingDevice};
use dualfs_sim::stream_structure::{change, digest, populate, records_of};
use dualfs_sim::workload::fixed_clock;

const META_BLOCKS: u64 = 4096;
const DATA_BLOCKS: u64 = 16384;
/// Crash states drawn per cut (every flush cut, then writes at random).
const STATES_PER_CUT: usize = 10;

fn options() -> MountOptions {
    MountOptions { atime: AtimeMode::NoAtime, commit_interval: std::time::Duration::ZERO, ..MountOptions::default() }
}

type Pair = (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>);

fn devices(m: &Arc<Image>, d: &Arc<Image>) -> Pair {
    (Arc::new(OverlayDevice::new(m.clone())), Arc::new(OverlayDevice::new(d.clone())))
}

/// Runs `f` on a volume over `base` (made first when `mkfs`), closes it,
/// and returns the images after.
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

fn blank() -> (Arc<Image>, Arc<Image>) {
    (Arc::new(Image::new(META_BLOCKS, Fill::Zero)), Arc::new(Image::new(DATA_BLOCKS, Fill::Zero)))
}

struct Setup {
    /// The mirror holding the base snapshot.
    base: (Arc<Image>, Arc<Image>),
    increment: Vec<u8>,
    /// The mirror before the increment, and after it.
    s0: BTreeMap<String, String>,
    s1: BTreeMap<String, String>,
}

/// The increment (`full` false) or the full stream of its base (received
/// by an empty volume) as the stream to cut.
fn setup(full: bool) -> Setup {
    let mut streams = (Vec::new(), Vec::new());
    let source = evolve(blank(), true, |v| {
        populate(v);
        v.snapshot_create("one").unwrap();
        change(v);
        v.snapshot_create("two").unwrap();
    });
    let (m, d) = devices(&source.0, &source.1);
    send(m.clone(), d.clone(), None, "one", &mut streams.0).unwrap();
    send(m, d, Some("one"), "two", &mut streams.1).unwrap();
    let base = evolve(blank(), true, |v| {
        if !full {
            v.receive(&mut &streams.0[..]).unwrap();
        }
    });
    let increment = if full { streams.0 } else { streams.1 };
    let open = |(m, d): Pair| Volume::open_with_clock(m, d, options(), fixed_clock()).unwrap();
    let s0 = digest(&open(devices(&base.0, &base.1)));
    let after = open(devices(&base.0, &base.1));
    after.receive(&mut &increment[..]).unwrap();
    let s1 = digest(&after);
    Setup { base, increment, s0, s1 }
}

/// Where each record of `s` ends.
fn boundaries(s: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = PRELUDE_LEN;
    while at + FRAME_HEAD_LEN <= s.len() {
        let len = u32::from_le_bytes([s[at + 4], s[at + 5], s[at + 6], s[at + 7]]) as usize;
        at += FRAME_HEAD_LEN + len + FRAME_CRC_LEN;
        out.push(at);
    }
    out
}

fn open(pair: Pair) -> Result<Volume, String> {
    Volume::open_with_clock(pair.0, pair.1, options(), fixed_clock()).map_err(|e| format!("does not mount: {e}"))
}

fn fsck_clean(pair: Pair, what: &str) -> Result<(), String> {
    let r = dualfs_engine::check::check(pair.0, pair.1).map_err(|e| format!("{what}: fsck cannot open: {e}"))?;
    if !r.problems.is_empty() || r.receiving.is_some() {
        return Err(format!("{what}: fsck: {:?}, receiving {:?}", r.problems, r.receiving));
    }
    Ok(())
}

/// What a crash state must satisfy (see the module's comment).
fn check(s: &Setup, meta: &Arc<Image>, data: &Arc<Image>) -> Result<(), String> {
    let report = dualfs_engine::check::check(devices(meta, data).0, devices(meta, data).1)
        .map_err(|e| format!("fsck cannot open the state: {e}"))?;
    if !report.problems.is_empty() {
        return Err(format!("fsck finds problems (receiving {:?}): {:?}", report.receiving, report.problems));
    }
    let marked = report.receiving.is_some();
    let p = dualfs_engine::repair::prepare(devices(meta, data).0, devices(meta, data).1)
        .map_err(|e| format!("repair cannot open the state: {e}"))?;
    if p.receiving.is_some() != marked {
        return Err(format!("repair sees the receive as {:?}, fsck as {:?}", p.receiving, report.receiving));
    }
    if let Some(r) = p.repairs.iter().find(|r| r.action.contains("lost+found") || r.problem.contains("names inode")) {
        return Err(format!("repair would change the receive's namespace: {r}"));
    }
    if let Some(after) = &p.after
        && (!after.problems.is_empty() || after.receiving.is_some() != marked)
    {
        return Err(format!("after repair: {:?}, receiving {:?}", after.problems, after.receiving));
    }
    // What follows runs on the volume as repair leaves it (`fsck -y`):
    // repair must not have broken the receive for finishing or abandoning.
    let repaired = || -> Result<Pair, String> {
        let pair = devices(meta, data);
        p.write(&*pair.0, &*pair.1).map_err(|e| format!("writing the repair: {e}"))?;
        Ok(pair)
    };
    let vol = open(repaired()?)?;
    if vol.getxattr(InodeNo::ROOT, RECEIVING_XATTR).is_ok() != marked {
        return Err("the mount and fsck disagree about the mark".into());
    }
    if !marked && digest(&vol) != s.s0 {
        return Err("not marked as a receive under way, and not the mirror as it was".into());
    }
    drop(vol);
    // Finished by the whole stream.
    let pair = repaired()?;
    let vol = open(pair.clone())?;
    let got = vol.receive(&mut &s.increment[..]).map_err(|e| format!("receiving the stream again: {e}"))?;
    if got.resumed != marked {
        return Err(format!("the receive says resumed {}, the state was marked {marked}", got.resumed));
    }
    if digest(&vol) != s.s1 {
        return Err("after the receive, the mirror is not the new tree".into());
    }
    vol.close().map_err(|e| e.to_string())?;
    fsck_clean(pair, "after finishing")?;
    // Or abandoned.
    if marked {
        let pair = repaired()?;
        let vol = open(pair.clone())?;
        vol.receive_abort(&mut Touched::default()).map_err(|e| format!("abort: {e}"))?;
        if digest(&vol) != s.s0 {
            return Err("after the abort, the mirror is not as it was".into());
        }
        vol.receive(&mut &s.increment[..]).map_err(|e| format!("receiving after the abort: {e}"))?;
        if digest(&vol) != s.s1 {
            return Err("after the abort and the receive, the mirror is not the new tree".into());
        }
        vol.close().map_err(|e| e.to_string())?;
        fsck_clean(pair, "after aborting")?;
    }
    Ok(())
}

/// The stream cut after record `k`, received on the recording devices:
/// what they saw. What the receiving process got wrong goes to `failures`.
fn receive_cut(s: &Setup, k: usize, failures: &mut Vec<String>) -> Recording {
    let end = boundaries(&s.increment)[k];
    let rec = Arc::new(Recorder::default());
    let m = Arc::new(RecordingDevice::new(Dev::Meta, s.base.0.clone(), rec.clone()));
    let d = Arc::new(RecordingDevice::new(Dev::Data, s.base.1.clone(), rec.clone()));
    let vol = Volume::open_with_clock(m, d, options(), fixed_clock()).unwrap();
    match vol.receive(&mut &s.increment[..end]) {
        Ok(_) => failures.push(format!("cut after record {k}: received")),
        Err(e) if !e.to_string().contains("cut short") => failures.push(format!("cut after record {k}: {e}")),
        Err(_) => {}
    }
    if digest(&vol) != s.s0 || vol.getxattr(InodeNo::ROOT, RECEIVING_XATTR).is_ok() {
        failures.push(format!("cut after record {k}: the mirror is not as it was"));
    }
    vol.close().unwrap();
    Recording { meta: s.base.0.clone(), data: s.base.1.clone(), mirror: None, events: rec.events() }
}

/// Each cut, received on the recording devices, then its crash states
/// checked; the failures.
fn explore(s: &Setup) -> Vec<String> {
    let mut failures = Vec::new();
    // After the header, after each record, before the end record.
    for k in 0..boundaries(&s.increment).len() - 1 {
        let recording = receive_cut(s, k, &mut failures);
        for spec in recording.states(0xC07 ^ k as u64, STATES_PER_CUT) {
            let img = recording.build(&spec);
            if let Err(why) = check(s, &img.meta, &img.data) {
                failures.push(format!("cut after record {k}, {spec}: {why}"));
            }
        }
    }
    failures
}

/// The fault switch is process-wide: the tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn a_receive_cut_at_every_record_boundary_leaves_states_fsck_repair_and_mount_know() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    let s = setup(false);
    assert!(boundaries(&s.increment).len() > 20, "a stream with records to cut between");
    let failures = explore(&s);
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn a_full_stream_cut_at_every_record_boundary_leaves_states_fsck_repair_and_mount_know() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    let s = setup(true);
    assert!(boundaries(&s.increment).len() > 20, "a stream with records to cut between");
    let failures = explore(&s);
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A cut between a symlink's inode record and its target's, with every
/// flush of its recording as a crash state (what was in flight lost, and
/// landed): the rollback's first commit comes between the two records,
/// and a symlink it made durable without its target is a state fsck calls
/// broken. The states drawn above reach that commit's flush only by chance.
#[test]
fn a_cut_between_a_symlink_and_its_target_leaves_no_symlink_without_one() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    let s = setup(true);
    let records = records_of(&s.increment);
    let k = records
        .windows(2)
        .position(|w| matches!(w, [Record::Inode(a), Record::Symlink { .. }] if a.kind() == Some(FileKind::Symlink)))
        .expect("the stream makes a symlink");
    let mut failures = Vec::new();
    let recording = receive_cut(&s, k, &mut failures);
    let flushes: Vec<usize> =
        recording.events.iter().enumerate().filter(|(_, e)| matches!(e, Event::Flush(_))).map(|(i, _)| i + 1).collect();
    assert!(flushes.len() > 2, "a rollback that commits");
    for cut in flushes {
        for choice in [Choice::Flushed, Choice::All] {
            let spec = StateSpec { cut, choice };
            let img = recording.build(&spec);
            if let Err(why) = check(&s, &img.meta, &img.data) {
                failures.push(format!("cut after record {k}, {spec}: {why}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn without_the_mark_fsck_calls_a_cut_receive_broken() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    faults::set(&[]);
    let s = setup(false);
    faults::set(&[Fault::ReceiveWithoutMark]);
    let failures = explore(&s);
    faults::set(&[]);
    assert!(!failures.is_empty(), "the explorer missed the broken rule");
    println!("caught: {}", failures[0]);
}
