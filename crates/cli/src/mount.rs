//! `dualfs mount`: open the volume, mount it, serve it until unmounted,
//! then close it cleanly so that the next mount needs no recovery.
//!
//! In the background (the default) the command starts a copy of itself
//! with `--daemon-child`, which mounts and says "ready" on a pipe; the
//! command returns only then, so that every error (a bad pair of devices, a
//! volume already mounted, a mount refused by the kernel) reaches the caller
//! and its exit status. No fork in a threaded process: the child is a fresh
//! process from the start.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use dualfs_engine::Volume;
use dualfs_engine::error::DeviceRole;
use dualfs_engine::repair::rescue;
use dualfs_fuse::DualFs;
use dualfs_fuse::clock::KernelClock;
use nix::sys::signal::{SigSet, Signal};

use crate::args::MountArgs;
use crate::devices::{Access, open_pair_for_mount};
use crate::exit::Exit;
use crate::options::{self, MountConfig};

/// The data device's superblock, when it says the meta-data device is
/// mirrored (anything else is for the open to judge).
fn mirrored(d: &Arc<dyn dualfs_engine::device::BlockDevice>) -> Option<dualfs_engine::format::superblock::Superblock> {
    let raw = dualfs_engine::device::read(d.as_ref(), DeviceRole::Data, 0, 1).ok()?;
    dualfs_engine::format::superblock::Superblock::decode(&raw).ok().filter(|sb| sb.mirrored())
}

/// What the background child prints once the volume is mounted.
const READY: &str = "dualfs-ready";

/// Runs the mount helper (`mount.fuse.dualfs`, or `dualfs SOURCE MNT -o
/// OPTS`): a `remount` changes the mount already there; a mount by root
/// gets a kernel file system's defaults (see [`options::KERNEL_DEFAULTS`]).
///
/// # Errors
/// As [`run`], or the remount fails.
pub fn run_helper(args: &MountArgs) -> Result<()> {
    let cfg = options::parse(&args.options)?;
    if cfg.remount {
        return crate::remount::run(args, &cfg);
    }
    let mut args = args.clone();
    if nix::unistd::geteuid().is_root() {
        args.options.insert(0, options::KERNEL_DEFAULTS.to_string());
    }
    run(&args)
}

/// Runs `dualfs mount`.
///
/// # Errors
/// Anything that keeps the volume from being mounted, or from closing cleanly.
pub fn run(args: &MountArgs) -> Result<()> {
    let cfg = options::parse(&args.options)?;
    if cfg.remount {
        return crate::remount::run(args, &cfg);
    }
    if args.daemon_child {
        // The parent has looked the devices and the stored options up.
        return serve(args);
    }
    let mut args = args.clone();
    let (meta, data) = crate::devices::named(&args.meta, Some(&args.data))?;
    (args.meta, args.data) = (meta, data);
    // Options stored by `dualfs tune -o` come first: the command line's win.
    if let Ok(crate::find::Probed::DualFs(sb)) = crate::find::probe(&args.meta) {
        let stored = options::defaults_not_overridden(&sb.mount_options_str(), &args.options);
        if !stored.is_empty() {
            log::debug!("default mount options from the superblock: {stored}");
            args.options.insert(0, stored);
        }
    }
    // Mounted already: the serving process adds this mount point.
    if crate::join::try_join(&args.meta, &args.data, &args.mountpoint, &args.options)? {
        return Ok(());
    }
    if args.foreground { serve(&args) } else { daemonize(&args) }
}

fn check_mountpoint(p: &Path) -> Result<()> {
    crate::itself::refuse_dead_mount(p)?;
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => bail!("cannot mount on {}: not a directory", p.display()),
        Err(e) => Err(e).with_context(|| format!("cannot mount on {}", p.display())),
    }
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("cannot resolve {}", p.display()))
}

