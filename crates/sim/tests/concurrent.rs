//! Readers and writers at once against one volume, checked against a model.
//!
//! Readers (lookup, getattr, readdir, read, readlink, getxattr) run beside
//! writers, as FUSE threads do, on a volume whose meta-data cache holds
//! 48 objects, so almost every reader meets a cold block and reads it with
//! the volume lock released (`Volume::read_op`) while the writers seal,
//! commit and rewrite the log. The devices yield on every request, so
//! those unlocked reads really do overlap other threads' work.
//!
//! - A stable tree nobody changes: every read of it, at any moment, must
//!   return exactly what was written (a window of blocks read while the
//!   log rewrote them, kept by mistake, would show here).
//! - Each writer owns a directory and keeps a model of it (names and
//!   contents); readers check what must hold whatever the interleaving
//!   (names listed once, only "not found" for what a writer just removed).
//! - At the end every writer's directory equals its model, before and after
//!   a clean reopen, and fsck finds nothing.
//!
//! `DUALFS_CONCURRENT_SEED=hex` replays a seed (printed on failure); the
//! thread interleaving is not replayed, so a failure may need a few runs.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, RenameFlags, SetAttr, SetMode};
use dualfs_engine::{Error, Volume};
use dualfs_sim::harness::IDENTITY_SEED;
use dualfs_sim::rng::Rng;
use dualfs_sim::workload::{FIXED_NOW, fixed_clock};

const WRITERS: u64 = 3;
const READERS: u64 = 3;
const STEPS: u64 = 2000;
const STABLE_FILES: u64 = 40;
const CREDS: Creds = Creds { uid: 0, gid: 0, umask: 0o022 };

/// A memory device that gives up the processor before every request.
#[derive(Debug)]
struct Yielding(Arc<MemoryDevice>);

impl BlockDevice for Yielding {
    fn block_count(&self) -> u64 {
        self.0.block_count()
    }
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        thread::yield_now();
        self.0.read_blocks(first, buf)
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        thread::yield_now();
        self.0.write_blocks(first, buf)
    }
    fn flush(&self) -> io::Result<()> {
        self.0.flush()
    }
}

fn content(seed: u64, len: u64) -> Vec<u8> {
    (0..len).map(|i| (seed.wrapping_mul(131).wrapping_add(i.wrapping_mul(7)) % 251) as u8).collect()
}

fn stable_name(i: u64) -> Vec<u8> {
    format!("s{i:03}").into_bytes()
}

fn options() -> MountOptions {
    MountOptions {
        commit_interval: Duration::ZERO,
        checkpoint_blocks: 300,
        dirty_data_limit: 256 << 10,
        // A tiny cache: most reads go back to the log.
        cache_budget: 48,
        ..MountOptions::default()
    }
}

