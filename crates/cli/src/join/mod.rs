//! A second mount of a mounted volume: it joins the process that serves
//! the volume, which puts a bind of its mount on the new mount point.
//!
//! A kernel file system mounted twice is one superblock at two places: a
//! write through one is seen through the other at once, unmounting one
//! leaves the other, the file system closes with the last. A bind of the
//! serving process's mount is exactly that: one FUSE connection, one
//! kernel inode and page cache, one engine volume. Two FUSE connections
//! over one volume would each cache attributes, names and (with the
//! writeback cache) dirty pages the other cannot see; keeping them
//! coherent costs either invalidations for every change or no caching at
//! all (DESIGN.md, "A second mount of a mounted volume").
//!
//! The serving process listens on an abstract Unix socket named after its
//! pid ([`socket_name`]); `dualfs mount` finds the pid as the holder of
//! the volume's lock (`holder.rs`), checks with the socket's peer
//! credentials that it talks to that process, and sends one request: the
//! new mount point, the devices and the options. The serving process
//! answers with one line: done, refused (naming the option that differs),
//! or closing (its last mount is gone: the caller then waits for the
//! close and mounts as usual).
//!
//! Options: those of the volume (commit interval, cache, writeback, access
//! times, timeouts, who may use the mount...) are the serving process's
//! and must be the same; a second mount that asks otherwise is refused,
//! naming the option. The flags of a mount itself (`ro`, `nodev`,
//! `nosuid`, `noexec`) may differ, as they may between two mounts of one
//! kernel file system: the bind gets its own. A writable mount of a volume
//! served read-only is refused.

use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use dualfs_engine::Volume;
use dualfs_engine::volume::{AtimeMode, Order};
use nix::mount::{MntFlags, MsFlags};
use serde_json::{Value, json};

use crate::options::{Access, MountConfig, MountOption, Transport};

mod client;
pub use client::{check_remount, try_join};

/// The abstract socket name a serving process listens on.
fn socket_name(pid: u32) -> String {
    format!("dualfs.serve.{pid}")
}

/// How long a joining mount waits for the serving process's answer: a
/// bind takes milliseconds, a serving process under load answers late.
const ANSWER_WAIT: Duration = Duration::from_secs(30);

/// How long a mount of a tree waits for the connection of that tree just
/// unmounted to end (its thread returns once the kernel's last request is
/// answered).
const TREE_END_WAIT: Duration = Duration::from_secs(10);

/// What a device path reaches, whatever name it goes by: the file (behind
/// a loop device too), or the block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Storage {
    File(u64, u64),
    Block(u64),
}

fn storage(p: &Path) -> Option<Storage> {
    let m = std::fs::metadata(p).ok()?;
    if m.file_type().is_block_device() {
        if let Some(f) = crate::claim::backing_file(m.rdev()) {
            let b = std::fs::metadata(f).ok()?;
            return Some(Storage::File(b.dev(), b.ino()));
        }
        return Some(Storage::Block(m.rdev()));
    }
    Some(Storage::File(m.dev(), m.ino()))
}

/// The process holding the volume whose meta-data device is `meta`: the
/// lock is on the path the serving process was given, or on the file
/// behind the loop device `meta` is.
fn holder(meta: &Path) -> Option<crate::holder::Holder> {
    crate::holder::holder_of(meta).or_else(|| {
        let m = std::fs::metadata(meta).ok()?;
        if !m.file_type().is_block_device() {
            return None;
        }
        crate::holder::holder_of(&crate::claim::backing_file(m.rdev())?)
    })
}

/// Whether nobody holds the lock a serving process takes on `meta` (and,
/// for a loop device, on the file behind it): a shared lock is granted at
/// once. Asked before /proc/locks, whose read waits for the kernel's list
/// of every lock (15 ms one time in twenty on a busy machine), so that a
/// volume nobody serves is mounted without it.
fn unheld(meta: &Path) -> bool {
    let free = |p: &Path| std::fs::File::open(p).is_ok_and(|f| f.try_lock_shared().is_ok());
    if !free(meta) {
        return false;
    }
    match std::fs::metadata(meta) {
        Ok(m) if m.file_type().is_block_device() => crate::claim::backing_file(m.rdev()).is_none_or(|f| free(&f)),
        Ok(_) => true,
        Err(_) => false,
    }
}

