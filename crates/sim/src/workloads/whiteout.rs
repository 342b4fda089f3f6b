//! Renames with `RENAME_WHITEOUT` (overlayfs's upper layer): a crash must
//! show each one whole, the file under its new name and the whiteout under
//! the old one, or not at all.

use super::{s, write};
use crate::workload::{Step, Workload};

fn whiteout(from: &str, to: &str) -> Step {
    Step::RenameWhiteout { from: s(from), to: s(to) }
}

/// The whiteout workloads.
#[must_use]
pub fn whiteouts() -> Vec<Workload> {
    vec![
        // Within a directory and across, over a file, of a directory;
        // made durable by commits, fsyncs of the directories and sync.
        super::pattern(
            "whiteout-renames",
            vec![
                whiteout("A/foo", "A/moved"),
                Step::Tick,
                Step::Create(s("A/new")),
                write("A/new", 0, 5000),
                whiteout("A/new", "B/bar"),
                Step::Fsync(s("B")),
                Step::Mkdir(s("A/d")),
                Step::Create(s("A/d/inside")),
                whiteout("A/d", "B/d"),
                Step::Tick,
                whiteout("A/moved", "B/moved"),
                Step::Fsync(s("A")),
                Step::Create(s("B/later")),
                whiteout("B/later", "A/later"),
                Step::Sync,
            ],
        ),
        // Back and forth between two names, each rename leaving a whiteout
        // the next one replaces, with an fsync of the file between.
        super::pattern(
            "whiteout-back-and-forth",
            vec![
                whiteout("B/bar", "B/b1"),
                write("B/b1", 600, 4000),
                Step::Fsync(s("B/b1")),
                whiteout("B/b1", "B/bar"),
                Step::Tick,
                whiteout("B/bar", "B/b1"),
                Step::Unlink(s("B/bar")),
                Step::Fsync(s("B")),
                whiteout("B/b1", "B/bar"),
                Step::Tick,
            ],
        ),
    ]
}
