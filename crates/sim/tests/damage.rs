//! fsck and mount on damaged images: a flipped bit in any kind of structure
//! is named (mount refuses, falls back or reports a torn log; fsck lists a
//! problem) or harmless (the tree reads the same); never silent, never a
//! panic. Mutated images and mutated payloads fed to every decoder must
//! give errors, not panics (proptest; `DUALFS_DAMAGE_CASES` sets the cases).

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock};

use dualfs_engine::Volume;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::types::{BLOCK_SIZE, MetaBlock};
use dualfs_sim::crash::{Choice, StateSpec};
use dualfs_sim::decode;
use dualfs_sim::explorer::{Config, Explorer};
use dualfs_sim::image::{Block, Image, OverlayDevice};
use dualfs_sim::tree::Tree;
use dualfs_sim::workload::{Step, Workload, fixed_clock};
use dualfs_sim::workloads;
use proptest::prelude::*;

/// A volume holding every kind of structure, crashed after a tail of log
/// that roll-forward must read: (meta, data) images.
fn damaged_base() -> &'static (Arc<Image>, Arc<Image>, Tree) {
    static BASE: OnceLock<(Arc<Image>, Arc<Image>, Tree)> = OnceLock::new();
    BASE.get_or_init(|| {
        let ex = Explorer::new(Config::default(), &workloads::setup()).expect("base image");
        let w = workloads::every_structure("damage", 250, 24);
        let run = ex.record(&w).expect("workload");
        let img = run.recording.build(&StateSpec { cut: run.recording.events.len(), choice: Choice::All });
        let (meta, data) = (img.meta, img.data);
        let vol = mount(&meta, &data).expect("the undamaged image mounts");
        let tree = Tree::of_volume(&vol).expect("and reads");
        (meta, data, tree)
    })
}

fn devices(meta: &Arc<Image>, data: &Arc<Image>) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    (Arc::new(OverlayDevice::new(meta.clone())), Arc::new(OverlayDevice::new(data.clone())))
}

fn mount(meta: &Arc<Image>, data: &Arc<Image>) -> dualfs_engine::Result<Volume> {
    let (m, d) = devices(meta, data);
    Volume::open_with_clock(m, d, Config::default().mount, fixed_clock())
}

/// What a damaged image led to.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Mount or fsck said so.
    Named(String),
    /// Nothing noticed, and nothing changed.
    Harmless,
    /// Nothing noticed, yet the tree differs.
    Silent(String),
}

fn judge(meta: &Arc<Image>, data: &Arc<Image>, want: &Tree) -> Outcome {
    let (m, d) = devices(meta, data);
    let fsck = match dualfs_engine::check::check(m, d) {
        Err(e) => return Outcome::Named(format!("fsck: {e}")),
        Ok(r) if !r.is_clean() => Some(r.problems[0].to_string()),
        Ok(_) => None,
    };
    let vol = match mount(meta, data) {
        Err(e) => return Outcome::Named(format!("mount: {e}")),
        Ok(v) => v,
    };
    let r = vol.open_report();
    if let Some(why) = &r.fell_back {
        return Outcome::Named(format!("mount fell back: {why}"));
    }
    if !r.recovery.end.is_clean() {
        return Outcome::Named(format!("mount: log ends early: {}", r.recovery.end));
    }
    if let Some(p) = fsck {
        return Outcome::Named(format!("fsck: {p}"));
    }
    match Tree::of_volume(&vol) {
        Err(e) => Outcome::Named(format!("read: {e}")),
        Ok(t) if t == *want => Outcome::Harmless,
        Ok(t) => Outcome::Silent(match t.same_namespace(want) {
            Err(e) => e,
            Ok(()) => "file contents differ".into(),
        }),
    }
}

/// What `fsck -y` made of a damaged image.
#[derive(Debug, PartialEq, Eq)]
enum Repaired {
    /// Nothing to repair.
    Nothing,
    /// Repaired: clean, mounts, a second repair finds nothing; whether every
    /// path of the undamaged tree is there, as it was.
    Whole(bool),
}

