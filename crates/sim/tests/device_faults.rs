//! A failing device (`dualfs_sim::faulty`): random operations on a volume
//! whose devices fail on a seeded schedule.
//!
//! - A failed write or flush turns the volume read-only: the operation
//!   that met it gets EIO, every later change EROFS, the reason is kept.
//! - An fsync that could not be made durable never reports success, then
//!   or later (a failed flush drops the cached writes, as Linux does).
//! - A read error fails that read and nothing else.
//! - After a "power failure", every file acknowledged by fsync is there
//!   with its bytes, and fsck finds the volume clean.
//! - A lost or misdirected meta-data write is found by the blocks'
//!   self-identification: reported by mount or fsck, or harmless. The one
//!   exception, counted and printed: a lost write in the last commit
//!   group before the end, which nothing later on the disk vouches for.
//!
//! `DUALFS_FAULT_SCHEDULES` sets the number of schedules (default 200); a
//! failure prints `DUALFS_FAULT_SEED=...` to replay its schedule.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::check::check;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::{InodeNo, Timestamp};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, SetAttr};
use dualfs_engine::{Error, Volume};
use dualfs_sim::faulty::{FaultKind, FaultRates, FaultyDevice, Injected};
use dualfs_sim::rng::Rng;

const META_BLOCKS: u64 = 8192;
const DATA_BLOCKS: u64 = 16384;
const OPS: usize = 160;

#[derive(Default, Debug)]
struct Tally {
    schedules: u64,
    ops: u64,
    faults: BTreeMap<&'static str, u64>,
    turned_read_only: u64,
    reads_failed_alone: u64,
    acknowledged_lost: u64,
    silent_reported: u64,
    silent_harmless: u64,
    silent_in_last_group: u64,
}

fn clock() -> dualfs_engine::volume::Clock {
    Arc::new(|| Timestamp::new(1_700_000_000, 0))
}

fn options() -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), ..MountOptions::default() }
}

fn contents(rng: &mut Rng, n: usize) -> Vec<u8> {
    let b = rng.next_u64() as u8;
    (0..n).map(|i| b.wrapping_add(i as u8)).collect()
}

fn kind_name(k: FaultKind) -> &'static str {
    match k {
        FaultKind::ReadError => "read EIO",
        FaultKind::WriteError => "write EIO",
        FaultKind::FlushError => "flush EIO",
        FaultKind::LostWrite => "lost write",
        FaultKind::Misdirected => "misdirected write",
    }
}

