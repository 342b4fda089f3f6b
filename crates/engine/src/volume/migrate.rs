//! `dualfs migrate`: moving the volume's meta-data or data device to
//! another device while it stays in use (DESIGN.md, "Migrate").
//!
//! 1. The replacement's superblock is written first, naming the volume with
//!    a new uuid for the replaced device: until the commit, the replacement
//!    pairs with nothing (the surviving device names the old uuid), and a
//!    meta-data replacement is never taken for a device whose superblock
//!    is lost (a mount would use the data copy's).
//! 2. Mirroring: every write to the device in use also goes to the
//!    replacement ([`SwitchDevice`]), block 0 aside.
//! 3. A checkpoint, then the copy of what is in use: for the log the
//!    checkpoint area and the segments in use, for data the blocks the
//!    bitmap or a snapshot holds, in steps of 1 MiB, one read while the
//!    one before is written, the volume in use meanwhile.
//! 4. Under the commit and `home` locks (nothing else writes either
//!    device): a checkpoint, both devices flushed (the replacement with
//!    the device in use), the replacement's superblock again if it changed
//!    meanwhile, then the surviving device's superblock naming the new
//!    uuid, flushed: the commit point. The handle then switches.
//!
//! A crash before the commit point leaves the old pair mounting, with
//! everything it acknowledged (every write reached the old device first);
//! after it, the new pair, whole (flushed before). Each pair refuses the
//! other's device: they name different uuids.

use std::sync::Arc;
use std::time::Instant;

use super::{Volume, lock};
use crate::device::{self, BlockDevice, SwitchDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::faults::{self, Fault};
use crate::format::superblock::{Role, Superblock};
use crate::namespace::pages::WriteBack;

/// Blocks of one copy step (1 MiB): one step is written while the next
/// is read.
const COPY_STEP_BLOCKS: u64 = 256;

/// What a migration did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrateReport {
    /// The device replaced.
    pub role: DeviceRole,
    /// Blocks of that device the volume uses (the least a replacement holds).
    pub needed_blocks: u64,
    /// Blocks the copier read from the old device and wrote to the new
    /// (blocks in use, less those mirrored before the copier came to them).
    pub copied_blocks: u64,
    /// Blocks written to both while the copy ran (mirrored writes).
    pub mirrored_blocks: u64,
    /// The old device's uuid.
    pub old_uuid: [u8; 16],
    /// The new device's uuid, which the superblocks now name.
    pub new_uuid: [u8; 16],
    /// How long it took.
    pub micros: u64,
}

fn role_of(role: DeviceRole) -> Role {
    match role {
        DeviceRole::Meta => Role::Meta,
        DeviceRole::Data => Role::Data,
    }
}

fn other(role: DeviceRole) -> DeviceRole {
    match role {
        DeviceRole::Meta => DeviceRole::Data,
        DeviceRole::Data => DeviceRole::Meta,
    }
}

/// `sb` naming `uuid` for the `role` device.
fn naming(sb: &Superblock, role: DeviceRole, uuid: [u8; 16]) -> Superblock {
    let mut s = sb.clone();
    match role {
        DeviceRole::Meta => s.meta_uuid = uuid,
        DeviceRole::Data => s.data_uuid = uuid,
    }
    s
}

