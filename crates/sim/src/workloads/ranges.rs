//! The range patterns of `fallocate`: collapse and insert over files with
//! holes, a delayed tail, inline bytes and blocks a snapshot holds, with
//! and without fsync between, and unshare of the blocks a snapshot holds.
//! A crash must show each collapse or insert whole or not at all.

use super::{s, write};
use crate::workload::{Step, Workload};

const B: u64 = 4096;

fn collapse(p: &str, offset: u64, len: u64) -> Step {
    Step::Shift { path: s(p), offset, len, collapse: true }
}

fn insert(p: &str, offset: u64, len: u64) -> Step {
    Step::Shift { path: s(p), offset, len, collapse: false }
}

/// The range workloads.
#[must_use]
pub fn ranges() -> Vec<Workload> {
    vec![
        // A committed file collapsed and inserted into, with writes
        // between, made durable by commits and by fsync records in turn.
        super::pattern(
            "ranges-collapse-insert",
            vec![
                write("A/foo", 12288, 7 * B as u32),
                Step::Tick,
                collapse("A/foo", B, 2 * B),
                Step::Fsync(s("A/foo")),
                insert("A/foo", 0, B),
                write("A/foo", 100, 200),
                Step::Tick,
                collapse("A/foo", 3 * B, B),
                insert("A/foo", 2 * B, 3 * B),
                Step::Fdatasync(s("A/foo")),
                collapse("A/foo", 0, 2 * B),
                Step::Sync,
            ],
        ),
        // Holes, and a tail written but not yet handed to the volume's commit:
        // the collapse moves the dirty pages with the extents.
        super::pattern(
            "ranges-holes-tail",
            vec![
                Step::Create(s("B/h")),
                write("B/h", 0, 3000),
                write("B/h", 5 * B, B as u32),
                Step::Fsync(s("B/h")),
                write("B/h", 6 * B, 2 * B as u32 + 500),
                // A periodic commit leaves the young tail out (capped size).
                Step::Tick,
                collapse("B/h", B, 3 * B),
                Step::Tick,
                insert("B/h", B, 2 * B),
                Step::Create(s("A/after")),
                Step::Fsync(s("B/h")),
                write("B/h", 9 * B, 100),
                insert("B/h", 0, B),
                Step::Sync,
            ],
        ),
        // An inline file grown by an insert, then collapsed back; a collapse
        // or insert that breaks the rules changes nothing.
        super::pattern(
            "ranges-inline",
            vec![
                insert("B/bar", 0, 2 * B),
                Step::Tick,
                collapse("B/bar", 0, B),
                insert("B/bar", 100, B),
                collapse("B/bar", 0, 8 * B),
                Step::Fsync(s("B/bar")),
                collapse("B/bar", 0, B),
                Step::Sync,
            ],
        ),
        // Blocks a snapshot holds, moved by a collapse and an insert, written
        // over (a new block, not in place) and unshared.
        Workload {
            name: s("pattern/ranges-snapshot"),
            steps: vec![
                write("A/foo", 12288, 5 * B as u32),
                Step::SnapshotCreate(s("s")),
                collapse("A/foo", 0, B),
                write("A/foo", B, 100),
                Step::Fsync(s("A/foo")),
                insert("A/foo", 2 * B, B),
                Step::Unshare { path: s("A/foo"), offset: 0, len: 8 * B },
                Step::Tick,
                write("A/foo", 4 * B, B as u32),
                Step::Sync,
            ],
            scale: 6,
        },
    ]
}
