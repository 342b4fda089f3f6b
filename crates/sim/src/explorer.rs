//! The crash-state explorer: record a workload on both devices, cut the
//! recording everywhere that matters, recover each cut, and check it.
//!
//! For one workload: run it on recording devices over a shared base image
//! (made once: mkfs of a poisoned data device and a setup), keeping the
//! model's tree after every step. Then for each crash state ([`crate::crash`]):
//!
//! 1. open the volume (recovery) — it must succeed;
//! 2. the recovered tree must be the model's after some step of the window,
//!    with no byte a file was never given ([`crate::oracle`]);
//! 3. fsck must find the recovered volume clean;
//! 4. the volume must accept new work (create, write, fsync a file);
//! 5. for a sample of states, the recovery and that new work were recorded
//!    too: a second crash is cut into them (so also into recovery itself),
//!    recovered, and checked the same way.
//!
//! On a mirrored volume ([`Config::mirrored`]) the two meta-data copies are
//! recorded as two devices, and each state is also checked copy by copy
//! ([`Explorer::check_copies`]): each copy alone, a copy that missed
//! writes coming back, and both copies failing reads of different blocks.
//!
//! A failure names itself with a replay string, `seed:workload:state`, that
//! [`Explorer::replay`] runs again exactly.

use std::sync::Arc;

use dualfs_engine::Volume;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::types::Timestamp;
use dualfs_engine::volume::{MkfsOptions, MountOptions, Order};

use crate::crash::{Choice, CrashImages, Recording, Seen, StateSpec, Window};
use crate::image::{Block, Fill, Image, OverlayDevice};
use crate::model::Model;
use crate::oracle::History;
use crate::record::{Dev, Event, Recorder};
use crate::rng::{Rng, hash_name, mix};
use crate::tree::Tree;
use crate::workload::{Runner, SnapshotEvent, Step, Workload, fixed_clock};

mod copies;
use copies::{checked_meta, open_volume, overlay, overlays, recording_devices};

/// Tags of the setup's bytes start here; a workload's steps are 1, 2, ...
pub const SETUP_TAG: u64 = 1_000_000;
/// Tags of the bytes written after recovery start here.
pub const AFTER_TAG: u64 = 2_000_000;

/// How the explorer builds volumes and how many states it checks.
#[derive(Clone, Debug)]
pub struct Config {
    /// Meta-data device blocks.
    pub meta_blocks: u64,
    /// Data device blocks.
    pub data_blocks: u64,
    /// Log segment size in blocks.
    pub segment_blocks: u32,
    /// Data group size in blocks.
    pub group_blocks: u32,
    /// Mount options of every open.
    pub mount: MountOptions,
    /// Seed of state choices (and of the volume's identity).
    pub seed: u64,
    /// Crash states drawn per workload (before removing duplicates).
    pub states_per_workload: usize,
    /// Every how many checked states a second crash is explored (0: never).
    pub second_crash_every: u64,
    /// Cuts of the second recording per sampled state.
    pub second_crash_cuts: usize,
    /// Print the recordings, states, recovery reports and trees (replays).
    pub verbose: bool,
    /// Blocks the meta-data device holds past the volume made on it (room
    /// for the resize workloads to grow into).
    pub spare_meta_blocks: u64,
    /// Blocks the data device holds past the volume made on it.
    pub spare_data_blocks: u64,
    /// Also recover each sampled state with either checkpoint slot
    /// zeroed: the older checkpoint must still give an allowed tree and a
    /// volume fsck finds clean (what discard must never take from it;
    /// workloads whose log wraps onto the older checkpoint's segments
    /// cannot ask this).
    pub older_checkpoint: bool,
    /// The meta-data device is a mirror of two copies, recorded apart.
    pub mirror: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            meta_blocks: 4096,
            data_blocks: 16384,
            segment_blocks: 128,
            group_blocks: 4096,
            mount: MountOptions {
                commit_interval: std::time::Duration::ZERO,
                checkpoint_blocks: 192,
                dirty_data_limit: 1 << 20,
                ..MountOptions::default()
            },
            seed: 0x0D0A_1F5E,
            states_per_workload: 60,
            second_crash_every: 4,
            second_crash_cuts: 3,
            verbose: false,
            spare_meta_blocks: 0,
            spare_data_blocks: 0,
            older_checkpoint: false,
            mirror: false,
        }
    }
}

