//! A mount costs the same whatever the size of the volume: a volume of
//! 15 TiB of data (a meta-data device of 1.5 TiB, a tenth of it) is
//! mounted reading the same blocks, and holding the same IFile structures,
//! as one of 1 GiB with the same files, after a clean close and after a
//! crash with log to roll forward (commits, an fsync record after them,
//! an orphan with data to finish). mkfs writes the same blocks for both.
//! (Counts, not times: what a mount reads or builds in proportion to the
//! devices' size shows as a difference, whatever the machine's load.)
//! Beside the blocks, the bytes: what the mount allocates, at its peak and
//! still held once it returns, counted by the allocator, so that a
//! structure sized by the devices shows whatever it is (a bitmap, a
//! table, a list of segments built and dropped). The same for a volume
//! that keeps a snapshot and a writable tree: their records say what their
//! images pin and the list how many free blocks they hold, so that no
//! image and no bitmap is read whole.
#![allow(clippy::unwrap_used)]
// A global allocator is unsafe to implement; this one counts per thread,
// which the allocation-counting crates (global counters) do not, and the
// tests here run side by side.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::{BLOCK_SIZE, InodeNo};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

/// Counts the bytes the calling thread allocates and frees while `ON`
/// (the tests of this file run side by side, each on its own thread).
struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn count(delta: i64) {
    let _ = ON.try_with(|on| {
        if on.get() {
            let _ = LIVE.try_with(|live| {
                live.set(live.get() + delta);
                let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
            });
        }
    });
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counting touches only thread-local cells that allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64);
        // SAFETY: the caller's layout, as given.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64);
        // SAFETY: the caller's layout, as given.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as i64));
        // SAFETY: the caller's pointer and layout, as given.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as i64 - layout.size() as i64);
        // SAFETY: the caller's pointer, layout and size, as given.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Bytes a mount allocated on its thread: at the peak, and still held once
/// it returned.
#[derive(Debug, Clone, Copy)]
struct Bytes {
    peak: i64,
    held: i64,
}

/// Runs `f` counting the bytes it allocates on this thread.
fn counting<T>(f: impl FnOnce() -> T) -> (T, Bytes) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    ON.with(|on| on.set(true));
    let out = f();
    ON.with(|on| on.set(false));
    (out, Bytes { peak: PEAK.with(Cell::get), held: LIVE.with(Cell::get) })
}

/// How many more bytes the mount of 15 TiB may allocate than that of
/// 1 GiB: the slots of the index chunks of tables 15,360 times longer
/// (a few KiB). A structure of one bit per 64 KiB of data is 32 MiB.
const BYTES_SLACK: i64 = 64 << 10;

/// Counts the blocks read and written through it.
#[derive(Debug)]
struct Counted {
    inner: Arc<MemoryDevice>,
    read: AtomicU64,
    written: AtomicU64,
}

impl Counted {
    fn new(inner: Arc<MemoryDevice>) -> Arc<Counted> {
        Arc::new(Counted { inner, read: AtomicU64::new(0), written: AtomicU64::new(0) })
    }
}

