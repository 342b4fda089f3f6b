//! `mount -o remount,ro|rw MOUNTPOINT`: switch a mounted volume between
//! read-only and read-write in place, as every kernel file system does.
//! A volume option the volume serves otherwise (`discard`, `commit=`...)
//! is refused, naming it: a remount cannot change it.
//!
//! mount(8) runs the helper again with `remount` among the options (the
//! mount's current options first, then the new ones). Two parties must
//! change: the kernel's superblock (so that the VFS refuses writes and
//! /proc/mounts says `ro`; only root may remount) and the serving process
//! (which commits, checkpoints and refuses changes; reached through the
//! `dualfs.remount.*` control attributes). The order makes it safe:
//!
//! - to read-only, the kernel first: it refuses (EBUSY) while a file is
//!   open for writing and writes its cached pages back while the volume
//!   still takes them; then the volume commits and turns read-only;
//! - to read-write, the volume first, so that no write the kernel lets
//!   through is refused.

use anyhow::{Context, Result, bail};
use nix::errno::Errno;
use nix::mount::MsFlags;
use nix::sys::statvfs::FsFlags;

use crate::args::MountArgs;
use crate::control::Mounted;
use crate::options::MountConfig;

/// The per-mount flags an option sets (`true`) or clears (`false`).
fn flag_of(opt: &str) -> Option<(MsFlags, bool)> {
    Some(match opt {
        "nosuid" => (MsFlags::MS_NOSUID, true),
        "suid" => (MsFlags::MS_NOSUID, false),
        "nodev" => (MsFlags::MS_NODEV, true),
        "dev" => (MsFlags::MS_NODEV, false),
        "noexec" => (MsFlags::MS_NOEXEC, true),
        "exec" => (MsFlags::MS_NOEXEC, false),
        "sync" => (MsFlags::MS_SYNCHRONOUS, true),
        "async" => (MsFlags::MS_SYNCHRONOUS, false),
        "dirsync" => (MsFlags::MS_DIRSYNC, true),
        _ => return None,
    })
}

/// The access-time flag an option asks for.
fn atime_flag(opt: &str) -> Option<MsFlags> {
    Some(match opt {
        "noatime" => MsFlags::MS_NOATIME,
        "relatime" | "atime" | "nostrictatime" => MsFlags::MS_RELATIME,
        "strictatime" | "norelatime" => MsFlags::MS_STRICTATIME,
        _ => return None,
    })
}

/// The flags of a remount: the mount's current ones, changed by the
/// options in order (the last word on each wins); MS_RDONLY from `ro`.
fn remount_flags(current: FsFlags, options: &[&str], read_only: bool) -> MsFlags {
    let mut f = MsFlags::MS_REMOUNT;
    for (st, ms) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_SYNCHRONOUS, MsFlags::MS_SYNCHRONOUS),
    ] {
        f.set(ms, current.contains(st));
    }
    let mut atime = if current.contains(FsFlags::ST_NOATIME) {
        MsFlags::MS_NOATIME
    } else if current.contains(FsFlags::ST_RELATIME) {
        MsFlags::MS_RELATIME
    } else {
        MsFlags::MS_STRICTATIME
    };
    for o in options {
        if let Some((flag, on)) = flag_of(o) {
            f.set(flag, on);
        } else if let Some(a) = atime_flag(o) {
            atime = a;
        }
    }
    f.set(MsFlags::MS_RDONLY, read_only);
    f | atime
}

/// Asks the kernel to remount; Ok(false) when only root could.
fn kernel_remount(mnt: &Mounted, flags: MsFlags) -> Result<bool> {
    match nix::mount::mount(None::<&str>, mnt.root(), None::<&str>, flags, None::<&str>) {
        Ok(()) => Ok(true),
        Err(Errno::EPERM) => Ok(false),
        Err(Errno::EBUSY) => {
            bail!("{} is busy: a file is open for writing there (close it, or unmount instead)", mnt.root().display())
        }
        Err(e) => Err(e).with_context(|| format!("cannot remount {}", mnt.root().display())),
    }
}

