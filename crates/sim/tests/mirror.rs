//! The mirrored meta-data log: reads heal from the good copy, a missing or
//! stale copy makes the mount refuse unless degraded, a stale copy is never
//! trusted, and a write is acknowledged only when both copies hold it. Two
//! broken rules (`Fault::MirrorAckBeforeSecond`, `Fault::MirrorTrustStale`)
//! must be caught. A copy failing while mounted is dropped, the volume
//! going on degraded.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::faults::{self, Fault};
use dualfs_engine::types::{BLOCK_SIZE, InodeNo};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};
use dualfs_sim::tree::Tree;

/// The fault switch is process-wide: the tests that set it run one at a time.
static FAULTS: Mutex<()> = Mutex::new(());

/// A device that keeps what was flushed apart from what was only written:
/// `crashed` is what a power cut leaves (every write since the last flush
/// lost).
#[derive(Debug)]
struct Volatile {
    durable: MemoryDevice,
    pending: Mutex<HashMap<u64, Vec<u8>>>,
}

impl Volatile {
    fn new(blocks: u64) -> Volatile {
        Volatile { durable: MemoryDevice::new(blocks), pending: Mutex::new(HashMap::new()) }
    }

    fn crashed(&self) -> MemoryDevice {
        self.durable.snapshot()
    }
}

impl BlockDevice for Volatile {
    fn block_count(&self) -> u64 {
        self.durable.block_count()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.durable.read_blocks(first, buf)?;
        let p = self.pending.lock().unwrap();
        for (i, b) in buf.chunks_exact_mut(BLOCK_SIZE).enumerate() {
            if let Some(x) = p.get(&(first + i as u64)) {
                b.copy_from_slice(x);
            }
        }
        Ok(())
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        if first + (buf.len() / BLOCK_SIZE) as u64 > self.block_count() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "beyond the end"));
        }
        let mut p = self.pending.lock().unwrap();
        for (i, b) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
            p.insert(first + i as u64, b.to_vec());
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut p = self.pending.lock().unwrap();
        for (at, b) in p.drain() {
            self.durable.write_blocks(at, &b)?;
        }
        Ok(())
    }
}

fn options() -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), ..MountOptions::default() }
}