/// Runs one schedule; returns what it saw or what broke.
fn schedule(seed: u64, tally: &mut Tally) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let silent = seed % 2 == 1;
    let (meta_disk, data_disk) = (Arc::new(MemoryDevice::new(META_BLOCKS)), Arc::new(MemoryDevice::new(DATA_BLOCKS)));
    let mkfs =
        MkfsOptions { segment_blocks: 128, group_blocks: 8192, identity_seed: Some(seed), ..MkfsOptions::default() };
    Volume::format(meta_disk.clone(), data_disk.clone(), &mkfs).map_err(|e| e.to_string())?;
    let eio = FaultRates { read_error: 8000, write_error: 4000, flush_error: 6000, ..FaultRates::default() };
    let meta_rates = if silent { FaultRates { lost_write: 8000, misdirected: 6000, ..eio } } else { eio };
    let meta = Arc::new(FaultyDevice::new(meta_disk.clone(), seed ^ 0x4d45_5441, meta_rates));
    let data = Arc::new(FaultyDevice::new(data_disk.clone(), seed ^ 0x4441_5441, eio));
    let vol = Volume::open_with_clock(meta.clone(), data.clone(), options(), clock()).map_err(|e| e.to_string())?;
    meta.arm();
    data.arm();

    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut durable: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    // Names changed since the last durable point: they may show either way.
    let mut changed: BTreeSet<String> = BTreeSet::new();
    let mut durable_flushes = 0u64;
    let mut failed = false;
    for step in 0..OPS {
        tally.ops += 1;
        let faults_before = meta.injected().len() + data.injected().len();
        let pick = rng.below(10);
        let name = format!("f{}", rng.below(24));
        let (what, res): (&str, Result<(), Error>) = match pick {
            0..=3 => {
                let len = [300, 5000, 20_000][rng.below(3) as usize];
                let bytes = contents(&mut rng, len);
                let r = vol
                    .lookup(InodeNo::ROOT, name.as_bytes())
                    .map(|a| a.ino)
                    .or_else(|_| vol.create(InodeNo::ROOT, name.as_bytes(), 0o644, Creds::ROOT).map(|a| a.ino))
                    .and_then(|ino| {
                        vol.setattr(ino, &SetAttr { size: Some(0), ..SetAttr::default() })?;
                        vol.write(ino, 0, &bytes).map(|_| ())
                    });
                if r.is_ok() {
                    model.insert(name.clone(), bytes);
                    changed.insert(name.clone());
                }
                ("write", r)
            }
            4 => {
                let r = vol.unlink(InodeNo::ROOT, name.as_bytes());
                if r.is_ok() || matches!(r, Err(Error::NotFound)) {
                    model.remove(&name);
                    changed.insert(name.clone());
                }
                ("unlink", r.or_else(|e| if matches!(e, Error::NotFound) { Ok(()) } else { Err(e) }))
            }
            5..=7 => {
                let r = vol.fsync(InodeNo::ROOT);
                if r.is_ok() {
                    if failed {
                        return Err(format!("step {step}: fsync succeeded on a volume that had failed"));
                    }
                    durable = model.clone();
                    changed.clear();
                    durable_flushes = meta.flushes();
                }
                ("fsync", r)
            }
            _ => {
                let r = match model.get(&name) {
                    None => Ok(()),
                    Some(want) => vol
                        .lookup(InodeNo::ROOT, name.as_bytes())
                        .and_then(|a| vol.read(a.ino, 0, want.len() + 10))
                        .and_then(
                            |got| {
                                if got == *want { Ok(()) } else { Err(Error::Invalid("read back other bytes")) }
                            },
                        ),
                };
                if matches!(r, Err(Error::Invalid(_))) {
                    return Err(format!("step {step}: {name} read back other bytes than written"));
                }
                ("read", r)
            }
        };
        let new_faults: Vec<Injected> =
            meta.injected().into_iter().chain(data.injected()).skip(faults_before).collect();
        match res {
            Ok(()) => {}
            Err(Error::ReadOnly(_)) if failed => {}
            Err(Error::ReadOnly(why)) => return Err(format!("step {step}: {what}: EROFS before any failure: {why}")),
            Err(e @ (Error::Io { .. } | Error::Corrupt { .. })) => {
                let read_only = vol.failure().is_some();
                // A read error before anything changed fails that call alone.
                let reads_only = !new_faults.is_empty() && new_faults.iter().all(|f| f.kind == FaultKind::ReadError);
                if (what == "read" || reads_only) && !read_only {
                    tally.reads_failed_alone += 1;
                } else if !read_only {
                    return Err(format!("step {step}: {what} failed ({e}) but the volume did not turn read-only"));
                }
                if !failed && read_only {
                    failed = true;
                    tally.turned_read_only += 1;
                }
            }
            Err(e) => return Err(format!("step {step}: {what}: unexpected error {e} (faults {new_faults:?})")),
        }
        if failed {
            // Every change is refused from now on, and the reason is kept.
            if vol.failure().is_none() {
                return Err(format!("step {step}: the failure's reason was lost"));
            }
            match vol.create(InodeNo::ROOT, b"refused", 0o644, Creds::ROOT) {
                Err(Error::ReadOnly(_)) => {}
                other => return Err(format!("step {step}: a change after the failure gave {other:?}")),
            }
        }
    }
    for f in meta.injected() {
        *tally.faults.entry(kind_name(f.kind)).or_default() += 1;
    }
    for f in data.injected() {
        *tally.faults.entry(kind_name(f.kind)).or_default() += 1;
    }
    // Power failure: whatever was not flushed is gone.
    drop(vol);
    meta.crash();
    data.crash();
    let silent_faults: Vec<Injected> = meta.injected().into_iter().filter(|f| f.kind.is_silent()).collect();

    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (meta_disk, data_disk);
    let opened = Volume::open_with_clock(m.clone(), d.clone(), MountOptions { read_only: true, ..options() }, clock());
    let fsck = check(m.clone(), d.clone());
    if std::env::var("DUALFS_FAULT_VERBOSE").is_ok() {
        println!("faults: {:?} {:?}", meta.injected(), data.injected());
        match &opened {
            Ok(v) => println!("open: {:?}", v.open_report()),
            Err(e) => println!("open: {e}"),
        }
        if let Ok(r) = &fsck {
            println!("fsck: {:?}", r.problems);
        }
    }
    let reported = match (&opened, &fsck) {
        (Err(_), _) | (_, Err(_)) => true,
        (Ok(v), Ok(r)) => v.open_report().is_damaged() || !r.is_clean(),
    };
    let mut missing = Vec::new();
    if let Ok(v) = &opened {
        for (name, want) in &durable {
            if changed.contains(name) {
                continue;
            }
            let got = v.lookup(InodeNo::ROOT, name.as_bytes()).and_then(|a| v.read(a.ino, 0, want.len() + 10));
            if got.as_ref().ok() != Some(want) {
                missing.push(name.clone());
            }
        }
    }
    if silent_faults.is_empty() {
        if reported {
            let why = match (&opened, &fsck) {
                (Err(e), _) => format!("mount: {e}"),
                (_, Err(e)) => format!("fsck: {e}"),
                (Ok(v), Ok(r)) => format!("{:?} {:?}", v.open_report().damage, r.problems),
            };
            return Err(format!("EIO alone left a damaged volume: {why}"));
        }
        if !missing.is_empty() {
            tally.acknowledged_lost += missing.len() as u64;
            return Err(format!("acknowledged files lost: {missing:?}"));
        }
        return Ok(());
    }
    if reported {
        tally.silent_reported += 1;
    } else if missing.is_empty() {
        tally.silent_harmless += 1;
    } else if lost_tail(&silent_faults, durable_flushes) {
        tally.silent_in_last_group += 1;
    } else {
        tally.acknowledged_lost += missing.len() as u64;
        return Err(format!("silent damage nobody reported: {missing:?} lost after {silent_faults:?}"));
    }
    Ok(())
}