impl Config {
    /// The discard workloads' configuration: `-o discard`, and the older
    /// checkpoint checked beside the newer.
    #[must_use]
    pub fn discard() -> Config {
        let d = Config::default();
        Config { mount: MountOptions { discard: true, ..d.mount }, older_checkpoint: true, ..d }
    }

    /// The mirrored workloads' configuration: the meta-data device kept
    /// on two copies.
    #[must_use]
    pub fn mirrored() -> Config {
        Config { mirror: true, ..Config::default() }
    }
}

/// What the explorer did.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Workloads run.
    pub workloads: u64,
    /// Events recorded (writes, flushes, marks).
    pub events: u64,
    /// Crash states drawn.
    pub states_drawn: u64,
    /// Distinct crash states recovered and checked.
    pub states_checked: u64,
    /// Of those, states with a torn block.
    pub torn: u64,
    /// States whose recovery fell back to the older checkpoint.
    pub fell_back: u64,
    /// States whose recovery rolled forward at least one partial segment.
    pub rolled_forward: u64,
    /// Second-crash states (cut into recovery and the work after it) checked.
    pub second_crash_states: u64,
    /// States whose recovery replayed fsync records.
    pub replayed: u64,
    /// Mirrored states whose mount met a read error on each copy.
    pub both_copies_failed: u64,
}

impl Stats {
    /// Adds `o` to these.
    pub fn add(&mut self, o: &Stats) {
        self.workloads += o.workloads;
        self.events += o.events;
        self.states_drawn += o.states_drawn;
        self.states_checked += o.states_checked;
        self.torn += o.torn;
        self.fell_back += o.fell_back;
        self.rolled_forward += o.rolled_forward;
        self.second_crash_states += o.second_crash_states;
        self.replayed += o.replayed;
        self.both_copies_failed += o.both_copies_failed;
    }
}

/// A failed check, with the string that replays it.
#[derive(Clone, Debug)]
pub struct Failure {
    /// `seed:workload:state` (state `-` when the workload itself failed).
    pub replay: String,
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\n  replay with DUALFS_CRASH_REPLAY={}", self.message, self.replay)
    }
}

/// A workload's recording and the trees it went through.
#[derive(Debug)]
pub struct Run {
    /// Both devices' events.
    pub recording: Recording,
    /// The model's trees after each step.
    pub history: History,
    /// Snapshots the workload made and deleted.
    pub snapshots: Vec<SnapshotEvent>,
    /// Steps that made another tree the live one: (step, its name).
    pub switches: Vec<(usize, String)>,
    /// What the cleaner did during the workload.
    pub cleaner: dualfs_engine::meta_log::cleaner::CleanerStats,
}

/// The explorer: a base image and the configuration.
#[derive(Debug)]
pub struct Explorer {
    /// Configuration.
    pub config: Config,
    meta: Arc<Image>,
    data: Arc<Image>,
    /// The second meta-data copy, when mirrored.
    mirror: Option<Arc<Image>>,
    model: Model,
}

fn fsck(meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>) -> Result<(), String> {
    fsck_allowing(meta, data, false)
}

/// fsck, where `torn_superblock` allows the one problem a crash leaves
/// before recovery: a superblock copy torn mid-rewrite (resize, tune, a
/// feature bit), which the other copy stands for and a writable mount
/// writes again.
fn fsck_allowing(meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>, torn_superblock: bool) -> Result<(), String> {
    let report = dualfs_engine::check::check(meta, data).map_err(|e| format!("fsck cannot open the volume: {e}"))?;
    let problems: Vec<_> =
        report.problems.iter().filter(|p| !(torn_superblock && p.structure == "superblock")).collect();
    if problems.is_empty() {
        Ok(())
    } else {
        let list: Vec<String> = problems.iter().take(8).map(ToString::to_string).collect();
        Err(format!("fsck: {} problem(s):\n    {}", problems.len(), list.join("\n    ")))
    }
}

/// Tags the steps of a workload of `n` steps may have written.
fn tag_steps(n: usize) -> Vec<u64> {
    (1..=n as u64).chain((0..64).map(|i| SETUP_TAG + i)).chain((0..8).map(|i| AFTER_TAG + i)).collect()
}

