//! `dualfs trace serve --model` under a real loop device: the requests the
//! loop device sends reach the modelled disk (reads, writes, the flush an
//! fsync sends), partitions map onto one disk, the trace says where, and
//! no request is answered before the model's time.

#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const DUALFS: &str = env!("CARGO_BIN_EXE_dualfs");
const MIB: u64 = 1 << 20;

fn sh(cmd: &str) -> Option<String> {
    let out = Command::new("sh").args(["-c", cmd]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The server, its loop devices and mount point, torn down in order.
struct Served {
    child: Child,
    mnt: PathBuf,
    loops: Vec<String>,
}

impl Served {
    fn start(image: &Path, mnt: &Path, trace: &Path) -> Option<Served> {
        let child = Command::new(DUALFS)
            .arg("trace")
            .arg("serve")
            .arg(image)
            .arg(mnt)
            .args(["--model", "hdd7200", "--parts", "16M,48M", "--out"])
            .arg(trace)
            .spawn()
            .unwrap();
        let mut s = Served { child, mnt: mnt.to_path_buf(), loops: Vec::new() };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !mnt.join("p1").exists() {
            assert!(Instant::now() < deadline, "trace serve did not mount");
            std::thread::sleep(Duration::from_millis(20));
        }
        for part in ["p0", "p1"] {
            let Some(dev) = sh(&format!("losetup --direct-io=on -f --show {}", mnt.join(part).display())) else {
                println!("SKIPPED: no loop device");
                return None;
            };
            s.loops.push(dev);
        }
        Some(s)
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(self.mnt.join("stats")).unwrap()).unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        for d in &self.loops {
            let _ = sh(&format!("losetup -d {d}"));
        }
        let _ = sh(&format!("fusermount3 -u {}", self.mnt.display()));
        let _ = self.child.wait();
    }
}

fn open_direct(dev: &str) -> File {
    std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(dev).unwrap()
}

/// A page-aligned buffer for O_DIRECT.
fn aligned(len: usize) -> (Vec<u8>, usize) {
    let v = vec![0x5au8; len + 4096];
    let off = (4096 - v.as_ptr() as usize % 4096) % 4096;
    (v, off)
}

#[test]
fn a_loop_device_over_the_served_image_runs_on_the_modelled_disk() {
    if !nix::unistd::geteuid().is_root() || !Path::new("/dev/fuse").exists() {
        println!("SKIPPED: needs root and /dev/fuse (a FUSE mount and loop devices)");
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (image, mnt, trace) = (dir.path().join("disk.img"), dir.path().join("mnt"), dir.path().join("disk.trace"));
    std::fs::create_dir(&mnt).unwrap();
    File::create(&image).unwrap().set_len(64 * MIB).unwrap();
    let Some(served) = Served::start(&image, &mnt, &trace) else { return };
    let (p0, p1) = (open_direct(&served.loops[0]), open_direct(&served.loops[1]));

    // 1 MiB written to the second partition, then an fsync: the loop device
    // sends a flush, which waits for the write cache to reach the platter.
    let (mut buf, off) = aligned(MIB as usize);
    p1.write_all_at(&buf[off..off + MIB as usize], 8 * MIB).unwrap();
    p1.sync_all().unwrap();
    let s = served.stats();
    let drive = &s["emulation"]["drive"];
    assert!(drive["flushes"].as_u64().unwrap() >= 1, "the fsync's flush reached the model: {s}");
    assert!(drive["destage_bytes"].as_u64().unwrap() >= MIB, "the flush wrote the cache back: {s}");
    assert_eq!(drive["write_bytes"].as_u64().unwrap(), MIB);

    // Random 4 KiB reads across both partitions: none is answered sooner
    // than the model says, so together they take at least the modelled time.
    let answered0 = s["emulation"]["answered"].as_u64().unwrap();
    let response0 = s["emulation"]["response_ms"].as_f64().unwrap();
    let started = Instant::now();
    for i in 0..24u64 {
        let (dev, at) = if i % 2 == 0 { (&p0, (i * 997 % 4000) * 4096) } else { (&p1, (i * 7919 % 12000) * 4096) };
        dev.read_exact_at(&mut buf[off..off + 4096], at).unwrap();
    }
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    let s = served.stats();
    let reads = s["emulation"]["answered"].as_u64().unwrap() - answered0;
    let modelled = s["emulation"]["response_ms"].as_f64().unwrap() - response0;
    assert!(reads >= 24, "{s}");
    assert!(modelled > 24.0 * 0.5, "random reads cost seeks and rotation in the model: {modelled} ms");
    assert!(wall_ms >= modelled * 0.999, "answered early: {wall_ms} ms of wall time for {modelled} modelled");
    assert!(s["sizes"]["read"]["4096"].as_u64().unwrap() >= 24, "the reads arrived whole: {s}");
    assert!(s["cpu_s"].as_f64().unwrap() > 0.0);
    drop((p0, p1));
    drop(served);

    // The trace places the second partition's write 16 MiB into the disk
    // (a write the kernel split may complete in either order: the lowest).
    let text = std::fs::read_to_string(&trace).unwrap();
    let first_write = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .filter(|f| f[3] == "W")
        .map(|f| f[4].parse::<u64>().unwrap())
        .min()
        .unwrap();
    assert_eq!(first_write, (16 + 8) * MIB / 4096, "{text}");
}
