//! Repair writes to devices that keep its writes in memory: nothing
//! reaches the disks until the user's answer says so (`-n` and `-p` with
//! something only `-y` may do write nothing), and then the writes and
//! flushes are replayed in the order repair made them, so that an
//! interrupted replay leaves what an interrupted repair would have.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use crate::device::BlockDevice;
use crate::types::BLOCK_SIZE;

/// One write or flush, in the order repair made them.
#[derive(Debug)]
enum Event {
    Write { meta: bool, first: u64, bytes: Vec<u8> },
    Flush { meta: bool },
}

/// The writes of both staged devices, in one order.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    events: Mutex<Vec<Event>>,
}

impl Journal {
    fn push(&self, e: Event) {
        self.events.lock().unwrap_or_else(PoisonError::into_inner).push(e);
    }

    /// Blocks written to each device (meta-data, data), counting rewrites.
    pub(crate) fn blocks_written(&self) -> (u64, u64) {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let mut n = (0, 0);
        for e in events.iter() {
            if let Event::Write { meta, bytes, .. } = e {
                let b = (bytes.len() / BLOCK_SIZE) as u64;
                if *meta {
                    n.0 += b;
                } else {
                    n.1 += b;
                }
            }
        }
        n
    }

    /// Writes and flushes every event to the real devices, in order.
    pub(crate) fn replay(&self, meta: &dyn BlockDevice, data: &dyn BlockDevice) -> io::Result<()> {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        for e in events.iter() {
            match e {
                Event::Write { meta: true, first, bytes } => meta.write_blocks(*first, bytes)?,
                Event::Write { meta: false, first, bytes } => data.write_blocks(*first, bytes)?,
                Event::Flush { meta: true } => meta.flush()?,
                Event::Flush { meta: false } => data.flush()?,
            }
        }
        meta.flush()?;
        data.flush()
    }
}

/// A device whose writes stay in memory, over one that is only read.
pub(crate) struct StagedDevice {
    base: Arc<dyn BlockDevice>,
    meta: bool,
    blocks: Mutex<HashMap<u64, Box<[u8]>>>,
    journal: Arc<Journal>,
}

impl fmt::Debug for StagedDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagedDevice").field("meta", &self.meta).finish_non_exhaustive()
    }
}

impl StagedDevice {
    /// Stages writes to `base` (the meta-data device if `meta`) in `journal`.
    pub(crate) fn new(base: Arc<dyn BlockDevice>, meta: bool, journal: Arc<Journal>) -> StagedDevice {
        StagedDevice { base, meta, blocks: Mutex::new(HashMap::new()), journal }
    }
}

impl BlockDevice for StagedDevice {
    fn block_count(&self) -> u64 {
        self.base.block_count()
    }

    fn copies(&self) -> usize {
        self.base.copies()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        crate::device::check_range(self.block_count(), first, buf.len())?;
        let blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        let n = buf.len() / BLOCK_SIZE;
        if (0..n as u64).all(|i| !blocks.contains_key(&(first + i))) {
            drop(blocks);
            return self.base.read_blocks(first, buf);
        }
        for (i, out) in buf.chunks_exact_mut(BLOCK_SIZE).enumerate() {
            match blocks.get(&(first + i as u64)) {
                Some(b) => out.copy_from_slice(b),
                None => self.base.read_blocks(first + i as u64, out)?,
            }
        }
        Ok(())
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        crate::device::check_range(self.block_count(), first, buf.len())?;
        let mut blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, b) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
            blocks.insert(first + i as u64, b.into());
        }
        self.journal.push(Event::Write { meta: self.meta, first, bytes: buf.to_vec() });
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.journal.push(Event::Flush { meta: self.meta });
        Ok(())
    }
}
