//! Mount options: `-o a,b=c` as the user, mount(8) or /etc/fstab give them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use dualfs_engine::volume::{AtimeMode, MountOptions, Order};
use dualfs_fuse::AdapterOptions;

/// Requests served at once by default: enough that a commit writing a
/// partial segment on one thread leaves others to answer reads.
const DEFAULT_THREADS: usize = 4;

/// A flag or option for the kernel's mount, as mount(8) names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountOption {
    RO,
    RW,
    Dev,
    NoDev,
    Suid,
    NoSuid,
    Exec,
    NoExec,
    Sync,
    Async,
    DirSync,
    NoAtime,
    AutoUnmount,
    /// Passed on as written (`max_read=N`).
    Custom(String),
}

impl MountOption {
    /// The option as mount(8) and fusermount3 spell it.
    #[must_use]
    pub fn text(&self) -> &str {
        match self {
            MountOption::RO => "ro",
            MountOption::RW => "rw",
            MountOption::Dev => "dev",
            MountOption::NoDev => "nodev",
            MountOption::Suid => "suid",
            MountOption::NoSuid => "nosuid",
            MountOption::Exec => "exec",
            MountOption::NoExec => "noexec",
            MountOption::Sync => "sync",
            MountOption::Async => "async",
            MountOption::DirSync => "dirsync",
            MountOption::NoAtime => "noatime",
            MountOption::AutoUnmount => "auto_unmount",
            MountOption::Custom(c) => c,
        }
    }
}

/// Who may use the mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The user who mounted it (the kernel's rule without allow_other).
    Owner,
    /// Everyone (`allow_other`).
    All,
    /// The owner and root (`allow_root`).
    RootAndOwner,
}

/// What carries the FUSE requests (`transport=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// io_uring where the kernel allows it, /dev/fuse otherwise.
    Auto,
    /// io_uring, or no mount.
    Uring,
    /// /dev/fuse, even where io_uring is allowed.
    DevFuse,
}

/// Everything `-o` decides.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// Mount read-only.
    pub read_only: bool,
    /// The engine's commit interval, if given.
    pub commit: Option<Duration>,
    /// How long a periodic commit may leave a file's new end unwritten.
    pub data_expire: Option<Duration>,
    /// `cache=SIZE`: memory for decoded meta-data and dirty file data.
    pub cache: Option<u64>,
    /// What a crash may show (`order=`).
    pub order: Order,
    /// Who may use the mount.
    pub acl: Access,
    /// Options for the kernel's mount.
    pub fuse: Vec<MountOption>,
    /// Log file of a background mount.
    pub log: Option<PathBuf>,
    /// Threads reading /dev/fuse (`threads=`); beside io_uring's queues
    /// they carry what the kernel never puts on a ring (FORGET, INTERRUPT).
    pub threads: usize,
    /// Shown as the source in /proc/mounts, if the user chose one.
    pub fsname: Option<String>,
    /// The kernel's writeback cache.
    pub writeback: bool,
    /// Serve the `security.*` extended attributes (`nosecurity_xattr`
    /// turns them off).
    pub security_xattr: bool,
    /// When reads update access times (the engine does it; the kernel
    /// never does for FUSE).
    pub atime: AtimeMode,
    /// Where to write a block-level trace of both devices, if anywhere.
    pub trace: Option<PathBuf>,
    /// How long the kernel may keep attributes (`attr_timeout=`).
    pub attr_timeout: Option<Duration>,
    /// How long the kernel may keep names, found or not (`entry_timeout=`).
    pub entry_timeout: Option<Duration>,
    /// `recover=older`: accept losing commits a damaged log can no longer
    /// give back, and mount writable from the state before the damage.
    pub accept_loss: bool,
    /// `recover=rebuild`: check the whole volume first and, when its IFile
    /// is damaged, write it as rebuilt from its log (what `fsck -y` does)
    /// and mount that.
    pub rebuild: bool,
    /// `norecovery`: open at the last checkpoint without rolling the log
    /// forward (read-only only, as ext4's and XFS's).
    pub no_recovery: bool,
    /// `dirty_window=`: the most dirty data the kernel may hold for this
    /// mount before passing it to the volume (0: the kernel's own limit).
    pub dirty_window: u64,
    /// `stream_window=`: the window while no fsync comes beside a stream
    /// (0: `dirty_window` always).
    pub stream_window: u64,
    /// `readahead=`: the kernel's read-ahead for the mount (0: the
    /// kernel's default).
    pub read_ahead: u64,
    /// `remount`: change the options of the mount already there (mount(8)
    /// runs the helper again with it for `mount -o remount,...`).
    pub remount: bool,
    /// `snapshot=NAME`: mount that snapshot, read-only, beside the live
    /// volume (which may be mounted meanwhile).
    pub snapshot: Option<String>,
    /// `clone=NAME`: make that tree the live one (keeping the tree that
    /// was live) and mount it.
    pub clone: Option<String>,
    /// `transport=`: io_uring where the kernel allows it (the default), or
    /// one of the two insisted on.
    pub transport: Transport,
    /// `discard`: freed data blocks and emptied log segments are discarded
    /// in the background (`nodiscard`, the default: only `fstrim` does).
    pub discard: bool,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            read_only: false,
            commit: None,
            data_expire: None,
            cache: None,
            order: Order::Default,
            acl: Access::Owner,
            fuse: Vec::new(),
            log: None,
            threads: DEFAULT_THREADS,
            fsname: None,
            writeback: true,
            security_xattr: true,
            atime: AtimeMode::Relatime,
            trace: None,
            attr_timeout: None,
            entry_timeout: None,
            accept_loss: false,
            rebuild: false,
            no_recovery: false,
            dirty_window: crate::bdi::DEFAULT_DIRTY_WINDOW,
            stream_window: crate::bdi::DEFAULT_STREAM_WINDOW,
            read_ahead: crate::bdi::DEFAULT_READ_AHEAD,
            remount: false,
            snapshot: None,
            clone: None,
            transport: Transport::Auto,
            discard: false,
        }
    }
}

