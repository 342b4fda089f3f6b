//! Quotas: files created, written, truncated, given to other owners,
//! renamed and removed on a volume that keeps quotas, around commits,
//! fsync records and checkpoints. The runner checks invariant Q1 after
//! every step and the explorer in every crash state it recovers (usage
//! counted at open equals what the inodes hold, and keeps doing so
//! through the new work).

use super::{s, write};
use crate::workload::{Step, Workload};

/// The quota workloads.
#[must_use]
pub fn quotas() -> Vec<Workload> {
    let mut out = Vec::new();
    let mut steps = vec![
        Step::QuotaOn,
        Step::Create(s("B/q1")),
        write("B/q1", 0, 40000),
        Step::Chown { path: s("B/q1"), uid: 1000 },
        Step::Create(s("B/q2")),
        write("B/q2", 0, 9000),
        Step::Fsync(s("B/q2")),
        Step::Chown { path: s("B/q2"), uid: 1001 },
        Step::Tick,
        write("B/q1", 40000, 30000),
        Step::Truncate { path: s("B/q1"), size: 8192 },
        Step::Chown { path: s("B/q1"), uid: 1001 },
        Step::Fsync(s("B/q1")),
        Step::Rename { from: s("B/q2"), to: s("A/q2") },
        Step::Chown { path: s("A/q2"), uid: 1000 },
        Step::Sync,
        Step::Unlink(s("B/q1")),
        Step::Create(s("A/q3")),
        write("A/q3", 0, 20000),
        Step::Chown { path: s("A/q3"), uid: 1002 },
        Step::Fsync(s("A/q3")),
        Step::Tick,
    ];
    out.push(Workload { name: s("quota/owners"), steps: steps.clone(), scale: 4 });
    // The same owners changing inside fsync records only.
    steps.retain(|st| !matches!(st, Step::Tick | Step::Sync));
    out.push(Workload { name: s("quota/fsync-only"), steps, scale: 4 });
    out
}