/// The steps run after recovery: the volume must take new work.
fn after_steps() -> Vec<Step> {
    vec![
        Step::Create("zz9".into()),
        Step::Write { path: "zz9".into(), offset: 0, len: 6000 },
        Step::Fsync("zz9".into()),
    ]
}

impl Explorer {
    /// Formats a volume (data device poisoned), runs `setup` on it, closes it
    /// cleanly: the base image every workload starts from.
    ///
    /// # Errors
    /// mkfs, mount or a setup step fails.
    pub fn new(config: Config, setup: &[Step]) -> Result<Explorer, String> {
        let meta = Arc::new(OverlayDevice::new(Arc::new(Image::new(config.meta_blocks, Fill::Zero))));
        let data = Arc::new(OverlayDevice::new(Arc::new(Image::new(config.data_blocks, Fill::Poison))));
        let mirror =
            config.mirror.then(|| Arc::new(OverlayDevice::new(Arc::new(Image::new(config.meta_blocks, Fill::Zero)))));
        let mkfs = MkfsOptions {
            segment_blocks: config.segment_blocks,
            group_blocks: config.group_blocks,
            now: Timestamp { sec: 1_700_000_000, nsec: 0 },
            identity_seed: Some(config.seed),
            ..MkfsOptions::default()
        };
        let mut copies: Vec<Arc<dyn BlockDevice>> = vec![meta.clone()];
        let made = match &mirror {
            Some(m) => {
                copies.push(m.clone());
                Volume::format_mirrored([meta.clone(), m.clone()], data.clone(), &mkfs)
            }
            None => Volume::format(meta.clone(), data.clone(), &mkfs),
        };
        made.map_err(|e| format!("mkfs: {e}"))?;
        let vol = open_volume(&copies, data.clone(), config.mount, false).map_err(|e| format!("mount: {e}"))?;
        let mut r = Runner::new(&vol, Model::default(), None, SETUP_TAG);
        for (i, s) in setup.iter().enumerate() {
            r.run(i + 1, s).map_err(|e| format!("setup: {e}"))?;
        }
        r.close_all()?;
        let model = r.model.clone();
        vol.close().map_err(|e| format!("close after setup: {e}"))?;
        // The devices grow after the volume was made on them, as an image
        // file extended before `dualfs resize`.
        let (meta, data) = (meta.freeze(), data.freeze());
        let meta = Arc::new(meta.grown(config.spare_meta_blocks));
        let data = Arc::new(data.grown(config.spare_data_blocks));
        let mirror = mirror.map(|m| Arc::new(m.freeze().grown(config.spare_meta_blocks)));
        Ok(Explorer { config, meta, data, mirror, model })
    }

    /// The base image every workload starts from: (meta-data, data).
    #[must_use]
    pub fn base(&self) -> (Arc<Image>, Arc<Image>) {
        (self.meta.clone(), self.data.clone())
    }

    /// Runs `w` on recording devices over the base image.
    ///
    /// # Errors
    /// The engine disagrees with the model while the workload runs.
    pub fn record(&self, w: &Workload) -> Result<Run, String> {
        let rec = Arc::new(Recorder::default());
        let (copies, data) = recording_devices(&self.meta, self.mirror.as_ref(), &self.data, &rec);
        let vol = open_volume(&copies, data, self.config.mount, false)
            .map_err(|e| format!("mount of the base image: {e}"))?;
        let strict = self.config.mount.order == Order::Strict;
        let mut r = Runner::new(&vol, self.model.clone(), Some(rec.clone()), 0);
        r.strict = strict;
        for (i, s) in w.steps.iter().enumerate() {
            r.run(i + 1, s)?;
        }
        let live = Tree::of_volume(&vol)?;
        let want = Tree::of_model(&r.model);
        live.same_namespace(&want).map_err(|e| format!("before any crash, the engine differs from the model: {e}"))?;
        if live.entries.iter().any(|(p, e)| e.bytes != want.entries[p].bytes) {
            return Err("before any crash, file contents differ from the model".into());
        }
        let mut history = History::with_partials(r.states.iter().map(Tree::of_model).collect(), &r.partials);
        history.delayed_tails = !self.config.mount.data_expire.is_zero() && !strict;
        history.holds = std::mem::take(&mut r.holds);
        history.floors = std::mem::take(&mut r.floors);
        history.fsyncs = std::mem::take(&mut r.fsyncs);
        history.strict = strict;
        let snapshots = std::mem::take(&mut r.snapshots);
        let switches = std::mem::take(&mut r.switches);
        let cleaner = vol.cleaner_stats();
        // The run ends with a crash: the volume is dropped, never closed.
        drop(r);
        drop(vol);
        let recording = Recording {
            meta: self.meta.clone(),
            data: self.data.clone(),
            mirror: self.mirror.clone(),
            events: rec.events(),
        };
        history.logged = recording.logged_steps();
        Ok(Run { recording, history, snapshots, switches, cleaner })
    }

