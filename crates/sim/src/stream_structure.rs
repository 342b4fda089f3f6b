//! The structural fuzz target of `dualfs receive` (`fuzz/src/bin/
//! stream_structure.rs`, replayed by `tests/fuzz_corpus.rs`): real send
//! streams taken apart into records, changed the way a crafted stream with
//! valid checksums would be (records reordered, duplicated, dropped;
//! entries pointing at wrong, missing or the root's inodes; types, link
//! counts and `..` changed; entries and gone records added), sealed again
//! with every checksum and the end record's counts right, and received.
//!
//! The oracle is the one a mirror owes its users: a stream received is a
//! consistent tree (fsck finds nothing, no receive left under way); a
//! stream refused leaves the mirror exactly as it was (every path, inode,
//! attribute but access times, byte, link and extended attribute), with
//! no receive under way and fsck clean. Anything else panics, which afl
//! counts as a crash.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::format::stream::{self, FRAME_CRC_LEN, FRAME_HEAD_LEN, PRELUDE_LEN, Record, StreamCounts};
use dualfs_engine::types::{FileKind, InodeNo};
use dualfs_engine::volume::{Creds, MkfsOptions, RECEIVING_XATTR, RenameFlags, SetMode, send};

use crate::workload::fixed_clock;

/// The records of a stream, its end record included.
///
/// # Panics
/// A stream that does not decode (the real streams this is given do).
#[must_use]
pub fn records_of(s: &[u8]) -> Vec<Record> {
    let mut out = Vec::new();
    let prelude: &[u8; PRELUDE_LEN] = s[..PRELUDE_LEN].try_into().expect("a real stream's prelude");
    let version = stream::check_prelude(prelude).expect("a real stream's prelude");
    let mut at = PRELUDE_LEN;
    while at + FRAME_HEAD_LEN <= s.len() {
        let mut head = [0u8; FRAME_HEAD_LEN];
        head.copy_from_slice(&s[at..at + FRAME_HEAD_LEN]);
        let len = stream::frame_len(&head).expect("a real stream's frame");
        let end = at + FRAME_HEAD_LEN + len + FRAME_CRC_LEN;
        out.push(stream::decode(version, &head, &s[at + FRAME_HEAD_LEN..end]).expect("a real stream's record"));
        at = end;
    }
    out
}

/// A stream of `records` (any end record among them left out), with an
/// end record counting them and every frame sealed: what a sender with
/// its own ideas would write.
#[must_use]
pub fn seal(records: &[Record]) -> Vec<u8> {
    let mut out = stream::prelude().to_vec();
    let mut c = StreamCounts::default();
    for rec in records.iter().filter(|r| !matches!(r, Record::End(_))) {
        match rec {
            Record::Inode(_) => c.inodes += 1,
            Record::Gone(_) => c.gone += 1,
            Record::Write { data, .. } => c.data_bytes += data.len() as u64,
            _ => {}
        }
        c.records += 1;
        out.extend_from_slice(&stream::encode(rec));
    }
    out.extend_from_slice(&stream::encode(&Record::End(c)));
    out
}

