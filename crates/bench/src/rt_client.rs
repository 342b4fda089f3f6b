//! `rt-client PHASE DIR [--n N] [--threads T] [--cpu none|K|spread]`: the
//! round-trip loops of bench/uring_rt.py (docs/BENCHMARKS.md), run by T
//! threads at once, each optionally pinned (all to CPU K, or thread i to CPU
//! i). Phases: `getattr` (statx with AT_STATX_FORCE_SYNC: one GETATTR round
//! trip each on FUSE), `create` (create a new file, close it, unlink it;
//! each thread in a directory of its own, so that the parent directory's
//! lock in the VFS does not put the threads in line).
//! Prints one JSON line: µs per call per thread, calls per second in all,
//! and the client threads' context switches per call.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use rustix::fs::{AtFlags, CWD, StatxFlags};

/// Iterations before the clock starts: dentries, the allocator and the
/// server's threads settle.
const WARMUP: u64 = 200;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pin {
    None,
    Cpu(usize),
    Spread,
}

fn usage() -> ExitCode {
    eprintln!("usage: rt-client getattr|create DIR [--n N] [--threads T] [--cpu none|K|spread]");
    ExitCode::from(2)
}

/// Voluntary plus involuntary context switches of the calling thread.
fn switches() -> u64 {
    let s = fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    s.lines()
        .filter(|l| l.starts_with("voluntary_ctxt_switches") || l.starts_with("nonvoluntary_ctxt_switches"))
        .filter_map(|l| l.split_whitespace().last().and_then(|n| n.parse::<u64>().ok()))
        .sum()
}

fn one(phase: &str, dir: &Path, probe: &Path, t: usize, i: u64) -> std::io::Result<()> {
    if phase == "getattr" {
        rustix::fs::statx(CWD, probe, AtFlags::STATX_FORCE_SYNC, StatxFlags::BASIC_STATS)?;
    } else {
        let p = dir.join(format!("t{t}")).join(format!("f{i}"));
        drop(OpenOptions::new().write(true).create_new(true).mode(0o644).open(&p)?);
        fs::remove_file(&p)?;
    }
    Ok(())
}

fn run(phase: &str, dir: &Path, n: u64, t: usize, pin: Pin, start: &Barrier) -> std::io::Result<(f64, u64)> {
    let cpu = match pin {
        Pin::None => None,
        Pin::Cpu(k) => Some(k),
        Pin::Spread => Some(t),
    };
    if let Some(k) = cpu {
        let mut set = nix::sched::CpuSet::new();
        set.set(k).map_err(std::io::Error::from)?;
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(std::io::Error::from)?;
    }
    fs::create_dir_all(dir.join(format!("t{t}")))?;
    let probe = dir.join(format!("probe{t}"));
    drop(OpenOptions::new().write(true).create(true).truncate(false).open(&probe)?);
    for i in 0..WARMUP {
        one(phase, dir, &probe, t, n + i)?;
    }
    start.wait();
    let cs = switches();
    let clock = Instant::now();
    for i in 0..n {
        one(phase, dir, &probe, t, i)?;
    }
    let secs = clock.elapsed().as_secs_f64();
    let cs = switches() - cs;
    fs::remove_file(&probe)?;
    Ok((secs, cs))
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(phase), Some(dir)) = (args.next(), args.next().map(PathBuf::from)) else { return usage() };
    if phase != "getattr" && phase != "create" {
        return usage();
    }
    let (mut n, mut threads, mut pin) = (20_000u64, 1usize, Pin::None);
    while let Some(a) = args.next() {
        let v = args.next();
        match (a.as_str(), v.as_deref()) {
            ("--n", Some(v)) if v.parse::<u64>().is_ok() => n = v.parse().unwrap_or(n),
            ("--threads", Some(v)) if v.parse::<usize>().is_ok_and(|t| t > 0) => threads = v.parse().unwrap_or(1),
            ("--cpu", Some("none")) => pin = Pin::None,
            ("--cpu", Some("spread")) => pin = Pin::Spread,
            ("--cpu", Some(v)) if v.parse::<usize>().is_ok() => pin = Pin::Cpu(v.parse().unwrap_or(0)),
            _ => return usage(),
        }
    }
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (phase, dir, start) = (phase.clone(), dir.clone(), Arc::clone(&start));
            std::thread::spawn(move || run(&phase, &dir, n, t, pin, &start))
        })
        .collect();
    let mut results = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => results.push(r),
            Ok(Err(e)) => {
                eprintln!("rt-client: {e}");
                return ExitCode::FAILURE;
            }
            Err(_) => return ExitCode::FAILURE,
        }
    }
    let wall = results.iter().map(|r| r.0).fold(0.0, f64::max);
    let us: f64 = results.iter().map(|r| r.0 * 1e6 / n as f64).sum::<f64>() / threads as f64;
    let cs: u64 = results.iter().map(|r| r.1).sum();
    let calls = n * threads as u64;
    println!(
        "{{\"phase\":\"{phase}\",\"threads\":{threads},\"calls\":{calls},\"us_per_call\":{us:.3},\"calls_per_s\":{:.0},\"client_cs_per_call\":{:.3}}}",
        calls as f64 / wall,
        cs as f64 / calls as f64
    );
    ExitCode::SUCCESS
}
