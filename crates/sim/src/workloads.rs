//! The workloads the crash explorer runs: every short sequence over a small
//! namespace (the ACE approach of CrashMonkey), and named patterns: creates,
//! appends, overwrites, truncates, renames across directories, hard links,
//! unlink-while-open, deep trees, and the fsync patterns of the
//! journaling-analysis paper.

use crate::rng::Rng;
use crate::workload::{Step, Workload};

pub use discard::discards;

mod discard;
mod flags;
mod quota;
pub use quota::quotas;
mod inline;
mod mirror;
pub use mirror::mirrors;
mod ranges;
mod resize;
mod streams;
mod whiteout;
pub use ranges::ranges;

/// The inode-flag patterns alone (they are among [`patterns`] too).
#[must_use]
pub fn inode_flags() -> Vec<Workload> {
    flags::patterns()
}
pub use resize::{resizes, shrink_data, shrink_meta};
pub use whiteout::whiteouts;

mod trees;
pub use trees::{clones, snapshot_held_count, snapshots, trees_beside, trees_turns};

fn s(p: &str) -> String {
    p.to_string()
}

fn write(p: &str, offset: u64, len: u32) -> Step {
    Step::Write { path: s(p), offset, len }
}

/// What every workload starts from: directories `A` and `B`, `A/foo` of
/// 12 KiB on the data device, `B/bar` of 600 bytes kept inline; synced.
#[must_use]
pub fn setup() -> Vec<Step> {
    vec![
        Step::Mkdir(s("A")),
        Step::Mkdir(s("B")),
        Step::Create(s("A/foo")),
        write("A/foo", 0, 12288),
        Step::Create(s("B/bar")),
        write("B/bar", 0, 600),
        Step::Sync,
    ]
}

/// The operations of the ACE sequences, by short name.
fn ace_ops() -> Vec<(&'static str, Step)> {
    vec![
        ("creat", Step::Create(s("A/bar"))),
        ("append", write("A/foo", 12288, 5000)),
        ("overwrite", write("A/foo", 1000, 3000)),
        ("grow", write("B/bar", 0, 2500)),
        ("trunc", Step::Truncate { path: s("A/foo"), size: 2000 }),
        ("unlink", Step::Unlink(s("A/foo"))),
        ("mv", Step::Rename { from: s("A/foo"), to: s("B/foo") }),
        ("mvover", Step::Rename { from: s("B/bar"), to: s("A/foo") }),
        ("link", Step::Link { from: s("A/foo"), to: s("B/foo") }),
        ("mvdir", Step::Rename { from: s("A"), to: s("B/C") }),
        ("mkdir", Step::Mkdir(s("A/C"))),
        ("xattr", Step::SetXattr { path: s("A/foo"), len: 100 }),
        ("fsync", Step::Fsync(s("A/foo"))),
        ("fsyncdir", Step::Fsync(s("B"))),
        ("sync", Step::Sync),
    ]
}

/// Every sequence of one, two or three operations of the alphabet, each
/// closed by a persistence point (fsync of `B` or sync).
#[must_use]
pub fn ace() -> Vec<Workload> {
    let ops = ace_ops();
    let mut seqs: Vec<Vec<usize>> = Vec::new();
    for a in 0..ops.len() {
        seqs.push(vec![a]);
    }
    for a in 0..ops.len() {
        for b in 0..ops.len() {
            seqs.push(vec![a, b]);
        }
    }
    for a in 0..ops.len() {
        for b in 0..ops.len() {
            for c in 0..ops.len() {
                seqs.push(vec![a, b, c]);
            }
        }
    }
    seqs.into_iter()
        .enumerate()
        .map(|(i, seq)| {
            let mut steps: Vec<Step> = seq.iter().map(|&k| ops[k].1.clone()).collect();
            let end = if i % 2 == 0 { Step::Fsync(s("B")) } else { Step::Sync };
            steps.push(end);
            let names: Vec<&str> = seq.iter().map(|&k| ops[k].0).collect();
            Workload { name: format!("ace/{}", names.join("-")), steps, scale: 1 }
        })
        .collect()
}

