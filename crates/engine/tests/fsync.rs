//! Untangled fsync: an fsync makes its file durable and nothing else, in
//! an fsync record that a crash replays; fdatasync of an overwrite writes
//! only data; records fold into the next commit; what cannot be said in a
//! record commits. Each crash here is a snapshot of both devices, recovered
//! and checked by fsck.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, RenameFlags, SetAttr};

struct Rig {
    meta: Arc<MemoryDevice>,
    data: Arc<MemoryDevice>,
}

fn options() -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), dirty_data_limit: 256 << 20, ..MountOptions::default() }
}

impl Rig {
    fn new() -> Rig {
        Rig::with(MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() })
    }

    fn with(opts: MkfsOptions) -> Rig {
        let (meta, data) = (Arc::new(MemoryDevice::new(16384)), Arc::new(MemoryDevice::new(65536)));
        Volume::format(meta.clone(), data.clone(), &opts).unwrap();
        Rig { meta, data }
    }

    fn open(&self) -> Volume {
        Volume::open(self.meta.clone(), self.data.clone(), options()).unwrap()
    }

    /// The volume as a power cut now would leave it, recovered and checked.
    fn crash(&self) -> Volume {
        let meta: Arc<dyn BlockDevice> = Arc::new(self.meta.snapshot());
        let data: Arc<dyn BlockDevice> = Arc::new(self.data.snapshot());
        let before = dualfs_engine::check::check(meta.clone(), data.clone()).unwrap();
        assert!(before.is_clean(), "fsck before recovery: {:#?}", before.problems);
        let v = Volume::open(meta.clone(), data.clone(), options()).unwrap();
        let r = dualfs_engine::check::check(meta, data).unwrap();
        assert!(r.is_clean(), "fsck after recovery: {:#?}", r.problems);
        v
    }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed).wrapping_add((i >> 12) as u8)).collect()
}

fn find(v: &Volume, path: &str) -> Option<InodeNo> {
    let mut ino = InodeNo::ROOT;
    for c in path.split('/') {
        ino = v.lookup(ino, c.as_bytes()).ok()?.ino;
    }
    Some(ino)
}

fn contents(v: &Volume, path: &str) -> Option<Vec<u8>> {
    let ino = find(v, path)?;
    let a = v.getattr(ino).unwrap();
    Some(v.read(ino, 0, a.size as usize + 1).unwrap())
}

fn stat(v: &Volume, name: &str) -> u64 {
    v.stats().into_iter().find(|(n, _)| *n == name).map(|(_, x)| x).unwrap()
}

fn create(v: &Volume, dir: InodeNo, name: &str) -> InodeNo {
    let a = v.create(dir, name.as_bytes(), 0o644, Creds::ROOT).unwrap();
    a.ino
}

#[test]
fn an_fsync_writes_its_file_and_leaves_the_others_dirty() {
    let rig = Rig::new();
    let v = rig.open();
    let big = create(&v, InodeNo::ROOT, "big");
    let small = create(&v, InodeNo::ROOT, "small");
    v.sync().unwrap();
    v.write(big, 0, &bytes(8 << 20, 1)).unwrap();
    let (meta0, data0) = (stat(&v, "meta_blocks_written"), stat(&v, "data_blocks_written"));
    v.write(small, 0, &bytes(4096, 2)).unwrap();
    v.fsync(small).unwrap();
    let meta = stat(&v, "meta_blocks_written") - meta0;
    let data = stat(&v, "data_blocks_written") - data0;
    assert!(meta <= 3, "{meta} log blocks for a 4 KiB fsync");
    assert_eq!(data, 0, "the small write is carried in the record; the big file is left alone");
    assert_eq!(stat(&v, "fsync_records"), 1);
    let c = rig.crash();
    assert_eq!(contents(&c, "small").unwrap(), bytes(4096, 2));
    assert_eq!(contents(&c, "big").unwrap(), Vec::<u8>::new(), "nobody asked for big's data");
    assert_eq!(c.replay_report().data_blocks, 1);
}