/// The options of a remount that are the volume's: neither a mount's own
/// flag nor one of the kernel's FUSE options, which mount(8) passes again.
fn volume_words<'a>(options: &[&'a str]) -> Vec<&'a str> {
    const KERNEL: [&str; 9] = [
        "user_id=",
        "group_id=",
        "default_permissions",
        "allow_other",
        "allow_root",
        "max_read=",
        "blksize=",
        "rootmode=",
        "fd=",
    ];
    options
        .iter()
        .copied()
        .filter(|o| {
            !o.is_empty()
                && flag_of(o).is_none()
                && atime_flag(o).is_none()
                && !matches!(*o, "ro" | "rw" | "remount" | "defaults")
                && !o.starts_with("data=")
                && !KERNEL.iter().any(|k| if k.ends_with('=') { o.starts_with(k) } else { o == k })
        })
        .collect()
}

/// The last of `ro` and `rw` among the options, if either is there.
fn wanted_read_only(options: &[&str]) -> Option<bool> {
    options.iter().rev().find_map(|o| match *o {
        "ro" => Some(true),
        "rw" => Some(false),
        _ => None,
    })
}

/// Runs a remount of the volume mounted on `args.mountpoint`.
///
/// # Errors
/// Nothing or something else is mounted there, a file is open for writing
/// (to read-only), the volume cannot be written (to read-write), or the
/// caller may not use the mount's control attributes.
pub fn run(args: &MountArgs, _cfg: &MountConfig) -> Result<()> {
    let mnt = Mounted::find(&args.mountpoint)?;
    let options: Vec<&str> = args.options.iter().flat_map(|l| l.split(',')).map(str::trim).collect();
    // A volume setting the remount would change is refused, naming it,
    // before anything changes: it would not take effect.
    let words: Vec<String> = volume_words(&options).into_iter().map(String::from).collect();
    crate::join::check_remount(&args.meta, &args.data, mnt.root(), &words)?;
    let statvfs = nix::sys::statvfs::statvfs(mnt.root())
        .with_context(|| format!("cannot read the flags of {}", mnt.root().display()))?;
    let volume_read_only = mnt.get(dualfs_fuse::control::MODE)?["read_only"].as_bool().unwrap_or(false);
    let read_only = wanted_read_only(&options).unwrap_or(volume_read_only);
    let flags = remount_flags(statvfs.flags(), &options, read_only);
    let kernel_done = if read_only && !volume_read_only {
        let done = kernel_remount(&mnt, flags)?;
        if let Err(e) = mnt.get(dualfs_fuse::control::REMOUNT_RO) {
            if done {
                let _ = kernel_remount(&mnt, flags - MsFlags::MS_RDONLY);
            }
            return Err(e.context("the volume could not be made read-only; it is still read-write"));
        }
        done
    } else if !read_only && volume_read_only {
        mnt.get(dualfs_fuse::control::REMOUNT_RW).map_err(|e| {
            e.context("the volume cannot become writable: it was mounted from devices that cannot be written, or uses features this version cannot write")
        })?;
        match kernel_remount(&mnt, flags) {
            Ok(done) => done,
            Err(e) => {
                let _ = mnt.get(dualfs_fuse::control::REMOUNT_RO);
                return Err(e);
            }
        }
    } else {
        kernel_remount(&mnt, flags)?
    };
    if !kernel_done {
        eprintln!(
            "dualfs: only root can remount {} in the kernel: it still shows {}; the volume itself {}",
            mnt.root().display(),
            if statvfs.flags().contains(FsFlags::ST_RDONLY) { "ro" } else { "rw" },
            if read_only { "refuses every change (EROFS)" } else { "takes changes" }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remount_keeps_the_current_flags_and_applies_the_new_ones_in_order() {
        let current = FsFlags::ST_NOSUID | FsFlags::ST_NODEV | FsFlags::ST_RELATIME;
        let f = remount_flags(current, &[], true);
        assert_eq!(
            f,
            MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_RELATIME
        );
        let f = remount_flags(current, &["suid", "noatime", "noexec"], false);
        assert_eq!(f, MsFlags::MS_REMOUNT | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC | MsFlags::MS_NOATIME);
        assert_eq!(wanted_read_only(&["rw", "nosuid", "remount", "ro"]), Some(true));
        assert_eq!(wanted_read_only(&["remount"]), None);
        let given = ["rw", "nosuid", "relatime", "remount", "user_id=0", "default_permissions", "discard", "commit=5"];
        assert_eq!(volume_words(&given), ["discard", "commit=5"]);
    }
}
