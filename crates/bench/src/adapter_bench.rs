//! `adapter-bench`: the CPU one request costs the serving process, without
//! the kernel: the requests untar and `rm -rf` send per file (docs/FUSE.md,
//! requests per operation), decoded values handed to the adapter's
//! `dualfs_wire::Handler` and the answers encoded, on the in-memory
//! devices, one thread. Prints the median and mean nanoseconds per request
//! by opcode over all rounds: what a profile of a mount spreads over kernel
//! round trips, preemption and lock waits, measured alone
//! (docs/BENCHMARKS.md). The median is the figure to compare
//! on a busy machine: a request preempted by another tenant is an outlier
//! there, where it moves a mean.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, anyhow};
use clap::Parser;
use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::volume::{MkfsOptions, MountOptions};
use dualfs_fuse::{AdapterOptions, DualFs};
use dualfs_wire::abi::{InHeader, ReplyBuf, Request, SetattrIn, fattr};
use dualfs_wire::{Handler, Outcome};

/// The adapter's CPU per request, by opcode.
#[derive(Parser, Debug)]
struct Args {
    /// Files extracted (then removed).
    #[arg(long, default_value_t = 20_000)]
    files: u64,
    /// Files per directory (the suite's Linux tree has 20 on average, most
    /// directories small enough to keep their entries in the inode).
    #[arg(long, default_value_t = 20)]
    per_dir: u64,
    /// Rounds, each over a fresh volume.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Each request's nanoseconds, per opcode name.
type Times = BTreeMap<&'static str, Vec<u64>>;

struct Bench {
    fs: DualFs,
    out: Vec<u8>,
    times: Times,
}

impl Bench {
    /// Serves one request as a transport would and times it.
    fn call(&mut self, op: &'static str, node: u64, req: Request<'_>) -> (Outcome, u64) {
        let h = InHeader { nodeid: node, uid: 0, gid: 0, pid: 1, ..InHeader::default() };
        let mut out = ReplyBuf::new(&mut self.out);
        let t = Instant::now();
        let r = self.fs.handle(&h, req, &mut out);
        let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let first = out.as_slice().get(..8).map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])));
        self.times.entry(op).or_default().push(ns);
        (r, first)
    }
}

fn expect(what: &str, got: Outcome, want: Outcome) -> Result<()> {
    if got == want { Ok(()) } else { Err(anyhow!("{what}: {got:?}, expected {want:?}")) }
}

fn setattr(valid: u32, f: impl FnOnce(&mut SetattrIn)) -> Request<'static> {
    let mut s = SetattrIn { valid, ..SetattrIn::default() };
    f(&mut s);
    Request::Setattr(s)
}

