//! The mirrored meta-data log: assembling the two copies at mount, and
//! formatting a volume on them (FORMAT.md 2, `meta_copies`; DESIGN.md
//! "The meta-data mirror").
//!
//! Which copy is current is settled by the data device's superblock: a
//! copy whose superblock names the data device's `mirror_generation` is in
//! sync; one naming a lower generation missed the writes made while it was
//! away (a degraded mount raises the generation on the copy it runs on and
//! on the data device before anything else) and is not trusted.

use std::sync::Arc;

use super::{MkfsOptions, Volume};
use crate::device::{self, BlockDevice, MirrorDevice, Verdict};
use crate::error::{DeviceRole, Error, Result};
use crate::faults::{self, Fault};
use crate::format::superblock::{MIRROR_DEGRADED, Role, Superblock};

/// What a mount made of the meta-data copies it was given.
#[derive(Debug)]
pub struct Assembled {
    /// The meta-data device to open the volume on: the mirror, or the one
    /// copy in use.
    pub meta: Arc<dyn BlockDevice>,
    /// The mirror, when both copies are in use.
    pub mirror: Option<Arc<MirrorDevice>>,
    /// Why only one copy is in use, for the log and `stats`.
    pub degraded: Option<String>,
}

/// What [`Volume::stats`] reports of the mirror.
#[derive(Debug)]
pub(super) struct Attached {
    pub(super) mirror: Option<Arc<MirrorDevice>>,
    pub(super) degraded: Option<String>,
}

/// How one copy given to a mount stands against the data device.
enum Standing {
    InSync,
    Stale(u64),
    NotACopy(String),
}

fn standing(copy: &dyn BlockDevice, d: &Superblock) -> Standing {
    let raw = match device::read(copy, DeviceRole::Meta, 0, 1) {
        Ok(raw) => raw,
        // An unreadable superblock is a damaged one (below): a bad sector
        // on one copy does not drop it.
        Err(_) if holds_log_of(copy, d) => return Standing::InSync,
        Err(e) => return Standing::NotACopy(e.to_string()),
    };
    let m = match Superblock::decode(&raw) {
        Ok(m) => m,
        // A damaged superblock on a device whose log blocks carry this
        // volume's id at their own addresses: the copy is whole but for
        // that block, which reads heal (or the other copy serves).
        Err(_) if holds_log_of(copy, d) => return Standing::InSync,
        Err(e) => return Standing::NotACopy(format!("its superblock does not decode ({})", e.0)),
    };
    if m.role != Role::Meta || m.volume_uuid != d.volume_uuid || m.meta_uuid != d.meta_uuid {
        return Standing::NotACopy("it is not a meta-data device of this volume".into());
    }
    if m.mirror_generation < d.mirror_generation && !faults::active(Fault::MirrorTrustStale) {
        return Standing::Stale(m.mirror_generation);
    }
    Standing::InSync
}

/// Whether the first block of one of the first segments of `copy` is a
/// log block of the volume `d` names, at its own address.
fn holds_log_of(copy: &dyn BlockDevice, d: &Superblock) -> bool {
    (0..u64::from(d.segment_count.min(64))).any(|s| {
        let at = d.first_segment_block + s * u64::from(d.segment_blocks);
        device::read(copy, DeviceRole::Meta, at, 1)
            .is_ok_and(|raw| crate::format::block::open_block(&raw, crate::types::MetaBlock(at), d.volume_id()).is_ok())
    })
}

/// The data device's superblock.
pub(super) fn read_data_superblock(data: &dyn BlockDevice) -> Result<Superblock> {
    let raw = device::read(data, DeviceRole::Data, 0, 1)?;
    Superblock::decode(&raw).map_err(|e| Error::Corrupt {
        structure: "superblock",
        device: DeviceRole::Data,
        block: 0,
        reason: e.0,
    })
}

/// Marks the mirror degraded with a new generation, on the copy in use
/// (first) and then on the data device (`d`, its superblock), each
/// flushed: a copy naming the old generation is then stale. In that order,
/// so that a crash between the two leaves the copy in use in sync.
pub(super) fn mark_degraded(one: &dyn BlockDevice, data: &dyn BlockDevice, d: &Superblock) -> Result<()> {
    let sb = Superblock { mirror_state: MIRROR_DEGRADED, mirror_generation: d.mirror_generation + 1, ..d.clone() };
    device::write(one, DeviceRole::Meta, 0, &Superblock { role: Role::Meta, ..sb.clone() }.encode())?;
    device::flush(one, DeviceRole::Meta)?;
    device::write(data, DeviceRole::Data, 0, &Superblock { role: Role::Data, ..sb }.encode())?;
    device::flush(data, DeviceRole::Data)
}