/// Repairs the image pair (in overlays), then checks the result: fsck
/// clean, a writable mount, a second repair with nothing to do. An error
/// says what failed.
fn repair(meta: &Arc<Image>, data: &Arc<Image>, want: &Tree) -> Result<Repaired, String> {
    let (m, d) = devices(meta, data);
    let p = dualfs_engine::repair::prepare_with_clock(m.clone(), d.clone(), fixed_clock())
        .map_err(|e| format!("repair: {e}"))?;
    if p.is_empty() {
        return Ok(Repaired::Nothing);
    }
    if let Some(after) = p.after.as_ref().filter(|a| !a.is_clean()) {
        return Err(format!("not clean after repair: {:?}; repairs {:?}", after.problems, p.repairs));
    }
    p.write(m.as_ref(), d.as_ref()).map_err(|e| format!("write: {e}"))?;
    let r = dualfs_engine::check::check(m.clone(), d.clone()).map_err(|e| format!("fsck after: {e}"))?;
    if !r.is_clean() {
        return Err(format!("fsck after the repair: {:?}", r.problems));
    }
    let again = dualfs_engine::repair::prepare_with_clock(m.clone(), d.clone(), fixed_clock())
        .map_err(|e| format!("second repair: {e}"))?;
    if !again.is_empty() {
        return Err(format!("a second repair finds {:?}", again.repairs));
    }
    let vol = Volume::open_with_clock(m, d, Config::default().mount, fixed_clock())
        .map_err(|e| format!("mount after the repair: {e}"))?;
    let tree = Tree::of_volume(&vol).map_err(|e| format!("read after the repair: {e}"))?;
    let whole = want.entries.iter().all(|(k, v)| tree.entries.get(k) == Some(v));
    Ok(Repaired::Whole(whole))
}

fn kind_of(dev: &str, no: u64, b: &[u8]) -> &'static str {
    match (dev, no) {
        ("data", 0) => "superblock copy (data device)",
        ("data", _) => "file data",
        (_, 0) => "superblock",
        (_, 1 | 2) => "checkpoint slot",
        _ if b[..4] == *b"DFSM" => match b[8] {
            1 => "descriptor",
            2 => "inode block",
            3 => "B-tree node",
            4 => "blob",
            5 => "IFile table block",
            6 => "IFile index block",
            _ => "unknown meta-data block",
        },
        _ => "unused meta-data block",
    }
}

fn flipped(b: &Block, byte: usize, bit: u8) -> Block {
    let mut x = **b;
    x[byte] ^= 1 << bit;
    Arc::new(x)
}

/// Byte offsets to flip in a block: its header, its payload, its padding.
fn offsets(b: &[u8]) -> Vec<usize> {
    if b[..4] == *b"DFSM" {
        let payload = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
        let end = (56 + payload).min(BLOCK_SIZE);
        let mut v = vec![9, 30, 56 + payload / 2, end.saturating_sub(1)];
        if end + 8 < BLOCK_SIZE {
            v.push(end + 8);
        }
        v
    } else {
        vec![5, 40, 100, 300]
    }
}

#[test]
fn a_flipped_bit_in_any_kind_of_structure_is_named_or_harmless() {
    let (meta, data, want) = damaged_base();
    let mut seen: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    let mut repaired: BTreeMap<&str, u32> = BTreeMap::new();
    let mut unrepaired = Vec::new();
    let mut silent = Vec::new();
    for (dev, img) in [("meta", meta), ("data", data)] {
        for (no, b) in img.written() {
            let kind = kind_of(dev, no, &b[..]);
            if kind == "file data" {
                // No checksums on the data device: a flipped bit there is
                // the file's content, for every file system without data
                // checksums.
                continue;
            }
            for (i, byte) in offsets(&b[..]).into_iter().enumerate() {
                let damaged = Arc::new(img.with_blocks([(no, flipped(&b, byte, (i % 8) as u8))]));
                let (m, d) = if dev == "meta" { (&damaged, data) } else { (meta, &damaged) };
                let outcome = catch_unwind(AssertUnwindSafe(|| judge(m, d, want)))
                    .unwrap_or_else(|_| panic!("{kind} at {dev} block {no}, byte {byte}: a panic"));
                let fixed = catch_unwind(AssertUnwindSafe(|| repair(m, d, want)))
                    .unwrap_or_else(|_| panic!("{kind} at {dev} block {no}, byte {byte}: a panic in repair"));
                match fixed {
                    Ok(Repaired::Whole(_)) => *repaired.entry(kind).or_default() += 1,
                    Ok(Repaired::Nothing) => {}
                    Err(why) => unrepaired.push(format!("{kind} at {dev} block {no}, byte {byte}: {why}")),
                }
                let e = seen.entry(kind).or_default();
                match outcome {
                    Outcome::Named(_) => e.0 += 1,
                    Outcome::Harmless => e.1 += 1,
                    Outcome::Silent(why) => silent.push(format!("{kind} at {dev} block {no}, byte {byte}: {why}")),
                }
            }
        }
    }
    for (kind, (named, harmless)) in &seen {
        let fixed = repaired.get(kind).copied().unwrap_or(0);
        println!("{kind:32} {named:4} named {harmless:4} harmless (stale copies) {fixed:4} repaired");
    }
    assert!(silent.is_empty(), "damage nobody noticed:\n{}", silent.join("\n"));
    assert!(unrepaired.is_empty(), "damage fsck -y did not repair:\n{}", unrepaired.join("\n"));
    for kind in [
        "superblock",
        "superblock copy (data device)",
        "checkpoint slot",
        "descriptor",
        "inode block",
        "B-tree node",
        "blob",
        "IFile table block",
        "IFile index block",
    ] {
        assert!(seen.get(kind).is_some_and(|(n, _)| *n > 0), "no damage to a {kind} was named: {seen:?}");
    }
}

