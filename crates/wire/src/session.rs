//! A mounted connection: mount(2) with a /dev/fuse descriptor and the
//! options the CLI passes (as root), or the same through fusermount3 (as
//! any other user, or for `auto_unmount`), the INIT negotiation, and
//! unmount. The serving loops ([`crate::devfuse`], [`crate::ring`]) run on
//! top of it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::mount::{MntFlags, MsFlags};

use crate::abi::{self, InitOut, Negotiated, ReplyBuf, Request, init_flags};
use crate::fusermount;
use crate::handler::Handler;

/// Errors of the session and the transports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open /dev/fuse: {0}")]
    Open(io::Error),
    #[error("mount option {0}: {1}")]
    Option(String, &'static str),
    #[error("cannot mount on {0}: {1}")]
    Mount(PathBuf, nix::Error),
    #[error("cannot unmount {0}: {1}")]
    Unmount(PathBuf, nix::Error),
    #[error("fusermount3: {0}")]
    Fusermount(String),
    #[error("FUSE INIT failed: {0}")]
    Init(String),
    #[error("I/O on /dev/fuse: {0}")]
    Io(#[from] io::Error),
    #[error("io_uring: {0}")]
    Ring(String),
}

/// Whether the fuse module lets a server use io_uring (`enable_uring`).
pub fn uring_enabled() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").is_ok_and(|s| s.trim() == "Y")
}

/// What mount(2) gets from a list of options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountArgs {
    /// The source shown in /proc/mounts (`fsname=`).
    pub source: String,
    /// `fuse` or `fuse.SUBTYPE`.
    pub fstype: String,
    pub flags: MsFlags,
    /// Options for the fuse module (allow_other, default_permissions,
    /// max_read=, and anything not known here), without fd=, rootmode=,
    /// user_id= and group_id=, which the mount adds.
    pub data: Vec<String>,
    /// `auto_unmount`: fusermount3 unmounts when the server ends, however
    /// it ends.
    pub auto_unmount: bool,
    /// `allow_root`: the kernel lets every user in (allow_other) and the
    /// server answers only the mount's owner and root.
    pub allow_root: bool,
}

impl MountArgs {
    /// Sorts `options` (each a comma-separated list of options as
    /// mount(8) names them: `ro`, `nodev`, `fsname=X`, `subtype=X`,
    /// `allow_other`, ...) into flags, source, type and the fuse module's
    /// options. As libfuse, a mount is `nosuid,nodev` unless `suid` or
    /// `dev` is given.
    ///
    /// # Errors
    ///
    /// [`Error::Option`] for an option the mount sets itself (`fd=`...),
    /// or `allow_root` beside `allow_other`.
    pub fn parse<S: AsRef<str>>(options: &[S]) -> Result<Self, Error> {
        let mut a = Self {
            source: "fuse".into(),
            fstype: "fuse".into(),
            flags: MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            data: Vec::new(),
            auto_unmount: false,
            allow_root: false,
        };
        let atime = MsFlags::MS_NOATIME | MsFlags::MS_RELATIME | MsFlags::MS_STRICTATIME;
        for opt in options.iter().flat_map(|o| o.as_ref().split(',')) {
            let opt = opt.trim();
            let (set, clear) = match opt {
                "" | "defaults" => continue,
                "ro" => (MsFlags::MS_RDONLY, MsFlags::empty()),
                "rw" => (MsFlags::empty(), MsFlags::MS_RDONLY),
                "nodev" => (MsFlags::MS_NODEV, MsFlags::empty()),
                "dev" => (MsFlags::empty(), MsFlags::MS_NODEV),
                "nosuid" => (MsFlags::MS_NOSUID, MsFlags::empty()),
                "suid" => (MsFlags::empty(), MsFlags::MS_NOSUID),
                "noexec" => (MsFlags::MS_NOEXEC, MsFlags::empty()),
                "exec" => (MsFlags::empty(), MsFlags::MS_NOEXEC),
                "sync" => (MsFlags::MS_SYNCHRONOUS, MsFlags::empty()),
                "async" => (MsFlags::empty(), MsFlags::MS_SYNCHRONOUS),
                "dirsync" => (MsFlags::MS_DIRSYNC, MsFlags::empty()),
                "noatime" => (MsFlags::MS_NOATIME, atime),
                "relatime" => (MsFlags::MS_RELATIME, atime),
                "strictatime" => (MsFlags::MS_STRICTATIME, atime),
                "atime" | "norelatime" => (MsFlags::empty(), atime),
                "nodiratime" => (MsFlags::MS_NODIRATIME, MsFlags::empty()),
                "diratime" => (MsFlags::empty(), MsFlags::MS_NODIRATIME),
                "lazytime" => (MsFlags::MS_LAZYTIME, MsFlags::empty()),
                "nolazytime" => (MsFlags::empty(), MsFlags::MS_LAZYTIME),
                "auto_unmount" => {
                    a.auto_unmount = true;
                    continue;
                }
                "allow_root" => {
                    a.allow_root = true;
                    continue;
                }
                _ => {
                    if let Some(v) = opt.strip_prefix("fsname=") {
                        a.source = v.into();
                    } else if let Some(v) = opt.strip_prefix("subtype=") {
                        a.fstype = format!("fuse.{v}");
                    } else if ["fd=", "rootmode=", "user_id=", "group_id="].iter().any(|p| opt.starts_with(p)) {
                        return Err(Error::Option(opt.into(), "is set by the mount itself"));
                    } else {
                        // allow_other, default_permissions, max_read=,
                        // blksize= and the rest: the fuse module's to judge.
                        a.data.push(opt.into());
                    }
                    continue;
                }
            };
            a.flags = (a.flags - clear) | set;
        }
        let allow_other = a.data.iter().any(|d| d == "allow_other");
        if a.allow_root {
            if allow_other {
                return Err(Error::Option("allow_root".into(), "contradicts allow_other"));
            }
            a.data.push("allow_other".into());
        }
        // fusermount3 looks at the mount as root before it unmounts it,
        // and the kernel turns root away from a mount only its owner may use.
        if a.auto_unmount && !allow_other && !a.allow_root {
            return Err(Error::Option("auto_unmount".into(), "needs allow_other or allow_root"));
        }
        Ok(a)
    }