/// The flags of one mount, which a bind may have of its own: FUSE's
/// `nosuid,nodev` unless `suid` or `dev`, as `dualfs_wire` mounts.
fn mount_flags(c: &MountConfig) -> MsFlags {
    let mut f = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    for o in &c.fuse {
        match o {
            MountOption::Dev => f.remove(MsFlags::MS_NODEV),
            MountOption::NoDev => f.insert(MsFlags::MS_NODEV),
            MountOption::Suid => f.remove(MsFlags::MS_NOSUID),
            MountOption::NoSuid => f.insert(MsFlags::MS_NOSUID),
            MountOption::Exec => f.remove(MsFlags::MS_NOEXEC),
            MountOption::NoExec => f.insert(MsFlags::MS_NOEXEC),
            _ => {}
        }
    }
    if c.read_only {
        f.insert(MsFlags::MS_RDONLY);
    }
    if c.atime == AtimeMode::NoAtime {
        f.insert(MsFlags::MS_NOATIME);
    }
    f
}

/// Seconds as the options take them, a default given as its value: a
/// mount that leaves `commit=` out asks what `commit=5` asks.
fn seconds(d: Option<Duration>, default: Duration) -> String {
    format!("{}", d.unwrap_or(default).as_secs_f64())
}

/// The options that are the volume's, not one mount's: each as its name
/// and as the mount asks it, in words a refusal can show.
fn volume_settings(c: &MountConfig) -> Vec<(&'static str, String)> {
    let kernel: Vec<&str> = c
        .fuse
        .iter()
        .filter(|o| {
            matches!(o, MountOption::Sync | MountOption::DirSync | MountOption::AutoUnmount | MountOption::Custom(_))
        })
        .map(MountOption::text)
        .collect();
    let engine = dualfs_engine::volume::MountOptions::default();
    let ttl = dualfs_fuse::DEFAULT_TTL;
    vec![
        ("commit", format!("commit={}", seconds(c.commit, engine.commit_interval))),
        ("data_expire", format!("data_expire={}", seconds(c.data_expire, engine.data_expire))),
        ("cache", format!("cache={}", c.cache.map_or_else(|| "default".into(), |b| b.to_string()))),
        ("order", format!("order={}", if c.order == Order::Strict { "strict" } else { "default" })),
        (
            "allow_other",
            match c.acl {
                Access::All => "allow_other".into(),
                Access::RootAndOwner => "allow_root".into(),
                Access::Owner => "neither allow_other nor allow_root".into(),
            },
        ),
        ("log", c.log.as_ref().map_or_else(|| "no log=".into(), |p| format!("log={}", p.display()))),
        ("discard", if c.discard { "discard".into() } else { "nodiscard".into() }),
        ("threads", format!("threads={}", c.threads)),
        ("writeback", if c.writeback { "writeback".into() } else { "nowriteback".into() }),
        ("security_xattr", if c.security_xattr { "security_xattr".into() } else { "nosecurity_xattr".into() }),
        (
            "atime",
            match c.atime {
                AtimeMode::NoAtime => "noatime".into(),
                AtimeMode::Relatime => "relatime".into(),
                AtimeMode::StrictAtime => "strictatime".into(),
            },
        ),
        ("trace", c.trace.as_ref().map_or_else(|| "no trace=".into(), |p| format!("trace={}", p.display()))),
        ("attr_timeout", format!("attr_timeout={}", seconds(c.attr_timeout, ttl))),
        ("entry_timeout", format!("entry_timeout={}", seconds(c.entry_timeout, ttl))),
        (
            "recover",
            match (c.accept_loss, c.rebuild) {
                (true, _) => "recover=older".into(),
                (_, true) => "recover=rebuild".into(),
                _ => "no recover=".into(),
            },
        ),
        ("dirty_window", format!("dirty_window={}", c.dirty_window)),
        ("stream_window", format!("stream_window={}", c.stream_window)),
        ("readahead", format!("readahead={}", c.read_ahead)),
        (
            "transport",
            match c.transport {
                Transport::Auto => "transport=auto".into(),
                Transport::Uring => "transport=uring".into(),
                Transport::DevFuse => "transport=devfuse".into(),
            },
        ),
        (
            "sync, dirsync, auto_unmount, max_read",
            if kernel.is_empty() { "none of them".into() } else { kernel.join(",") },
        ),
    ]
}

