//! The steps a workload is made of: what each one asks of the volume.

/// One step of a workload. Paths are relative to the root, `/`-separated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `mkdir`.
    Mkdir(String),
    /// `creat` (then close).
    Create(String),
    /// `pwrite` of `len` tagged bytes at `offset`.
    Write {
        /// File.
        path: String,
        /// Where.
        offset: u64,
        /// How many bytes.
        len: u32,
    },
    /// `truncate`.
    Truncate {
        /// File.
        path: String,
        /// New size.
        size: u64,
    },
    /// `fallocate` (mode 0) of `[0, size)`: the file grows to `size` at
    /// least, its new blocks preallocated (unwritten: they read as zeros).
    Fallocate {
        /// File.
        path: String,
        /// End of the range.
        size: u64,
    },
    /// `fallocate` collapse (`collapse`) or insert of `[offset, offset + len)`.
    Shift {
        /// File.
        path: String,
        /// Where (block-aligned for the call to succeed).
        offset: u64,
        /// How many bytes.
        len: u64,
        /// Collapse, else insert.
        collapse: bool,
    },
    /// `fallocate` unshare of `[offset, offset + len)`, keeping the size.
    Unshare {
        /// File.
        path: String,
        /// Where.
        offset: u64,
        /// How many bytes.
        len: u64,
    },
    /// `unlink`.
    Unlink(String),
    /// `rmdir`.
    Rmdir(String),
    /// `rename` (replacing).
    Rename {
        /// Old name.
        from: String,
        /// New name.
        to: String,
    },
    /// `renameat2` with `RENAME_WHITEOUT` (replacing): a whiteout stays
    /// under the old name.
    RenameWhiteout {
        /// Old name.
        from: String,
        /// New name.
        to: String,
    },
    /// `link`.
    Link {
        /// Existing name.
        from: String,
        /// New name.
        to: String,
    },
    /// `symlink`.
    Symlink {
        /// The link's name.
        path: String,
        /// What it points at.
        target: String,
    },
    /// `setxattr` of `user.k` with `len` tagged bytes.
    SetXattr {
        /// File or directory.
        path: String,
        /// Value length.
        len: u16,
    },
    /// `dualfs quota on`: the volume keeps quotas from now on (it syncs:
    /// everything so far becomes durable).
    QuotaOn,
    /// `chown` of a file to `uid` (the model keeps no owners; the volume's
    /// quota usage follows).
    Chown {
        /// File.
        path: String,
        /// New owner.
        uid: u32,
    },
    /// `fsync` of a file or directory. Of a directory: every step so far
    /// becomes durable (a commit). Of a file: that file as it is now, and
    /// the names that reach it if it is new (an fsync record; DESIGN.md,
    /// "fsync writes only its file"), unless `order=strict`, where every
    /// step so far becomes durable.
    Fsync(String),
    /// `fdatasync` of a file: as a file fsync (workloads using it change
    /// no modes or attributes of the file, which fdatasync may leave).
    Fdatasync(String),
    /// `sync`: a commit and a checkpoint.
    Sync,
    /// `mount -o remount,ro` (`Volume::set_read_only`): everything so far
    /// becomes durable, and a change tried while read-only is refused.
    RemountRo,
    /// `mount -o remount,rw`: changes are taken again.
    RemountRw,
    /// The periodic work: commit, and checkpoint when enough log was written.
    Tick,
    /// An on-demand clean (`dualfs clean`): the `segments` emptiest
    /// segments in use, whatever their utilisation, so that live data moves.
    Clean {
        /// At most this many victims.
        segments: u8,
    },
    /// `fstrim` (`Volume::trim` of the whole volume): free data blocks and
    /// log segments no crash can need are discarded.
    Trim,
    /// `dualfs resize`: grow to `meta` and `data` blocks of each device
    /// (0 keeps a device's size). The devices must hold them (the
    /// explorer's `spare_*_blocks`).
    Resize {
        /// Meta-data device blocks.
        meta: u64,
        /// Data device blocks.
        data: u64,
    },
    /// `open` and keep the file open as handle `h`.
    Open {
        /// File.
        path: String,
        /// Handle number.
        h: u8,
    },
    /// `pwrite` through handle `h` (the file may have no name any more).
    WriteOpen {
        /// Handle.
        h: u8,
        /// Where.
        offset: u64,
        /// How many bytes.
        len: u32,
    },
    /// `open(dir, O_TMPFILE)`: an unnamed file, kept open as handle `h`.
    Tmpfile {
        /// The directory it is made in.
        dir: String,
        /// Handle number.
        h: u8,
    },
    /// `linkat(h, "", AT_EMPTY_PATH)`: a name for handle `h`'s file.
    LinkOpen {
        /// Handle.
        h: u8,
        /// New name.
        to: String,
    },
    /// `fsync` through handle `h`.
    FsyncOpen(u8),
    /// `close` of handle `h`.
    Close(u8),
    /// `dualfs snapshot create`: everything so far becomes durable, and the
    /// snapshot shows the tree as it is now, for ever.
    SnapshotCreate(String),
    /// `dualfs snapshot delete` (of a snapshot or a kept tree).
    SnapshotDelete(String),
    /// `dualfs clone`: `name`, a writable clone of snapshot `source`.
    CloneCreate {
        /// The snapshot (or kept tree) cloned.
        source: String,
        /// The clone's name.
        name: String,
    },
    /// `dualfs mount -o clone=NAME`: that tree becomes the live one, and
    /// the live tree is kept under its name.
    SwitchTree(String),
    /// An operation on tree NAME served beside the live one
    /// (`Volume::enter_tree`): that tree becomes the live one, and the
    /// live tree is kept under its name with every file held open in it.
    EnterTree(String),
    /// `chattr` (FS_IOC_SETFLAGS): the inode flags of a file or directory
    /// become `flags` (ones its kind may carry). A write to a file with
    /// the sync flag is durable when it returns; a change of the names in
    /// a directory with the dirsync or sync flag is, with every step
    /// before it (a commit).
    SetFlags {
        /// File or directory.
        path: String,
        /// The flags (`dualfs_engine::volume::FLAG_*`).
        flags: u32,
    },
}