    /// The options as fusermount3 takes them: the flags by name, the
    /// source and subtype, the fuse module's options and `auto_unmount`.
    /// Only set flags are named (a user asking for `suid` or `dev` hears
    /// fusermount3 refuse them); `allow_root` is already `allow_other`.
    #[must_use]
    pub fn helper_options(&self) -> String {
        let named = [
            (MsFlags::MS_RDONLY, "ro"),
            (MsFlags::MS_NOEXEC, "noexec"),
            (MsFlags::MS_SYNCHRONOUS, "sync"),
            (MsFlags::MS_DIRSYNC, "dirsync"),
            (MsFlags::MS_NOATIME, "noatime"),
            (MsFlags::MS_RELATIME, "relatime"),
            (MsFlags::MS_STRICTATIME, "strictatime"),
            (MsFlags::MS_NODIRATIME, "nodiratime"),
            (MsFlags::MS_LAZYTIME, "lazytime"),
        ];
        let mut v: Vec<String> =
            named.iter().filter(|(f, _)| self.flags.contains(*f)).map(|(_, n)| (*n).into()).collect();
        v.push(if self.flags.contains(MsFlags::MS_NOSUID) { "nosuid" } else { "suid" }.into());
        v.push(if self.flags.contains(MsFlags::MS_NODEV) { "nodev" } else { "dev" }.into());
        v.push(format!("fsname={}", self.source));
        if let Some(sub) = self.fstype.strip_prefix("fuse.") {
            v.push(format!("subtype={sub}"));
        }
        v.extend(self.data.iter().cloned());
        if self.auto_unmount {
            v.push("auto_unmount".into());
        }
        v.join(",")
    }
}

/// A mounted connection.
#[derive(Debug)]
pub struct Session {
    dev: Arc<File>,
    mountpoint: PathBuf,
    /// What INIT settled; valid once [`Session::init`] returned.
    pub negotiated: Negotiated,
    /// The reply sent to INIT.
    pub init_out: InitOut,
    /// Whether INIT negotiated FUSE over io_uring.
    pub uring: bool,
    /// Under `allow_root`, the one user besides root whose requests are
    /// served (the mount's owner); the kernel lets everyone in.
    pub(crate) only: Option<u32>,
    /// fusermount3 waiting to unmount when this process ends
    /// (`auto_unmount`).
    _watcher: Option<fusermount::Watcher>,
    destroyed: AtomicBool,
}