#[test]
fn a_new_file_under_new_directories_is_reachable_after_its_fsync() {
    let rig = Rig::new();
    let v = rig.open();
    let d1 = v.mkdir(InodeNo::ROOT, b"d1", 0o755, Creds::ROOT).unwrap().ino;
    let d2 = v.mkdir(d1, b"d2", 0o750, Creds::ROOT).unwrap().ino;
    let f = create(&v, d2, "f");
    let g = create(&v, d1, "g");
    v.write(g, 0, b"not synced").unwrap();
    v.write(f, 0, &bytes(10_000, 3)).unwrap();
    v.fsync(f).unwrap();
    assert_eq!(stat(&v, "fsync_commits"), 0, "a record, not a commit");
    let c = rig.crash();
    assert_eq!(contents(&c, "d1/d2/f").unwrap(), bytes(10_000, 3));
    assert!(find(&c, "d1/g").is_none(), "g was never fsync'd");
    assert_eq!(c.getattr(find(&c, "d1").unwrap()).unwrap().nlink, 3);
    assert_eq!(c.getattr(find(&c, "d1/d2").unwrap()).unwrap().perm & 0o777, 0o750);
    // The replayed state takes new work and survives a clean reopen.
    let h = create(&c, find(&c, "d1/d2").unwrap(), "h");
    c.write(h, 0, b"after").unwrap();
    c.close().unwrap();
    let again = rig.crash();
    assert!(find(&again, "d1/d2/f").is_some());
}

#[test]
fn fdatasync_of_an_overwrite_writes_data_and_no_log_block() {
    let rig = Rig::new();
    let v = rig.open();
    let f = create(&v, InodeNo::ROOT, "db");
    v.write(f, 0, &bytes(64 << 10, 4)).unwrap();
    v.sync().unwrap();
    let (meta0, data0) = (stat(&v, "meta_blocks_written"), stat(&v, "data_blocks_written"));
    v.write(f, 8192, &bytes(4096, 5)).unwrap();
    v.fdatasync(f).unwrap();
    assert_eq!(stat(&v, "meta_blocks_written"), meta0, "no log block");
    assert_eq!(stat(&v, "data_blocks_written") - data0, 1, "the block, in place");
    assert_eq!(stat(&v, "fsync_data_only"), 1);
    let c = rig.crash();
    let mut want = bytes(64 << 10, 4);
    want[8192..12288].copy_from_slice(&bytes(4096, 5));
    assert_eq!(contents(&c, "db").unwrap(), want);
    // An append changes the size: fdatasync must log it.
    v.write(f, 64 << 10, b"tail").unwrap();
    v.fdatasync(f).unwrap();
    assert_eq!(stat(&v, "fsync_records"), 1);
    want.extend_from_slice(b"tail");
    assert_eq!(contents(&rig.crash(), "db").unwrap(), want);
}

#[test]
fn records_fold_into_the_next_commit_group() {
    let rig = Rig::new();
    let v = rig.open();
    let f = create(&v, InodeNo::ROOT, "f");
    v.write(f, 0, &bytes(5000, 6)).unwrap();
    v.fsync(f).unwrap();
    v.setattr(f, &SetAttr { size: Some(100), ..SetAttr::default() }).unwrap();
    v.commit().unwrap();
    let c = rig.crash();
    assert_eq!(contents(&c, "f").unwrap(), bytes(100, 6), "the commit group after the record wins");
    assert_eq!(c.open_report().recovery.fsync_folded, 1);
    assert_eq!(c.replay_report().partial_segments, 0);
}

#[test]
fn many_small_fsyncs_of_a_growing_file_all_replay() {
    let rig = Rig::new();
    let v = rig.open();
    let f = create(&v, InodeNo::ROOT, "log");
    let mut want = Vec::new();
    for i in 0..40u8 {
        let piece = bytes(3000, i);
        v.write(f, want.len() as u64, &piece).unwrap();
        want.extend_from_slice(&piece);
        v.fsync(f).unwrap();
    }
    assert_eq!(stat(&v, "fsync_commits"), 0);
    let c = rig.crash();
    assert_eq!(contents(&c, "log").unwrap(), want);
}

#[test]
fn a_large_fsync_writes_its_data_in_place_first() {
    let rig = Rig::new();
    let v = rig.open();
    let f = create(&v, InodeNo::ROOT, "large");
    v.write(f, 0, &bytes(8000, 7)).unwrap();
    v.fsync(f).unwrap();
    // Rewrite the copied blocks and more: in place now, and the copies in
    // the first record must not come back over them.
    v.write(f, 0, &bytes(1 << 20, 8)).unwrap();
    let data0 = stat(&v, "data_blocks_written");
    v.fsync(f).unwrap();
    assert!(stat(&v, "data_blocks_written") - data0 >= 256);
    let c = rig.crash();
    assert_eq!(contents(&c, "large").unwrap(), bytes(1 << 20, 8));
}