/// A source with two snapshots whose difference has structure (a
/// directory moved, one removed with its files, hard links, a name taken
/// by another type, a symlink, a device node), a mirror that received the
/// first, and the two streams.
struct Source {
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

fn open(m: Arc<MemoryDevice>, d: Arc<MemoryDevice>) -> Volume {
    let options = crate::explorer::Config::default().mount;
    Volume::open_with_clock(m, d, options, fixed_clock()).expect("open of a memory volume")
}

fn stream_of(m: &Arc<MemoryDevice>, d: &Arc<MemoryDevice>, from: Option<&str>, to: &str) -> Vec<u8> {
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (m.clone(), d.clone());
    let mut out = Vec::new();
    send(m, d, from, to, &mut out).expect("send of a memory volume");
    out
}

/// The first snapshot's tree of the structural target's source.
pub fn populate(v: &Volume) {
    let r = InodeNo::ROOT;
    let c = Creds::ROOT;
    let a = v.mkdir(r, b"a", 0o755, c).expect("mkdir").ino;
    let b = v.mkdir(a, b"b", 0o750, c).expect("mkdir").ino;
    let f = v.create(b, b"f", 0o644, c).expect("create").ino;
    v.write(f, 0, &[7u8; 6000]).expect("write");
    v.link(f, a, b"hard").expect("link");
    v.symlink(a, b"s", b"b/f", c).expect("symlink");
    v.mknod(r, b"fifo", FileKind::Fifo, 0o600, 0, c).expect("mknod");
    let g = v.mkdir(r, b"gone", 0o700, c).expect("mkdir").ino;
    for i in 0..3u8 {
        let x = v.create(g, &[b'x', b'0' + i], 0o600, c).expect("create").ino;
        v.write(x, 0, &[i; 100]).expect("write");
    }
    v.setxattr(f, b"user.k", b"v", SetMode::Any).expect("setxattr");
}

/// What changes between the two snapshots of the structural target's source.
pub fn change(v: &Volume) {
    let r = InodeNo::ROOT;
    let c = Creds::ROOT;
    let lookup = |d: InodeNo, n: &[u8]| v.lookup(d, n).expect("lookup").ino;
    let a = lookup(r, b"a");
    let g = lookup(r, b"gone");
    // A directory moves up; another goes with its files.
    v.rename(a, b"b", r, b"b2", RenameFlags::default()).expect("rename");
    for i in 0..3u8 {
        v.unlink(g, &[b'x', b'0' + i]).expect("unlink");
    }
    v.rmdir(r, b"gone").expect("rmdir");
    // A name taken by another type; a new hard link; a new nested tree.
    v.unlink(r, b"fifo").expect("unlink");
    v.mkdir(r, b"fifo", 0o755, c).expect("mkdir");
    let f = lookup(lookup(r, b"b2"), b"f");
    v.link(f, r, b"third").expect("link");
    let n = v.mkdir(a, b"new", 0o755, c).expect("mkdir").ino;
    let m = v.mkdir(n, b"deeper", 0o755, c).expect("mkdir").ino;
    let y = v.create(m, b"y", 0o644, c).expect("create").ino;
    v.write(y, 0, b"new bytes").expect("write");
    v.unlink(a, b"s").expect("unlink");
}

fn source() -> &'static Source {
    static SOURCE: OnceLock<Source> = OnceLock::new();
    SOURCE.get_or_init(|| {
        let (sm, sd) = fresh();
        let src = open(sm.clone(), sd.clone());
        populate(&src);
        src.snapshot_create("one").expect("snapshot");
        change(&src);
        src.snapshot_create("two").expect("snapshot");
        src.close().expect("close");
        let full = stream_of(&sm, &sd, None, "one");
        let increment = stream_of(&sm, &sd, Some("one"), "two");
        let (mm, md) = fresh();
        let mirror = open(mm.clone(), md.clone());
        mirror.receive(&mut &full[..]).expect("receive");
        mirror.close().expect("close");
        Source { meta: mm.snapshot(), data: md.snapshot(), full, increment }
    })
}

