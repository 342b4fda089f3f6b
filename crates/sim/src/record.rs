//! Recording devices: every write and flush of both devices (three on a
//! mirrored volume: the second meta-data copy is recorded on its own), in
//! one shared sequence, with the workload's own marks (an operation
//! starts, a promise of durability was kept) woven in.
//!
//! One sequence for the devices is what lets a crash fall between a data
//! flush and the meta-data write that depends on it. Writes are kept one
//! block per event: each block of a multi-block request may or may not
//! reach the disk on its own.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dualfs_engine::device::BlockDevice;
use dualfs_engine::types::BLOCK_SIZE;

use crate::image::{Block, Image, OverlayDevice};

/// Which device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dev {
    /// The meta-data device (the log); on a mirrored volume its first copy.
    Meta,
    /// The data device.
    Data,
    /// The second copy of a mirrored meta-data device.
    Mirror,
}

impl Dev {
    /// Both, meta-data first.
    pub const BOTH: [Dev; 2] = [Dev::Meta, Dev::Data];
    /// All three of a mirrored volume.
    pub const ALL: [Dev; 3] = [Dev::Meta, Dev::Data, Dev::Mirror];

    /// Index for arrays of the devices ([`Dev::ALL`]'s order).
    #[must_use]
    pub fn index(self) -> usize {
        match self {
            Dev::Meta => 0,
            Dev::Data => 1,
            Dev::Mirror => 2,
        }
    }

    /// Whether it holds meta-data (a copy of the log).
    #[must_use]
    pub fn is_meta(self) -> bool {
        self != Dev::Data
    }
}

/// What the workload says about itself, between device events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// Step `n` (1-based) of the workload begins.
    StepStart(usize),
    /// Every step up to `n` was promised durable (a directory fsync or a
    /// sync returned, or any fsync with `order=strict`).
    Durable(usize),
    /// The file fsync of step `n` returned: that file, as step `n` left it,
    /// is durable, and nothing else is promised.
    Synced(usize),
}

/// One event of the recording.
#[derive(Clone, Debug)]
pub enum Event {
    /// One block written.
    Write {
        /// Device.
        dev: Dev,
        /// Block number.
        block: u64,
        /// Its new contents.
        data: Block,
    },
    /// A flush returned: every earlier write of `dev` is durable.
    Flush(Dev),
    /// Blocks discarded. A device may drop them at once, whatever comes
    /// later: from here on (in every crash state cut after it, until the
    /// block is written again) they read as zeros or as garbage
    /// ([`crate::crash`]), never as what they held.
    Discard {
        /// Device.
        dev: Dev,
        /// First block.
        first: u64,
        /// Blocks.
        count: u64,
    },
    /// A mark of the workload.
    Mark(Mark),
}

/// The shared sequence of events.
#[derive(Debug, Default)]
pub struct Recorder {
    events: Mutex<Vec<Event>>,
}

impl Recorder {
    fn lock(&self) -> MutexGuard<'_, Vec<Event>> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends a mark.
    pub fn mark(&self, m: Mark) {
        self.lock().push(Event::Mark(m));
    }

    /// Everything recorded so far, the two meta-data copies' concurrent
    /// requests in a fixed order ([`in_copy_order`]).
    #[must_use]
    pub fn events(&self) -> Vec<Event> {
        in_copy_order(self.lock().clone())
    }

    /// Number of events so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing was recorded.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The mirror sends each write and each flush to both meta-data copies at
/// once, the second from another thread, so two runs of one workload may
/// record a run of such requests in different orders. Within each run of
/// consecutive writes to the copies (nothing else between), and each run
/// of flushes of them, copy 1's events are put first, each copy's own
/// order kept: recordings then replay exactly, and no crash state is lost,
/// since at a run's end every write of the run is in flight on its copy
/// and any subset of each copy's may survive ([`crate::crash`]). Runs are
/// never merged across a flush: a copy's write issued after the other
/// copy's flush returned cannot reach the disk before that flush.
#[must_use]
pub fn in_copy_order(mut events: Vec<Event>) -> Vec<Event> {
    // 1: a write to a copy; 2: a flush of one; 0: anything else.
    let kind = |e: &Event| match e {
        Event::Write { dev, .. } if dev.is_meta() => 1,
        Event::Flush(dev) if dev.is_meta() => 2,
        _ => 0,
    };
    let mut start = 0;
    while start < events.len() {
        let k = kind(&events[start]);
        let mut end = start + 1;
        while end < events.len() && k != 0 && kind(&events[end]) == k {
            end += 1;
        }
        if k != 0 {
            // Stable: each copy keeps its own order.
            events[start..end].sort_by_key(|e| match e {
                Event::Write { dev, .. } | Event::Flush(dev) => dev.index(),
                _ => 0,
            });
        }
        start = end;
    }
    events
}

/// A device that records into a [`Recorder`] and keeps the current contents
/// in an [`OverlayDevice`], so the volume above reads what it wrote.
#[derive(Debug)]
pub struct RecordingDevice {
    dev: Dev,
    live: OverlayDevice,
    rec: Arc<Recorder>,
}

impl RecordingDevice {
    /// A recording device starting from `base`.
    #[must_use]
    pub fn new(dev: Dev, base: Arc<Image>, rec: Arc<Recorder>) -> RecordingDevice {
        RecordingDevice { dev, live: OverlayDevice::new(base), rec }
    }

