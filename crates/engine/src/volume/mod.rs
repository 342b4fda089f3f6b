//! [`Volume`]: a mounted DualFS, with a POSIX-style API and no FUSE types.
//!
//! Concurrency: one lock (`fs`) guards every in-memory structure; operations
//! hold it only while they compute. Writing a partial segment happens outside
//! it, serialised by the `commit` lock, so readers and writers go on while
//! the log is written. Lock order: `commit`, then `reuse`, then `fs`.
//!
//! Each mutating operation first makes sure the active partial segment has
//! room for the most an operation can add ([`crate::meta_log::OP_MAX_BLOCKS`]);
//! if not, it seals and writes it first. That is what makes every operation
//! land whole in one partial segment, the transaction unit of the log.

mod atime;
mod background;
mod clean;
mod clock;
mod commit;
mod discard;
mod fallocate;
mod files;
mod flags;
mod fsync;
mod gate;
mod in_use;
mod label;
mod listed;
mod load;
mod migrate;
mod mirror;
mod mkfs;
mod ops;
mod orphans;
pub mod quota;
mod receive;
mod resize;
mod resync;
mod scrub;
mod send;
mod shrink;
mod shutdown;
mod snapshot;
mod space;
mod tree;
mod tree_space;
pub mod types;
mod xattrs;

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, TryLockError};
use std::time::Duration;

/// The inode flags of `Attr::flags` and `Volume::set_flags`.
pub use crate::format::inode::{
    FLAG_APPEND, FLAG_DIRSYNC, FLAG_IMMUTABLE, FLAG_NOATIME, FLAG_NODUMP, FLAG_PROJINHERIT, FLAG_SYNC, KNOWN_FLAGS,
};
pub use atime::atime_due;
pub use clean::{CleanReport, CleanRequest};
pub use clock::{Clock, SystemClock, TimeSource};
pub use discard::{TrimRange, TrimReport};
pub use gate::{GRACE, MIN_TURN, SLICE, TreeGuard, TreeServed};
pub use migrate::MigrateReport;
pub use mkfs::probe_existing;
pub use receive::{AbortReport, RECEIVED_XATTR, RECEIVING_XATTR, ReceiveReport, Touched, describe_mark};
pub use resize::{ResizeReport, ResizeRequest, WHOLE_DEVICE};
pub use resync::{MirrorChange, MirrorReport};
pub use scrub::{BadMeta, DataError, ScrubOptions, ScrubReport};
pub use send::{SendReport, send};
pub use shrink::MoveReport;
pub use snapshot::SnapshotView;
pub use space::{DATA_LOW_PERCENT, META_LOW_PERCENT, no_space_advice};
pub use tree_space::{TreeKind, TreeSpace};
pub use types::*;

// What callers of the volume name in its API but is defined below it: the
// FUSE adapter and the tools import these from here, never from the layers
// that define them.
pub use crate::meta_log::cleaner::Policy;
pub use crate::namespace::acl::AclKind;
pub use crate::namespace::file::Whence;
pub use crate::namespace::xattr::SetMode;