fn pattern(name: &str, steps: Vec<Step>) -> Workload {
    Workload { name: format!("pattern/{name}"), steps, scale: 12 }
}

/// Random writes over a 256 KiB file with an fsync every `every` writes.
fn random_writes(seed: u64, writes: usize, every: usize) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let mut steps = vec![Step::Create(s("A/r"))];
    for i in 0..writes {
        let offset = rng.below(64) * 4096 + rng.below(2) * rng.below(4096);
        let len = 512 + rng.below(8192) as u32;
        steps.push(write("A/r", offset, len));
        if (i + 1) % every == 0 {
            steps.push(Step::Fsync(s("A/r")));
        }
    }
    steps
}

/// The named patterns.
#[must_use]
pub fn patterns() -> Vec<Workload> {
    let mut out = Vec::new();
    // Creates, with fsyncs between batches.
    let mut steps = Vec::new();
    for i in 0..24 {
        steps.push(Step::Create(format!("A/f{i}")));
        if i % 6 == 5 {
            steps.push(Step::Fsync(s("A")));
        }
    }
    out.push(pattern("creates", steps));
    // Appends in small pieces, fsync every fourth.
    let mut steps = Vec::new();
    for i in 0..20u64 {
        steps.push(write("A/foo", 12288 + i * 1500, 1500));
        if i % 4 == 3 {
            steps.push(Step::Fsync(s("A/foo")));
        }
    }
    out.push(pattern("appends", steps));
    out.extend(inline::patterns());
    out.extend(flags::patterns());
    // Overwrites in place, each fsync'd, and without fsync.
    let steps = (0..8u64).flat_map(|i| [write("A/foo", (i * 1531) % 10000, 2048), Step::Fsync(s("A/foo"))]).collect();
    out.push(pattern("overwrites-fsync", steps));
    let mut steps: Vec<Step> = (0..8u64).map(|i| write("A/foo", (i * 2711) % 10000, 1800)).collect();
    steps.push(Step::Sync);
    out.push(pattern("overwrites", steps));
    // Remount read-only and back (mount -o remount,ro): the switch makes
    // what came before it durable, as sync does, and refuses changes.
    let mut steps: Vec<Step> = (0..6u64).map(|i| write("A/foo", (i * 2711) % 10000, 1800)).collect();
    steps.extend([
        Step::Create(s("B/new")),
        write("B/new", 0, 5000),
        Step::RemountRo,
        Step::RemountRw,
        write("A/foo", 100, 700),
        Step::Unlink(s("B/bar")),
        Step::RemountRo,
        Step::RemountRw,
    ]);
    out.push(pattern("remount", steps));
    // Truncates down and up, with writes between.
    out.push(pattern(
        "truncates",
        vec![
            Step::Truncate { path: s("A/foo"), size: 5000 },
            Step::Fsync(s("A/foo")),
            write("A/foo", 9000, 3000),
            Step::Truncate { path: s("A/foo"), size: 100 },
            Step::Fsync(s("A/foo")),
            Step::Truncate { path: s("A/foo"), size: 20000 },
            write("A/foo", 4096, 4096),
            Step::Fsync(s("A/foo")),
            Step::Truncate { path: s("A/foo"), size: 0 },
            Step::Create(s("B/new")),
            write("B/new", 0, 16384),
            Step::Fsync(s("B/new")),
        ],
    ));
    // Renames across directories, over existing names, of directories.
    out.push(pattern(
        "renames",
        vec![
            Step::Rename { from: s("A/foo"), to: s("B/foo") },
            Step::Fsync(s("B")),
            Step::Rename { from: s("B/foo"), to: s("B/bar") },
            Step::Create(s("A/x")),
            write("A/x", 0, 5000),
            Step::Rename { from: s("A/x"), to: s("B/x") },
            Step::Fsync(s("B/x")),
            Step::Mkdir(s("A/D")),
            Step::Rename { from: s("B/x"), to: s("A/D/x") },
            Step::Rename { from: s("A/D"), to: s("B/D") },
            Step::Sync,
            Step::Rename { from: s("B/D/x"), to: s("A/y") },
            Step::Fsync(s("A/y")),
        ],
    ));
    // Replace-by-rename without fsync, as editors save: the new file's data
    // goes with the commit that makes the rename durable (never an empty
    // or cut file under the old name), over a file on the data device and
    // over an inline one.
    out.push(pattern(
        "replace-by-rename",
        vec![
            Step::Create(s("B/foo.tmp")),
            write("B/foo.tmp", 0, 10000),
            Step::Rename { from: s("B/foo.tmp"), to: s("A/foo") },
            Step::Tick,
            Step::Create(s("B/after")),
            write("B/after", 0, 5000),
            Step::Tick,
            Step::Create(s("A/bar.tmp")),
            write("A/bar.tmp", 0, 9000),
            Step::Rename { from: s("A/bar.tmp"), to: s("B/bar") },
            Step::Create(s("A/more")),
            Step::Tick,
            Step::Mkdir(s("B/z")),
            Step::Tick,
        ],
    ));
    // Replace by truncation (open with O_TRUNC, write, close): periodic
    // commits between the truncation and the close keep the old contents.
    out.push(pattern(
        "replace-by-truncation",
        vec![
            Step::Open { path: s("A/foo"), h: 0 },
            Step::Truncate { path: s("A/foo"), size: 0 },
            Step::WriteOpen { h: 0, offset: 0, len: 5000 },
            Step::Create(s("B/x")),
            Step::Tick,
            Step::WriteOpen { h: 0, offset: 5000, len: 4000 },
            Step::Tick,
            Step::Close(0),
            Step::Create(s("B/y")),
            Step::Tick,
            Step::Truncate { path: s("B/bar"), size: 0 },
            write("B/bar", 0, 300),
            Step::Tick,
            Step::Create(s("B/z")),
            Step::Tick,
        ],
    ));
    // Hard links: add, drop the first name, drop the last.
    out.push(pattern(
        "links",
        vec![
            Step::Link { from: s("A/foo"), to: s("B/foo") },
            Step::Link { from: s("A/foo"), to: s("A/foo2") },
            Step::Fsync(s("A/foo")),
            Step::Unlink(s("A/foo")),
            write("B/foo", 0, 4096),
            Step::Fsync(s("B/foo")),
            Step::Unlink(s("B/foo")),
            Step::Unlink(s("A/foo2")),
            Step::Fsync(s("A")),
        ],
    ));
    // Unlink while open: the file lives until closed; a crash leaves an orphan.
    for close in [false, true] {
        let mut steps = vec![
            Step::Open { path: s("A/foo"), h: 0 },
            Step::Unlink(s("A/foo")),
            Step::WriteOpen { h: 0, offset: 12288, len: 9000 },
            Step::FsyncOpen(0),
            Step::Create(s("A/other")),
            write("A/other", 0, 8192),
        ];
        if close {
            steps.push(Step::Close(0));
        }
        steps.push(Step::Fsync(s("A/other")));
        out.push(pattern(if close { "unlink-open-close" } else { "unlink-open" }, steps));
    }
    // O_TMPFILE: an unnamed file, an orphan from birth, written, made
    // durable by a commit, then dropped at close or given a name.
    for linked in [false, true] {
        let mut steps = vec![
            Step::Tmpfile { dir: s("A"), h: 0 },
            Step::WriteOpen { h: 0, offset: 0, len: 20000 },
            Step::FsyncOpen(0),
            Step::Create(s("A/other")),
            write("A/other", 0, 8192),
            Step::Fsync(s("A/other")),
        ];
        if linked {
            steps.push(Step::LinkOpen { h: 0, to: s("B/named") });
            steps.push(Step::FsyncOpen(0));
        }
        steps.extend([Step::Close(0), Step::Tick]);
        out.push(pattern(if linked { "tmpfile-linked" } else { "tmpfile-dropped" }, steps));
    }
    // A deep tree, a file at its bottom, then its top moved.
    let mut steps = Vec::new();
    let mut path = s("A");
    for i in 0..10 {
        path = format!("{path}/d{i}");
        steps.push(Step::Mkdir(path.clone()));
    }
    let file = format!("{path}/deep");
    steps.extend([
        Step::Create(file.clone()),
        write(&file, 0, 7000),
        Step::Fsync(file),
        Step::Rename { from: s("A/d0"), to: s("B/d0") },
        Step::Fsync(s("B")),
        Step::SetXattr { path: s("B/d0/d1"), len: 700 },
        Step::Sync,
    ]);
    out.push(pattern("deep-tree", steps));
    // Journaling-analysis fsync patterns.
    let mut steps = vec![Step::Create(s("A/seq"))];
    steps.extend((0..24u64).map(|i| write("A/seq", i * 4096, 4096)));
    steps.push(Step::Fsync(s("A/seq")));
    out.push(pattern("sequential-then-fsync", steps));
    out.push(pattern("random-fsync-each", random_writes(1, 16, 1)));
    out.push(pattern("random-fsync-every-4", random_writes(2, 24, 4)));
    out.push(pattern("random-fsync-every-16", random_writes(3, 32, 16)));
    let mut steps = vec![Step::Create(s("A/w1")), Step::Create(s("B/w2"))];
    for i in 0..12u64 {
        steps.push(write("A/w1", i * 3000, 3000));
        steps.push(write("B/w2", i * 5000, 5000));
        if i % 3 == 2 {
            steps.push(Step::Fsync(s("A/w1")));
        }
    }
    steps.push(Step::Fsync(s("B/w2")));
    out.push(pattern("two-writers", steps));
    // Periodic work between writes: commits and checkpoints mid-workload,
    // so that cuts fall inside checkpoints (a torn slot falls back).
    let mut steps = Vec::new();
    for i in 0..16u64 {
        steps.push(Step::Create(format!("B/t{i}")));
        steps.push(write(&format!("B/t{i}"), 0, 3000 + (i as u32) * 700));
        steps.push(Step::Tick);
        if i % 5 == 4 {
            steps.push(Step::Sync);
        }
    }
    out.push(pattern("ticks-and-checkpoints", steps));
    // Checkpoints the log takes for itself (by volume, at a tick) while
    // files have young delayed tails: their commits leave the tails
    // waiting, as a periodic one does, with the records capped at what is
    // written. Files with a block-sized attribute each fill the log past
    // the checkpoint interval; the tail grows before every tick, so
    // whichever tick checkpoints finds it changed.
    let mut steps = vec![Step::Create(s("B/t0"))];
    for i in 0..10u64 {
        steps.push(write("B/t0", i * 3000, 3000));
        if i == 3 {
            steps.push(write("A/foo", 12288, 6000));
        }
        for j in 0..30 {
            let f = format!("A/c{i}-{j:02}");
            steps.push(Step::Create(f.clone()));
            steps.push(Step::SetXattr { path: f, len: 3000 });
        }
        steps.push(Step::Tick);
    }
    steps.extend([
        Step::Create(s("B/t1")),
        write("B/t1", 0, 5000),
        Step::Rename { from: s("A/c0-00"), to: s("B/c") },
        Step::Tick,
        Step::Fsync(s("B/t1")),
        Step::Tick,
        Step::Sync,
    ]);
    out.push(pattern("checkpoint-keeps-tails", steps));
    // One commit group larger than a segment (400 creates, one fsync).
    let mut steps: Vec<Step> = (0..400).map(|i| Step::Create(format!("B/g{i:03}"))).collect();
    steps.push(Step::Fsync(s("B")));
    steps.extend((0..400).step_by(3).map(|i| Step::Unlink(format!("B/g{i:03}"))));
    steps.push(Step::Fsync(s("B")));
    out.push(pattern("group-spans-segments", steps));
    // Directories and symlinks made, moved and removed.
    out.push(pattern(
        "dirs-and-symlinks",
        vec![
            Step::Mkdir(s("A/x")),
            Step::Mkdir(s("A/x/y")),
            Step::Symlink { path: s("B/s"), target: s("../A/x") },
            Step::Fsync(s("B")),
            Step::Rmdir(s("A/x/y")),
            Step::Rename { from: s("B/s"), to: s("A/s") },
            Step::Rmdir(s("A/x")),
            Step::Fsync(s("A")),
            Step::Mkdir(s("B/z")),
            Step::Rename { from: s("B/z"), to: s("A/x") },
            Step::Symlink { path: s("A/x/long"), target: "t".repeat(2000) },
            Step::Sync,
        ],
    ));
    // Delete and reuse: freed data blocks must not show up in a new file.
    out.push(pattern(
        "free-and-reuse",
        vec![
            Step::Unlink(s("A/foo")),
            Step::Create(s("B/n1")),
            write("B/n1", 0, 12288),
            Step::Fsync(s("B/n1")),
            Step::Truncate { path: s("B/n1"), size: 0 },
            Step::Create(s("B/n2")),
            write("B/n2", 0, 16384),
            Step::Fsync(s("B/n2")),
            Step::Sync,
            Step::Create(s("B/n3")),
            write("B/n3", 0, 20000),
            Step::Fsync(s("B/n3")),
        ],
    ));
    out.extend(untangled());
    out
}