    fn seed_of(&self, w: &Workload) -> u64 {
        mix(self.config.seed ^ hash_name(&w.name))
    }

    /// The crash states of a recorded workload.
    #[must_use]
    pub fn states(&self, w: &Workload, run: &Run) -> Vec<StateSpec> {
        run.recording.states(self.seed_of(w), self.config.states_per_workload * w.scale.max(1) as usize)
    }

    /// Records `w` and checks every one of its crash states.
    ///
    /// # Errors
    /// The first failed check, with its replay string.
    pub fn explore(&self, w: &Workload) -> Result<Stats, Failure> {
        let fail = |state: String, message: String| Failure {
            replay: format!("{:#x}:{}:{state}", self.config.seed, w.name),
            message: format!("workload {} {:?}\n  {message}", w.name, w.steps),
        };
        let run = self.record(w).map_err(|e| fail("-".into(), e))?;
        let mut stats = Stats { workloads: 1, events: run.recording.events.len() as u64, ..Stats::default() };
        let mut seen = Seen::default();
        for (i, spec) in self.states(w, &run).iter().enumerate() {
            stats.states_drawn += 1;
            self.check_state(w, &run, i, spec, &mut seen, &mut stats)
                .map_err(|e| fail(i.to_string(), format!("state {i} ({spec}): {e}")))?;
        }
        Ok(stats)
    }

    /// Runs one state of one workload again, as a replay string names it.
    ///
    /// # Errors
    /// The check fails again (or the string names nothing).
    pub fn replay(&self, w: &Workload, state: Option<usize>) -> Result<Stats, Failure> {
        let Some(i) = state else { return self.explore(w) };
        let fail = |message: String| Failure {
            replay: format!("{:#x}:{}:{i}", self.config.seed, w.name),
            message: format!("workload {} {:?}\n  {message}", w.name, w.steps),
        };
        let run = self.record(w).map_err(&fail)?;
        let states = self.states(w, &run);
        let spec = states.get(i).ok_or_else(|| fail(format!("the workload has only {} states", states.len())))?;
        let mut stats = Stats::default();
        self.check_state(w, &run, i, spec, &mut Seen::default(), &mut stats)
            .map_err(|e| fail(format!("state {i} ({spec}): {e}")))?;
        Ok(stats)
    }

