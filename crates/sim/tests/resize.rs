//! Resize under the crash explorer: a crash at any moment of a grow must
//! leave a volume that mounts at the old or the new size with nothing lost
//! (the explorer's oracles: the recovered tree is one the model allows,
//! fsck is clean), and the grow must really take effect.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::device::BlockDevice;
use dualfs_engine::volume::{ResizeRequest, Volume};
use dualfs_sim::crash::{Choice, StateSpec};
use dualfs_sim::explorer::{Config, Explorer};
use dualfs_sim::image::OverlayDevice;
use dualfs_sim::workload::{Step, Workload};
use dualfs_sim::workloads;

/// A small log (16 segments) on devices with room to grow by half again.
#[must_use]
pub fn config() -> Config {
    Config {
        meta_blocks: 17 * 128,
        spare_meta_blocks: 8 * 128,
        spare_data_blocks: 8192,
        verbose: std::env::var("DUALFS_CRASH_VERBOSE").is_ok(),
        ..Config::default()
    }
}

fn list(c: &Config) -> Vec<dualfs_sim::workload::Workload> {
    workloads::resizes(c.meta_blocks, c.data_blocks, c.spare_meta_blocks, c.spare_data_blocks)
}

#[test]
fn every_crash_state_of_a_grow_mounts_at_the_old_or_new_size_with_nothing_lost() {
    let c = config();
    let ex = Explorer::new(c.clone(), &workloads::setup()).expect("base image");
    let replay = std::env::var("DUALFS_CRASH_REPLAY").ok().filter(|s| !s.is_empty());
    for w in list(&c) {
        if let Some(spec) = &replay {
            let (_, rest) = spec.split_once(':').expect("seed:workload:state");
            let (name, state) = rest.rsplit_once(':').expect("seed:workload:state");
            if name == w.name {
                ex.replay(&w, state.parse().ok()).unwrap_or_else(|f| panic!("{f}"));
            }
            continue;
        }
        let started = std::time::Instant::now();
        let stats = ex.explore(&w).unwrap_or_else(|f| panic!("{f}"));
        println!("{}: {} crash states in {:.1} s", w.name, stats.states_checked, started.elapsed().as_secs_f64());
        assert!(stats.states_checked >= 20, "{}: only {} crash states", w.name, stats.states_checked);
    }
}

/// The workloads are a test of growing only if the grow happens: at the
/// end of each, with every write on disk, the volume mounts at the new
/// size, and an empty request changes nothing.
#[test]
fn the_resize_workloads_grow_the_volume() {
    let c = config();
    let ex = Explorer::new(c.clone(), &workloads::setup()).expect("base image");
    let (m, d) = ex.base();
    let base_sb =
        dualfs_engine::meta_log::Log::read_superblocks(&OverlayDevice::new(m), &OverlayDevice::new(d)).unwrap();
    for w in list(&c) {
        let run = ex.record(&w).unwrap();
        let end = StateSpec { cut: run.recording.events.len(), choice: Choice::All };
        let img = run.recording.build(&end);
        let meta: Arc<dyn BlockDevice> = Arc::new(OverlayDevice::new(img.meta));
        let data: Arc<dyn BlockDevice> = Arc::new(OverlayDevice::new(img.data));
        let vol = Volume::open(meta, data, c.mount).unwrap();
        let r = vol.resize(ResizeRequest::default()).unwrap();
        assert_eq!(r.before, r.after, "an empty request changes nothing");
        let g = r.after;
        let grew_meta = g.segment_count > base_sb.segment_count;
        let grew_data = g.data_blocks > base_sb.data_blocks;
        if w.name == "resize/shrink-meta" {
            assert_eq!(g.segment_count, base_sb.segment_count, "{}: shrunk back", w.name);
        } else if w.name == "resize/shrink-data" {
            assert_eq!(g.data_blocks, base_sb.data_blocks, "{}: shrunk back", w.name);
        } else {
            assert!(grew_meta || grew_data, "{}: still {g:?}", w.name);
        }
        let st = vol.statfs();
        assert_eq!(st.blocks, g.data_blocks, "{}", w.name);
        assert_eq!(st.meta_segments, u64::from(g.segment_count), "{}", w.name);
        vol.close().unwrap();
    }
}

/// The devices as the steps of `w` before the first one `is_shrink` picks
/// leave them, every write on disk.
fn before_shrink(
    ex: &Explorer,
    w: &Workload,
    is_shrink: impl Fn(&Step) -> bool,
) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    let cut = w.steps.iter().position(is_shrink).unwrap();
    let before = Workload { name: w.name.clone(), steps: w.steps[..cut].to_vec(), scale: 1 };
    let run = ex.record(&before).unwrap();
    let img = run.recording.build(&StateSpec { cut: run.recording.events.len(), choice: Choice::All });
    (Arc::new(OverlayDevice::new(img.meta)), Arc::new(OverlayDevice::new(img.data)))
}

/// The shrink workload is a test of moving only if the log's head and
/// live meta-data lie past the new end when it shrinks.
#[test]
fn the_shrink_workload_has_meta_data_past_the_new_end() {
    let c = config();
    let ex = Explorer::new(c.clone(), &workloads::setup()).expect("base image");
    let w = workloads::shrink_meta(c.meta_blocks, c.spare_meta_blocks);
    let (meta, data) = before_shrink(&ex, &w, |s| matches!(s, Step::Resize { meta, .. } if *meta == c.meta_blocks));
    let (log, _) = dualfs_engine::meta_log::Log::open(meta, data).unwrap();
    let old_end = dualfs_engine::meta_log::Log::read_superblocks(
        &OverlayDevice::new(ex.base().0),
        &OverlayDevice::new(ex.base().1),
    )
    .unwrap()
    .segment_count;
    let past = log.segments_in_use_from(old_end);
    assert!(past.len() >= 2, "only {past:?} past segment {old_end}");
}

/// The data shrink workload is a test of moving only if files' data lies
/// past the new end when it shrinks: N/x (fsync'd; P/y is only dirty in
/// memory then, and its write-back must land below the end).
#[test]
fn the_data_shrink_workload_has_file_data_past_the_new_end() {
    let c = config();
    let ex = Explorer::new(c.clone(), &workloads::setup()).expect("base image");
    let w = workloads::shrink_data(c.data_blocks, c.spare_data_blocks);
    let (meta, data) = before_shrink(&ex, &w, |s| matches!(s, Step::Resize { data, .. } if *data == c.data_blocks));
    let vol = Volume::open(meta, data, c.mount).unwrap();
    vol.sync().unwrap();
    let past = vol.with_fs(|fs| {
        let (owners, _) = fs.scan_from(c.data_blocks, 0, u64::MAX).unwrap();
        owners.iter().map(|o| o.blocks).sum::<u64>()
    });
    vol.close().unwrap();
    assert!(past >= 8, "only {past} blocks past {}", c.data_blocks);
}