use crate::device::{BlockDevice, SwitchDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::meta_log::Log;
use crate::meta_log::mount::OpenReport;
use crate::meta_log::segments::OpKind;
use crate::namespace::{Fs, FsConfig};
use crate::types::{FileKind, InodeNo, Timestamp};
use background::Kick;

/// Attempts of a reader that read the device without the lock before it
/// reads under it ([`Volume::read_op`]).
const DEFERRED_READS_MAX: usize = 8;

#[derive(Debug, Default)]
pub(super) struct CommitState {
    next_id: u64,
    /// The commit under way is one a caller waits for: its last group is
    /// twinned (`Log::twin_next_group`).
    acknowledged: bool,
}

/// A mounted DualFS volume.
pub struct Volume {
    fs: Mutex<Fs>,
    /// The page cache's spare buffers, which writes fill before taking
    /// `fs` ([`crate::namespace::spare::Prefilled`]).
    spare: crate::namespace::spare::SparePages,
    commit: Mutex<CommitState>,
    /// Held shared by readers between resolving a read and finishing it, and
    /// exclusively while freed data blocks are handed back to the allocator:
    /// a block cannot be reused under a read that is still looking at it.
    reuse: RwLock<()>,
    options: MountOptions,
    /// Refusing changes (EROFS) and writing nothing: mounted `ro`, or
    /// remounted read-only since ([`Volume::set_read_only`]). Changed only
    /// with `fs` held, so that an operation sees one value throughout.
    read_only: AtomicBool,
    /// Writing nothing at all (commits, checkpoints, the close): set with
    /// `read_only`, except while a remount read-only writes what came before.
    no_writes: AtomicBool,
    /// Shut down ([`Volume::shut_down`]): every call fails with
    /// [`Error::ShutDown`] and nothing is written any more (`no_writes` is
    /// set with it).
    shut: AtomicBool,
    /// The open left the inode map on disk, so the orphans it would have
    /// finished wait for [`Volume::finish_loading`].
    orphans_pending: AtomicBool,
    /// Why the volume may never become writable, if it may not (features
    /// this version cannot write).
    never_writable: Option<String>,
    clock: Clock,
    /// Set when a write failed: the reason; every later change is refused.
    failed: Mutex<Option<String>>,
    /// When the last commit ended (a reading of `clock`).
    last_commit: Mutex<Duration>,
    /// When an operation last changed something (a reading of `clock`): the
    /// cleaner works in idle time.
    last_change: Mutex<Duration>,
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    /// The handles under `meta` and `data` that a migration switches to
    /// another device (`volume/migrate.rs`); none on a volume opened by
    /// repair or on a snapshot.
    switches: Option<[Arc<SwitchDevice>; 2]>,
    open_report: OpenReport,
    commits: AtomicU64,
    /// Meta-data windows read by readers with the lock released.
    deferred_reads: AtomicU64,
    /// The meta-data mirror this volume runs on, if any ([`Volume::attach_mirror`]).
    mirror: std::sync::RwLock<Option<mirror::Attached>>,
    /// Work for the background writer ([`Volume::background_step`]).
    background: (Mutex<Kick>, std::sync::Condvar),
    /// Held by a cleaning pass: one at a time, so that each report tells
    /// its own moves (the background cleaner skips a turn rather than wait).
    cleaning: Mutex<()>,
    /// Held while data is written in place outside a commit (the data
    /// copied into fsync records, [`Volume::write_home`]) and by every
    /// writer of a commit group or fsync record from before its data flush:
    /// the flush must come after those writes, which the group may make
    /// reachable. Lock order: `commit`, `home`, `reuse`, `fs`.
    home: Mutex<()>,
    /// Ids of the background writes of [`Volume::write_home`] (top bit set,
    /// apart from commit ids).
    home_ids: AtomicU64,
    /// [`Volume::write_home`] wrote data the data device has not flushed
    /// since: the next group flushes it before its meta-data, even if it
    /// has no data of its own. Changed with `home` held.
    home_unflushed: std::sync::atomic::AtomicBool,
    /// Held by the writer relieving memory ([`Volume::commit_under_pressure`]).
    pressure: Mutex<()>,
    /// Files waiting for an fsync (group commit).
    fsync_queue: Mutex<fsync::FsyncQueue>,
    /// What fsyncs turned into.
    fsyncs_count: fsync::FsyncCounters,
    /// Data blocks commit groups wrote, by what the commit was for.
    data_writes: commit::DataWrites,
    /// Whether the data and the meta-data device were last found running
    /// low ([`Volume::warn_if_low`]): each start is logged once.
    low_warned: Mutex<[bool; 2]>,
    /// What replaying fsync records at open did.
    replay_report: crate::namespace::replay::ReplayReport,
    /// Held while the background discard of `-o discard` runs: one at a
    /// time, and a writer short of space waits for it.
    discarding: Mutex<()>,
    /// The meta-data and the data device were found unable to discard.
    discard_unsupported: [AtomicBool; 2],
    /// Data blocks and log segments `-o discard` and trims discarded.
    discarded_blocks: AtomicU64,
    discarded_segments: AtomicU64,
    /// The kept trees served beside this one ([`Volume::open_tree`]):
    /// shared with their views, which leave it as they go.
    trees_in_use: Arc<Mutex<in_use::TreesInUse>>,
    /// On a view of a kept tree: its place in the live volume's
    /// `trees_in_use`, given up when the view goes.
    in_use: Option<in_use::TreeUse>,
    /// Which writable tree is entered, and what the others keep
    /// ([`Volume::enter_tree`]).
    gate: Arc<gate::Gate>,
    /// Held while the orphans an open left for later are finished: a
    /// switch of the live tree waits for them (they are the opened tree's).
    orphan_work: Mutex<()>,
    /// The directories listed lately, for reading their files ahead
    /// (`listed.rs`). Taken after `fs`, never before.
    listed: Mutex<listed::Listed>,
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volume").field("options", &self.options).finish_non_exhaustive()
    }
}

