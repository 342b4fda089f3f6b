//! The paper's write-del workload (§4.4) at the engine level, to measure the
//! cleaner's overhead: copy a source-like tree, delete 7 of every 8 regular
//! files, repeat. Three runs on the same data device:
//!
//! - `roomy`: a meta-data device large enough that the cleaner never runs;
//! - `cleaner`: a small meta-data device; the cleaner runs when it must;
//! - `forced`: the small device with, in addition, one segment cleaned after
//!   every copy and every deletion (the paper cleaned one every 5 seconds of
//!   a run that took minutes; the engine alone runs a round in a fraction
//!   of a second, so the cleanings are tied to the workload's phases).
//!
//! The engine runs a round in well under the 5 s commit interval a mount
//! would use, so the bench commits at every phase boundary (after each copy
//! and each deletion) and every 200 ms, as the periodic commits of a mounted
//! volume would fall during the minutes the workload takes through FUSE.
//!
//! `cargo bench -p dualfs-engine --bench write_del [-- ROUNDS]`, with
//! `DUALFS_WRITE_DEL_META_MIB` for the small device (default 408). Prints
//! wall time and meta-data bytes written per run, and the overheads as ratios.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, FileDevice};
use dualfs_engine::meta_log::cleaner::Policy;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{CleanRequest, Creds, MkfsOptions, MountOptions};

/// A tree shaped like the Linux source the paper copies: directories of a
/// few dozen files, sizes mostly small with a long tail.
struct Tree {
    dirs: usize,
    files_per_dir: usize,
}

fn file_size(i: usize) -> usize {
    // A deterministic spread from 100 bytes to 64 KiB, median near 6 KiB.
    let x = (i.wrapping_mul(2_654_435_761) % 1000) as f64 / 1000.0;
    (100.0 * (650.0f64).powf(x)) as usize
}

struct Run {
    name: &'static str,
    wall: Duration,
    meta_bytes: u64,
    cleaned: u64,
}

fn devices(dir: &std::path::Path, meta_mib: u64, data_mib: u64) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    let mk = |name: &str, mib: u64| -> Arc<dyn BlockDevice> {
        let path = dir.join(name);
        let f = std::fs::File::create(&path).expect("image");
        f.set_len(mib << 20).expect("size");
        Arc::new(FileDevice::open(&path, false, false).expect("open"))
    };
    (mk("meta.img", meta_mib), mk("data.img", data_mib))
}

fn run(name: &'static str, meta_mib: u64, forced: bool, rounds: usize, tree: &Tree) -> Run {
    let dir = std::env::temp_dir().join(format!("dualfs-write-del-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let (meta, data) = devices(&dir, meta_mib, 2048);
    Volume::format(meta.clone(), data.clone(), &MkfsOptions::default()).expect("mkfs");
    let options = MountOptions { commit_interval: Duration::ZERO, ..MountOptions::default() };
    let vol = Arc::new(Volume::open(meta, data, options).expect("mount"));
    let stop = Arc::new(AtomicBool::new(false));
    let flusher = {
        let (vol, stop) = (vol.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                vol.tick().expect("tick");
            }
        })
    };
    let phase_done = || {
        vol.tick().expect("tick");
        if forced {
            let req =
                CleanRequest { max_segments: 1, policy: Policy::CostBenefit, max_utilization: 1.0, free_now: false };
            vol.clean(req, &mut |_, _| {}).expect("clean");
        }
    };
    let started = Instant::now();
    let buf = vec![0x5Au8; 1 << 16];
    let mut n = 0usize;
    for r in 0..rounds {
        let top = vol.mkdir(InodeNo::ROOT, format!("copy{r}").as_bytes(), 0o755, Creds::ROOT).expect("mkdir").ino;
        let mut files = Vec::new();
        for d in 0..tree.dirs {
            let dir = vol.mkdir(top, format!("d{d}").as_bytes(), 0o755, Creds::ROOT).expect("mkdir").ino;
            for f in 0..tree.files_per_dir {
                let name = format!("f{f}.c");
                let a = vol.create(dir, name.as_bytes(), 0o644, Creds::ROOT).expect("create");
                vol.write(a.ino, 0, &buf[..file_size(n)]).expect("write");
                vol.forget(a.ino, 1).expect("forget");
                files.push((dir, name));
                n += 1;
            }
        }
        phase_done();
        for (i, (dir, name)) in files.iter().enumerate() {
            if i % 8 != 0 {
                vol.unlink(*dir, name.as_bytes()).expect("unlink");
            }
        }
        phase_done();
    }
    vol.sync().expect("sync");
    let wall = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    flusher.join().expect("flusher");
    let (meta_bytes, cleaned) =
        vol.with_fs(|fs| (fs.log.stats().meta_blocks_written * 4096, fs.log.stats().cleaner.segments_freed));
    let detail = vol.with_fs(|fs| format!("{:?}, {} checkpoints", fs.log.stats().cleaner, fs.log.stats().checkpoints));
    eprintln!("{name}: {detail}");
    match Arc::try_unwrap(vol) {
        Ok(v) => v.close().expect("close"),
        Err(_) => panic!("volume still shared"),
    }
    let _ = std::fs::remove_dir_all(&dir);
    Run { name, wall, meta_bytes, cleaned }
}

fn main() {
    let rounds = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(20);
    let tree = Tree { dirs: 430, files_per_dir: 20 };
    println!("write-del: {rounds} rounds of {} files in {} directories", tree.dirs * tree.files_per_dir, tree.dirs);
    // The paper's proportion (a meta-data device of 10% of the volume:
    // 408 MiB for 4 GiB) and a log ten times tighter that forces cleaning.
    let meta_mib: u64 = std::env::var("DUALFS_WRITE_DEL_META_MIB").ok().and_then(|s| s.parse().ok()).unwrap_or(408);
    let runs = [
        run("roomy", 4096, false, rounds, &tree),
        run("cleaner", meta_mib, false, rounds, &tree),
        run("forced", meta_mib, true, rounds, &tree),
    ];
    println!("| run | meta-data device | wall s | meta-data MiB written | segments cleaned |");
    println!("|---|---:|---:|---:|---:|");
    for (r, mib) in runs.iter().zip([4096, meta_mib, meta_mib]) {
        println!(
            "| {} | {mib} MiB | {:.2} | {:.1} | {} |",
            r.name,
            r.wall.as_secs_f64(),
            r.meta_bytes as f64 / (1 << 20) as f64,
            r.cleaned
        );
    }
    let base = &runs[0];
    for r in &runs[1..] {
        println!(
            "{}: wall {:.3}x, meta-data bytes {:.3}x of roomy",
            r.name,
            r.wall.as_secs_f64() / base.wall.as_secs_f64(),
            r.meta_bytes as f64 / base.meta_bytes as f64
        );
    }
}
