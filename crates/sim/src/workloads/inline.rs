//! The inline-file patterns: appends that move a file's bytes from its
//! inode to the data device, with and without fsync, and writes below the
//! old size of a file that outgrew its inode.

use super::{s, write};
use crate::workload::{Step, Workload};

/// Inline files outgrowing their inodes.
pub(super) fn patterns() -> Vec<Workload> {
    let mut out = Vec::new();
    // Appends to an inline file until it moves to the data device.
    let steps = (0..6u64).flat_map(|i| [write("B/bar", 600 + i * 400, 400), Step::Fsync(s("B/bar"))]).collect();
    out.push(super::pattern("inline-appends", steps));
    // Inline files made durable by a commit (B/bar) and by an fsync record
    // (B/new) outgrow their inodes with no fsync: the next periodic commit
    // records each inline again at its old size (I16), beside the create
    // that came after, and what was appended waits as a delayed tail.
    out.push(super::pattern(
        "inline-outgrown",
        vec![
            Step::Create(s("B/new")),
            write("B/new", 0, 500),
            Step::Fsync(s("B/new")),
            write("B/bar", 600, 5000),
            write("B/new", 500, 6000),
            Step::Create(s("A/after")),
            Step::Tick,
            write("B/bar", 5600, 3000),
            Step::Tick,
            Step::Sync,
        ],
    ));
    // An inline file outgrows its inode by a write that also changes bytes
    // below its old size, then another changes some more: each periodic
    // commit records it inline at its old size with the bytes it has now
    // (the creates after the writes put those bytes beside later
    // operations in every crash state that shows the commit).
    out.push(super::pattern(
        "inline-outgrown-overwritten",
        vec![
            write("B/bar", 300, 5000),
            Step::Create(s("B/after")),
            Step::Tick,
            write("B/bar", 100, 150),
            write("B/bar", 5300, 2000),
            Step::Create(s("A/after")),
            Step::Tick,
            Step::Sync,
        ],
    ));
    out
}