thread_local! {
    /// Nanoseconds this thread waited for a lock of a volume that another
    /// thread held ([`lock_wait_ns`]).
    static LOCK_WAIT_NS: Cell<u64> = const { Cell::new(0) };
}

/// Nanoseconds the calling thread has waited so far, in all, for the
/// volumes' locks while another thread held them (the file-system lock
/// behind a seal, the commit lock behind a commit...). A request's share
/// is the difference across it: the FUSE adapter reports it per opcode
/// (`dualfs stats`), so that a slow request tells waiting from working.
#[must_use]
pub fn lock_wait_ns() -> u64 {
    LOCK_WAIT_NS.with(Cell::get)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in another thread leaves the structures as they were between
    // two statements of one operation; going on is no worse than stopping.
    match m.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => {
            // The machine's clock, not the volume's: a figure for `dualfs
            // stats`, never an input to what the volume does.
            let start = std::time::Instant::now();
            let g = m.lock().unwrap_or_else(PoisonError::into_inner);
            let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            LOCK_WAIT_NS.with(|c| c.set(c.get().saturating_add(ns)));
            g
        }
    }
}

/// Why a volume restored from a dump with replaced names may never be
/// written: its names are not at their hash positions (FORMAT.md 1.4).
fn scanned_names(log: &Log) -> Option<String> {
    log.superblock().scanned_names().then(|| {
        "the volume was restored from a dump whose names were replaced (dualfs metarestore): it can only be \
         mounted read-only (-o ro)"
            .to_string()
    })
}

impl Volume {
    /// Opens a volume: newest checkpoint, roll-forward, orphan cleanup, and
    /// (unless read-only) a checkpoint if anything was recovered.
    ///
    /// # Errors
    /// The devices are not a DualFS pair, a structure is corrupt, I/O fails.
    pub fn open(meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>, options: MountOptions) -> Result<Volume> {
        Volume::open_with_clock(meta, data, options, SystemClock::shared())
    }