    /// Checks one crash state: recovery, oracles, fsck, new work, and (for
    /// a sample) a second crash.
    fn check_state(
        &self,
        w: &Workload,
        run: &Run,
        index: usize,
        spec: &StateSpec,
        seen: &mut Seen,
        stats: &mut Stats,
    ) -> Result<(), String> {
        let img = run.recording.build(spec);
        if !seen.first(img.fingerprint) {
            return Ok(());
        }
        stats.states_checked += 1;
        stats.torn += u64::from(img.torn.is_some());
        let sampled =
            self.config.second_crash_every > 0 && (index as u64).is_multiple_of(self.config.second_crash_every);
        if sampled {
            // What `dualfs fsck` says of the crashed volume before any mount
            // (it rolls forward in memory and writes nothing).
            let d = overlay(&img.data);
            let m = checked_meta(&overlays(&img), &d).map_err(|e| format!("before recovery, {e}"))?;
            fsck_allowing(m, d, true).map_err(|e| format!("before recovery, {e}"))?;
        }
        // Recovery's own writes and the new work are recorded, for the second crash.
        let rec = Arc::new(Recorder::default());
        let (copies, data) = recording_devices(&img.meta, img.mirror.as_ref(), &img.data, &rec);
        let vol = open_volume(&copies, data.clone(), self.config.mount, false)
            .map_err(|e| format!("recovery failed: {e}"))?;
        let meta = checked_meta(&copies, &data)?;
        let report = vol.open_report();
        if self.config.verbose {
            println!("recording:\n{}", show_events(&run.recording.events));
            println!("state {index} ({spec}): window {:?}, torn {:?}\nrecovery: {report:?}", img.window, img.torn);
        }
        // A crash is never damage: nothing a crash leaves may be reported
        // as lost or broken (docs/TESTING.md).
        if report.is_damaged() {
            return Err(format!("a crash state reported as damage: {}", report.damage.join("; ")));
        }
        stats.fell_back += u64::from(report.fell_back.is_some());
        stats.rolled_forward += u64::from(report.recovery.partial_segments > 0);
        stats.replayed += u64::from(vol.replay_report().partial_segments > 0);
        let recovered = Tree::of_volume(&vol).map_err(|e| format!("the recovered volume cannot be read: {e}"))?;
        if self.config.verbose {
            println!("recovered tree:\n{}", show_tree(&recovered));
        }
        let tags = tag_steps(w.steps.len());
        let k = run.history.find(&recovered, img.window, &w.steps, &tags)?;
        check_live_tree(&vol, &recovered, k, run, img.window)?;
        let images = (img.meta.clone(), img.data.clone());
        check_snapshots(&vol, meta.clone(), data.clone(), images, &run.snapshots, img.window, &self.config.mount)?;
        fsck(meta, data).map_err(|e| format!("after recovery, {e}"))?;
        let expected = new_work(&vol, &recovered, &rec, &tags, &self.config.mount)?;
        // Q1: usage counted at open, and kept through the new work, is what
        // the inodes hold.
        let wrong = vol.verify_quota_usage().map_err(|e| format!("quota usage cannot be counted: {e}"))?;
        if !wrong.is_empty() {
            return Err(format!("Q1 broken after recovery: {}", wrong.join("; ")));
        }
        drop(vol);
        if img.mirror.is_some() {
            self.check_copies(w, run, &img, index, &tags, stats)?;
            // What recovery and the new work made durable, each copy alone
            // included: the new file's fsync returned, so both copies hold
            // it, and the commits recovery rolled forward from one copy
            // (the other may lack them) with it.
            let second = Recording {
                meta: img.meta.clone(),
                data: img.data.clone(),
                mirror: img.mirror.clone(),
                events: rec.events(),
            };
            let end = StateSpec { cut: second.events.len(), choice: Choice::Flushed };
            stats.second_crash_states += 1;
            self.second_crash(&second, &end, &expected, &tags, (&run.history, img.window, &w.steps))
                .map_err(|e| format!("second crash ({end}) after recovery: {e}"))?;
        }

        if !sampled {
            return Ok(());
        }
        // A slot torn by the crash leaves one checkpoint only.
        let slot_torn = img.torn.is_some_and(|(d, b, _)| {
            d == Dev::Meta && dualfs_engine::format::superblock::CHECKPOINT_SLOTS.iter().any(|s| s.0 == b)
        });
        if self.config.older_checkpoint && !slot_torn {
            self.check_older_checkpoint(run, &img, &tags, &w.steps)?;
        }
        let second = Recording {
            meta: img.meta.clone(),
            data: img.data.clone(),
            mirror: img.mirror.clone(),
            events: rec.events(),
        };
        // From the workload and the state's number only: a replay draws the same cuts.
        let mut rng = Rng::new(mix(self.seed_of(w) ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        let specs = second.states(rng.next_u64(), 64);
        // The first cut falls inside recovery's own writes (its checkpoint,
        // orphan cleanup) when it wrote anything: a crash during recovery.
        let new_work_starts = second.events.iter().position(|e| matches!(e, Event::Mark(_))).unwrap_or(0);
        let in_recovery: Vec<StateSpec> = specs.iter().filter(|s| s.cut <= new_work_starts).copied().collect();
        for k in 0..self.config.second_crash_cuts.min(specs.len()) {
            let s2 = match (k, in_recovery.is_empty()) {
                (0, false) => in_recovery[rng.below(in_recovery.len() as u64) as usize],
                _ => specs[rng.below(specs.len() as u64) as usize],
            };
            stats.second_crash_states += 1;
            self.second_crash(&second, &s2, &expected, &tags, (&run.history, img.window, &w.steps))
                .map_err(|e| format!("second crash ({s2}) after recovery: {e}"))?;
        }
        Ok(())
    }

    /// Recovers the crash state with each checkpoint slot zeroed in turn
    /// (a slot the medium lost): the mount falls back to the other
    /// checkpoint, whose blocks and roll-forward range must be intact, and
    /// shows a tree the model allows; every snapshot that checkpoint lists
    /// (one deleted since comes back) shows the tree it was made of, so
    /// that nothing it holds was discarded or handed out while listed; fsck
    /// then reads the whole IFile (a mount leaves the bitmap and group
    /// descriptors on disk, which the tree never reads).
    fn check_older_checkpoint(&self, run: &Run, img: &CrashImages, tags: &[u64], steps: &[Step]) -> Result<(), String> {
        let zeros: Block = Arc::new([0u8; dualfs_engine::types::BLOCK_SIZE]);
        for slot in dualfs_engine::format::superblock::CHECKPOINT_SLOTS {
            let lost = Arc::new(img.meta.with_blocks([(slot.0, zeros.clone())]));
            let meta = Arc::new(OverlayDevice::new(lost.clone()));
            let data = Arc::new(OverlayDevice::new(img.data.clone()));
            let mount = MountOptions { accept_loss: true, ..self.config.mount };
            let vol = Volume::open_with_clock(meta.clone(), data.clone(), mount, fixed_clock())
                .map_err(|e| format!("with checkpoint slot {} lost, recovery failed: {e}", slot.0))?;
            let tree = Tree::of_volume(&vol)
                .map_err(|e| format!("with checkpoint slot {} lost, the volume cannot be read: {e}", slot.0))?;
            run.history
                .find(&tree, img.window, steps, tags)
                .map_err(|e| format!("with checkpoint slot {} lost: {e}", slot.0))?;
            // Any snapshot made by a step begun may be listed there.
            let any = crate::crash::Window { durable: 0, synced: 0, ..img.window };
            let images = (lost, img.data.clone());
            check_snapshots(&vol, meta.clone(), data.clone(), images, &run.snapshots, any, &mount)
                .map_err(|e| format!("with checkpoint slot {} lost: {e}", slot.0))?;
            drop(vol);
            fsck(meta, data).map_err(|e| format!("with checkpoint slot {} lost, after recovery, {e}", slot.0))?;
        }
        Ok(())
    }

    /// Recovers a cut of the recording of recovery and new work: the tree
    /// must be the first recovered one, plus the new file once it was
    /// fsync'd. On a mirror each copy alone must show the same, or, while
    /// nothing of the new work was acknowledged, any tree the `first`
    /// crash allows (history, window, steps): recovery may have rolled
    /// forward from the other copy writes this one never received, and
    /// made them its own only as far as a flush of it went.
    fn second_crash(
        &self,
        second: &Recording,
        s2: &StateSpec,
        expected: &History,
        tags: &[u64],
        first: (&History, Window, &[Step]),
    ) -> Result<(), String> {
        let img2 = second.build(s2);
        let copies2 = overlays(&img2);
        let data2 = overlay(&img2.data);
        let vol2 = open_volume(&copies2, data2.clone(), self.config.mount, false)
            .map_err(|e| format!("recovery failed: {e}"))?;
        let meta2 = checked_meta(&copies2, &data2)?;
        if vol2.open_report().is_damaged() {
            return Err(format!("a second crash reported as damage: {}", vol2.open_report().damage.join("; ")));
        }
        let t2 = Tree::of_volume(&vol2)?;
        if self.config.verbose {
            println!("second recording:\n{}", show_events(&second.events));
            println!("second crash {s2}: window {:?}, torn {:?}", img2.window, img2.torn);
            println!("recovery: {:?}\ntree:\n{}", vol2.open_report(), show_tree(&t2));
        }
        expected.find(&t2, img2.window, &after_steps(), tags)?;
        drop(vol2);
        fsck(meta2, data2)?;
        // Each copy alone holds what was acknowledged on the mirror.
        if let Some(copy) = &img2.mirror {
            for (i, image) in [&img2.meta, copy].into_iter().enumerate() {
                let (me, other) = (i + 1, 2 - i);
                let vol = open_volume(&[overlay(image)], overlay(&img2.data), self.config.mount, true)
                    .map_err(|e| format!("copy {other} lost: the mount degraded on copy {me} failed: {e}"))?;
                let report = vol.open_report();
                if report.is_damaged() {
                    return Err(format!(
                        "copy {other} lost: copy {me} reported as damage: {}",
                        report.damage.join("; ")
                    ));
                }
                let t =
                    Tree::of_volume(&vol).map_err(|e| format!("copy {other} lost: copy {me} cannot be read: {e}"))?;
                let promised = img2.window.synced > 0 || img2.window.durable > 0;
                expected
                    .find(&t, img2.window, &after_steps(), tags)
                    .or_else(|e| if promised { Err(e) } else { first.0.find(&t, first.1, first.2, tags) })
                    .map_err(|e| format!("copy {other} lost, degraded on copy {me}: {e}"))?;
            }
        }
        Ok(())
    }
}

/// The live tree's name goes with its contents: the recovered tree is the
/// state after step `k`, so its name is the one the last switch up to `k`
/// gave (or that of another state of the window showing the same
/// namespace). A switch is atomic: never the new tree under the old name.
fn check_live_tree(vol: &Volume, got: &Tree, k: usize, run: &Run, window: crate::crash::Window) -> Result<(), String> {
    let name_at = |k: usize| {
        run.switches
            .iter()
            .rev()
            .find(|(step, _)| *step <= k)
            .map_or(dualfs_engine::format::snapshot::DEFAULT_TREE, |(_, n)| n.as_str())
    };
    let live = vol.live_tree();
    if live == name_at(k) {
        return Ok(());
    }
    let to = window.issued.min(run.history.trees.len() - 1);
    let other =
        (window.durable.min(to)..=to).any(|j| name_at(j) == live && got.same_namespace(&run.history.trees[j]).is_ok());
    if other {
        return Ok(());
    }
    Err(format!(
        "the volume shows the tree of the state after step {k}, which is {}, as the live tree {live}",
        name_at(k)
    ))
}

/// One life of a snapshot or kept tree: made by step `from`, deleted by
/// step `until` (a tree's name lives again each time it stops being live).
struct Life<'a> {
    from: usize,
    until: Option<usize>,
    tree: &'a Tree,
    writable: bool,
}

/// The snapshots oracle: a snapshot (or kept tree) made by a step promised
/// durable is there unless a step begun deleted it; one whose making was
/// not begun, or whose deletion was promised, is not; and every one there
/// shows exactly the tree it was made of, byte for byte, whatever the live
/// volume did after (a crash mid-create, mid-delete or mid-switch loses
/// neither the snapshot nor what it holds). A kept tree is read by making
/// it the live one on a copy of the recovered volume.
fn check_snapshots(
    vol: &Volume,
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    images: (Arc<Image>, Arc<Image>),
    events: &[SnapshotEvent],
    window: crate::crash::Window,
    mount: &MountOptions,
) -> Result<(), String> {
    let present: Vec<(String, bool)> = vol.snapshot_list().into_iter().map(|s| (s.name, s.writable)).collect();
    let mut names: Vec<&String> = events.iter().map(|e| &e.name).collect();
    names.sort();
    names.dedup();
    for (p, _) in &present {
        if !events.iter().any(|e| &e.name == p) {
            return Err(format!("snapshot {p} is there but no step made it"));
        }
    }
    for name in names {
        let mut lives: Vec<Life> = Vec::new();
        for e in events.iter().filter(|e| &e.name == name) {
            match &e.tree {
                Some(tree) => lives.push(Life { from: e.step, until: None, tree, writable: e.writable }),
                None => {
                    if let Some(l) = lives.last_mut().filter(|l| l.until.is_none()) {
                        l.until = Some(e.step);
                    }
                }
            }
        }
        let there = present.iter().find(|(p, _)| p == name);
        let must = lives.iter().find(|l| l.from <= window.durable && l.until.is_none_or(|d| d > window.issued));
        let may: Vec<&Life> =
            lives.iter().filter(|l| l.from <= window.issued && l.until.is_none_or(|d| d > window.durable)).collect();
        let Some(&(_, writable)) = there else {
            if let Some(l) = must {
                return Err(format!("snapshot {name}, made by step {} (durable), is missing", l.from));
            }
            continue;
        };
        if may.is_empty() {
            return Err(format!("snapshot {name} is there, but no step left it there by this crash"));
        }
        let got = if writable {
            let (m, d) =
                (Arc::new(OverlayDevice::new(images.0.clone())), Arc::new(OverlayDevice::new(images.1.clone())));
            let copy = Volume::open_with_clock(m, d, *mount, fixed_clock())
                .map_err(|e| format!("a copy of the recovered volume cannot be opened: {e}"))?;
            copy.switch_tree(name).map_err(|e| format!("tree {name} cannot be made the live one: {e}"))?;
            Tree::of_volume(&copy).map_err(|e| format!("tree {name} cannot be read: {e}"))?
        } else {
            let snap = Volume::open_snapshot(meta.clone(), data.clone(), name, *mount)
                .map_err(|e| format!("snapshot {name} cannot be mounted: {e}"))?;
            Tree::of_volume(&snap).map_err(|e| format!("snapshot {name} cannot be read: {e}"))?
        };
        let fits = |l: &&Life| {
            l.writable == writable
                && got.same_namespace(l.tree).is_ok()
                && got.entries.iter().all(|(p, e)| l.tree.entries.get(p).is_none_or(|w| w.bytes == e.bytes))
        };
        if !may.iter().any(fits) {
            let l = may[0];
            got.same_namespace(l.tree).map_err(|e| format!("snapshot {name} is not the tree it was made of: {e}"))?;
            return Err(format!(
                "snapshot {name}: its files are not what they were when it was made (step {})",
                l.from
            ));
        }
    }
    Ok(())
}

/// Runs the new work on a recovered volume (marked in `rec`) and checks the
/// result; returns the trees a second crash may show.
fn new_work(
    vol: &Volume,
    recovered: &Tree,
    rec: &Arc<Recorder>,
    tags: &[u64],
    mount: &MountOptions,
) -> Result<History, String> {
    let strict = mount.order == Order::Strict;
    let mut r = Runner::new(vol, Model::default(), Some(rec.clone()), AFTER_TAG);
    r.strict = strict;
    let after = after_steps();
    for (i, s) in after.iter().enumerate() {
        r.run(i + 1, s).map_err(|e| format!("after recovery, new work failed: {e}"))?;
    }
    let mut expected = History::new(r.states.iter().map(|m| with_new_work(recovered, m)).collect());
    expected.delayed_tails = !mount.data_expire.is_zero() && !strict;
    expected.strict = strict;
    // The new work's ids, as `with_new_work` keeps them apart.
    expected.fsyncs = r.fsyncs.iter().map(|&(f, id)| (f, id | (1 << 62))).collect();
    let live = Tree::of_volume(vol)?;
    let all = crate::crash::Window { durable: after.len(), issued: after.len(), synced: after.len() };
    expected.find(&live, all, &after, tags).map_err(|e| format!("after recovery and new work: {e}"))?;
    Ok(expected)
}

/// One line per event, for verbose replays.
#[must_use]
pub fn show_events(events: &[Event]) -> String {
    let mut out = String::new();
    for (i, e) in events.iter().enumerate() {
        let line = match e {
            Event::Write { dev, block, data } => {
                let word = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().unwrap_or([0; 8]));
                if dev.is_meta() && data[..4] == *b"DFSM" {
                    format!("write {dev:?} {block}: kind {} seq {} name {:#x}", data[8], word(32), word(48))
                } else {
                    format!("write {dev:?} {block}")
                }
            }
            Event::Flush(dev) => format!("flush {dev:?}"),
            Event::Discard { dev, first, count } => format!("discard {dev:?} {first}+{count}"),
            Event::Mark(m) => format!("{m:?}"),
        };
        out.push_str(&format!("  {i:4} {line}\n"));
    }
    out
}

/// One line per path, for verbose replays.
#[must_use]
pub fn show_tree(t: &Tree) -> String {
    let mut out = String::new();
    for (p, e) in &t.entries {
        out.push_str(&format!(
            "  {p} {:?} {:o} nlink {} size {} id {}\n",
            e.kind,
            e.perm,
            e.nlink,
            e.bytes.len(),
            e.identity
        ));
    }
    out
}

/// `recovered` plus the entries the model of the new work has (the new
/// work only adds names in the root directory).
fn with_new_work(recovered: &Tree, m: &Model) -> Tree {
    let mut t = recovered.clone();
    for (p, e) in Tree::of_model(m).entries {
        if p != "/" {
            let mut e = e;
            // Keep the model's ids apart from the engine's inode numbers.
            e.identity |= 1 << 62;
            t.entries.insert(p, e);
        }
    }
    t
}
