//! Streams past the explorer's dirty-data limit: a file written in steps
//! (plain and preallocated, fio's way) while other files are fsync'd
//! between the steps.

use super::{pattern, s, write};
use crate::workload::{Step, Workload};

/// Files written past the dirty-data limit, in steps.
pub(super) fn patterns() -> Vec<Workload> {
    let mut out = Vec::new();
    // More dirty data than the explorer's 1 MiB limit: the writes that pass
    // it commit in steps, the new file's end waiting (its size capped), while
    // another file is fsync'd between them.
    let mut steps = vec![Step::Create(s("A/big"))];
    for i in 0..12u64 {
        steps.push(write("A/big", i * 262_144, 262_144));
        if i % 3 == 2 {
            steps.push(write("B/bar", 600 + i * 100, 100));
            steps.push(Step::Fsync(s("B/bar")));
        }
    }
    steps.push(Step::Fsync(s("A/big")));
    out.push(pattern("fsync-under-pressure", steps));
    // A stream into a preallocated file (fio's way), past the 1 MiB limit:
    // its pages lie over unwritten blocks, so every step writes all of
    // them. The stream starts by overwriting its durable first 512 KiB;
    // its end grows past the preallocation, a capped tail; other files
    // are created and fsync'd between the steps.
    let mut steps = vec![Step::Create(s("A/pre")), Step::Fallocate { path: s("A/pre"), size: 2 << 20 }];
    steps.push(write("A/pre", 0, 524_288));
    steps.push(Step::Fsync(s("A/pre")));
    for i in 0..10u64 {
        steps.push(write("A/pre", i * 262_144, 262_144));
        if i % 3 == 2 {
            steps.push(Step::Create(format!("B/m{i}")));
            steps.push(write("B/bar", 600 + i * 100, 100));
            steps.push(Step::Fsync(s("B/bar")));
        }
    }
    steps.push(Step::Fsync(s("A/pre")));
    out.push(pattern("prealloc-stream-steps", steps));
    out
}