    /// [`Volume::open`] with a given clock: every time the volume stamps or
    /// measures comes from it.
    ///
    /// # Errors
    /// As [`Volume::open`].
    pub fn open_with_clock(
        meta: Arc<dyn BlockDevice>,
        data: Arc<dyn BlockDevice>,
        options: MountOptions,
        clock: Clock,
    ) -> Result<Volume> {
        if !options.read_only {
            mirror::refuse_one_copy(meta.as_ref(), data.as_ref())?;
        }
        let switches = [Arc::new(SwitchDevice::new(meta)), Arc::new(SwitchDevice::new(data))];
        let (meta, data): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (switches[0].clone(), switches[1].clone());
        let (log, report) =
            Log::open_lazily(meta.clone(), data.clone(), options.lazy_inode_map_min_blocks, !options.no_recovery)?;
        // A loss not accepted keeps the volume read-only: the next
        // checkpoint would make it permanent behind the user's back.
        let unaccepted = report.loss.as_ref().filter(|_| !options.accept_loss).map(|loss| {
            format!(
                "the volume is damaged: {loss}. Writing would make the loss permanent: mount read-only \
                 (-o ro) to look at what is left, or accept the state before the damage: mount with \
                 -o recover=older, or repair it with `dualfs fsck -y`"
            )
        });
        if let Some(why) = &unaccepted
            && !options.read_only
        {
            return Err(Error::Damaged(why.clone()));
        }
        if let Some(loss) = &report.loss
            && options.accept_loss
        {
            log::warn!("accepting the loss (recover=older): {loss}");
        }
        if let Some(why) = scanned_names(&log)
            && !options.read_only
        {
            return Err(Error::ReadOnly(why));
        }
        // A volume not rolled forward is never written: a checkpoint would
        // make the commits after the one it opened from lost for good.
        let never = if options.no_recovery {
            if !options.read_only {
                return Err(Error::Invalid("norecovery opens a volume read-only only"));
            }
            log::info!(
                "opened at checkpoint {} without rolling the log forward (norecovery): later commits are not shown",
                report.checkpoint
            );
            Some(format!(
                "it was opened at checkpoint {} without rolling its log forward (norecovery): writing would lose \
                 the commits after it; unmount and mount it without norecovery",
                report.checkpoint
            ))
        } else {
            unaccepted
        };
        let mut vol = Volume::assemble(log, report, meta, data, options, never, clock)?;
        vol.switches = Some(switches);
        if !vol.options.read_only {
            // The head moved away from the checkpoint's log position when
            // anything was read, a torn tail was met or the log was moved on
            // past a clean end (a twin's blocks beyond it): only a checkpoint
            // makes the new position the one a later roll-forward starts from.
            let recovery = &vol.open_report.recovery;
            let moved = recovery.blocks_scanned > 0 || !recovery.end.is_clean() || lock(&vol.fs).log.is_detached();
            // And the older slot must not list a snapshot the newer one
            // deleted, whose blocks are free now (DESIGN.md, "Discard").
            let older = lock(&vol.fs).log.older_checkpoint_lists_other_snapshots();
            vol.finish_recovery(moved || older, true)?;
            // A volume of an older format that keeps snapshots gets their
            // records (pins, the held count) with its next checkpoint, so
            // that its next mount reads neither an image nor a bitmap whole.
            let upgrade = {
                let fs = lock(&vol.fs);
                let sb = fs.log.superblock();
                !fs.log.snapshots().is_empty()
                    && sb.incompat & crate::format::superblock::INCOMPAT_SNAPSHOT_RECORDS == 0
                    && sb.incompat & crate::format::superblock::INCOMPAT_FSYNC_LOG != 0
            };
            if upgrade {
                vol.mark_features(
                    crate::format::superblock::INCOMPAT_SNAPSHOT_RECORDS,
                    crate::format::superblock::FORMAT_MINOR_SNAPSHOT_RECORDS,
                )?;
            }
        }
        vol.start_quotas()?;
        Ok(vol)
    }

