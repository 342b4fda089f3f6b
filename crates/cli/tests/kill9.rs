//! A real process killed at a random moment: `dualfs mount` serves a
//! workload that writes files, fsyncs them, renames them into place and
//! fsyncs the directory, recording which fsyncs returned; the daemon gets
//! SIGKILL; the volume is checked with fsck, mounted again, and must hold
//! every file whose fsync returned, with its contents, and every rename
//! whole (old name or new, never both nor neither). Files whose fsync never
//! returned may be missing or short, but hold no byte they were not given.
//! A file unlinked while open is written to throughout: after the kill,
//! recovery must free it (the orphan list) and fsck find nothing leaked.
//!
//! Two more threads exercise the untangled fsync: one rewrites random
//! blocks of a database-like file in place, each followed by fsync or
//! fdatasync in turn (every block must hold its last synced version or a
//! later one), while another writes a large file that is never synced
//! (dirty data an fsync must leave alone, and which may be lost).
//!
//! `DUALFS_KILL9_ROUNDS` sets the number of rounds (default 20);
//! `DUALFS_KILL9_SEED` replays one round's seed, as a failure prints it.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Rng, TestVolume, sh};

/// The bytes file `i` of a round is given.
fn contents(seed: u64, i: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let len = 1 + rng.below(300_000) as usize;
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    // No zero bytes: a zero in a file whose fsync did not return means a hole
    // (allowed), never data.
    for b in &mut v {
        *b |= 1;
    }
    v
}

/// What the workload got to before the kill.
#[derive(Default, Debug)]
struct Progress {
    /// Files whose fsync returned (by number), and whether the rename into
    /// place was issued and whether the directory fsync after it returned.
    synced: BTreeMap<u64, (bool, bool)>,
    /// Files begun.
    begun: u64,
}

/// Writes `tmp-i` in pieces, fsyncs it, renames it to `f-i`, and every
/// third file fsyncs the directory; until an error (the daemon died).
fn workload(dir: &Path, seed: u64, progress: &Mutex<Progress>) {
    // A file unlinked while open, written to until the end: an orphan that
    // recovery must free (fsck after the kill checks that nothing leaks).
    let held = (|| -> std::io::Result<File> {
        let f = File::options().read(true).write(true).create_new(true).open(dir.join("held"))?;
        std::fs::remove_file(dir.join("held"))?;
        Ok(f)
    })();
    for i in 0.. {
        let data = contents(seed, i);
        if let Ok(mut h) = held.as_ref() {
            let _ = h.write_all(&data[..data.len().min(4096)]);
        }
        progress.lock().unwrap().begun = i + 1;
        let tmp = dir.join(format!("tmp-{i}"));
        let run = || -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            for piece in data.chunks(40_000) {
                f.write_all(piece)?;
            }
            f.sync_all()?;
            progress.lock().unwrap().synced.insert(i, (false, false));
            std::fs::rename(&tmp, dir.join(format!("f-{i}")))?;
            progress.lock().unwrap().synced.insert(i, (true, false));
            if i % 3 == 2 {
                File::open(dir)?.sync_all()?;
                let mut p = progress.lock().unwrap();
                for (_, (renamed, durable)) in p.synced.iter_mut() {
                    *durable |= *renamed;
                }
            }
            Ok(())
        };
        if run().is_err() {
            return;
        }
    }
}

/// Blocks of the database-like file.
const DB_BLOCKS: usize = 64;

/// Version `v` of block `b` of the database file (no zero bytes).
fn db_block(seed: u64, b: usize, v: u32) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ ((b as u64) << 32 | u64::from(v)).wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let mut out = vec![0u8; 4096];
    rng.fill(&mut out);
    for x in &mut out {
        *x |= 1;
    }
    out
}

