//! Device images for crash states: an immutable, shared base and a cheap
//! copy-on-write device on top of it.
//!
//! The crash explorer builds tens of thousands of device states that differ
//! from one base in a few dozen blocks. Copying a whole device per state
//! would cost more than checking it, so a state is an [`Image`] (shared,
//! frozen) plus the blocks written over it ([`OverlayDevice`]).
//!
//! The data device is *poisoned*: a block nobody ever wrote reads as a
//! pattern that names the block ([`poison_block`]), never as zeros, so a
//! file that shows bytes from a block it was never given is caught even
//! when those bytes would have been zeros on a fresh disk.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dualfs_engine::device::BlockDevice;
use dualfs_engine::types::BLOCK_SIZE;

/// One 4 KiB block, shared between the states that hold it.
pub type Block = Arc<[u8; BLOCK_SIZE]>;

/// Bytes per sector: the unit a torn write keeps or loses.
pub const SECTOR_BYTES: usize = 512;
/// Sectors per block.
pub const SECTORS_PER_BLOCK: usize = BLOCK_SIZE / SECTOR_BYTES;

/// The first 8 bytes of every 16-byte poison word.
pub const POISON_MAGIC: [u8; 8] = *b"\xDEPoison!";

/// Hashes a block number for [`BlockMap`]: one multiply-and-fold, not
/// the `SipHash` of the standard map. The keys are block numbers the
/// simulator itself writes (nothing to guard against), and every block a
/// volume reads is looked up in two maps, so the hash was a good part of
/// the explorer's time spent reading.
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockHasher(u64);

impl Hasher for BlockHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        let m = u128::from(self.0 ^ n) * 0x9E37_79B9_7F4A_7C15;
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
}

/// Blocks by number.
pub type BlockMap = HashMap<u64, Block, BuildHasherDefault<BlockHasher>>;

/// What a block never written reads as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Zeros, like a fresh sparse file.
    Zero,
    /// [`poison_block`]: catches stale and foreign bytes.
    Poison,
}

/// The poison pattern of block `no`: 16-byte words of [`POISON_MAGIC`]
/// followed by the block number.
#[must_use]
pub fn poison_block(no: u64) -> [u8; BLOCK_SIZE] {
    let mut b = [0u8; BLOCK_SIZE];
    poison_into(&mut b, no);
    b
}

/// Writes [`poison_block`]`(no)` over `chunk` (one block).
fn poison_into(chunk: &mut [u8], no: u64) {
    for w in chunk.chunks_exact_mut(16) {
        w[..8].copy_from_slice(&POISON_MAGIC);
        w[8..].copy_from_slice(&no.to_le_bytes());
    }
}

/// Whether `bytes` (taken at a 16-byte-aligned device offset) contain a
/// whole poison word.
#[must_use]
pub fn contains_poison(bytes: &[u8]) -> bool {
    bytes.windows(POISON_MAGIC.len()).any(|w| w == POISON_MAGIC)
}

/// A frozen device image: the blocks written so far over a fill.
#[derive(Clone, Debug)]
pub struct Image {
    blocks: u64,
    fill: Fill,
    written: BlockMap,
}

impl Image {
    /// An image of `blocks` blocks, nothing written.
    #[must_use]
    pub fn new(blocks: u64, fill: Fill) -> Image {
        Image { blocks, fill, written: BlockMap::default() }
    }

    /// The block at `no` (the fill if never written).
    #[must_use]
    pub fn block(&self, no: u64) -> Block {
        match self.written.get(&no) {
            Some(b) => b.clone(),
            None => Arc::new(self.fill_block(no)),
        }
    }

    fn fill_block(&self, no: u64) -> [u8; BLOCK_SIZE] {
        match self.fill {
            Fill::Zero => [0; BLOCK_SIZE],
            Fill::Poison => poison_block(no),
        }
    }

    /// Number of blocks.
    #[must_use]
    pub fn block_count(&self) -> u64 {
        self.blocks
    }

    /// A copy `more` blocks longer (an image file that grew): the new
    /// blocks read as the fill.
    #[must_use]
    pub fn grown(&self, more: u64) -> Image {
        Image { blocks: self.blocks + more, ..self.clone() }
    }

