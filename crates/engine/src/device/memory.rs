//! A sparse in-memory device for tests and engine-only benchmarks.

use std::collections::HashMap;
use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{BlockDevice, check_range};
use crate::types::BLOCK_SIZE;

type Block = Box<[u8; BLOCK_SIZE]>;

/// Blocks never written read as zeros; memory grows with what is written.
#[derive(Debug)]
pub struct MemoryDevice {
    blocks: u64,
    data: Mutex<HashMap<u64, Block>>,
}

impl MemoryDevice {
    /// A zero-filled device of `blocks` blocks.
    #[must_use]
    pub fn new(blocks: u64) -> MemoryDevice {
        MemoryDevice { blocks, data: Mutex::new(HashMap::new()) }
    }

    /// A copy of the current contents, as an independent device.
    #[must_use]
    pub fn snapshot(&self) -> MemoryDevice {
        MemoryDevice { blocks: self.blocks, data: Mutex::new(self.lock().clone()) }
    }

    /// A copy of the first `blocks` blocks (a truncated image).
    #[must_use]
    pub fn snapshot_truncated(&self, blocks: u64) -> MemoryDevice {
        let data = self.lock().iter().filter(|(b, _)| **b < blocks).map(|(b, d)| (*b, d.clone())).collect();
        MemoryDevice { blocks: blocks.min(self.blocks), data: Mutex::new(data) }
    }

    /// Number of blocks ever written (the device's memory footprint).
    #[must_use]
    pub fn blocks_in_use(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Block>> {
        // A panic while holding the lock cannot leave a half-written map entry.
        self.data.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl BlockDevice for MemoryDevice {
    fn block_count(&self) -> u64 {
        self.blocks
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(self.blocks, first, buf.len())?;
        let data = self.lock();
        for (i, chunk) in buf.chunks_exact_mut(BLOCK_SIZE).enumerate() {
            match data.get(&(first + i as u64)) {
                Some(b) => chunk.copy_from_slice(&b[..]),
                None => chunk.fill(0),
            }
        }
        Ok(())
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        check_range(self.blocks, first, buf.len())?;
        let mut data = self.lock();
        for (i, chunk) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
            let mut b: Block = Box::new([0; BLOCK_SIZE]);
            b.copy_from_slice(chunk);
            data.insert(first + i as u64, b);
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    /// Discarded blocks read as zeros again, and take no memory.
    fn discard(&self, first: u64, count: u64) -> io::Result<()> {
        check_range(self.blocks, first, usize::try_from(count).unwrap_or(usize::MAX).saturating_mul(BLOCK_SIZE))?;
        let mut data = self.lock();
        if count > data.len() as u64 {
            data.retain(|b, _| !(first..first + count).contains(b));
        } else {
            for b in first..first + count {
                data.remove(&b);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritten_blocks_read_as_zero_and_writes_stick() {
        let dev = MemoryDevice::new(4);
        let mut buf = vec![1u8; BLOCK_SIZE * 2];
        dev.read_blocks(1, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        dev.write_blocks(2, &[7u8; BLOCK_SIZE]).unwrap();
        dev.read_blocks(1, &mut buf).unwrap();
        assert!(buf[..BLOCK_SIZE].iter().all(|&b| b == 0));
        assert!(buf[BLOCK_SIZE..].iter().all(|&b| b == 7));
    }

    #[test]
    fn requests_beyond_the_end_fail() {
        let dev = MemoryDevice::new(4);
        assert!(dev.write_blocks(4, &[0u8; BLOCK_SIZE]).is_err());
        assert!(dev.read_blocks(3, &mut [0u8; BLOCK_SIZE * 2]).is_err());
        assert!(dev.write_blocks(0, &[0u8; 100]).is_err());
    }
}