/// Cases of each property (`DUALFS_DAMAGE_CASES`, default 200).
fn cases() -> u32 {
    std::env::var("DUALFS_DAMAGE_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(200)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// Several bytes of several meta-data blocks overwritten at random:
    /// mount, fsck and reading the tree give errors or results, never panics.
    #[test]
    fn mutated_images_never_panic(muts in proptest::collection::vec((any::<u16>(), 0usize..BLOCK_SIZE, any::<u8>()), 1..6)) {
        let (meta, data, _) = damaged_base();
        let written = meta.written();
        let mut blocks: BTreeMap<u64, [u8; BLOCK_SIZE]> = BTreeMap::new();
        for (pick, at, v) in &muts {
            let (no, b) = &written[*pick as usize % written.len()];
            blocks.entry(*no).or_insert(**b)[*at] = *v;
        }
        let damaged = Arc::new(meta.with_blocks(blocks.into_iter().map(|(n, b)| (n, Arc::new(b)))));
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _ = judge(&damaged, data, &Tree::default());
        }));
        prop_assert!(r.is_ok(), "a panic on mutations {muts:?}");
    }

    /// Every decoder, fed the real payloads of the image with bytes changed
    /// (checksums sealed again, so that the decoding past them runs).
    #[test]
    fn decoders_never_panic_on_mutated_structures(pick in any::<u16>(), muts in proptest::collection::vec((0usize..BLOCK_SIZE, any::<u8>()), 1..8)) {
        let (meta, _, _) = damaged_base();
        let written = meta.written();
        let (no, b) = &written[pick as usize % written.len()];
        let mut x = **b;
        for (at, v) in &muts {
            x[*at] = *v;
        }
        let r = catch_unwind(AssertUnwindSafe(|| decode::decode_everything(&x, MetaBlock(*no))));
        prop_assert!(r.is_ok(), "a decoder panicked on block {no} with {muts:?}");
    }
}

/// The small volume of the explorer's setup, one commit after its checkpoint.
fn small_base() -> &'static (Arc<Image>, Arc<Image>, Tree) {
    static BASE: OnceLock<(Arc<Image>, Arc<Image>, Tree)> = OnceLock::new();
    BASE.get_or_init(|| {
        let ex = Explorer::new(Config::default(), &workloads::setup()).expect("base image");
        let steps = vec![
            Step::Create("A/new".into()),
            Step::Write { path: "A/new".into(), offset: 0, len: 5000 },
            Step::Fsync("A".into()),
        ];
        let w = Workload { name: "small".into(), steps, scale: 1 };
        let run = ex.record(&w).expect("workload");
        let img = run.recording.build(&StateSpec { cut: run.recording.events.len(), choice: Choice::All });
        let vol = mount(&img.meta, &img.data).expect("the undamaged image mounts");
        let tree = Tree::of_volume(&vol).expect("and reads");
        (img.meta, img.data, tree)
    })
}

/// What zeroing one block did, judged by mount and fsck.
#[derive(Default, Debug)]
struct Sweep {
    blocks: u32,
    /// Mount or fsck said something (refused, fell back, damage, problems).
    reported: u32,
    /// Of those, the volume still mounted and read the same.
    reported_no_loss: u32,
    /// Nothing said, nothing changed (stale copies, unused blocks).
    harmless: u32,
    /// Nothing said and the tree differs.
    silent: Vec<String>,
    /// Neither mountable nor checkable, by kind of block.
    unmountable: Vec<String>,
    /// Of those, repaired by `fsck -y` with every file where it was.
    unmountable_repaired_whole: u32,
    /// Nothing said, tree differs, and the block belongs to the last commit
    /// group of the log: nothing after it vouches that it was durable, and a
    /// crash tearing that group looks the same (docs/TESTING.md).
    last_group: u32,
    /// Repaired by `fsck -y` (clean, mounts, nothing more to repair).
    repaired: u32,
    /// Of those, every path of the undamaged tree is there as it was.
    repaired_whole: u32,
    /// Repairs that failed, with why.
    unrepaired: Vec<String>,
}

