//! The kernel's dirty-data window and read-ahead for the mount (its
//! backing device info: `/sys/class/bdi/MAJ:MIN/max_bytes`, Linux 6.2+, and
//! `read_ahead_kb`).
//!
//! With the writeback cache, the kernel keeps written pages and passes them
//! to the volume in background WRITE requests, which queue in one FIFO per
//! connection. The volume keeps its own write-back cache (delayed
//! allocation, the dirty-data limit), so a large kernel window only adds a
//! queue in front of it: the page a database's fsync needs waits behind
//! everything a copy beside it dirtied (about 1% of memory, 48 MiB here:
//! ~250 ms at 200 MB/s, for each fsync). A window of two requests keeps the
//! copy's throughput and moves its back-pressure into the kernel's dirty
//! throttling, which slows the copy instead of everyone. Measured
//! (docs/DESIGN.md, "The kernel's window follows what waits"): SQLite
//! beside a 1 GiB copy 3–4 tx/s with 46 MiB, 61 with 2 MiB; the copy alone
//! 151–213 MB/s with 2 MiB against 163–183 with 46 MiB; 1 MiB halves the
//! copy's speed.

use std::path::Path;

use dualfs_fuse::window::DirtyWindow;

/// Two `max_write` requests: the window while an fsync waits beside a
/// stream.
pub const DEFAULT_DIRTY_WINDOW: u64 = 2 << 20;
/// Thirty-two: the window otherwise. A 1 GiB `dd conv=fsync` alone took
/// 2.3–2.5 s with eight against 5.2–6.0 s with two requests (DESIGN.md,
/// "The kernel's window follows what waits"), and the suite's 1 GiB fio
/// write + fsync ran at 848–1,137 MiB/s with 32 against 561–749 with eight
/// whenever the CPUs had room: with eight, the writer sleeps in the
/// kernel's dirty throttling while the volume, its window drained, waits
/// for it.
pub const DEFAULT_STREAM_WINDOW: u64 = 32 << 20;

/// The dirty window of the FUSE mount at `mountpoint` (absolute): `shared`
/// while an fsync comes beside a stream, `stream` otherwise
/// ([`dualfs_fuse::window`]); `shared` 0 leaves the kernel's limit, and
/// `stream` 0 keeps `shared` always. Best effort: an older kernel or no
/// permission leaves the kernel's limit, said in the log.
pub fn dirty_window(mountpoint: &Path, shared: u64, stream: u64) -> Option<DirtyWindow> {
    if shared == 0 {
        return None;
    }
    let Some(dev) = mount_device(mountpoint) else {
        log::debug!("no mount at {} in /proc/self/mountinfo", mountpoint.display());
        return None;
    };
    let path = format!("/sys/class/bdi/{dev}/max_bytes");
    if let Err(e) = std::fs::write(&path, shared.to_string()) {
        log::info!("cannot set the kernel's dirty window ({path}: {e}); the kernel's limit stays");
        return None;
    }
    let set = move |bytes: u64| match std::fs::write(&path, bytes.to_string()) {
        Ok(()) => log::debug!("kernel dirty window: {bytes} bytes ({path})"),
        Err(e) => log::info!("cannot set the kernel's dirty window ({path}: {e})"),
    };
    Some(DirtyWindow::new(shared, if stream == 0 { shared } else { stream }, Box::new(set)))
}

/// The kernel's read-ahead for the mount: 2 MiB. Each READ is a round
/// trip to the volume, which reads the data device with `O_DIRECT` (no
/// read-ahead below it), so the kernel's window is all the read-ahead a
/// sequential reader gets. A cold 1 GiB read took 2.4–4.2 s with the
/// default 128 KiB and 1.8–2.0 s with 2 MiB (1 MiB: 1.9–2.2, 8 MiB: 2.3;
/// DESIGN.md, "The read path"). The kernel ramps the window up only for
/// sequential reads, so random readers pay nothing for it.
pub const DEFAULT_READ_AHEAD: u64 = 2 << 20;

/// Sets the kernel's read-ahead for the mount at `mountpoint` to `bytes`
/// (rounded down to KiB). Best effort, as [`dirty_window`]: a failure is
/// said in the log and leaves the kernel's default.
pub fn read_ahead(mountpoint: &Path, bytes: u64) {
    let Some(dev) = mount_device(mountpoint) else {
        log::debug!("no mount at {} in /proc/self/mountinfo", mountpoint.display());
        return;
    };
    let path = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    match std::fs::write(&path, (bytes >> 10).to_string()) {
        Ok(()) => log::debug!("kernel read-ahead: {} KiB ({path})", bytes >> 10),
        Err(e) => log::info!("cannot set the kernel's read-ahead ({path}: {e}); its default stays"),
    }
}

/// The `MAJ:MIN` of the newest mount at `mountpoint`, from
/// /proc/self/mountinfo: a stat of the mount point would ask the volume,
/// which does not serve yet.
fn mount_device(mountpoint: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mountpoint.to_str()?;
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 4 && unescape(f[4]) == want).then(|| f[2].to_string())
        })
        .next_back()
}

/// mountinfo writes space, tab, newline and backslash as octal escapes.
fn unescape(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/tmp/a\\040b\\134c"), "/tmp/a b\\c");
    }

    #[test]
    fn the_root_mount_is_found() {
        assert!(mount_device(Path::new("/")).is_some_and(|d| d.contains(':')));
    }
}
