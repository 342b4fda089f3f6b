//! The command line: subcommands, their arguments and their help.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod admin;
pub use admin::*;
mod quota;
pub use quota::*;

/// DualFS: a Linux file system that keeps file data and meta-data on two
/// devices. Data goes to the data device, in groups written in place;
/// every piece of meta-data lives once, in a log on the meta-data device.
///
/// A volume is a pair of devices (or image files): META, about a tenth of
/// the total, and DATA. Create one with `dualfs mkfs`, mount it with
/// `dualfs mount`, unmount it with `dualfs umount` (or fusermount3 -u).
#[derive(Parser, Debug)]
#[command(name = "dualfs", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a new volume on two devices or image files.
    #[command(after_help = MKFS_HELP)]
    Mkfs(MkfsArgs),
    /// Mount a volume (in the background unless --foreground).
    #[command(after_help = MOUNT_HELP)]
    Mount(MountArgs),
    /// Unmount a volume and wait until it is closed cleanly.
    Umount(UmountArgs),
    /// Check a volume's consistency (it must not be mounted).
    #[command(after_help = FSCK_HELP)]
    Fsck(FsckArgs),
    /// Show what is on a volume: superblock, log, segments, groups, inodes.
    #[command(after_help = INSPECT_HELP)]
    Inspect(InspectArgs),
    /// Clean the meta-data log: move live meta-data out of mostly empty
    /// segments so that they become free (mounted or not).
    #[command(after_help = CLEAN_HELP)]
    Clean(CleanArgs),
    /// The log's and the cleaner's counters of a mounted volume.
    #[command(after_help = STATS_HELP)]
    Stats(StatsArgs),
    /// Snapshots: make, list, show and delete them (mounted or not); mount
    /// one with `dualfs mount -o snapshot=NAME`.
    #[command(after_help = SNAPSHOT_HELP)]
    Snapshot(SnapshotArgs),
    /// Write a snapshot, or what changed between two, as a stream for
    /// `dualfs receive` (a mirror kept up to date).
    #[command(after_help = SEND_HELP)]
    Send(SendArgs),
    /// Apply a stream of `dualfs send` to another volume (mounted or not).
    #[command(after_help = RECEIVE_HELP)]
    Receive(ReceiveArgs),
    /// Make a writable clone of a snapshot (mounted or not); mount it with
    /// `dualfs mount -o clone=NAME`.
    #[command(after_help = CLONE_HELP)]
    Clone(CloneArgs),
    /// Read and check every live block of a volume, mounted or not, and
    /// report what is damaged and the files it costs.
    #[command(after_help = SCRUB_HELP)]
    Scrub(ScrubArgs),
    /// Discard the free space of a volume, mounted or not (as fstrim).
    #[command(after_help = TRIM_HELP)]
    Trim(TrimArgs),
    /// User, group and project quotas: turn on, set, report (mounted or
    /// not), as setquota and repquota do for a kernel file system.
    #[command(after_help = quota::QUOTA_HELP)]
    Quota(QuotaArgs),
    /// Make everything written to mounted volumes durable (sync(1) does not).
    #[command(after_help = SYNC_HELP)]
    Sync(SyncArgs),
    /// Grow a volume into room its devices gained (mounted or not).
    #[command(after_help = RESIZE_HELP)]
    Resize(ResizeArgs),
    /// Move the meta-data or data device to another (mounted or not).
    #[command(after_help = MIGRATE_HELP)]
    Migrate(MigrateArgs),
    /// Add, remove or replace a copy of a mounted volume's meta-data mirror.
    #[command(after_help = MIRROR_HELP)]
    Mirror(MirrorArgs),
    /// Block-level traces: summarise, replay through disk models, trace a peer.
    Trace(TraceArgs),
    /// Say what devices hold, as blkid does: TYPE, UUID, LABEL, role.
    #[command(after_help = PROBE_HELP)]
    Probe(ProbeArgs),
    /// Change a volume's label, UUID or default mount options (unmounted).
    #[command(after_help = TUNE_HELP)]
    Tune(TuneArgs),
    /// Print a file of an unmounted, even damaged, volume.
    #[command(after_help = CAT_HELP)]
    Cat(CatArgs),
    /// Copy a file or a tree out of an unmounted, even damaged, volume.
    #[command(after_help = GET_HELP)]
    Get(GetArgs),
    /// Write a volume's meta-data (names replaced, no file contents) to a
    /// file to send to a developer.
    #[command(after_help = METADUMP_HELP)]
    Metadump(MetadumpArgs),
    /// Turn a metadump back into a volume (file contents read as zeros).
    #[command(after_help = METARESTORE_HELP)]
    Metarestore(MetarestoreArgs),
}

