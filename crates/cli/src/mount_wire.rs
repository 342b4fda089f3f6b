//! `dualfs mount -o uring`: the adapter served by our own transports
//! (crate `dualfs-wire`) instead of fuser: per-CPU io_uring queues where
//! the kernel allows them (Linux 6.14+, the fuse module's `enable_uring`
//! set), else /dev/fuse read by `threads=N` threads. The mount is ours too
//! (mount(2) with a /dev/fuse descriptor), so it needs root.

use std::io;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use dualfs_fuse::DualFs;
use dualfs_wire::{Server, Transport, Transports};
use fuser::{MountOption, SessionACL};

use crate::options::MountConfig;

/// A fuser mount option as the wire session's mount reads it.
fn option_text(o: &MountOption) -> String {
    match o {
        MountOption::FSName(n) => format!("fsname={n}"),
        MountOption::Subtype(s) => format!("subtype={s}"),
        MountOption::CUSTOM(c) => c.clone(),
        MountOption::AutoUnmount => "auto_unmount".into(),
        MountOption::DefaultPermissions => "default_permissions".into(),
        MountOption::Dev => "dev".into(),
        MountOption::NoDev => "nodev".into(),
        MountOption::Suid => "suid".into(),
        MountOption::NoSuid => "nosuid".into(),
        MountOption::RO => "ro".into(),
        MountOption::RW => "rw".into(),
        MountOption::Exec => "exec".into(),
        MountOption::NoExec => "noexec".into(),
        MountOption::Atime => "atime".into(),
        MountOption::NoAtime => "noatime".into(),
        MountOption::DirSync => "dirsync".into(),
        MountOption::Sync => "sync".into(),
        MountOption::Async => "async".into(),
    }
}

/// The options of the fuser mount, as text: the same mount either way.
pub fn options(mount_options: &[MountOption], acl: SessionACL) -> Vec<String> {
    let mut v: Vec<String> = mount_options.iter().map(option_text).collect();
    match acl {
        SessionACL::All => v.push("allow_other".into()),
        SessionACL::RootAndOwner => v.push("allow_root".into()),
        SessionACL::Owner => {}
    }
    v
}

/// What the log says of the transport a mount ended up with.
pub fn describe(t: &Transport) -> String {
    match t {
        Transport::Uring { queues } => format!("serving over io_uring, {queues} queues"),
        Transport::DevFuse { why } => format!("serving over /dev/fuse: {why}"),
    }
}

/// A mounted volume served by dualfs-wire.
pub struct WireMount {
    server: Server<DualFs>,
}

impl WireMount {
    /// Mounts `fs` on `mountpoint` and starts serving it.
    ///
    /// # Errors
    /// The mount or the INIT negotiation fails.
    pub fn start(fs: DualFs, mountpoint: &Path, options: &[String], cfg: &MountConfig) -> Result<WireMount> {
        let transports = Transports { uring: true, dev_threads: cfg.threads, ..Transports::default() };
        let server = Server::start(mountpoint, options, Arc::new(fs), transports)
            .map_err(|e| anyhow!("cannot mount on {}: {e}", mountpoint.display()))?;
        Ok(WireMount { server })
    }

    /// Which transport serves, and why (for the log).
    pub fn transport(&self) -> String {
        describe(&self.server.transport)
    }

    /// The session's notifier.
    pub fn notifier(&self) -> dualfs_wire::Notifier {
        self.server.notifier()
    }

    /// Unmounts (not lazily: EBUSY while in use), for the signal thread.
    pub fn unmounter(&self) -> impl FnMut() -> io::Result<()> + Send + 'static {
        let session = self.server.session().clone();
        move || {
            session.unmount(false).map_err(|e| match e {
                dualfs_wire::Error::Unmount(_, errno) => io::Error::from_raw_os_error(errno as i32),
                other => io::Error::other(other.to_string()),
            })
        }
    }

    /// Serves until the volume is unmounted (by anyone).
    ///
    /// # Errors
    /// A serving thread failed.
    pub fn run(self) -> Result<()> {
        let report = self.server.wait().context("the FUSE session ended with an error")?;
        // Which CPU served how many: the kernel queues a request on the ring
        // of its sender's CPU, and the kernel's write-back sends from its
        // flusher's.
        log::info!("served {} requests on io_uring queues; by CPU: {:?}", report.ring_requests, report.by_cpu);
        Ok(())
    }
}
