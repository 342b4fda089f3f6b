//! The explorer on a mirrored meta-data device: opening the copies as a
//! mount puts them together, and the checks of a crash state copy by copy
//! (docs/TESTING.md, "A mirrored meta-data device").

use std::sync::Arc;

use dualfs_engine::Volume;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::volume::MountOptions;

use super::{Explorer, Run, after_steps, new_work};
use crate::crash::{CrashImages, Window};
use crate::faulty::BadBlocks;
use crate::image::{Image, OverlayDevice};
use crate::record::{Dev, Recorder, RecordingDevice};
use crate::rng::{Rng, mix};
use crate::tree::Tree;
use crate::workload::{Workload, fixed_clock};

/// Opens the volume on `copies` (its one meta-data device, or the copies
/// of a mirror, put together as a mount given them puts them together)
/// and `data`, on the fixed clock.
pub(super) fn open_volume(
    copies: &[Arc<dyn BlockDevice>],
    data: Arc<dyn BlockDevice>,
    mount: MountOptions,
    degraded: bool,
) -> dualfs_engine::Result<Volume> {
    if copies.len() == 1 && !degraded {
        return Volume::open_with_clock(copies[0].clone(), data, mount, fixed_clock());
    }
    let a = Volume::assemble_meta(copies, &data, degraded, !mount.read_only)?;
    let v = Volume::open_with_clock(a.meta.clone(), data, mount, fixed_clock())?;
    v.attach_mirror(&a);
    Ok(v)
}

/// The meta-data device fsck reads: the one device, or the copies put
/// together as `dualfs fsck --meta-mirror` does, reading a block bad on
/// the first copy from the second without writing it back.
pub(super) fn checked_meta(
    copies: &[Arc<dyn BlockDevice>],
    data: &Arc<dyn BlockDevice>,
) -> Result<Arc<dyn BlockDevice>, String> {
    if copies.len() == 1 {
        return Ok(copies[0].clone());
    }
    let a =
        Volume::assemble_meta(copies, data, false, false).map_err(|e| format!("fsck cannot pair the copies: {e}"))?;
    if let Some(m) = &a.mirror {
        m.without_write_back();
    }
    Ok(a.meta)
}

/// Recording devices over a state's images, into `rec`: the meta-data
/// copies (one, or two when mirrored) and the data device.
pub(super) fn recording_devices(
    meta: &Arc<Image>,
    mirror: Option<&Arc<Image>>,
    data: &Arc<Image>,
    rec: &Arc<Recorder>,
) -> (Vec<Arc<dyn BlockDevice>>, Arc<dyn BlockDevice>) {
    let mut copies: Vec<Arc<dyn BlockDevice>> =
        vec![Arc::new(RecordingDevice::new(Dev::Meta, meta.clone(), rec.clone()))];
    if let Some(m) = mirror {
        copies.push(Arc::new(RecordingDevice::new(Dev::Mirror, m.clone(), rec.clone())));
    }
    (copies, Arc::new(RecordingDevice::new(Dev::Data, data.clone(), rec.clone())))
}

/// A fresh overlay of `img`.
pub(super) fn overlay(img: &Arc<Image>) -> Arc<dyn BlockDevice> {
    Arc::new(OverlayDevice::new(img.clone()))
}

/// The overlays of a state's meta-data copies.
pub(super) fn overlays(img: &CrashImages) -> Vec<Arc<dyn BlockDevice>> {
    std::iter::once(&img.meta).chain(img.mirror.as_ref()).map(overlay).collect()
}