#[test]
fn a_truncated_file_and_a_file_with_many_extents_replay_their_maps() {
    let rig = Rig::new();
    let v = rig.open();
    let holes = create(&v, InodeNo::ROOT, "holes");
    let other = create(&v, InodeNo::ROOT, "other");
    v.write(holes, 0, &bytes(4096, 1)).unwrap();
    v.sync().unwrap();
    // Interleaved allocations give the file more extents than its inode holds.
    let mut want = vec![0u8; 40 * 8192];
    for i in 0..40u64 {
        let b = bytes(4096, i as u8);
        v.write(holes, i * 8192, &b).unwrap();
        want[(i * 8192) as usize..(i * 8192 + 4096) as usize].copy_from_slice(&b);
        v.write(other, i * 4096, &b).unwrap();
        v.fsync(holes).unwrap();
    }
    want.truncate(39 * 8192 + 4096);
    let c = rig.crash();
    assert_eq!(contents(&c, "holes").unwrap(), want);
    v.setattr(holes, &SetAttr { size: Some(5000), ..SetAttr::default() }).unwrap();
    v.fsync(holes).unwrap();
    let c = rig.crash();
    assert_eq!(contents(&c, "holes").unwrap(), want[..5000].to_vec());
}

#[test]
fn a_renamed_new_file_commits_and_a_directory_fsync_commits_everything() {
    let rig = Rig::new();
    let v = rig.open();
    let f = create(&v, InodeNo::ROOT, "tmp");
    let other = create(&v, InodeNo::ROOT, "other");
    v.write(other, 0, b"others").unwrap();
    v.write(f, 0, b"saved").unwrap();
    v.rename(InodeNo::ROOT, b"tmp", InodeNo::ROOT, b"final", RenameFlags::default()).unwrap();
    v.fsync(f).unwrap();
    assert_eq!(stat(&v, "fsync_commits"), 1, "a new file renamed since: only a commit says that");
    let c = rig.crash();
    assert_eq!(contents(&c, "final").unwrap(), b"saved");
    let late = create(&v, InodeNo::ROOT, "late");
    v.write(late, 0, b"late").unwrap();
    v.fsync(InodeNo::ROOT).unwrap();
    assert_eq!(contents(&rig.crash(), "late").unwrap(), b"late");
}

#[test]
fn fsyncs_arriving_together_share_a_record() {
    let rig = Rig::new();
    let v = Arc::new(rig.open());
    let files: Vec<InodeNo> = (0..4).map(|i| create(&v, InodeNo::ROOT, &format!("f{i}"))).collect();
    v.sync().unwrap();
    std::thread::scope(|s| {
        for (i, &f) in files.iter().enumerate() {
            let v = v.clone();
            s.spawn(move || {
                for k in 0..50u64 {
                    v.write(f, k * 4096, &bytes(4096, i as u8)).unwrap();
                    v.fsync(f).unwrap();
                }
            });
        }
    });
    let calls = stat(&v, "fsync_calls");
    let records = stat(&v, "fsync_records");
    assert_eq!(calls, 200);
    assert!(records <= calls, "{records} records for {calls} fsyncs");
    let c = rig.crash();
    for i in 0..4 {
        assert_eq!(contents(&c, &format!("f{i}")).unwrap().len(), 50 * 4096);
    }
}

#[test]
fn an_fsync_releases_its_own_replacement_only() {
    let rig = Rig::new();
    let periodic = MountOptions { commit_interval: Duration::ZERO, ..options() };
    let v = Volume::open(rig.meta.clone(), rig.data.clone(), periodic).unwrap();
    let a = create(&v, InodeNo::ROOT, "a");
    let b = create(&v, InodeNo::ROOT, "b");
    v.write(a, 0, b"old a").unwrap();
    v.write(b, 0, b"old b").unwrap();
    v.sync().unwrap();
    for f in [a, b] {
        v.setattr(f, &SetAttr { size: Some(0), ..SetAttr::default() }).unwrap();
        v.write(f, 0, b"new").unwrap();
    }
    assert!(v.held_for_replacement(a) && v.held_for_replacement(b));
    v.fsync(a).unwrap();
    assert!(!v.held_for_replacement(a));
    assert!(v.held_for_replacement(b), "another file's hold stays");
    v.tick().unwrap();
    let c = rig.crash();
    assert_eq!(contents(&c, "a").unwrap(), b"new");
    assert_eq!(contents(&c, "b").unwrap(), b"old b");
}

