//! What repair needs of the log beyond ordinary operations: putting a
//! record right whatever the disk holds, freeing an inode number whose
//! record cannot be read, recounting what the IFile derives, and starting
//! a log of its own that no roll-forward from the old checkpoint reaches.

use super::Log;
use crate::error::Result;
use crate::format::descriptor::Change;
use crate::format::ifile::{IMAP_USED, ImapEntry};
use crate::format::inode::InodeRecord;
use crate::types::{DataBlock, InodeNo, MetaBlock, SegmentNo};

impl Log {
    /// Makes `rec` the inode's newest record, written with the next commit
    /// whatever the disk holds (the map takes its generation and length).
    /// The inode number must be in use.
    pub fn replace_inode(&mut self, rec: InodeRecord) {
        self.cache.remove_inode(rec.ino);
        self.cache.insert_dirty_inode(rec);
    }

    /// Frees inode number `ino` without reading its record (it cannot be
    /// read); its next use gets a new generation.
    pub fn drop_inode_entry(&mut self, ino: InodeNo) {
        let Some(e) = self.ifile.inode(ino) else { return };
        if ino.0 == 0 || !e.in_use() {
            return;
        }
        let generation = e.generation.wrapping_add(1);
        self.cache.remove_inode(ino);
        self.ifile.free_inode(ino, generation);
        self.record(Change::InodeFree { ino, generation });
    }

    /// Takes inode number `ino` (free) for `rec`, which becomes its record
    /// with the next commit: repair gives a lost root directory number 1.
    pub fn create_inode_at(&mut self, ino: InodeNo, mut rec: InodeRecord) {
        let generation = self.ifile.inode(ino).map_or(0, |e| e.generation);
        self.ifile.take_inode(ino, ImapEntry { address: MetaBlock(0), generation, flags: IMAP_USED, record_len: 0 });
        rec.ino = ino;
        rec.generation = generation;
        self.cache.insert_dirty_inode(rec);
    }

    /// Sets every segment's live bytes to what the maps say; returns the
    /// segments that said otherwise (segment, said, true).
    pub fn recount_live_bytes(&mut self) -> Vec<(SegmentNo, u32, u64)> {
        let wrong = self.ifile.recount_live_bytes();
        self.recount_free_segments();
        wrong
    }

    /// Sets the data bitmap to exactly what `used` covers (and block 0).
    /// Returns blocks that were marked free while used, and used while free.
    pub fn rebuild_bitmap(&mut self, used: &[(DataBlock, u32)]) -> (u64, u64) {
        self.space.rebuild_bitmap(used)
    }

    /// Moves the head to the start of a free segment that is neither the
    /// one it is in nor its reserved next one, so that what is written from
    /// now on is no continuation of the durable checkpoint's log: a crash
    /// before the next checkpoint leaves the volume as it was.
    ///
    /// # Errors
    /// A usage block cannot be read.
    pub fn detach_head(&mut self) -> Result<()> {
        let (cur, next) = (self.head.segment, self.head.next_segment);
        if let Some(seg) = self.pick_free_segment_after(cur, &[cur, next])? {
            self.head.segment = seg;
            self.head.offset = 0;
            self.head.next_segment = self.pick_free_segment_after(seg, &[cur, next, seg])?.unwrap_or(seg);
            self.detached = true;
            self.recount_free_segments();
        }
        Ok(())
    }
}
