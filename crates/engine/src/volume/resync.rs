//! `dualfs mirror add|remove|replace`: changing the meta-data mirror of a
//! volume in use (DESIGN.md, "Changing the mirror while mounted").
//!
//! Add and replace are one resync: the copy kept goes on as the device in
//! use while migrate's copier ([`SwitchDevice`]) writes every write to the
//! new device too and copies what the log uses. The new device's
//! superblock is written first naming mirror generation 0 (stale beside
//! any volume that ran degraded, and a pair with nothing); only when the
//! copy is complete and flushed do the new copy, the copy kept and last
//! the data device name a generation one higher with the mirror in sync,
//! each flushed. A crash before the data device's write leaves the new
//! copy refused: on an unmirrored volume the data device names no mirror,
//! on a degraded one it names the old generation, which the new copy's
//! early superblock is below (and a copy ahead of the data device is whole:
//! its superblock was written after its copy was flushed). Remove writes
//! the copy kept and then the data device naming no mirror, one generation
//! up: the removed copy names the older one and is refused.

use std::sync::Arc;
use std::time::Instant;

use super::mirror::{Attached, checker, degrade_on_failure, read_data_superblock};
use super::{Volume, lock};
use crate::device::{self, BlockDevice, MirrorDevice, SwitchDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::faults::{self, Fault};
use crate::format::superblock::{INCOMPAT_META_REDUNDANCY, MIRROR_DEGRADED, Role, Superblock};
use crate::namespace::pages::WriteBack;

/// A change of the meta-data mirror. Copies are named by their place in
/// [`Volume::mirror_in_use`]; `None`: a copy the mount does not run on
/// (missing at mount, stale).
#[derive(Clone, Debug)]
pub enum MirrorChange {
    /// Makes `new` a copy beside the one in use: an unmirrored volume
    /// becomes mirrored, a degraded one whole again.
    Add(Arc<dyn BlockDevice>),
    /// Resyncs `new` from the good copy and drops the old one.
    Replace(Option<usize>, Arc<dyn BlockDevice>),
    /// Drops one copy: the volume goes on unmirrored on the other.
    Remove(Option<usize>),
}

/// What a change of the mirror did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MirrorReport {
    /// The place (in [`Volume::mirror_in_use`] before the change) of the
    /// copy kept; a new copy comes after it.
    pub kept: usize,
    /// Blocks the copier read from the copy kept and wrote to the new one.
    pub copied_blocks: u64,
    /// Blocks written to both while the copy ran.
    pub mirrored_blocks: u64,
    /// The mirror generation the superblocks now name.
    pub generation: u64,
    /// Copies of the meta-data device kept alike from now on (1 or 2).
    pub copies: usize,
    /// How long it took.
    pub micros: u64,
}

/// The meta-data device as this mount runs it.
enum Layout {
    /// One device: an unmirrored volume, or a mirror mounted degraded.
    Single(Arc<dyn BlockDevice>),
    /// Both copies (one of them perhaps dropped since for failing).
    Mirror(Arc<MirrorDevice>),
}

impl Layout {
    fn in_use(&self) -> Vec<bool> {
        match self {
            Layout::Single(_) => vec![true],
            Layout::Mirror(m) => match m.failed_copy() {
                None => vec![true, true],
                Some((i, _)) => vec![i != 0, i != 1],
            },
        }
    }

    fn copy(&self, i: usize) -> Arc<dyn BlockDevice> {
        match self {
            Layout::Single(d) => d.clone(),
            Layout::Mirror(m) => m.copies()[i].clone(),
        }
    }
}

fn refuse<T>(why: impl Into<String>) -> Result<T> {
    Err(Error::Mirror(why.into()))
}

impl Volume {
    fn layout(&self, switch: &SwitchDevice) -> Layout {
        match self.attached().as_ref().and_then(|a| a.mirror.clone()) {
            Some(m) => Layout::Mirror(m),
            None => Layout::Single(switch.current()),
        }
    }

    /// The meta-data devices this mount runs on, in order (the device it
    /// was mounted with, then its mirror), each with whether it is still
    /// in use: `[true]` for one device (unmirrored, or mounted degraded),
    /// `[true, true]` for a mirror, one `false` for a copy dropped since
    /// for failing a write.
    #[must_use]
    pub fn mirror_in_use(&self) -> Vec<bool> {
        match &self.switches {
            Some(s) => self.layout(&s[0]).in_use(),
            None => vec![true],
        }
    }