fn open(meta: &Arc<MemoryDevice>, data: &Arc<MemoryDevice>) -> Volume {
    Volume::open_with_clock(
        Arc::new(Yielding(meta.clone())),
        Arc::new(Yielding(data.clone())),
        options(),
        fixed_clock(),
    )
    .expect("mount")
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// One writer's run in its own directory; returns the model of it.
fn writer(vol: &Volume, k: u64, seed: u64) -> Result<(InodeNo, Model), String> {
    let mut rng = Rng::new(seed ^ (k + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let dir = vol.mkdir(InodeNo::ROOT, format!("w{k}").as_bytes(), 0o755, CREDS).map_err(|e| e.to_string())?.ino;
    let mut model = Model::new();
    let name = |r: u64| format!("n{}", r % 16).into_bytes();
    for step in 0..STEPS {
        let n = name(rng.next_u64());
        let ino = |vol: &Volume, n: &[u8]| vol.lookup(dir, n).map(|a| a.ino);
        let fail =
            |what: &str, e: Error| format!("writer {k} step {step}: {what} {}: {e}", String::from_utf8_lossy(&n));
        match rng.below(8) {
            0 | 1 if !model.contains_key(&n) => {
                vol.create(dir, &n, 0o644, CREDS).map_err(|e| fail("create", e))?;
                model.insert(n.clone(), Vec::new());
            }
            0..=2 if model.contains_key(&n) => {
                let len = rng.below(20_000);
                let data = content(rng.next_u64(), len);
                let off = rng.below(3) * 4096;
                vol.write(ino(vol, &n).map_err(|e| fail("lookup", e))?, off, &data).map_err(|e| fail("write", e))?;
                let m = model.get_mut(&n).unwrap();
                let end = (off + len) as usize;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[off as usize..end].copy_from_slice(&data);
            }
            3 if model.contains_key(&n) => {
                let size = rng.below(12_000);
                let set = SetAttr { size: Some(size), ..SetAttr::default() };
                vol.setattr(ino(vol, &n).map_err(|e| fail("lookup", e))?, &set).map_err(|e| fail("truncate", e))?;
                model.get_mut(&n).unwrap().resize(size as usize, 0);
            }
            4 if model.contains_key(&n) => {
                vol.unlink(dir, &n).map_err(|e| fail("unlink", e))?;
                model.remove(&n);
            }
            5 if model.contains_key(&n) => {
                let to = name(rng.next_u64());
                vol.rename(dir, &n, dir, &to, RenameFlags::default()).map_err(|e| fail("rename", e))?;
                let v = model.remove(&n).unwrap();
                model.insert(to, v);
            }
            6 => {
                if let Some(a) = model.keys().next().cloned() {
                    let f = ino(vol, &a).map_err(|e| fail("lookup", e))?;
                    vol.setxattr(f, b"user.w", &content(step, 40), SetMode::Any).map_err(|e| fail("setxattr", e))?;
                }
            }
            7 if step % 5 == 0 => vol.tick().map_err(|e| fail("tick", e))?,
            _ => {}
        }
    }
    Ok((dir, model))
}

/// Reads until `stop`; every answer must be one the writers could have
/// produced at some moment, and the stable tree exactly as written.
fn reader(vol: &Volume, r: u64, seed: u64, stable: InodeNo, stop: &AtomicBool) -> Result<u64, String> {
    let mut rng = Rng::new(seed ^ (r + 100).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut checks = 0u64;
    let racy = |e: &Error| matches!(e, Error::NotFound);
    while !stop.load(Ordering::Relaxed) {
        checks += 1;
        let i = rng.below(STABLE_FILES);
        let a = vol.lookup(stable, &stable_name(i)).map_err(|e| format!("stable lookup {i}: {e}"))?;
        let want = content(i, 100 + i * 300);
        if a.size != want.len() as u64 {
            return Err(format!("stable file {i}: size {} instead of {}", a.size, want.len()));
        }
        let got = vol.read(a.ino, 0, want.len()).map_err(|e| format!("stable read {i}: {e}"))?;
        if got != want {
            return Err(format!("stable file {i} reads other bytes"));
        }
        let x = vol.getxattr(a.ino, b"user.k").map_err(|e| format!("stable getxattr {i}: {e}"))?;
        if x != [i as u8; 10] {
            return Err(format!("stable file {i} has another xattr"));
        }
        if vol.readlink(vol.lookup(stable, b"link").map_err(|e| e.to_string())?.ino).map_err(|e| e.to_string())?
            != b"s000"
        {
            return Err("the stable link points elsewhere".into());
        }
        if rng.below(8) == 0 {
            let mut names = Vec::new();
            vol.readdir(stable, 0, &mut |l| {
                names.push(l.name);
                true
            })
            .map_err(|e| format!("stable readdir: {e}"))?;
            if names.len() as u64 != STABLE_FILES + 3 {
                return Err(format!("the stable directory lists {} names", names.len()));
            }
        }
        // A writer's directory: anything may be going on there.
        let k = rng.below(WRITERS);
        let dir = match vol.lookup(InodeNo::ROOT, format!("w{k}").as_bytes()) {
            Ok(a) => a.ino,
            Err(e) if racy(&e) => continue,
            Err(e) => return Err(format!("lookup of w{k}: {e}")),
        };
        let mut listed: Vec<(Vec<u8>, InodeNo)> = Vec::new();
        vol.readdir(dir, 2, &mut |l| {
            listed.push((l.name, l.ino));
            true
        })
        .map_err(|e| format!("readdir of w{k}: {e}"))?;
        let mut names: Vec<&Vec<u8>> = listed.iter().map(|(n, _)| n).collect();
        names.sort();
        names.dedup();
        if names.len() != listed.len() {
            return Err(format!("w{k} lists a name twice"));
        }
        for (n, ino) in &listed {
            match vol.getattr(*ino) {
                Ok(a) if a.ino != *ino => return Err(format!("getattr of {ino} answered for {}", a.ino)),
                Ok(a) => match vol.read(*ino, 0, a.size as usize) {
                    Ok(d) if d.len() as u64 > a.size.max(64 << 10) => {
                        return Err(format!("{} read {} bytes", String::from_utf8_lossy(n), d.len()));
                    }
                    Ok(_) => {}
                    Err(e) if racy(&e) => {}
                    Err(e) => return Err(format!("read of {}: {e}", String::from_utf8_lossy(n))),
                },
                Err(e) if racy(&e) => {}
                Err(e) => return Err(format!("getattr of {}: {e}", String::from_utf8_lossy(n))),
            }
        }
    }
    Ok(checks)
}

fn compare(vol: &Volume, dirs: &[(InodeNo, Model)], when: &str) -> Result<(), String> {
    for (k, (dir, model)) in dirs.iter().enumerate() {
        let mut names = Vec::new();
        vol.readdir(*dir, 2, &mut |l| {
            names.push(l.name);
            true
        })
        .map_err(|e| format!("{when}: readdir w{k}: {e}"))?;
        names.sort();
        let want: Vec<Vec<u8>> = model.keys().cloned().collect();
        if names != want {
            return Err(format!("{when}: w{k} lists {} names, the model {}", names.len(), want.len()));
        }
        for (n, bytes) in model {
            let a = vol.lookup(*dir, n).map_err(|e| format!("{when}: lookup: {e}"))?;
            let got = vol.read(a.ino, 0, bytes.len() + 1).map_err(|e| format!("{when}: read: {e}"))?;
            if &got != bytes {
                return Err(format!("{when}: w{k}/{} differs from the model", String::from_utf8_lossy(n)));
            }
        }
    }
    Ok(())
}

#[test]
fn readers_and_writers_at_once_agree_with_the_model() {
    let seed = match std::env::var("DUALFS_CONCURRENT_SEED") {
        Ok(s) => u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("DUALFS_CONCURRENT_SEED is hex"),
        Err(_) => RandomState::new().hash_one("dualfs concurrent seed"),
    };
    if let Err(e) = run(seed) {
        panic!("{e}\nreplay with DUALFS_CONCURRENT_SEED={seed:x}");
    }
}

fn run(seed: u64) -> Result<(), String> {
    let meta = Arc::new(MemoryDevice::new(4096));
    let data = Arc::new(MemoryDevice::new(16384));
    let mkfs = MkfsOptions {
        segment_blocks: 128,
        group_blocks: 4096,
        now: FIXED_NOW,
        identity_seed: Some(IDENTITY_SEED),
        ..MkfsOptions::default()
    };
    Volume::format(meta.clone(), data.clone(), &mkfs).map_err(|e| format!("mkfs: {e}"))?;
    let vol = open(&meta, &data);
    let stable = vol.mkdir(InodeNo::ROOT, b"stable", 0o755, CREDS).map_err(|e| e.to_string())?.ino;
    for i in 0..STABLE_FILES {
        let f = vol.create(stable, &stable_name(i), 0o644, CREDS).map_err(|e| e.to_string())?.ino;
        vol.write(f, 0, &content(i, 100 + i * 300)).map_err(|e| e.to_string())?;
        vol.setxattr(f, b"user.k", &[i as u8; 10], SetMode::Any).map_err(|e| e.to_string())?;
    }
    vol.symlink(stable, b"link", b"s000", CREDS).map_err(|e| e.to_string())?;
    vol.sync().map_err(|e| e.to_string())?;

    let stop = AtomicBool::new(false);
    let (dirs, checks) = thread::scope(|s| {
        let (vol, stop) = (&vol, &stop);
        let readers: Vec<_> = (0..READERS).map(|r| s.spawn(move || reader(vol, r, seed, stable, stop))).collect();
        let writers: Vec<_> = (0..WRITERS).map(|k| s.spawn(move || writer(vol, k, seed))).collect();
        let dirs: Result<Vec<_>, String> = writers.into_iter().map(|w| w.join().expect("writer panicked")).collect();
        stop.store(true, Ordering::Relaxed);
        let checks: Result<Vec<u64>, String> =
            readers.into_iter().map(|r| r.join().expect("reader panicked")).collect();
        (dirs, checks)
    });
    let dirs = dirs?;
    let checks = checks?;
    assert!(checks.iter().all(|&c| c > 0), "every reader ran: {checks:?}");
    assert!(
        vol.stats().iter().any(|&(k, v)| k == "meta_reads_unlocked" && v > 0),
        "readers read cold blocks without the lock"
    );
    compare(&vol, &dirs, "after the run")?;
    vol.close().map_err(|e| format!("close: {e}"))?;
    let report = dualfs_engine::check::check(meta.clone(), data.clone()).map_err(|e| format!("fsck: {e}"))?;
    if !report.is_clean() {
        let list: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
        return Err(format!("fsck found:\n{}", list.join("\n")));
    }
    let vol = open(&meta, &data);
    compare(&vol, &dirs, "after a reopen")?;
    vol.close().map_err(|e| format!("close: {e}"))
}
