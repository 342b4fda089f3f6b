//! Bytes that start on a page boundary: what the data device, opened with
//! `O_DIRECT`, reads into and writes from without a bounce buffer.
//!
//! jemalloc does not page-align large allocations (it offsets each by a
//! random cache line, to spread them over the caches), so a `Vec<u8>` of a
//! write-back run or a READ sent nearly every `O_DIRECT` request through an
//! aligned bounce buffer: a fresh allocation, its pages faulted in and
//! cleared, and a copy (DESIGN.md, "Data space"). Here the bytes start
//! at the first page boundary inside the allocation instead. A serving
//! thread also keeps its read buffer from one READ to the next, so that a
//! read faults no fresh pages in either.
//!
//! A READ's buffer is also one transparent huge page where the kernel gives
//! one ([`AlignedBuf::huge_pages`]): a block device takes a request of at
//! most so many pieces of memory (a loop device 128), and 4 KiB pages
//! scattered in memory cut a 1 MiB `O_DIRECT` read into two requests of
//! 512 KiB, where contiguous memory makes it one (DESIGN.md, "Data
//! space").

use memmap2::{Advice, MmapMut};

use crate::types::BLOCK_BYTES;

const ALIGN: usize = BLOCK_BYTES as usize;
/// A transparent huge page on x86-64 and arm64 with 4 KiB pages.
const HUGE: usize = 2 << 20;

/// Where the bytes live.
#[derive(Debug)]
enum Raw {
    Heap(Vec<u8>),
    /// Anonymous memory advised into huge pages, from a huge-page boundary.
    Mapped(MmapMut),
}

impl Default for Raw {
    fn default() -> Raw {
        Raw::Heap(Vec::new())
    }
}

impl Raw {
    fn as_slice(&self) -> &[u8] {
        match self {
            Raw::Heap(v) => v,
            Raw::Mapped(m) => m,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Raw::Heap(v) => v,
            Raw::Mapped(m) => m,
        }
    }
}

/// Bytes read, starting page-aligned inside a reused allocation.
#[derive(Debug, Default)]
pub struct AlignedBuf {
    raw: Raw,
    start: usize,
    len: usize,
    /// Grows as huge pages ([`AlignedBuf::huge_pages`]).
    huge: bool,
}

/// `len` bytes of anonymous memory with a huge-page boundary inside, the
/// `room` bytes from there advised into huge pages; and that boundary. The
/// advice is best effort: without it (no THP, or none free) the memory is
/// ordinary pages, as a `Vec`'s.
fn map_huge(room: usize) -> Option<(MmapMut, usize)> {
    let room = room.div_ceil(HUGE) * HUGE;
    let map = MmapMut::map_anon(room + HUGE).ok()?;
    let start = (HUGE - map.as_ptr() as usize % HUGE) % HUGE;
    if let Err(e) = map.advise_range(Advice::HugePage, start, room) {
        log::debug!("no huge pages for a read buffer: {e}");
    }
    Some((map, start))
}

impl AlignedBuf {
    /// An empty buffer; it grows to the largest read it serves.
    #[must_use]
    pub fn new() -> AlignedBuf {
        AlignedBuf::default()
    }

    /// An empty buffer that grows as transparent huge pages, each a
    /// physically contiguous 2 MiB, so that a read of up to 2 MiB into it
    /// reaches the device as one request, not one per 512 KiB (a loop
    /// device's 128 pieces of 4 KiB). For the buffer a serving thread keeps;
    /// it costs 2 MiB of memory however small the reads.
    #[must_use]
    pub fn huge_pages() -> AlignedBuf {
        AlignedBuf { huge: true, ..AlignedBuf::default() }
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
        &self.raw.as_slice()[self.start..self.start + self.len]
    }

    /// Empties the buffer and makes room for `capacity` bytes.
    pub(crate) fn reset(&mut self, capacity: usize) {
        // Zeroed once, when it grows; reads overwrite what they use.
        match &self.raw {
            Raw::Mapped(m) if m.len() - self.start >= capacity => {}
            _ if self.huge => {
                if let Some((map, start)) = map_huge(capacity) {
                    self.raw = Raw::Mapped(map);
                    self.start = start;
                } else {
                    self.huge = false;
                }
            }
            _ => {}
        }
        if let Raw::Heap(v) = &mut self.raw {
            let want = capacity + ALIGN;
            if v.len() < want {
                *v = vec![0u8; want];
            }
            self.start = (ALIGN - v.as_ptr() as usize % ALIGN) % ALIGN;
        }
        self.len = 0;
    }

    /// Appends `n` bytes (room made by [`AlignedBuf::reset`], or grown here)
    /// and hands them out to be filled; their contents are left over from
    /// an earlier read until then.
    pub(crate) fn extend(&mut self, n: usize) -> &mut [u8] {
        let end = self.start + self.len + n;
        if end > self.raw.as_slice().len() {
            // A read longer than announced: grow, keeping what is there.
            let kept = self.bytes().to_vec();
            self.reset(self.len + n);
            let start = self.start;
            self.raw.as_mut_slice()[start..start + kept.len()].copy_from_slice(&kept);
            self.len = kept.len();
        }
        let at = self.start + self.len;
        self.len += n;
        &mut self.raw.as_mut_slice()[at..at + n]
    }

    /// Moves `len` bytes at `from` (relative to the bytes' start) to `to`.
    pub(crate) fn copy_within(&mut self, from: usize, len: usize, to: usize) {
        self.raw.as_mut_slice().copy_within(self.start + from..self.start + from + len, self.start + to);
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

    #[test]
    fn huge_page_bytes_start_on_a_huge_page_and_survive_growth() {
        let mut b = AlignedBuf::huge_pages();
        b.reset((1 << 20) + 2 * ALIGN);
        b.extend(3).copy_from_slice(b"abc");
        // mmap fails only without memory; the buffer then falls back to the heap.
        assert!(b.huge, "an anonymous mapping of 4 MiB");
        assert_eq!(b.bytes().as_ptr() as usize % HUGE, 0);
        // Past the room: remapped, the bytes kept, still on a boundary.
        b.extend(3 * HUGE)[..2].copy_from_slice(b"de");
        assert_eq!(&b.bytes()[..5], b"abcde");
        assert_eq!(b.len(), 3 + 3 * HUGE);
        assert_eq!(b.bytes().as_ptr() as usize % HUGE, 0);
        // A smaller read reuses the mapping.
        let at = b.bytes().as_ptr() as usize;
        b.reset(10);
        assert!(b.is_empty());
        assert_eq!(b.extend(1).as_ptr() as usize, at);
    }
}
