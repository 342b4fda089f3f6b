//! Deliberately broken ordering rules, for proving that the crash explorer
//! catches each one. Compiled only with the `fault-injection` feature; in a
//! normal build [`active`] is a constant `false` and every hook vanishes.

/// An ordering rule to break.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fault {
    /// Rule 1: do not flush the data device before writing the commit group.
    NoDataFlush,
    /// Rule 2: hand a freed data extent back to the allocator at once.
    ImmediateReuse,
    /// Rule 2: reuse log segments the durable checkpoint still needs.
    SegmentReuse,
    /// Rule 3: let a commit (and so fsync) return before the log is flushed.
    FsyncBeforeFlush,
    /// Rule 2 for checkpoints: overwrite the same slot every time.
    CheckpointInPlace,
    /// Replace-by-rename: let a rename over an existing file commit while
    /// the new file's data waits as a delayed tail.
    RenameBeforeData,
    /// Replace-by-truncation: commit a truncation to zero before the new
    /// contents are complete.
    NoReplaceHold,
    /// Remount read-only: refuse changes without committing those made
    /// (the switch promises they are durable, as a sync does).
    RemountWithoutCommit,
    /// Untangled fsync: replay fsync records that a later commit group
    /// already folded in, over the newer state that group wrote.
    ReplayFolded,
    /// Untangled fsync: leave out the entry that names a new parent
    /// directory (its inode is logged, its name is not).
    FsyncOmitsParent,
    /// `order=strict`: let an fsync write only its file's records while
    /// other operations before it are not yet durable.
    StrictFsyncUntangled,
    /// `order=strict`: overwrite data in place, so that a commit's data can
    /// reach the disk without the operations before it.
    StrictInPlace,
    /// Rule 1 for data copied into fsync records and written in place in
    /// the background: let the commit group that folds the records skip
    /// the data flush when it has no data of its own.
    HomeWriteUnflushed,
    /// Snapshots: overwrite a data block a snapshot holds in place, as if
    /// no snapshot held it (the snapshot then shows the new data).
    SnapshotInPlace,
    /// Resize: grow the superblocks' geometry while the checkpoints still
    /// take theirs from the superblock (skip the two checkpoints that carry
    /// the old geometry first).
    ResizeWithoutGeometry,
    /// Resize: commit a smaller log before the segments past its new end
    /// are empty.
    ShrinkBeforeEmpty,
    /// Resize: commit a smaller data space while blocks past its new end
    /// are still mapped by files (skip the data mover).
    ShrinkDataBeforeEmpty,
    /// Delayed tails: let the block holding an inline file's durable bytes
    /// wait with the rest of its tail once the file outgrows its inode.
    UninlineInTail,
    /// Receive: apply a stream's records without first committing the
    /// root's mark that a receive is under way (a crash then leaves a tree
    /// that is neither the base nor marked for finishing).
    ReceiveWithoutMark,
    /// Clones: write the incoming tree's maps in one checkpoint and the
    /// snapshot list that keeps the outgoing tree in the next.
    SwitchListLater,
    /// Trees served beside each other: admit an operation on one tree
    /// while another is entered, without making it the live tree (its
    /// change is made durable with the other tree's maps).
    EnterWithoutSwitch,
    /// Migrate: flush only the device in use, never its replacement, so
    /// that the superblocks name the new device before the copy on it is
    /// durable.
    MigrateCopyUnsynced,
    /// Migrate: leave a copy step's older contents on the replacement for
    /// blocks written while the step was read and written (skip copying
    /// them again with writes excluded).
    MigrateCopyOverWrites,
    /// Bounded inode map: give back inode-map blocks changed since the
    /// last checkpoint as if they were clean (their changes are lost).
    EvictDirtyMapBlocks,
    /// Bounded inode map: give back clean inode-map blocks while a sealed
    /// checkpoint is being written (those it placed are read back from
    /// where their bytes are not yet).
    EvictBeforeCheckpointWritten,
    /// Bounded data space: give back bitmap blocks changed since the last
    /// checkpoint as if they were clean (their changes are lost).
    EvictDirtyBitmapBlocks,
    /// Delayed tails past a checkpoint: let a commit or checkpoint made for
    /// room leave the young tails unwritten but record the files' full
    /// sizes (a crash then shows zeros where data was written).
    RoomTailUncapped,
    /// Delayed tails of outgrown inline files: record such a file inline
    /// with its bytes as they were when it outgrew its inode, though a
    /// write changed some of them since (a crash then shows the old bytes
    /// beside later operations).
    OutgrownInlineStale,
    /// O_TMPFILE: make the unnamed file without putting it on the orphan
    /// list (a crash then leaves an inode in use that nothing names).
    TmpfileNotOrphan,
    /// Sparse IFile: leave the IFile blocks of the checkpoint followed out
    /// of the segment usage entries a checkpoint writes (they are its own
    /// no longer, and counted nowhere), so that their segments look free.
    UncountedCheckpointBlocks,
    /// Collapse range: free the range and shrink the file in one commit
    /// group, and move the extents after it down in the next (a crash
    /// between shows the file cut short with its tail still in place).
    CollapseSizeLater,
    /// Discard: discard a freed data extent at once, before the commit
    /// group that frees it is durable (a crash then shows the file
    /// still mapping blocks whose bytes are gone).
    DiscardBeforeDurable,
    /// Discard: discard freed data blocks a snapshot still holds, as if
    /// no snapshot held them.
    DiscardHeld,
    /// Discard: discard a log segment as soon as it may be written into,
    /// without waiting for the checkpoint after the one that freed it
    /// (the previous checkpoint, which a damaged newer slot falls back
    /// to, still maps blocks there).
    DiscardSegmentEarly,
    /// Discard: let the data blocks a deleted snapshot alone held go (to
    /// the allocator and, with `-o discard`, to the device) as soon as the
    /// checkpoint that drops the snapshot is durable, without waiting for
    /// the next (the previous checkpoint, which a damaged newer slot falls
    /// back to, still lists the snapshot).
    DiscardDeletedEarly,
    /// Redundant log: write the partial segments an fsync or a sync waits
    /// for once, without their twins (one damaged block of the last one
    /// then loses it without a word).
    NoTwins,
    /// Meta-data mirror: flush only the first copy before a write is
    /// acknowledged (the second may still lose it).
    MirrorAckBeforeSecond,
    /// Meta-data mirror: take a copy that missed writes (its superblock
    /// names an older mirror generation) as in sync.
    MirrorTrustStale,
    /// Meta-data mirror: a copy added by `dualfs mirror add` is named in
    /// sync on every device before it is copied (a crash during the copy
    /// leaves a partial copy that passes for whole).
    MirrorSyncBeforeCopy,
    /// Inode flags: let a write to a file with the sync flag (`chattr +S`)
    /// return before it is durable, as a write to any other file does.
    SyncFlagIgnored,
    /// Quotas: an inode given to another owner, group or project stays
    /// charged to the one it left as well (its usage there never drops).
    QuotaChownKeepsUsage,
    /// RENAME_WHITEOUT: make the whiteout in a commit group after the
    /// rename's (a crash between shows the old name gone and no whiteout).
    WhiteoutApart,
    /// Snapshot records: leave the snapshot list as it is when only the
    /// count of free data blocks the snapshots hold moved (a file a
    /// snapshot keeps deleted): a mount then starts from a stale count.
    HeldCountStale,
}

