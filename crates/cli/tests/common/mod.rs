//! What every mount test needs: a fresh volume of image files in a
//! temporary folder, mounted with the real `dualfs` binary, and shell
//! commands run against it with a time limit.

#![allow(dead_code)]

use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub const DUALFS: &str = env!("CARGO_BIN_EXE_dualfs");

/// Seconds any one shell command may take before the test fails.
const COMMAND_LIMIT_SECS: u32 = 300;

/// Says why a test cannot run here and fails it, unless the developer
/// allowed that with `DUALFS_ALLOW_SKIP=1` (CI never does): a machine that
/// cannot run the mount tests must not report them passed.
pub fn skip(why: &str) {
    if std::env::var_os("DUALFS_ALLOW_SKIP").is_some_and(|v| v == "1") {
        println!("SKIPPED: {why}");
        return;
    }
    panic!("cannot run here: {why} (DUALFS_ALLOW_SKIP=1 lets tests that cannot run pass)");
}

/// Whether mount tests can run here; if not, [`skip`] says why.
pub fn can_mount() -> bool {
    if !nix::unistd::geteuid().is_root() {
        skip("mount tests need root");
        return false;
    }
    if !Path::new("/dev/fuse").exists() {
        skip("/dev/fuse is missing (modprobe fuse)");
        return false;
    }
    true
}

/// The transport every test mount is served over, from
/// `DUALFS_TEST_TRANSPORT`: `devfuse` (the default) or `uring` (`make
/// test` runs the mount suites once over each; see docs/TESTING.md).
pub fn test_transport() -> &'static str {
    match std::env::var("DUALFS_TEST_TRANSPORT").as_deref() {
        Ok("uring") => "uring",
        Ok("devfuse") | Err(_) => "devfuse",
        Ok(other) => panic!("DUALFS_TEST_TRANSPORT={other}: give devfuse or uring"),
    }
}

/// The mount option every test mount adds: the transport insisted on, so
/// that a mount not served over it fails instead of passing over another.
pub fn extra_mount_options() -> String {
    format!("transport={}", test_transport())
}

/// For a mount over io_uring, `enable_uring` set while it comes up (the
/// kernel reads it at INIT and at each queue's registration); None for
/// /dev/fuse, or (having said why) where the kernel has no FUSE over
/// io_uring.
fn uring_for_the_mount() -> Option<UringParameter> {
    if test_transport() == "uring" { UringParameter::set("Y") } else { None }
}

/// The fuse module's parameter that lets a server use io_uring.
pub const URING_PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

/// Taken (flock) by whoever needs `enable_uring` to hold a value for a
/// while, across processes: the parameter is the whole machine's.
const URING_LOCK: &str = "/run/lock/dualfs-enable-uring.lock";

/// `enable_uring` set to a value, under [`URING_LOCK`], until dropped; then
/// put back as it was.
pub struct UringParameter {
    before: String,
    _lock: nix::fcntl::Flock<File>,
}

impl UringParameter {
    /// Sets the parameter to `value` (Y or N); None, after [`skip`] said
    /// why, where the kernel has no such parameter or it cannot be written.
    pub fn set(value: &str) -> Option<UringParameter> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(URING_LOCK).expect("lock file");
        let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).expect("flock");
        let Ok(before) = std::fs::read_to_string(URING_PARAMETER) else {
            skip(&format!("{URING_PARAMETER} is missing (a kernel before 6.14, or without CONFIG_FUSE_IO_URING)"));
            return None;
        };
        if let Err(e) = std::fs::write(URING_PARAMETER, value) {
            skip(&format!("cannot write {URING_PARAMETER}: {e}"));
            return None;
        }
        Some(UringParameter { before: before.trim().to_string(), _lock: lock })
    }
}

impl Drop for UringParameter {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(URING_PARAMETER, &self.before) {
            eprintln!("cannot put {URING_PARAMETER} back to {}: {e}", self.before);
        }
    }
}

