//! Fsync partial segments: writing them, and what roll-forward keeps of them.
//!
//! An fsync partial segment (kind 3, `format::fsync`) is one partial segment
//! in the log's sequence and checksum chain, flagged as a group of its own:
//! a descriptor holding fsync records, then the raw data blocks its `Data`
//! records name. It changes nothing in the IFile when it is written or
//! rolled forward; roll-forward collects those that follow the last complete
//! commit group (a later group carries everything an earlier record said,
//! so those before it are *folded*), and the volume replays them through
//! the namespace at mount.

use super::Log;
use crate::error::{Error, Result};
use crate::format::block::{self, BlockHeader, BlockKind};
use crate::format::checksum;
use crate::format::codec::Writer;
use crate::format::descriptor::{Descriptor, PS_GROUP_END, PsKind};
use crate::format::fsync::FsyncRecord;
use crate::types::{BLOCK_SIZE, DataBlock, InodeNo, MetaBlock, Seq, Timestamp};

use super::seal::SealedGroup;

/// Most descriptor blocks one fsync partial segment may take (its records);
/// larger fsyncs commit instead.
pub const MAX_FSYNC_DESC_BLOCKS: usize = 16;

/// An fsync partial segment read back by roll-forward, to be replayed.
#[derive(Clone, Debug)]
pub struct PendingFsync {
    /// Its sequence number.
    pub seq: Seq,
    /// Its first block (for errors).
    pub at: MetaBlock,
    /// Its records, in order.
    pub records: Vec<FsyncRecord>,
    /// The raw data blocks, one per `Data` record, in order.
    pub copies: Vec<Vec<u8>>,
}

impl Log {
    /// Log blocks an fsync partial segment of `records` (carrying `copies`
    /// data blocks) takes.
    #[must_use]
    pub fn fsync_blocks(records: &[FsyncRecord]) -> (usize, usize) {
        let d = Descriptor {
            kind: PsKind::Fsync,
            flags: PS_GROUP_END,
            seq: Seq(0),
            time: Timestamp::default(),
            segment: crate::types::SegmentNo(0),
            offset: 0,
            next_segment: crate::types::SegmentNo(0),
            prev_crc: 0,
            body_crc: 0,
            blocks: Vec::new(),
            inode_blocks: Vec::new(),
            changes: Vec::new(),
            fsync: records.to_vec(),
        };
        (d.desc_blocks(), d.data_copies())
    }

    /// Places and encodes one fsync partial segment: `records`, then the raw
    /// blocks `copies` (one per `Data` record, in order), with `home` the
    /// data blocks to write in place and flush before it (they become
    /// reachable through its `Range` records). Nothing is written: the
    /// caller writes the returned group outside the volume lock.
    ///
    /// # Errors
    /// `NoSpace(Meta)` when no segment is left to move the log into;
    /// `Invalid` when the records do not fit one segment (callers bound them).
    pub fn seal_fsync(
        &mut self,
        records: Vec<FsyncRecord>,
        copies: &[Vec<u8>],
        home: Vec<(DataBlock, Vec<u8>)>,
        now: Timestamp,
    ) -> Result<SealedGroup> {
        let (desc_blocks, n_copies) = Log::fsync_blocks(&records);
        if n_copies != copies.len() || copies.iter().any(|c| c.len() != BLOCK_SIZE) {
            return Err(Error::Invalid("fsync records and data copies disagree"));
        }
        let total = desc_blocks + n_copies;
        if total > self.sb.segment_blocks as usize {
            return Err(Error::Invalid("an fsync partial segment does not fit a segment"));
        }
        if self.head.offset as usize + total > self.sb.segment_blocks as usize {
            self.advance_segment()?;
        }
        let seq = self.head.seq;
        let start = self.ifile.geometry().start(self.head.segment).0 + u64::from(self.head.offset);
        let mut crcs = Writer::with_capacity(copies.len() * 4);
        for c in copies {
            crcs.u32(checksum::crc32c(c));
        }
        let desc = Descriptor {
            kind: PsKind::Fsync,
            flags: PS_GROUP_END,
            seq,
            time: now,
            segment: self.head.segment,
            offset: self.head.offset,
            next_segment: self.head.next_segment,
            prev_crc: self.head.prev_crc,
            body_crc: checksum::crc32c(&crcs.into_inner()),
            blocks: Vec::new(),
            inode_blocks: Vec::new(),
            changes: Vec::new(),
            fsync: records,
        };
        debug_assert_eq!(desc.desc_blocks(), desc_blocks);
        let (payloads, desc_crc) = desc.encode();
        let mut buf = Vec::with_capacity(total * BLOCK_SIZE);
        for (i, pl) in payloads.iter().enumerate() {
            let header = BlockHeader {
                kind: BlockKind::Descriptor,
                aux: i as u16,
                payload_len: pl.len() as u32,
                volume_id: self.volume_id,
                address: MetaBlock(start + i as u64),
                seq,
                owner: InodeNo(0),
                name: desc_blocks as u64,
            };
            buf.extend_from_slice(&block::seal_block(&header, pl));
        }
        for c in copies {
            buf.extend_from_slice(c);
        }
        self.ifile.note_write(self.head.segment, seq);
        self.head.seq = seq.next();
        self.head.prev_crc = desc_crc;
        self.head.offset += total as u32;
        self.blocks_since_checkpoint += total as u64;
        self.stats.partial_segments += 1;
        self.stats.meta_blocks_written += total as u64;
        self.stats.fsync_partial_segments += 1;
        self.stats.data_blocks_written += home.iter().map(|(_, b)| (b.len() / BLOCK_SIZE) as u64).sum::<u64>();
        let group = SealedGroup::new(Some(seq), vec![(MetaBlock(start), buf)], home);
        group.forget_read_ahead(&mut self.readahead);
        Ok(group)
    }

    /// Records that an fsync partial segment is durable. Nothing it says is
    /// in the IFile (a later commit group carries it), so unlike
    /// [`Log::complete`] nothing is released or evicted.
    pub fn complete_fsync(&mut self, sealed: &SealedGroup) {
        sealed.forget_read_ahead(&mut self.readahead);
        if let Some(seq) = sealed.seq {
            self.durable = self.durable.max(seq);
        }
    }

    /// Counts data blocks written outside commits (fsync data in place).
    pub fn count_data_written(&mut self, blocks: u64) {
        self.stats.data_blocks_written += blocks;
    }

    /// The fsync partial segments roll-forward found after the last complete
    /// commit group, in log order, for the volume to replay. Taken once.
    pub fn take_pending_fsync(&mut self) -> Vec<PendingFsync> {
        std::mem::take(&mut self.pending_fsync)
    }

    /// Whether the volume may write fsync partial segments: the superblock
    /// carries the feature, so that an older reader refuses the volume
    /// rather than take one for a torn tail.
    #[must_use]
    pub fn fsync_records_enabled(&self) -> bool {
        self.sb.incompat & crate::format::superblock::INCOMPAT_FSYNC_LOG != 0
    }
}
