//! Snapshots and clones made, deleted and switched while the live tree
//! changes.

use super::{s, write};
use crate::workload::{Step, Workload};

/// Snapshots made and deleted while the live volume changes: overwrites
/// of blocks they hold (which must go to new blocks), appends, removals,
/// fsyncs, ticks and a clean around them. Crash states cut inside a
/// create or a delete must show the snapshot whole or not at all, and
/// every snapshot there as it was made (the explorer's snapshot oracle).
#[must_use]
pub fn snapshots() -> Vec<Workload> {
    let churn = |tag: u64| {
        vec![
            write("A/foo", (tag * 1531) % 8000, 4096),
            write("A/foo", 12288 + tag * 3000, 3000),
            Step::Create(format!("B/n{tag}")),
            write(&format!("B/n{tag}"), 0, 9000),
            Step::Fsync(format!("B/n{tag}")),
            write("B/bar", 0, 700),
        ]
    };
    let mut steps = vec![Step::SnapshotCreate(s("s1"))];
    steps.extend(churn(1));
    steps.push(Step::Tick);
    steps.push(Step::SnapshotCreate(s("s2")));
    steps.extend(churn(2));
    steps.push(Step::Unlink(s("B/n1")));
    steps.push(Step::Truncate { path: s("A/foo"), size: 5000 });
    steps.push(Step::Fsync(s("B")));
    steps.push(Step::SnapshotDelete(s("s1")));
    steps.extend(churn(3));
    steps.push(Step::Clean { segments: 3 });
    steps.push(Step::SnapshotCreate(s("s3")));
    steps.push(write("A/foo", 0, 6000));
    steps.push(Step::SnapshotDelete(s("s2")));
    steps.push(Step::Sync);
    let mut out = vec![Workload { name: s("pattern/snapshots"), steps, scale: 6 }];
    // The smallest case: a held block overwritten in place would show in
    // the snapshot.
    let steps = vec![
        Step::SnapshotCreate(s("before")),
        write("A/foo", 0, 8192),
        Step::Fsync(s("A/foo")),
        write("A/foo", 4096, 4096),
        Step::Sync,
    ];
    out.push(Workload { name: s("pattern/snapshot-overwrite"), steps, scale: 4 });
    out.push(snapshot_held_count());
    out
}

/// Snapshots made and deleted around removals of what they keep, with
/// checkpoints between that change no list: the free blocks the
/// snapshots hold move each time, and the list a checkpoint names must
/// carry their count (a mount starts from it: fsck counts it again at
/// every crash state).
#[must_use]
pub fn snapshot_held_count() -> Workload {
    let steps = vec![
        Step::SnapshotCreate(s("h1")),
        Step::Unlink(s("A/foo")),
        Step::Sync,
        Step::Clean { segments: 2 },
        Step::SnapshotCreate(s("h2")),
        Step::Create(s("B/x")),
        write("B/x", 0, 9000),
        Step::Sync,
        Step::SnapshotCreate(s("h3")),
        Step::Unlink(s("B/x")),
        Step::Unlink(s("B/bar")),
        Step::Clean { segments: 2 },
        Step::SnapshotDelete(s("h1")),
        Step::Create(s("B/y")),
        write("B/y", 0, 5000),
        Step::Clean { segments: 2 },
        Step::SnapshotDelete(s("h3")),
        Step::Tick,
        Step::Sync,
    ];
    Workload { name: s("pattern/snapshot-held-count"), steps, scale: 6 }
}

/// Writable clones: made from snapshots (and from a snapshot of a clone),
/// made the live tree and back while each tree changes, and deleted, the
/// tree that was live among them. A crash cut inside a switch must show
/// the old tree or the new one, under its own name, with the other kept
/// whole; every kept tree is read back by making it live on a copy.
#[must_use]
pub fn clones() -> Vec<Workload> {
    let steps = vec![
        Step::SnapshotCreate(s("s")),
        write("A/foo", 0, 5000),
        Step::Create(s("B/main1")),
        write("B/main1", 0, 6000),
        Step::CloneCreate { source: s("s"), name: s("c") },
        Step::SwitchTree(s("c")),
        write("A/foo", 4096, 8192),
        Step::Create(s("A/c1")),
        write("A/c1", 0, 10000),
        Step::Unlink(s("B/bar")),
        Step::Sync,
        Step::SnapshotCreate(s("c-snap")),
        Step::CloneCreate { source: s("c-snap"), name: s("cc") },
        write("A/c1", 0, 4096),
        Step::SwitchTree(s("main")),
        Step::Create(s("B/main2")),
        write("B/main2", 0, 3000),
        Step::SnapshotDelete(s("c")),
        Step::SwitchTree(s("cc")),
        write("A/foo", 0, 3000),
        Step::Sync,
        Step::SnapshotDelete(s("main")),
        Step::Sync,
    ];
    let mut out = vec![Workload { name: s("clone/switches"), steps, scale: 8 }];
    // The smallest case: blocks the clone shares with the tree that was
    // live, overwritten in the clone, must go to new blocks.
    let steps = vec![
        Step::SnapshotCreate(s("s")),
        Step::CloneCreate { source: s("s"), name: s("c") },
        Step::SwitchTree(s("c")),
        write("A/foo", 0, 8192),
        Step::Sync,
        Step::SwitchTree(s("main")),
        write("A/foo", 4096, 4096),
        Step::Sync,
    ];
    out.push(Workload { name: s("clone/overwrite"), steps, scale: 4 });
    out
}