/// The first volume option `asked` sets otherwise than `served`, as a
/// refusal's words.
fn differing(served: &MountConfig, asked: &MountConfig) -> Option<String> {
    volume_settings(served)
        .into_iter()
        .zip(volume_settings(asked))
        .find(|(s, a)| s.1 != a.1)
        .map(|(s, a)| format!("option {} differs: the volume is served with {}, this mount asks {}", s.0, s.1, a.1))
}

/// The first of a remount's option `words` that asks a volume setting
/// other than the one `served` (a remount changes no volume setting: the
/// serving process keeps those it was mounted with), as a refusal's words.
/// mount(8) passes a remount the mount's current kernel options, those of
/// fstab and the new ones: a word that asks what is served already is no
/// change.
///
/// # Errors
/// A word that is no option.
fn remount_refusal(served: &MountConfig, words: &[String]) -> Result<Option<String>> {
    let defaults = volume_settings(&crate::options::parse(&[])?);
    let have = volume_settings(served);
    for w in words {
        let one = volume_settings(&crate::options::parse(std::slice::from_ref(w))?);
        let key = w.split_once('=').map_or(w.as_str(), |(k, _)| k);
        let key = key.strip_prefix("no").unwrap_or(key);
        let differs = one.iter().zip(defaults.iter().zip(&have)).any(|((name, asked), ((_, default), (_, now)))| {
            // A word that asks a default is known by its setting's name.
            let sets = asked != default || *name == key;
            sets && asked != now
        });
        if differs {
            return Ok(Some(format!(
                "option {w} cannot be changed by a remount (the volume is served otherwise): unmount every mount of \
                 the volume and mount it again with {w}"
            )));
        }
    }
    Ok(None)
}

/// What the serving process knows to answer a join.
struct Served {
    cfg: MountConfig,
    /// The volume, while it serves; taken when the last mount has gone.
    vol: Option<Arc<Volume>>,
    meta: Option<Storage>,
    data: Option<Storage>,
    /// The devices' paths as the serving process opened them.
    paths: (PathBuf, PathBuf),
    fsname: String,
    /// The device number of the mount's root: what a path must show to be
    /// one of this process's mounts.
    dev: u64,
    /// The tree the first mount serves (the live tree it opened).
    tree: String,
    /// Where the volume is mounted: the first mount point, then the joined.
    mounts: Vec<PathBuf>,
}

/// A snapshot served beside the volume: its own FUSE connection.
struct SnapshotMount {
    at: PathBuf,
    /// Its root's device number, to tell it from what may be mounted
    /// there once it has gone.
    dev: u64,
    unmount: Box<dyn Fn(bool) -> std::io::Result<()> + Send>,
    thread: std::thread::JoinHandle<()>,
}

/// The serving side: the listener, and the mounts it has added.
pub struct Joins {
    served: Mutex<Served>,
    snapshots: Mutex<Vec<SnapshotMount>>,
    /// Writable trees served beside the first mount's, each its own FUSE
    /// connection on the same volume.
    trees: Mutex<Vec<(String, SnapshotMount)>>,
}

fn lock(m: &Mutex<Served>) -> MutexGuard<'_, Served> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `p` is (the root of) a mount of the connection with root device `dev`.
fn ours(p: &Path, dev: u64) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.dev() == dev)
}

impl Joins {
    /// Starts listening for second mounts of the volume mounted on `first`
    /// with `cfg`. A failure to listen is logged: the mount serves anyway,
    /// and a second mount is then refused as before (volume in use).
    #[must_use]
    pub fn start(
        vol: Arc<Volume>,
        cfg: &MountConfig,
        (meta, data): (&Path, &Path),
        first: &Path,
        fsname: &str,
    ) -> Arc<Joins> {
        let dev = std::fs::metadata(first).map(|m| m.dev()).unwrap_or(0);
        let tree = vol.live_tree();
        let joins = Arc::new(Joins {
            served: Mutex::new(Served {
                cfg: cfg.clone(),
                vol: Some(vol),
                meta: storage(meta),
                data: storage(data),
                paths: (meta.to_path_buf(), data.to_path_buf()),
                fsname: fsname.to_string(),
                dev,
                mounts: vec![first.to_path_buf()],
                tree,
            }),
            snapshots: Mutex::new(Vec::new()),
            trees: Mutex::new(Vec::new()),
        });
        let listener =
            SocketAddr::from_abstract_name(socket_name(std::process::id())).and_then(|a| UnixListener::bind_addr(&a));
        match listener {
            Ok(l) => {
                let j = joins.clone();
                let spawned = std::thread::Builder::new().name("dualfs-join".into()).spawn(move || {
                    for conn in l.incoming() {
                        match conn {
                            Ok(c) => j.answer(c),
                            Err(e) => log::warn!("a second mount's connection failed: {e}"),
                        }
                    }
                });
                if let Err(e) = spawned {
                    log::warn!("no thread for second mounts ({e}): a second mount is refused");
                }
            }
            Err(e) => log::warn!("cannot listen for second mounts ({e}): a second mount is refused"),
        }
        joins
    }