impl BlockDevice for Counted {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read.fetch_add((buf.len() / BLOCK_SIZE) as u64, Ordering::Relaxed);
        self.inner.read_blocks(first, buf)
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        self.written.fetch_add((buf.len() / BLOCK_SIZE) as u64, Ordering::Relaxed);
        self.inner.write_blocks(first, buf)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// What one mount cost.
#[derive(Debug, PartialEq, Eq)]
struct Cost {
    mkfs_blocks_written: u64,
    meta_blocks_read: u64,
    data_blocks_read: u64,
    /// IFile blocks and index chunks in memory once mounted.
    held: Vec<(&'static str, u64)>,
}

/// Makes a volume of `data_blocks` (meta-data device a tenth of it), puts
/// the same files on it, and mounts it once more: after a clean close, or
/// after a crash with a commit in the log since the last checkpoint.
/// With `kept`, a snapshot and a writable clone of it are made after the
/// files, and files they keep are changed and deleted after them.
fn mount_cost(data_blocks: u64, crash: bool) -> (Cost, Bytes) {
    mount_cost_with(data_blocks, crash, false)
}

fn mount_cost_with(data_blocks: u64, crash: bool, kept: bool) -> (Cost, Bytes) {
    let (meta, data) = (Arc::new(MemoryDevice::new(data_blocks / 10)), Arc::new(MemoryDevice::new(data_blocks)));
    let (m, d) = (Counted::new(meta.clone()), Counted::new(data.clone()));
    Volume::format(m.clone(), d.clone(), &MkfsOptions { identity_seed: Some(7), ..MkfsOptions::default() }).unwrap();
    let mkfs_blocks_written = m.written.load(Ordering::Relaxed) + d.written.load(Ordering::Relaxed);
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    for i in 0..4 {
        let dir = v.mkdir(InodeNo::ROOT, format!("d{i}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        for j in 0..50 {
            let f = v.create(dir, format!("f{j}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
            v.write(f, 0, &vec![j as u8; 10_000]).unwrap();
        }
    }
    if kept {
        v.snapshot_create("s").unwrap();
        v.clone_create("s", "c").unwrap();
        // What they keep, changed and let go of by the live tree: the
        // blocks they alone hold now are free in the live bitmap.
        let d0 = v.lookup(InodeNo::ROOT, b"d0").unwrap().ino;
        for j in 0..10 {
            v.unlink(d0, format!("f{j}").as_bytes()).unwrap();
        }
        let f = v.lookup(d0, b"f20").unwrap().ino;
        v.write(f, 0, &[1u8; 4096]).unwrap();
    }
    v.close().unwrap();
    let (meta, data) = if crash {
        let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
        let dir = v.mkdir(InodeNo::ROOT, b"late", 0o755, Creds::ROOT).unwrap().ino;
        for j in 0..20 {
            let f = v.create(dir, format!("f{j}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
            v.write(f, 0, &vec![j as u8; 5000]).unwrap();
        }
        v.unlink(v.lookup(InodeNo::ROOT, b"d1").unwrap().ino, b"f3").unwrap();
        // An orphan for the open to finish: open, unlinked, with data.
        let o = v.create(dir, b"open", 0o644, Creds::ROOT).unwrap().ino;
        v.write(o, 0, &vec![9u8; 200_000]).unwrap();
        v.open_file(o).unwrap();
        v.unlink(dir, b"open").unwrap();
        v.commit().unwrap();
        // An fsync record after the last commit, for the open to replay.
        let f = v.lookup(dir, b"f5").unwrap().ino;
        v.write(f, 0, &[7u8; 3000]).unwrap();
        v.fsync(f).unwrap();
        // The power goes: what the devices hold now, no close.
        let copies = (Arc::new(meta.snapshot()), Arc::new(data.snapshot()));
        drop(v);
        copies
    } else {
        (meta, data)
    };
    let (m, d) = (Counted::new(meta), Counted::new(data));
    let (v, bytes) = counting(|| Volume::open(m.clone(), d.clone(), MountOptions::default()).unwrap());
    assert_eq!(v.open_report().recovery.partial_segments > 0, crash, "{:?}", v.open_report().recovery);
    let stats = v.stats();
    if crash {
        let r = &v.open_report().recovery;
        assert!(r.fsync_pending > 0, "no fsync record replayed: {r:?}");
        assert!(v.lookup(v.lookup(InodeNo::ROOT, b"late").unwrap().ino, b"open").is_err());
    }
    let stat = |name: &str| stats.iter().find(|(k, _)| *k == name).map(|(_, n)| *n).unwrap();
    let held = ["bitmap_blocks_loaded", "usage_blocks_loaded", "group_blocks_loaded", "ifile_chunks_loaded"]
        .into_iter()
        .map(|k| (k, stat(k)))
        .collect();
    let cost = Cost {
        mkfs_blocks_written,
        meta_blocks_read: m.read.load(Ordering::Relaxed),
        data_blocks_read: d.read.load(Ordering::Relaxed),
        held,
    };
    // The volume is whole: every file reads back.
    let f = v.lookup(v.lookup(InodeNo::ROOT, b"d2").unwrap().ino, b"f7").unwrap().ino;
    assert_eq!(v.read(f, 0, 10_000).unwrap(), vec![7u8; 10_000]);
    if kept {
        // What the snapshots hold is what a walk of them says: the free
        // count the lazy mount carried is the one fsck counts.
        let free = v.statfs().bfree;
        drop(v);
        let report = dualfs_engine::check::check(m.clone(), d.clone()).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let v = Volume::open(m.clone(), d.clone(), MountOptions::default()).unwrap();
        // Listing their space reads every bitmap whole and recounts.
        assert_eq!(v.snapshot_list().len(), 2);
        assert_eq!(v.statfs().bfree, free, "the held count carried differs from the bitmaps'");
        // A block the snapshot holds is never written over.
        let f = v.lookup(v.lookup(InodeNo::ROOT, b"d1").unwrap().ino, b"f4").unwrap().ino;
        v.write(f, 0, &[0xEEu8; 4096]).unwrap();
        v.close().unwrap();
        let snap = Volume::open_snapshot(m.clone(), d.clone(), "s", MountOptions::default()).unwrap();
        let f = snap.lookup(snap.lookup(InodeNo::ROOT, b"d1").unwrap().ino, b"f4").unwrap().ino;
        assert_eq!(snap.read(f, 0, 10_000).unwrap(), vec![4u8; 10_000]);
        return (cost, bytes);
    }
    drop(v);
    (cost, bytes)
}

/// Fails unless the mount of 15 TiB allocated what that of 1 GiB did,
/// within [`BYTES_SLACK`], at its peak and once it returned.
fn same_bytes(small: Bytes, large: Bytes) {
    assert!(
        large.peak <= small.peak + BYTES_SLACK && large.held <= small.held + BYTES_SLACK,
        "what a mount allocates grows with the volume: 1 GiB {small:?}, the large one {large:?}"
    );
}

const GIB_BLOCKS: u64 = 1 << 18;
const TIB15_BLOCKS: u64 = 15 << 28;

/// The large volume of the cases keeping a snapshot and a clone: making
/// them loads every bitmap whole (a minute and 3 GB at 15 TiB), so the
/// default run makes them on 1 TiB, where a held set read whole at mount
/// still shows as some 100 MB against a megabyte; `DUALFS_LONG=1` makes
/// them on 15 TiB.
fn large_kept_blocks() -> u64 {
    if std::env::var_os("DUALFS_LONG").is_some() { TIB15_BLOCKS } else { 1 << 28 }
}

#[test]
fn a_clean_mount_of_15_tib_reads_and_holds_what_one_of_1_gib_does() {
    let (small, small_bytes) = mount_cost(GIB_BLOCKS, false);
    let (large, large_bytes) = mount_cost(TIB15_BLOCKS, false);
    println!("1 GiB: {small:?} {small_bytes:?}\n15 TiB: {large:?} {large_bytes:?}");
    assert_eq!(large, small, "what a mount reads or holds grows with the volume");
    same_bytes(small_bytes, large_bytes);
}

#[test]
fn a_mount_after_a_crash_of_15_tib_reads_and_holds_what_one_of_1_gib_does() {
    let (small, small_bytes) = mount_cost(GIB_BLOCKS, true);
    let (large, large_bytes) = mount_cost(TIB15_BLOCKS, true);
    println!("1 GiB: {small:?} {small_bytes:?}\n15 TiB: {large:?} {large_bytes:?}");
    assert_eq!(large, small, "what a mount after a crash reads or holds grows with the volume");
    same_bytes(small_bytes, large_bytes);
}

#[test]
fn a_large_mount_keeping_a_snapshot_and_a_clone_reads_and_holds_what_one_of_1_gib_does() {
    let (small, small_bytes) = mount_cost_with(GIB_BLOCKS, false, true);
    let (large, large_bytes) = mount_cost_with(large_kept_blocks(), false, true);
    println!("1 GiB: {small:?} {small_bytes:?}\nlarge: {large:?} {large_bytes:?}");
    assert_eq!(large, small, "what a mount of a volume keeping snapshots reads or holds grows with the volume");
    same_bytes(small_bytes, large_bytes);
}

#[test]
fn a_large_mount_after_a_crash_keeping_a_snapshot_and_a_clone_reads_and_holds_what_one_of_1_gib_does() {
    let (small, small_bytes) = mount_cost_with(GIB_BLOCKS, true, true);
    let (large, large_bytes) = mount_cost_with(large_kept_blocks(), true, true);
    println!("1 GiB: {small:?} {small_bytes:?}\nlarge: {large:?} {large_bytes:?}");
    assert_eq!(large, small, "what a mount after a crash keeping snapshots reads or holds grows with the volume");
    same_bytes(small_bytes, large_bytes);
}
