//! The arguments of the commands past the everyday ones (send and
//! receive, resize, migrate, probe, tune, cat and get, metadump and
//! metarestore, trace), with their help. Like the rest of `args`, this
//! names nothing else of the crate: the commands read these types.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use dualfs_engine::types::BLOCK_BYTES;
use dualfs_engine::volume::WHOLE_DEVICE;

pub const SEND_HELP: &str = "\
The stream goes to standard output (or --file). Without --from it holds the
whole snapshot, for an empty volume; with --from it holds what changed
since that older snapshot, for a volume that received it. The volume may be
mounted meanwhile: snapshots never change.

  dualfs snapshot create /mnt/vol monday
  dualfs send monday /mnt/vol | dualfs receive /mnt/mirror
  dualfs snapshot create /mnt/vol tuesday
  dualfs send --from monday tuesday /mnt/vol | ssh backup dualfs receive /mnt/mirror";

pub const RECEIVE_HELP: &str = "\
The stream comes from standard input (or --file). The volume becomes a copy
of the source's snapshot, inode numbers included, and receive ends by making
a snapshot of the same name there. A full stream needs an empty volume; an
incremental one needs its base received, and the volume unchanged since
(reading it is no change). Every record is checked against the tree it
builds: a stream that would leave it inconsistent is refused, as is one
cut short, and the volume is left as it was.

A receive interrupted by a crash (or a kill) stays under way: the tree is
incomplete, and fsck, mount and `dualfs stats` say so. Receive the same
stream again to finish it (other streams are refused until then), or
abandon it with --abort, which brings back the last complete tree (the
snapshot the stream started from, or the empty volume a full stream went
to).

  dualfs send --from monday tuesday /mnt/vol | dualfs receive /mnt/mirror
  dualfs receive --abort /mnt/mirror";

