//! The fuzz target of `dualfs receive` (`fuzz/src/bin/stream.rs`, replayed
//! by `tests/fuzz_corpus.rs`): arbitrary bytes received as a send stream,
//! by an empty volume or by a mirror holding a base snapshot, must be
//! applied or refused with a reason, never panic; then the volume is walked
//! and closed.

use std::sync::{Arc, OnceLock};

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, SetMode, send};

use crate::workload::fixed_clock;

/// A source volume with snapshots `one` and `two`, a mirror that received
/// `one`, and the streams: (mirror meta, mirror data, full stream of one,
/// stream from one to two).
struct Base {
    meta: MemoryDevice,
    data: MemoryDevice,
    full: Vec<u8>,
    increment: Vec<u8>,
}

fn fresh() -> (Arc<MemoryDevice>, Arc<MemoryDevice>) {
    let (m, d) = (Arc::new(MemoryDevice::new(4096)), Arc::new(MemoryDevice::new(16384)));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(m.clone(), d.clone(), &opts).expect("mkfs of a memory volume");
    (m, d)
}

fn open(m: Arc<MemoryDevice>, d: Arc<MemoryDevice>) -> Option<Volume> {
    let options = crate::explorer::Config::default().mount;
    Volume::open_with_clock(m, d, options, fixed_clock()).ok()
}

fn stream(m: &Arc<MemoryDevice>, d: &Arc<MemoryDevice>, from: Option<&str>, to: &str) -> Vec<u8> {
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (m.clone(), d.clone());
    let mut out = Vec::new();
    send(m, d, from, to, &mut out).expect("send of a memory volume");
    out
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let (sm, sd) = fresh();
        let src = open(sm.clone(), sd.clone()).expect("source");
        let r = InodeNo::ROOT;
        let dir = src.mkdir(r, b"dir", 0o755, Creds::ROOT).expect("mkdir").ino;
        let f = src.create(dir, b"file", 0o644, Creds::ROOT).expect("create").ino;
        src.write(f, 0, &[5u8; 9000]).expect("write");
        src.symlink(r, b"link", b"dir/file", Creds::ROOT).expect("symlink");
        src.setxattr(f, b"user.a", b"1", SetMode::Any).expect("setxattr");
        src.snapshot_create("one").expect("snapshot");
        src.write(f, 4096, b"changed").expect("write");
        src.rename(dir, b"file", r, b"moved", Default::default()).expect("rename");
        src.unlink(r, b"link").expect("unlink");
        src.snapshot_create("two").expect("snapshot");
        src.close().expect("close");
        let full = stream(&sm, &sd, None, "one");
        let increment = stream(&sm, &sd, Some("one"), "two");
        let (mm, md) = fresh();
        let mirror = open(mm.clone(), md.clone()).expect("mirror");
        mirror.receive(&mut &full[..]).expect("receive");
        mirror.close().expect("close");
        Base { meta: mm.snapshot(), data: md.snapshot(), full, increment }
    })
}

/// Byte 0 bit 0: received by the mirror (else by an empty volume); the
/// rest is the stream.
pub fn stream_target(input: &[u8]) {
    let Some((&flags, bytes)) = input.split_first() else { return };
    let (m, d) = if flags & 1 != 0 {
        let b = base();
        (Arc::new(b.meta.snapshot()), Arc::new(b.data.snapshot()))
    } else {
        fresh()
    };
    let Some(vol) = open(m, d) else { return };
    let _ = vol.receive(&mut &bytes[..]);
    crate::fuzz::walk_public(&vol);
    let _ = vol.close();
}

/// Seeds: the real streams, each as both kinds of receiver would take it.
#[must_use]
pub fn stream_seeds() -> Vec<Vec<u8>> {
    let b = base();
    let mut out = Vec::new();
    for (flags, s) in [(0u8, &b.full), (1, &b.increment), (1, &b.full), (0, &b.increment)] {
        let mut v = vec![flags];
        v.extend_from_slice(s);
        out.push(v);
    }
    out
}