/// Options mount(8) and fstab use that mean nothing to a mounted FUSE file
/// system (they steer mount(8) itself), and two atime refinements the
/// engine does not make: directories follow the files' rule, and access
/// times already reach the disk only with the next commit.
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
            | "diratime"
            | "nodiratime"
            | "lazytime"
            | "nolazytime"
            | "default_permissions"
    ) || opt.starts_with("x-")
        || opt.starts_with("comment=")
        || opt.starts_with("subtype=")
        || opt.starts_with("data=")
        // What the kernel shows of a FUSE mount in /proc/mounts, and so what
        // mount(8) repeats on a remount: the mount itself sets them.
        || opt.starts_with("user_id=")
        || opt.starts_with("group_id=")
        || opt.starts_with("rootmode=")
        || opt.starts_with("fd=")
}

/// The option that undoes `f` (`nodev` for `dev`), if any.
fn opposite(f: &MountOption) -> Option<MountOption> {
    Some(match f {
        MountOption::Dev => MountOption::NoDev,
        MountOption::NoDev => MountOption::Dev,
        MountOption::Suid => MountOption::NoSuid,
        MountOption::NoSuid => MountOption::Suid,
        MountOption::Exec => MountOption::NoExec,
        MountOption::NoExec => MountOption::Exec,
        MountOption::Sync => MountOption::Async,
        MountOption::Async => MountOption::Sync,
        _ => return None,
    })
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
        "sync" => MountOption::Sync,
        "async" => MountOption::Async,
        "dirsync" => MountOption::DirSync,
        "auto_unmount" => MountOption::AutoUnmount,
        _ => return None,
    })
}

/// The access-time rule an option asks for, as mount(8) reads them: the
/// last one given wins.
fn atime_mode(opt: &str) -> Option<AtimeMode> {
    Some(match opt {
        "noatime" => AtimeMode::NoAtime,
        "relatime" | "atime" | "nostrictatime" => AtimeMode::Relatime,
        "strictatime" | "norelatime" => AtimeMode::StrictAtime,
        _ => return None,
    })
}