#[derive(Args, Debug)]
pub struct SendArgs {
    /// Send only what changed since this older snapshot (the receiver must
    /// hold it).
    #[arg(long, value_name = "SNAPSHOT")]
    pub from: Option<String>,
    /// The snapshot to send, then VOLUME: mount point, META DATA or META#DATA.
    #[arg(num_args = 2..=3, required = true, value_name = "SNAPSHOT VOLUME")]
    pub target: Vec<PathBuf>,
    /// Write the stream to FILE rather than standard output.
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ReceiveArgs {
    /// VOLUME: mount point, META DATA or META#DATA.
    #[arg(num_args = 1..=2, required = true, value_name = "VOLUME")]
    pub target: Vec<PathBuf>,
    /// Read the stream from FILE rather than standard input.
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
    /// Abandon the receive under way (one a crash interrupted): the volume
    /// goes back to the last complete tree.
    #[arg(long, conflicts_with = "file")]
    pub abort: bool,
}

/// `dualfs resize`.
#[derive(Args, Debug)]
pub struct ResizeArgs {
    /// The mount point of a mounted volume, or the meta-data device of an
    /// unmounted one (or META#DATA).
    pub target: PathBuf,
    /// The data device of an unmounted volume.
    #[arg(value_name = "DATA_DEVICE")]
    pub data_device: Option<PathBuf>,
    /// Size of the meta-data device to use (4096, 64M, 2G...; `max`: all
    /// of it). Without --meta and --data, both devices are used whole.
    #[arg(long, value_name = "SIZE", value_parser = parse_target)]
    pub meta: Option<u64>,
    /// Size of the data device to use (as --meta).
    #[arg(long, value_name = "SIZE", value_parser = parse_target)]
    pub data: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A size in bytes (with a suffix) or `max`, as blocks.
fn parse_target(s: &str) -> Result<u64, String> {
    if s == "max" {
        return Ok(WHOLE_DEVICE);
    }
    let bytes = super::parse_size(s)?;
    if bytes % BLOCK_BYTES != 0 {
        return Err(format!("{s} is not a whole number of 4 KiB blocks"));
    }
    Ok(bytes / BLOCK_BYTES)
}

pub const RESIZE_HELP: &str = "\
Grows the log (new segments on the meta-data device) and the data space
(new groups on the data device) into room the devices gained: extend the
image file (truncate -s) or the device (lvextend; losetup -c for a loop
device) first. Works mounted (give the mount point) or not (give the
devices).

--meta smaller than the log in use shrinks it: the log stops writing past
the new end, the cleaner moves the live meta-data out of the segments there
(a progress bar counts them), and the volume then names the smaller size;
truncate the device or image afterwards. A shrink whose live meta-data
would not fit is refused before anything moves.

--data smaller than the data space in use shrinks it the same way: the
allocator stops at the new end, and every block of file data past it is
moved below it by ordinary commits (a progress bar counts the MiB), while
the volume stays in use. Refused before anything moves when the data past
the end would not fit in the free space below it, and on a volume with
snapshots (their blocks cannot move).

A crash at any moment leaves the volume at its old or its new size, with
nothing lost. The first resize of a volume sets the RESIZED feature
(format 1.3): older dualfs versions refuse it from then on.

Examples:
  truncate -s 8G data.img && dualfs resize meta.img data.img
  dualfs resize /mnt/vol --meta 2G
  dualfs resize /mnt/vol --data max
  dualfs resize /mnt/vol --meta 256M && truncate -s 256M meta.img
  dualfs resize /mnt/vol --data 2G && truncate -s 2G data.img";

/// `dualfs migrate`.
#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("new").required(true).args(["meta", "data"]))]
pub struct MigrateArgs {
    /// The mount point of a mounted volume, or the meta-data device of an
    /// unmounted one (or META#DATA).
    pub target: PathBuf,
    /// The data device of an unmounted volume.
    #[arg(value_name = "DATA_DEVICE")]
    pub data_device: Option<PathBuf>,
    /// The device or image file to move the meta-data device to.
    #[arg(long, value_name = "NEWDEV")]
    pub meta: Option<PathBuf>,
    /// The device or image file to move the data device to.
    #[arg(long, value_name = "NEWDEV")]
    pub data: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `dualfs mirror`.
#[derive(Args, Debug)]
pub struct MirrorArgs {
    #[command(subcommand)]
    pub action: MirrorAction,
}

/// What `dualfs mirror` does to a mounted volume's meta-data mirror.
#[derive(Subcommand, Debug)]
pub enum MirrorAction {
    /// Add a copy of the meta-data device: an unmirrored volume becomes
    /// mirrored, a degraded one whole again.
    Add {
        /// The mount point of the mounted volume.
        mountpoint: PathBuf,
        /// The device or image file to become the new copy.
        new: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Drop one copy of the meta-data mirror: the volume goes on on the
    /// other, unmirrored.
    Remove {
        /// The mount point of the mounted volume.
        mountpoint: PathBuf,
        /// The copy to drop (one the volume was mounted with, or the one a
        /// degraded mount runs without).
        old: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Copy the good copy to a new device and drop the old copy (the way
    /// out of a degraded mirror).
    Replace {
        /// The mount point of the mounted volume.
        mountpoint: PathBuf,
        /// The copy to drop (failed, missing, or one in use).
        old: PathBuf,
        /// The device or image file to become the new copy.
        new: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub const MIRROR_HELP: &str = "\
Changes the meta-data mirror of a mounted volume while it stays in use.
add NEW initialises NEW and copies every live meta-data block to it while
every write goes to both; only when the copy is complete and flushed do the
superblocks name NEW an in-sync copy. replace OLD NEW does the same from
the good copy and drops OLD (the way out of a degraded mirror). remove OLD
drops a copy: the volume goes on unmirrored, and the removed device is
never taken as the volume's again. Whatever NEW held is overwritten.

After a crash during add or replace, the new copy is refused (not in
sync): mount as before, and run the command again.

The next mount must name the copies the command prints: the meta-data
device, then the mirror with -o mirror=NEW.

Examples:
  dualfs mirror add /mnt/vol /dev/nvme1n1p2
  dualfs mirror replace /mnt/vol /dev/nvme1n1p2 /dev/nvme2n1p2
  dualfs mirror remove /mnt/vol /dev/nvme1n1p2";

pub const MIGRATE_HELP: &str = "\
Moves the meta-data device (--meta) or the data device (--data) of a volume
to another device or image file, mounted (give the mount point) or not
(give the devices). While it runs the volume stays in use: every write
goes to the old device and to the new one, and what the volume uses of the
old device (the log's segments in use, or the data blocks in use) is copied
to the new one, a progress bar counting the MiB. Then the superblocks name
the new device, which gets a new UUID; the old device no longer pairs with
the volume and may be reused.

The new device must hold at least what the volume uses of the old one
(its size as mkfs or resize left it); a larger one keeps the volume's size:
grow into the rest with dualfs resize afterwards. Whatever the new device
held is overwritten.

After a crash during a migration, mount with the new device; if that pair
is refused (\"not a pair\"), the migration had not finished: mount with the
old device, nothing acknowledged is lost either way.

Examples:
  dualfs migrate --meta /dev/nvme0n1p2 /mnt/vol
  dualfs migrate --data new-data.img meta.img data.img";

/// Arguments of `dualfs probe`.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// Devices or image files to look at (default: every block device).
    pub devices: Vec<PathBuf>,
    /// KEY=value lines, a blank line between devices (blkid -o export).
    #[arg(long, conflicts_with_all = ["json", "udev"])]
    pub export: bool,
    /// udev's ID_FS_* properties of one device, for IMPORT{program} in a
    /// udev rule (blkid -o udev).
    #[arg(long, conflicts_with = "json")]
    pub udev: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `dualfs tune`.
#[derive(Args, Debug)]
pub struct TuneArgs {
    /// The meta-data device or image file (or META#DATA, UUID=…, LABEL=…).
    pub meta: PathBuf,
    /// The data device or image file.
    pub data: Option<PathBuf>,
    /// A new label (at most 64 bytes; "" removes it).
    #[arg(short = 'L', long)]
    pub label: Option<String>,
    /// A new UUID for the volume, on both devices: `random` or a UUID. The
    /// devices' own UUIDs are renewed with it.
    #[arg(short = 'U', long)]
    pub uuid: Option<String>,
    /// Default mount options, applied before those a mount gives: a
    /// comma-separated list that adds options, `^OPT` removes one, `none`
    /// removes all (at most 64 bytes in all).
    #[arg(short = 'o', long = "mount-options", value_name = "OPTIONS", allow_hyphen_values = true)]
    pub options: Option<String>,
    /// The second copy of a mirrored meta-data device (default: looked for
    /// among the block devices). Both copies are tuned alike.
    #[arg(long, value_name = "DEV")]
    pub meta_mirror: Option<PathBuf>,
}

/// Arguments of `dualfs cat`.
#[derive(Args, Debug)]
pub struct CatArgs {
    /// The meta-data device or image file (or UUID=…, LABEL=…).
    pub meta: PathBuf,
    /// The data device or image file.
    pub data: PathBuf,
    /// The file, as a path inside the volume starting with '/', or an
    /// inode number.
    pub path: String,
}

/// Arguments of `dualfs get`.
#[derive(Args, Debug)]
pub struct GetArgs {
    /// The meta-data device or image file (or UUID=…, LABEL=…).
    pub meta: PathBuf,
    /// The data device or image file.
    pub data: PathBuf,
    /// What to copy: a path inside the volume starting with '/' (a file,
    /// a symlink or a whole tree), or an inode number.
    pub path: String,
    /// Where to: a new path, or an existing directory to copy into.
    pub dest: PathBuf,
    /// Name every file copied on standard output.
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// Arguments of `dualfs metadump`.
#[derive(Args, Debug)]
pub struct MetadumpArgs {
    /// The meta-data device or image file.
    pub meta: PathBuf,
    /// The data device or image file (only its superblock is read).
    pub data: PathBuf,
    /// The dump file to write; `-` for standard output.
    pub out: PathBuf,
    /// Keep names, symlink targets, inline file data and xattr values.
    #[arg(long)]
    pub no_obfuscate: bool,
    /// Overwrite OUT if it exists.
    #[arg(long, short)]
    pub force: bool,
}

/// Arguments of `dualfs metarestore`.
#[derive(Args, Debug)]
pub struct MetarestoreArgs {
    /// The dump file; `-` for standard input.
    pub dump: PathBuf,
    /// The meta-data device or image file to write (created if missing).
    pub meta: PathBuf,
    /// The data device or image file to write (created if missing).
    pub data: PathBuf,
    /// Overwrite devices that hold a file system.
    #[arg(long, short)]
    pub force: bool,
}

/// Arguments of `dualfs trace`.
#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub what: TraceCommand,
}

#[derive(Subcommand, Debug)]
pub enum TraceCommand {
    /// Requests, bytes, sequential fraction and mean request size, per
    /// device and per class of block.
    Summary {
        /// Trace files; several are merged by time (a peer's main and
        /// journal devices, traced separately).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Total I/O time of a trace replayed through a disk model.
    #[command(after_help = format!("{DISK_HELP}\n\n{REPLAY_HELP}"))]
    Replay {
        /// Trace files, merged by time.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The disk model.
        #[arg(long, value_enum, default_value_t = Model::Hdd5400)]
        model: Model,
        /// Where the meta-data (journal, log) device and the data device sit.
        #[arg(long, value_enum, default_value_t = Layout::OneDisk)]
        layout: Layout,
        /// Disks without a write cache: writes wait for the platter.
        #[arg(long)]
        no_write_cache: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The model's own figures for a fio-like run: IOPS, MB/s and mean
    /// latency of `--ios` requests kept `--qd` at a time.
    #[command(after_help = DISK_HELP)]
    Predict {
        /// The disk model.
        #[arg(long, value_enum, default_value_t = Model::Hdd5400)]
        model: Model,
        /// fio's --rw.
        #[arg(long, value_enum)]
        rw: Pattern,
        /// Request size, bytes (K, M suffixes).
        #[arg(long, value_parser = super::parse_size, default_value = "4K")]
        bs: u64,
        /// Requests outstanding.
        #[arg(long, default_value_t = 1)]
        qd: usize,
        /// The range the requests fall in, from the start of the disk.
        #[arg(long, value_parser = super::parse_size, default_value = "4G")]
        size: u64,
        /// The disk's size (what a seek's distance is a share of).
        #[arg(long, value_parser = super::parse_size, default_value = "4G")]
        span: u64,
        /// Requests in all.
        #[arg(long, default_value_t = 4000)]
        ios: u64,
        /// A disk without a write cache.
        #[arg(long)]
        no_write_cache: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Serve IMAGE as the only file of a FUSE file system mounted on MNT
    /// (as MNT/image) and record every request made to it, until unmounted.
    #[command(after_help = SERVE_HELP)]
    Serve(ServeArgs),
}

/// Where the two devices of a trace sit for a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Layout {
    /// Two partitions of one disk: meta-data first (outer tracks), data after.
    OneDisk,
    /// Each device on a disk of its own.
    TwoDisks,
}

pub const DISK_HELP: &str = "\
Models:
  hdd5400  the DualFS paper's disk (Seagate ST-34310A, 5,400 rpm IDE):
           seek 1.5-21 ms on a square-root curve, 10 MB/s media, 33 MB/s
           bus, 0.3 ms per command, one 512 KiB read-ahead segment,
           512 KiB write cache
  hdd7200  a current 7,200 rpm SATA disk: seek 0.8-16 ms, 160 MB/s media,
           600 MB/s bus, 0.1 ms per command, four 2 MiB read-ahead
           segments, 16 MiB write cache
  ssd      a SATA SSD: 80 us per read, 30 us per write, 4 channels, one
           500 MB/s link, 0.5 ms per flush, 50 us per discard";

pub const REPLAY_HELP: &str = "\
Layouts: one-disk puts the meta-data (or journal) device on the outer
tracks and the data device after it, on one disk whose size is their sum;
two-disks gives each device a disk of its own, as large as the larger
device. Write caches are on unless --no-write-cache (then a write waits
for the platter and a flush costs one command).";

/// The disk models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Model {
    /// The paper's 5,400 rpm IDE disk.
    Hdd5400,
    /// A current 7,200 rpm SATA disk.
    Hdd7200,
    /// A SATA SSD.
    Ssd,
}

/// fio's `--rw`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    Read,
    Write,
    Randread,
    Randwrite,
}

pub const SERVE_HELP: &str = "\
Serves until unmounted (fusermount3 -u MNT). Typical use, for ext4 with its
journal on a second device:

  dualfs trace serve main.img /tmp/t-main --out main.trace --device d &
  dualfs trace serve jrnl.img /tmp/t-jrnl --out jrnl.trace --device m &
  losetup --direct-io=on -f --show /tmp/t-main/image     # /dev/loop0
  losetup --direct-io=on -f --show /tmp/t-jrnl/image     # /dev/loop1
  mkfs.ext4 -J device=/dev/loop1 /dev/loop0 ...
  dualfs trace summary main.trace jrnl.trace

Blocks of the main device are classed `fs`, of a journal or log device
`journal` (the peer's blocks are not decoded).

On an emulated disk (--model), two partitions of one disk are two files of
one server: --parts 408M,3688M serves MNT/p0 and MNT/p1 beside MNT/image,
consecutive ranges of the image, and one head serves them all. Set up a disk's loop device with its discards off
(echo 0 > /sys/block/loopN/queue/discard_max_bytes: a disk has none, and
a punched hole then reaches the server only as a write of zeros) and
rotational (echo 1 > /sys/block/loopN/queue/rotational: a loop device over
a FUSE file says it is not).";

/// Arguments of `dualfs trace serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The image file to expose.
    pub image: PathBuf,
    /// An empty directory to mount on; the image appears as MNT/image.
    pub mountpoint: PathBuf,
    /// The trace file to write (none: no trace).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Which device this image is: d (main or data device) or m (journal,
    /// log or meta-data device).
    #[arg(long, default_value = "d", value_parser = ["d", "m"])]
    pub device: String,
    /// Answer each request when this disk model would have completed it.
    #[arg(long, value_enum)]
    pub model: Option<Model>,
    /// The emulated disk has its write cache off.
    #[arg(long)]
    pub no_write_cache: bool,
    /// Also serve consecutive ranges of the image of these sizes (K, M, G
    /// suffixes) as files p0, p1, ...: a disk's partitions.
    #[arg(long, value_delimiter = ',', value_parser = super::parse_size)]
    pub parts: Vec<u64>,
    /// Threads reading requests: the most requests the disk can have
    /// waiting at once (a loop device sends up to its queue depth).
    #[arg(long, default_value_t = 40)]
    pub threads: usize,
}

pub const TRIM_HELP: &str = "\
Tells both devices which blocks hold nothing: free data blocks and log
segments that no checkpoint, snapshot or pending fsync record needs. An SSD
may then erase them ahead of time; a sparse image file has holes punched
and gives the space back to the file system holding it. The range (bytes,
the data device first, then the meta-data device) is fstrim's.

A mounted volume is trimmed through the mount (fstrim MOUNTPOINT does the
same); an unmounted one in this process. To discard continuously instead,
mount with -o discard.

Example: dualfs trim /mnt
         dualfs trim volume/meta.img volume/data.img";

/// Arguments of `dualfs trim`.
#[derive(Args, Debug)]
pub struct TrimArgs {
    /// The mount point of a mounted volume, or the meta-data device of an
    /// unmounted one (or META#DATA).
    pub target: PathBuf,
    /// The data device of an unmounted volume.
    pub data: Option<PathBuf>,
    /// First byte of the range to trim.
    #[arg(long, short = 'o', default_value = "0", value_parser = super::parse_size)]
    pub offset: u64,
    /// Bytes from the offset (default: to the end).
    #[arg(long, short = 'l', value_parser = super::parse_size)]
    pub length: Option<u64>,
    /// Leave free runs shorter than this alone.
    #[arg(long, short = 'm', default_value = "0", value_parser = super::parse_size)]
    pub minimum: u64,
}

pub const SCRUB_HELP: &str = "\
Reads every meta-data block the volume's current checkpoint and the log
after it reach (the IFile, inode and inode-map blocks, directory,
extent-tree and xattr nodes, snapshots' and clones' images) and checks
each as the file system does when it reads it: checksum (CRC32C), the
address and volume it was written for, its kind and name, its structure.
Then it reads every data block a file maps. File data carries no checksums
in DualFS: what scrub finds on the data device are the blocks the device
fails to read, not blocks it returns wrong.

A mounted volume is scrubbed by the process serving it while it stays in
use (a block that changed during the scrub is looked at again before it is
called bad); an unmounted one in this process. Each bad block is reported
with the files it costs: their paths where the directory tree still
reaches them, else their inode numbers. With one meta-data device there is
no second copy to repair from: scrub reports and repairs nothing (dualfs
fsck -y rebuilds what it can).

A mirrored meta-data device (mkfs --meta-mirror) is read copy by copy:
every block from each copy, checked alike. A block bad on one copy and
good on the other is rewritten on the bad copy (counted as corrected); a
block bad on both is reported with its files. Unmounted, the second copy is
--meta-mirror DEV, or looked for among the block devices; a mirror running
degraded is scrubbed on the copy in use, and the report says so.

On a terminal a bar shows the bytes read. Ctrl-C stops the scrub (a
mounted volume's too) and reports what was read.

Exit status (as fsck(8)): 0 no errors, 1 errors found and all corrected,
4 errors left uncorrected, 8 the scrub could not run, 32 stopped before
the end; 2 for a usage error.

Example: dualfs scrub /mnt
         dualfs scrub --rate 50M --json volume/meta.img volume/data.img
         dualfs scrub --meta-mirror /dev/sdc1 /dev/sdb1 /dev/sdd";

/// Arguments of `dualfs scrub`.
#[derive(Args, Debug)]
pub struct ScrubArgs {
    /// The mount point of a mounted volume, or the meta-data device of an
    /// unmounted one (or META#DATA).
    pub target: PathBuf,
    /// The data device of an unmounted volume.
    pub data: Option<PathBuf>,
    /// Read at most this many bytes per second (K, M, G suffixes), to
    /// leave the devices to the volume's users.
    #[arg(long, value_parser = super::parse_size)]
    pub rate: Option<u64>,
    /// Read the meta-data only, not the data device.
    #[arg(long)]
    pub meta_only: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// The second copy of an unmounted volume's mirrored meta-data device:
    /// both copies are read, and a block bad on one is rewritten from the
    /// other. Looked for among the block devices when not given.
    #[arg(long, value_name = "DEV")]
    pub meta_mirror: Option<PathBuf>,
}