/// What the database writer got to: per block, the version whose fsync or
/// fdatasync returned, and the newest version written.
#[derive(Default, Debug)]
struct DbProgress {
    /// The first version of every block was synced.
    ready: bool,
    synced: Vec<u32>,
    written: Vec<u32>,
    syncs: u64,
}

/// Fills the database file, syncs it, then rewrites random blocks in
/// place, syncing after each (fsync and fdatasync in turn).
fn db_workload(dir: &Path, seed: u64, p: &Mutex<DbProgress>) {
    use std::io::{Seek, SeekFrom};
    use std::os::unix::fs::FileExt;
    let run = || -> std::io::Result<()> {
        let mut f = File::options().read(true).write(true).create_new(true).open(dir.join("db"))?;
        for b in 0..DB_BLOCKS {
            f.write_all(&db_block(seed, b, 0))?;
        }
        f.sync_all()?;
        {
            let mut p = p.lock().unwrap();
            p.ready = true;
            p.synced = vec![0; DB_BLOCKS];
            p.written = vec![0; DB_BLOCKS];
        }
        f.seek(SeekFrom::Start(0))?;
        let mut rng = Rng::new(seed ^ 0xDB);
        for n in 1u64.. {
            let b = rng.below(DB_BLOCKS as u64) as usize;
            let v = p.lock().unwrap().written[b] + 1;
            p.lock().unwrap().written[b] = v;
            f.write_all_at(&db_block(seed, b, v), (b * 4096) as u64)?;
            if n % 2 == 0 {
                f.sync_data()?
            } else {
                f.sync_all()?
            }
            let mut p = p.lock().unwrap();
            p.synced[b] = v;
            p.syncs += 1;
        }
        Ok(())
    };
    let _ = run();
}

/// A large file written in pieces and never synced.
fn bulk_workload(dir: &Path) {
    let run = || -> std::io::Result<()> {
        let mut f = File::create(dir.join("bulk"))?;
        let piece = vec![0xB5u8; 1 << 20];
        for _ in 0..48 {
            f.write_all(&piece)?;
        }
        Ok(())
    };
    let _ = run();
}

/// Checks the database file and the never-synced one.
fn check_db(dir: &Path, seed: u64, p: &DbProgress) -> Result<(), String> {
    if let Ok(bulk) = std::fs::read(dir.join("bulk"))
        && let Some(at) = bulk.iter().position(|&x| x != 0 && x != 0xB5)
    {
        return Err(format!("bulk holds a byte at {at} it was never given"));
    }
    if !p.ready {
        return Ok(());
    }
    let db = std::fs::read(dir.join("db")).map_err(|e| format!("db was synced, now: {e}"))?;
    if db.len() != DB_BLOCKS * 4096 {
        return Err(format!("db has {} bytes, {} were synced", db.len(), DB_BLOCKS * 4096));
    }
    for b in 0..DB_BLOCKS {
        let got = &db[b * 4096..(b + 1) * 4096];
        if !(p.synced[b]..=p.written[b]).any(|v| got == db_block(seed, b, v).as_slice()) {
            return Err(format!(
                "db block {b} holds none of versions {}..={} (version {} was synced)",
                p.synced[b], p.written[b], p.synced[b]
            ));
        }
    }
    Ok(())
}

