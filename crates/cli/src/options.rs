//! Mount options: `-o a,b=c` as the user, mount(8) or /etc/fstab give them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use fuser::{MountOption, SessionACL};

/// Requests served at once by default: enough that a commit writing a
/// partial segment on one thread leaves others to answer reads.
const DEFAULT_THREADS: usize = 4;

/// Everything `-o` decides.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// Mount read-only.
    pub read_only: bool,
    /// The engine's commit interval, if given.
    pub commit: Option<Duration>,
    /// Who may use the mount.
    pub acl: SessionACL,
    /// Options for fuser and the kernel.
    pub fuse: Vec<MountOption>,
    /// Log file of a background mount.
    pub log: Option<PathBuf>,
    /// fuser threads.
    pub threads: usize,
    /// Shown as the source in /proc/mounts, if the user chose one.
    pub fsname: Option<String>,
    /// The kernel's writeback cache.
    pub writeback: bool,
    /// Where to write a block-level trace of both devices, if anywhere.
    pub trace: Option<PathBuf>,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            read_only: false,
            commit: None,
            acl: SessionACL::Owner,
            fuse: Vec::new(),
            log: None,
            threads: DEFAULT_THREADS,
            fsname: None,
            writeback: true,
            trace: None,
        }
    }
}

/// Options mount(8) and fstab use that mean nothing to a mounted FUSE file
/// system (they steer mount(8) itself), and atime variants: the engine does
/// not update access times on read, so they would change nothing.
fn ignored(opt: &str) -> bool {
    matches!(
        opt,
        "" | "defaults"
            | "auto"
            | "noauto"
            | "user"
            | "users"
            | "nouser"
            | "owner"
            | "nofail"
            | "_netdev"
            | "relatime"
            | "norelatime"
            | "strictatime"
            | "nostrictatime"
            | "diratime"
            | "nodiratime"
            | "lazytime"
            | "nolazytime"
            | "default_permissions"
    ) || opt.starts_with("x-")
        || opt.starts_with("comment=")
        || opt.starts_with("subtype=")
        || opt.starts_with("data=")
}

fn flag(opt: &str) -> Option<MountOption> {
    Some(match opt {
        "rw" => MountOption::RW,
        "dev" => MountOption::Dev,
        "nodev" => MountOption::NoDev,
        "suid" => MountOption::Suid,
        "nosuid" => MountOption::NoSuid,
        "exec" => MountOption::Exec,
        "noexec" => MountOption::NoExec,
        "atime" => MountOption::Atime,
        "noatime" => MountOption::NoAtime,
        "sync" => MountOption::Sync,
        "async" => MountOption::Async,
        "dirsync" => MountOption::DirSync,
        "auto_unmount" => MountOption::AutoUnmount,
        _ => return None,
    })
}

/// Parses every `-o` argument (each a comma-separated list).
///
/// # Errors
/// A malformed `commit=`, `threads=` or `log=`.
pub fn parse(lists: &[String]) -> Result<MountConfig> {
    let mut c = MountConfig::default();
    for opt in lists.iter().flat_map(|l| l.split(',')) {
        let opt = opt.trim();
        if let Some(v) = opt.strip_prefix("commit=") {
            let secs: u64 = v.parse().map_err(|_| anyhow::anyhow!("commit={v}: give a number of seconds"))?;
            // As ext4: 0 means the default.
            c.commit = (secs > 0).then(|| Duration::from_secs(secs));
        } else if let Some(v) = opt.strip_prefix("threads=") {
            match v.parse::<usize>() {
                Ok(n) if (1..=64).contains(&n) => c.threads = n,
                _ => bail!("threads={v}: give a number from 1 to 64"),
            }
        } else if let Some(v) = opt.strip_prefix("log=") {
            if v.is_empty() {
                bail!("log= needs a file name");
            }
            c.log = Some(PathBuf::from(v));
        } else if let Some(v) = opt.strip_prefix("trace=") {
            if v.is_empty() {
                bail!("trace= needs a file name");
            }
            c.trace = Some(PathBuf::from(v));
        } else if let Some(v) = opt.strip_prefix("fsname=") {
            c.fsname = Some(v.to_string());
        } else if opt == "nowriteback" || opt == "writeback" {
            c.writeback = opt == "writeback";
        } else if opt == "ro" {
            c.read_only = true;
            c.fuse.push(MountOption::RO);
        } else if opt == "allow_other" {
            c.acl = SessionACL::All;
        } else if opt == "allow_root" {
            c.acl = SessionACL::RootAndOwner;
        } else if ignored(opt) {
            log::debug!("mount option {opt:?} ignored");
        } else if let Some(f) = flag(opt) {
            c.fuse.push(f);
        } else {
            // Kernel FUSE options (max_read=, blksize=, ...): the kernel
            // refuses the mount if it does not know one.
            c.fuse.push(MountOption::CUSTOM(opt.to_string()));
        }
    }
    if c.read_only {
        c.fuse.retain(|o| *o != MountOption::RW);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> MountConfig {
        parse(&[s.to_string()]).unwrap()
    }

    #[test]
    fn dualfs_options_are_understood() {
        let c = p("ro,allow_other,commit=30,threads=2,log=/tmp/x.log,nowriteback,trace=/tmp/t");
        assert!(!c.writeback);
        assert_eq!(c.trace, Some(PathBuf::from("/tmp/t")));
        assert!(c.read_only);
        assert_eq!(c.fuse, vec![MountOption::RO]);
        assert_eq!(c.acl, SessionACL::All);
        assert_eq!(c.commit, Some(Duration::from_secs(30)));
        assert_eq!(c.threads, 2);
        assert_eq!(c.log, Some(PathBuf::from("/tmp/x.log")));
    }

    #[test]
    fn fstab_noise_is_dropped_and_fuse_options_pass_through() {
        let c = p("defaults,noauto,_netdev,x-systemd.automount,dev,suid,max_read=65536");
        assert_eq!(c.fuse, vec![MountOption::Dev, MountOption::Suid, MountOption::CUSTOM("max_read=65536".into())]);
    }

    #[test]
    fn malformed_values_are_refused() {
        assert!(parse(&["commit=soon".into()]).is_err());
        assert!(parse(&["threads=0".into()]).is_err());
        assert!(parse(&["log=".into()]).is_err());
        assert!(parse(&["trace=".into()]).is_err());
    }

    #[test]
    fn read_only_wins_over_rw() {
        let c = p("rw,ro");
        assert_eq!(c.fuse, vec![MountOption::RO]);
    }
}
