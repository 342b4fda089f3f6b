//! Page buffers of file data, and the runs of them a commit writes.
//!
//! A write-back run used to be a fresh buffer the queued pages were copied
//! into, under the volume lock: a copy of every byte a stream writes, and
//! the run's memory faulted in and cleared each time (DESIGN.md, "A stream
//! is written from its pages"). Now a page's buffer is page-aligned and
//! shared: a run holds the buffers themselves, and the data device writes
//! them with one vectored request. A write to a page whose buffer a run
//! still holds copies it first (`Arc::make_mut`), so the run writes the
//! bytes it was sealed with, as the copy did.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::{AlignedBuf, BlockDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::types::BLOCK_SIZE;

/// One block of file data, page-aligned (what `O_DIRECT` takes).
#[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
#[repr(C, align(4096))]
pub struct PageBuf(pub [u8; BLOCK_SIZE]);

impl PageBuf {
    /// A zeroed buffer, allocated in place (not through the stack).
    #[must_use]
    pub fn zeroed() -> Box<PageBuf> {
        bytemuck::zeroed_box()
    }
}

impl std::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PageBuf")
    }
}

impl Deref for PageBuf {
    type Target = [u8; BLOCK_SIZE];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// A page buffer the page cache and a run being written may both hold.
pub type SharedPage = Arc<Box<PageBuf>>;

/// Consecutive data blocks written in one request.
#[derive(Debug)]
pub enum DataRun {
    /// In one page-aligned buffer.
    Bytes(AlignedBuf),
    /// In the page cache's own buffers, one block each.
    Pages(Vec<SharedPage>),
}

impl DataRun {
    /// Blocks it holds.
    #[must_use]
    pub fn blocks(&self) -> usize {
        match self {
            DataRun::Bytes(b) => b.len() / BLOCK_SIZE,
            DataRun::Pages(p) => p.len(),
        }
    }

    /// Writes it at block `first` of the volume's `role` device.
    ///
    /// # Errors
    /// The device fails.
    pub fn write(&self, dev: &dyn BlockDevice, role: DeviceRole, first: u64) -> Result<()> {
        match self {
            DataRun::Bytes(b) => super::write(dev, role, first, b.bytes()),
            DataRun::Pages(pages) => {
                let bufs: Vec<&[u8]> = pages.iter().map(|p| &p.0[..]).collect();
                dev.write_blocks_vectored(first, &bufs).map_err(|source| Error::Io {
                    device: role,
                    op: "write",
                    block: first,
                    source,
                })
            }
        }
    }

    /// Its buffers, in order (what one request writes).
    #[must_use]
    pub fn pieces(&self) -> Vec<&[u8]> {
        match self {
            DataRun::Bytes(b) => vec![b.bytes()],
            DataRun::Pages(pages) => pages.iter().map(|p| &p.0[..]).collect(),
        }
    }

    /// Its bytes, copied into one buffer.
    #[must_use]
    pub fn to_vec(&self) -> Vec<u8> {
        match self {
            DataRun::Bytes(b) => b.bytes().to_vec(),
            DataRun::Pages(pages) => pages.iter().flat_map(|p| p.0.iter().copied()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_buffers_are_page_aligned() {
        for _ in 0..8 {
            let b = PageBuf::zeroed();
            assert_eq!(b.0.as_ptr() as usize % BLOCK_SIZE, 0);
            let shared: SharedPage = Arc::new(PageBuf::zeroed());
            assert_eq!(shared.0.as_ptr() as usize % BLOCK_SIZE, 0);
        }
    }
}
