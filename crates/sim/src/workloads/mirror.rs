//! The workloads run on a mirrored meta-data device (`Config::mirrored`):
//! named patterns under another name, `mirror/...`, so that a replay string
//! says which configuration it needs.

use crate::workload::Workload;

/// The patterns the default run explores mirrored: fsyncs among renames
/// (fsync records, renames, a periodic commit), an fsync after each random
/// write, periodic commits and checkpoints, and the cleaner moving live
/// blocks.
const DEFAULT: [&str; 4] =
    ["pattern/fsync-among-renames", "pattern/random-fsync-each", "pattern/ticks-and-checkpoints", "pattern/cleaning"];

/// `w` renamed for the mirrored run.
fn mirrored(w: Workload) -> Workload {
    let name = format!("mirror/{}", w.name.strip_prefix("pattern/").unwrap_or(&w.name));
    Workload { name, ..w }
}

/// The mirrored workloads: a few in the default run, every named pattern,
/// the cleaner's and a log of 160 commits when `long`.
#[must_use]
pub fn mirrors(long: bool) -> Vec<Workload> {
    let mut all = super::patterns();
    all.push(super::cleaning());
    if long {
        all.push(super::log_wrap(160, true));
        return all.into_iter().map(mirrored).collect();
    }
    DEFAULT.iter().filter_map(|n| all.iter().find(|w| w.name == *n).cloned()).map(mirrored).collect()
}

/// The mirrored workload called `name` (`mirror/...`), if any.
#[must_use]
pub fn by_name(name: &str) -> Option<Workload> {
    let rest = name.strip_prefix("mirror/")?;
    super::by_name(&format!("pattern/{rest}")).map(mirrored)
}