/// The name an option goes by in messages and in the atime group.
fn atime_name(mode: AtimeMode) -> &'static str {
    match mode {
        AtimeMode::NoAtime => "noatime",
        AtimeMode::Relatime => "relatime",
        AtimeMode::StrictAtime => "strictatime",
    }
}

/// The memory this process may use: the machine's, or its cgroup's
/// limit when lower (cgroup v2 `memory.max`).
fn machine_memory() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok()?.lines().find_map(|l| {
        let kib = l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
        Some(kib * 1024)
    })?;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok().and_then(|t| {
        let path = t.lines().find_map(|l| l.strip_prefix("0::"))?.to_string();
        std::fs::read_to_string(format!("/sys/fs/cgroup{path}/memory.max")).ok()?.trim().parse::<u64>().ok()
    });
    Some(cgroup.map_or(total, |c| c.min(total)))
}

/// Seconds as libfuse's `attr_timeout=` takes them: a fraction is allowed.
fn seconds(name: &str, v: &str) -> Result<Duration> {
    match v.parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=1e9).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => bail!("{name}={v}: give a number of seconds"),
    }
}

/// Parses every `-o` argument (each a comma-separated list).
///
/// Of flags that undo each other (`dev` and `nodev`, `ro` and `rw`), the
/// last wins, as with mount(8). Two different access-time rules are
/// refused as contradictory, unless remounting: mount(8) then repeats the
/// mount's current options before the new ones, and the new ones win.
///
/// # Errors
/// A malformed `commit=`, `threads=` or `log=`, an option DualFS does not
/// know, or contradictory options.
pub fn parse(lists: &[String]) -> Result<MountConfig> {
    let mut c = MountConfig::default();
    let remount = lists.iter().flat_map(|l| l.split(',')).any(|o| o.trim() == "remount");
    let mut atime_given: Option<&'static str> = None;
    for opt in lists.iter().flat_map(|l| l.split(',')) {
        let opt = opt.trim();
        if let Some(v) = opt.strip_prefix("commit=") {
            let secs: u64 = v.parse().map_err(|_| anyhow::anyhow!("commit={v}: give a number of seconds"))?;
            // As ext4: 0 means the default.
            c.commit = (secs > 0).then(|| Duration::from_secs(secs));
        } else if let Some(v) = opt.strip_prefix("data_expire=") {
            let secs: u64 = v.parse().map_err(|_| anyhow::anyhow!("data_expire={v}: give a number of seconds"))?;
            c.data_expire = Some(Duration::from_secs(secs));
        } else if let Some(v) = opt.strip_prefix("cache=") {
            let size = crate::args::parse_size(v).map_err(|e| anyhow::anyhow!("cache={v}: {e}"))?;
            if size < 16 << 20 {
                bail!("cache={v}: give at least 16M");
            }
            if let Some(memory) = machine_memory()
                && size > memory / 2
            {
                bail!(
                    "cache={v}: this machine has {} of memory for this process (its cgroup's limit, if lower): give \
                     at most half of it, {}",
                    crate::words::human_bytes(memory),
                    crate::words::human_bytes(memory / 2)
                );
            }
            c.cache = Some(size);
        } else if let Some(v) = opt.strip_prefix("attr_timeout=") {
            c.attr_timeout = Some(seconds("attr_timeout", v)?);
        } else if let Some(v) = opt.strip_prefix("entry_timeout=") {
            c.entry_timeout = Some(seconds("entry_timeout", v)?);
        } else if let Some(v) = opt.strip_prefix("order=") {
            c.order = match v {
                "strict" => Order::Strict,
                "default" => Order::Default,
                _ => bail!("order={v}: give strict or default"),
            };
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
        } else if let Some(v) = opt.strip_prefix("recover=") {
            match v {
                "older" => c.accept_loss = true,
                "rebuild" => c.rebuild = true,
                _ => bail!(
                    "recover={v}: give recover=older (accept the state before a damaged log) or recover=rebuild \
                     (rebuild a volume no checkpoint of which loads from its log)"
                ),
            }
        } else if opt == "norecovery" {
            c.no_recovery = true;
        } else if let Some(v) = opt.strip_prefix("snapshot=") {
            if let Some(why) = dualfs_engine::format::snapshot::bad_name(v) {
                bail!("snapshot={v}: {why}");
            }
            // A snapshot is read-only, always.
            c.snapshot = Some(v.to_string());
            c.read_only = true;
            c.fuse.push(MountOption::RO);
        } else if let Some(v) = opt.strip_prefix("clone=") {
            if let Some(why) = dualfs_engine::format::snapshot::bad_name(v) {
                bail!("clone={v}: {why}");
            }
            c.clone = Some(v.to_string());
        } else if let Some(v) = opt.strip_prefix("dirty_window=") {
            c.dirty_window = match crate::args::parse_size(v) {
                Ok(n) if n == 0 || n >= 1 << 20 => n,
                _ => bail!("dirty_window={v}: give a size of at least 1M (or 0 for the kernel's limit)"),
            };
        } else if let Some(v) = opt.strip_prefix("stream_window=") {
            c.stream_window = match crate::args::parse_size(v) {
                Ok(n) if n == 0 || n >= 1 << 20 => n,
                _ => bail!("stream_window={v}: give a size of at least 1M (or 0 for dirty_window's always)"),
            };
        } else if let Some(v) = opt.strip_prefix("readahead=") {
            c.read_ahead = match crate::args::parse_size(v) {
                Ok(n) if n == 0 || (4 << 10..=1 << 30).contains(&n) => n,
                _ => bail!("readahead={v}: give a size from 4K to 1G (or 0 for the kernel's default)"),
            };
        } else if let Some(v) = opt.strip_prefix("fsname=") {
            c.fsname = Some(v.to_string());
        } else if let Some(mode) = atime_mode(opt) {
            let name = atime_name(mode);
            match atime_given {
                Some(before) if before != name && !remount => {
                    bail!("the mount options {before} and {opt} contradict each other: give one of them")
                }
                _ => atime_given = Some(name),
            }
            c.atime = mode;
            // The kernel never updates a FUSE file's atime itself; noatime
            // is passed on only so that /proc/mounts says so.
            c.fuse.retain(|o| *o != MountOption::NoAtime);
            if mode == AtimeMode::NoAtime {
                c.fuse.push(MountOption::NoAtime);
            }
        } else if let Some(v) = opt.strip_prefix("transport=") {
            c.transport = match v {
                "auto" => Transport::Auto,
                "uring" => Transport::Uring,
                "devfuse" => Transport::DevFuse,
                _ => bail!("transport={v}: give auto, uring or devfuse"),
            };
        } else if opt == "uring" || opt == "nouring" {
            bail!(
                "{opt}: io_uring is used by itself where the kernel allows it; transport=uring insists on it, \
                 transport=devfuse refuses it"
            );
        } else if opt == "discard" || opt == "nodiscard" {
            c.discard = opt == "discard";
        } else if opt == "nowriteback" || opt == "writeback" {
            c.writeback = opt == "writeback";
        } else if opt == "nosecurity_xattr" || opt == "security_xattr" {
            c.security_xattr = opt == "security_xattr";
        } else if opt == "ro" {
            c.read_only = true;
            c.fuse.push(MountOption::RO);
        } else if opt == "allow_other" || opt == "allow_root" {
            let acl = if opt == "allow_other" { Access::All } else { Access::RootAndOwner };
            if c.acl != Access::Owner && c.acl != acl {
                bail!("the mount options allow_other and allow_root contradict each other: give one of them");
            }
            c.acl = acl;
        } else if opt == "remount" {
            c.remount = true;
        } else if ignored(opt) {
            log::debug!("mount option {opt:?} ignored");
        } else if let Some(f) = flag(opt) {
            if let Some(undo) = opposite(&f) {
                c.fuse.retain(|o| *o != undo && *o != f);
            }
            c.fuse.push(f);
        } else if let Some(v) = opt.strip_prefix("max_read=") {
            // The one kernel FUSE option with a use here: it caps read requests.
            if v.parse::<u32>().map_or(true, |n| n == 0) {
                bail!("max_read={v}: give a number of bytes");
            }
            c.fuse.push(MountOption::Custom(opt.to_string()));
        } else {
            bail!("unknown mount option {opt:?} (dualfs mount --help lists the options)");
        }
    }
    if let Some(name) = &c.clone {
        if c.snapshot.is_some() {
            bail!("clone={name} and snapshot= name two trees: give one");
        }
        if c.read_only {
            bail!("clone={name}: making a clone the live tree writes the volume, so it is not mounted read-only");
        }
    }
    if c.no_recovery && !c.read_only {
        bail!(
            "norecovery: a volume opened without its log rolled forward may only be read: give ro with it \
             (a writable mount would make the commits after the checkpoint lost for good)"
        );
    }
    if c.read_only {
        c.fuse.retain(|o| *o != MountOption::RW);
    }
    Ok(c)
}