/// Untangled fsync: one file made durable while others are dirty and being
/// renamed, new files under new directories, fdatasync of overwrites in
/// place, small fsyncs whose data copies a larger one writes over in place,
/// records folded into later commits, and a file whose map outgrows its
/// inode between fsyncs.
fn untangled() -> Vec<Workload> {
    let mut out = vec![pattern(
        "fsync-among-renames",
        vec![
            write("A/foo", 12288, 30000),
            Step::Create(s("A/n1")),
            write("A/n1", 0, 7000),
            Step::Rename { from: s("A/foo"), to: s("B/moved") },
            write("B/bar", 600, 5000),
            Step::Fsync(s("B/bar")),
            Step::Rename { from: s("A/n1"), to: s("B/n1") },
            write("B/bar", 5600, 3000),
            Step::Fsync(s("B/bar")),
            Step::Mkdir(s("C")),
            Step::Mkdir(s("C/D")),
            Step::Create(s("C/D/x")),
            write("C/D/x", 0, 9000),
            Step::Create(s("C/y")),
            write("C/y", 0, 100),
            Step::Fsync(s("C/D/x")),
            write("C/D/x", 9000, 2000),
            Step::Fdatasync(s("C/D/x")),
            Step::Rename { from: s("B/moved"), to: s("C/moved") },
            Step::Truncate { path: s("B/bar"), size: 100 },
            Step::Fsync(s("B/bar")),
            Step::Tick,
            write("C/D/x", 1000, 4096),
            Step::Fsync(s("C/D/x")),
            Step::Create(s("C/D/z")),
            Step::Fsync(s("C/D/z")),
        ],
    )];
    out.push(pattern(
        "fdatasync-overwrites",
        vec![
            write("A/foo", 0, 4096),
            Step::Fdatasync(s("A/foo")),
            write("A/foo", 8192, 2000),
            Step::Fdatasync(s("A/foo")),
            Step::Create(s("B/other")),
            write("B/other", 0, 5000),
            write("A/foo", 4096, 4096),
            Step::Fdatasync(s("A/foo")),
            write("A/foo", 12288, 3000),
            Step::Fdatasync(s("A/foo")),
            write("A/foo", 0, 100),
            Step::Fsync(s("A/foo")),
            write("A/foo", 200, 100),
            Step::Fdatasync(s("A/foo")),
        ],
    ));
    out.push(pattern(
        "fsync-small-then-large",
        vec![
            Step::Create(s("A/big")),
            write("A/big", 0, 6000),
            Step::Fsync(s("A/big")),
            write("A/big", 2000, 3000),
            Step::Fsync(s("A/big")),
            write("A/big", 0, 120_000),
            Step::Fsync(s("A/big")),
            write("A/big", 4096, 100),
            Step::Fsync(s("A/big")),
            Step::Tick,
            write("A/big", 8192, 100),
            Step::Fsync(s("A/big")),
        ],
    ));
    out.push(pattern(
        "fsync-then-commit",
        vec![
            Step::Create(s("B/f")),
            write("B/f", 0, 9000),
            Step::Fsync(s("B/f")),
            Step::Create(s("B/g")),
            write("B/g", 0, 2000),
            Step::Fsync(s("B/g")),
            Step::Unlink(s("B/g")),
            Step::Create(s("B/h")),
            Step::Truncate { path: s("B/f"), size: 3000 },
            Step::Tick,
            write("B/f", 3000, 100),
            Step::Fsync(s("B/f")),
            Step::Unlink(s("A/foo")),
            Step::Create(s("A/foo")),
            write("A/foo", 0, 500),
            Step::Fsync(s("A/foo")),
            Step::Tick,
            write("B/f", 0, 20000),
            Step::Fsync(s("B/f")),
        ],
    ));
    out.extend(streams::patterns());
    let mut steps = vec![Step::Create(s("A/sparse")), Step::Create(s("B/filler"))];
    for i in 0..24u64 {
        steps.push(write("A/sparse", i * 8192, 4096));
        steps.push(write("B/filler", i * 4096, 4096));
        steps.push(Step::Fsync(s("A/sparse")));
    }
    steps.push(Step::Truncate { path: s("A/sparse"), size: 50000 });
    steps.push(Step::Fsync(s("A/sparse")));
    out.push(pattern("fsync-many-extents", steps));
    out.push(pattern(
        "fsync-own-replacement",
        vec![
            Step::Open { path: s("A/foo"), h: 0 },
            Step::Truncate { path: s("A/foo"), size: 0 },
            Step::WriteOpen { h: 0, offset: 0, len: 6000 },
            Step::Open { path: s("B/bar"), h: 1 },
            Step::Truncate { path: s("B/bar"), size: 0 },
            Step::WriteOpen { h: 1, offset: 0, len: 200 },
            Step::FsyncOpen(0),
            Step::Tick,
            Step::WriteOpen { h: 1, offset: 200, len: 200 },
            Step::Close(0),
            Step::Close(1),
            Step::Tick,
        ],
    ));
    out
}

