//! Opening a volume no checkpoint of which loads.
//!
//! Both checkpoints name the IFile blocks the newer one did not rewrite, so
//! one damaged block among those (an index block, a table block both share)
//! makes both unusable. The IFile is not the only copy of anything: it is
//! an index of the log, which describes itself, and repair rebuilds it from
//! a scan ([`crate::meta_log::Log::rebuild`], FORMAT.md 4.10). So instead of
//! writing the IFile twice, a mount that finds no loadable checkpoint asks
//! repair: read-only, it shows the rebuilt volume without writing anything
//! (repair's writes stay in memory); writable, it refuses unless told
//! (`recover=rebuild`), since the rebuilt state replaces what the checkpoint
//! held and the user should see that first. Either way the damage is
//! reported, never walked over. docs/DESIGN.md, "No single block loses the
//! volume".

use std::sync::Arc;

use super::{Prepared, prepare_with_clock};
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::volume::{Clock, MountOptions, SystemClock, Volume};

/// Opens a volume as [`Volume::open`] does, and when that fails because no
/// checkpoint loads (or another corrupt structure stops the open), rescues
/// it through repair: read-only on repair's staged devices, or writable
/// after writing the repair when `options.rebuild` says so.
///
/// # Errors
/// As [`Volume::open`]; a damaged volume opened writable without
/// `options.rebuild` is [`Error::Damaged`], saying what to do; a volume
/// repair cannot make consistent returns the open's own error.
pub fn open(meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>, options: MountOptions) -> Result<Volume> {
    open_with_clock(meta, data, options, SystemClock::shared())
}

/// [`open`] with a given clock.
///
/// # Errors
/// As [`open`].
pub fn open_with_clock(
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    options: MountOptions,
    clock: Clock,
) -> Result<Volume> {
    if options.rebuild && !options.read_only {
        // A mount reads only the maps (the IFile is sparse), so a damaged
        // block of a table it does not read would pass unseen and stay
        // damaged. Asked to rebuild, look at the whole volume first, as
        // fsck does, and rebuild whatever that finds.
        let prepared = prepare_with_clock(meta.clone(), data.clone(), clock.clone())?;
        if prepared.is_empty() {
            return Volume::open_with_clock(meta, data, options, clock);
        }
        let why = prepared.repairs.first().map(|r| r.problem.clone()).unwrap_or_default();
        return rebuild(meta, data, options, clock, prepared, &why);
    }
    let failed = match Volume::open_with_clock(meta.clone(), data.clone(), options, clock.clone()) {
        Err(e @ Error::Corrupt { .. }) => e,
        other => return other,
    };
    log::error!("the volume cannot be opened as it is: {failed}; rebuilding it from its log");
    let prepared = match prepare_with_clock(meta.clone(), data.clone(), clock.clone()) {
        Ok(p) if p.after.as_ref().is_some_and(crate::check::CheckReport::is_clean) => p,
        Ok(_) => {
            log::error!("repair could not make the volume consistent: `dualfs fsck` says what is left");
            return Err(failed);
        }
        Err(e) => {
            log::error!("the volume cannot be rebuilt from its log: {e}");
            return Err(failed);
        }
    };
    let what = summary(&failed.to_string(), &prepared);
    if options.read_only {
        let (sm, sd) = prepared.staged();
        let mut vol = Volume::open_with_clock(sm, sd, options, clock)?;
        vol.note_damage(format!(
            "{what}. Shown read-only as rebuilt, nothing written: repair it with `dualfs fsck -y`, or mount \
             with -o recover=rebuild"
        ));
        return Ok(vol);
    }
    if !options.rebuild {
        return Err(Error::Damaged(format!(
            "{what}. Mount read-only (-o ro) to look at the rebuilt volume, then write it with -o recover=rebuild \
             or `dualfs fsck -y`"
        )));
    }
    rebuild(meta, data, options, clock, prepared, &failed.to_string())
}

/// Writes what repair prepared and opens the volume it leaves
/// (`recover=rebuild`); the volume keeps a note of the damage.
fn rebuild(
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    options: MountOptions,
    clock: Clock,
    prepared: Prepared,
    why: &str,
) -> Result<Volume> {
    if !prepared.after.as_ref().is_some_and(crate::check::CheckReport::is_clean) {
        log::error!("repair could not make the volume consistent: `dualfs fsck` says what is left");
        return Err(Error::Damaged(format!("{why}; repair cannot make the volume consistent")));
    }
    let what = summary(why, &prepared);
    for r in &prepared.repairs {
        log::warn!("recover=rebuild: {r}");
    }
    prepared.write(meta.as_ref(), data.as_ref())?;
    let mut vol = Volume::open_with_clock(meta, data, options, clock)?;
    vol.note_damage(format!("{what}. Written (recover=rebuild)"));
    Ok(vol)
}

/// One sentence on why the volume was rebuilt and what the rebuild does.
fn summary(failed: &str, p: &Prepared) -> String {
    let loses = p.repairs.iter().filter(|r| r.severity == super::Severity::Loses).count();
    format!(
        "the volume cannot be opened as it is ({failed}); {}: {} repair{}, {loses} of them giving up something \
         unreadable (`dualfs fsck -n` lists them)",
        p.source,
        p.repairs.len(),
        if p.repairs.len() == 1 { "" } else { "s" }
    )
}
