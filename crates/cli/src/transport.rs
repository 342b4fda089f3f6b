//! The mount's FUSE session: the adapter served by our own transports
//! (crate `dualfs-wire`), per-CPU io_uring queues where the kernel allows
//! them (Linux 6.14+, the fuse module's `enable_uring` set, every queue
//! registered), else /dev/fuse read by `threads=N` threads; the log says
//! which, and why. `transport=uring` or `transport=devfuse` insists on one.
//! Root mounts with mount(2), anyone else through fusermount3.

use std::io;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use dualfs_fuse::DualFs;
use dualfs_wire::{Server, Transport, Transports};

use crate::options::{Access, MountConfig, Transport as Asked};

/// The options of the kernel's mount, as text: the adapter's own, the
/// source, the user's flags and who may use the mount.
pub fn options(fsname: &str, cfg: &MountConfig) -> Vec<String> {
    let mut v: Vec<String> = DualFs::required_mount_options().iter().map(|o| (*o).to_string()).collect();
    v.push(format!("fsname={fsname}"));
    v.extend(cfg.fuse.iter().map(|o| o.text().to_string()));
    match cfg.acl {
        Access::All => v.push("allow_other".into()),
        Access::RootAndOwner => v.push("allow_root".into()),
        Access::Owner => {}
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

/// A mounted volume and the threads that serve it.
pub struct Mounted {
    server: Server<DualFs>,
}

impl Mounted {
    /// Mounts `fs` on `mountpoint` and starts serving it.
    ///
    /// # Errors
    /// The mount or the INIT negotiation fails, or the transport insisted
    /// on is not to be had.
    pub fn start(fs: DualFs, mountpoint: &Path, options: &[String], cfg: &MountConfig) -> Result<Mounted> {
        let transports =
            Transports { uring: cfg.transport != Asked::DevFuse, dev_threads: cfg.threads, ..Transports::default() };
        let server = Server::start(mountpoint, options, Arc::new(fs), transports)
            .map_err(|e| anyhow!("cannot mount on {}: {e}", mountpoint.display()))?;
        if let (Asked::Uring, Transport::DevFuse { why }) = (cfg.transport, &server.transport) {
            let why = why.clone();
            server.stop().context("the refused mount would not unmount")?;
            bail!("transport=uring: the kernel gave no io_uring queues: {why}");
        }
        Ok(Mounted { server })
    }

    /// Which transport serves, and why (for the log).
    pub fn transport(&self) -> String {
        describe(&self.server.transport)
    }

    /// The session's notifier.
    pub fn notifier(&self) -> dualfs_wire::Notifier {
        self.server.notifier()
    }

    /// Unmounts, lazily or not (EBUSY while in use), for the signal thread.
    pub fn unmounter(&self) -> impl Fn(bool) -> io::Result<()> + Send + 'static {
        let session = self.server.session().clone();
        move |lazy| {
            session.unmount(lazy).map_err(|e| match e {
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
        if report.ring_requests > 0 {
            // Which CPU served how many: the kernel queues a request on the
            // ring of its sender's CPU, and the kernel's write-back sends
            // from its flusher's (DESIGN.md, "A stream over io_uring").
            log::info!("served {} requests on io_uring queues; by CPU: {:?}", report.ring_requests, report.by_cpu);
        }
        Ok(())
    }
}