/// A volume with every kind of structure: a directory of `files` entries
/// (a B-tree of several nodes), a file of `frag_writes` separate extents
/// (an extent tree), a large xattr and a long symlink (blobs), a
/// checkpoint, then a tail of log that roll-forward reads (with an
/// unlink). The damage sweep and the fuzzer start from it.
#[must_use]
pub fn every_structure(name: &str, files: usize, frag_writes: u64) -> Workload {
    let mut steps = vec![Step::Mkdir(s("D"))];
    steps.extend((0..files).map(|i| Step::Create(format!("D/file-{i:03}"))));
    steps.push(Step::Create(s("A/frag")));
    steps.extend((0..frag_writes).map(|i| Step::Write { path: s("A/frag"), offset: i * 8192, len: 4096 }));
    steps.push(Step::SetXattr { path: s("A/foo"), len: 3000 });
    steps.push(Step::Symlink { path: s("B/long"), target: "t".repeat(3000) });
    steps.push(Step::Sync);
    steps.extend([
        Step::Create(s("D/tail")),
        Step::Write { path: s("D/tail"), offset: 0, len: 9000 },
        Step::Unlink(s("D/file-007")),
        Step::Fsync(s("D")),
    ]);
    Workload { name: name.into(), steps, scale: 1 }
}