/// Starts the background child and waits for it to be mounted or to fail.
fn daemonize(args: &MountArgs) -> Result<()> {
    options::parse(&args.options)?;
    check_mountpoint(&args.mountpoint)?;
    let exe = std::env::current_exe().context("cannot find the dualfs executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount").arg("--daemon-child");
    for o in &args.options {
        cmd.arg("-o").arg(o);
    }
    cmd.arg(absolute(&args.meta)?)
        .arg(absolute(&args.data)?)
        .arg(absolute(&args.mountpoint)?)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().context("cannot start the background process")?;
    let out = child.stdout.take().ok_or_else(|| anyhow!("no pipe to the background process"))?;
    let mut line = String::new();
    // EOF (the child died before it was ready) leaves the line empty.
    let _ = BufReader::new(out).read_line(&mut line);
    if line.trim_end() == READY {
        return Ok(());
    }
    let status = child.wait().context("lost the background process")?;
    match status.code() {
        // It said why on the caller's standard error.
        Some(code) if code != 0 => Err(Exit(code).into()),
        _ => bail!("the background process ended ({status}) before the volume was mounted: nothing is mounted"),
    }
}

/// SIGINT, SIGTERM and SIGHUP are taken by one thread with sigwait; they
/// are blocked before any other thread exists so that all inherit the mask.
fn block_signals() -> Result<SigSet> {
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(s);
    }
    set.thread_block().context("cannot block signals")?;
    Ok(set)
}

/// Unmounts on the first signal; the session then ends and `serve` closes
/// the volume. A busy mount is detached, and closes when its files do.
fn watch_signals(set: SigSet, unmount: impl Fn(bool) -> std::io::Result<()> + Send + 'static, mountpoint: PathBuf) {
    let spawned = thread::Builder::new().name("dualfs-signals".into()).spawn(move || {
        loop {
            let Ok(sig) = set.wait() else { return };
            log::info!("{sig}: unmounting {}", mountpoint.display());
            match unmount(false) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    log::warn!(
                        "{} is busy; detaching it: the volume closes when the last open file does",
                        mountpoint.display()
                    );
                    if let Err(e) = unmount(true) {
                        log::error!("cannot detach {}: {e}", mountpoint.display());
                    }
                }
                Err(e) => log::error!("cannot unmount {}: {e}", mountpoint.display()),
            }
        }
    });
    if let Err(e) = spawned {
        log::error!("no signal thread ({e}): unmount with fusermount3 -u");
    }
}

/// Calls `Volume::tick` about once a second: commits on the interval,
/// checkpoints by log volume. Stopped before the volume is closed.
struct Flusher {
    vol: Arc<Volume>,
    handle: JoinHandle<()>,
}

impl Flusher {
    fn start(vol: Arc<Volume>) -> Result<Flusher> {
        let v = vol.clone();
        let handle = thread::Builder::new()
            .name("dualfs-flusher".into())
            .spawn(move || {
                loop {
                    match v.background_step(Duration::from_secs(1)) {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(e) => log::error!("periodic commit failed: {e}"),
                    }
                }
            })
            .context("cannot start the flusher thread")?;
        Ok(Flusher { vol, handle })
    }

    fn stop(self) {
        self.vol.stop_background();
        if self.handle.join().is_err() {
            log::error!("the flusher thread panicked");
        }
    }
}

/// Writes everything and a final checkpoint.
fn close(vol: Arc<Volume>) -> Result<()> {
    match Arc::try_unwrap(vol) {
        Ok(v) => v.close().context("cannot close the volume cleanly")?,
        Err(v) => {
            // Should not happen: every thread holding it has been joined.
            log::error!("the volume is still in use at exit; writing a checkpoint only");
            v.sync().context("cannot write the final checkpoint")?;
        }
    }
    log::info!("volume closed cleanly");
    Ok(())
}

/// What the background process writes to once it lets go of the caller's
/// terminal: /dev/null, and the log file (or /dev/null). Opened before the
/// mount, so that a log file that cannot be opened fails the mount, with
/// its status, instead of a mount that said it was up.
struct Detached {
    null: std::fs::File,
    log: std::fs::File,
}

fn open_detached(cfg: &MountConfig, meta: &Path, data: &Path, mountpoint: &Path) -> Result<Detached> {
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").context("cannot open /dev/null")?;
    let log = match &cfg.log {
        Some(p) => {
            crate::itself::refuse_own_file(p, "the log file", meta, data, mountpoint)?;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("cannot open log file {}", p.display()))?
        }
        None => null.try_clone().context("cannot duplicate /dev/null")?,
    };
    Ok(Detached { null, log })
}

