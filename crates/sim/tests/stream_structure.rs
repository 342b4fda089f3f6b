//! Crafted streams with valid checksums: real streams whose records were
//! changed, added, dropped or moved, every frame sealed again and the end
//! record's counts right. A receive must refuse each that would leave an
//! inconsistent tree, and leave the mirror as it was; what it accepts is a
//! tree fsck finds consistent. The cases a user met first (a directory
//! linked twice, an entry naming the root, an inode the stream never
//! creates, an entry whose type disagrees with its inode), then link
//! counts, `..`, a cycle, and seeded random structural mutations
//! (`dualfs_sim::stream_structure`, the `stream_structure` fuzz target).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::format::stream::Record;
use dualfs_engine::types::{FileKind, InodeNo};
use dualfs_engine::volume::{Creds, MkfsOptions, RECEIVING_XATTR, SetMode, send};
use dualfs_sim::rng::Rng;
use dualfs_sim::stream_structure::{digest, mutate, records_of, seal, structure_target};
use dualfs_sim::workload::fixed_clock;

fn fresh() -> (Arc<MemoryDevice>, Arc<MemoryDevice>) {
    let (m, d) = (Arc::new(MemoryDevice::new(4096)), Arc::new(MemoryDevice::new(16384)));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(m.clone(), d.clone(), &opts).unwrap();
    (m, d)
}

fn open(m: &Arc<MemoryDevice>, d: &Arc<MemoryDevice>) -> Volume {
    let options = dualfs_sim::explorer::Config::default().mount;
    Volume::open_with_clock(m.clone(), d.clone(), options, fixed_clock()).unwrap()
}

/// The full stream of a small tree: /a (a directory) holding /a/b (a
/// directory) holding f (two names: /a/b/f and /a/hard), and a fifo /p.
fn full_stream() -> Vec<u8> {
    let (m, d) = fresh();
    let v = open(&m, &d);
    let r = InodeNo::ROOT;
    let a = v.mkdir(r, b"a", 0o755, Creds::ROOT).unwrap().ino;
    let b = v.mkdir(a, b"b", 0o755, Creds::ROOT).unwrap().ino;
    let f = v.create(b, b"f", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &[1u8; 5000]).unwrap();
    v.link(f, a, b"hard").unwrap();
    v.mknod(r, b"p", FileKind::Fifo, 0o600, 0, Creds::ROOT).unwrap();
    v.setxattr(f, b"user.x", b"y", SetMode::Any).unwrap();
    v.snapshot_create("s").unwrap();
    v.close().unwrap();
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (m, d);
    let mut out = Vec::new();
    send(m, d, None, "s", &mut out).unwrap();
    out
}

/// The inode record of the path's last name, found by the link records.
fn ino_of(records: &[Record], name: &[u8]) -> InodeNo {
    records
        .iter()
        .find_map(|r| match r {
            Record::Link { name: n, ino, .. } if n == name => Some(*ino),
            _ => None,
        })
        .unwrap()
}

/// Where the section of inode `ino` starts.
fn section(records: &[Record], ino: InodeNo) -> usize {
    records.iter().position(|r| matches!(r, Record::Inode(a) if a.ino == ino)).unwrap()
}

fn attrs(records: &mut [Record], ino: InodeNo) -> &mut dualfs_engine::format::stream::InodeAttrs {
    let i = section(records, ino);
    match &mut records[i] {
        Record::Inode(a) => a,
        _ => unreachable!(),
    }
}

/// Receives `records` on an empty volume: refused with a message holding
/// `why`, the volume as it was, no receive under way, fsck clean; then
/// the genuine stream is received.
fn refused(records: &[Record], why: &str) {
    let (m, d) = fresh();
    let vol = open(&m, &d);
    let before = digest(&vol);
    let e = vol.receive(&mut &seal(records)[..]).unwrap_err();
    assert!(e.to_string().contains(why), "expected {why:?}: {e}");
    assert!(e.to_string().contains("as it was"), "{e}");
    assert_eq!(digest(&vol), before, "the refused stream ({e}) changed the volume");
    assert!(vol.getxattr(InodeNo::ROOT, RECEIVING_XATTR).is_err());
    vol.receive(&mut &full_stream()[..]).unwrap();
    vol.close().unwrap();
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (m, d);
    let found = dualfs_engine::check::check(m, d).unwrap();
    assert!(found.problems.is_empty() && found.receiving.is_none(), "{:#?}", found.problems);
}

#[test]
fn the_genuine_stream_is_received() {
    let mut records = records_of(&full_stream());
    records.pop();
    let (m, d) = fresh();
    let vol = open(&m, &d);
    vol.receive(&mut &seal(&records)[..]).unwrap();
}

#[test]
fn a_directory_linked_twice_is_refused() {
    let mut r = records_of(&full_stream());
    let b = ino_of(&r, b"b");
    let at = section(&r, InodeNo::ROOT) + 1;
    r.insert(at, Record::Link { name: b"again".to_vec(), ino: b, kind: FileKind::Directory });
    // The root's count of subdirectories follows, so that only the second
    // name is wrong.
    attrs(&mut r, InodeNo::ROOT).nlink += 1;
    refused(&r, &format!("directory {b} has 2 names"));
}