    /// A copy with `blocks` written over it.
    #[must_use]
    pub fn with_blocks(&self, blocks: impl IntoIterator<Item = (u64, Block)>) -> Image {
        let mut img = self.clone();
        img.written.extend(blocks);
        img
    }

    /// The blocks written, in block order.
    #[must_use]
    pub fn written(&self) -> Vec<(u64, Block)> {
        let mut v: Vec<(u64, Block)> = self.written.iter().map(|(n, b)| (*n, b.clone())).collect();
        v.sort_unstable_by_key(|(n, _)| *n);
        v
    }

    /// Blocks that hold something other than the fill.
    #[must_use]
    pub fn written_blocks(&self) -> usize {
        self.written.len()
    }
}

/// A writable device over a shared [`Image`]: writes land in a private map.
#[derive(Debug)]
pub struct OverlayDevice {
    base: Arc<Image>,
    over: Mutex<BlockMap>,
}

impl OverlayDevice {
    /// A device that reads as `base` until written.
    #[must_use]
    pub fn new(base: Arc<Image>) -> OverlayDevice {
        OverlayDevice { base, over: Mutex::new(BlockMap::default()) }
    }

    /// A device over `base` with `blocks` already written on top.
    #[must_use]
    pub fn with_blocks(base: Arc<Image>, blocks: impl IntoIterator<Item = (u64, Block)>) -> OverlayDevice {
        OverlayDevice { base, over: Mutex::new(blocks.into_iter().collect()) }
    }

    fn lock(&self) -> MutexGuard<'_, BlockMap> {
        self.over.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current contents of block `no`.
    #[must_use]
    pub fn block(&self, no: u64) -> Block {
        match self.lock().get(&no) {
            Some(b) => b.clone(),
            None => self.base.block(no),
        }
    }

    /// Puts a whole block (no bounds check beyond the device's size).
    pub fn put(&self, no: u64, block: Block) {
        self.lock().insert(no, block);
    }

    /// The current contents as a new frozen image.
    #[must_use]
    pub fn freeze(&self) -> Arc<Image> {
        let mut img = (*self.base).clone();
        for (no, b) in self.lock().iter() {
            img.written.insert(*no, b.clone());
        }
        Arc::new(img)
    }
}

fn check_range(count: u64, first: u64, len: usize) -> io::Result<u64> {
    if !len.is_multiple_of(BLOCK_SIZE) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "buffer is not a whole number of blocks"));
    }
    let n = (len / BLOCK_SIZE) as u64;
    match first.checked_add(n) {
        Some(end) if end <= count => Ok(n),
        _ => Err(io::Error::new(io::ErrorKind::InvalidInput, format!("blocks {first}..+{n} beyond {count}"))),
    }
}

impl BlockDevice for OverlayDevice {
    fn block_count(&self) -> u64 {
        self.base.blocks
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(self.base.blocks, first, buf.len())?;
        let over = self.lock();
        for (i, chunk) in buf.chunks_exact_mut(BLOCK_SIZE).enumerate() {
            let no = first + i as u64;
            match over.get(&no).or_else(|| self.base.written.get(&no)) {
                Some(b) => chunk.copy_from_slice(&b[..]),
                None => match self.base.fill {
                    Fill::Zero => chunk.fill(0),
                    Fill::Poison => poison_into(chunk, no),
                },
            }
        }
        Ok(())
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        check_range(self.base.blocks, first, buf.len())?;
        let mut over = self.lock();
        for (i, chunk) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
            let mut b = [0u8; BLOCK_SIZE];
            b.copy_from_slice(chunk);
            over.insert(first + i as u64, Arc::new(b));
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_reads_base_then_its_own_writes_and_poison_names_the_block() {
        let base = Arc::new(Image::new(8, Fill::Poison));
        let dev = OverlayDevice::new(base.clone());
        let mut buf = vec![0u8; BLOCK_SIZE];
        dev.read_blocks(3, &mut buf).unwrap();
        assert_eq!(&buf[..], &poison_block(3)[..]);
        assert!(contains_poison(&buf[100..200]));
        dev.write_blocks(3, &[7u8; BLOCK_SIZE]).unwrap();
        dev.read_blocks(3, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 7));
        let frozen = dev.freeze();
        assert_eq!(frozen.block(3)[0], 7);
        assert_eq!(base.block(3)[0], 0xDE);
        assert!(dev.write_blocks(8, &buf).is_err());
    }
}