/// Checks the remounted directory against what the workload recorded.
fn check(dir: &Path, seed: u64, p: &Progress) -> Result<(), String> {
    if dir.join("held").exists() {
        return Err("the file unlinked while open came back".into());
    }
    for i in 0..p.begun {
        let want = contents(seed, i);
        let tmp = std::fs::read(dir.join(format!("tmp-{i}"))).ok();
        let fin = std::fs::read(dir.join(format!("f-{i}"))).ok();
        match p.synced.get(&i) {
            Some(&(renamed, durable)) => {
                let got = match (&tmp, &fin) {
                    (Some(_), Some(_)) => return Err(format!("file {i}: both tmp-{i} and f-{i} exist")),
                    (None, None) => return Err(format!("file {i} was fsync'd, yet neither tmp-{i} nor f-{i} exists")),
                    (Some(t), None) if durable => {
                        return Err(format!(
                            "file {i}: its rename was made durable, yet tmp-{i} ({} bytes) is back",
                            t.len()
                        ));
                    }
                    (Some(t), None) => t,
                    (None, Some(f)) if renamed => f,
                    (None, Some(_)) => return Err(format!("file {i}: f-{i} exists but the rename was never issued")),
                };
                if *got != want {
                    return Err(format!(
                        "file {i} was fsync'd with {} bytes, now holds {} other bytes",
                        want.len(),
                        got.len()
                    ));
                }
            }
            None => {
                if fin.is_some() {
                    return Err(format!("f-{i} exists but tmp-{i} was never fsync'd nor renamed"));
                }
                if let Some(t) = tmp {
                    if t.len() > want.len() {
                        return Err(format!(
                            "tmp-{i} holds {} bytes, more than the {} it was given",
                            t.len(),
                            want.len()
                        ));
                    }
                    if let Some(at) = t.iter().zip(&want).position(|(g, w)| *g != 0 && g != w) {
                        return Err(format!("tmp-{i} holds a byte at {at} it was never given"));
                    }
                }
            }
        }
    }
    Ok(())
}

fn round(seed: u64) {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    let mut rng = Rng::new(seed);
    let commit = ["commit=1", "commit=5", "commit=3600"][rng.below(3) as usize];
    let mut child = v.spawn_mount(&["-o", commit]);
    let dir = v.path("d");
    std::fs::create_dir(&dir).unwrap();
    let progress = Arc::new(Mutex::new(Progress::default()));
    let worker = {
        let (dir, progress) = (dir.clone(), progress.clone());
        std::thread::spawn(move || workload(&dir, seed, &progress))
    };
    let db = Arc::new(Mutex::new(DbProgress::default()));
    let db_worker = {
        let (dir, db) = (dir.clone(), db.clone());
        std::thread::spawn(move || db_workload(&dir, seed, &db))
    };
    let bulk_worker = {
        let dir = dir.clone();
        std::thread::spawn(move || bulk_workload(&dir))
    };
    std::thread::sleep(Duration::from_millis(50 + rng.below(700)));
    // SIGKILL: no unmount, no final commit, no checkpoint.
    child.kill().unwrap();
    child.wait().unwrap();
    // The kernel keeps a dead mount until it is unmounted; the worker's
    // next request fails then.
    sh(&format!("umount -l {}", v.m()));
    worker.join().unwrap();
    db_worker.join().unwrap();
    bulk_worker.join().unwrap();
    let p = std::mem::take(&mut *progress.lock().unwrap());
    let db = std::mem::take(&mut *db.lock().unwrap());
    v.fsck();
    v.mount();
    if let Err(e) = check(&dir, seed, &p).and_then(|()| check_db(&dir, seed, &db)) {
        panic!(
            "round with seed {seed:#x} ({commit}, {} files begun, {} fsync'd): {e}\n  replay with DUALFS_KILL9_SEED={seed:#x}",
            p.begun,
            p.synced.len()
        );
    }
    v.umount();
    println!(
        "seed {seed:#x}: {commit}, {} files begun, {} fsync'd, {} database syncs: recovered",
        p.begun,
        p.synced.len(),
        db.syncs
    );
}

#[test]
fn a_mount_killed_at_a_random_moment_keeps_every_fsync_and_rename() {
    if let Some(seed) = std::env::var("DUALFS_KILL9_SEED").ok().filter(|s| !s.is_empty()) {
        round(u64::from_str_radix(seed.trim_start_matches("0x"), 16).expect("hex seed"));
        return;
    }
    let rounds: u64 = std::env::var("DUALFS_KILL9_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    for r in 0..rounds {
        round(0x4B11_0009 + r * 0x1_0001);
    }
}