/// Runs `script` with sh -e, failing the test (with its output) unless it
/// succeeds; returns standard output.
pub fn sh(script: &str) -> String {
    let out = sh_output(script);
    assert!(
        out.status.success(),
        "command failed ({}):\n{script}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `script` with sh -e and a time limit, whatever its outcome.
pub fn sh_output(script: &str) -> Output {
    Command::new("timeout")
        .arg(COMMAND_LIMIT_SECS.to_string())
        .args(["sh", "-ec", script])
        .output()
        .expect("cannot run sh")
}

/// Loop devices attached to image files, detached when dropped: the
/// device paths, in the order of the files.
pub struct Loops(pub Vec<String>);

impl Loops {
    /// Attaches a loop device to each file; None (the test skipped) when
    /// the machine has none to give.
    pub fn attach(files: &[&Path]) -> Option<Loops> {
        let mut l = Loops(Vec::new());
        for f in files {
            let out = sh_output(&format!("losetup -f --show {}", f.display()));
            if !out.status.success() {
                skip(&format!("no loop device ({})", String::from_utf8_lossy(&out.stderr).trim()));
                return None;
            }
            l.0.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
        }
        Some(l)
    }
}

impl Drop for Loops {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = sh_output(&format!("losetup -d {d}"));
        }
    }
}

/// Runs the dualfs binary.
pub fn dualfs(args: &[&str]) -> Output {
    Command::new("timeout")
        .arg(COMMAND_LIMIT_SECS.to_string())
        .arg(DUALFS)
        .args(args)
        .output()
        .expect("cannot run dualfs")
}

/// Whether a DualFS volume is mounted on `mnt`.
pub fn is_mounted(mnt: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines().any(|l| l.split(' ').nth(4) == Some(mnt.to_str().unwrap()) && l.contains("fuse.dualfs"))
}

/// A volume of two sparse image files, and a mount point, in a temporary folder.
pub struct TestVolume {
    pub dir: tempfile::TempDir,
    pub meta: PathBuf,
    pub data: PathBuf,
    pub mnt: PathBuf,
    mounted: bool,
    /// Where the latest mount's lines begin in its log.
    log_from: usize,
}

impl TestVolume {
    /// Makes a volume of `size` (e.g. "512M") with `dualfs mkfs`, or None
    /// when mount tests cannot run here.
    pub fn create(size: &str) -> Option<TestVolume> {
        if !can_mount() {
            return None;
        }
        let dir = tempfile::Builder::new().prefix("dualfs-test").tempdir().expect("tempdir");
        // Tests run programs as other users, who must reach the mount point.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod tempdir");
        let meta = dir.path().join("meta.img");
        let data = dir.path().join("data.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mkdir mnt");
        let out =
            dualfs(&["mkfs", "--size", size, meta.to_str().expect("utf-8 path"), data.to_str().expect("utf-8 path")]);
        assert!(out.status.success(), "mkfs failed: {}", String::from_utf8_lossy(&out.stderr));
        Some(TestVolume { dir, meta, data, mnt, mounted: false, log_from: 0 })
    }

    /// `mnt/rel`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// The mount point as a string for scripts.
    pub fn m(&self) -> &str {
        self.mnt.to_str().expect("utf-8 path")
    }

    /// Mounts in the background with `options` (may be empty) over the
    /// test transport ([`extra_mount_options`]), and checks that the log
    /// names it.
    pub fn mount_with(&mut self, options: &str) {
        // Both are read before the mount command returns.
        let param = uring_for_the_mount();
        self.mount_as_given(&format!("{},{options}", extra_mount_options()));
        drop(param);
        let want = if test_transport() == "uring" { "serving over io_uring" } else { "serving over /dev/fuse" };
        self.expect_transport(want);
    }

