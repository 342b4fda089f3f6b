//! Whole pages a write fills before taking the volume lock (DESIGN.md, "A
//! stream is written from its pages"): a buffer handed to a page belongs to
//! that page alone, and a page whose buffer a commit's write-back run
//! holds gets the new buffer in its place, so that the run writes what it
//! was sealed with and the page keeps the new bytes.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

const MIB: usize = 1 << 20;

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed).wrapping_add((i >> 12) as u8)).collect()
}

/// A data device that holds the first vectored write (a write-back run of
/// page buffers) it gets while armed, until the test lets it go.
#[derive(Debug)]
struct RunGate {
    inner: MemoryDevice,
    state: Mutex<(bool, bool, bool)>, // (armed, a run arrived, let go)
    cv: Condvar,
}

impl RunGate {
    fn state(&self) -> MutexGuard<'_, (bool, bool, bool)> {
        self.state.lock().unwrap()
    }

    fn wait_for_run(&self) {
        let s = self.state();
        let (_s, t) = self.cv.wait_timeout_while(s, Duration::from_secs(60), |s| !s.1).unwrap();
        assert!(!t.timed_out(), "no write-back run arrived");
    }

    fn let_go(&self) {
        self.state().2 = true;
        self.cv.notify_all();
    }
}

/// Lets a held run go when dropped (also when the test panics).
struct LetGo<'a>(&'a RunGate);

impl Drop for LetGo<'_> {
    fn drop(&mut self) {
        self.0.let_go();
    }
}

impl BlockDevice for RunGate {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_blocks(first, buf)
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_blocks(first, buf)
    }

    fn write_blocks_vectored(&self, first: u64, bufs: &[&[u8]]) -> std::io::Result<()> {
        let mut s = self.state();
        if s.0 && !s.1 {
            s.1 = true;
            self.cv.notify_all();
            // The run's bytes are read after the hold, as a device would
            // read them while the request is under way.
            drop(self.cv.wait_while(s, |s| !s.2).unwrap());
        } else {
            drop(s);
        }
        let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        self.inner.write_blocks(first, &all)
    }

    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn read_all(v: &Volume, ino: InodeNo) -> Vec<u8> {
    let size = v.getattr(ino).unwrap().size as usize;
    v.read(ino, 0, size + 1).unwrap()
}

/// 1 MiB written, then committed; while the commit's run is held in the
/// device, the same MiB is written again (whole pages, filled before the
/// lock) and a partial page beside them (copied under it). The commit must
/// write the first bytes (a crash then shows them), the volume must read
/// the second, and the next commit must write the second.
#[test]
fn a_page_rewritten_while_its_run_is_written_leaves_the_run_as_sealed() {
    let meta = Arc::new(MemoryDevice::new(16384));
    let gate = Arc::new(RunGate { inner: MemoryDevice::new(65536), state: Mutex::default(), cv: Condvar::new() });
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), gate.clone(), &opts).unwrap();
    let mount = MountOptions { commit_interval: Duration::ZERO, ..MountOptions::default() };
    let v = Volume::open(meta.clone(), gate.clone(), mount).unwrap();
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    let (old, new) = (bytes(MIB, 1), bytes(MIB, 2));
    v.write(f, 0, &old).unwrap();
    gate.state().0 = true;
    std::thread::scope(|s| {
        // One commit: a sync would go on to a checkpoint, which commits
        // the second write too.
        let committer = s.spawn(|| v.commit().unwrap());
        let _let_go = LetGo(&gate);
        gate.wait_for_run();
        // The run holds the pages' buffers now.
        v.write(f, 0, &new).unwrap();
        v.write(f, 5000, b"partial").unwrap();
        gate.let_go();
        committer.join().unwrap();
    });
    let mut want = new.clone();
    want[5000..5007].copy_from_slice(b"partial");
    assert!(read_all(&v, f) == want, "the volume reads the second write");
    let crash = || {
        let m: Arc<dyn BlockDevice> = Arc::new(meta.snapshot());
        let d: Arc<dyn BlockDevice> = Arc::new(gate.inner.snapshot());
        Volume::open(m, d, MountOptions { read_only: true, ..mount }).unwrap()
    };
    assert!(read_all(&crash(), f) == old, "the held run wrote the bytes it was sealed with");
    v.sync().unwrap();
    assert!(read_all(&crash(), f) == want, "the next commit writes the second write");
    // Written again and again: buffers that came back from runs are
    // reused, never one a run still holds.
    for round in 0..4u8 {
        let b = bytes(MIB, 10 + round);
        v.write(f, 0, &b).unwrap();
        v.sync().unwrap();
        assert!(read_all(&crash(), f) == b, "round {round}");
    }
    v.close().unwrap();
}