/// A copy of `m` failing a write while mounted is dropped, the mirror
/// marked degraded first on the other copy and on `data` (as a degraded
/// mount marks it).
pub(super) fn degrade_on_failure(m: &MirrorDevice, data: Arc<dyn BlockDevice>) {
    m.set_degrade_hook(Box::new(move |_, surviving, _| {
        let d = read_data_superblock(data.as_ref()).map_err(|e| std::io::Error::other(e.to_string()))?;
        mark_degraded(surviving.as_ref(), data.as_ref(), &d).map_err(|e| std::io::Error::other(e.to_string()))
    }));
}

/// Refuses to write a mirror in sync through one of its copies (`meta`
/// not a [`MirrorDevice`] of both): the other would miss the writes while
/// still passing for in sync. A command run on an unmounted volume opens
/// both copies as a mount does; `-o degraded` first marks the mirror
/// degraded, after which one copy is what the volume runs on.
pub(super) fn refuse_one_copy(meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<()> {
    let Ok(d) = read_data_superblock(data) else {
        // Not a DualFS data device: the open says so.
        return Ok(());
    };
    if d.mirrored() && d.mirror_state != MIRROR_DEGRADED && meta.copies() < 2 {
        return Err(Error::WrongVolume(
            "the volume's meta-data device is mirrored and only one copy was given: writing it alone would leave \
             the other copy behind while it still passes for in sync. Give both copies (as a mount finds them), \
             or mount with -o degraded to run on this one"
                .into(),
        ));
    }
    Ok(())
}

/// The checker a mirror of this volume reads with.
pub(super) fn checker(volume_id: u64) -> crate::device::Checker {
    Arc::new(move |at, blk| crate::format::block::mirror_verdict(blk, at, volume_id))
}

impl Volume {
    /// Formats a volume whose meta-data device is kept on `meta[0]` and
    /// `meta[1]` alike, and `data`.
    ///
    /// # Errors
    /// As [`Volume::format`]; either meta-data device already holds a file
    /// system (unless `force`).
    pub fn format_mirrored(
        meta: [Arc<dyn BlockDevice>; 2],
        data: Arc<dyn BlockDevice>,
        opts: &MkfsOptions,
    ) -> Result<()> {
        if !opts.force
            && let Some(fs) = super::probe_existing(meta[1].as_ref())?
        {
            return Err(Error::Busy(format!("the meta-data mirror already holds {fs} (use --force to overwrite it)")));
        }
        // Nothing to heal while the volume is made: every block is new.
        let mirror = MirrorDevice::new(meta[0].clone(), meta[1].clone(), Arc::new(|_, _| Verdict::Good));
        Volume::format(Arc::new(mirror), data, &MkfsOptions { meta_mirror: true, ..opts.clone() })
    }

    /// Puts together the meta-data device a mount opens from the copies it
    /// was given (one or two). A mirrored volume given both copies in sync
    /// runs on the mirror. With one copy missing or stale, the mount is
    /// refused unless `degraded`; then it runs on the copy in sync, and
    /// (when `writable`) first marks the mirror degraded with a new
    /// generation on that copy and the data device, so that the other copy
    /// is never trusted again before a resync.
    ///
    /// # Errors
    /// A device cannot be read or is no copy of this volume; a copy is
    /// missing or stale and `degraded` is not set; a volume with one
    /// meta-data device given two.
    pub fn assemble_meta(
        copies: &[Arc<dyn BlockDevice>],
        data: &Arc<dyn BlockDevice>,
        degraded: bool,
        writable: bool,
    ) -> Result<Assembled> {
        let Some(first) = copies.first() else {
            return Err(Error::Invalid("no meta-data device given"));
        };
        let d = match device::read(data.as_ref(), DeviceRole::Data, 0, 1).map(|raw| Superblock::decode(&raw)) {
            Ok(Ok(d)) if d.role == Role::Data => d,
            // The open that follows says what is wrong with the pair.
            _ if copies.len() == 1 => return Ok(Assembled { meta: first.clone(), mirror: None, degraded: None }),
            _ => return Err(Error::WrongVolume("the data device's superblock does not decode".into())),
        };
        if !d.mirrored() {
            if copies.len() > 1 {
                return Err(Error::WrongVolume(
                    "the volume has one meta-data device, not a mirror: mount it without mirror=".into(),
                ));
            }
            return Ok(Assembled { meta: first.clone(), mirror: None, degraded: None });
        }
        let mut in_sync = Vec::new();
        let mut why = Vec::new();
        for (i, c) in copies.iter().enumerate().take(2) {
            match standing(c.as_ref(), &d) {
                Standing::InSync => in_sync.push(c.clone()),
                Standing::Stale(g) => why.push(format!(
                    "meta-data copy {} is stale (mirror generation {g}, the volume's is {}): it missed writes and \
                     is not trusted",
                    i + 1,
                    d.mirror_generation
                )),
                Standing::NotACopy(e) => why.push(format!("meta-data copy {}: {e}", i + 1)),
            }
        }
        if copies.len() < 2 {
            why.push("the second meta-data copy is missing (not given)".into());
        }
        if in_sync.len() == 2 && (d.mirror_state != MIRROR_DEGRADED || faults::active(Fault::MirrorTrustStale)) {
            let m = Arc::new(MirrorDevice::new(in_sync[0].clone(), in_sync[1].clone(), checker(d.volume_id())));
            degrade_on_failure(&m, data.clone());
            // Until the volume is attached: what recovery reads from one
            // copy is made the other's ([`MirrorDevice::set_mending`]).
            m.set_mending(writable);
            return Ok(Assembled { meta: m.clone(), mirror: Some(m), degraded: None });
        }
        if in_sync.len() == 2 {
            why.push("the mirror is marked degraded since a mount ran on one copy".into());
            in_sync.truncate(1);
        }
        let Some(one) = in_sync.pop() else {
            return Err(Error::WrongVolume(format!("no meta-data copy is in sync: {}", why.join("; "))));
        };
        let why = why.join("; ");
        if !degraded {
            return Err(Error::WrongVolume(format!(
                "the meta-data mirror is degraded: {why}. Mount with -o degraded to run on the copy in sync"
            )));
        }
        log::warn!("running degraded on one meta-data copy: {why}");
        if writable && d.mirror_state != MIRROR_DEGRADED {
            // Before anything else is written: the absent copy must never
            // pair with the data device again without a resync.
            mark_degraded(one.as_ref(), data.as_ref(), &d)?;
        }
        Ok(Assembled { meta: one, mirror: None, degraded: Some(why) })
    }

    /// `sb` as it is to be written while the mirror runs degraded: a copy
    /// dropped while mounted raised the generation on the disk and marked
    /// the mirror degraded ([`mark_degraded`]), which a superblock written
    /// from memory afterwards must not undo (the dropped copy would pass for
    /// in sync again).
    pub(super) fn degraded_superblock(&self, sb: Superblock) -> Superblock {
        let dropped =
            self.attached().as_ref().and_then(|a| a.mirror.as_ref()).is_some_and(|m| m.failed_copy().is_some());
        if dropped && sb.mirror_state != MIRROR_DEGRADED {
            Superblock { mirror_state: MIRROR_DEGRADED, mirror_generation: sb.mirror_generation + 1, ..sb }
        } else {
            sb
        }
    }

    /// Opens a volume on what [`Volume::assemble_meta`] put together
    /// ([`Volume::open`], then [`Volume::attach_mirror`]).
    ///
    /// # Errors
    /// As [`Volume::open`].
    pub fn open_assembled(a: Assembled, data: Arc<dyn BlockDevice>, options: super::MountOptions) -> Result<Volume> {
        let v = Volume::open(a.meta.clone(), data, options)?;
        v.attach_mirror(&a);
        Ok(v)
    }

    /// Tells the volume, opened on `a.meta`, about its mirror: `stats`
    /// then count healed blocks and say whether it runs degraded.
    pub fn attach_mirror(&self, a: &Assembled) {
        if let Some(m) = &a.mirror {
            m.set_mending(false);
        }
        if a.mirror.is_some() || a.degraded.is_some() {
            self.set_attached(Some(Attached { mirror: a.mirror.clone(), degraded: a.degraded.clone() }));
        }
    }

    /// What the volume knows of its mirror.
    pub(super) fn attached(&self) -> std::sync::RwLockReadGuard<'_, Option<Attached>> {
        self.mirror.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tells the volume of its mirror as it now stands (`dualfs mirror`).
    pub(super) fn set_attached(&self, a: Option<Attached>) {
        *self.mirror.write().unwrap_or_else(std::sync::PoisonError::into_inner) = a;
    }

    /// Why the mirror runs on one copy: missing or stale at mount, or a
    /// copy dropped since for failing a write.
    pub(super) fn degraded_because(&self) -> Option<String> {
        let g = self.attached();
        let a = g.as_ref()?;
        a.degraded.clone().or_else(|| {
            a.mirror
                .as_ref()?
                .failed_copy()
                .map(|(_, why)| format!("{why}; mount with -o degraded until it is replaced"))
        })
    }

    /// What `stats` warns of while the mirror runs on one copy.
    pub(super) fn mirror_warning(&self) -> Option<String> {
        let why = self.degraded_because()?;
        Some(format!("the meta-data mirror is degraded ({why}): the volume runs on one meta-data copy"))
    }

    /// Blocks healed from the other copy, and whether the mirror runs
    /// degraded (absent when the volume is not mirrored).
    pub(super) fn mirror_stats(&self) -> Vec<(&'static str, u64)> {
        let degraded = self.degraded_because().is_some();
        match self.attached().as_ref() {
            None => Vec::new(),
            Some(a) => vec![
                ("mirror_copies_in_use", if degraded { 1 } else { 2 }),
                ("mirror_degraded", u64::from(degraded)),
                ("mirror_blocks_healed", a.mirror.as_ref().map_or(0, |m| m.healed())),
                ("mirror_blocks_unhealed", a.mirror.as_ref().map_or(0, |m| m.unhealed())),
            ],
        }
    }
}