/// Long log traffic: many small commits, so that segments are used up,
/// freed by checkpoints and reused. With `ticks`, the periodic work runs
/// every sixteen commits; without, checkpoints come only when the log runs
/// short of free segments.
#[must_use]
pub fn log_wrap(commits: usize, ticks: bool) -> Workload {
    let mut steps = Vec::new();
    for i in 0..commits {
        let f = format!("B/w{}", i % 8);
        steps.push(Step::Create(f.clone()));
        steps.push(write(&f, (i as u64 % 3) * 4096, 6000));
        // With ticks, the file's fsync writes a record and the periodic
        // commits fold them; without, fsyncing the directory commits every
        // round, so that commit groups wrap the log onto its own
        // roll-forward range (what the SegmentReuse fault needs), and no
        // crash state holds a thousand records to replay.
        steps.push(Step::Fsync(if ticks { f.clone() } else { s("B") }));
        steps.push(Step::Unlink(f));
        if ticks && i % 16 == 15 {
            steps.push(Step::Tick);
        }
    }
    steps.push(Step::Fsync(s("B")));
    let name =
        if ticks { format!("pattern/log-wrap-{commits}") } else { format!("pattern/log-wrap-noticks-{commits}") };
    Workload { name, steps, scale: 12 }
}

/// Cleaning: files whose inodes fill about a block each, every other one
/// deleted, so that segments are left half live; then the cleaner moves
/// what is live, with more work between and after. Crash states cut
/// inside a clean must recover with nothing lost (the steps before it are
/// durable, and a clean changes nothing the model sees).
#[must_use]
pub fn cleaning() -> Workload {
    let files = 160;
    let mut steps = Vec::new();
    for i in 0..files {
        steps.push(Step::Create(format!("B/c{i:03}")));
        steps.push(Step::SetXattr { path: format!("B/c{i:03}"), len: 3000 });
        if i % 40 == 39 {
            steps.push(Step::Fsync(s("B")));
        }
    }
    steps.extend((0..files).step_by(2).map(|i| Step::Unlink(format!("B/c{i:03}"))));
    steps.push(Step::Fsync(s("B")));
    steps.push(Step::Clean { segments: 2 });
    steps.push(Step::Create(s("A/after")));
    steps.push(write("A/after", 0, 6000));
    steps.push(Step::Unlink(s("B/c001")));
    steps.push(Step::Fsync(s("A/after")));
    steps.push(Step::Clean { segments: 4 });
    steps.push(Step::SetXattr { path: s("B/c003"), len: 500 });
    steps.push(Step::Sync);
    Workload { name: s("pattern/cleaning"), steps, scale: 6 }
}