#[test]
fn an_entry_naming_the_root_is_refused() {
    let mut r = records_of(&full_stream());
    let a = ino_of(&r, b"a");
    let at = section(&r, a) + 1;
    r.insert(at, Record::Link { name: b"up".to_vec(), ino: InodeNo::ROOT, kind: FileKind::Directory });
    refused(&r, "names the root directory");
}

#[test]
fn an_entry_naming_an_inode_the_stream_never_creates_is_refused() {
    let mut r = records_of(&full_stream());
    let at = section(&r, InodeNo::ROOT) + 1;
    r.insert(at, Record::Link { name: b"ghost".to_vec(), ino: InodeNo(4000), kind: FileKind::Regular });
    refused(&r, "inode 4000, which the stream removes or never creates");
}

#[test]
fn an_entry_whose_type_disagrees_with_its_inode_is_refused() {
    let mut r = records_of(&full_stream());
    for x in &mut r {
        if let Record::Link { name, kind, .. } = x
            && name == b"p"
        {
            *kind = FileKind::Regular;
        }
    }
    refused(&r, "as a regular file, but it is a fifo");
    // An entry naming an inode the stream has passed: refused at once.
    let mut r = records_of(&full_stream());
    let (a, b) = (ino_of(&r, b"a"), ino_of(&r, b"b"));
    let at = section(&r, b) + 1;
    r.insert(at, Record::Link { name: b"back".to_vec(), ino: a, kind: FileKind::Regular });
    refused(&r, &format!("names inode {a} as a regular file, but it is a directory"));
}

#[test]
fn a_wrong_link_count_is_refused() {
    let mut r = records_of(&full_stream());
    let f = ino_of(&r, b"f");
    attrs(&mut r, f).nlink = 3;
    refused(&r, &format!("inode {f} has link count 3 but 2 names"));
    let mut r = records_of(&full_stream());
    let a = ino_of(&r, b"a");
    attrs(&mut r, a).nlink = 2;
    refused(&r, &format!("directory {a} has link count 2"));
}

#[test]
fn a_wrong_dotdot_is_refused() {
    let mut r = records_of(&full_stream());
    let b = ino_of(&r, b"b");
    attrs(&mut r, b).parent = InodeNo::ROOT;
    refused(&r, &format!("directory {b} lives in"));
}

#[test]
fn a_cycle_of_directories_is_refused() {
    // /a holds b; b is made to hold a, and the root to hold nothing of a.
    let mut r = records_of(&full_stream());
    let a = ino_of(&r, b"a");
    let b = ino_of(&r, b"b");
    r.retain(|x| !matches!(x, Record::Link { name, .. } if name == b"a"));
    attrs(&mut r, InodeNo::ROOT).nlink -= 1;
    attrs(&mut r, a).parent = b;
    attrs(&mut r, b).nlink += 1;
    let at = section(&r, b) + 1;
    r.insert(at, Record::Link { name: b"loop".to_vec(), ino: a, kind: FileKind::Directory });
    refused(&r, "cycle");
}

#[test]
fn records_duplicated_dropped_or_moved_are_refused_or_harmless() {
    let r = records_of(&full_stream());
    let n = r.len() - 1;
    for i in 1..n {
        for op in 0..3u8 {
            let mut m = r.clone();
            mutate(&mut m, [op, (i - 1) as u8, (i % (n - 1)) as u8, 0]);
            let (dm, dd) = fresh();
            let vol = open(&dm, &dd);
            let before = digest(&vol);
            match vol.receive(&mut &seal(&m)[..]) {
                Ok(_) => {}
                Err(e) => assert_eq!(digest(&vol), before, "op {op} on record {i}: {e}"),
            }
            vol.close().unwrap();
            let (dm, dd): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (dm, dd);
            let found = dualfs_engine::check::check(dm, dd).unwrap();
            assert!(found.problems.is_empty(), "op {op} on record {i}: {:#?}", found.problems);
        }
    }
}

/// Seeded random structural mutations of the fuzz target's streams, each
/// through its oracle. `DUALFS_STRUCTURE_SEED` replays one seed;
/// `DUALFS_STRUCTURE_CASES` sets how many (default 300).
#[test]
fn random_structural_mutations_are_received_consistent_or_refused_whole() {
    let cases: u64 = std::env::var("DUALFS_STRUCTURE_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let seeds: Vec<u64> = match std::env::var("DUALFS_STRUCTURE_SEED").ok().and_then(|v| v.parse().ok()) {
        Some(s) => vec![s],
        None => (0..cases).map(|i| 0x5712_0000 + i).collect(),
    };
    for seed in seeds {
        let mut rng = Rng::new(seed);
        let mut input = vec![(seed & 1) as u8];
        for _ in 0..=rng.below(5) {
            input.extend_from_slice(&rng.next_u64().to_le_bytes()[..4]);
        }
        let run = std::panic::catch_unwind(|| structure_target(&input));
        assert!(run.is_ok(), "DUALFS_STRUCTURE_SEED={seed} (input {input:02x?}) fails");
    }
}
