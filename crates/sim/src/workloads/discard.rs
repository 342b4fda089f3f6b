//! Discard: trims (`fstrim`) and the frees `-o discard` sends to the
//! devices, beside snapshots, fsync records and checkpoints. With the
//! explorer's discard-aware devices a block discarded too early reads as
//! zeros or garbage in every later crash state, so that a file, a
//! snapshot or a checkpoint that still needed it shows the loss.

use super::{s, write};
use crate::workload::{Step, Workload};

/// The discard workloads (run with `-o discard`, [`crate::explorer::Config`]).
#[must_use]
pub fn discards() -> Vec<Workload> {
    let mut out = Vec::new();
    // Frees of every kind around trims: blocks a snapshot holds, a file
    // freed while an fsync record of another waits, a truncate, and
    // blocks discarded then handed out again.
    let mut steps = vec![
        Step::Create(s("B/t1")),
        write("B/t1", 0, 65536),
        Step::Create(s("B/t2")),
        write("B/t2", 0, 40000),
        Step::Fsync(s("B")),
        Step::SnapshotCreate(s("s1")),
        Step::Unlink(s("B/t1")),
        Step::Truncate { path: s("B/t2"), size: 4096 },
        Step::Create(s("B/t3")),
        write("B/t3", 0, 20000),
        Step::Fsync(s("B/t3")),
        Step::Tick,
        Step::Trim,
        write("A/foo", 0, 12288),
        Step::Unlink(s("B/t2")),
        Step::Tick,
        Step::Trim,
        Step::SnapshotDelete(s("s1")),
        Step::Tick,
        Step::Trim,
    ];
    for i in 0..4u64 {
        let f = format!("A/n{i}");
        steps.push(Step::Create(f.clone()));
        steps.push(write(&f, 0, 30000));
        steps.push(Step::Fsync(f));
    }
    steps.push(Step::Unlink(s("B/t3")));
    steps.push(Step::Trim);
    steps.push(Step::Sync);
    out.push(Workload { name: s("discard/trims"), steps, scale: 8 });
    // Files freed in a stream of commits and fsync records, each free
    // discarded by the background once durable; a snapshot keeps some.
    let mut steps = vec![Step::SnapshotCreate(s("keep"))];
    for i in 0..10u64 {
        let f = format!("B/c{i}");
        steps.push(Step::Create(f.clone()));
        steps.push(write(&f, 0, 16384));
        steps.push(Step::Fsync(f.clone()));
        if i >= 2 {
            steps.push(Step::Unlink(format!("B/c{}", i - 2)));
        }
        steps.push(write("A/foo", (i * 4096) % 12288, 4096));
        steps.push(Step::Tick);
    }
    steps.push(Step::Unlink(s("A/foo")));
    steps.push(Step::Tick);
    steps.push(Step::Sync);
    out.push(Workload { name: s("discard/frees"), steps, scale: 8 });
    // The log empties segments (files made and unlinked, then cleaned):
    // with `-o discard` they are discarded once no checkpoint needs them.
    // Work after each clean, before the next checkpoint, is where the
    // older checkpoint (from before the clean) is all a lost newer slot
    // leaves, and it maps the cleaned segments.
    let mut steps = Vec::new();
    for round in 0..4u64 {
        for i in 0..12u64 {
            let f = format!("B/m{}", i % 6);
            steps.push(Step::Create(f.clone()));
            steps.push(Step::SetXattr { path: f.clone(), len: 900 });
            steps.push(Step::Fsync(s("B")));
            steps.push(Step::Unlink(f));
        }
        steps.push(Step::Sync);
        steps.push(Step::Clean { segments: 4 });
        for i in 0..3u64 {
            let f = format!("A/k{round}-{i}");
            steps.push(Step::Create(f));
            steps.push(Step::Fsync(s("A")));
        }
        steps.push(Step::Sync);
    }
    steps.push(Step::Trim);
    out.push(Workload { name: s("discard/segments"), steps, scale: 8 });
    // Snapshots deleted with `-o discard`: the blocks only they held (a
    // file unlinked, another cut short, overwrites moved aside) are
    // discarded by the deletion, once the checkpoint before the one that
    // drops the snapshot, which still lists it, is gone from both slots.
    // The second snapshot is deleted right after a checkpoint of frees.
    let steps = vec![
        Step::Create(s("B/d1")),
        write("B/d1", 0, 49152),
        Step::Create(s("B/d2")),
        write("B/d2", 0, 30000),
        Step::Fsync(s("B")),
        Step::SnapshotCreate(s("old")),
        Step::Unlink(s("B/d1")),
        Step::Truncate { path: s("B/d2"), size: 4096 },
        write("A/foo", 0, 8192),
        Step::Tick,
        Step::SnapshotDelete(s("old")),
        Step::Create(s("A/n1")),
        write("A/n1", 0, 40000),
        Step::Fsync(s("A/n1")),
        Step::SnapshotCreate(s("new")),
        Step::Unlink(s("A/n1")),
        write("A/foo", 4096, 4096),
        Step::Sync,
        Step::SnapshotDelete(s("new")),
        Step::Tick,
        Step::Sync,
    ];
    out.push(Workload { name: s("discard/snapshot-delete"), steps, scale: 8 });
    out
}
