//! Readers while a checkpoint is written, with the inode map held within a
//! budget. A checkpoint is sealed under the volume lock, which
//! places every changed inode-map block at a new address and so makes it
//! clean, then written with the lock released: readers run meanwhile, and
//! each ends with a trim that gives clean blocks back. A block given back
//! then is read again from an address that holds nothing yet. The rule
//! (`Log::trim_inode_map`): no block is given back while a sealed
//! checkpoint is unwritten.
//!
//! The window is hit on purpose, not by chance: the meta-data device runs
//! a walk over every file just before the first write of IFile table
//! blocks (the checkpoint's own partial segment), on the thread that
//! writes it. With the rule broken (`Fault::EvictBeforeCheckpointWritten`)
//! the walk meets `EUCLEAN`, as a `find` through the mount did once before
//! the rule; with it, every file is found as it is.
//!
//! The fault switch is process-wide: the tests of this file take turns.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::faults::{self, Fault};
use dualfs_engine::format::block::{BLOCK_MAGIC, BlockKind};
use dualfs_engine::types::{BLOCK_SIZE, InodeNo};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, SetAttr};

/// 2,000 files in 10 directories: about 8 blocks of inode map.
const DIRS: u32 = 10;
const PER_DIR: u32 = 200;

/// A memory device that walks the volume once, when armed, before the
/// first write holding an IFile table block.
struct Window {
    inner: Arc<MemoryDevice>,
    armed: AtomicBool,
    walked: AtomicBool,
    vol: OnceLock<Weak<Volume>>,
    errors: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Window")
    }
}

fn holds_ifile_table(buf: &[u8]) -> bool {
    buf.chunks(BLOCK_SIZE).any(|b| {
        b.len() > 8
            && u32::from_le_bytes([b[0], b[1], b[2], b[3]]) == BLOCK_MAGIC
            && BlockKind::from_code(b[8]) == Some(BlockKind::IFileTable)
    })
}

impl BlockDevice for Window {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_blocks(first, buf)
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        if holds_ifile_table(buf) && self.armed.swap(false, Ordering::SeqCst) {
            // The checkpoint is sealed and its blocks not yet written.
            if let Some(v) = self.vol.get().and_then(Weak::upgrade) {
                let errors = walk(&v);
                self.errors.lock().unwrap().extend(errors);
                self.walked.store(true, Ordering::SeqCst);
            }
        }
        self.inner.write_blocks(first, buf)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The mode file `i` of directory `d` is given, and `bumped` later.
fn mode_of(d: u32, i: u32, bumped: bool) -> u32 {
    let m = 0o400 | ((d * 7 + i) % 0o400);
    if bumped && i == 0 { m ^ 0o011 } else { m }
}

/// Looks up and checks every file (the first of each directory's mode
/// changed), forgetting each as the kernel would; what went wrong, in words.
fn walk(v: &Volume) -> Vec<String> {
    let mut errors = Vec::new();
    for d in 0..DIRS {
        let dir = match v.lookup(InodeNo::ROOT, format!("d{d}").as_bytes()) {
            Ok(a) => a.ino,
            Err(e) => {
                errors.push(format!("d{d}: {e}"));
                continue;
            }
        };
        for i in 0..PER_DIR {
            match v.lookup(dir, format!("f{i}").as_bytes()) {
                Ok(a) => {
                    if a.perm != mode_of(d, i, true) {
                        errors.push(format!("d{d}/f{i}: mode {:o}", a.perm));
                    }
                    let _ = v.forget(a.ino, 1);
                }
                Err(e) => errors.push(format!("d{d}/f{i}: {e}")),
            }
        }
        let _ = v.forget(dir, 1);
    }
    errors
}

/// The inode map kept to two blocks, few inodes cached (a cached inode's
/// block is kept), the map left on disk at mount.
fn bounded() -> MountOptions {
    MountOptions {
        commit_interval: Duration::ZERO,
        lazy_inode_map_min_blocks: 2,
        inode_map_bytes: Some(2 * 4096),
        cache_budget: 32,
        ..MountOptions::default()
    }
}

/// Populates a volume, then changes a file in every directory (so that
/// every block of the map is changed since the last checkpoint) and
/// writes a checkpoint with the walk in its window. Returns what the walk
/// met, after checking that it ran.
fn walk_in_the_window() -> Vec<String> {
    let meta = Arc::new(MemoryDevice::new(1 << 15));
    let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(1 << 15));
    Volume::format(meta.clone(), data.clone(), &MkfsOptions::default()).unwrap();
    let whole = MountOptions { lazy_inode_map_min_blocks: usize::MAX, ..bounded() };
    let v = Volume::open(meta.clone(), data.clone(), MountOptions { inode_map_bytes: None, ..whole }).unwrap();
    for d in 0..DIRS {
        let dir = v.mkdir(InodeNo::ROOT, format!("d{d}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        for i in 0..PER_DIR {
            let a = v.create(dir, format!("f{i}").as_bytes(), mode_of(d, i, false), Creds::ROOT).unwrap();
            v.forget(a.ino, 1).unwrap();
        }
        v.forget(dir, 1).unwrap();
    }
    v.close().unwrap();
    let window = Arc::new(Window {
        inner: meta,
        armed: AtomicBool::new(false),
        walked: AtomicBool::new(false),
        vol: OnceLock::new(),
        errors: Mutex::new(Vec::new()),
    });
    let v = Arc::new(Volume::open(window.clone(), data, bounded()).unwrap());
    window.vol.set(Arc::downgrade(&v)).unwrap();
    v.finish_loading().unwrap();
    for d in 0..DIRS {
        let dir = v.lookup(InodeNo::ROOT, format!("d{d}").as_bytes()).unwrap().ino;
        let a = v.lookup(dir, b"f0").unwrap();
        v.setattr(a.ino, &SetAttr { mode: Some(mode_of(d, 0, true)), ..SetAttr::default() }).unwrap();
        v.forget(a.ino, 1).unwrap();
        v.forget(dir, 1).unwrap();
    }
    v.commit().unwrap();
    window.armed.store(true, Ordering::SeqCst);
    let ckpt = v.checkpoint();
    assert!(window.walked.load(Ordering::SeqCst), "the walk did not run in the checkpoint's window");
    let mut errors = std::mem::take(&mut *window.errors.lock().unwrap());
    if let Err(e) = ckpt {
        errors.push(format!("the checkpoint: {e}"));
    }
    // Once written, every block reads back.
    if errors.is_empty() {
        errors = walk(&v);
    }
    errors
}

static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn readers_during_a_checkpoint_write_find_every_file() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let errors = walk_in_the_window();
    assert!(errors.is_empty(), "{} files went wrong, first: {:?}", errors.len(), &errors[..errors.len().min(5)]);
}

#[test]
fn giving_back_blocks_before_the_checkpoint_is_written_is_caught() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    faults::set(&[Fault::EvictBeforeCheckpointWritten]);
    let errors = walk_in_the_window();
    faults::set(&[]);
    assert!(!errors.is_empty(), "the walk found every file with the rule broken");
    println!("with the rule broken: {} files went wrong, first: {:?}", errors.len(), errors.first());
}