/// Everything a user of the tree sees but access times, by path (and the
/// snapshots, by name).
#[must_use]
pub fn digest(vol: &Volume) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![(String::new(), InodeNo::ROOT)];
    let mut budget = 4000usize;
    while let Some((path, ino)) = todo.pop() {
        budget = budget.saturating_sub(1);
        if budget == 0 {
            out.insert("!".into(), "walk cut short".into());
            break;
        }
        let Ok(a) = vol.getattr(ino) else {
            out.insert(path, format!("{ino} cannot be read"));
            continue;
        };
        let content = match a.kind {
            FileKind::Regular => format!("{:?}", vol.read(ino, 0, a.size.min(1 << 20) as usize).ok()),
            FileKind::Symlink => format!("{:?}", vol.readlink(ino).ok()),
            FileKind::Directory => {
                let mut names = Vec::new();
                let _ = vol.readdir(ino, 0, &mut |l| {
                    if l.name != b"." && l.name != b".." {
                        names.push((l.name, l.ino));
                    }
                    names.len() < 1000
                });
                names.sort();
                for (n, child) in &names {
                    if a.kind == FileKind::Directory {
                        todo.push((format!("{path}/{}", String::from_utf8_lossy(n)), *child));
                    }
                }
                format!("{names:?}")
            }
            _ => String::new(),
        };
        let mut x: Vec<(Vec<u8>, Option<Vec<u8>>)> = vol
            .listxattr(ino)
            .unwrap_or_default()
            .into_iter()
            .map(|n| {
                let v = vol.getxattr(ino, &n).ok();
                (n, v)
            })
            .collect();
        x.sort();
        out.insert(
            path,
            format!(
                "{} {} {:?} {:o} {} {} {} {} {} {:?} {:?} {content} {x:?}",
                a.ino.0, a.generation, a.kind, a.perm, a.uid, a.gid, a.nlink, a.size, a.rdev, a.mtime, a.ctime
            ),
        );
    }
    let snaps: Vec<String> = vol.snapshot_list().into_iter().map(|s| s.name).collect();
    out.insert("@snapshots".into(), format!("{snaps:?}"));
    out
}

/// A number for a record to name: one the stream or the mirror uses, the
/// root, or one nobody uses, as `b` picks.
fn pick_ino(records: &[Record], b: u8) -> InodeNo {
    let mut known: Vec<InodeNo> = records
        .iter()
        .filter_map(|r| match r {
            Record::Inode(a) => Some(a.ino),
            Record::Gone(i) => Some(*i),
            Record::Link { ino, .. } => Some(*ino),
            _ => None,
        })
        .collect();
    known.sort_unstable();
    known.dedup();
    match b % 8 {
        0 => InodeNo::ROOT,
        1 => InodeNo(9999),
        _ if known.is_empty() => InodeNo(2),
        _ => known[usize::from(b) % known.len()],
    }
}

const KINDS: [FileKind; 7] = [
    FileKind::Regular,
    FileKind::Directory,
    FileKind::Symlink,
    FileKind::Fifo,
    FileKind::Socket,
    FileKind::CharDevice,
    FileKind::BlockDevice,
];

/// Positions of the records matching `f`, the header aside.
fn positions(records: &[Record], f: impl Fn(&Record) -> bool) -> Vec<usize> {
    records.iter().enumerate().skip(1).filter(|(_, r)| f(r)).map(|(i, _)| i).collect()
}