#[test]
fn pending_records_are_replayed_in_memory_by_a_read_only_mount() {
    let rig = Rig::new();
    let v = rig.open();
    let f = create(&v, InodeNo::ROOT, "f");
    v.write(f, 0, &bytes(6000, 9)).unwrap();
    v.fsync(f).unwrap();
    let meta: Arc<dyn BlockDevice> = Arc::new(rig.meta.snapshot());
    let data: Arc<dyn BlockDevice> = Arc::new(rig.data.snapshot());
    let ro = Volume::open(meta, data, MountOptions { read_only: true, ..options() }).unwrap();
    assert_eq!(contents(&ro, "f").unwrap(), bytes(6000, 9));
}

#[test]
fn a_volume_without_the_feature_commits_on_fsync() {
    let rig =
        Rig::with(MkfsOptions { segment_blocks: 128, group_blocks: 8192, fsync_log: false, ..MkfsOptions::default() });
    let v = rig.open();
    let f = create(&v, InodeNo::ROOT, "f");
    v.write(f, 0, b"x").unwrap();
    v.fsync(f).unwrap();
    assert_eq!(stat(&v, "fsync_records"), 0);
    assert_eq!(contents(&rig.crash(), "f").unwrap(), b"x");
}

/// A data device whose flushes wait, while armed, until the test lets each
/// one through: it holds a commit group half written, the commit lock
/// taken, at a point the test chooses.
#[derive(Debug)]
struct Gate {
    inner: MemoryDevice,
    state: std::sync::Mutex<GateState>,
    cv: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    armed: bool,
    /// Flushes that arrived while armed.
    arrived: u64,
    /// Of those, how many were let through.
    passed: u64,
}

impl Gate {
    fn state(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap()
    }

    fn set_armed(&self, armed: bool) {
        self.state().armed = armed;
        self.cv.notify_all();
    }

    /// Waits until `n` flushes have arrived.
    fn wait_arrived(&self, n: u64) {
        let s = self.state();
        let (s, t) = self.cv.wait_timeout_while(s, Duration::from_secs(60), |s| s.arrived < n).unwrap();
        assert!(!t.timed_out(), "no flush arrived: {s:?}");
    }

    fn pass_one(&self) {
        self.state().passed += 1;
        self.cv.notify_all();
    }
}

/// Lets every flush through when dropped (also when a test panics).
struct Disarm<'a>(&'a Gate);

impl Drop for Disarm<'_> {
    fn drop(&mut self) {
        self.0.set_armed(false);
    }
}

impl BlockDevice for Gate {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_blocks(first, buf)
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_blocks(first, buf)
    }

    fn flush(&self) -> std::io::Result<()> {
        let mut s = self.state();
        if s.armed {
            let me = s.arrived;
            s.arrived += 1;
            self.cv.notify_all();
            drop(self.cv.wait_while(s, |s| s.armed && s.passed <= me).unwrap());
        }
        self.inner.flush()
    }
}

/// A volume whose data device is a [`Gate`], mounted with a dirty-data
/// limit of `limit` bytes: the devices, the options and the volume.
fn gated_volume(limit: usize) -> (Arc<MemoryDevice>, Arc<Gate>, MountOptions, Arc<Volume>) {
    let meta = Arc::new(MemoryDevice::new(16384));
    let gate = Arc::new(Gate {
        inner: MemoryDevice::new(65536),
        state: std::sync::Mutex::default(),
        cv: std::sync::Condvar::new(),
    });
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), gate.clone(), &opts).unwrap();
    let mount = MountOptions { dirty_data_limit: limit, ..options() };
    let v = Arc::new(Volume::open(meta.clone(), gate.clone(), mount).unwrap());
    (meta, gate, mount, v)
}