fn round(files: u64, per_dir: u64) -> Result<Times> {
    let data_blocks = (files * 6 + 65_536).max(131_072);
    let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new((data_blocks / 4).max(32_768)));
    let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(data_blocks));
    Volume::format(meta.clone(), data.clone(), &MkfsOptions::default()).map_err(|e| anyhow!("mkfs: {e}"))?;
    let vol = Arc::new(Volume::open(meta, data, MountOptions::default()).map_err(|e| anyhow!("open: {e}"))?);
    let fs = DualFs::new(vol.clone(), AdapterOptions::default());
    // As a kernel would: ACLs and the writeback cache granted.
    fs.negotiate(u64::MAX);
    let mut b = Bench { fs, out: vec![0u8; 1 << 20], times: Times::new() };
    let payload = vec![0x5au8; 16 << 10];
    let cap = b"security.capability".as_slice();
    let mut dirs = Vec::new();
    let mut made = Vec::new();
    for i in 0..files {
        if i % per_dir.max(1) == 0 {
            let name = format!("d{}", i / per_dir.max(1));
            let (r, d) = b.call("MKDIR", 1, Request::Mkdir { mode: 0o755, umask: 0o022, name: name.as_bytes() });
            expect("mkdir", r, Outcome::Reply)?;
            dirs.push(d);
        }
        let dir = *dirs.last().ok_or_else(|| anyhow!("no directory"))?;
        let name = format!("file-{i}.c");
        let name = name.as_bytes();
        // untar, per file (docs/DESIGN.md, "FUSE adapter").
        let (r, neg) = b.call("LOOKUP", dir, Request::Lookup { name });
        expect("lookup", r, Outcome::Reply)?;
        if neg != 0 {
            return Err(anyhow!("lookup of a new name found node {neg}"));
        }
        let create = Request::Create { flags: 0o100_301, mode: 0o100_644, umask: 0o022, open_flags: 0, name };
        let (r, ino) = b.call("CREATE", dir, create);
        expect("create", r, Outcome::Reply)?;
        let (r, _) = b.call("GETXATTR", ino, Request::Getxattr { name: cap, size: 0 });
        expect("getxattr", r, Outcome::Error(libc::ENODATA))?;
        let len = 512 + (i * 7919) as usize % ((16 << 10) - 512);
        let write = Request::Write { fh: 0, offset: 0, data: &payload[..len], write_flags: 1, lock_owner: 0, flags: 0 };
        expect("write", b.call("WRITE", ino, write).0, Outcome::Reply)?;
        let times = setattr(fattr::ATIME | fattr::MTIME, |s| {
            s.atime = 1_700_000_000;
            s.mtime = 1_700_000_000;
        });
        expect("setattr", b.call("SETATTR", ino, times).0, Outcome::Reply)?;
        let (r, _) = b.call("GETXATTR", ino, Request::Getxattr { name: cap, size: 0 });
        expect("getxattr", r, Outcome::Error(libc::ENODATA))?;
        let chown = setattr(fattr::UID | fattr::GID, |s| {
            s.uid = 1000;
            s.gid = 1000;
        });
        expect("setattr", b.call("SETATTR", ino, chown).0, Outcome::Reply)?;
        let chmod = setattr(fattr::MODE, |s| s.mode = 0o100_644);
        expect("setattr", b.call("SETATTR", ino, chmod).0, Outcome::Reply)?;
        let release = Request::Release { fh: 0, flags: 0, release_flags: 0, lock_owner: 0 };
        expect("release", b.call("RELEASE", ino, release).0, Outcome::Reply)?;
        expect("getattr", b.call("GETATTR", dir, Request::Getattr { flags: 0, fh: 0 }).0, Outcome::Reply)?;
        made.push((dir, i, ino));
        // The flusher commits every few seconds; about as often here.
        if i % 2000 == 1999 {
            vol.sync().map_err(|e| anyhow!("sync: {e}"))?;
        }
    }
    vol.sync().map_err(|e| anyhow!("sync: {e}"))?;
    // rm -rf, per file: UNLINK, and the FORGET of the kernel's reference.
    for (dir, i, ino) in made {
        let name = format!("file-{i}.c");
        expect("unlink", b.call("UNLINK", dir, Request::Unlink { name: name.as_bytes() }).0, Outcome::Reply)?;
        expect("forget", b.call("FORGET", ino, Request::Forget { nlookup: 1 }).0, Outcome::NoReply)?;
    }
    b.fs.shutdown();
    Ok(b.times)
}

fn main() -> Result<()> {
    let a = Args::parse();
    let mut all = Times::new();
    for _ in 0..a.rounds.max(1) {
        for (op, ns) in round(a.files, a.per_dir)? {
            all.entry(op).or_default().extend(ns);
        }
    }
    // (requests, median, mean) per opcode.
    let rows: Vec<(&str, usize, u64, u64)> = all
        .iter_mut()
        .map(|(op, ns)| {
            ns.sort_unstable();
            let n = ns.len().max(1);
            (*op, ns.len(), ns[ns.len() / 2], ns.iter().sum::<u64>() / n as u64)
        })
        .collect();
    if a.json {
        let m: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|(op, n, med, mean)| {
                ((*op).to_string(), serde_json::json!({"count": n, "median_ns": med, "mean_ns": mean}))
            })
            .collect();
        println!("{}", serde_json::Value::Object(m));
    } else {
        println!("{:<10} {:>8} {:>10} {:>10}", "opcode", "requests", "median ns", "mean ns");
        for (op, n, med, mean) in rows {
            println!("{op:<10} {n:>8} {med:>10} {mean:>10}");
        }
    }
    Ok(())
}
