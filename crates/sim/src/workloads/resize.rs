//! The resize workloads: grows of either device and both, and shrinks of
//! the log and of the data device, on an explorer whose devices hold
//! spare blocks past the volume.

use super::{s, write};
use crate::workload::{Step, Workload};

/// Resizes, on an explorer whose devices hold `spare` blocks past the
/// volume ([`crate::explorer::Config`]'s `spare_*_blocks`, sizes given as
/// (meta-data, data) blocks of the volume before): grows of each device
/// and of both, with files written before (durable and not) and after,
/// into a directory made after the grow (bound to a new, emptiest group)
/// and enough meta-data to reach new segments. A crash anywhere must
/// recover at the old or the new size with nothing lost.
#[must_use]
pub fn resizes(meta: u64, data: u64, spare_meta: u64, spare_data: u64) -> Vec<Workload> {
    let grow = |m: u64, d: u64| Step::Resize { meta: m, data: d };
    let mut out = Vec::new();
    let mut both = vec![Step::Create(s("A/pre")), write("A/pre", 0, 20000), Step::Fsync(s("A/pre"))];
    both.push(Step::Create(s("B/unsynced")));
    both.push(write("B/unsynced", 0, 7000));
    both.push(grow(meta + spare_meta / 2, data + spare_data / 2));
    both.push(Step::Mkdir(s("N")));
    both.push(Step::Create(s("N/new")));
    both.push(write("N/new", 0, 40000));
    both.push(Step::Fsync(s("N/new")));
    both.push(grow(meta + spare_meta, data + spare_data));
    both.push(write("A/pre", 20000, 9000));
    both.push(Step::Sync);
    out.push(Workload { name: s("resize/grow-both"), steps: both, scale: 3 });
    // The log alone, with enough inodes written after the grow that the
    // log moves on into the new segments.
    let mut meta_only = vec![grow(meta + spare_meta, 0), Step::Mkdir(s("M"))];
    for i in 0..48 {
        meta_only.push(Step::Create(format!("M/f{i:02}")));
        meta_only.push(Step::SetXattr { path: format!("M/f{i:02}"), len: 3000 });
        if i % 16 == 15 {
            meta_only.push(Step::Fsync(s("M")));
        }
    }
    meta_only.push(Step::Clean { segments: 2 });
    meta_only.push(Step::Sync);
    out.push(Workload { name: s("resize/grow-meta"), steps: meta_only, scale: 3 });
    let data_only = vec![
        Step::Create(s("B/d")),
        write("B/d", 0, 9000),
        grow(0, data + spare_data),
        Step::Mkdir(s("D")),
        Step::Create(s("D/x")),
        write("D/x", 0, 30000),
        Step::Unlink(s("B/d")),
        Step::Fsync(s("D")),
        Step::Tick,
    ];
    out.push(Workload { name: s("resize/grow-data"), steps: data_only, scale: 2 });
    out.push(shrink_meta(meta, spare_meta));
    out.push(shrink_data(data, spare_data));
    out
}

/// A shrink of the data device with files past the new end: the data
/// device grows by `spare` blocks, two directories made after it are bound
/// to the new (emptiest) groups, and their files, one fsync'd, one only
/// written, one open, lie there; then the data device shrinks back to
/// `data` blocks, the open file is written and fdatasync'd through the
/// move, and more files follow in the smaller space.
#[must_use]
pub fn shrink_data(data: u64, spare: u64) -> Workload {
    let steps = vec![
        Step::Resize { meta: 0, data: data + spare },
        Step::Mkdir(s("N")),
        Step::Mkdir(s("P")),
        Step::Create(s("N/x")),
        write("N/x", 0, 30000),
        Step::Fsync(s("N/x")),
        Step::Create(s("P/y")),
        write("P/y", 0, 20000),
        Step::Open { path: s("N/x"), h: 1 },
        Step::Resize { meta: 0, data },
        Step::WriteOpen { h: 1, offset: 4096, len: 5000 },
        Step::Fdatasync(s("N/x")),
        Step::Close(1),
        Step::Create(s("N/after")),
        write("N/after", 0, 9000),
        Step::Fsync(s("N/after")),
        write("P/y", 16384, 8000),
        Step::Sync,
    ];
    Workload { name: s("resize/shrink-data"), steps, scale: 8 }
}

/// A shrink of the log with live meta-data past the new end: the log grows
/// by `spare` blocks, commits push its head past the old end (files kept
/// every twentieth round, with xattrs in blocks of their own, stay live there),
/// and the log shrinks back to `meta` blocks while a file is open and
/// written; then more work in the smaller log.
#[must_use]
pub fn shrink_meta(meta: u64, spare: u64) -> Workload {
    let mut steps = vec![Step::Resize { meta: meta + spare, data: 0 }, Step::Mkdir(s("K"))];
    for i in 0..560 {
        let f = format!("B/w{}", i % 8);
        steps.push(Step::Create(f.clone()));
        steps.push(Step::SetXattr { path: f.clone(), len: 3000 });
        steps.push(Step::Fsync(s("B")));
        steps.push(Step::Unlink(f));
        if i % 20 == 19 {
            let k = format!("K/k{i:03}");
            steps.push(Step::Create(k.clone()));
            steps.push(Step::SetXattr { path: k, len: 2000 });
        }
    }
    steps.push(Step::Open { path: s("A/foo"), h: 1 });
    steps.push(Step::Resize { meta, data: 0 });
    steps.push(Step::WriteOpen { h: 1, offset: 12288, len: 5000 });
    steps.push(Step::Close(1));
    steps.push(Step::Create(s("K/after")));
    steps.push(Step::SetXattr { path: s("K/after"), len: 2000 });
    steps.push(Step::Fsync(s("K")));
    Workload { name: s("resize/shrink-meta"), steps, scale: 10 }
}