impl Session {
    /// Mounts /dev/fuse on `mountpoint` with `options` (see
    /// [`MountArgs::parse`]): with mount(2) as root, through fusermount3
    /// as any other user, for `auto_unmount`, or where mount(2) is refused
    /// (root of a user namespace). Nothing is served until
    /// [`Session::init`].
    ///
    /// # Errors
    ///
    /// [`Error`] when an option is refused, /dev/fuse cannot be opened or
    /// the mount fails.
    pub fn mount<S: AsRef<str>>(mountpoint: &Path, options: &[S]) -> Result<Self, Error> {
        let args = MountArgs::parse(options)?;
        let direct = if nix::unistd::geteuid().is_root() && !args.auto_unmount {
            match mount_directly(mountpoint, &args) {
                Err(Error::Mount(_, nix::errno::Errno::EPERM)) => None,
                other => Some(other?),
            }
        } else {
            None
        };
        let (dev, watcher) = match direct {
            Some(dev) => (dev, None),
            None => fusermount::mount(mountpoint, &args.helper_options(), args.auto_unmount)?,
        };
        Ok(Self {
            dev: Arc::new(dev),
            mountpoint: mountpoint.to_path_buf(),
            negotiated: Negotiated::default(),
            init_out: InitOut::default(),
            uring: false,
            only: args.allow_root.then(|| nix::unistd::getuid().as_raw()),
            _watcher: watcher,
            destroyed: AtomicBool::new(false),
        })
    }

    /// Reads INIT and answers it with what `handler` wants of the offer,
    /// adding FUSE_OVER_IO_URING when `want_uring` and the kernel offers it
    /// (it does only while `enable_uring` is Y).
    ///
    /// # Errors
    ///
    /// [`Error::Init`] when the first request is not a well-formed INIT of
    /// protocol 7; [`Error::Io`] when /dev/fuse fails.
    pub fn init<H: Handler>(&mut self, handler: &H, want_uring: bool) -> Result<(), Error> {
        // The kernel refuses reads into less than FUSE_MIN_READ_BUFFER.
        let mut buf = vec![0u8; 8192];
        let n = loop {
            match (&*self.dev).read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        };
        let (h, req) =
            Request::decode_message(&buf[..n], &Negotiated::default()).map_err(|e| Error::Init(e.to_string()))?;
        let Request::Init(offer) = req else {
            return Err(Error::Init(format!("first request is opcode {}", h.opcode)));
        };
        if offer.major != abi::KERNEL_VERSION {
            return Err(Error::Init(format!("kernel speaks FUSE {}.{}", offer.major, offer.minor)));
        }
        let mut out = handler.init(&offer);
        out.minor = offer.minor.min(abi::KERNEL_MINOR_VERSION);
        out.max_readahead = out.max_readahead.min(offer.max_readahead);
        let mut want = out.flags & !init_flags::OVER_IO_URING;
        if want_uring {
            want |= init_flags::OVER_IO_URING;
        }
        if out.max_pages > 0 {
            want |= init_flags::MAX_PAGES;
        }
        // Flags past bit 31 travel in flags2, which the kernel reads only
        // with INIT_EXT.
        if want >> 32 != 0 {
            want |= init_flags::INIT_EXT;
        }
        out.flags = want & offer.flags;
        self.uring = out.flags & init_flags::OVER_IO_URING != 0;
        self.negotiated = Negotiated { minor: out.minor, flags: out.flags };
        self.init_out = out;
        let mut reply = [0u8; abi::OUT_HEADER_LEN + abi::INIT_OUT_LEN];
        let mut rb = ReplyBuf::new(&mut reply[abi::OUT_HEADER_LEN..]);
        out.encode(&mut rb);
        let len = abi::OUT_HEADER_LEN + rb.len();
        reply[..abi::OUT_HEADER_LEN].copy_from_slice(&abi::encode_out_header(len, 0, h.unique));
        (&*self.dev).write_all(&reply[..len])?;
        Ok(())
    }

    /// The /dev/fuse descriptor.
    pub fn dev(&self) -> &File {
        &self.dev
    }

    /// A shared handle on the descriptor (for notifications).
    pub fn dev_arc(&self) -> Arc<File> {
        Arc::clone(&self.dev)
    }

    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts; lazily (`MNT_DETACH`) so that a process still inside the
    /// mount does not keep the server alive, or not, which fails with EBUSY
    /// while the mount is in use. The serving loops then see the end. A
    /// user other than root unmounts through fusermount3.
    ///
    /// # Errors
    ///
    /// [`Error::Unmount`] (EINVAL: not mounted any more).
    pub fn unmount(&self, lazy: bool) -> Result<(), Error> {
        let flags = if lazy { MntFlags::MNT_DETACH } else { MntFlags::empty() };
        match nix::mount::umount2(&self.mountpoint, flags) {
            Ok(()) => Ok(()),
            Err(nix::errno::Errno::EPERM) => fusermount::unmount(&self.mountpoint, lazy),
            Err(e) => Err(Error::Unmount(self.mountpoint.clone(), e)),
        }
    }

