//! Kept trees served beside the live one: a snapshot or a clone opened
//! through the live volume reads its own image while the live tree is
//! written, and is neither deleted nor made the live tree while open.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::thread;

use common::{Rig, options};
use dualfs_engine::Volume;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::error::Error;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::Creds;

#[test]
fn a_tree_in_use_is_neither_deleted_nor_made_live() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let s = vol.open_tree("s", "/mnt/s", options()).unwrap();
    let c = vol.open_tree("c", "/mnt/c", options()).unwrap();
    let again = vol.open_tree("s", "/mnt/s2", options()).unwrap();
    assert_eq!(vol.tree_users("s"), ["/mnt/s", "/mnt/s2"]);

    let e = vol.snapshot_delete("s").unwrap_err();
    assert!(matches!(e, Error::Busy(_)), "{e}");
    assert!(e.to_string().contains("/mnt/s, /mnt/s2"), "{e}");
    let e = vol.snapshot_delete("c").unwrap_err();
    assert!(e.to_string().contains("/mnt/c"), "{e}");
    let e = vol.switch_tree("c").unwrap_err();
    assert!(matches!(e, Error::Busy(_)) && e.to_string().contains("/mnt/c"), "{e}");
    assert_eq!(vol.live_tree(), "main");

    // Each view holds its tree until it goes, and no longer.
    drop(s);
    assert!(vol.snapshot_delete("s").is_err(), "still open at /mnt/s2");
    again.close().unwrap();
    vol.snapshot_delete("s").unwrap();
    drop(c);
    assert!(vol.tree_users("c").is_empty());
    vol.snapshot_delete("c").unwrap();
    assert!(vol.snapshot_list().is_empty());
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn a_view_reads_its_tree_while_the_live_tree_changes() {
    let rig = Rig::new();
    let vol = rig.open();
    let original = rig.read_all(&vol, "data");
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let s = vol.open_tree("s", "/mnt/s", options()).unwrap();
    let c = vol.open_tree("c", "/mnt/c", options()).unwrap();

    // The live tree overwrites, removes and fills: blocks the views hold
    // are not handed out under them.
    let f = rig.lookup(&vol, "data");
    vol.write(f, 0, &vec![7u8; original.len()]).unwrap();
    vol.unlink(InodeNo::ROOT, b"data").unwrap();
    for i in 0..20 {
        let g = vol.create(InodeNo::ROOT, format!("new{i}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        vol.write(g, 0, &[i as u8; 64 * 1024]).unwrap();
    }
    vol.sync().unwrap();
    for view in [&s, &c] {
        assert!(view.is_read_only());
        assert_eq!(rig.read_all(view, "data"), original);
        assert!(view.lookup(InodeNo::ROOT, b"new0").is_err());
        let e = view.create(InodeNo::ROOT, b"x", 0o644, Creds::ROOT).unwrap_err();
        assert!(matches!(e, Error::ReadOnly(_)), "{e}");
    }
    assert!(vol.lookup(InodeNo::ROOT, b"data").is_err());
    let e = vol.open_tree("main", "/mnt/m", options()).unwrap_err();
    assert!(matches!(e, Error::SnapshotRefused(_)), "{e}");
    assert!(matches!(vol.open_tree("nope", "/mnt/n", options()), Err(Error::NoSnapshot(_))));

    drop((s, c));
    vol.close().unwrap();
    rig.assert_fsck_clean();
    // Both trees as they were, the live one as it became.
    let vol = rig.open();
    assert!(vol.lookup(InodeNo::ROOT, b"new19").is_ok());
    // A view through handles of its own outlives the volume.
    let own: (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (rig.meta.clone(), rig.data.clone());
    let c = vol.open_tree_on(own, "c", "/mnt/c", options()).unwrap();
    vol.close().unwrap();
    assert_eq!(rig.read_all(&c, "data"), original);
}

/// The names in the root of the tree entered.
fn names(vol: &Volume) -> Vec<String> {
    let mut v = Vec::new();
    vol.readdir(InodeNo::ROOT, 0, &mut |e| {
        v.push(String::from_utf8_lossy(&e.name).into_owned());
        true
    })
    .unwrap();
    v.retain(|n| n != "." && n != "..");
    v.sort();
    v
}

#[test]
fn two_writable_trees_written_at_once_keep_their_own_files_through_a_crash() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let before = names(&vol);
    // Two writers, one a tree, each entering its tree before each
    // operation; fsyncs in both.
    thread::scope(|scope| {
        for tree in ["main", "c"] {
            let vol = &vol;
            scope.spawn(move || {
                for i in 0..12 {
                    let name = format!("{tree}-{i}");
                    let g = vol.enter_tree(tree).unwrap();
                    let f = vol.create(InodeNo::ROOT, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
                    vol.write(f, 0, &vec![i as u8 + 1; 9000]).unwrap();
                    vol.fsync(f).unwrap();
                    drop(g);
                }
            });
        }
    });
    let mine = |tree: &str| {
        let mut want = before.clone();
        want.extend((0..12).map(|i| format!("{tree}-{i}")));
        want.sort();
        want
    };
    for tree in ["main", "c", "main"] {
        let _g = vol.enter_tree(tree).unwrap();
        assert_eq!(names(&vol), mine(tree), "{tree}");
        assert_eq!(rig.read_all(&vol, &format!("{tree}-7")), vec![8u8; 9000]);
    }
    // A crash now (the devices as they are, the volume never closed): each
    // tree has every file its fsyncs made durable.
    let _g = vol.enter_tree("c").unwrap();
    let (meta, data) = (Arc::new(rig.meta.snapshot()), Arc::new(rig.data.snapshot()));
    let crashed = Rig { meta, data };
    let after = crashed.open();
    assert_eq!(after.live_tree(), "c");
    assert_eq!(names(&after), mine("c"));
    let main = after.open_tree("main", "/mnt/m", options()).unwrap();
    assert_eq!(names(&main), mine("main"));
    drop(main);
    drop(after.enter_tree("main").unwrap());
    assert_eq!(names(&after), mine("main"));
    after.close().unwrap();
    crashed.assert_fsck_clean();
}

#[test]
fn a_file_held_in_a_tree_left_lives_until_its_tree_lets_go() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let g = vol.enter_tree("c").unwrap();
    let f = rig.lookup(&vol, "data");
    vol.remember(f, 1);
    vol.unlink(InodeNo::ROOT, b"data").unwrap();
    drop(g);
    // The live tree's own file of the same number is written and removed
    // while the clone's is held.
    let g = vol.enter_tree("main").unwrap();
    assert_eq!(rig.lookup(&vol, "data"), f);
    assert_eq!(vol.references(f), 0);
    vol.write(f, 0, &[9u8; 5000]).unwrap();
    vol.unlink(InodeNo::ROOT, b"data").unwrap();
    vol.sync().unwrap();
    assert!(vol.getattr(f).is_err(), "main's file goes with its last name");
    drop(g);
    let e = vol.snapshot_delete("c").unwrap_err();
    assert!(matches!(e, Error::Busy(_)), "{e}");
    let g = vol.enter_tree("c").unwrap();
    assert_eq!(vol.references(f), 1);
    assert_eq!(vol.read(f, 0, 40_000).unwrap(), vec![7u8; 40_000]);
    vol.forget(f, 1).unwrap();
    assert!(vol.getattr(f).is_err(), "the clone's file goes with its last reference");
    drop(g);
    drop(vol.enter_tree("main").unwrap());
    vol.snapshot_delete("c").unwrap();
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn an_orphan_left_in_a_kept_tree_by_a_crash_goes_when_it_is_entered() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let g = vol.enter_tree("c").unwrap();
    let f = rig.lookup(&vol, "data");
    vol.remember(f, 1);
    vol.unlink(InodeNo::ROOT, b"data").unwrap();
    drop(g);
    drop(vol.enter_tree("main").unwrap());
    let crashed = Rig { meta: Arc::new(rig.meta.snapshot()), data: Arc::new(rig.data.snapshot()) };
    drop(vol);
    let vol = crashed.open();
    assert_eq!(vol.live_tree(), "main");
    drop(vol.enter_tree("c").unwrap());
    assert!(vol.getattr(f).is_err(), "nothing holds it after the crash");
    drop(vol.enter_tree("main").unwrap());
    vol.close().unwrap();
    crashed.assert_fsck_clean();
}

/// The log of a 256 MiB volume (20 segments of 1 MiB), two trees taking
/// 400 turns, each creating 24 small files a turn and deleting them three
/// of its turns later, and keeping one file a turn whose xattr fills a
/// block never written again: the head segments take both trees' cold
/// blocks between the other writes' dead ones, and each such segment is
/// pinned by whichever tree is kept. Unless a tree is left compact (its
/// blocks moved out of the segments the other pins), the log runs out at
/// turn 124 of 400 with some 370 KiB kept.
#[test]
fn trees_taking_turns_on_a_small_log_never_run_it_out_of_space() {
    let (rig, vol, w) = small_log_with_a_clone();
    const TURNS: usize = 400;
    const FILES: usize = 24;
    let name = |tree: &str, turn: usize, k: usize| format!("{tree}-{turn:04}-{k:02}");
    for turn in 0..TURNS {
        let tree = if turn % 2 == 0 { "c" } else { "main" };
        let _g = vol.enter_tree(tree).unwrap();
        for k in 0..FILES {
            let n = name(tree, turn, k);
            if let Err(e) = small_file(&vol, w, &n) {
                panic!("turn {turn} of {tree}, create {n}: {e} ({})", log_state(&vol));
            }
        }
        if turn >= 6 {
            for k in 0..FILES {
                vol.unlink(w, name(tree, turn - 6, k).as_bytes()).unwrap();
            }
        }
        // One file kept for good, its xattr a block of its own never
        // written again: cold blocks of both trees in the same segments.
        let n = format!("{tree}-cold-{turn:04}");
        let made = vol.create(w, n.as_bytes(), 0o644, Creds::ROOT).and_then(|a| {
            vol.setxattr(a.ino, b"user.cold", &[7u8; 3000], dualfs_engine::volume::SetMode::Any)?;
            vol.forget(a.ino, 1)
        });
        if let Err(e) = made {
            panic!("turn {turn} of {tree}, create {n}: {e} ({})", log_state(&vol));
        }
        vol.tick().unwrap();
    }
    // Each tree holds its last three turns' files, and none of the other's.
    for tree in ["main", "c"] {
        let _g = vol.enter_tree(tree).unwrap();
        let first = if tree == "c" { TURNS - 6 } else { TURNS - 5 };
        let mut want: Vec<String> =
            (first..TURNS).step_by(2).flat_map(|t| (0..FILES).map(move |k| name(tree, t, k))).collect();
        want.extend((first % 2..TURNS).step_by(2).map(|t| format!("{tree}-cold-{t:04}")));
        want.sort();
        assert_eq!(names_in(&vol, w), want, "{tree}");
    }
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

/// A small volume for the space tests: the log of a 256 MiB volume (20
/// segments of 1 MiB), a directory `w` in both trees, a clone `c`.
fn small_log_with_a_clone() -> (Rig, Volume, InodeNo) {
    use dualfs_engine::device::MemoryDevice;
    use dualfs_engine::volume::MkfsOptions;

    let (meta, data) = (Arc::new(MemoryDevice::new(20 * 256)), Arc::new(MemoryDevice::new(16384)));
    Volume::format(meta.clone(), data.clone(), &MkfsOptions::default()).unwrap();
    let rig = Rig { meta, data };
    let vol = rig.open();
    let w = vol.mkdir(InodeNo::ROOT, b"w", 0o755, Creds::ROOT).unwrap().ino;
    vol.forget(w, 1).unwrap();
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    (rig, vol, w)
}

/// Creates `name` in `dir` with its name as contents and a 300-byte xattr.
fn small_file(vol: &Volume, dir: InodeNo, name: &str) -> dualfs_engine::error::Result<()> {
    use dualfs_engine::volume::SetMode;
    let a = vol.create(dir, name.as_bytes(), 0o644, Creds::ROOT)?;
    vol.write(a.ino, 0, name.as_bytes())?;
    vol.setxattr(a.ino, b"user.x", &[name.len() as u8; 300], SetMode::Any)?;
    vol.forget(a.ino, 1)
}

fn log_state(vol: &Volume) -> String {
    vol.with_fs(|fs| {
        format!(
            "free segments {}, reserve {}, pinned {}",
            fs.log.free_segments(),
            fs.log.reserve_segments(),
            fs.log.snapshot_segments()
        )
    })
}

/// The sorted names in directory `dir` of the tree entered.
fn names_in(vol: &Volume, dir: InodeNo) -> Vec<String> {
    let mut got = Vec::new();
    vol.readdir(dir, 0, &mut |e| {
        got.push(String::from_utf8_lossy(&e.name).into_owned());
        true
    })
    .unwrap();
    got.retain(|n| n != "." && n != "..");
    got.sort();
    got
}

/// A tree left with its blocks loose (segments mostly dead) while the log
/// was not short, and not entered again: the other tree's files later
/// need most of the log, and what the tree left pins would make their
/// creation fail with ENOSPC unless it was left compact.
#[test]
fn a_tree_left_loose_is_left_compact() {
    let (rig, vol, w) = small_log_with_a_clone();
    const MANY: usize = 700;
    let name = |tree: &str, i: usize| format!("{tree}-{i:05}");
    {
        // Each file's xattr a block of its own: one in twelve kept, spread
        // over every segment the clone wrote.
        let _g = vol.enter_tree("c").unwrap();
        for i in 0..MANY {
            let a = vol.create(w, name("c", i).as_bytes(), 0o644, Creds::ROOT).unwrap();
            vol.setxattr(a.ino, b"user.x", &[3u8; 3000], dualfs_engine::volume::SetMode::Any).unwrap();
            vol.forget(a.ino, 1).unwrap();
            // Written as it goes, as the flusher writes it.
            if i % 10 == 9 {
                vol.tick().unwrap();
            }
        }
        for i in (0..MANY).filter(|i| i % 12 != 0) {
            vol.unlink(w, name("c", i).as_bytes()).unwrap();
        }
    }
    let kept_c: Vec<String> = (0..MANY).step_by(12).map(|i| name("c", i)).collect();
    drop(vol.enter_tree("main").unwrap());
    let left = log_state(&vol);
    const ROUND: usize = 1500;
    const ROUNDS: usize = 10;
    for round in 0..ROUNDS {
        {
            let _g = vol.enter_tree("main").unwrap();
            for i in 0..ROUND {
                let n = name("m", round * ROUND + i);
                if let Err(e) = small_file(&vol, w, &n) {
                    panic!("round {round}, create {n}: {e} ({}; when c was left: {left})", log_state(&vol));
                }
            }
        }
        vol.tick().unwrap();
    }
    let g = vol.enter_tree("main").unwrap();
    assert_eq!(names_in(&vol, w), (0..ROUNDS * ROUND).map(|i| name("m", i)).collect::<Vec<_>>());
    drop(g);
    let g = vol.enter_tree("c").unwrap();
    assert_eq!(names_in(&vol, w), kept_c);
    drop(g);
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn a_tree_served_alone_passes_the_gate_unseen_yet_never_under_a_switch() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("s").unwrap();
    vol.clone_create("s", "c").unwrap();
    let main = vol.serve_tree("main", "/mnt/m").unwrap();
    // The first operation enters through the lock; then main is served
    // alone, entered, and nothing waits.
    drop(vol.enter_served(&main).unwrap());
    let held = vol.enter_served(&main).unwrap();
    let switched = std::sync::atomic::AtomicBool::new(false);
    thread::scope(|scope| {
        let (vol, switched) = (&vol, &switched);
        let other = scope.spawn(move || {
            let g = vol.enter_tree("c").unwrap();
            switched.store(true, std::sync::atomic::Ordering::SeqCst);
            drop(g);
        });
        // However long main's operation runs, c is not entered under it.
        thread::sleep(std::time::Duration::from_millis(100));
        assert!(!switched.load(std::sync::atomic::Ordering::SeqCst), "c entered under main's operation");
        assert_eq!(vol.live_tree(), "main");
        drop(held);
        other.join().unwrap();
    });
    assert_eq!(vol.live_tree(), "c");
    // Back to main through the lock, and alone again after.
    drop(vol.enter_served(&main).unwrap());
    assert_eq!(vol.live_tree(), "main");
    drop(vol.enter_served(&main).unwrap());
    drop(main);
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn each_tree_shows_the_data_only_it_holds_and_what_it_shares() {
    use dualfs_engine::volume::{TreeKind, TreeSpace};
    const B: u64 = 4096;
    let rig = Rig::new();
    let vol = rig.open();
    let space = |vol: &Volume| -> Vec<(String, TreeKind, u64, u64)> {
        vol.tree_spaces().into_iter().map(|t: TreeSpace| (t.name, t.kind, t.only_bytes, t.shared_bytes)).collect()
    };
    let row = |name: &str, kind, only: u64, shared: u64| (name.to_string(), kind, only, shared);
    let file = |vol: &Volume, name: &str, blocks: usize| {
        let f = vol.create(InodeNo::ROOT, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        vol.write(f, 0, &vec![3u8; blocks * 4096]).unwrap();
        vol.sync().unwrap();
        f
    };
    // One tree: all it reaches is its own.
    let one = space(&vol);
    let [(_, TreeKind::Live, base, 0)] = one[..] else { panic!("{one:?}") };
    assert!(base >= 10 * B, "the rig's 40,000-byte file: {base}");
    let f = file(&vol, "f", 20);
    vol.snapshot_create("s").unwrap();
    let both = base + 20 * B;
    assert_eq!(space(&vol), [row("main", TreeKind::Live, 0, both), row("s", TreeKind::Snapshot, 0, both)]);
    // The live tree lets f go and writes g: f is the snapshot's alone.
    vol.unlink(InodeNo::ROOT, b"f").unwrap();
    vol.forget(f, 1).unwrap();
    file(&vol, "g", 5);
    vol.sync().unwrap();
    assert_eq!(space(&vol), [row("main", TreeKind::Live, 5 * B, base), row("s", TreeKind::Snapshot, 20 * B, base)]);
    // A clone of s, written in: f is shared again, its new file its own.
    vol.clone_create("s", "c").unwrap();
    drop(vol.enter_tree("c").unwrap());
    file(&vol, "h", 3);
    assert_eq!(
        space(&vol),
        [
            row("c", TreeKind::Live, 3 * B, both),
            row("s", TreeKind::Snapshot, 0, both),
            row("main", TreeKind::Clone, 5 * B, base),
        ]
    );
    // The same after a mount, which leaves the records' bitmaps on disk.
    let before = space(&vol);
    vol.close().unwrap();
    rig.assert_fsck_clean();
    let vol = rig.open();
    assert_eq!(space(&vol), before);
    vol.close().unwrap();
}
