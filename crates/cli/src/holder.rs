//! Who holds a volume's lock, and waiting for a mount that is closing.
//!
//! `umount` and `fusermount3 -u` return as soon as the kernel lets go of a
//! mount; the serving process then writes its last commit and checkpoint,
//! and only then lets go of the devices. A script that unmounts and mounts
//! again at once would find the volume locked. So a command that finds a
//! device locked asks who holds it (/proc/locks names the process): a
//! serving process that has seen its mount go renames itself
//! [`CLOSING_NAME`] (see `mount.rs`), and is waited for, up to
//! [`CLOSE_WAIT`]; anything else (a mount still mounted, an fsck, a clean)
//! is named in a refusal, at once when the device is mounted, else after
//! [`RENAME_GRACE`]: a serving process sees its unmount a moment after
//! umount(8) has returned, and only then takes its closing name. The wait is said on standard error only
//! once it has lasted [`SAY_AFTER`]: a mount right after an unmount
//! usually waits milliseconds, and a kernel file system's mount prints
//! nothing (scripts compare its output). Every wait is kept for the
//! mount's log ([`take_waits`]).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// The process name (`/proc/PID/comm`) of a serving process whose mount
/// has ended and which is writing its last checkpoint.
pub const CLOSING_NAME: &std::ffi::CStr = c"dualfs-closing";

/// Longest wait for a closing mount: its last commit writes every dirty
/// byte, which takes seconds with hundreds of MiB of dirty data.
pub const CLOSE_WAIT: Duration = Duration::from_secs(60);

/// Pause between two tries of the lock.
const RETRY: Duration = Duration::from_millis(50);

/// A wait for a closing mount is said on standard error once it lasts
/// this long: long enough for a person to wonder.
pub const SAY_AFTER: Duration = Duration::from_secs(1);

/// How long a holder that serves no mount of the device may take to
/// take its closing name before it is refused as a user of the volume.
const RENAME_GRACE: Duration = Duration::from_secs(1);

/// Whether a FUSE mount's source names `path`: a DualFS mount's source is
/// `META#DATA` unless `fsname=` said otherwise.
fn mounted_from(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return true;
    };
    text.lines().any(|line| {
        // ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAGS...] - TYPE SOURCE SUPER
        let Some((_, tail)) = line.split_once(" - ") else { return false };
        let mut fields = tail.split(' ');
        let (Some(fstype), Some(source)) = (fields.next(), fields.next()) else { return false };
        fstype.starts_with("fuse") && unescape(source).split('#').any(|p| Path::new(p) == path)
    })
}

/// The kernel writes space, tab, newline, backslash and `#` in
/// mountinfo as three octal digits after a backslash.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The waits of this process that ended with the lock, as log lines.
static WAITS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The waits for closing mounts so far (taken): a background mount logs
/// them once its standard error is its log.
pub fn take_waits() -> Vec<String> {
    WAITS.lock().map(|mut w| std::mem::take(&mut *w)).unwrap_or_default()
}

/// The process holding a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its process id.
    pub pid: u32,
    /// Its name in /proc/PID/comm.
    pub name: String,
    /// Its command line, arguments separated by spaces.
    pub command: String,
}

/// The pid of the process holding a flock on the file with device `dev`
/// and inode `ino`, from the text of /proc/locks (`1: FLOCK ADVISORY WRITE
/// 123 fe:00:4567 0 EOF`, the device as hexadecimal major:minor). Lines of
/// processes waiting for a lock (`->`) are skipped.
pub fn lock_pid(locks: &str, major: u64, minor: u64, ino: u64) -> Option<u32> {
    let want = format!("{major:02x}:{minor:02x}:{ino}");
    locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(1) != Some(&"FLOCK") || f.get(5) != Some(&want.as_str()) {
            return None;
        }
        f.get(4)?.parse().ok()
    })
}

/// Who holds the lock on `path`, if /proc says.
pub fn holder_of(path: &Path) -> Option<Holder> {
    let m = std::fs::metadata(path).ok()?;
    let dev = m.dev();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = lock_pid(&locks, nix::sys::stat::major(dev), nix::sys::stat::minor(dev), m.ino())?;
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let name = std::fs::read_to_string(proc_dir.join("comm")).unwrap_or_default().trim_end().to_string();
    let command = std::fs::read(proc_dir.join("cmdline"))
        .map(|b| {
            b.split(|&c| c == 0).filter(|a| !a.is_empty()).map(String::from_utf8_lossy).collect::<Vec<_>>().join(" ")
        })
        .unwrap_or_default();
    Some(Holder { pid, name, command })
}