    /// Changes the meta-data mirror while the volume stays in use;
    /// `progress(done, total)` counts MiB copied. Crash-safe: see the
    /// module comment.
    ///
    /// # Errors
    /// [`Error::Mirror`] when the change does not apply to the mirror as
    /// it stands (adding beside two copies, removing from an unmirrored
    /// volume, dropping the only copy in use), the new device is too small
    /// or fails (the mirror is left as it was); read-only; a device in use
    /// fails.
    pub fn mirror_change(&self, change: MirrorChange, progress: &mut dyn FnMut(usize, usize)) -> Result<MirrorReport> {
        let started = Instant::now();
        let Some(switches) = &self.switches else {
            return refuse("a snapshot or a volume under repair has no mirror to change");
        };
        let switch = &switches[0];
        // One migrate, resize, clean or mirror change at a time.
        let _one_at_a_time = lock(&self.cleaning);
        self.check_writable()?;
        let on_disk = lock(&self.fs).log.superblock_on_disk().clone();
        if on_disk.incompat & INCOMPAT_META_REDUNDANCY == 0 {
            return refuse("the volume was made before format 1.10, which has no meta-data mirror");
        }
        let layout = self.layout(switch);
        let in_use = layout.in_use();
        let alone = in_use.iter().filter(|&&u| u).count() == 1;
        let only = in_use.iter().position(|&u| u).unwrap_or(0);
        // The copy kept: the other one of two in use; the one in use alone.
        let kept = |old: Option<usize>, what: &str| -> Result<usize> {
            match old {
                Some(i) if i >= in_use.len() => refuse(format!("no meta-data copy {}", i + 1)),
                Some(i) if alone && i == only => refuse(format!(
                    "the meta-data copy named is the only one in use: it cannot be {what} (the other holds nothing \
                     this volume can trust)"
                )),
                Some(i) if !alone => Ok(1 - i),
                None if !alone => refuse(format!(
                    "the device to be {what} is not a meta-data copy of this mount: name one of the two in use"
                )),
                _ => Ok(only),
            }
        };
        let report = match change {
            MirrorChange::Add(new) => {
                if !alone {
                    return refuse(
                        "the meta-data device is mirrored already (two copies in use): replace one with `dualfs \
                         mirror replace`",
                    );
                }
                self.resync(switch, &layout, only, new, progress)
            }
            MirrorChange::Replace(old, new) => {
                if !on_disk.mirrored() {
                    return refuse("the meta-data device is not mirrored: add a copy with `dualfs mirror add`");
                }
                let k = kept(old, "replaced")?;
                self.resync(switch, &layout, k, new, progress)
            }
            MirrorChange::Remove(old) => {
                if !on_disk.mirrored() {
                    return refuse("the meta-data device is not mirrored: there is no copy to remove");
                }
                let k = kept(old, "removed")?;
                self.unmirror(switch, &layout, k)
            }
        };
        let mut report = report?;
        report.micros = started.elapsed().as_micros() as u64;
        Ok(report)
    }

