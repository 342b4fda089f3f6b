//! A mounted connection: mount(2) with a /dev/fuse descriptor and the
//! options the CLI passes, the INIT negotiation, and unmount. The serving
//! loops ([`crate::devfuse`], [`crate::ring`]) run on top of it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::mount::{MntFlags, MsFlags};

use crate::abi::{self, InitOut, Negotiated, ReplyBuf, Request, init_flags};
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
}

impl MountArgs {
    /// Sorts `options` (each one option, as fuser's `MountOption` names
    /// them: `ro`, `nodev`, `fsname=X`, `subtype=X`, `allow_other`, ...)
    /// into flags, source, type and the fuse module's options. As libfuse,
    /// a mount is `nosuid,nodev` unless `suid` or `dev` is given.
    ///
    /// # Errors
    ///
    /// [`Error::Option`] for an option this mount cannot honour
    /// (`auto_unmount` and `allow_root` need fusermount3).
    pub fn parse<S: AsRef<str>>(options: &[S]) -> Result<Self, Error> {
        let mut a = Self {
            source: "fuse".into(),
            fstype: "fuse".into(),
            flags: MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            data: Vec::new(),
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
                "auto_unmount" | "allow_root" => {
                    return Err(Error::Option(opt.into(), "needs fusermount3, which this mount does not use"));
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
        Ok(a)
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
    destroyed: AtomicBool,
}

impl Session {
    /// Opens /dev/fuse and mounts it on `mountpoint` with `options` (see
    /// [`MountArgs::parse`]; needs root). Nothing is served until
    /// [`Session::init`].
    ///
    /// # Errors
    ///
    /// [`Error`] when an option is refused, /dev/fuse cannot be opened or
    /// the mount fails.
    pub fn mount<S: AsRef<str>>(mountpoint: &Path, options: &[S]) -> Result<Self, Error> {
        let args = MountArgs::parse(options)?;
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
        Ok(Self {
            dev: Arc::new(dev),
            mountpoint: mountpoint.to_path_buf(),
            negotiated: Negotiated::default(),
            init_out: InitOut::default(),
            uring: false,
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
    /// while the mount is in use. The serving loops then see the end.
    ///
    /// # Errors
    ///
    /// [`Error::Unmount`] (EINVAL: not mounted any more).
    pub fn unmount(&self, lazy: bool) -> Result<(), Error> {
        let flags = if lazy { MntFlags::MNT_DETACH } else { MntFlags::empty() };
        nix::mount::umount2(&self.mountpoint, flags).map_err(|e| Error::Unmount(self.mountpoint.clone(), e))
    }

    /// Calls the handler's `destroy` unless it was called already.
    pub(crate) fn destroy_once<H: Handler>(&self, handler: &H) {
        if !self.destroyed.swap(true, Ordering::AcqRel) {
            handler.destroy();
        }
    }
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
    fn options_the_mount_cannot_honour_or_sets_itself_are_refused() {
        for bad in ["auto_unmount", "allow_root", "fd=3", "rootmode=40000", "user_id=0", "group_id=0"] {
            assert!(matches!(MountArgs::parse(&[bad]), Err(Error::Option(..))), "{bad}");
        }
    }
}