/// Applies one mutation, `[op, a, b, c]`, to the records (the header, at
/// 0, stays: a stream the mirror's base checks refuse tells nothing).
pub fn mutate(records: &mut Vec<Record>, op: [u8; 4]) {
    let [op, a, b, c] = op;
    let n = records.len();
    if n < 2 {
        return;
    }
    let at = |x: u8| 1 + usize::from(x) % (n - 1);
    let nth = |records: &[Record], f: &dyn Fn(&Record) -> bool, x: u8| {
        let p = positions(records, f);
        (!p.is_empty()).then(|| p[usize::from(x) % p.len()])
    };
    let is_link = |r: &Record| matches!(r, Record::Link { .. });
    let is_inode = |r: &Record| matches!(r, Record::Inode(_));
    let is_dir = |r: &Record| matches!(r, Record::Inode(x) if x.kind() == Some(FileKind::Directory));
    let target = pick_ino(records, b);
    match op % 12 {
        0 => records.swap(at(a), at(b)),
        1 => {
            let r = records[at(a)].clone();
            records.insert(at(b), r);
        }
        2 => {
            records.remove(at(a));
        }
        3 => {
            if let Some(i) = nth(records, &is_link, a)
                && let Record::Link { ino, .. } = &mut records[i]
            {
                *ino = target;
            }
        }
        4 => {
            if let Some(i) = nth(records, &is_link, a)
                && let Record::Link { kind, .. } = &mut records[i]
            {
                *kind = KINDS[usize::from(c) % KINDS.len()];
            }
        }
        5 => {
            if let Some(i) = nth(records, &is_inode, a)
                && let Record::Inode(x) = &mut records[i]
            {
                x.mode = KINDS[usize::from(c) % KINDS.len()].mode_bits() | (x.mode & 0o7777);
            }
        }
        6 => {
            if let Some(i) = nth(records, &is_inode, a)
                && let Record::Inode(x) = &mut records[i]
            {
                x.nlink = u32::from(c % 6);
            }
        }
        7 => {
            if let Some(i) = nth(records, &is_inode, a)
                && let Record::Inode(x) = &mut records[i]
            {
                x.parent = target;
            }
        }
        8 => {
            if let Some(i) = nth(records, &is_dir, a) {
                let kind = records.iter().find_map(|r| match r {
                    Record::Inode(x) if x.ino == target => x.kind(),
                    _ => None,
                });
                let name = format!("extra-{c}").into_bytes();
                records.insert(i + 1, Record::Link { name, ino: target, kind: kind.unwrap_or(FileKind::Regular) });
            }
        }
        9 => {
            // The name of some entry, removed in some directory's section.
            let name = nth(records, &is_link, c).and_then(|i| match &records[i] {
                Record::Link { name, .. } => Some(name.clone()),
                _ => None,
            });
            if let (Some(i), Some(name)) = (nth(records, &is_dir, a), name) {
                records.insert(i + 1, Record::Unlink { name });
            }
        }
        10 => {
            if target != InodeNo::ROOT {
                records.insert(at(a), Record::Gone(target));
            }
        }
        _ => {
            if let Some(i) = nth(records, &is_inode, a)
                && let Record::Inode(x) = &mut records[i]
            {
                x.generation = x.generation.wrapping_add(u32::from(c) + 1);
            }
        }
    }
}

/// Byte 0: bit 0 picks the increment received by the mirror (else the
/// full stream by an empty volume); then up to 16 mutations of 4 bytes.
pub fn structure_target(input: &[u8]) {
    let Some((&flags, ops)) = input.split_first() else { return };
    let src = source();
    let base = if flags & 1 != 0 { &src.increment } else { &src.full };
    let mut records = records_of(base);
    for op in ops.chunks_exact(4).take(16) {
        mutate(&mut records, [op[0], op[1], op[2], op[3]]);
    }
    let bytes = seal(&records);
    let (m, d) = if flags & 1 != 0 { (Arc::new(src.meta.snapshot()), Arc::new(src.data.snapshot())) } else { fresh() };
    let vol = open(m.clone(), d.clone());
    let before = digest(&vol);
    let out = vol.receive(&mut &bytes[..]);
    let pending = vol.getxattr(InodeNo::ROOT, RECEIVING_XATTR).is_ok();
    assert!(!pending, "a receive ({out:?}) left a receive under way");
    if let Err(e) = &out {
        let after = digest(&vol);
        if after != before {
            let diff: Vec<_> = after.iter().filter(|(k, v)| before.get(*k) != Some(v)).collect();
            let lost: Vec<_> = before.keys().filter(|k| !after.contains_key(*k)).collect();
            panic!("a refused stream ({e}) changed the mirror: {diff:#?}, gone: {lost:?}");
        }
    }
    vol.close().expect("close");
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (m, d);
    let found = dualfs_engine::check::check(m, d).expect("fsck opens the volume");
    assert!(found.receiving.is_none(), "fsck finds a receive under way after {out:?}");
    assert!(found.problems.is_empty(), "after {out:?}, fsck: {:#?}", found.problems);
}

/// Seeds: each real stream for each receiver, unchanged, then with one
/// mutation of each kind.
#[must_use]
pub fn structure_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for flags in [0u8, 1] {
        out.push(vec![flags]);
        for op in 0..12u8 {
            out.push(vec![flags, op, 3, 5, 7]);
        }
    }
    out
}