    /// Adds `new` as the second copy beside copy `kept` of `layout`.
    fn resync(
        &self,
        switch: &SwitchDevice,
        layout: &Layout,
        kept: usize,
        new: Arc<dyn BlockDevice>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<MirrorReport> {
        let survivor = layout.copy(kept);
        let on_disk = lock(&self.fs).log.superblock_on_disk().clone();
        let have = new.refresh_block_count().map_err(|e| Error::Mirror(format!("the new copy: {e}")))?;
        if have < on_disk.meta_blocks {
            return refuse(format!(
                "the new copy holds {} MiB, and the meta-data device {} MiB: give a device at least that large",
                have / 256,
                on_disk.meta_blocks.div_ceil(256)
            ));
        }
        // First, a superblock that pairs with nothing: generation 0 is
        // below the data device's on a volume that ran degraded, and a
        // mirror it does not name on an unmirrored one.
        let early = Superblock {
            role: Role::Meta,
            meta_copies: 2,
            mirror_state: MIRROR_DEGRADED,
            mirror_generation: 0,
            ..self.degraded_superblock(on_disk)
        };
        let fail = |e: Error| Error::Mirror(format!("writing to the new copy failed, nothing changed: {e}"));
        device::write(new.as_ref(), DeviceRole::Meta, 0, &early.encode()).map_err(fail)?;
        device::flush(new.as_ref(), DeviceRole::Meta).map_err(fail)?;
        switch.start_mirror(new.clone());
        let done = (|| {
            if faults::active(Fault::MirrorSyncBeforeCopy) {
                // The broken rule: the copy named in sync before it holds
                // anything.
                let fs = lock(&self.fs);
                let sb = self.in_sync_superblock(&fs, 2)?;
                self.name_mirror(&[new.as_ref(), survivor.as_ref()], &sb)?;
            }
            let copied = self.copy_in_use(DeviceRole::Meta, switch, progress).map_err(|e| match e {
                Error::Migrate(m) => Error::Mirror(m),
                e => e,
            })?;
            let (generation, m) = self.commit_resync(switch, survivor.clone(), new.clone())?;
            Ok((copied, generation, m))
        })();
        let mirrored = switch.mirrored_blocks();
        let (copied, generation, m) = match done {
            Ok(r) => r,
            Err(e) => {
                switch.stop_mirror();
                return Err(e);
            }
        };
        self.set_attached(Some(Attached { mirror: Some(m), degraded: None }));
        log::info!(
            "the meta-data device is mirrored again: {copied} blocks copied to the new copy, {mirrored} written to \
             both meanwhile (mirror generation {generation})"
        );
        Ok(MirrorReport { kept, copied_blocks: copied, mirrored_blocks: mirrored, generation, copies: 2, micros: 0 })
    }

    /// The superblock naming `copies` copies in sync, one generation above
    /// both the data device's on disk (a copy dropped while mounted raised
    /// it there) and the one in memory.
    fn in_sync_superblock(&self, fs: &super::Fs, copies: u32) -> Result<Superblock> {
        let d = read_data_superblock(self.data.as_ref())?;
        // The features a snapshot or clone set meanwhile are in the
        // in-memory superblock; the reach is the on-disk one's.
        let mut sb = fs.log.superblock_on_disk().clone();
        sb.incompat |= fs.log.superblock().incompat;
        sb.minor = sb.minor.max(fs.log.superblock().minor);
        let generation = d.mirror_generation.max(sb.mirror_generation) + 1;
        Ok(Superblock { role: Role::Meta, meta_copies: copies, mirror_state: 0, mirror_generation: generation, ..sb })
    }

    /// Writes `sb` to each meta-data copy of `copies` in turn and then to
    /// the data device (the commit point), each flushed.
    fn name_mirror(&self, copies: &[&dyn BlockDevice], sb: &Superblock) -> Result<()> {
        for c in copies {
            device::write(*c, DeviceRole::Meta, 0, &Superblock { role: Role::Meta, ..sb.clone() }.encode())?;
            device::flush(*c, DeviceRole::Meta)?;
        }
        let committed = device::write(
            self.data.as_ref(),
            DeviceRole::Data,
            0,
            &Superblock { role: Role::Data, ..sb.clone() }.encode(),
        )
        .and_then(|()| device::flush(self.data.as_ref(), DeviceRole::Data));
        if let Err(e) = committed {
            self.fail(&e);
            return refuse(format!(
                "writing the data device's superblock failed, so it is not known which copies it names: unmount, \
                 then mount with the copy kept and -o degraded ({e})"
            ));
        }
        Ok(())
    }

    /// The commit of a resync: everything durable on the copy kept and the
    /// new one, then the superblocks naming both in sync, the new copy's
    /// first and the data device's last. Returns the generation and the
    /// mirror the volume now runs on.
    fn commit_resync(
        &self,
        switch: &SwitchDevice,
        survivor: Arc<dyn BlockDevice>,
        new: Arc<dyn BlockDevice>,
    ) -> Result<(u64, Arc<MirrorDevice>)> {
        let mut c = lock(&self.commit);
        self.commit_locked(&mut c, WriteBack::All)?;
        self.checkpoint_locked(&mut c, WriteBack::All)?;
        // From here nothing writes the meta-data device but this.
        let _home = lock(&self.home);
        let mut fs = lock(&self.fs);
        device::flush(self.meta.as_ref(), DeviceRole::Meta)?;
        device::flush(self.data.as_ref(), DeviceRole::Data)?;
        if let Some(why) = switch.mirror_failed() {
            return refuse(format!("writing to the new copy failed, nothing changed: {why}"));
        }
        let sb = self.in_sync_superblock(&fs, 2)?;
        self.name_mirror(&[new.as_ref(), survivor.as_ref()], &sb)?;
        let m = Arc::new(MirrorDevice::new(survivor, new, checker(sb.volume_id())));
        degrade_on_failure(&m, self.data.clone());
        switch.join(m.clone()).map_err(|e| Error::Mirror(e.to_string()))?;
        fs.log.superblock_written(sb.clone());
        Ok((sb.mirror_generation, m))
    }

    /// Drops every copy but `kept`: the volume goes on unmirrored on it.
    fn unmirror(&self, switch: &SwitchDevice, layout: &Layout, kept: usize) -> Result<MirrorReport> {
        let survivor = layout.copy(kept);
        let mut c = lock(&self.commit);
        self.commit_locked(&mut c, WriteBack::All)?;
        let _home = lock(&self.home);
        let mut fs = lock(&self.fs);
        device::flush(self.meta.as_ref(), DeviceRole::Meta)?;
        device::flush(self.data.as_ref(), DeviceRole::Data)?;
        let sb = self.in_sync_superblock(&fs, 0)?;
        self.name_mirror(&[survivor.as_ref()], &sb)?;
        switch.set_current(survivor);
        fs.log.superblock_written(sb.clone());
        drop(fs);
        self.set_attached(None);
        log::info!(
            "the meta-data mirror is removed: the volume runs on one copy (generation {})",
            sb.mirror_generation
        );
        Ok(MirrorReport {
            kept,
            copied_blocks: 0,
            mirrored_blocks: 0,
            generation: sb.mirror_generation,
            copies: 1,
            micros: 0,
        })
    }
}