    /// Whether a request is served: under `allow_root`, only the owner's
    /// and root's, and those the kernel sends on no one's behalf (write-back,
    /// read-ahead, release, forget), whose uid is whoever's.
    pub(crate) fn admits(&self, h: &abi::InHeader) -> bool {
        use abi::opcode::*;
        let Some(owner) = self.only else { return true };
        h.uid == owner
            || h.uid == 0
            || matches!(
                h.opcode,
                INIT | DESTROY
                    | READ
                    | WRITE
                    | READDIR
                    | READDIRPLUS
                    | FORGET
                    | BATCH_FORGET
                    | FSYNC
                    | FSYNCDIR
                    | RELEASE
                    | RELEASEDIR
                    | INTERRUPT
            )
    }

    /// Calls the handler's `destroy` unless it was called already.
    pub(crate) fn destroy_once<H: Handler>(&self, handler: &H) {
        if !self.destroyed.swap(true, Ordering::AcqRel) {
            handler.destroy();
        }
    }
}

/// mount(2) of a fresh /dev/fuse descriptor (root).
fn mount_directly(mountpoint: &Path, args: &MountArgs) -> Result<File, Error> {
    let dev = OpenOptions::new().read(true).write(true).open("/dev/fuse").map_err(Error::Open)?;
    let mut data = vec![
        format!("fd={}", dev.as_raw_fd()),
        "rootmode=40000".into(),
        format!("user_id={}", nix::unistd::geteuid()),
        format!("group_id={}", nix::unistd::getegid()),
    ];
    data.extend(args.data.iter().cloned());
    let data = data.join(",");
    nix::mount::mount(
        Some(args.source.as_str()),
        mountpoint,
        Some(args.fstype.as_str()),
        args.flags,
        Some(data.as_str()),
    )
    .map_err(|e| Error::Mount(mountpoint.to_path_buf(), e))?;
    Ok(dev)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn options_become_flags_source_type_and_module_options() {
        let a = MountArgs::parse(&[
            "fsname=/dev/a#/dev/b",
            "subtype=dualfs",
            "ro,noexec",
            "noatime",
            "allow_other",
            "default_permissions",
            "max_read=131072",
            "dirsync",
        ])
        .unwrap();
        assert_eq!((a.source.as_str(), a.fstype.as_str()), ("/dev/a#/dev/b", "fuse.dualfs"));
        let want = MsFlags::MS_RDONLY
            | MsFlags::MS_NOEXEC
            | MsFlags::MS_NOATIME
            | MsFlags::MS_DIRSYNC
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV;
        assert_eq!(a.flags, want);
        assert_eq!(a.data, ["allow_other", "default_permissions", "max_read=131072"]);
    }

    #[test]
    fn the_last_of_two_opposites_wins_and_dev_suid_lift_the_defaults() {
        let a = MountArgs::parse(&["ro", "rw", "dev", "suid", "sync", "async", "noatime", "relatime"]).unwrap();
        assert_eq!(a.flags, MsFlags::MS_RELATIME);
        let a = MountArgs::parse::<&str>(&[]).unwrap();
        assert_eq!(a.flags, MsFlags::MS_NOSUID | MsFlags::MS_NODEV);
        assert_eq!(a.fstype, "fuse");
    }

    #[test]
    fn options_the_mount_sets_itself_are_refused() {
        for bad in ["fd=3", "rootmode=40000", "user_id=0", "group_id=0", "allow_root,allow_other", "auto_unmount"] {
            assert!(matches!(MountArgs::parse(&[bad]), Err(Error::Option(..))), "{bad}");
        }
    }

    #[test]
    fn allow_root_lets_the_kernel_admit_everyone_and_auto_unmount_is_the_helpers() {
        let a = MountArgs::parse(&["allow_root,auto_unmount"]).unwrap();
        assert!(a.allow_root && a.auto_unmount);
        assert_eq!(a.data, ["allow_other"]);
    }

    #[test]
    fn fusermount3_gets_the_flags_by_name_and_the_rest_as_given() {
        let a =
            MountArgs::parse(&["fsname=/a#/b,subtype=dualfs,ro,noatime,default_permissions,allow_root,auto_unmount"])
                .unwrap();
        assert_eq!(
            a.helper_options(),
            "ro,noatime,nosuid,nodev,fsname=/a#/b,subtype=dualfs,default_permissions,allow_other,auto_unmount"
        );
        let a = MountArgs::parse(&["dev,suid"]).unwrap();
        assert_eq!(a.helper_options(), "suid,dev,fsname=fuse");
    }
}
