//! `dualfs umount`: unmount, then wait until the serving process has
//! written its final checkpoint and let go of the devices.
//!
//! `fusermount3 -u` returns as soon as the kernel lets go; the volume is
//! closed a moment later. Scripts that remount or copy the images need to
//! know when that moment has passed: the serving process holds a lock on
//! the meta-data device until it exits, so waiting for the lock is waiting
//! for the clean close.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::errno::Errno;
use nix::mount::MntFlags;

use crate::args::UmountArgs;
use crate::mountinfo::{data_of_source, find, meta_of_source, parse_mountinfo};

/// How long a busy mount is tried again: something that looked at a new
/// mount a moment ago (a process forked while a thread held a file there,
/// a watcher of mounts) lets go within milliseconds, and a script's mount
/// followed at once by an unmount should not fail for it.
const BUSY_RETRY: Duration = Duration::from_secs(1);

fn unmount(mountpoint: &Path, lazy: bool) -> Result<()> {
    let flags = if lazy { MntFlags::MNT_DETACH } else { MntFlags::empty() };
    let start = Instant::now();
    let mut tried = nix::mount::umount2(mountpoint, flags);
    while tried == Err(Errno::EBUSY) && start.elapsed() < BUSY_RETRY {
        std::thread::sleep(Duration::from_millis(20));
        tried = nix::mount::umount2(mountpoint, flags);
    }
    match tried {
        Ok(()) => Ok(()),
        Err(Errno::EBUSY) => bail!(
            "{} is busy: a process has a file open or its working directory there (--lazy detaches it anyway)",
            mountpoint.display()
        ),
        // Only root may umount(2); fusermount3 is set-uid for the others.
        Err(Errno::EPERM) => {
            let mut cmd = Command::new("fusermount3");
            cmd.arg("-u");
            if lazy {
                cmd.arg("-z");
            }
            let status = cmd.arg("--").arg(mountpoint).status().context("cannot run fusermount3")?;
            if !status.success() {
                bail!("fusermount3 -u {} failed", mountpoint.display());
            }
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("cannot unmount {}", mountpoint.display())),
    }
}

/// Waits until nothing holds `meta` and `data` any more (the serving
/// process has exited), for at most `timeout`.
///
/// # Errors
/// The timeout passes.
pub fn wait_closed(meta: &Path, data: Option<&Path>, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    // Every name a mount claims (a loop device and the file behind it, an
    // image file), on both devices, not only the meta-data path's lock: a
    // block device's node carries no lock, and the serving process lets go
    // of its two devices one after the other.
    while !crate::claim::is_free(meta) || data.is_some_and(|d| !crate::claim::is_free(d)) {
        if start.elapsed() >= timeout {
            bail!(
                "the volume on {} is still open after {} s: the serving process has not finished",
                meta.display(),
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A mount's source split into the volume (`META#DATA`) and the tree or
/// snapshot it serves beside the live one (`@NAME`), if any. A data path
/// may hold an `@` itself: the suffix counts only when the path before it
/// exists and the whole does not.
fn split_tree(source: &str) -> (&str, Option<&str>) {
    if let Some((_, data)) = source.split_once('#')
        && let Some((d, name)) = data.rsplit_once('@')
        && !Path::new(data).exists()
        && Path::new(d).exists()
    {
        return (&source[..source.len() - name.len() - 1], Some(name));
    }
    (source, None)
}

/// Runs `dualfs umount`.
///
/// # Errors
/// Not a DualFS mount, busy, or the volume does not close in time.
pub fn run(args: &UmountArgs) -> Result<()> {
    let mnt = std::path::absolute(&args.mountpoint)
        .with_context(|| format!("cannot resolve {}", args.mountpoint.display()))?;
    // canonicalize fails on a mount whose process died; fall back to the
    // absolute path, which is how it was mounted.
    let mnt = std::fs::canonicalize(&mnt).unwrap_or(mnt);
    let entry = find(&mnt)?;
    unmount(&mnt, args.lazy)?;
    let (volume, tree) = split_tree(&entry.source);
    // A volume mounted twice (join.rs) closes with its last mount; so does
    // one with writable trees served beside it (sources `META#DATA@NAME`,
    // each a connection of its own). A read-only snapshot served beside it
    // does not keep it open.
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let others: Vec<String> = parse_mountinfo(&text)
        .into_iter()
        .filter(|e| {
            e.fstype == entry.fstype
                && (e.dev == entry.dev || split_tree(&e.source).0 == volume && (tree.is_some() || !e.read_only))
        })
        .map(|e| e.mountpoint.display().to_string())
        .collect();
    let kind = if entry.read_only { "snapshot" } else { "tree" };
    let what = tree.map(|name| format!(" ({kind} {name})")).unwrap_or_default();
    if !others.is_empty() {
        say!("unmounted {}{what}; the volume stays mounted on {}", mnt.display(), others.join(", "));
        return Ok(());
    }
    // A read-only snapshot holds no lock to wait for: the live volume's
    // mount may hold it meanwhile, and it has nothing to write.
    if let Some(name) = tree
        && entry.read_only
    {
        say!("unmounted {} (snapshot {name}, read-only: nothing to close)", mnt.display());
        return Ok(());
    }
    match meta_of_source(volume) {
        Some(meta) if meta.exists() => {
            let data = data_of_source(volume);
            wait_closed(&meta, data.as_deref(), Duration::from_secs(args.timeout))?;
            say!("unmounted {}; the volume is closed", mnt.display());
        }
        _ => println!(
            "unmounted {} (source {:?} does not name the devices: not waiting for the close)",
            mnt.display(),
            entry.source
        ),
    }
    Ok(())
}