impl Volume {
    /// Moves the `role` device of the volume to `new`, the volume staying
    /// in use; `progress(done, total)` counts MiB copied. Crash-safe: see
    /// the module comment.
    ///
    /// # Errors
    /// [`Error::Migrate`] when `new` is smaller than what the volume uses
    /// of that device, or writing to it fails (the volume stays on the old
    /// device); read-only; a device in use fails.
    pub fn migrate(
        &self,
        role: DeviceRole,
        new: Arc<dyn BlockDevice>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<MigrateReport> {
        let started = Instant::now();
        let Some(switches) = &self.switches else {
            return Err(Error::Migrate("a snapshot or a volume under repair cannot be migrated".into()));
        };
        let i = match role {
            DeviceRole::Meta => 0,
            DeviceRole::Data => 1,
        };
        // One migrate, resize or clean at a time, and none from the background.
        let _one_at_a_time = lock(&self.cleaning);
        self.check_writable()?;
        let on_disk = lock(&self.fs).log.superblock_on_disk().clone();
        if role == DeviceRole::Meta && on_disk.mirrored() {
            // The superblock would still name two copies after it.
            return Err(Error::Migrate("the meta-data device is mirrored: a migration moves one device".into()));
        }
        let needed = match role {
            DeviceRole::Meta => on_disk.meta_blocks,
            DeviceRole::Data => on_disk.data_blocks,
        };
        let have = new.refresh_block_count().map_err(|e| Error::Migrate(format!("the new {role}: {e}")))?;
        if have < needed {
            return Err(Error::Migrate(format!(
                "the new {role} holds {} MiB, and the volume uses {} MiB of its {role}: give a device at least that \
                 large (or shrink the volume first with dualfs resize)",
                have / 256,
                needed.div_ceil(256)
            )));
        }
        let old_uuid = match role {
            DeviceRole::Meta => on_disk.meta_uuid,
            DeviceRole::Data => on_disk.data_uuid,
        };
        let new_uuid = *uuid::Uuid::new_v4().as_bytes();
        let early = Superblock { role: role_of(role), ..naming(&on_disk, role, new_uuid) };
        let fail = |e: Error| Error::Migrate(format!("writing to the new {role} failed, nothing changed: {e}"));
        device::write(new.as_ref(), role, 0, &early.encode()).map_err(fail)?;
        device::flush(new.as_ref(), role).map_err(fail)?;
        let switch = &switches[i];
        switch.start_mirror(new.clone());
        let copied = self.copy_in_use(role, switch, progress).and_then(|copied| {
            self.commit_migration(role, switch, new.as_ref(), &early, new_uuid)?;
            Ok(copied)
        });
        let mirrored = switch.mirrored_blocks();
        let copied = match copied {
            Ok(c) => c,
            Err(e) => {
                switch.stop_mirror();
                return Err(e);
            }
        };
        log::info!(
            "migrated the {role} to a new device ({} copied, {} mirrored blocks; uuid {})",
            copied,
            mirrored,
            uuid::Uuid::from_bytes(new_uuid)
        );
        Ok(MigrateReport {
            role,
            needed_blocks: needed,
            copied_blocks: copied,
            mirrored_blocks: mirrored,
            old_uuid,
            new_uuid,
            micros: started.elapsed().as_micros() as u64,
        })
    }

    /// Copies what the volume uses of the `role` device to the replacement
    /// `switch` mirrors to; the number of blocks copied.
    pub(super) fn copy_in_use(
        &self,
        role: DeviceRole,
        switch: &SwitchDevice,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<u64> {
        // Made durable first: what the tables say is in use is then all
        // the old device holds that a mount needs; what is written from
        // now on reaches both.
        self.checkpoint()?;
        let runs = {
            let mut fs = lock(&self.fs);
            match role {
                DeviceRole::Meta => {
                    let sb = fs.log.superblock().clone();
                    let seg = u64::from(sb.segment_blocks);
                    // The checkpoint slots and what lies before segment 0.
                    let mut runs = vec![(1, sb.first_segment_block - 1)];
                    runs.extend(
                        fs.log
                            .segments_in_use_from(0)
                            .into_iter()
                            .map(|s| (sb.first_segment_block + u64::from(s.0) * seg, seg)),
                    );
                    runs
                }
                // Block 0 is the superblock copy: the replacement has its own.
                DeviceRole::Data => fs
                    .log
                    .space_mut()
                    .used_runs()?
                    .into_iter()
                    .filter_map(|(first, n)| if first == 0 { (n > 1).then_some((1, n - 1)) } else { Some((first, n)) })
                    .collect(),
            }
        };
        let total: u64 = runs.iter().map(|r| r.1).sum();
        let mib = |blocks: u64| blocks.div_ceil(256) as usize;
        progress(0, mib(total));
        let copied = switch
            .copy_runs(&runs, COPY_STEP_BLOCKS, &mut |done| progress(mib(done), mib(total)))
            .map_err(|e| Error::Migrate(format!("copying to the new {role} failed, nothing changed: {e}")))?;
        if let Some(why) = switch.mirror_failed() {
            return Err(Error::Migrate(format!("writing to the new {role} failed, nothing changed: {why}")));
        }
        progress(mib(total), mib(total));
        Ok(copied)
    }

    /// The commit: everything durable on both devices, then the superblocks
    /// naming the new device, the replacement's first.
    fn commit_migration(
        &self,
        role: DeviceRole,
        switch: &SwitchDevice,
        new: &dyn BlockDevice,
        early: &Superblock,
        new_uuid: [u8; 16],
    ) -> Result<()> {
        let mut c = lock(&self.commit);
        self.commit_locked(&mut c, WriteBack::All)?;
        self.checkpoint_locked(&mut c, WriteBack::All)?;
        // From here nothing writes either device but this.
        let _home = lock(&self.home);
        let mut fs = lock(&self.fs);
        device::flush(self.meta.as_ref(), DeviceRole::Meta)?;
        device::flush(self.data.as_ref(), DeviceRole::Data)?;
        if let Some(why) = switch.mirror_failed() {
            return Err(Error::Migrate(format!("writing to the new {role} failed, nothing changed: {why}")));
        }
        // The features a snapshot or clone set meanwhile are in the
        // in-memory superblock; the reach is the on-disk one's.
        let mut sb = fs.log.superblock_on_disk().clone();
        sb.incompat |= fs.log.superblock().incompat;
        sb.minor = sb.minor.max(fs.log.superblock().minor);
        let sb = naming(&self.degraded_superblock(sb), role, new_uuid);
        let mine = Superblock { role: role_of(role), ..sb.clone() };
        let theirs = Superblock { role: role_of(other(role)), ..sb.clone() };
        let surviving = match role {
            DeviceRole::Meta => self.data.as_ref(),
            DeviceRole::Data => self.meta.as_ref(),
        };
        let write_mine = |flush: bool| -> Result<()> {
            // Not rewritten when unchanged: a torn rewrite of a meta-data
            // device's superblock would let a mount take the data copy's,
            // which names the old pair still.
            if mine != *early {
                device::write(new, role, 0, &mine.encode())?;
            }
            if flush { device::flush(new, role) } else { Ok(()) }
        };
        let broken = faults::active(Fault::MigrateCopyUnsynced);
        if !broken {
            write_mine(true)
                .map_err(|e| Error::Migrate(format!("writing to the new {role} failed, nothing changed: {e}")))?;
        }
        let committed = device::write(surviving, other(role), 0, &theirs.encode())
            .and_then(|()| device::flush(surviving, other(role)));
        if let Err(e) = committed {
            drop(fs);
            self.fail(&e);
            return Err(Error::Migrate(format!(
                "writing the superblock of the {} failed, so it is not known which pair it names: unmount, then mount \
                 with the new {role}, and if that pair is refused, with the old one ({e})",
                other(role)
            )));
        }
        if broken {
            write_mine(false)?;
        }
        switch.switch().map_err(|e| Error::Migrate(e.to_string()))?;
        fs.log.superblock_written(Superblock { role: Role::Meta, ..sb });
        Ok(())
    }
}