/// Enough inodes (600, three blocks of inode map) that a mount with a low
/// threshold leaves the map on disk, checkpointed; then changes all over
/// the map in commits roll-forward replays (chmod by rename, unlink, a
/// file unlinked while open and written through its handle: an orphan),
/// and a second checkpoint. `crashes_with_the_inode_map_left_on_disk`
/// runs it with every recovery leaving the map on disk.
#[must_use]
pub fn many_inodes() -> Workload {
    let mut steps = vec![Step::Mkdir(s("M"))];
    steps.extend((0..600).map(|i| Step::Create(format!("M/f{i:03}"))));
    steps.push(Step::Sync);
    steps.extend([
        Step::Open { path: s("M/f300"), h: 1 },
        Step::Unlink(s("M/f300")),
        Step::WriteOpen { h: 1, offset: 0, len: 5000 },
        Step::FsyncOpen(1),
        Step::Rename { from: s("M/f010"), to: s("M/renamed") },
        Step::Unlink(s("M/f550")),
        Step::Write { path: s("M/f450"), offset: 0, len: 3000 },
        Step::Fsync(s("M/f450")),
        Step::Create(s("M/new")),
        Step::Fsync(s("M")),
        Step::Close(1),
        Step::Unlink(s("M/f120")),
        Step::Sync,
        Step::Unlink(s("M/f599")),
        Step::Fsync(s("M")),
    ]);
    Workload { name: s("pattern/many-inodes"), steps, scale: 2 }
}