/// The blocks of the partial segment with the highest sequence number.
fn last_partial_segment(meta: &Arc<Image>) -> std::ops::Range<u64> {
    let mut best: Option<(u64, u64, u64)> = None;
    for (no, b) in meta.written() {
        if b[..4] == *b"DFSM" && b[8] == 1 && b[10..12] == [0, 0] {
            let seq = u64::from_le_bytes(b[32..40].try_into().unwrap());
            // Count the blocks that follow with the same sequence number.
            let mut n = 1;
            while meta.written().iter().any(|(m, x)| *m == no + n && x[..4] == *b"DFSM" && x[32..40] == b[32..40]) {
                n += 1;
            }
            if best.is_none_or(|(s, _, _)| seq > s) {
                best = Some((seq, no, n));
            }
        }
    }
    best.map_or(0..0, |(_, no, n)| no..no + n)
}

fn sweep(meta: &Arc<Image>, data: &Arc<Image>, want: &Tree) -> Sweep {
    let mut s = Sweep::default();
    let zero: Block = Arc::new([0u8; BLOCK_SIZE]);
    let last = last_partial_segment(meta);
    for (no, b) in meta.written() {
        if b.iter().all(|&x| x == 0) {
            continue;
        }
        s.blocks += 1;
        let damaged = Arc::new(meta.with_blocks([(no, zero.clone())]));
        let (m, d) = devices(&damaged, data);
        let fsck = dualfs_engine::check::check(m, d);
        let ro = dualfs_engine::volume::MountOptions { read_only: true, ..Config::default().mount };
        let (m, d) = devices(&damaged, data);
        let vol = dualfs_engine::repair::rescue::open_with_clock(m, d, ro, fixed_clock());
        let tree = vol.as_ref().ok().and_then(|v| Tree::of_volume(v).ok());
        let said = match (&fsck, &vol) {
            (Err(_), _) | (_, Err(_)) => true,
            (Ok(r), Ok(v)) => !r.is_clean() || v.open_report().is_damaged() || v.open_report().fell_back.is_some(),
        };
        let unmountable = fsck.is_err() && vol.is_err();
        if unmountable {
            s.unmountable.push(format!("{} at block {no}", kind_of("meta", no, &b[..])));
        }
        let same = tree.as_ref() == Some(want);
        match repair(&damaged, data, want) {
            Ok(Repaired::Whole(whole)) => {
                s.repaired += 1;
                s.repaired_whole += u32::from(whole);
                s.unmountable_repaired_whole += u32::from(whole && unmountable);
            }
            Ok(Repaired::Nothing) => {}
            Err(why) => s.unrepaired.push(format!("{} at block {no}: {why}", kind_of("meta", no, &b[..]))),
        }
        match (said, same) {
            (true, true) => {
                s.reported += 1;
                s.reported_no_loss += 1;
            }
            (true, false) => s.reported += 1,
            (false, true) => s.harmless += 1,
            (false, false) if last.contains(&no) => s.last_group += 1,
            (false, false) => s.silent.push(format!("{} at block {no}", kind_of("meta", no, &b[..]))),
        }
    }
    s
}

#[test]
fn zeroing_any_single_used_meta_data_block_is_reported_or_harmless() {
    let mut silent = Vec::new();
    let mut unrepaired = Vec::new();
    let mut unmountable = Vec::new();
    for (name, (meta, data, want)) in [("small", small_base()), ("aged", damaged_base())] {
        let s = sweep(meta, data, want);
        println!(
            "single-block damage, {name} volume: {} used meta-data blocks zeroed: {} reported ({} of them with \
             nothing lost), {} harmless, {} silent, {} in the last commit group (undetectable), {} unmountable {:?}; \
             {} repaired by fsck -y ({} with every file where it was, {} of them unmountable before)",
            s.blocks,
            s.reported,
            s.reported_no_loss,
            s.harmless,
            s.silent.len(),
            s.last_group,
            s.unmountable.len(),
            s.unmountable,
            s.repaired,
            s.repaired_whole,
            s.unmountable_repaired_whole
        );
        silent.extend(s.silent.into_iter().map(|x| format!("{name}: {x}")));
        unrepaired.extend(s.unrepaired.into_iter().map(|x| format!("{name}: {x}")));
        unmountable.extend(s.unmountable.into_iter().map(|x| format!("{name}: {x}")));
    }
    assert!(silent.is_empty(), "damage nobody noticed:\n{}", silent.join("\n"));
    // No single block may leave the volume unopenable: the IFile both
    // checkpoints share is rebuilt from the log (repair::rescue).
    assert!(unmountable.is_empty(), "damage that left the volume unopenable:\n{}", unmountable.join("\n"));
    assert!(unrepaired.is_empty(), "damage fsck -y did not repair:\n{}", unrepaired.join("\n"));
}
