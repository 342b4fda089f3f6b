//! Random writes, overwrites, truncations, fsyncs, reopens and reads of
//! files through the mount, each read compared with an in-memory copy of
//! what the file must hold (fsx's check), by three threads at once: two on
//! small files and one streaming megabyte writes over 96 MiB, with the
//! dirty-data budget small (`cache=64M`) so that write-back runs, their
//! shared page buffers and the buffered small reads are all in play while
//! pages are rewritten. After a remount every file equals its copy.
//! `DUALFS_STRESS_SEED=N` replays a run (the seed, not the interleaving).

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use common::{Rng, TestVolume};

/// One file's run: `ops` random operations, every read checked.
fn churn(path: &Path, seed: u64, ops: usize, big: bool) -> Vec<u8> {
    let open = || OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).unwrap();
    let mut r = Rng::new(seed);
    let mut f: File = open();
    let mut model: Vec<u8> = Vec::new();
    let max: u64 = if big { 96 << 20 } else { 4 << 20 };
    let sizes: &[u64] = if big { &[1 << 20, 4 << 20, 4096, 777] } else { &[1, 100, 4095, 4096, 8192, 65536, 1 << 20] };
    for i in 0..ops {
        let op = r.below(100);
        if op < 45 {
            let off = r.below(max);
            let n = sizes[r.below(sizes.len() as u64) as usize].min(max - off) as usize;
            let mut data = vec![0u8; n];
            if r.below(2) == 0 {
                data.fill(r.below(256) as u8);
            } else {
                r.fill(&mut data);
            }
            f.write_all_at(&data, off).unwrap();
            let end = off as usize + n;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
        } else if op < 55 {
            let n = r.below(max);
            f.set_len(n).unwrap();
            model.resize(n as usize, 0);
        } else if op < 60 {
            f.sync_all().unwrap();
        } else if op < 65 {
            drop(f);
            f = open();
        } else {
            let off = r.below(model.len() as u64 + 4096);
            let n = [1usize, 4096, 5000, 65536, 200_000, 1 << 20][r.below(6) as usize];
            let mut got = vec![0u8; n];
            let mut have = 0;
            while have < n {
                let k = f.read_at(&mut got[have..], off + have as u64).unwrap();
                if k == 0 {
                    break;
                }
                have += k;
            }
            got.truncate(have);
            let from = (off as usize).min(model.len());
            let want = &model[from..(from + n).min(model.len())];
            if got != want {
                let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
                panic!(
                    "seed {seed}, {} op {i}: a read of {n} bytes at {off} gave {} bytes, {} expected, first \
                     difference at byte {}",
                    path.display(),
                    got.len(),
                    want.len(),
                    off as usize + at
                );
            }
        }
        let size = f.metadata().unwrap().len();
        assert_eq!(size, model.len() as u64, "seed {seed}, {} op {i}: the size", path.display());
    }
    model
}

#[test]
fn random_writes_truncations_and_reads_match_a_model_through_the_mount() {
    let Some(mut v) = TestVolume::create("512M") else {
        return;
    };
    let seed = std::env::var("DUALFS_STRESS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("data_stress seed {seed} (DUALFS_STRESS_SEED={seed} replays it)");
    v.mount_with("cache=64M");
    let files: Vec<(PathBuf, u64, usize, bool)> = vec![
        (v.path("a"), seed, 3000, false),
        (v.path("b"), seed.wrapping_add(1), 3000, false),
        (v.path("big"), seed.wrapping_add(2), 600, true),
    ];
    let models: Vec<Vec<u8>> = std::thread::scope(|s| {
        let runs: Vec<_> =
            files.iter().map(|(p, seed, ops, big)| s.spawn(move || churn(p, *seed, *ops, *big))).collect();
        runs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    v.remount();
    for ((p, ..), model) in files.iter().zip(&models) {
        let got = std::fs::read(p).unwrap();
        assert!(got == *model, "seed {seed}: {} differs from its model after a remount", p.display());
    }
    v.umount();
    v.fsck();
}