/// Changes all over an inode map of six blocks, between checkpoints and
/// after them, for a volume that keeps two of them in memory: blocks are
/// given back and read again while commits, checkpoints and recovery run
/// (the first writes and unlinks reach blocks given back at the sync).
#[must_use]
pub fn many_inodes_bounded() -> Workload {
    let mut steps = vec![Step::Mkdir(s("M"))];
    steps.extend((0..1400).map(|i| Step::Create(format!("M/f{i:04}"))));
    steps.push(Step::Sync);
    for i in (7..1400).step_by(233) {
        steps.push(Step::Write { path: format!("M/f{i:04}"), offset: 0, len: 700 });
        steps.push(Step::Unlink(format!("M/f{:04}", i + 100)));
    }
    steps.extend([
        Step::Fsync(s("M/f0240")),
        Step::Open { path: s("M/f1000"), h: 1 },
        Step::Unlink(s("M/f1000")),
        Step::WriteOpen { h: 1, offset: 0, len: 5000 },
        Step::Sync,
        Step::Create(s("M/new")),
        Step::Rename { from: s("M/f0010"), to: s("M/renamed") },
        Step::Write { path: s("M/f1300"), offset: 0, len: 3000 },
        Step::Fsync(s("M/f1300")),
        Step::Close(1),
        Step::Unlink(s("M/f0600")),
        Step::Fsync(s("M")),
    ]);
    Workload { name: s("pattern/many-inodes-bounded"), steps, scale: 2 }
}