/// Whether the silent faults took the log's whole tail: a lost write in
/// every commit group from the first one hit to the last durable one, so
/// that no block written later is on the disk to vouch for them (two
/// groups in a row lost, then the volume stopped by an EIO, is one such
/// tail). Nothing can tell such a tail from one never written.
fn lost_tail(silent: &[Injected], durable_flushes: u64) -> bool {
    let Some(first) = silent.iter().map(|f| f.flushes_before).min() else { return false };
    (first..durable_flushes).all(|group| silent.iter().any(|f| f.flushes_before == group))
}

#[test]
fn a_failing_device_never_loses_acknowledged_data_silently() {
    let count: u64 = std::env::var("DUALFS_FAULT_SCHEDULES").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let seeds: Vec<u64> = match std::env::var("DUALFS_FAULT_SEED") {
        Ok(s) => vec![u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()],
        Err(_) => {
            let base = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
            (0..count).map(|i| dualfs_sim::rng::mix(base ^ i)).collect()
        }
    };
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    for seed in seeds {
        tally.schedules += 1;
        if let Err(e) = schedule(seed, &mut tally) {
            failures.push(format!("{e}\n  replay with DUALFS_FAULT_SEED={seed:#x}"));
        }
    }
    println!("device faults: {tally:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(tally.turned_read_only > 0, "no schedule met a write or flush fault: {tally:?}");
    assert!(tally.reads_failed_alone > 0 || !tally.faults.contains_key("read EIO"), "{tally:?}");
}
