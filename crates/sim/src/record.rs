//! Recording devices: every write and flush of both devices, in one shared
//! sequence, with the workload's own marks (an operation starts, a promise
//! of durability was kept) woven in.
//!
//! One sequence for the two devices is what lets a crash fall between a
//! data flush and the meta-data write that depends on it. Writes are kept
//! one block per event: each block of a multi-block request may or may not
//! reach the disk on its own.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dualfs_engine::device::BlockDevice;
use dualfs_engine::types::BLOCK_SIZE;

use crate::image::{Block, Image, OverlayDevice};

/// Which device of the pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dev {
    /// The meta-data device (the log).
    Meta,
    /// The data device.
    Data,
}

impl Dev {
    /// Both, meta-data first.
    pub const BOTH: [Dev; 2] = [Dev::Meta, Dev::Data];

    /// Index for two-element arrays.
    #[must_use]
    pub fn index(self) -> usize {
        match self {
            Dev::Meta => 0,
            Dev::Data => 1,
        }
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

    /// Everything recorded so far.
    #[must_use]
    pub fn events(&self) -> Vec<Event> {
        self.lock().clone()
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