/// Which options decide the same thing: one access-time rule, `ro`/`rw`,
/// `dev`/`nodev`..., else the option's name (`commit` for `commit=5`).
fn group(opt: &str) -> &str {
    if atime_mode(opt).is_some() {
        return "atime";
    }
    match opt {
        "ro" | "rw" => "ro",
        "dev" | "nodev" => "dev",
        "suid" | "nosuid" => "suid",
        "exec" | "noexec" => "exec",
        "sync" | "async" => "sync",
        "writeback" | "nowriteback" => "writeback",
        "discard" | "nodiscard" => "discard",
        "security_xattr" | "nosecurity_xattr" => "security_xattr",
        "allow_other" | "allow_root" => "allow",
        _ => opt.split_once('=').map_or(opt, |(k, _)| k),
    }
}

/// The default options stored in the superblock (`dualfs tune -o`) that
/// the given ones do not override, to go before them: a mount's own
/// `strictatime` replaces a stored `noatime` rather than contradict it.
#[must_use]
pub fn defaults_not_overridden(stored: &str, given: &[String]) -> String {
    let given: Vec<&str> = given.iter().flat_map(|l| l.split(',')).map(|o| group(o.trim())).collect();
    stored.split(',').filter(|o| !o.is_empty() && !given.contains(&group(o))).collect::<Vec<_>>().join(",")
}