    /// A volume over a log already opened (or rebuilt, by repair), with
    /// the fsync records roll-forward found replayed and nothing else done:
    /// the caller finishes recovery. `never` says why the volume may never
    /// be written, if it may not (besides unknown read-only-compatible
    /// features, which this adds).
    ///
    /// # Errors
    /// Replaying an fsync record fails.
    pub(crate) fn assemble(
        log: Log,
        report: OpenReport,
        meta: Arc<dyn BlockDevice>,
        data: Arc<dyn BlockDevice>,
        options: MountOptions,
        never: Option<String>,
        clock: Clock,
    ) -> Result<Volume> {
        let mut options = options;
        let unknown = log.superblock().ro_compat & !crate::format::superblock::KNOWN_RO_COMPAT;
        let never_writable = (unknown != 0)
            .then(|| format!("the volume uses read-only-compatible features {unknown:#x} this version does not know"))
            .or(never)
            .or_else(|| scanned_names(&log));
        if let Some(why) = &never_writable
            && !options.read_only
        {
            log::warn!("mounting read-only: {why}");
            options.read_only = true;
        }
        let strict = options.order == Order::Strict;
        if strict {
            // A prefix of every operation: nothing may wait behind a later one.
            options.data_expire = Duration::ZERO;
        }
        let config = FsConfig {
            inline_max: log.superblock().inline_max,
            dirty_data_limit: options.dirty_data_limit,
            cache_budget: options.cache_budget,
            cache_bytes: options.cache_bytes,
            hold_replacements: !options.data_expire.is_zero(),
            strict,
        };
        let mut fs = Fs::new(log, config);
        fs.log.set_cache_limits(config.cache_budget, config.cache_bytes);
        fs.log.space_mut().set_discard(options.discard && !options.read_only);
        fs.log.set_inode_map_budget(options.inode_map_bytes);
        fs.log.set_usage_budget(options.usage_table_bytes);
        fs.log.set_data_space_budget(options.data_space_bytes);
        // What fsyncs made durable after the last commit group.
        let pending = fs.log.take_pending_fsync();
        let replay_report = if pending.is_empty() { Default::default() } else { fs.replay_fsync(pending)? };
        let vol = Volume {
            spare: fs.pages.spare().clone(),
            fs: Mutex::new(fs),
            commit: Mutex::new(CommitState::default()),
            reuse: RwLock::new(()),
            options,
            read_only: AtomicBool::new(options.read_only),
            no_writes: AtomicBool::new(options.read_only),
            shut: AtomicBool::new(false),
            never_writable,
            clock: clock.clone(),
            failed: Mutex::new(None),
            last_commit: Mutex::new(clock.reading()),
            last_change: Mutex::new(clock.reading()),
            meta,
            data,
            switches: None,
            open_report: report,
            commits: AtomicU64::new(0),
            deferred_reads: AtomicU64::new(0),
            mirror: std::sync::RwLock::new(None),
            orphans_pending: AtomicBool::new(false),
            background: (Mutex::new(Kick::default()), std::sync::Condvar::new()),
            cleaning: Mutex::new(()),
            home: Mutex::new(()),
            home_ids: AtomicU64::new(1 << 63),
            home_unflushed: std::sync::atomic::AtomicBool::new(false),
            pressure: Mutex::new(()),
            fsync_queue: Mutex::new(fsync::FsyncQueue::default()),
            fsyncs_count: fsync::FsyncCounters::default(),
            data_writes: commit::DataWrites::default(),
            low_warned: Mutex::new([false; 2]),
            replay_report,
            discarding: Mutex::new(()),
            discard_unsupported: [AtomicBool::new(false), AtomicBool::new(false)],
            discarded_blocks: AtomicU64::new(0),
            discarded_segments: AtomicU64::new(0),
            trees_in_use: Arc::default(),
            in_use: None,
            gate: Arc::default(),
            orphan_work: Mutex::new(()),
            listed: Mutex::default(),
        };
        Ok(vol)
    }

    /// One step of repair's work under the file-system lock, with room in
    /// the active commit group ensured first, as for any operation.
    ///
    /// # Errors
    /// Whatever the step returns; a device fails.
    pub(crate) fn repair_step<R>(&self, f: impl FnMut(&mut Fs, Timestamp) -> Result<R>) -> Result<R> {
        self.mutate(OpKind::Grow, f)
    }

