//! Bytes that start on a page boundary: what the data device, opened with
//! `O_DIRECT`, reads into and writes from without a bounce buffer.
//!
//! jemalloc does not page-align large allocations (it offsets each by a
//! random cache line, to spread them over the caches), so a `Vec<u8>` of a
//! write-back run or a READ sent nearly every `O_DIRECT` request through an
//! aligned bounce buffer: a fresh allocation, its pages faulted in and
//! cleared, and a copy (DESIGN.md, "The read path"). Here the bytes start
//! at the first page boundary inside the allocation instead. A serving
//! thread also keeps its read buffer from one READ to the next, so that a
//! read faults no fresh pages in either.

use crate::types::BLOCK_BYTES;

const ALIGN: usize = BLOCK_BYTES as usize;

/// Bytes read, starting page-aligned inside a reused allocation.
#[derive(Debug, Default)]
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// An empty buffer; it grows to the largest read it serves.
    #[must_use]
    pub fn new() -> AlignedBuf {
        AlignedBuf::default()
    }

    /// An empty buffer with room for `capacity` bytes.
    #[must_use]
    pub fn with_capacity(capacity: usize) -> AlignedBuf {
        let mut b = AlignedBuf::new();
        b.reset(capacity);
        b
    }

    /// Appends a copy of `bytes`.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.extend(bytes.len()).copy_from_slice(bytes);
    }

    /// The bytes of the last read.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }

    /// Empties the buffer and makes room for `capacity` bytes.
    pub(crate) fn reset(&mut self, capacity: usize) {
        let want = capacity + ALIGN;
        if self.raw.len() < want {
            // Zeroed once, when it grows; reads overwrite what they use.
            self.raw = vec![0u8; want];
        }
        self.start = (ALIGN - self.raw.as_ptr() as usize % ALIGN) % ALIGN;
        self.len = 0;
    }

    /// Appends `n` bytes (room made by [`AlignedBuf::reset`], or grown here)
    /// and hands them out to be filled; their contents are left over from
    /// an earlier read until then.
    pub(crate) fn extend(&mut self, n: usize) -> &mut [u8] {
        let end = self.start + self.len + n;
        if end > self.raw.len() {
            // A read longer than announced: grow, keeping what is there.
            let kept = self.bytes().to_vec();
            self.reset(self.len + n);
            self.raw[self.start..self.start + kept.len()].copy_from_slice(&kept);
            self.len = kept.len();
        }
        let at = self.start + self.len;
        self.len += n;
        &mut self.raw[at..at + n]
    }

    /// Moves `len` bytes at `from` (relative to the bytes' start) to `to`.
    pub(crate) fn copy_within(&mut self, from: usize, len: usize, to: usize) {
        self.raw.copy_within(self.start + from..self.start + from + len, self.start + to);
    }

    /// Cuts the bytes to the first `len`.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Number of bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no bytes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_start_on_a_page_and_survive_growth() {
        let mut b = AlignedBuf::new();
        b.reset(10);
        b.extend(3).copy_from_slice(b"abc");
        assert_eq!(b.bytes().as_ptr() as usize % ALIGN, 0);
        // Past the room announced: grows and keeps the bytes.
        b.extend(3 * ALIGN)[..2].copy_from_slice(b"de");
        assert_eq!(&b.bytes()[..5], b"abcde");
        assert_eq!(b.len(), 3 + 3 * ALIGN);
        assert_eq!(b.bytes().as_ptr() as usize % ALIGN, 0);
        b.copy_within(0, 2, 1);
        b.truncate(3);
        assert_eq!(b.bytes(), b"aab");
        b.reset(1);
        assert!(b.is_empty());
    }
}