impl Fault {
    /// Every fault.
    pub const ALL: [Fault; 43] = [
        Fault::NoDataFlush,
        Fault::ImmediateReuse,
        Fault::SegmentReuse,
        Fault::FsyncBeforeFlush,
        Fault::CheckpointInPlace,
        Fault::RenameBeforeData,
        Fault::NoReplaceHold,
        Fault::RemountWithoutCommit,
        Fault::ReplayFolded,
        Fault::FsyncOmitsParent,
        Fault::StrictFsyncUntangled,
        Fault::StrictInPlace,
        Fault::HomeWriteUnflushed,
        Fault::SnapshotInPlace,
        Fault::ResizeWithoutGeometry,
        Fault::ShrinkBeforeEmpty,
        Fault::ShrinkDataBeforeEmpty,
        Fault::UninlineInTail,
        Fault::ReceiveWithoutMark,
        Fault::SwitchListLater,
        Fault::MigrateCopyUnsynced,
        Fault::MigrateCopyOverWrites,
        Fault::EvictDirtyMapBlocks,
        Fault::EvictBeforeCheckpointWritten,
        Fault::EvictDirtyBitmapBlocks,
        Fault::RoomTailUncapped,
        Fault::OutgrownInlineStale,
        Fault::TmpfileNotOrphan,
        Fault::UncountedCheckpointBlocks,
        Fault::CollapseSizeLater,
        Fault::DiscardBeforeDurable,
        Fault::DiscardHeld,
        Fault::DiscardSegmentEarly,
        Fault::DiscardDeletedEarly,
        Fault::NoTwins,
        Fault::MirrorAckBeforeSecond,
        Fault::MirrorTrustStale,
        Fault::MirrorSyncBeforeCopy,
        Fault::SyncFlagIgnored,
        Fault::QuotaChownKeepsUsage,
        Fault::WhiteoutApart,
        Fault::EnterWithoutSwitch,
        Fault::HeldCountStale,
    ];

    #[cfg(feature = "fault-injection")]
    fn bit(self) -> u64 {
        1 << (self as u64)
    }
}

#[cfg(feature = "fault-injection")]
static ACTIVE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Breaks the rules in `faults` (and keeps every other) for the whole process.
#[cfg(feature = "fault-injection")]
pub fn set(faults: &[Fault]) {
    let mask = faults.iter().fold(0, |m, f| m | f.bit());
    ACTIVE.store(mask, std::sync::atomic::Ordering::SeqCst);
}

/// Whether `fault` is active.
#[cfg(feature = "fault-injection")]
#[must_use]
pub fn active(fault: Fault) -> bool {
    ACTIVE.load(std::sync::atomic::Ordering::SeqCst) & fault.bit() != 0
}

/// Whether `fault` is active: never, without the `fault-injection` feature.
#[cfg(not(feature = "fault-injection"))]
#[must_use]
#[inline(always)]
pub const fn active(_fault: Fault) -> bool {
    false
}