    /// What opening read-write does after roll-forward: finish the orphans'
    /// deletions and truncations, and checkpoint if anything changed (or
    /// `checkpoint` asks for one). At open (`at_open`) with the inode map
    /// left on disk, the orphans
    /// wait for [`Volume::finish_loading`]; otherwise the map is read whole
    /// first.
    fn finish_recovery(&self, checkpoint: bool, at_open: bool) -> Result<()> {
        if self.open_report.superblock_from_copy {
            // Repair what can be repaired: the data device's copy is whole.
            let sb = self.degraded_superblock(lock(&self.fs).log.superblock_on_disk().clone());
            crate::device::write(self.meta.as_ref(), DeviceRole::Meta, 0, &sb.encode())?;
            crate::device::flush(self.meta.as_ref(), DeviceRole::Meta)?;
            log::warn!("the meta-data device's superblock was written again from the data device's copy");
        }
        if self.open_report.data_superblock_stale {
            self.rewrite_data_superblock()?;
        }
        if !lock(&self.fs).log.ifile().inodes_complete() {
            if at_open {
                self.orphans_pending.store(true, Ordering::Release);
                return if checkpoint { self.checkpoint() } else { Ok(()) };
            }
            self.orphans_pending.store(false, Ordering::Release);
            self.finish_loading()?;
        }
        let orphans = lock(&self.fs).log.ifile().orphans();
        for ino in &orphans {
            self.finish_orphan(*ino)?;
        }
        if checkpoint || !orphans.is_empty() {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Whether the volume refuses changes now (mounted or remounted read-only).
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::Acquire)
    }

    /// Switches a mounted volume between read-only and read-write, as a
    /// kernel file system's remount does.
    ///
    /// To read-only: from the moment the switch is made no operation
    /// changes anything (they get `ReadOnly`, EROFS); what earlier ones
    /// changed is committed and a checkpoint written, so that the devices
    /// hold the whole volume, ready to be copied, and the next open needs
    /// no roll-forward. To read-write: a volume opened read-only finishes
    /// what its open left undone (orphans, the recovery checkpoint).
    ///
    /// # Errors
    /// `ReadOnly` when the volume can never be written (unknown features,
    /// or it turned read-only after a failed write); a device fails while
    /// committing (the volume then stays writable, for a later try).
    pub fn set_read_only(&self, read_only: bool) -> Result<()> {
        if read_only == self.is_read_only() {
            return Ok(());
        }
        if read_only {
            // Under the lock, so that no operation is between its check
            // and its change: every change made is in memory now, and none
            // follows.
            self.read_only_locked(&mut lock(&self.fs), true);
            if crate::faults::active(crate::faults::Fault::RemountWithoutCommit) {
                self.no_writes.store(true, Ordering::Release);
                return Ok(());
            }
            let written = self.checkpoint();
            match &written {
                Ok(()) => self.no_writes.store(true, Ordering::Release),
                Err(_) => self.read_only_locked(&mut lock(&self.fs), false),
            }
            return written;
        }
        if let Some(why) = &self.never_writable {
            return Err(Error::ReadOnly(why.clone()));
        }
        if let Some(why) = lock(&self.failed).as_ref() {
            return Err(Error::ReadOnly(format!("turned read-only after an error: {why}")));
        }
        self.no_writes.store(false, Ordering::Release);
        self.read_only_locked(&mut lock(&self.fs), false);
        let finished = self.finish_recovery(true, false);
        if finished.is_err() {
            self.read_only_locked(&mut lock(&self.fs), true);
            self.no_writes.store(true, Ordering::Release);
        }
        finished
    }

    /// Sets the flag; `_fs` is the proof that the file-system lock is held.
    fn read_only_locked(&self, _fs: &mut Fs, read_only: bool) {
        self.read_only.store(read_only, Ordering::Release);
    }

    /// What opening found: checkpoint, fallback, roll-forward.
    #[must_use]
    pub fn open_report(&self) -> &OpenReport {
        &self.open_report
    }

    /// Adds damage found on the way to this volume (a rescue by repair)
    /// to what opening reports.
    pub(crate) fn note_damage(&mut self, what: String) {
        log::error!("{what}");
        self.open_report.damage.push(what);
    }

    /// What replaying the fsync records found after the last commit group did.
    #[must_use]
    pub fn replay_report(&self) -> crate::namespace::replay::ReplayReport {
        self.replay_report
    }