/// Writable trees served beside each other (`Volume::enter_tree`): each
/// step enters its tree first, with fsyncs in both trees, a file held open
/// and unlinked in the clone while the live tree is written, and a clone
/// made and deleted while another tree is entered. A crash cut anywhere
/// must show the entered tree live with what its fsyncs promised, and
/// every other tree kept whole as it was left.
#[must_use]
pub fn trees_beside() -> Vec<Workload> {
    let steps = vec![
        Step::SnapshotCreate(s("s")),
        Step::CloneCreate { source: s("s"), name: s("c") },
        Step::EnterTree(s("c")),
        write("A/foo", 0, 6000),
        Step::Fsync(s("A/foo")),
        Step::EnterTree(s("main")),
        Step::Create(s("B/m1")),
        write("B/m1", 0, 5000),
        Step::Fsync(s("B/m1")),
        Step::EnterTree(s("c")),
        Step::Open { path: s("B/bar"), h: 0 },
        Step::Unlink(s("B/bar")),
        write("A/foo", 8192, 4096),
        Step::EnterTree(s("main")),
        write("B/bar", 0, 3000),
        Step::Fsync(s("B/bar")),
        Step::SnapshotCreate(s("m-snap")),
        Step::CloneCreate { source: s("m-snap"), name: s("d") },
        Step::EnterTree(s("d")),
        Step::Create(s("A/d1")),
        write("A/d1", 0, 7000),
        Step::Fsync(s("A/d1")),
        Step::EnterTree(s("c")),
        Step::FsyncOpen(0),
        Step::Close(0),
        Step::SnapshotDelete(s("d")),
        Step::Fsync(s("A/foo")),
        Step::EnterTree(s("main")),
        Step::Sync,
    ];
    let mut out = vec![Workload { name: s("trees/beside"), steps, scale: 8 }];
    // The smallest case: a change in the clone, fsynced, then one in the
    // live tree; each must land in its own tree's maps.
    let steps = vec![
        Step::SnapshotCreate(s("s")),
        Step::CloneCreate { source: s("s"), name: s("c") },
        Step::EnterTree(s("c")),
        write("A/foo", 0, 8192),
        Step::Fsync(s("A/foo")),
        Step::EnterTree(s("main")),
        write("B/bar", 0, 4096),
        Step::Fsync(s("B/bar")),
        Step::Sync,
    ];
    out.push(Workload { name: s("trees/beside-fsync"), steps, scale: 4 });
    out
}

/// Two writable trees taking many turns, each creating a file per turn,
/// deleting the one of four turns before, keeping one whose xattr fills a
/// block of its own, and now and then fsyncing: on a
/// small log (16 segments) it runs short, and each tree is left compact,
/// the cleaner moving its blocks out of segments the other tree's record
/// pins (DESIGN.md, "A tree is left compact"). Every crash state, cut
/// inside the moves or a switch, must show every tree whole.
#[must_use]
pub fn trees_turns(turns: usize) -> Workload {
    let mut steps = vec![Step::SnapshotCreate(s("s")), Step::CloneCreate { source: s("s"), name: s("c") }];
    for turn in 0..turns {
        let tree = if turn % 2 == 0 { "c" } else { "main" };
        steps.push(Step::EnterTree(s(tree)));
        let f = format!("A/t{turn}");
        steps.push(Step::Create(f.clone()));
        steps.push(write(&f, 0, 700));
        if turn >= 4 {
            steps.push(Step::Unlink(format!("A/t{}", turn - 4)));
        }
        // Kept for good, its xattr a block never written again: cold
        // blocks of both trees in the same segments.
        let k = format!("B/k{turn}");
        steps.push(Step::Create(k.clone()));
        steps.push(Step::SetXattr { path: k, len: 3000 });
        if turn % 7 == 0 {
            steps.push(Step::Fsync(f));
        }
        steps.push(Step::Tick);
    }
    steps.push(Step::EnterTree(s("main")));
    steps.push(Step::Sync);
    Workload { name: s("trees/turns"), steps, scale: 4 }
}
