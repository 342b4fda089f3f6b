//! Recordings of three devices, for the operations that write three at
//! once (a migration, a mirror's resync) and that the explorer's
//! two-device recordings cannot express: each write and flush in the
//! order the devices saw them, and the images a crash after any of them
//! may leave.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use dualfs_engine::device::BlockDevice;
use dualfs_engine::types::BLOCK_SIZE;

use crate::image::{Block, Image, OverlayDevice};

/// What a recording holds, in order.
#[derive(Clone, Debug)]
pub enum Ev {
    /// Device, block, contents.
    Write(usize, u64, Block),
    Flush(usize),
    /// An fsync of this file returned: it must be whole from here on.
    Synced(String, Vec<u8>),
}

/// The recording the three devices share.
pub type Events = Arc<Mutex<Vec<Ev>>>;

/// Files by name, with the contents promised.
pub type Files = Vec<(String, Vec<u8>)>;

/// Appends `e` to the recording.
pub fn push(ev: &Events, e: Ev) {
    ev.lock().unwrap_or_else(PoisonError::into_inner).push(e);
}

/// A device recording its writes and flushes, one block per write.
#[derive(Debug)]
pub struct Rec {
    /// Its index in the recording.
    pub dev: usize,
    /// What it holds now.
    pub live: OverlayDevice,
    pub ev: Events,
}

impl BlockDevice for Rec {
    fn block_count(&self) -> u64 {
        self.live.block_count()
    }
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.live.read_blocks(first, buf)
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> std::io::Result<()> {
        // Held across the write and its events: a write's blocks and the
        // events of another device's write do not interleave.
        let mut ev = self.ev.lock().unwrap_or_else(PoisonError::into_inner);
        self.live.write_blocks(first, buf)?;
        for (i, chunk) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
            let mut b = [0u8; BLOCK_SIZE];
            b.copy_from_slice(chunk);
            ev.push(Ev::Write(self.dev, first + i as u64, Arc::new(b)));
        }
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        push(&self.ev, Ev::Flush(self.dev));
        Ok(())
    }
}

/// Which of the writes in flight at a cut a crash keeps.
#[derive(Clone, Copy, Debug)]
pub enum Choice {
    Flushed,
    All,
    /// A part drawn from this seed.
    Random(u64),
    /// The last write (a superblock) half written: its first sector only,
    /// or all but it.
    Torn(bool),
}

/// The three images after `cut` events, as `choice` says.
#[must_use]
pub fn build(start: &[Arc<Image>; 3], events: &[Ev], cut: usize, choice: Choice) -> [Arc<Image>; 3] {
    let mut durable: [HashMap<u64, Block>; 3] = Default::default();
    let mut pending: [Vec<(u64, Block)>; 3] = Default::default();
    for e in &events[..cut] {
        match e {
            Ev::Write(dev, b, data) => pending[*dev].push((*b, data.clone())),
            Ev::Flush(dev) => durable[*dev].extend(pending[*dev].drain(..)),
            Ev::Synced(..) => {}
        }
    }
    let mut rng = match choice {
        Choice::Random(s) => s | 1,
        _ => 1,
    };
    for (i, p) in pending.iter().enumerate() {
        let n = p.len();
        for (k, (b, data)) in p.iter().enumerate() {
            let keep = match choice {
                Choice::Flushed => false,
                Choice::All => true,
                Choice::Random(_) => {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng & 1 == 1
                }
                Choice::Torn(_) => k + 1 < n,
            };
            if keep {
                durable[i].insert(*b, data.clone());
            }
        }
    }
    if let (Choice::Torn(first), Some(Ev::Write(dev, b, new))) = (choice, events[..cut].last()) {
        let old = durable[*dev].get(b).cloned().unwrap_or_else(|| start[*dev].block(*b));
        let mut torn = *old;
        let r = if first { 0..512 } else { 512..BLOCK_SIZE };
        torn[r.clone()].copy_from_slice(&new[r]);
        durable[*dev].insert(*b, Arc::new(torn));
    }
    let img = |i: usize| Arc::new(start[i].with_blocks(durable[i].clone()));
    [img(0), img(1), img(2)]
}