    /// The current contents, frozen.
    #[must_use]
    pub fn freeze(&self) -> Arc<Image> {
        self.live.freeze()
    }
}

/// What a discarded block reads as on the running volume, until written
/// again: garbage, so that a read of a block discarded too early is seen
/// (a file's bytes differ, a meta-data block fails its checksum).
#[must_use]
pub fn discarded_garbage() -> Block {
    static GARBAGE: std::sync::LazyLock<Block> = std::sync::LazyLock::new(|| {
        let mut b = [0u8; BLOCK_SIZE];
        for (i, x) in b.iter_mut().enumerate() {
            *x = (i as u8).wrapping_mul(73) ^ 0xA5;
        }
        b[..16].copy_from_slice(b"Discarded block!");
        Arc::new(b)
    });
    GARBAGE.clone()
}

/// What a discarded block reads as in a crash state that says zeros.
#[must_use]
pub fn discarded_zeros() -> Block {
    static ZEROS: std::sync::LazyLock<Block> = std::sync::LazyLock::new(|| Arc::new([0u8; BLOCK_SIZE]));
    ZEROS.clone()
}

impl BlockDevice for RecordingDevice {
    fn block_count(&self) -> u64 {
        self.live.block_count()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.live.read_blocks(first, buf)
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> std::io::Result<()> {
        self.live.write_blocks(first, buf)?;
        let mut events = self.rec.lock();
        for (i, chunk) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
            let mut b = [0u8; BLOCK_SIZE];
            b.copy_from_slice(chunk);
            events.push(Event::Write { dev: self.dev, block: first + i as u64, data: Arc::new(b) });
        }
        Ok(())
    }

    fn flush(&self) -> std::io::Result<()> {
        self.rec.lock().push(Event::Flush(self.dev));
        Ok(())
    }

    fn discard(&self, first: u64, count: u64) -> std::io::Result<()> {
        let end = first.checked_add(count).filter(|&e| e <= self.live.block_count()).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("discard of {first}+{count} beyond the end"))
        })?;
        for b in first..end {
            self.live.put(b, discarded_garbage());
        }
        self.rec.lock().push(Event::Discard { dev: self.dev, first, count });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(dev: Dev, block: u64) -> Event {
        Event::Write { dev, block, data: discarded_zeros() }
    }

    fn shape(events: &[Event]) -> Vec<(char, u64)> {
        events
            .iter()
            .map(|e| match e {
                Event::Write { dev, block, .. } => (['m', 'd', 'c'][dev.index()], *block),
                Event::Flush(dev) => (['M', 'D', 'C'][dev.index()], 0),
                _ => ('-', 0),
            })
            .collect()
    }

    #[test]
    fn the_copies_concurrent_requests_get_one_order_and_no_run_crosses_a_flush() {
        let events = vec![
            w(Dev::Mirror, 1),
            w(Dev::Meta, 1),
            w(Dev::Meta, 2),
            w(Dev::Mirror, 2),
            Event::Flush(Dev::Mirror),
            Event::Flush(Dev::Meta),
            w(Dev::Mirror, 3),
            w(Dev::Data, 9),
            w(Dev::Mirror, 4),
            w(Dev::Meta, 4),
            Event::Mark(Mark::StepStart(1)),
            w(Dev::Meta, 5),
        ];
        let got = shape(&in_copy_order(events));
        let want = vec![
            ('m', 1),
            ('m', 2),
            ('c', 1),
            ('c', 2),
            ('M', 0),
            ('C', 0),
            ('c', 3),
            ('d', 9),
            ('m', 4),
            ('c', 4),
            ('-', 0),
            ('m', 5),
        ];
        assert_eq!(got, want);
    }
}