    /// The last mount has gone: answer "closing" from now on, and give the
    /// volume back for its close (after any join being answered).
    pub fn close(&self) {
        lock(&self.served).vol = None;
    }

    /// Unmounts every mount of the volume, the joined ones first, the first
    /// one with `first` (the session's own unmount); what is no longer a
    /// mount of this volume is left alone.
    ///
    /// # Errors
    /// The first unmount that fails (EBUSY: in use).
    pub fn unmount_all(&self, lazy: bool, first: &dyn Fn(bool) -> std::io::Result<()>) -> std::io::Result<()> {
        let (dev, mounts) = {
            let s = lock(&self.served);
            (s.dev, s.mounts.clone())
        };
        let flags = if lazy { MntFlags::MNT_DETACH } else { MntFlags::empty() };
        let mut result = Ok(());
        let trees = self.trees.lock().unwrap_or_else(PoisonError::into_inner);
        let snaps = self.snapshots.lock().unwrap_or_else(PoisonError::into_inner);
        for snap in trees.iter().map(|(_, t)| t).chain(snaps.iter()) {
            if ours(&snap.at, snap.dev)
                && let Err(e) = (snap.unmount)(lazy)
            {
                log::debug!("cannot unmount {}: {e}", snap.at.display());
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        for (i, p) in mounts.iter().enumerate().rev() {
            if !ours(p, dev) {
                continue;
            }
            let r = if i == 0 { first(lazy) } else { nix::mount::umount2(p, flags).map_err(std::io::Error::from) };
            if let Err(e) = r {
                log::debug!("cannot unmount {}: {e}", p.display());
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        result
    }

    fn answer(&self, mut conn: UnixStream) {
        let _ = conn.set_read_timeout(Some(ANSWER_WAIT));
        let reply = match self.join(&conn) {
            Ok(Some(source)) => json!({ "ok": true, "source": source }),
            Ok(None) => json!({ "closing": true }),
            Err(e) => json!({ "error": format!("{e:#}") }),
        };
        let _ = writeln!(conn, "{reply}").and_then(|()| conn.flush());
    }

    /// Serves one join request: the mount point the volume now also has
    /// as a bind of, or None when the volume is closing.
    fn join(&self, conn: &UnixStream) -> Result<Option<PathBuf>> {
        let peer = nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::PeerCredentials)
            .context("cannot tell who asks")?;
        let mut line = String::new();
        BufReader::new(conn).read_line(&mut line).context("cannot read the request")?;
        let req: Value = serde_json::from_str(&line).context("a malformed request")?;
        let target = PathBuf::from(req["mountpoint"].as_str().ok_or_else(|| anyhow!("no mount point asked"))?);
        let options: Vec<String> = req["options"]
            .as_array()
            .map(|a| a.iter().filter_map(|o| o.as_str().map(String::from)).collect())
            .unwrap_or_default();
        let path = |k: &str| req[k].as_str().map(PathBuf::from).ok_or_else(|| anyhow!("no {k} device named"));
        let (meta, data) = (path("meta")?, path("data")?);
        let asked = crate::options::parse(&options)?;

        let mut s = lock(&self.served);
        let Some(vol) = s.vol.clone() else { return Ok(None) };
        if req["remount"].as_bool() == Some(true) {
            if storage(&meta) != s.meta || storage(&data) != s.data {
                bail!(
                    "{} and {} are not the devices of the volume this process serves",
                    meta.display(),
                    data.display()
                );
            }
            return match remount_refusal(&s.cfg, &options)? {
                Some(why) => Err(anyhow!(why)),
                None => Ok(Some(target)),
            };
        }
        if peer.uid() != 0 {
            bail!("only root mounts a mounted volume a second time (the second mount is a bind of the first)");
        }
        if let Some(name) = &asked.snapshot {
            if storage(&meta) != s.meta || storage(&data) != s.data {
                bail!(
                    "{} and {} are not the devices of the volume this process serves",
                    meta.display(),
                    data.display()
                );
            }
            // Served with the lock held: the volume's close waits for it,
            // so that the process waits for the snapshot before it exits.
            let (m, d) = s.paths.clone();
            let live = s.vol.clone();
            return self.serve_snapshot(name, &asked, (&m, &d), live.as_deref(), &target).map(Some);
        }
        if !nix::unistd::geteuid().is_root() {
            bail!(
                "the volume is served by a mount of user {} (through fusermount3), which cannot add a bind of it: \
                 mount it as root to mount it twice",
                nix::unistd::geteuid()
            );
        }
        if storage(&meta) != s.meta || storage(&data) != s.data {
            bail!("{} and {} are not the devices of the volume this process serves", meta.display(), data.display());
        }
        if let Some(name) = &asked.clone
            && *name != s.tree
        {
            if let Some(why) = differing(&s.cfg, &asked) {
                bail!("{why} (a tree served beside the volume takes the options of its first mount)");
            }
            if vol.is_read_only() {
                bail!("clone={name}: the volume is served read-only, and a clone is served writable");
            }
            let fsname = asked.fsname.clone().unwrap_or_else(|| format!("{}@{name}", s.fsname));
            drop(s);
            return self.serve_tree(name, &vol, &asked, &fsname, &target).map(Some);
        }
        if let Some(name) = &asked.fsname
            && *name != s.fsname
        {
            bail!(
                "option fsname differs: the volume is served with fsname={}, this mount asks fsname={name}",
                s.fsname
            );
        }
        if let Some(why) = differing(&s.cfg, &asked) {
            bail!("{why} (a second mount of a mounted volume takes the options of the first)");
        }
        let flags = mount_flags(&asked);
        if vol.is_read_only() && !flags.contains(MsFlags::MS_RDONLY) {
            bail!("option ro differs: the volume is served read-only, this mount asks rw");
        }
        if !std::fs::metadata(&target).is_ok_and(|m| m.is_dir()) {
            bail!("cannot mount on {}: not a directory", target.display());
        }
        let dev = s.dev;
        s.mounts.retain(|p| ours(p, dev));
        // The last mount is gone and the process has yet to see it: it is
        // closing, and the caller waits for the close (a mount right after
        // an unmount).
        let Some(source) = s.mounts.first().cloned() else { return Ok(None) };
        nix::mount::mount(Some(&source), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .with_context(|| format!("cannot bind {} on {}", source.display(), target.display()))?;
        let remount = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | flags;
        if let Err(e) = nix::mount::mount(None::<&str>, &target, None::<&str>, remount, None::<&str>) {
            let _ = nix::mount::umount2(&target, MntFlags::MNT_DETACH);
            return Err(e).with_context(|| format!("cannot set the flags of the mount on {}", target.display()));
        }
        s.mounts.push(target.clone());
        log::info!(
            "also mounted on {} (a bind of {}, asked by pid {})",
            target.display(),
            source.display(),
            peer.pid()
        );
        Ok(Some(source))
    }
}

/// Mounts `fs` on `target` as one more FUSE connection of this process,
/// and serves it on a thread of its own until it is unmounted: `what`
/// (`snapshot` or `tree`) and `name` say what it serves, in the thread's
/// name and the log. `keep` is held until the session ends.
fn start_connection(
    fs: dualfs_fuse::DualFs,
    target: &Path,
    fsname: &str,
    asked: &MountConfig,
    (what, name): (&'static str, &str),
    keep: impl Send + 'static,
) -> Result<SnapshotMount> {
    let notifier = fs.notifier_slot();
    let options = crate::transport::options(fsname, asked);
    let session = crate::transport::Mounted::start(fs, target, &options, asked)?;
    let _ = notifier.set(Box::new(session.notifier()));
    if asked.read_ahead > 0 {
        crate::bdi::read_ahead(target, asked.read_ahead);
    }
    let dev = std::fs::metadata(target).map(|m| m.dev()).unwrap_or(0);
    let unmount = Box::new(session.unmounter());
    let (at, served) = (target.to_path_buf(), name.to_string());
    let thread = std::thread::Builder::new()
        .name(format!("dualfs-{what}"))
        .spawn(move || {
            if let Err(e) = session.run() {
                log::error!("serving {what} {served} on {}: {e:#}", at.display());
            }
            drop(keep);
            log::info!("unmounted {what} {served} from {}", at.display());
        })
        .with_context(|| format!("cannot start the thread serving the {what}"))?;
    log::info!("serving {what} {name} on {} beside the volume", target.display());
    Ok(SnapshotMount { at: target.to_path_buf(), dev, unmount, thread })
}

impl Joins {
    /// Serves snapshot `name` on `target` in this process, as one more FUSE
    /// connection with the options `asked` (its own, as the process of its
    /// own it would otherwise have; `log=` is this process's). The snapshot
    /// is opened through the `live` volume while it is served, which then
    /// refuses to delete it, naming `target`; else it reads the devices
    /// without their lock, as a process of its own would.
    fn serve_snapshot(
        &self,
        name: &str,
        asked: &MountConfig,
        (meta, data): (&Path, &Path),
        live: Option<&Volume>,
        target: &Path,
    ) -> Result<PathBuf> {
        if asked.trace.is_some() {
            bail!("trace= traces a process's devices: a snapshot served beside the volume takes none");
        }
        let options = crate::options::engine_options(asked);
        // Handles of its own: it is served on after the volume closes and
        // lets go of the devices.
        let (m, d) = crate::devices::open_pair(meta, data, crate::devices::Access::Shared)?;
        let vol = match live {
            // A clone is mounted with -o clone=, as the engine's own open
            // of a snapshot says (and read-only here it would look writable
            // to whoever asked for the snapshot).
            Some(live) if live.snapshot_view(name).is_some_and(|s| s.writable) => {
                Err(dualfs_engine::error::Error::SnapshotRefused(format!(
                    "{name} is a writable tree, not a snapshot: mount it with -o clone={name}"
                )))
            }
            Some(live) => live.open_tree_on((m, d), name, &target.display().to_string(), options),
            None => Volume::open_snapshot(m, d, name, options),
        }
        .map_err(|e| anyhow!("cannot mount snapshot {name}: {e}"))?;
        let vol = Arc::new(vol);
        let fsname = asked.fsname.clone().unwrap_or_else(|| format!("{}#{}@{name}", meta.display(), data.display()));
        let fs = dualfs_fuse::DualFs::new(vol.clone(), crate::options::adapter_options(asked, false));
        // Read-only: nothing to write; the devices are let go with the
        // volume when the session ends.
        let served = start_connection(fs, target, &fsname, asked, ("snapshot", name), vol)?;
        self.snapshots.lock().unwrap_or_else(PoisonError::into_inner).push(served);
        Ok(target.to_path_buf())
    }

    /// Serves writable tree `name` of `vol` on `target` in this process, as
    /// one more FUSE connection: each of its requests enters the tree
    /// (`Volume::enter_tree`), so that its changes and the first mount's
    /// go to one log, one tree at a time. The volume stays open until the
    /// last of its trees is unmounted ([`Joins::wait_trees`]).
    fn serve_tree(
        &self,
        name: &str,
        vol: &Arc<Volume>,
        asked: &MountConfig,
        fsname: &str,
        target: &Path,
    ) -> Result<PathBuf> {
        if asked.trace.is_some() {
            bail!("trace= traces a process's devices: a tree served beside the volume takes none");
        }
        let mut trees = self.trees.lock().unwrap_or_else(PoisonError::into_inner);
        trees.retain(|(_, t)| !t.thread.is_finished());
        // Unmounted a moment ago: the kernel has let go of the mount, and
        // the thread that served it is ending. A mount right after an
        // unmount waits for it rather than find the tree still served.
        if let Some(i) = trees.iter().position(|(n, t)| n == name && !ours(&t.at, t.dev)) {
            let start = std::time::Instant::now();
            while !trees[i].1.thread.is_finished() && start.elapsed() < TREE_END_WAIT {
                std::thread::sleep(Duration::from_millis(5));
            }
            if trees[i].1.thread.is_finished() {
                let (_, t) = trees.remove(i);
                if t.thread.join().is_err() {
                    log::error!("the thread serving tree {name} on {} panicked", t.at.display());
                }
            }
        }
        if let Some((_, t)) = trees.iter().find(|(n, _)| n == name) {
            bail!(
                "clone={name} is served already on {}: mount a bind of it (mount --bind {} {})",
                t.at.display(),
                t.at.display(),
                target.display()
            );
        }
        if !std::fs::metadata(target).is_ok_and(|m| m.is_dir()) {
            bail!("cannot mount on {}: not a directory", target.display());
        }
        let fs = dualfs_fuse::DualFs::new(vol.clone(), crate::options::adapter_options(asked, true))
            .with_tree(name, &target.display().to_string())
            .map_err(|e| anyhow!("clone={name}: {e}"))?;
        // Made live once now, so that a refusal (a tree mounted read-only
        // elsewhere, a receive under way) is the mount's answer.
        drop(vol.enter_tree(name).map_err(|e| anyhow!("clone={name}: {e}"))?);
        let served = start_connection(fs, target, fsname, asked, ("tree", name), ())?;
        trees.push((name.to_string(), served));
        Ok(target.to_path_buf())
    }

    /// Waits until every writable tree served beside the first mount's is
    /// unmounted: the volume closes with the last of its trees.
    pub fn wait_trees(&self) {
        loop {
            let trees = std::mem::take(&mut *self.trees.lock().unwrap_or_else(PoisonError::into_inner));
            if trees.is_empty() {
                return;
            }
            log::info!("{} still mounted: serving until unmounted", crate::words::count(trees.len() as u64, "tree"));
            for (name, t) in trees {
                if t.thread.join().is_err() {
                    log::error!("the thread serving tree {name} on {} panicked", t.at.display());
                }
            }
        }
    }

    /// Waits until every snapshot served beside the volume is unmounted.
    pub fn wait_snapshots(&self) {
        let snaps = std::mem::take(&mut *self.snapshots.lock().unwrap_or_else(PoisonError::into_inner));
        if !snaps.is_empty() {
            log::info!(
                "{} still mounted: serving until unmounted",
                crate::words::count(snaps.len() as u64, "snapshot")
            );
        }
        for s in snaps {
            if s.thread.join().is_err() {
                log::error!("the thread serving the snapshot on {} panicked", s.at.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> MountConfig {
        crate::options::parse(&[s.to_string()]).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn a_remount_refuses_volume_options_other_than_those_served() {
        let w = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let served = p("commit=7,log=/x");
        assert_eq!(remount_refusal(&served, &w(&["commit=7", "log=/x", "nodiscard"])).unwrap(), None);
        let why = remount_refusal(&served, &w(&["discard"])).unwrap().unwrap_or_default();
        assert!(why.contains("option discard cannot be changed by a remount"), "{why}");
        let why = remount_refusal(&served, &w(&["commit=5"])).unwrap().unwrap_or_default();
        assert!(why.contains("option commit=5"), "the default asked of a volume served otherwise: {why}");
        assert!(remount_refusal(&p("discard"), &w(&["discard"])).unwrap().is_none());
        assert!(remount_refusal(&p("discard"), &w(&["nodiscard"])).unwrap().is_some());
    }

    #[test]
    fn volume_options_must_agree_and_mount_flags_may_not() {
        assert_eq!(differing(&p("commit=5"), &p("commit=5")), None);
        assert_eq!(differing(&p(""), &p("commit=5")), None, "the default, given");
        let why = differing(&p("commit=5"), &p("commit=30")).unwrap_or_default();
        assert!(
            why.contains("option commit differs") && why.contains("commit=5") && why.contains("commit=30"),
            "{why}"
        );
        let why = differing(&p(""), &p("nowriteback")).unwrap_or_default();
        assert!(why.contains("option writeback differs"), "{why}");
        let why = differing(&p("allow_other"), &p("")).unwrap_or_default();
        assert!(why.contains("option allow_other differs"), "{why}");
        let why = differing(&p("max_read=65536"), &p("")).unwrap_or_default();
        assert!(why.contains("max_read"), "{why}");
        // One mount's own flags.
        assert_eq!(differing(&p("nodev,nosuid"), &p("dev,suid,noexec,ro")), None);
        assert!(mount_flags(&p("ro,noexec")).contains(MsFlags::MS_RDONLY | MsFlags::MS_NOEXEC));
        assert_eq!(mount_flags(&p("dev,suid")), MsFlags::empty());
        assert_eq!(mount_flags(&p("")), MsFlags::MS_NOSUID | MsFlags::MS_NODEV);
    }
}