impl Explorer {
    /// The copies of a mirrored volume's crash state, one by one:
    ///
    /// 1. *a copy lost*: each copy alone (the other gone with the crash)
    ///    mounts degraded and shows a tree the history allows, every
    ///    acknowledged write included: the mirror acknowledges nothing
    ///    before both copies hold it;
    /// 2. *a stale copy*: one copy (each in turn, by the state's number)
    ///    takes new work degraded, an fsync'd file; then the lost copy
    ///    comes back, having missed it, and must be refused beside the
    ///    other in either order and alone: a copy taken back in sync would
    ///    give back a volume without that file once the other is lost;
    /// 3. *errors on both copies*: each copy fails every read of another
    ///    block (half the time neighbours, met by one request), and both
    ///    mounted show a tree the history allows.
    pub(super) fn check_copies(
        &self,
        w: &Workload,
        run: &Run,
        img: &CrashImages,
        index: usize,
        tags: &[u64],
        stats: &mut super::Stats,
    ) -> Result<(), String> {
        let Some(second) = &img.mirror else { return Ok(()) };
        let images = [img.meta.clone(), second.clone()];
        let ahead = index % 2;
        for (i, image) in images.iter().enumerate() {
            let (me, other) = (i + 1, 2 - i);
            let c = overlay(image);
            let d = overlay(&img.data);
            let vol = open_volume(std::slice::from_ref(&c), d.clone(), self.config.mount, true)
                .map_err(|e| format!("copy {other} lost: the mount degraded on copy {me} failed: {e}"))?;
            let report = vol.open_report();
            if report.is_damaged() {
                return Err(format!(
                    "copy {other} lost: copy {me}'s crash reported as damage: {}",
                    report.damage.join("; ")
                ));
            }
            let tree =
                Tree::of_volume(&vol).map_err(|e| format!("copy {other} lost: copy {me} cannot be read: {e}"))?;
            run.history
                .find(&tree, img.window, &w.steps, tags)
                .map_err(|e| format!("copy {other} lost, degraded on copy {me}: {e}"))?;
            if i != ahead {
                continue;
            }
            let expected = new_work(&vol, &tree, &Arc::new(Recorder::default()), tags, &self.config.mount)
                .map_err(|e| format!("copy {other} lost, degraded on copy {me}: {e}"))?;
            drop(vol);
            let back = overlay(&images[1 - i]);
            let all = Window { durable: after_steps().len(), issued: after_steps().len(), synced: after_steps().len() };
            // The stale copy first: a mount reading from it shows what it lacks.
            for order in [vec![back.clone(), c.clone()], vec![c.clone(), back.clone()], vec![back.clone()]] {
                let alone = order.len() == 1;
                let Ok(a) = Volume::assemble_meta(&order, &d, alone, true) else {
                    continue;
                };
                let shown = match Volume::open_with_clock(a.meta.clone(), d.clone(), self.config.mount, fixed_clock()) {
                    Ok(v) => Tree::of_volume(&v)
                        .and_then(|t| expected.find(&t, all, &after_steps(), tags).map(|_| ()))
                        .err()
                        .map_or_else(String::new, |e| format!(": {e}")),
                    Err(e) => format!(", and the mount then failed: {e}"),
                };
                let how = if alone { "alone, degraded" } else { "beside it, as in sync" };
                return Err(format!(
                    "copy {other}, lost while copy {me} ran degraded and took an fsync'd file, came back and was \
                     taken {how}{shown}"
                ));
            }
        }
        // Both copies failing reads, of different blocks.
        let used: Vec<u64> = img.meta.written().into_iter().map(|(b, _)| b).collect();
        if used.len() < 2 {
            return Ok(());
        }
        let mut rng = Rng::new(mix(self.seed_of(w) ^ (index as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)));
        let k = rng.below(used.len() as u64) as usize;
        let x = used[k];
        let y = if rng.below(2) == 0 {
            used[(k + 1) % used.len()]
        } else {
            let j = rng.below(used.len() as u64 - 1) as usize;
            used[if j >= k { j + 1 } else { j }]
        };
        let (a, b) =
            (Arc::new(BadBlocks::new(overlay(&img.meta), [x])), Arc::new(BadBlocks::new(overlay(second), [y])));
        let copies: Vec<Arc<dyn BlockDevice>> = vec![a.clone(), b.clone()];
        let errors = format!("copy 1 failing reads of block {x} and copy 2 of block {y}");
        let vol = open_volume(&copies, overlay(&img.data), self.config.mount, false)
            .map_err(|e| format!("{errors}: the mount failed: {e}"))?;
        let report = vol.open_report();
        if report.is_damaged() {
            return Err(format!("{errors}: reported as damage: {}", report.damage.join("; ")));
        }
        let tree = Tree::of_volume(&vol).map_err(|e| format!("{errors}: the volume cannot be read: {e}"))?;
        run.history.find(&tree, img.window, &w.steps, tags).map_err(|e| format!("{errors}: {e}"))?;
        if self.config.verbose {
            println!("{errors}: {} and {} reads failed", a.reads_failed(), b.reads_failed());
        }
        stats.both_copies_failed += u64::from(a.reads_failed() > 0 && b.reads_failed() > 0);
        Ok(())
    }
}