/// Waiting for a locked device: one per open, asked after every failed try.
#[derive(Debug)]
pub struct Wait {
    path: PathBuf,
    start: Instant,
    /// When a holder was last seen in /proc/locks.
    seen: Instant,
    said: bool,
    /// The closing process waited for, and the device's role.
    closing: Option<(u32, String)>,
}

impl Wait {
    /// A wait for `path`, started now.
    #[must_use]
    pub fn new(path: &Path) -> Wait {
        Wait { path: path.to_path_buf(), start: Instant::now(), seen: Instant::now(), said: false, closing: None }
    }

    /// The lock is ours: a wait for a closing mount is kept for the log.
    pub fn done(self) {
        let Some((pid, role)) = self.closing else { return };
        let line = format!(
            "waited {} ms for {} ({role}) to be closed by the process that served its last mount (pid {pid})",
            self.start.elapsed().as_millis(),
            self.path.display()
        );
        if let Ok(mut w) = WAITS.lock() {
            w.push(line);
        }
    }

    /// After a failed try of the lock: pauses and returns Ok when the holder
    /// is a mount that is closing (saying so once), or the reason to give up.
    ///
    /// # Errors
    /// The holder is not closing, or is still closing after [`CLOSE_WAIT`].
    pub fn turn(&mut self, role: &str) -> Result<()> {
        let holder = holder_of(&self.path);
        if holder.is_some() {
            self.seen = Instant::now();
        }
        let shown = self.path.display();
        match holder {
            Some(h) if h.name.as_bytes() == CLOSING_NAME.to_bytes() => {
                if self.start.elapsed() >= CLOSE_WAIT {
                    bail!(
                        "{shown} ({role}) is still held after {} s by the process that was closing it (pid {})",
                        CLOSE_WAIT.as_secs(),
                        h.pid
                    );
                }
                self.closing = Some((h.pid, role.to_string()));
                if !self.said && self.start.elapsed() >= SAY_AFTER {
                    eprintln!(
                        "dualfs: {shown} ({role}) is being closed by the process that served its last mount (pid {}); waiting for it",
                        h.pid
                    );
                    self.said = true;
                }
            }
            // A serving process whose mount has just gone takes a moment
            // to see it and take its closing name: umount(8) returns as
            // soon as the kernel lets go. A holder that serves no mount of
            // this device is given that moment.
            Some(h) if self.start.elapsed() < RENAME_GRACE && !mounted_from(&self.path) => {
                self.closing = Some((h.pid, role.to_string()));
            }
            Some(h) => bail!(
                "the volume is already mounted or in use: {shown} ({role}) is locked by {} (pid {})",
                if h.command.is_empty() { h.name } else { h.command },
                h.pid
            ),
            // Let go between the try and the look (a closing holder may do
            // so after any wait), or /proc says nothing: try again, but not
            // for ever.
            None if self.seen.elapsed() < Duration::from_secs(1) => {}
            None => bail!("the volume is already mounted or in use: {shown} ({role}) is locked by another process"),
        }
        std::thread::sleep(RETRY);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines_name_the_holder() {
        let text = "1: FLOCK  ADVISORY  WRITE 21022 fe:00:9977919 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 999 fe:00:5 0 EOF\n\
                    3: FLOCK  ADVISORY  WRITE 20630 103:0a:5349581 0 EOF\n\
                    3: -> FLOCK  ADVISORY  WRITE 777 103:0a:5349581 0 EOF\n";
        assert_eq!(lock_pid(text, 0xfe, 0, 9_977_919), Some(21022));
        assert_eq!(lock_pid(text, 0x103, 0x0a, 5_349_581), Some(20630));
        assert_eq!(lock_pid(text, 0xfe, 0, 5), None, "POSIX locks are not ours");
        assert_eq!(lock_pid(text, 0xfe, 0, 1), None);
    }

    #[test]
    fn mountinfo_sources_are_unescaped() {
        assert_eq!(unescape("/a/m.img\\043/a/d\\040x.img"), "/a/m.img#/a/d x.img");
        assert_eq!(unescape("plain\\9"), "plain\\9");
        assert_eq!(unescape("end\\04"), "end\\04");
    }
}