/// Lets go of the caller's terminal: standard output to /dev/null,
/// standard error to the log file. The pipe the parent waits on is kept
/// apart, so that what the mount has to say is in the log before the
/// parent returns (a script that reads the log right after `mount` finds
/// it there).
fn detach(files: Detached) -> Result<Ready> {
    let Detached { null, log } = files;
    let pipe = std::io::stdout().as_fd().try_clone_to_owned().context("cannot duplicate standard output")?;
    nix::unistd::dup2_stdout(&null).context("cannot redirect standard output")?;
    nix::unistd::dup2_stderr(&log).context("cannot redirect standard error")?;
    crate::log_to_file();
    // Do not keep the caller's working directory (and its file system) busy.
    std::env::set_current_dir("/").context("cannot change to /")?;
    Ok(Ready(std::fs::File::from(pipe)))
}

/// The pipe to the parent waiting for the mount.
struct Ready(std::fs::File);

impl Ready {
    /// Tells the parent that the mount is up.
    fn tell(mut self) {
        // The parent may be gone (killed while waiting); nothing to tell then.
        let _ = writeln!(self.0, "{READY}").and_then(|()| self.0.flush());
    }
}

/// The volume's clock: the kernel's, as the adapter sees it.
fn clock_of(clock: &Arc<KernelClock>) -> dualfs_engine::volume::Clock {
    let clock = clock.clone();
    Arc::new(move || clock.now())
}