/// Data written, freed and written again in every group, with the
/// background writer's turns between (run with a data-space budget of
/// nothing: each turn gives back every group-table and bitmap block it
/// may, and the next allocation or free there reads them again).
#[must_use]
pub fn bitmap_bounded() -> Workload {
    let mut steps = vec![Step::Mkdir(s("C")), Step::Mkdir(s("D"))];
    for d in ["A", "B", "C", "D"] {
        steps.push(Step::Create(format!("{d}/g")));
        steps.push(write(&format!("{d}/g"), 0, 40_960));
    }
    steps.extend([
        Step::Sync,
        Step::Tick,
        write("C/g", 40_960, 8192),
        Step::Unlink(s("A/foo")),
        Step::Tick,
        Step::Create(s("D/h")),
        write("D/h", 0, 20_000),
        Step::Fsync(s("D/h")),
        Step::Tick,
        Step::Sync,
        Step::Tick,
        Step::Truncate { path: s("B/g"), size: 4096 },
        write("A/g", 0, 16_384),
        Step::Tick,
        Step::Fsync(s("A/g")),
        Step::Sync,
        Step::Tick,
        Step::Create(s("C/late")),
        write("C/late", 0, 12_288),
        Step::Unlink(s("D/g")),
        Step::Tick,
        Step::Fsync(s("C")),
    ]);
    Workload { name: s("pattern/bitmap-bounded"), steps, scale: 2 }
}

/// Every workload of the default run.
#[must_use]
pub fn all() -> Vec<Workload> {
    let mut v = ace();
    v.extend(patterns());
    v.push(log_wrap(160, true));
    v.push(cleaning());
    v.extend(snapshots());
    v.extend(clones());
    v.extend(trees_beside());
    v.extend(ranges());
    v.extend(quotas());
    v.extend(whiteouts());
    v
}

/// The workload called `name`, if any.
#[must_use]
pub fn by_name(name: &str) -> Option<Workload> {
    if name.starts_with("mirror/") {
        return mirror::by_name(name);
    }
    if let Some(n) = name.strip_prefix("pattern/log-wrap-noticks-") {
        return n.parse().ok().map(|n| log_wrap(n, false));
    }
    if let Some(n) = name.strip_prefix("pattern/log-wrap-") {
        return n.parse().ok().map(|n| log_wrap(n, true));
    }
    all()
        .into_iter()
        .chain([many_inodes(), many_inodes_bounded(), bitmap_bounded()])
        .chain(discards())
        .find(|w| w.name == name)
}