    /// Mounts in the background with exactly `options` (and `log=`),
    /// whatever enable_uring is.
    pub fn mount_as_given(&mut self, options: &str) {
        let out = self.mount_output(options);
        assert!(out.status.success(), "mount failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Runs `dualfs mount` as [`TestVolume::mount_as_given`] does and
    /// returns what it printed, mounted or not.
    pub fn mount_output(&mut self, options: &str) -> Output {
        let log = self.dir.path().join("dualfs.log");
        self.log_from = std::fs::read(&log).map_or(0, |t| t.len());
        let mut opts = format!("log={}", log.display());
        if !options.is_empty() {
            opts = format!("{opts},{options}");
        }
        let out = dualfs(&[
            "mount",
            "-o",
            &opts,
            self.meta.to_str().expect("utf-8"),
            self.data.to_str().expect("utf-8"),
            self.m(),
        ]);
        self.mounted = out.status.success();
        out
    }

    /// Waits for the log of the latest [`TestVolume::mount_with`] to name
    /// its transport (the background process logs it just after it says
    /// it is ready) and checks it.
    pub fn expect_transport(&self, want: &str) {
        let line = self.transport();
        assert!(line.contains(want), "expected {want:?}, the mount says: {line}");
    }

    /// The log line of the latest mount that names its transport.
    pub fn transport(&self) -> String {
        let log = self.dir.path().join("dualfs.log");
        let start = Instant::now();
        loop {
            let all = std::fs::read(&log).unwrap_or_default();
            let text = String::from_utf8_lossy(all.get(self.log_from..).unwrap_or_default());
            if let Some(line) = text.lines().find(|l| l.contains("serving over")) {
                return line.to_string();
            }
            assert!(start.elapsed() < Duration::from_secs(10), "the log never named a transport:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts `dualfs mount --foreground` with `options` over the test
    /// transport (its log in `foreground.log` of the test's folder) and
    /// waits until it serves; the caller owns the process.
    pub fn spawn_mount(&self, options: &[&str]) -> std::process::Child {
        let log = self.dir.path().join("foreground.log");
        let param = uring_for_the_mount();
        let child = Command::new(DUALFS)
            .args(["mount", "--foreground"])
            .args(options)
            .args(["-o", &extra_mount_options()])
            .args([&self.meta, &self.data, &self.mnt])
            .stdout(std::process::Stdio::null())
            .stderr(File::create(&log).expect("foreground.log"))
            .spawn()
            .unwrap();
        let start = Instant::now();
        while !std::fs::read_to_string(&log).unwrap_or_default().contains("serving over") {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "never served:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(param);
        assert!(is_mounted(&self.mnt));
        child
    }

    pub fn mount(&mut self) {
        self.mount_with("");
    }

    /// Unmounts, waits for the clean close, and checks the volume with fsck.
    pub fn umount(&mut self) {
        let out = dualfs(&["umount", self.m()]);
        assert!(out.status.success(), "umount failed: {}", String::from_utf8_lossy(&out.stderr));
        self.mounted = false;
        self.fsck();
    }

    /// `dualfs fsck` of the unmounted volume must find it consistent.
    pub fn fsck(&self) {
        let out = dualfs(&["fsck", self.meta.to_str().expect("utf-8"), self.data.to_str().expect("utf-8")]);
        assert!(
            out.status.success(),
            "fsck found problems ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn remount(&mut self) {
        self.umount();
        self.mount();
    }

    /// The daemon's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dualfs.log")).unwrap_or_default()
    }

    /// `dualfs inspect --json` of the unmounted volume.
    pub fn inspect(&self, what: &[&str]) -> serde_json::Value {
        let mut args =
            vec!["inspect", "--json", self.meta.to_str().expect("utf-8"), self.data.to_str().expect("utf-8")];
        args.extend_from_slice(what);
        let out = dualfs(&args);
        assert!(out.status.success(), "inspect failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("inspect prints JSON")
    }

    /// statvfs of the mount: (used blocks, used inodes).
    pub fn usage(&self) -> (u64, u64) {
        let s = nix::sys::statvfs::statvfs(&self.mnt).expect("statvfs");
        (s.blocks() - s.blocks_free(), s.files() - s.files_free())
    }
}

impl Drop for TestVolume {
    fn drop(&mut self) {
        if self.mounted {
            // A failed test: detach whatever is left and let the daemon go.
            let _ = nix::mount::umount2(&self.mnt, nix::mount::MntFlags::MNT_DETACH);
            let _ = wait_unlocked(&self.meta, Duration::from_secs(30));
            if std::thread::panicking() {
                eprintln!("--- dualfs log\n{}", self.log());
            }
        }
    }
}

/// Waits until no process holds the lock on `path`.
pub fn wait_unlocked(path: &Path, limit: Duration) -> bool {
    let Ok(f) = File::open(path) else {
        return true;
    };
    let start = Instant::now();
    while start.elapsed() < limit {
        if f.try_lock_shared().is_ok() {
            let _ = f.unlock();
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A deterministic generator (xorshift64*), so every run builds the same tree.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Inode numbers of `p` and what `stat` reports, for comparisons.
pub fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).expect("stat").ino()
}

/// `setxattr(2)`, which neither std nor nix wraps.
pub fn set_xattr(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let n = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
    // SAFETY: both strings are NUL-terminated and outlive the call; the
    // value pointer and length describe a live slice.
    #[allow(unsafe_code)]
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}