/// Mounts and serves in this process until unmounted.
fn serve(args: &MountArgs) -> Result<()> {
    let cfg = options::parse(&args.options)?;
    if args.daemon_child {
        // Leave the caller's session: its terminal's signals are not ours.
        let _ = nix::unistd::setsid();
    } else {
        // A foreground mount's standard error is its log.
        crate::log_to_file();
    }
    let signals = block_signals()?;
    check_mountpoint(&args.mountpoint)?;
    let meta = absolute(&args.meta)?;
    let data = absolute(&args.data)?;
    let detached = if args.daemon_child {
        Some(open_detached(&cfg, &meta, &data, &args.mountpoint)?)
    } else {
        if let Some(l) = &cfg.log {
            crate::itself::refuse_own_file(l, "the log file", &meta, &data, &args.mountpoint)?;
        }
        None
    };
    if let Some(t) = &cfg.trace {
        crate::itself::refuse_own_file(t, "the trace file", &meta, &data, &args.mountpoint)?;
    }
    // A snapshot is read beside the live volume, whose mount holds the
    // lock: what a snapshot reaches is never moved nor overwritten while
    // it exists (DESIGN.md, snapshots).
    let ((m, d), devices_writable) = match &cfg.snapshot {
        Some(_) => (crate::devices::open_pair(&meta, &data, crate::devices::Access::Shared)?, false),
        None => open_pair_for_mount(&meta, &data, cfg.read_only)?,
    };
    let (m, d) = match &cfg.trace {
        Some(path) => crate::trace::wrap(path, m, d, &meta, &data)?,
        None => (m, d),
    };
    // A mirrored meta-data device: both copies, or one with -o degraded.
    let mut copies = vec![m];
    let mut copy_paths = vec![meta.clone()];
    // Not named: looked for among the block devices when the data device
    // says the volume is mirrored (`found`), or why it was not (`missed`).
    let (mut found, mut missed) = (None, None);
    let mirror = match &cfg.mirror {
        Some(p) => Some(absolute(p)?),
        // A snapshot reads beside the live mount, which holds the copies.
        None if cfg.snapshot.is_some() => None,
        None => match mirrored(&d) {
            Some(dsb) => match crate::find::mirror_copy(&meta, &dsb, "-o mirror=DEV") {
                Ok(p) => {
                    found = Some(p.clone());
                    Some(p)
                }
                Err(e) => {
                    missed = Some(e.to_string());
                    None
                }
            },
            None => None,
        },
    };
    if let Some(path) = mirror {
        crate::devices::check_distinct(&meta, &path)?;
        crate::devices::check_distinct(&path, &data)?;
        let access = if devices_writable { Access::Exclusive } else { Access::ExclusiveReadOnly };
        copies.push(crate::devices::open_one(&path, DeviceRole::Meta, access)?);
        copy_paths.push(path);
    }
    let assembled =
        Volume::assemble_meta(&copies, &d, cfg.degraded, devices_writable && !cfg.read_only).map_err(|e| {
            let found = match (&found, &missed) {
                (Some(p), _) => format!(" (the second copy found among the block devices: {})", p.display()),
                (None, Some(why)) => format!(" ({why})"),
                (None, None) => String::new(),
            };
            anyhow!("cannot mount {} and {}: {e}{found}", meta.display(), data.display())
        })?;
    // The meta-data devices in the volume's order, for `dualfs mirror`:
    // both copies, or the one a degraded mount runs on.
    let copy_paths: Vec<PathBuf> = if assembled.mirror.is_some() {
        copy_paths
    } else {
        copies.iter().zip(copy_paths).filter(|(c, _)| Arc::ptr_eq(c, &assembled.meta)).map(|(_, p)| p).collect()
    };
    let m = assembled.meta.clone();
    // The kernel's clock (see dualfs_fuse::clock), shared with the adapter.
    let clock = Arc::new(KernelClock::default());
    if let Some(name) = &cfg.clone {
        // The tree becomes the live one before the mount opens it.
        let vol = Volume::open_with_clock(m.clone(), d.clone(), options::engine_options(&cfg), clock_of(&clock))
            .map_err(|e| anyhow!("cannot open {} and {}: {e}", meta.display(), data.display()))?;
        vol.switch_tree(name).map_err(|e| anyhow!("cannot mount clone {name}: {e}"))?;
        vol.close().map_err(|e| anyhow!("cannot mount clone {name}: {e}"))?;
    }
    let vol = match &cfg.snapshot {
        Some(name) => Volume::open_snapshot(m, d, name, options::engine_options(&cfg))
            .map_err(|e| anyhow!("cannot mount snapshot {name} of {} and {}: {e}", meta.display(), data.display()))?,
        None => rescue::open_with_clock(m, d, options::engine_options(&cfg), clock_of(&clock))
            .map_err(|e| anyhow!("cannot mount {} and {}: {e}", meta.display(), data.display()))?,
    };
    // Said in the log once the terminal is let go: a recovery after a
    // crash or a shutdown is no fault, and a kernel file system's mount
    // prints nothing then (scripts compare what a remount prints).
    vol.attach_mirror(&assembled);
    let rec = &vol.open_report().recovery;
    let recovered = (rec.partial_segments > 0).then(|| {
        format!(
            "recovered {} written after checkpoint {}",
            crate::words::count(rec.partial_segments, "partial segment"),
            vol.open_report().checkpoint
        )
    });
    if let Some(mark) = vol.receive_pending() {
        // Said before the mount returns: on the caller's terminal too.
        log::warn!(
            "a receive is under way on this volume ({}): the tree is incomplete until it ends; receive the same \
             stream again to finish it, or run `dualfs receive --abort {}` to go back to the last complete tree",
            dualfs_engine::volume::describe_mark(&mark),
            args.mountpoint.display()
        );
    }
    let vol = Arc::new(vol);
    if vol.live_tree() != dualfs_engine::format::snapshot::DEFAULT_TREE {
        log::info!("the live tree is {}", vol.live_tree());
    }
    let fsname = cfg.fsname.clone().unwrap_or_else(|| match &cfg.snapshot {
        Some(name) => format!("{}#{}@{name}", meta.display(), data.display()),
        None => format!("{}#{}", meta.display(), data.display()),
    });
    let mountpoint = std::fs::canonicalize(&args.mountpoint).or_else(|_| absolute(&args.mountpoint))?;
    let opener = crate::migrate::opener(mountpoint.clone());
    let fs = DualFs::new(vol.clone(), options::adapter_options(&cfg, devices_writable))
        .with_clock(clock)
        .with_device_opener(opener.clone())
        .with_meta_paths(opener, copy_paths);
    // A writable volume may serve other trees beside this one (join.rs):
    // each request enters this tree first.
    let primary = vol.live_tree();
    let fs = if cfg.snapshot.is_none() && !vol.is_read_only() {
        fs.with_tree(&primary, &mountpoint.display().to_string())
            .map_err(|e| anyhow!("cannot serve tree {primary}: {e}"))?
    } else {
        fs
    };
    let notifier = fs.notifier_slot();
    let window = fs.window_slot();
    let options = crate::transport::options(&fsname, &cfg);
    let session = match crate::transport::Mounted::start(fs, &args.mountpoint, &options, &cfg) {
        Ok(m) => m,
        Err(e) => {
            close(vol)?;
            return Err(e);
        }
    };
    let _ = notifier.set(Box::new(session.notifier()));
    // A second mount of the volume joins this process (join.rs); not a
    // snapshot's, which reads beside the live volume's.
    let joins = match &cfg.snapshot {
        None => Some(crate::join::Joins::start(vol.clone(), &cfg, (&meta, &data), &mountpoint, &fsname)),
        Some(_) => None,
    };
    let session_unmount = session.unmounter();
    let unmount: Box<dyn Fn(bool) -> std::io::Result<()> + Send> = match &joins {
        Some(j) => {
            let j = j.clone();
            Box::new(move |lazy| j.unmount_all(lazy, &session_unmount))
        }
        None => Box::new(session_unmount),
    };
    watch_signals(signals, unmount, mountpoint.clone());
    if let Some(w) = crate::bdi::dirty_window(&mountpoint, cfg.dirty_window, cfg.stream_window) {
        let _ = window.set(w);
    }
    if cfg.read_ahead > 0 {
        crate::bdi::read_ahead(&mountpoint, cfg.read_ahead);
    }
    let flusher = Flusher::start(vol.clone())?;
    // The open left a large inode map on disk: the rest is read now, while
    // requests are served (Volume::finish_loading).
    let loader = {
        let vol = vol.clone();
        std::thread::Builder::new()
            .name("dualfs-load".into())
            .spawn(move || {
                if let Err(e) = vol.finish_loading() {
                    log::error!("reading the rest of the inode map: {e}");
                }
            })
            .context("cannot start the thread that loads the inode map")?
    };
    let ready = detached.map(detach).transpose()?;
    for wait in crate::holder::take_waits() {
        log::info!("{wait}");
    }
    if let Some(line) = recovered {
        log::info!("{line}");
    }
    log::info!("mounted {} and {} on {}", meta.display(), data.display(), args.mountpoint.display());
    if let Some(path) = &found {
        let taken = if assembled.mirror.is_some() { "in use" } else { "not in use" };
        log::info!("the meta-data mirror's second copy {}, found among the block devices: {taken}", path.display());
    }
    log::info!("{}", session.transport());
    // Said here, in the mount's log: what the engine logged while opening
    // came before a background mount's log was set up.
    if let Some(why) = &assembled.degraded {
        log::warn!("the meta-data mirror is degraded: {why}");
    }
    if let Some(n) = assembled.mirror.as_ref().map(|m| m.healed()).filter(|&n| n > 0) {
        log::warn!("{n} meta-data blocks failed their check on the first copy: read from the mirror and rewritten");
    }
    log::warn!(
        "sync(1) does not make data durable on a FUSE file system: data is committed every {} s; run `dualfs \
         sync {}` (or fsync) to make it durable now",
        vol.options().commit_interval.as_secs(),
        args.mountpoint.display()
    );
    if let Some(r) = ready {
        r.tell();
    }
    let served = session.run();
    if let Some(j) = &joins {
        // The volume closes with the last of its trees.
        j.wait_trees();
        j.close();
    }
    if vol.live_tree() != primary && !vol.is_read_only() {
        // The tree mounted first is the live one again, as it was opened:
        // the next mount without clone= finds it.
        if let Err(e) = vol.enter_tree(&primary) {
            log::error!("cannot make {primary} the live tree again: {e}");
        }
    }
    log::info!("unmounted: no mount of the volume is left (first mounted on {})", args.mountpoint.display());
    // Tells a mount of the same volume that finds it locked that it is
    // closing, and worth waiting for (see holder.rs).
    if let Err(e) = nix::sys::prctl::set_name(crate::holder::CLOSING_NAME) {
        log::debug!("cannot rename the process: {e}");
    }
    flusher.stop();
    if loader.join().is_err() {
        log::error!("the thread loading the inode map panicked");
    }
    close(vol)?;
    // The assembled meta-data device (and its mirror) hold the devices'
    // lock too: let it go with the volume.
    drop((assembled, copies));
    // Snapshots this process serves beside the volume stay mounted until
    // unmounted; the devices' lock is let go meanwhile (they read without it).
    if let Some(j) = &joins {
        j.wait_snapshots();
    }
    served
}