/// What a kernel file system mounted by root gets when no option says
/// otherwise: devices and set-id bits honoured. mount(8) never passes `dev`
/// or `suid` to a helper (they are the absence of flags), so the helper puts
/// them first, where a later `nodev` or `nosuid` overrides them; FUSE's own
/// default, which `dualfs mount` keeps, is the opposite.
pub const KERNEL_DEFAULTS: &str = "dev,suid";

/// What the adapter is told by the options.
pub fn adapter_options(cfg: &MountConfig, devices_writable: bool) -> AdapterOptions {
    let defaults = AdapterOptions::default();
    AdapterOptions {
        writeback_cache: cfg.writeback,
        security_xattrs: cfg.security_xattr,
        owner_uid: nix::unistd::geteuid().as_raw(),
        attr_ttl: cfg.attr_timeout.unwrap_or(defaults.attr_ttl),
        entry_ttl: cfg.entry_timeout.unwrap_or(defaults.entry_ttl),
        devices_writable,
        // An LSEEK that waits for write-back holds a thread of its queue.
        lseek_flushes: cfg.threads.min(usize::from(dualfs_wire::QUEUE_THREADS)).saturating_sub(1),
        ..defaults
    }
}

pub fn engine_options(cfg: &MountConfig) -> MountOptions {
    let mut o = MountOptions {
        read_only: cfg.read_only,
        atime: cfg.atime,
        order: cfg.order,
        accept_loss: cfg.accept_loss,
        rebuild: cfg.rebuild,
        discard: cfg.discard,
        no_recovery: cfg.no_recovery,
        ..MountOptions::default()
    };
    if let Some(c) = cfg.commit {
        o.commit_interval = c;
    }
    if let Some(e) = cfg.data_expire {
        o.data_expire = e;
    }
    if let Some(size) = cfg.cache {
        // Half for decoded meta-data, half for dirty file data (the
        // default, 512M, keeps the 256 MiB dirty limit of before).
        let half = usize::try_from(size / 2).unwrap_or(usize::MAX);
        o.cache_bytes = half;
        o.dirty_data_limit = half;
        o.cache_budget = usize::MAX;
    }
    // A quarter of the meta-data half bounds the inode map's blocks in
    // memory (64 MiB, some four million inodes, at the default 512M), so
    // that the process does not grow with the number of files.
    let map = o.cache_bytes / 4;
    o.inode_map_bytes = Some(map);
    o.cache_bytes -= map;
    // A sixteenth of what is left bounds the segment usage table's blocks
    // (12 MiB, the entries of a 768 GiB meta-data device, at the default
    // 512M): the cleaner reads it whole, and on a large volume it stayed.
    let usage = o.cache_bytes / 16;
    o.usage_table_bytes = Some(usage);
    o.cache_bytes -= usage;
    // As much again bounds the data space's group table and bitmap (11 MiB
    // at the default 512M: the bitmap of 360 GiB of data touched), which
    // the allocator reads a group at a time and which otherwise stayed.
    let space = o.cache_bytes / 16;
    o.data_space_bytes = Some(space);
    o.cache_bytes -= space;
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> MountConfig {
        parse(&[s.to_string()]).unwrap()
    }

    #[test]
    fn discard_is_off_unless_asked_and_the_last_word_wins() {
        assert!(!p("rw").discard);
        assert!(p("discard").discard);
        assert!(!p("discard,nodiscard").discard);
        assert_eq!(defaults_not_overridden("discard,noatime", &["nodiscard".to_string()]), "noatime");
    }

    #[test]
    fn norecovery_is_taken_with_ro_only() {
        assert!(!p("ro").no_recovery);
        let c = p("ro,norecovery");
        assert!(c.no_recovery && engine_options(&c).no_recovery && engine_options(&c).read_only);
        let e = parse(&["norecovery".to_string()]).unwrap_err().to_string();
        assert!(e.contains("give ro with it"), "{e}");
    }

    #[test]
    fn dualfs_options_are_understood() {
        let c = p("ro,allow_other,commit=30,threads=2,log=/tmp/x.log,nowriteback,trace=/tmp/t");
        assert!(!c.writeback);
        assert!(c.security_xattr, "served unless turned off");
        assert!(!p("nosecurity_xattr").security_xattr);
        assert!(p("nosecurity_xattr,security_xattr").security_xattr, "the last one given");
        assert_eq!(c.trace, Some(PathBuf::from("/tmp/t")));
        assert!(c.read_only);
        assert_eq!(c.fuse, vec![MountOption::RO]);
        assert_eq!(c.acl, Access::All);
        assert_eq!(c.commit, Some(Duration::from_secs(30)));
        assert_eq!(c.threads, 2);
        assert_eq!(c.log, Some(PathBuf::from("/tmp/x.log")));
    }

    #[test]
    fn fstab_noise_is_dropped_and_fuse_options_pass_through() {
        let c = p("defaults,noauto,_netdev,x-systemd.automount,dev,suid,max_read=65536");
        assert_eq!(c.fuse, vec![MountOption::Dev, MountOption::Suid, MountOption::Custom("max_read=65536".into())]);
    }

    #[test]
    fn malformed_values_are_refused() {
        assert!(parse(&["commit=soon".into()]).is_err());
        assert!(parse(&["cache=lots".into()]).is_err());
        assert!(parse(&["cache=1M".into()]).is_err(), "below 16M");
        assert_eq!(parse(&["cache=64M".into()]).unwrap().cache, Some(64 << 20));
        assert_eq!(parse(&["readahead=4M".into()]).unwrap().read_ahead, 4 << 20);
        assert_eq!(parse(&[]).unwrap().read_ahead, crate::bdi::DEFAULT_READ_AHEAD);
        assert!(parse(&["readahead=1".into()]).is_err(), "below a page");
        assert!(parse(&["data_expire=later".into()]).is_err());
        assert_eq!(p("data_expire=0").data_expire, Some(Duration::ZERO));
        assert_eq!(p("order=strict").order, Order::Strict);
        assert_eq!(p("order=strict,order=default").order, Order::Default);
        assert!(parse(&["order=sloppy".into()]).is_err());
        assert!(parse(&["threads=0".into()]).is_err());
        assert_eq!(p("attr_timeout=0.5,entry_timeout=0").attr_timeout, Some(Duration::from_millis(500)));
        assert_eq!(p("entry_timeout=0").entry_timeout, Some(Duration::ZERO));
        assert!(parse(&["attr_timeout=-1".into()]).is_err());
        assert!(parse(&["entry_timeout=soon".into()]).is_err());
        assert!(parse(&["log=".into()]).is_err());
        assert!(parse(&["trace=".into()]).is_err());
    }

    #[test]
    fn access_time_options_choose_the_rule_and_contradictions_are_refused() {
        assert_eq!(p("").atime, AtimeMode::Relatime);
        assert_eq!(p("strictatime").atime, AtimeMode::StrictAtime);
        let c = p("noatime");
        assert_eq!(c.atime, AtimeMode::NoAtime);
        assert_eq!(c.fuse, vec![MountOption::NoAtime]);
        let e = parse(&["noatime,strictatime".into()]).unwrap_err().to_string();
        assert!(e.contains("noatime and strictatime contradict"), "{e}");
        assert!(parse(&["noatime".into(), "relatime".into()]).is_err());
        // The same rule twice, or under two names, is no contradiction.
        assert_eq!(p("relatime,atime").atime, AtimeMode::Relatime);
        // A remount repeats the current options first: the new ones win.
        let c = p("rw,noatime,remount,relatime");
        assert!(c.remount);
        assert_eq!(c.atime, AtimeMode::Relatime);
        assert_eq!(c.fuse, vec![MountOption::RW]);
    }

    #[test]
    fn unknown_options_are_refused_in_plain_words() {
        let e = parse(&["nosuchoption".into()]).unwrap_err().to_string();
        assert!(e.contains("unknown mount option \"nosuchoption\""), "{e}");
        assert!(parse(&["max_read=abc".into()]).is_err());
        assert_eq!(p("max_read=65536").fuse, vec![MountOption::Custom("max_read=65536".into())]);
        assert!(parse(&["allow_other,allow_root".into()]).is_err());
        // What /proc/mounts shows of a FUSE mount, repeated by mount(8) on a remount.
        assert!(p("user_id=0,group_id=0,rootmode=40000").fuse.is_empty());
    }

    #[test]
    fn the_transport_is_chosen_by_itself_unless_one_is_insisted_on() {
        assert_eq!(p("").transport, Transport::Auto);
        assert_eq!(p("transport=uring").transport, Transport::Uring);
        assert_eq!(p("transport=devfuse,transport=auto").transport, Transport::Auto);
        assert!(parse(&["transport=fuser".into()]).is_err());
        let e = parse(&["uring".into()]).unwrap_err().to_string();
        assert!(e.contains("transport=uring"), "{e}");
    }

    #[test]
    fn stored_defaults_give_way_to_the_mount_s_own_options() {
        let given = vec!["strictatime,commit=5".to_string()];
        assert_eq!(defaults_not_overridden("noatime,commit=30,nowriteback", &given), "nowriteback");
        assert_eq!(defaults_not_overridden("ro,noatime", &["rw".to_string()]), "noatime");
        assert_eq!(defaults_not_overridden("", &given), "");
    }

    #[test]
    fn the_last_of_two_opposite_flags_wins_and_the_helper_defaults_to_dev_suid() {
        assert_eq!(p("nodev,dev,suid,nosuid").fuse, vec![MountOption::Dev, MountOption::NoSuid]);
        let c = parse(&[KERNEL_DEFAULTS.into(), "nosuid".into()]).unwrap();
        assert_eq!(c.fuse, vec![MountOption::Dev, MountOption::NoSuid]);
        assert_eq!(p(KERNEL_DEFAULTS).fuse, vec![MountOption::Dev, MountOption::Suid]);
    }

    #[test]
    fn read_only_wins_over_rw() {
        let c = p("rw,ro");
        assert_eq!(c.fuse, vec![MountOption::RO]);
    }
}
