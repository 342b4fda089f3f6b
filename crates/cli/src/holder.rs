//! Who holds a volume's lock, and waiting for a mount that is closing.
//!
//! `umount` and `fusermount3 -u` return as soon as the kernel lets go of a
//! mount; the serving process then writes its last commit and checkpoint,
//! and only then lets go of the devices. A script that unmounts and mounts
//! again at once would find the volume locked. So a command that finds a
//! device locked asks who holds it (/proc/locks names the process): a
//! serving process that has seen its mount go renames itself
//! [`CLOSING_NAME`] (see `mount.rs`), and is waited for, up to
//! [`CLOSE_WAIT`], with a message; anything else (a mount still mounted,
//! an fsck, a clean) is named in a refusal at once.

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
/// How long a wait for a closing mount goes unsaid on a terminal: a mount
/// right after an unmount usually waits some milliseconds, which nobody
/// need be told; a second is long enough to wonder.
pub const SAY_AFTER: Duration = Duration::from_secs(1);

/// Lines for the log said before it was open (a background mount opens its
/// devices while its standard error is still the caller's terminal).
static PENDING: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The lines kept for the log until it was open, emptied.
pub fn take_pending() -> Vec<String> {
    std::mem::take(&mut *PENDING.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
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
    /// Said on the terminal (after [`SAY_AFTER`]).
    said: bool,
    /// Written to the log, or kept for it.
    logged: bool,
}

impl Wait {
    /// A wait for `path`, started now.
    #[must_use]
    pub fn new(path: &Path) -> Wait {
        Wait { path: path.to_path_buf(), start: Instant::now(), said: false, logged: false }
    }

    /// After a failed try of the lock: pauses and returns Ok when the holder
    /// is a mount that is closing, or the reason to give up. The wait goes
    /// to the log at once (kept until it is open, [`take_pending`]), and to
    /// a terminal only once it has lasted [`SAY_AFTER`].
    ///
    /// # Errors
    /// The holder is not closing, or is still closing after [`CLOSE_WAIT`].
    pub fn turn(&mut self, role: &str) -> Result<()> {
        let holder = holder_of(&self.path);
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
                let line = format!(
                    "{shown} ({role}) is being closed by the process that served its last mount (pid {}); waiting for it",
                    h.pid
                );
                if crate::logs_to_file() {
                    if !self.logged {
                        log::info!("{line}");
                        self.logged = true;
                    }
                } else {
                    if !self.logged {
                        PENDING.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(line.clone());
                        self.logged = true;
                    }
                    if !self.said && self.start.elapsed() >= SAY_AFTER {
                        eprintln!("dualfs: {line}");
                        self.said = true;
                    }
                }
            }
            Some(h) => bail!(
                "the volume is already mounted or in use: {shown} ({role}) is locked by {} (pid {})",
                if h.command.is_empty() { h.name } else { h.command },
                h.pid
            ),
            // Let go between the try and the look, or /proc says nothing:
            // try again, but not for ever.
            None if self.start.elapsed() < Duration::from_secs(1) => {}
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
}