const METADUMP_HELP: &str = "\
Copies every non-zero block of the meta-data device and the data device's
superblock, as they are: the volume need not mount, a damaged volume dumps
with its damage. No file contents are copied (they live on the data
device). By default names, xattr names and symlink targets are replaced by
pseudo-random names of the same length (the same name always by the same
one; . .. and lost+found kept) and inline file data and xattr values by
zeros (POSIX ACLs are kept); the checksums covering a changed block are
sealed again, except where they were already wrong. Such a dump restores
to a volume that mounts read-only only. --no-obfuscate keeps everything.

The volume should not be mounted (a mounted volume dumps as it was last
written). The dump compresses well: dualfs metadump M D - | zstd > dump.zst

Example: dualfs metadump volume/meta.img volume/data.img volume.dump";
const METARESTORE_HELP: &str = "\
Writes the meta-data device and the data device (sized as they were, zero
but for the superblock), creating image files that do not exist. A device
that holds a file system, DualFS or other, is refused without --force; one
that is mounted or in use is refused always.

Example: dualfs metarestore volume.dump meta.img data.img
         dualfs mount -o ro meta.img data.img /mnt";

const CAT_HELP: &str = "\
Reads the devices directly (no mount). Blocks that cannot be read are
written as zeros and reported on standard error.

Exit status: 0 all of the file was read, 4 part of it could not be, 1 it
could not be read at all.

Example: dualfs cat volume/meta.img volume/data.img /etc/fstab";

const GET_HELP: &str = "\
Reads the devices directly (no mount), from the newest usable checkpoint.
What cannot be read (a damaged inode, directory or extent map, a failing
data block) is skipped and reported on standard error, and everything else
is copied: unreadable blocks of a file come out as zeros, a damaged
directory as what could be listed of it. Modes, times, hard links,
symlinks and user.* attributes are kept; owners, special files and the
other attributes too when run by root. Holes stay holes.

Exit status: 0 everything was copied, 4 something was skipped (listed), 1
nothing could be copied.

Examples:
  dualfs get volume/meta.img volume/data.img / /mnt/rescue
  dualfs get -v META DATA /home/alice/thesis.tex .";

const PROBE_HELP: &str = "\
Without DEVICE, every block device is read (as blkid does) and the DualFS
ones are listed. UUID is the volume's, on both of its devices; UUID_SUB
the device's own; ROLE says which device it is (meta or data).

