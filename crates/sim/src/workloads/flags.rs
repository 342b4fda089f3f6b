//! Inode flags (`chattr`): a sync file's writes, each durable when it
//! returns, in place, appended and outgrowing an inline body; a dirsync
//! directory's changes of names, each durable with every step before it;
//! flags set and cleared around writes and fsyncs, inherited by new
//! entries, and immutable and append-only files refusing writes.

use dualfs_engine::format::inode::{FLAG_APPEND, FLAG_DIRSYNC, FLAG_IMMUTABLE, FLAG_NOATIME, FLAG_NODUMP, FLAG_SYNC};

use super::{s, write};
use crate::workload::{Step, Workload};

fn flags(path: &str, flags: u32) -> Step {
    Step::SetFlags { path: s(path), flags }
}

/// The inode-flag patterns.
pub(super) fn patterns() -> Vec<Workload> {
    vec![
        // Writes to sync files between writes to others, with no fsync: each
        // sync write is promised when it returns, the others are not.
        super::pattern(
            "flags-sync-writes",
            vec![
                flags("A/foo", FLAG_SYNC),
                write("A/foo", 100, 2000),
                Step::Create(s("A/other")),
                write("A/other", 0, 3000),
                write("A/foo", 12288, 5000),
                Step::Create(s("A/s")),
                flags("A/s", FLAG_SYNC),
                write("A/s", 0, 600),
                write("A/s", 600, 6000),
                write("A/other", 3000, 3000),
                Step::Tick,
                write("A/s", 100, 50),
                write("A/foo", 4096, 4096),
                flags("A/foo", 0),
                write("A/foo", 0, 1000),
                write("A/s", 6600, 100),
            ],
        ),
        // A dirsync directory: each create, mkdir, link, rename and unlink in
        // it commits everything before it (the write to A/foo included); its
        // new subdirectory inherits the flag, a file in it does not.
        super::pattern(
            "flags-dirsync",
            vec![
                flags("B", FLAG_DIRSYNC),
                write("A/foo", 0, 3000),
                Step::Create(s("B/n1")),
                write("B/n1", 0, 100),
                Step::Mkdir(s("B/d")),
                Step::Create(s("B/d/x")),
                write("A/foo", 3000, 3000),
                Step::Rename { from: s("A/foo"), to: s("B/foo") },
                Step::Link { from: s("B/bar"), to: s("B/d/bar") },
                Step::Create(s("A/plain")),
                Step::Unlink(s("B/n1")),
                flags("B", FLAG_SYNC),
                Step::Create(s("B/n2")),
                flags("B", 0),
                Step::Create(s("B/late")),
                write("B/foo", 0, 500),
            ],
        ),
        // Flags set and cleared with writes and fsyncs around them, inherited
        // by new entries; writes an immutable or append-only file refuses.
        super::pattern(
            "flags-set-clear",
            vec![
                flags("A/foo", FLAG_NOATIME | FLAG_NODUMP),
                write("A/foo", 0, 2000),
                Step::Fsync(s("A/foo")),
                flags("B", FLAG_NODUMP | FLAG_NOATIME),
                Step::Create(s("B/inherits")),
                Step::Mkdir(s("B/sub")),
                flags("A/foo", FLAG_IMMUTABLE),
                write("A/foo", 0, 100),
                Step::Tick,
                flags("B/bar", FLAG_APPEND),
                write("B/bar", 0, 10),
                write("B/bar", 600, 3000),
                Step::Fsync(s("B/bar")),
                flags("A/foo", FLAG_NODUMP),
                write("A/foo", 100, 4000),
                flags("B/bar", 0),
                Step::Fsync(s("A/foo")),
                flags("B", 0),
                Step::Sync,
            ],
        ),
    ]
}
