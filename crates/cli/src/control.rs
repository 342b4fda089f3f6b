//! The client side of a mounted volume's control attributes (see
//! `dualfs_fuse::control`): `dualfs clean MOUNTPOINT` and `dualfs stats`.

use std::io;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use rustix::fs::XattrFlags;
use serde_json::Value;

/// Largest answer read: the counters and a clean's state are a few hundred bytes.
const ANSWER_MAX: usize = 64 << 10;

/// A mounted DualFS volume, addressed by its mount point.
#[derive(Debug)]
pub struct Mounted {
    root: PathBuf,
}

fn explain(e: rustix::io::Errno, root: &Path, what: &str) -> anyhow::Error {
    match e {
        rustix::io::Errno::PERM => {
            anyhow!("{what} on {}: only root and the user who mounted the volume may", root.display())
        }
        rustix::io::Errno::NOTSUP | rustix::io::Errno::NODATA => {
            anyhow!("{what} on {}: the mount does not answer; is it served by an older dualfs?", root.display())
        }
        e => anyhow!("{what} on {}: {}", root.display(), io::Error::from(e)),
    }
}

impl Mounted {
    /// The DualFS volume mounted at `mountpoint`.
    ///
    /// # Errors
    /// Nothing, or not DualFS, is mounted there; or a dead mount (its
    /// serving process is gone).
    pub fn find(mountpoint: &Path) -> Result<Mounted> {
        crate::itself::refuse_dead_mount(mountpoint)?;
        let root =
            std::fs::canonicalize(mountpoint).with_context(|| format!("cannot resolve {}", mountpoint.display()))?;
        crate::mountinfo::find(&root)?;
        Ok(Mounted { root })
    }

    /// Where it is mounted.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Reads a JSON control attribute.
    ///
    /// # Errors
    /// Refused, or not JSON.
    pub fn get(&self, name: &str) -> Result<Value> {
        let mut buf = vec![0u8; ANSWER_MAX];
        let n = rustix::fs::getxattr(&self.root, name, &mut buf[..])
            .map_err(|e| explain(e, &self.root, &format!("reading {name}")))?;
        serde_json::from_slice(&buf[..n]).with_context(|| format!("{name} on {}: not JSON", self.root.display()))
    }

    /// Sets a control attribute to `value` (None: removes it).
    ///
    /// # Errors
    /// The request is refused; EBUSY says `busy`.
    pub fn set(&self, name: &str, value: Option<&str>, busy: &str) -> Result<()> {
        let r = match value {
            Some(v) => rustix::fs::setxattr(&self.root, name, v.as_bytes(), XattrFlags::empty()),
            None => rustix::fs::removexattr(&self.root, name),
        };
        match r {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::BUSY) => bail!("{busy} on {}", self.root.display()),
            Err(e) => Err(explain(e, &self.root, &format!("setting {name}"))),
        }
    }

    /// Starts a clean with the request text of `dualfs_fuse::control::CleanOrder`.
    ///
    /// # Errors
    /// A clean is running already, or the request is refused.
    pub fn start_clean(&self, order: &str) -> Result<()> {
        match rustix::fs::setxattr(&self.root, dualfs_fuse::control::CLEAN, order.as_bytes(), XattrFlags::empty()) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::BUSY) => bail!("a clean is already running on {}", self.root.display()),
            Err(e) => Err(explain(e, &self.root, "starting a clean")),
        }
    }
}