Exit status: 0 when a DualFS device was found, 2 when none was (blkid's).

Examples:
  dualfs probe /dev/sdb1
  dualfs probe --export volume/meta.img";

const TUNE_HELP: &str = "\
Changes both devices' superblocks; the volume must not be mounted. Stored
mount options apply to every mount of the volume, before (and overridden
by) the mount's own. A mirrored meta-data device's two copies are changed
alike: the second is named with --meta-mirror DEV or looked for among the
block devices, and a tune is refused without it unless the mirror runs
degraded (a stale copy is left as it is, for a replace to resync).

Examples:
  dualfs tune -L home volume/meta.img volume/data.img
  dualfs tune -U random /dev/sdb1 /dev/sdc1
  dualfs tune -o noatime,commit=30 LABEL=home
  dualfs tune -o ^commit META DATA";

const MKFS_HELP: &str = "\
Sizes are bytes, or a number with a K, M, G or T suffix (powers of 1024).

Example: dualfs mkfs --size 4G volume/meta.img volume/data.img";

const MOUNT_HELP: &str = "\
Options (-o, comma-separated, may be repeated):
  ro               mount read-only (nothing is written, not even recovery)
  allow_other      let every user use the mount (allow_root: root as well)
  commit=SECONDS   write dirty data and meta-data at least this often (default 5;
                   0 means the default, as on ext4)
  cache=SIZE       memory the volume keeps (default 512M, at least 16M, at
                   most half of the machine's memory or its cgroup's): half
                   for file data not yet written (reaching it commits), half
                   for meta-data: a third of SIZE for decoded inodes,
                   directory and tree nodes (least recently used evicted
                   first), an eighth for inode-map blocks read (16 bytes an
                   inode; unchanged ones past it are dropped and read again
                   when needed), a fortieth for segment usage blocks the
                   cleaner read (likewise). Beside it the process holds the node map
                   (8 bytes per directory or tree node), the free inode
                   numbers, and the data bitmap it has read (one bit per
                   block of each data group used)
  data_expire=SECONDS
                   how long a periodic commit may leave the newly written end
                   of a file unwritten (default 30; 0: every commit writes
                   every byte, so no file is cut short by a crash)
  order=strict     a crash shows a prefix of every operation, data included:
                   no delayed tails, no held replacements, overwrites go to
                   new blocks, and an fsync makes every earlier operation
                   durable too (slower for overwrites and for fsync while
                   other files are dirty; order=default is the default)
  recover=older    mount writable although damage took commits that had been
                   made durable (fsck says which), accepting the older state;
                   without it such a volume mounts only with ro
  recover=rebuild  check the whole volume first, as fsck does, and when
                   the IFile is damaged (no checkpoint loads, or a table
                   block a mount does not read) write it as rebuilt from
                   its log (what `dualfs fsck -y` does) and mount it;
                   without it a volume no checkpoint of which loads mounts
                   only with ro, showing the rebuilt state
  norecovery       with ro only: open the volume at its last checkpoint
                   without rolling the log forward (ext4's and XFS's
                   option): what was committed or fsynced after the
                   checkpoint is not shown, nothing is written, fstrim is
                   refused, and a remount rw is refused; to look at a
                   volume whose log is in doubt without reading it
  discard          discard freed data blocks and emptied log segments as
                   they become free (BLKDISCARD; holes punched in image
                   files), once no crash can need them; nodiscard (the
                   default) leaves that to fstrim MOUNTPOINT or dualfs trim
  mirror=DEV       the second copy of a meta-data device made with
                   `mkfs --meta-mirror DEV`: every meta-data write goes to
                   both, a block failing its check on the first is read
                   from the second and written back (dualfs stats counts it).
                   Without it the copy is looked for among the block
                   devices (loop devices too) by the volume's UUIDs
  degraded         mount a mirrored volume with a copy missing or stale
                   (one that missed writes): it runs on the copy in sync,
                   says so in its log and stats, and the other copy is
                   never trusted again
  threads=N        threads reading /dev/fuse (default 4)
  transport=uring|devfuse
                   what carries the requests. By default per-CPU io_uring
                   queues where the kernel allows them (Linux 6.14+ with the
                   fuse module's enable_uring set: echo Y >
                   /sys/module/fuse/parameters/enable_uring), else /dev/fuse
                   read by threads=N threads; the log says which and why.
                   uring: io_uring or no mount; devfuse: never io_uring
  readahead=SIZE   the kernel's read-ahead for the mount (default 2M; 0: the
                   kernel's default, 128K): each READ is a round trip, and
                   the data device is read without a page cache of its own
  dirty_window=SIZE
                   the most written data the kernel may hold for the mount
                   before passing it on (default 2M; 0: the kernel's limit,
                   about 1% of memory): the volume keeps its own write-back
                   cache, and an fsync's pages wait behind everything in the
                   kernel's window (an fsync beside a large copy); in force
                   from an fsync beside a stream until 5 s after the last
  stream_window=SIZE
                   the window otherwise (default 32M: a stream alone goes
                   1.5x as fast as with 8M, several times as with 2M);
                   0: dirty_window always
  attr_timeout=S, entry_timeout=S
                   how long the kernel may keep attributes and names (found or
                   not) without asking (default 3600; every change made through
                   the mount updates them, and the volume invalidates what it
                   changes itself)
  log=FILE         where a background mount writes its log (default: nowhere)
  trace=FILE       record every block request on both devices in FILE
                   (see dualfs trace summary / replay)
  fsname=NAME      the source shown in /proc/mounts (default META#DATA)
  nowriteback      send every write to the volume at once instead of caching
                   it in the kernel (slower; modification times then come
                   from the volume's clock alone)
  nosecurity_xattr the security.* extended attributes are not served (each is
                   EOPNOTSUPP, listings leave them out, what is stored is kept),
                   as ext4's nouser_xattr does for user.*: no file capabilities
                   or SELinux labels, and ls -l stops asking for a label per
                   file (one request per entry less)
  relatime, noatime, strictatime
                   when reads update access times (default relatime; give one).
                   A read the kernel answers from its page cache never reaches
                   the volume: the cache is dropped at the open before a read
                   that would update the time, so relatime loses nothing, but
                   under strictatime further reads through the same open file
                   are not counted (FUSE gives the volume no way to see them)
  remount          change a mounted volume in place: ro commits, checkpoints
                   and refuses changes; rw takes them again (mount -o remount,ro)
  auto_unmount (with allow_other or allow_root), dev, nodev, suid, nosuid,
  exec, noexec, sync, dirsync and max_read=BYTES are passed on; fstab's defaults, noauto, nofail, _netdev,
  user and x-* are accepted and ignored. Any other option is refused.
  Through mount(8) (mount -t fuse.dualfs, fstab), a mount by root honours
  devices and set-id bits unless nodev or nosuid say otherwise, as for any
  kernel file system; `dualfs mount` keeps FUSE's nodev,nosuid by default.
  Root mounts with mount(2); any other user, and auto_unmount, through
  fusermount3 (which allows a user allow_other only with user_allow_other
  in /etc/fuse.conf, and never dev or suid).

META and DATA may be UUID=… or LABEL=… (see dualfs probe). Both copies of a
mirrored meta-data device carry the volume's UUID and label: the tag names
the copy naming the newest mirror generation (of two in sync, the first in
device order), and the other is found as the mirror. Options stored with
`dualfs tune -o` come first; those given here override them.

Without --foreground the command returns once the volume is mounted (or with
the reason it could not be). SIGINT, SIGTERM, `dualfs umount` or
`fusermount3 -u` unmount it; every dirty byte and a checkpoint are written
before the process exits, so the next mount needs no recovery. A mount that
finds the volume still held by the process that served its last mount waits
for it to finish closing (at most a minute), saying so.

sync(1) does not make data durable on a FUSE file system: it ends in the
volume's memory, durable at the next commit (commit=). Use `dualfs sync`,
or `sync MOUNTPOINT` (an fsync of the root: everything is committed). An
fsync of a file makes that file durable, and nothing else (except with
order=strict).";

const FSCK_HELP: &str = "\
Every inode, directory, extent map and xattr set is read back from the
devices and checked against the IFile, and the space accounting (bitmap,
group counts, segment usage) against what the files use. Without -p, -y or
--repair nothing is written (-n says so explicitly).

Repair rebuilds from what is intact: the IFile (from the log itself when
no checkpoint loads), link counts, orphans, `..`, entries naming nothing,
damaged trees from their readable parts, extents outside the device or
claimed by two files (the second gets a copy), sizes beyond the data or
above the maximum; what no directory reaches goes into /lost+found as
#INODE; commits lost to damage are given up (the volume goes back to its
state before them). Every repair is listed, and the result is checked
before anything is written:
  -p, -a    repair only what loses and changes nothing a user sees
            (counts, the bitmap, link counts, types); anything more is
            listed and nothing is written (exit 4: run -y)
  -y        repair everything, without asking
  --repair  list the repairs, then ask once before writing (a terminal)

Exit status, as fsck(8): 0 consistent, 1 problems were repaired, 4
problems left (listed), 8 the volume could not be checked at all, 16 usage
error, 32 interrupted.";

const INSPECT_HELP: &str = "\
Nothing is written. A mounted volume may be inspected: what is shown is what
is on the devices, which lags the mount by up to the commit interval.
META and DATA may be UUID=… or LABEL=….

Examples:
  dualfs inspect META DATA extents /home/big.iso
  dualfs inspect --json META DATA checkpoints";

const CLEAN_HELP: &str = "\
Without --segments, every segment in use that is less than --max-utilization
full is cleaned, a few at a time, each batch ending with a checkpoint that
turns its segments into free ones. What was done is printed at the end:
segments read, what was moved, segments freed, bytes written, time.

An unmounted volume is cleaned in this process (a mounted one is refused
under its META and DATA: give its mount point). A mounted volume is cleaned
by its own process, in steps, while it goes on serving requests; this
command shows the progress and waits for the end. Interrupting it leaves
the clean running; `setfattr -x dualfs.clean MOUNTPOINT` stops it after its
current batch. Only root and the user who mounted the volume may clean it.

Examples:
  dualfs clean volume/meta.img volume/data.img
  dualfs clean --policy greedy --segments 8 /mnt/dualfs";

const STATS_HELP: &str = "\
The counters run from the mount; the segment figures are the log's state
now. --json prints them as one object, with the same names.";

impl Command {
    /// Whether the command only reads and prints: such a command may die
    /// of SIGPIPE when its reader goes away, having nothing to leave half done.
    #[must_use]
    pub fn only_reports(&self) -> bool {
        match self {
            Command::Fsck(_) | Command::Inspect(_) | Command::Stats(_) => true,
            Command::Trace(t) => !matches!(t.what, TraceCommand::Serve(_)),
            Command::Probe(_) | Command::Cat(_) | Command::Metadump(_) | Command::Send(_) => true,
            Command::Snapshot(a) => matches!(a.action, SnapshotAction::List { .. } | SnapshotAction::Show { .. }),
            Command::Mkfs(_)
            | Command::Mount(_)
            | Command::Umount(_)
            | Command::Clean(_)
            | Command::Clone(_)
            | Command::Tune(_)
            | Command::Get(_)
            | Command::Metarestore(_)
            | Command::Sync(_)
            | Command::Quota(_)
            | Command::Trim(_)
            | Command::Scrub(_)
            | Command::Resize(_)
            | Command::Migrate(_)
            | Command::Mirror(_)
            | Command::Receive(_) => false,
        }
    }
}

/// A fraction from 0 to 1.
fn parse_fraction(s: &str) -> Result<f64, String> {
    let f: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=1.0).contains(&f) { Ok(f) } else { Err(format!("{s} is not between 0 and 1")) }
}

#[derive(Args, Debug)]
pub struct CleanArgs {
    /// The mount point of a mounted volume, or the meta-data device of an
    /// unmounted one (or META#DATA).
    pub target: PathBuf,
    /// The data device of an unmounted volume.
    pub data: Option<PathBuf>,
    /// Clean at most this many segments (default: every one worth it).
    #[arg(long, short = 'n')]
    pub segments: Option<usize>,
    /// How segments are chosen: cost-benefit (old and empty first: cold
    /// meta-data stops being recleaned) or greedy (emptiest first).
    #[arg(long, default_value = "cost-benefit", value_parser = dualfs_fuse::control::parse_policy)]
    pub policy: dualfs_engine::meta_log::cleaner::Policy,
    /// Leave segments at least this full (0 to 1): moving their live data
    /// costs more than the space it frees is worth.
    #[arg(long, default_value_t = dualfs_fuse::control::DEFAULT_MAX_UTILIZATION, value_parser = parse_fraction)]
    pub max_utilization: f64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

const SYNC_HELP: &str = "\
sync(1) and syncfs(2) hand the kernel's cached data to DualFS but cannot make
it durable: Linux asks only virtiofs among FUSE file systems to do that. A
volume commits what it holds every commit= seconds (default 5), so data is at
most that old when the power fails; to be sure now, run dualfs sync, fsync a
file (only it and what reaches it become durable), or fsync the mount's root
directory (`sync MOUNTPOINT` does: everything is committed).

dualfs sync has the kernel write its cached data of each mount, then the
volume commit and checkpoint, and returns once both devices have flushed.
Without a MOUNTPOINT it syncs every mounted DualFS volume.";

#[derive(Args, Debug)]
pub struct SyncArgs {
    /// Mount points (default: every mounted DualFS volume).
    pub mountpoints: Vec<PathBuf>,
    /// Say what was done for each.
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

const SNAPSHOT_HELP: &str = "\
VOLUME is the mount point of a mounted volume, or its devices: META DATA, or
META#DATA. A snapshot is the volume as it was when made, read-only, and costs
nothing to make: blocks it shares with the volume are shared until the volume
changes them (an overwrite then goes to a new block). `list` shows the space
only it holds (what deleting it gives back) and the space it shares.

  dualfs snapshot create /mnt/vol before-upgrade
  dualfs snapshot list /mnt/vol
  dualfs mount -o snapshot=before-upgrade meta.img data.img /mnt/old
  dualfs snapshot delete /mnt/vol before-upgrade";

const CLONE_HELP: &str = "\
VOLUME is the mount point of a mounted volume, or its devices: META DATA, or
META#DATA. A clone is a writable tree of its own that starts as the snapshot
was and shares every block it does not change. A volume has one live tree
(`main` until a clone is mounted); mounting a clone makes it the live tree and
keeps the tree that was live, under its name, until it is mounted again. A
clone depends on nothing: its snapshot may be deleted. `dualfs snapshot list`
shows clones and kept trees, and `dualfs snapshot delete` deletes them. Mounted
while the volume is mounted, a clone is served beside it, writable, by the same
process, one tree's requests at a time; unmounting either leaves the other.

  dualfs snapshot create /mnt/vol before-upgrade
  dualfs clone /mnt/vol before-upgrade what-if
  dualfs umount /mnt/vol
  dualfs mount -o clone=what-if meta.img data.img /mnt/vol
  dualfs mount -o clone=main meta.img data.img /mnt/vol   (back, later)
  dualfs mount -o clone=what-if meta.img data.img /mnt/what-if   (beside it)";

#[derive(Args, Debug)]
pub struct CloneArgs {
    /// VOLUME (mount point, META DATA or META#DATA), then the SNAPSHOT to
    /// clone and the clone's NAME.
    #[arg(num_args = 3..=4, required = true, value_name = "VOLUME SNAPSHOT NAME")]
    pub target: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    pub action: SnapshotAction,
}

#[derive(Subcommand, Debug)]
pub enum SnapshotAction {
    /// Make a snapshot: VOLUME NAME.
    Create {
        /// VOLUME (mount point, META DATA or META#DATA), then NAME.
        #[arg(num_args = 2..=3, required = true, value_name = "VOLUME NAME")]
        target: Vec<PathBuf>,
    },
    /// Delete a snapshot (the space only it held is free again): VOLUME NAME.
    Delete {
        /// VOLUME (mount point, META DATA or META#DATA), then NAME.
        #[arg(num_args = 2..=3, required = true, value_name = "VOLUME NAME")]
        target: Vec<PathBuf>,
    },
    /// List the live tree, then the snapshots and kept trees: name, kind,
    /// creation time, data only it holds, data it shares.
    List {
        /// VOLUME: mount point, META DATA or META#DATA.
        #[arg(num_args = 1..=2, required = true, value_name = "VOLUME")]
        target: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one snapshot: VOLUME NAME.
    Show {
        /// VOLUME (mount point, META DATA or META#DATA), then NAME.
        #[arg(num_args = 2..=3, required = true, value_name = "VOLUME NAME")]
        target: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Where the volume is mounted.
    pub mountpoint: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct MkfsArgs {
    /// The meta-data device or image file (the log; ~10% of the volume).
    pub meta: PathBuf,
    /// The data device or image file.
    pub data: PathBuf,
    /// Overwrite devices that already hold a file system.
    #[arg(long, short = 'f')]
    pub force: bool,
    /// A name for the volume (at most 64 bytes).
    #[arg(long, short = 'L', default_value = "")]
    pub label: String,
    /// Create missing image files for a volume of this total size, the
    /// meta-data file taking about 10% (sparse files: no space is used yet).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Size of a log segment on the meta-data device.
    #[arg(long, value_parser = parse_size, default_value = "1M")]
    pub segment_size: u64,
    /// Size of a block group on the data device.
    #[arg(long, value_parser = parse_size, default_value = "128M")]
    pub group_size: u64,
    /// Files up to this many bytes keep their contents in the inode, on the
    /// meta-data device (0 to 3072).
    #[arg(long, default_value_t = 1024)]
    pub inline_max: u32,
    /// Keep user, group and project quotas (format 1.9; `dualfs quota`
    /// sets the limits).
    #[arg(long)]
    pub quota: bool,
    /// Keep the meta-data device on this second device too, written alike
    /// (mount it with `-o mirror=DEV`).
    #[arg(long, value_name = "DEV")]
    pub meta_mirror: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct MountArgs {
    /// The meta-data device or image file.
    pub meta: PathBuf,
    /// The data device or image file.
    pub data: PathBuf,
    /// An existing directory to mount on.
    pub mountpoint: PathBuf,
    /// Stay in the foreground (logs go to standard error).
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// Mount options, comma-separated.
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Internal: this process is the background half of a daemon mount and
    /// reports readiness on standard output.
    #[arg(long, hide = true)]
    pub daemon_child: bool,
}

#[derive(Args, Debug)]
pub struct UmountArgs {
    /// Where the volume is mounted.
    pub mountpoint: PathBuf,
    /// Give up waiting for the volume to close after this many seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Detach now even if files are open; the volume closes when they are.
    #[arg(long, short = 'l')]
    pub lazy: bool,
}

#[derive(Args, Debug)]
pub struct FsckArgs {
    /// The meta-data device or image file (or META#DATA, as in fstab).
    pub meta: PathBuf,
    /// The data device or image file.
    pub data: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Repair what loses and changes nothing a user sees (e2fsck's preen);
    /// list the rest and write nothing if there is more.
    #[arg(short = 'p', short_alias = 'a', conflicts_with_all = ["no", "yes", "repair"])]
    pub preen: bool,
    /// Repair everything that can be repaired, without asking.
    #[arg(short = 'y', conflicts_with_all = ["no", "repair"])]
    pub yes: bool,
    /// List what a repair would do, then ask once before writing it.
    #[arg(long, conflicts_with = "no")]
    pub repair: bool,
    /// Check only: write nothing (the default).
    #[arg(short = 'n')]
    pub no: bool,
    /// Accepted for fsck(8): the check is always complete.
    #[arg(short = 'f', hide = true)]
    pub force: bool,
    /// The second copy of a mirrored meta-data device: a block that fails
    /// its check on the first copy is read from it (and, when repairing,
    /// written back). A repair of a mirror in sync writes both copies and
    /// looks for this one among the block devices when it is not given.
    #[arg(long, value_name = "DEV")]
    pub meta_mirror: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The meta-data device or image file.
    pub meta: PathBuf,
    /// The data device or image file.
    pub data: PathBuf,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// The second copy of a mirrored meta-data device: the summary and the
    /// superblock show each copy's mirror generation and whether it is in
    /// sync (looked for among the block devices when not given).
    #[arg(long, global = true, value_name = "DEV")]
    pub meta_mirror: Option<PathBuf>,
    /// What to show (default: a summary).
    #[command(subcommand)]
    pub what: Option<Inspect>,
}

#[derive(Subcommand, Debug, Clone)]
pub enum Inspect {
    /// Capacity, usage and the state of the log.
    Summary,
    /// The superblock: format version, identity, geometry.
    Superblock,
    /// The checkpoint mounted from and the roll-forward after it.
    Log,
    /// Usage of every log segment on the meta-data device.
    Segments {
        /// List every segment, not only those in use.
        #[arg(long)]
        all: bool,
    },
    /// Free blocks and directories of every data group.
    Groups,
    /// One inode: attributes, extended attributes.
    Inode {
        /// An inode number, or a path inside the volume starting with '/'.
        inode: String,
    },
    /// One directory's entries.
    Dir {
        /// An inode number, or a path inside the volume starting with '/'.
        dir: String,
    },
    /// A file's extent map: file blocks, data-device blocks, groups.
    Extents {
        /// An inode number, or a path inside the volume starting with '/'.
        file: String,
    },
    /// The two checkpoint slots: number, time, log position, which is used.
    Checkpoints,
}

/// Parses `4096`, `64K`, `1M`, `128M`, `4G`, `1T` (binary units).
///
/// # Errors
/// Not a number, an unknown suffix, or an overflow.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, shift) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("unknown size suffix {c:?} (use K, M, G or T)")),
            };
            (&s[..i], shift)
        }
        _ => (s, 0),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("{s:?} is not a size (e.g. 4096, 64K, 1M, 4G)"))?;
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("{s} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("128m"), Ok(128 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert!(parse_size("4X").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