fn mkfs_opts() -> MkfsOptions {
    MkfsOptions { segment_blocks: 128, group_blocks: 8192, identity_seed: Some(7), ..MkfsOptions::default() }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

type Dev = Arc<dyn BlockDevice>;

fn mem(blocks: u64) -> Dev {
    Arc::new(MemoryDevice::new(blocks))
}

fn snap(d: &Dev) -> Dev {
    let mut buf = vec![0u8; BLOCK_SIZE];
    let m = MemoryDevice::new(d.block_count());
    for b in 0..d.block_count() {
        d.read_blocks(b, &mut buf).unwrap();
        if buf.iter().any(|&x| x != 0) {
            m.write_blocks(b, &buf).unwrap();
        }
    }
    Arc::new(m)
}

fn open(copies: &[Dev], data: &Dev, degraded: bool) -> dualfs_engine::Result<Volume> {
    let a = Volume::assemble_meta(copies, data, degraded, true)?;
    Volume::open_assembled(a, data.clone(), options())
}

fn stat(v: &Volume, name: &str) -> u64 {
    v.stats().iter().find(|(n, _)| *n == name).map_or(u64::MAX, |(_, x)| *x)
}

/// A mirrored volume with files in directories, closed cleanly, and one
/// more fsync'd after a crash point: (copy a, copy b, data, the tree).
fn populated() -> (Dev, Dev, Dev, Tree) {
    let (a, b, d) = (mem(8192), mem(8192), mem(32768));
    Volume::format_mirrored([a.clone(), b.clone()], d.clone(), &mkfs_opts()).unwrap();
    let v = open(&[a.clone(), b.clone()], &d, false).unwrap();
    for k in 0..4 {
        let dir = v.mkdir(InodeNo::ROOT, format!("d{k}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        for i in 0..30 {
            let f = v.create(dir, format!("f{i}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
            v.write(f, 0, &bytes(200 + 700 * i, (k * 30 + i) as u8)).unwrap();
        }
    }
    v.commit().unwrap();
    let f = v.create(InodeNo::ROOT, b"synced", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &bytes(9000, 1)).unwrap();
    v.fsync(f).unwrap();
    let tree = Tree::of_volume(&v).unwrap();
    // The process dies: nothing more is written.
    std::mem::forget(v);
    (snap(&a), snap(&b), snap(&d), tree)
}

fn used_blocks(d: &Dev) -> Vec<u64> {
    let mut buf = vec![0u8; BLOCK_SIZE];
    (0..d.block_count())
        .filter(|&b| {
            d.read_blocks(b, &mut buf).unwrap();
            buf.iter().any(|&x| x != 0)
        })
        .collect()
}

fn zeroed(d: &Dev, blocks: &[u64]) -> Dev {
    let s = snap(d);
    for &b in blocks {
        s.write_blocks(b, &[0u8; BLOCK_SIZE]).unwrap();
    }
    s
}

#[test]
fn every_used_block_of_one_copy_damaged_in_turn_loses_nothing_and_heals() {
    let (a, b, d, want) = populated();
    let used = used_blocks(&a);
    assert!(used.len() > 20, "{} used blocks", used.len());
    let mut healed_total = 0;
    for (which, &blk) in used.iter().enumerate() {
        // Alternate the damaged copy: reads come from the first, so damage
        // on the second is found by the scrub, not by reads.
        let (ca, cb) = if which % 2 == 0 { (zeroed(&a, &[blk]), snap(&b)) } else { (snap(&a), zeroed(&b, &[blk])) };
        let (first, second) = if which % 4 < 2 { (ca, cb) } else { (cb, ca) };
        let v = open(&[first.clone(), second.clone()], &snap(&d), false)
            .unwrap_or_else(|e| panic!("block {blk} zeroed on one copy: the mount failed: {e}"));
        assert_eq!(Tree::of_volume(&v).unwrap(), want, "block {blk} zeroed on one copy");
        assert!(!v.open_report().is_damaged(), "block {blk}: {:?}", v.open_report().damage);
        healed_total += stat(&v, "mirror_blocks_healed");
        v.close().unwrap();
    }
    assert!(healed_total > 0, "reads healed some blocks");
    println!("{} used blocks zeroed on one copy in turn: every file intact, {healed_total} healed", used.len());
}

#[test]
fn a_healed_block_is_rewritten_on_the_bad_copy() {
    let (a, b, d, want) = populated();
    // The checkpoint slots: a mount reads both.
    let slots: Vec<u64> = used_blocks(&b).into_iter().filter(|x| (1..=2).contains(x)).collect();
    assert!(!slots.is_empty());
    let a = zeroed(&a, &slots);
    let v = open(&[a.clone(), b.clone()], &d, false).unwrap();
    assert_eq!(Tree::of_volume(&v).unwrap(), want);
    assert_eq!(stat(&v, "mirror_blocks_healed"), slots.len() as u64, "slots {slots:?}");
    let (mut x, mut y) = (vec![0u8; BLOCK_SIZE], vec![0u8; BLOCK_SIZE]);
    for &blk in &slots {
        a.read_blocks(blk, &mut x).unwrap();
        b.read_blocks(blk, &mut y).unwrap();
        assert_eq!(x, y, "block {blk} was written back from the good copy");
    }
    v.close().unwrap();
}

/// `d` with block `blk` torn as a crash tears a write in flight: its first
/// half holds other bytes.
fn torn(d: &Dev, blk: u64) -> Dev {
    let s = snap(d);
    let mut buf = vec![0u8; BLOCK_SIZE];
    s.read_blocks(blk, &mut buf).unwrap();
    for x in &mut buf[..BLOCK_SIZE / 2] {
        *x = !*x;
    }
    s.write_blocks(blk, &buf).unwrap();
    s
}

fn block(d: &Dev, blk: u64) -> Vec<u8> {
    let mut buf = vec![0u8; BLOCK_SIZE];
    d.read_blocks(blk, &mut buf).unwrap();
    buf
}

#[test]
fn a_torn_data_block_of_an_fsync_record_is_read_from_the_copy_that_holds_it() {
    let (a, b, d, want) = populated();
    // The raw data the fsync record of `synced` carries: no block header,
    // only the file's bytes, which only the record's checksum can judge.
    // The record is written twice (its twin follows it); roll-forward reads
    // the first, whose blocks come first.
    let synced = bytes(9000, 1);
    let raw: Vec<u64> = used_blocks(&a)
        .into_iter()
        .filter(|&x| synced.chunks(BLOCK_SIZE).any(|c| block(&a, x).starts_with(c)))
        .collect();
    let read = synced.chunks(BLOCK_SIZE).count();
    assert!(raw.len() >= read, "the fsync'd file's data went to the log in an fsync record: {raw:?}");
    for (k, &blk) in raw.iter().enumerate() {
        for torn_copy in [1, 2] {
            let (ca, cb) = if torn_copy == 1 { (torn(&a, blk), snap(&b)) } else { (snap(&a), torn(&b, blk)) };
            let v = open(&[ca.clone(), cb.clone()], &snap(&d), false)
                .unwrap_or_else(|e| panic!("block {blk} torn on copy {torn_copy}: {e}"));
            assert_eq!(Tree::of_volume(&v).unwrap(), want, "block {blk} torn on copy {torn_copy}");
            v.close().unwrap();
            // Recovery made both copies hold the blocks it rolled forward
            // from: a second crash, or either copy alone, finds them whole.
            for (i, c) in [&ca, &cb].into_iter().enumerate() {
                assert!(
                    k >= read || block(c, blk) == block(&a, blk),
                    "block {blk} torn on copy {torn_copy}: copy {} still differs after the mount",
                    i + 1
                );
            }
        }
    }
}

#[test]
fn different_blocks_damaged_on_both_copies_lose_nothing() {
    let (a, b, d, want) = populated();
    let used = used_blocks(&a);
    let mut pairs = 0;
    // Every used block against a block a stride away on the other copy.
    for (i, &x) in used.iter().enumerate() {
        let y = used[(i + 7) % used.len()];
        let v = open(&[zeroed(&a, &[x]), zeroed(&b, &[y])], &snap(&d), false)
            .unwrap_or_else(|e| panic!("blocks {x} (first copy) and {y} (second): {e}"));
        assert_eq!(Tree::of_volume(&v).unwrap(), want, "blocks {x} and {y}");
        v.close().unwrap();
        pairs += 1;
    }
    println!("{pairs} pairs of different blocks zeroed, one on each copy: every file intact");
}

#[test]
fn a_missing_copy_refuses_the_mount_unless_degraded_and_then_the_returning_copy_is_stale() {
    let _g = FAULTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (a, b, d, want) = populated();
    let e = open(std::slice::from_ref(&a), &d, false).unwrap_err().to_string();
    assert!(e.contains("degraded") && e.contains("missing"), "{e}");
    // Degraded: runs on copy a, says so, and marks the mirror first.
    let v = open(std::slice::from_ref(&a), &d, true).unwrap();
    assert_eq!(stat(&v, "mirror_degraded"), 1);
    assert_eq!(Tree::of_volume(&v).unwrap(), want);
    let f = v.create(InodeNo::ROOT, b"while-degraded", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &bytes(5000, 3)).unwrap();
    v.fsync(f).unwrap();
    let after = Tree::of_volume(&v).unwrap();
    v.close().unwrap();
    // Copy b comes back: it missed that file, and is refused as stale,
    // in either order.
    for order in [[a.clone(), b.clone()], [b.clone(), a.clone()]] {
        let e = open(&order, &d, false).unwrap_err().to_string();
        assert!(e.contains("stale"), "{e}");
        let v = open(&order, &d, true).unwrap();
        assert_eq!(Tree::of_volume(&v).unwrap(), after, "degraded on the copy in sync");
        v.close().unwrap();
    }
    // The broken rule: trusting the stale copy. The mount then claims two
    // copies, yet the second cannot give back the file written while it
    // was away: losing the first loses it.
    faults::set(&[Fault::MirrorTrustStale]);
    let trusted = open(&[a.clone(), b.clone()], &snap(&d), false).map(|v| {
        let copies = stat(&v, "mirror_copies_in_use");
        std::mem::forget(v);
        copies
    });
    faults::set(&[]);
    assert_eq!(trusted.unwrap(), 2, "the stale copy was taken as in sync");
    let alone = open(std::slice::from_ref(&b), &snap(&d), true).map(|v| {
        let has = v.lookup(InodeNo::ROOT, b"while-degraded").is_ok();
        std::mem::forget(v);
        has
    });
    assert!(!alone.unwrap_or(false), "the stale copy alone does not hold the file written without it");
}

#[test]
fn an_fsync_is_acknowledged_only_when_both_copies_hold_it() {
    let _g = FAULTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let run = |fault: bool| -> (bool, bool) {
        let (a, b, d) = (Arc::new(Volatile::new(8192)), Arc::new(Volatile::new(8192)), Arc::new(Volatile::new(32768)));
        let (ad, bd, dd): (Dev, Dev, Dev) = (a.clone(), b.clone(), d.clone());
        Volume::format_mirrored([ad.clone(), bd.clone()], dd.clone(), &mkfs_opts()).unwrap();
        let v = open(&[ad.clone(), bd.clone()], &dd, false).unwrap();
        let broken: &[Fault] = if fault { &[Fault::MirrorAckBeforeSecond] } else { &[] };
        faults::set(broken);
        let f = v.create(InodeNo::ROOT, b"acked", 0o644, Creds::ROOT).unwrap().ino;
        v.write(f, 0, &bytes(6000, 5)).unwrap();
        v.fsync(f).unwrap();
        faults::set(&[]);
        std::mem::forget(v);
        // A power cut, then either copy lost: the other must hold the file.
        let dc: Dev = Arc::new(d.crashed());
        let mut held = [false; 2];
        for (i, survivor) in [a.crashed(), b.crashed()].into_iter().enumerate() {
            let s: Dev = Arc::new(survivor);
            held[i] = open(&[s], &snap(&dc), true).is_ok_and(|v| {
                let ok = v.lookup(InodeNo::ROOT, b"acked").is_ok();
                std::mem::forget(v);
                ok
            });
        }
        (held[0], held[1])
    };
    assert_eq!(run(false), (true, true), "each copy alone holds the acknowledged file");
    let (_, second) = run(true);
    assert!(!second, "acknowledging before the second copy is durable loses the file with the first copy");
}

#[test]
fn one_copy_of_a_mirror_in_sync_is_not_opened_to_be_written() {
    let (a, b, d, want) = populated();
    let e = Volume::open(a.clone(), snap(&d), options()).unwrap_err().to_string();
    assert!(e.contains("only one copy was given"), "{e}");
    // Read only, one copy serves; assembled, both do.
    let v = Volume::open(a.clone(), snap(&d), MountOptions { read_only: true, ..options() }).unwrap();
    assert_eq!(Tree::of_volume(&v).unwrap(), want);
    std::mem::forget(v);
    let v = open(&[a, b], &d, false).unwrap();
    assert_eq!(Tree::of_volume(&v).unwrap(), want);
    v.close().unwrap();
}

#[test]
fn a_volume_with_one_meta_data_device_refuses_two_and_mounts_with_one() {
    let (m, d) = (mem(8192), mem(32768));
    Volume::format(m.clone(), d.clone(), &mkfs_opts()).unwrap();
    let e = open(&[m.clone(), mem(8192)], &d, false).unwrap_err().to_string();
    assert!(e.contains("not a mirror"), "{e}");
    let v = open(&[m], &d, false).unwrap();
    assert!(v.stats().iter().all(|(n, _)| !n.starts_with("mirror_")));
    v.close().unwrap();
}

/// A device that fails every request once broken: a copy dying while the
/// volume is mounted.
#[derive(Debug)]
struct Breakable {
    inner: MemoryDevice,
    broken: AtomicBool,
}

impl Breakable {
    fn check(&self) -> io::Result<()> {
        if self.broken.load(Ordering::Relaxed) { Err(io::Error::other("the device is gone")) } else { Ok(()) }
    }
}

impl BlockDevice for Breakable {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check()?;
        self.inner.read_blocks(first, buf)
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        self.check()?;
        self.inner.write_blocks(first, buf)
    }

    fn flush(&self) -> io::Result<()> {
        self.check()?;
        self.inner.flush()
    }
}

#[test]
fn a_copy_failing_a_write_is_dropped_and_the_volume_goes_on_degraded() {
    // Another test's `MirrorTrustStale` would take the dropped copy as in sync.
    let _g = FAULTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for failing in 0..2 {
        let copy = || Arc::new(Breakable { inner: MemoryDevice::new(8192), broken: AtomicBool::new(false) });
        let copies = [copy(), copy()];
        let (a, b): (Dev, Dev) = (copies[0].clone(), copies[1].clone());
        let d = mem(32768);
        Volume::format_mirrored([a.clone(), b.clone()], d.clone(), &mkfs_opts()).unwrap();
        let v = open(&[a.clone(), b.clone()], &d, false).unwrap();
        let f = v.create(InodeNo::ROOT, b"before", 0o644, Creds::ROOT).unwrap().ino;
        v.write(f, 0, &bytes(7000, 1)).unwrap();
        v.fsync(f).unwrap();
        assert_eq!(stat(&v, "mirror_degraded"), 0);
        // Copy `failing` dies: the fsync still succeeds, on the other copy.
        copies[failing].broken.store(true, Ordering::Relaxed);
        let g = v.create(InodeNo::ROOT, b"after", 0o644, Creds::ROOT).unwrap().ino;
        v.write(g, 0, &bytes(9000, 2)).unwrap();
        v.fsync(g).unwrap_or_else(|e| panic!("copy {} failed: the fsync failed too: {e}", failing + 1));
        assert_eq!(stat(&v, "mirror_degraded"), 1, "copy {} failed", failing + 1);
        assert_eq!(stat(&v, "mirror_copies_in_use"), 1);
        let warned = v.space_warnings();
        assert!(
            warned.iter().any(|w| w.contains("degraded") && w.contains(&format!("copy {}", failing + 1))),
            "{warned:?}"
        );
        // It goes on: reads, more writes, a checkpoint.
        let h = v.create(InodeNo::ROOT, b"later", 0o644, Creds::ROOT).unwrap().ino;
        v.write(h, 0, &bytes(3000, 3)).unwrap();
        v.sync().unwrap();
        let want = Tree::of_volume(&v).unwrap();
        // The process dies.
        std::mem::forget(v);
        let dead: Dev = Arc::new(copies[failing].inner.snapshot());
        let good = snap(&[a.clone(), b.clone()][1 - failing]);
        let d = snap(&d);
        // The copy that failed missed writes: refused as stale, in either
        // order, unless degraded; degraded runs on the good copy.
        for order in [[dead.clone(), good.clone()], [good.clone(), dead.clone()]] {
            let e = open(&order, &d, false).unwrap_err().to_string();
            assert!(e.contains("stale") && e.contains("degraded"), "{e}");
        }
        let e = open(std::slice::from_ref(&good), &d, false).unwrap_err().to_string();
        assert!(e.contains("degraded"), "{e}");
        let v = open(&[dead.clone(), good.clone()], &snap(&d), true).unwrap();
        assert_eq!(Tree::of_volume(&v).unwrap(), want);
        assert_eq!(stat(&v, "mirror_degraded"), 1);
        v.close().unwrap();
        assert!(open(std::slice::from_ref(&dead), &snap(&d), true).is_err(), "the failed copy alone is never trusted");
    }
}
