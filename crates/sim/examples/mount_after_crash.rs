//! Mount time after a crash, against volume size; and `e2fsck -f` on ext4
//! images of the same sizes holding the same files.
//!
//! ```text
//! cargo run --release -p dualfs-sim --example mount_after_crash -- [DIR] [SIZES_GIB...]
//! ```
//!
//! For each size (default 1 and 64 GiB): sparse image files in DIR (default
//! a temporary folder), mkfs, one checkpoint, then the same recent work
//! (2,000 files of 16 KiB in 20 directories, an fsync every 100 files,
//! about 1.3 MiB of log after the checkpoint), then a crash (the volume is
//! dropped, never closed). The mount that follows is timed from the files,
//! with the page cache dropped first when the process may (root). Then the
//! same files go into an ext4 image of the same size (`mkfs.ext4 -d`) and
//! `e2fsck -f -n` is timed. The output is a Markdown table.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, FileDevice};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

const FILES: usize = 2000;
const FILE_BYTES: usize = 16 * 1024;
const DIRS: usize = 20;

fn drop_caches() -> bool {
    // A write to procfs; fails harmlessly without root or in a container.
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

fn sparse(path: &Path, bytes: u64) {
    let f = std::fs::File::create(path).expect("create image");
    f.set_len(bytes).expect("size image");
}

fn open(meta: &Path, data: &Path) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    (
        Arc::new(FileDevice::open(meta, false, false).expect("open meta")),
        Arc::new(FileDevice::open(data, false, false).expect("open data")),
    )
}

fn content(i: usize) -> Vec<u8> {
    (0..FILE_BYTES).map(|b| (b as u8).wrapping_mul(7).wrapping_add(i as u8)).collect()
}

/// Makes a DualFS volume of `total` bytes, does the recent work, crashes.
/// Returns (meta path, data path).
fn dualfs_crashed(dir: &Path, total: u64) -> (PathBuf, PathBuf) {
    let meta_bytes = (total / 10).div_ceil(1 << 20) << 20;
    let (meta, data) = (dir.join("meta.img"), dir.join("data.img"));
    sparse(&meta, meta_bytes);
    sparse(&data, (total - meta_bytes) / 4096 * 4096);
    let (m, d) = open(&meta, &data);
    Volume::format(m.clone(), d.clone(), &MkfsOptions::default()).expect("mkfs");
    let vol = Volume::open(m, d, MountOptions::default()).expect("mount");
    vol.sync().expect("checkpoint");
    let mut dirs = Vec::new();
    for k in 0..DIRS {
        let a = vol.mkdir(dualfs_engine::types::InodeNo::ROOT, format!("d{k}").as_bytes(), 0o755, Creds::ROOT);
        dirs.push(a.expect("mkdir").ino);
    }
    for i in 0..FILES {
        let f = vol.create(dirs[i % DIRS], format!("f{i}").as_bytes(), 0o644, Creds::ROOT).expect("create");
        vol.write(f.ino, 0, &content(i)).expect("write");
        if i % 100 == 99 {
            vol.fsync(f.ino).expect("fsync");
        }
    }
    let since = vol.with_fs(|fs| fs.log.blocks_since_checkpoint());
    println!("<!-- {total} bytes: {since} log blocks since the checkpoint at the crash -->");
    // The crash: no close, no checkpoint.
    drop(vol);
    (meta, data)
}

fn time_mount(meta: &Path, data: &Path) -> (Duration, u64, u64, bool) {
    let cold = drop_caches();
    let (m, d) = open(meta, data);
    let t = Instant::now();
    let vol = Volume::open(m, d, MountOptions::default()).expect("mount after the crash");
    let took = t.elapsed();
    let r = vol.open_report().recovery.clone();
    vol.close().expect("close");
    (took, r.blocks_scanned, r.micros, cold)
}

fn time_fsck(meta: &Path, data: &Path) -> Duration {
    drop_caches();
    let (m, d) = open(meta, data);
    let t = Instant::now();
    let report = dualfs_engine::check::check(m, d).expect("fsck");
    assert!(report.is_clean(), "fsck: {:?}", report.problems);
    t.elapsed()
}

fn ext4_fsck(dir: &Path, total: u64) -> Option<Duration> {
    let tree = dir.join("tree");
    for k in 0..DIRS {
        std::fs::create_dir_all(tree.join(format!("d{k}"))).ok()?;
    }
    for i in 0..FILES {
        std::fs::write(tree.join(format!("d{}/f{i}", i % DIRS)), content(i)).ok()?;
    }
    let img = dir.join("ext4.img");
    sparse(&img, total);
    let ok = Command::new("mkfs.ext4").args(["-q", "-F", "-d"]).arg(&tree).arg(&img).status().ok()?.success();
    if !ok {
        return None;
    }
    drop_caches();
    let t = Instant::now();
    let st = Command::new("e2fsck").args(["-f", "-n"]).arg(&img).output().ok()?;
    let took = t.elapsed();
    st.status.success().then_some(took)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let tmp;
    let dir = match args.next() {
        Some(d) => PathBuf::from(d),
        None => {
            tmp = std::env::temp_dir().join(format!("dualfs-mount-bench-{}", std::process::id()));
            tmp.clone()
        }
    };
    let mut sizes: Vec<u64> = args.filter_map(|s| s.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![1, 64];
    }
    println!(
        "| volume | log since checkpoint | DualFS mount after crash | of which roll-forward | DualFS fsck | ext4 `e2fsck -f` | cache |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---|");
    for gib in sizes {
        let d = dir.join(format!("{gib}g"));
        std::fs::create_dir_all(&d).expect("bench dir");
        let total = gib << 30;
        let (meta, data) = dualfs_crashed(&d, total);
        let (mount, scanned, rf_us, cold) = time_mount(&meta, &data);
        let fsck = time_fsck(&meta, &data);
        let e2 = ext4_fsck(&d, total);
        println!(
            "| {gib} GiB | {} KiB | {:.1} ms | {:.1} ms | {:.1} ms | {} | {} |",
            scanned * 4,
            mount.as_secs_f64() * 1e3,
            rf_us as f64 / 1e3,
            fsck.as_secs_f64() * 1e3,
            e2.map_or("n/a".to_string(), |t| format!("{:.1} ms", t.as_secs_f64() * 1e3)),
            if cold { "dropped before each" } else { "warm (not root)" }
        );
        std::fs::remove_dir_all(&d).ok();
    }
}
