//! Refusing a target that lives on the volume a command acts on: a
//! migration's new device, a stream or its spool file, a dump, a mount's
//! log or trace file. A serving process that writes through its own mount
//! waits for itself (its writers then sit in D state, and kill -9 leaves a
//! zombie until the FUSE connection is aborted); one that writes into its
//! own devices corrupts them. However the target is reached: a path on the
//! mount (through a symlink, a relative path or a bind mount of it: the
//! same st_dev), one of the volume's devices or image files, or a block
//! device whose backing file is one of those (a loop device, a partition
//! of one, a device-mapper device over one: /sys/dev/block/MAJ:MIN).
//!
//! Also: a mount point whose serving process is gone answers ENOTCONN to
//! everything; commands name it a dead mount instead of reading it as a
//! pair of devices.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// Whether `path` is (or lies under) a FUSE mount whose serving process is gone.
pub fn is_dead_mount(path: &Path) -> bool {
    // statfs always reaches the server; a stat may be answered from the
    // attributes the kernel still holds.
    let dead = |e: std::io::Error| e.raw_os_error() == Some(libc::ENOTCONN);
    match std::fs::metadata(path) {
        Err(e) => dead(e),
        Ok(_) => matches!(rustix::fs::statfs(path), Err(e) if e == rustix::io::Errno::NOTCONN),
    }
}

/// Refuses a dead mount, naming it and saying what to do.
///
/// # Errors
/// `path` is a dead mount.
pub fn refuse_dead_mount(path: &Path) -> Result<()> {
    if is_dead_mount(path) {
        bail!(
            "{} is a dead mount: the process that served it is gone (the transport endpoint is not connected). \
             Unmount it (`dualfs umount {}`, or `umount -l`), then mount the volume again",
            path.display(),
            path.display()
        );
    }
    Ok(())
}

/// What a file is, whatever path names it: a block device by its number,
/// anything else by device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Identity {
    Block(u64),
    File(u64, u64),
}

fn identity(m: &std::fs::Metadata) -> Identity {
    if m.file_type().is_block_device() { Identity::Block(m.rdev()) } else { Identity::File(m.dev(), m.ino()) }
}

/// The files a block device is backed by, down through partitions,
/// device-mapper and md devices to loop devices' backing files (bounded:
/// a stack deeper than 16 is not followed).
fn backing_files(rdev: u64) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![(PathBuf::from(format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev))), 0)];
    while let Some((dir, depth)) = todo.pop() {
        let Ok(dir) = std::fs::canonicalize(&dir) else { continue };
        if depth > 16 {
            continue;
        }
        if let Ok(f) = std::fs::read_to_string(dir.join("loop/backing_file")) {
            let f = f.trim_end_matches('\n').trim_end_matches(" (deleted)");
            if !f.is_empty() {
                out.push(PathBuf::from(f));
            }
        }
        if dir.join("partition").exists()
            && let Some(parent) = dir.parent()
        {
            todo.push((parent.to_path_buf(), depth + 1));
        }
        if let Ok(slaves) = std::fs::read_dir(dir.join("slaves")) {
            todo.extend(slaves.filter_map(|e| e.ok()).map(|e| (e.path(), depth + 1)));
        }
    }
    out
}

/// The block devices under `rdev` too (a partition's disk, the loop
/// devices under a device-mapper device): their numbers.
fn block_stack(rdev: u64) -> Vec<u64> {
    let mut out = vec![rdev];
    let mut todo = vec![(PathBuf::from(format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev))), 0)];
    while let Some((dir, depth)) = todo.pop() {
        let Ok(dir) = std::fs::canonicalize(&dir) else { continue };
        if depth > 16 {
            continue;
        }
        let mut next = Vec::new();
        if dir.join("partition").exists()
            && let Some(parent) = dir.parent()
        {
            next.push(parent.to_path_buf());
        }
        if let Ok(slaves) = std::fs::read_dir(dir.join("slaves")) {
            next.extend(slaves.filter_map(|e| e.ok()).map(|e| e.path()));
        }
        for n in next {
            if let Ok(t) = std::fs::read_to_string(n.join("dev"))
                && let Some((maj, min)) = t.trim().split_once(':')
                && let (Ok(maj), Ok(min)) = (maj.parse::<u32>(), min.parse::<u32>())
            {
                out.push(libc::makedev(maj, min));
            }
            todo.push((n, depth + 1));
        }
    }
    out
}