/// A writer that passes the dirty-data limit commits in steps,
/// the commit lock let go between them, so that an fsync of another file
/// waits for the step under way, not for the whole dirty set. The gate
/// holds the writer's first step in its data flush; the fsync of `b`
/// arrives behind it; it must return with at most a few steps of `a`
/// written, not the 4 MiB a single commit would have written first. Crashes
/// taken then and at the end show `a` cut short at data that was written,
/// never past it.
#[test]
fn an_fsync_beside_a_writer_past_the_dirty_limit_waits_for_one_step() {
    const LIMIT: usize = 4 << 20;
    const STEP_BLOCKS: u64 = (LIMIT / 16 / 4096) as u64;
    let (meta, gate, mount, v) = gated_volume(LIMIT);
    let a = create(&v, InodeNo::ROOT, "a");
    let b = create(&v, InodeNo::ROOT, "b");
    v.sync().unwrap();
    let crash = || {
        let m: Arc<dyn BlockDevice> = Arc::new(meta.snapshot());
        let d: Arc<dyn BlockDevice> = Arc::new(gate.inner.snapshot());
        let c = Volume::open(m.clone(), d.clone(), mount).unwrap();
        let r = dualfs_engine::check::check(m, d).unwrap();
        assert!(r.is_clean(), "fsck after recovery: {:#?}", r.problems);
        c
    };
    let data = bytes(8 << 20, 7);
    let base = stat(&v, "data_blocks_written");
    gate.set_armed(true);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for (i, piece) in data.chunks(64 << 10).enumerate() {
                v.write(a, (i * piece.len()) as u64, piece).unwrap();
            }
        });
        // A failed assertion below must not leave the writer held.
        let _open_on_unwind = Disarm(&gate);
        gate.wait_arrived(1);
        // The first step is being written, the commit lock held: the rest
        // of the dirty set waits for later steps.
        let waiting = stat(&v, "dirty_data_bytes");
        assert!(waiting as usize >= LIMIT / 2, "only {waiting} bytes left after the first step");
        let (tx, rx) = std::sync::mpsc::channel();
        let v2 = &v;
        let syncer = s.spawn(move || {
            let v = v2;
            v.write(b, 0, &bytes(4096, 9)).unwrap();
            v.fsync(b).unwrap();
            tx.send(stat(v, "data_blocks_written") - base).unwrap();
        });
        while stat(&v, "fsync_calls") == 0 {
            std::thread::yield_now();
        }
        // Let it queue behind the commit lock (harmless if it has not yet:
        // it then waits for one step more, which the bound allows).
        std::thread::sleep(Duration::from_millis(20));
        gate.pass_one();
        let mut steps = 1;
        let written = loop {
            if let Ok(w) = rx.recv_timeout(Duration::from_millis(5)) {
                break w;
            }
            let st = gate.state();
            if st.arrived > st.passed {
                assert!(steps < 3, "the fsync waited for {steps} steps");
                drop(st);
                steps += 1;
                gate.pass_one();
            }
        };
        syncer.join().unwrap();
        assert!(
            written <= 3 * STEP_BLOCKS,
            "{written} blocks of the other file written before the fsync returned (steps of {STEP_BLOCKS})"
        );
        assert_eq!(stat(&v, "fsync_records"), 1);
        // A crash now: b as fsync'd, a a prefix of what was written.
        let c = crash();
        assert_eq!(contents(&c, "b").unwrap(), bytes(4096, 9));
        let got = contents(&c, "a").unwrap();
        assert!(got[..] == data[..got.len()], "a: {} bytes, not a prefix", got.len());
        gate.set_armed(false);
        writer.join().unwrap();
    });
    assert!(stat(&v, "dirty_data_bytes") as usize <= LIMIT, "the writer relieved memory");
    let c = crash();
    let got = contents(&c, "a").unwrap();
    assert!(!got.is_empty() && got[..] == data[..got.len()], "a: {} bytes, not a prefix", got.len());
    assert_eq!(contents(&c, "b").unwrap(), bytes(4096, 9));
}

/// A small write beside a large writer past the dirty-data limit is not
/// held for the large writer's relief (it would be, page for page, in the
/// kernel's queue in front of the fsync that needs it): with the relief's
/// first step blocked on the data device, a write of another file that
/// takes the volume past the limit again returns.
#[test]
fn a_small_write_beside_a_writer_past_the_dirty_limit_is_not_held_for_its_relief() {
    const LIMIT: usize = 4 << 20;
    let (_, gate, _, v) = gated_volume(LIMIT);
    let a = create(&v, InodeNo::ROOT, "a");
    let b = create(&v, InodeNo::ROOT, "b");
    v.sync().unwrap();
    let data = bytes(8 << 20, 7);
    gate.set_armed(true);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for (i, piece) in data.chunks(64 << 10).enumerate() {
                v.write(a, (i * piece.len()) as u64, piece).unwrap();
            }
        });
        let _open_on_unwind = Disarm(&gate);
        // The large writer went past the limit and its relief is writing.
        gate.wait_arrived(1);
        let (tx, rx) = std::sync::mpsc::channel();
        let v2 = &v;
        s.spawn(move || {
            // Under an eighth of the limit, and enough to go past it again.
            v2.write(b, 0, &bytes(448 << 10, 9)).unwrap();
            tx.send(()).unwrap();
        });
        let returned = rx.recv_timeout(Duration::from_secs(10)).is_ok();
        assert_eq!(gate.state().passed, 0, "the relief moved on while the small write was tested");
        assert!(returned, "the small write waited for the large writer's relief");
        gate.set_armed(false);
        writer.join().unwrap();
    });
    assert!(stat(&v, "dirty_data_bytes") as usize <= LIMIT, "the writer relieved memory");
}