    /// Why the volume turned read-only after a device error, if it did:
    /// the error that made it so, kept for `dualfs stats` and the log.
    #[must_use]
    pub fn failure(&self) -> Option<String> {
        lock(&self.failed).clone()
    }

    /// The mount options.
    #[must_use]
    pub fn options(&self) -> &MountOptions {
        &self.options
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Time elapsed since `earlier`, a reading of the volume's clock.
    fn since(&self, earlier: Duration) -> Duration {
        clock::since(self.clock.as_ref(), earlier)
    }

    /// Runs `f` with the file system locked, for inspection and checking.
    pub fn with_fs<R>(&self, f: impl FnOnce(&mut Fs) -> R) -> R {
        f(&mut lock(&self.fs))
    }

    /// Runs a reader with the file system locked but without reading a
    /// device under the lock: a meta-data miss ends the attempt
    /// ([`Error::MustRead`]), the block's read-ahead window is read with
    /// the lock released (other requests go on meanwhile), kept unless the
    /// log rewrote a block in between, and the reader runs again. So a
    /// cold `stat` never makes a warm one wait for the device. `f` must
    /// change nothing before its last read (readers only stamp access
    /// times, at their end). After [`DEFERRED_READS_MAX`] attempts (a log
    /// busy rewriting the same blocks) it reads under the lock.
    pub(crate) fn read_op<R>(&self, mut f: impl FnMut(&mut Fs) -> Result<R>) -> Result<R> {
        for attempt in 0.. {
            self.check_up()?;
            let mut fs = lock(&self.fs);
            let defer = attempt < DEFERRED_READS_MAX;
            fs.log.set_defer_reads(defer);
            let r = f(&mut fs);
            fs.log.set_defer_reads(false);
            let Err(Error::MustRead(block)) = r else {
                // Readers commit nothing, so a walk over the whole volume
                // would never reach the eviction at a commit's end.
                fs.log.trim_cache_if_over();
                return r;
            };
            let (start, count, generation) = fs.log.read_window(crate::types::MetaBlock(block));
            drop(fs);
            let raw = crate::device::read(self.meta.as_ref(), DeviceRole::Meta, start.0, count)?;
            self.deferred_reads.fetch_add(1, Ordering::Relaxed);
            lock(&self.fs).log.fill_read_window(generation, start, &raw);
        }
        unreachable!("the loop returns")
    }

    /// Loads what a change is about to need (the names and inodes it
    /// reads) the way [`Volume::read_op`] does, so that the change itself,
    /// which holds the lock throughout, finds it in memory. Errors are the
    /// change's to report: it meets them again.
    pub(crate) fn prefetch(&self, f: impl FnMut(&mut Fs) -> Result<()>) {
        let _ = self.read_op(f);
    }

    fn check_writable(&self) -> Result<()> {
        self.check_up()?;
        if self.is_read_only() {
            return Err(Error::ReadOnly("mounted read-only".into()));
        }
        if let Some(why) = lock(&self.failed).as_ref() {
            return Err(Error::ReadOnly(format!("turned read-only after an error: {why}")));
        }
        Ok(())
    }

    /// Remembers a failure that leaves memory and disk out of step: from
    /// now on the volume refuses changes.
    fn fail(&self, e: &Error) {
        let mut f = lock(&self.failed);
        if f.is_none() {
            // Damage found after mount (a table block is read when first
            // needed): say what repairs it, as a refused mount would.
            let hint = if matches!(e, Error::Corrupt { .. } | Error::Damaged(_)) {
                "; unmount, then `dualfs fsck` says what is lost and `-o recover=rebuild` or `fsck -y` repairs it"
            } else {
                ""
            };
            log::error!("DualFS volume turned read-only: {e}{hint}");
            *f = Some(e.to_string());
        }
    }

    /// Runs one mutating step with room guaranteed in the active partial segment.
    fn mutate<R>(&self, kind: OpKind, mut f: impl FnMut(&mut Fs, Timestamp) -> Result<R>) -> Result<R> {
        let mut space_attempts = 0;
        loop {
            self.check_writable()?;
            let res = {
                let mut fs = lock(&self.fs);
                fs.log.set_defer_reads(false);
                // Again under the lock: a remount read-only may have come
                // between the check above and the lock.
                self.check_writable()?;
                if fs.log.needs_seal() {
                    None
                } else {
                    Some(match fs.log.check_meta_space(kind) {
                        Ok(()) => {
                            let now = self.now();
                            fs.quota_now = now;
                            let r = f(&mut fs, now);
                            // Between operations: the inode map's blocks
                            // past its budget go (those it dirtied stay).
                            fs.log.trim_tables();
                            r
                        }
                        Err(e) => Err(e),
                    })
                }
            };
            match res {
                None => self.commit_for_room()?,
                Some(Ok(r)) => {
                    if kind != OpKind::Clean {
                        *lock(&self.last_change) = self.clock.reading();
                    }
                    return Ok(r);
                }
                Some(Err(Error::NoSpace(DeviceRole::Data))) if space_attempts == 0 => {
                    // Frees waiting for a durable commit come back after one
                    // (and after their discard, with `-o discard`), blocks
                    // of a deleted snapshot after a checkpoint.
                    space_attempts = 1;
                    if lock(&self.fs).log.deleted_snapshots_retiring() {
                        self.checkpoint()?;
                    } else {
                        self.commit()?;
                    }
                    self.discard_queued();
                }
                Some(Err(Error::NoSpace(DeviceRole::Meta))) if space_attempts < 8 && kind != OpKind::Clean => {
                    // Segments waiting for a checkpoint come back after one;
                    // then the cleaner makes room, as long as it frees any.
                    space_attempts += 1;
                    if space_attempts == 1 {
                        self.checkpoint_for_room()?;
                    } else {
                        let req = CleanRequest {
                            max_segments: 8,
                            policy: crate::meta_log::cleaner::Policy::Greedy,
                            max_utilization: 0.95,
                            free_now: true,
                        };
                        if self.clean(req, &mut |_, _| {})?.cleaner.segments_freed == 0 {
                            space_attempts = 8;
                        }
                    }
                }
                Some(Err(e @ (Error::Io { .. } | Error::Corrupt { .. }))) => {
                    self.fail(&e);
                    return Err(e);
                }
                Some(r) => return r,
            }
        }
    }

    /// Makes everything durable and writes a final checkpoint, so that the
    /// next open needs no roll-forward. Inodes still referenced are released.
    ///
    /// # Errors
    /// A device fails.
    pub fn close(self) -> Result<()> {
        if self.no_writes.load(Ordering::Acquire) {
            return Ok(());
        }
        self.check_writable()?;
        let referenced = lock(&self.fs).referenced();
        for ino in referenced {
            let n = lock(&self.fs).refs(ino);
            self.forget(ino, n)?;
        }
        self.checkpoint()?;
        self.discard_queued();
        Ok(())
    }

    /// Number of partial segments (or data-only flushes) written since open.
    #[must_use]
    pub fn commit_count(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    // ---- helpers shared by the operations ----

    /// The attributes of `ino`; its block count includes the blocks its
    /// dirty data holds reservations for (allocated at write-back), so
    /// that `du` is right as soon as data is written.
    fn attr(fs: &mut Fs, ino: InodeNo) -> Result<Attr> {
        let mut a = Attr::from_record(fs.inode(ino)?);
        a.blocks += fs.pages.reserved_blocks(ino) * (crate::types::BLOCK_BYTES / 512);
        Ok(a)
    }

    fn kind_of(fs: &mut Fs, ino: InodeNo) -> Result<FileKind> {
        let mode = fs.inode(ino)?.mode;
        FileKind::from_mode(mode)
            .ok_or_else(|| Error::corrupt_meta("inode", 0, format!("inode {ino} has mode {mode:#o}")))
    }
}