/// The kernel's `struct loop_info64` (linux/loop.h).
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// The device and inode numbers of the file behind loop device `path`
/// (LOOP_GET_STATUS64), if it is one with a file bound.
#[allow(unsafe_code)]
fn loop_backing(path: &Path) -> Option<(u64, u64)> {
    use std::os::fd::AsRawFd;
    const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;
    let f = std::fs::File::open(path).ok()?;
    let mut info = LoopInfo64 {
        lo_device: 0,
        lo_inode: 0,
        lo_rdevice: 0,
        lo_offset: 0,
        lo_sizelimit: 0,
        lo_number: 0,
        lo_encrypt_type: 0,
        lo_encrypt_key_size: 0,
        lo_flags: 0,
        lo_file_name: [0; 64],
        lo_crypt_name: [0; 64],
        lo_encrypt_key: [0; 32],
        lo_init: [0; 2],
    };
    // SAFETY: LOOP_GET_STATUS64 writes one `struct loop_info64`, which
    // `info` is (same layout, repr(C)), alive for the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), LOOP_GET_STATUS64, &mut info as *mut LoopInfo64) };
    (r == 0).then_some((info.lo_device, info.lo_inode))
}

/// The nearest existing path at or above `p` (a file to be created is
/// written into its directory), made absolute.
fn nearest_existing(p: &Path) -> io::Result<(PathBuf, std::fs::Metadata)> {
    let abs = std::path::absolute(p)?;
    let mut at = abs.as_path();
    loop {
        match std::fs::metadata(at) {
            Ok(m) => return Ok((at.to_path_buf(), m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => match at.parent() {
                Some(up) => at = up,
                None => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
}

/// The device number of the mount at `root`, from the mount table (no
/// request to the serving process, which may be the caller).
fn mount_dev(root: &Path) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let line = text
        .lines()
        .rev()
        .find(|l| l.split(' ').nth(4).is_some_and(|m| Path::new(&m.replace("\\040", " ")) == root))?;
    let (maj, min) = line.split(' ').nth(2)?.split_once(':')?;
    Some(libc::makedev(maj.parse().ok()?, min.parse().ok()?))
}

/// A volume, as a target must not be: its mount, and its devices.
#[derive(Debug, Default)]
pub struct Itself {
    /// Mount point and device number of its mount, when mounted.
    mount: Option<(PathBuf, u64)>,
    /// Its devices (and what backs them), by name.
    devices: Vec<(String, Identity)>,
}

impl Itself {
    /// The volume mounted at `root` (canonical), with the devices its
    /// mount table entry names.
    pub fn mounted(root: &Path) -> Itself {
        let dev = mount_dev(root).or_else(|| std::fs::metadata(root).ok().map(|m| m.dev()));
        let mut me = Itself { mount: dev.map(|d| (root.to_path_buf(), d)), devices: Vec::new() };
        if let Some((m, d)) = crate::mountinfo::devices_of(root) {
            me.add_device(&m, "meta-data device");
            me.add_device(&d, "data device");
        }
        me
    }

    /// The volume on `meta` and `data`, and its mount if it is mounted.
    pub fn devices(meta: &Path, data: &Path) -> Itself {
        let mut me = Itself::default();
        me.add_device(meta, "meta-data device");
        me.add_device(data, "data device");
        if let Some(root) = me.find_mount() {
            me.mount = mount_dev(&root).map(|d| (root, d));
        }
        me
    }

    fn add_device(&mut self, p: &Path, role: &str) {
        let Ok(m) = std::fs::metadata(p) else { return };
        let id = identity(&m);
        self.devices.push((format!("the volume's {role} {}", p.display()), id));
        if let Identity::Block(rdev) = id {
            for r in block_stack(rdev).into_iter().skip(1) {
                self.devices.push((format!("a device under the volume's {role} {}", p.display()), Identity::Block(r)));
            }
            for f in backing_files(rdev) {
                if let Ok(fm) = std::fs::metadata(&f) {
                    let what = format!("{}, the file behind the volume's {role} {}", f.display(), p.display());
                    self.devices.push((what, identity(&fm)));
                }
            }
        }
    }

    /// A DualFS mount whose source names these devices.
    fn find_mount(&self) -> Option<PathBuf> {
        let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        crate::mountinfo::parse_mountinfo(&text).into_iter().rev().find_map(|e| {
            let (m, d) = e.source.split_once('#')?;
            let d = d.split('@').next()?;
            let ids: Vec<Identity> =
                [m, d].iter().filter_map(|p| std::fs::metadata(p).ok()).map(|x| identity(&x)).collect();
            let ours = ids.len() == 2 && ids.iter().all(|i| self.devices.iter().any(|(_, x)| x == i));
            (e.fstype == "fuse.dualfs" && ours).then_some(e.mountpoint)
        })
    }

    /// Refuses `target` (`what` names it: "the new meta-data device") if
    /// writing it would write through this volume's own mount or into one
    /// of its devices.
    ///
    /// # Errors
    /// It would; or the target lies under a dead mount.
    pub fn refuse(&self, target: &Path, what: &str) -> Result<()> {
        // A path under the mount point is refused before anything is
        // asked of it (the caller may be the serving process itself).
        if let Some((root, _)) = &self.mount
            && std::path::absolute(target).is_ok_and(|t| t.starts_with(root))
        {
            bail!(
                "{what} {} lies on the volume mounted on {}, the one it is for: the process serving it would \
                 write through its own mount. Put it outside {}",
                target.display(),
                root.display(),
                root.display()
            );
        }
        let (at, m) = match nearest_existing(target) {
            Ok(x) => x,
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                bail!("{what} {} lies under a dead mount (its serving process is gone)", target.display())
            }
            Err(_) => return Ok(()),
        };
        let on_mount = |dev: u64| self.mount.as_ref().filter(|(_, d)| *d == dev).map(|(root, _)| root.clone());
        let why = |root: &Path, how: &str| {
            format!(
                "{what} {} {how} on the volume mounted on {}, the one it is for: the process serving it would \
                 write through its own mount. Put it outside {}",
                target.display(),
                root.display(),
                root.display()
            )
        };
        if let Some(root) = on_mount(m.dev()) {
            bail!("{}", why(&root, "lies"));
        }
        if at != std::path::absolute(target).unwrap_or_default() {
            return Ok(());
        }
        let mut ids = vec![(None, identity(&m))];
        if let Identity::Block(rdev) = identity(&m) {
            // A loop device says what backs it without a look at the file
            // (which, on this very mount, would be a request to ourselves).
            if let Some((dev, ino)) = loop_backing(target) {
                if let Some(root) = on_mount(dev) {
                    bail!("{}", why(&root, "is a loop device whose backing file lies"));
                }
                ids.push((None, Identity::File(dev, ino)));
            }
            for f in backing_files(rdev) {
                match std::fs::metadata(&f) {
                    Ok(fm) => {
                        if let Some(root) = on_mount(fm.dev()) {
                            bail!("{}", why(&root, &format!("is backed by {}, which lies", f.display())));
                        }
                        ids.push((Some(f), identity(&fm)));
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                        bail!("{what} {} is backed by {}, under a dead mount", target.display(), f.display())
                    }
                    Err(_) => {}
                }
            }
            ids.extend(block_stack(rdev).into_iter().skip(1).map(|r| (None, Identity::Block(r))));
        }
        for (via, id) in ids {
            if let Some((name, _)) = self.devices.iter().find(|(_, x)| *x == id) {
                let via = via.map(|f| format!(" (through {})", f.display())).unwrap_or_default();
                bail!("{what} {} is {name}{via}: writing it would destroy the volume", target.display());
            }
        }
        Ok(())
    }
}

/// Refuses a file the serving process writes (its log, its trace) that is
/// one of the volume's devices, or under the mount point (hidden by the
/// mount, or reached through it).
///
/// # Errors
/// It is.
pub fn refuse_own_file(p: &Path, what: &str, meta: &Path, data: &Path, mountpoint: &Path) -> Result<()> {
    Itself::devices(meta, data).refuse(p, what)?;
    let canonical = |x: &Path| {
        let mut at = std::path::absolute(x).unwrap_or_else(|_| x.to_path_buf());
        let mut rest = Vec::new();
        while std::fs::metadata(&at).is_err() {
            match (at.file_name().map(ToOwned::to_owned), at.parent().map(Path::to_path_buf)) {
                (Some(name), Some(up)) => {
                    rest.push(name);
                    at = up;
                }
                _ => break,
            }
        }
        let mut c = std::fs::canonicalize(&at).unwrap_or(at);
        c.extend(rest.iter().rev());
        c
    };
    let mnt = canonical(mountpoint);
    if canonical(p).starts_with(&mnt) {
        bail!(
            "{what} {} lies under the mount point {}: the volume would hide it, or be written through to log \
             itself. Put it outside {}",
            p.display(),
            mnt.display(),
            mnt.display()
        );
    }
    Ok(())
}
