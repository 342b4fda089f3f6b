//! What snapshots hold, read a bitmap block at a time (a mount of a
//! volume with snapshots reads no image's bitmap whole; DESIGN.md, "A
//! snapshot costs what it keeps").

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::DataSpace;
use crate::error::Result;

/// Where the held set is read from: the bitmaps of the images the
/// snapshots and kept trees keep.
pub trait HeldSource: Send + Sync + std::fmt::Debug {
    /// The OR of every kept image's bitmap words in bitmap block `b`
    /// (`words` of them: the block's words within the device).
    ///
    /// # Errors
    /// An image's bitmap or index block cannot be read, or is damaged.
    fn held_block(&self, b: u32, words: usize) -> Result<Vec<u64>>;
}

/// The held set, read lazily: the blocks read so far, by bitmap block.
#[derive(Debug)]
pub(super) struct LazyHeld {
    source: Arc<dyn HeldSource>,
    /// Read through `&self` (`DataSpace::is_held` asks from write-back,
    /// which holds the space shared): behind a lock, never held across a
    /// call out.
    blocks: Mutex<BTreeMap<u32, Arc<[u64]>>>,
}

impl Clone for LazyHeld {
    fn clone(&self) -> Self {
        let blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner).clone();
        LazyHeld { source: self.source.clone(), blocks: Mutex::new(blocks) }
    }
}

impl LazyHeld {
    fn cached(&self, b: u32) -> Option<Arc<[u64]>> {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner).get(&b).cloned()
    }

    fn read(&self, b: u32, words: usize) -> Result<Arc<[u64]>> {
        if let Some(v) = self.cached(b) {
            return Ok(v);
        }
        let v: Arc<[u64]> = self.source.held_block(b, words)?.into();
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner).insert(b, v.clone());
        Ok(v)
    }

    fn forget(&self, b: u32) {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner).remove(&b);
    }

    fn len(&self) -> usize {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl DataSpace {
    /// Holds what `source` says snapshots hold, read a bitmap block at a
    /// time as the allocator reaches it, with `held_free` of the blocks
    /// free in the live bitmap held (what the snapshot list carries: no
    /// mount counts it).
    pub fn hold_lazily(&mut self, source: Arc<dyn HeldSource>, held_free: u64) {
        self.held = Vec::new();
        self.held_lazy = Some(LazyHeld { source, blocks: Mutex::new(BTreeMap::new()) });
        self.held_only = held_free;
    }

    /// Whether the held set is read lazily ([`DataSpace::hold_lazily`]).
    #[must_use]
    pub fn held_lazily(&self) -> bool {
        self.held_lazy.is_some()
    }

    /// Bitmap blocks of the held set in memory (read lazily).
    #[must_use]
    pub fn held_blocks_in_memory(&self) -> usize {
        self.held_lazy.as_ref().map_or(0, LazyHeld::len)
    }

    /// Words of bitmap block `b` within the device.
    fn block_words(&self, b: u32) -> usize {
        let per = self.bitmap.per_block();
        per.min(self.bitmap.len().saturating_sub(b as usize * per))
    }

    /// Reads the held set's bitmap block `b` if it is read lazily and not
    /// at hand (with the live bitmap's: a change of the live bitmap then
    /// always knows what is held).
    ///
    /// # Errors
    /// An image's block cannot be read.
    pub(super) fn load_held(&self, b: u32) -> Result<()> {
        if let Some(l) = &self.held_lazy {
            l.read(b, self.block_words(b))?;
        }
        Ok(())
    }

    /// Gives back the held set's bitmap block `b` (with the live one's).
    pub(super) fn forget_held(&self, b: u32) {
        if let Some(l) = &self.held_lazy {
            l.forget(b);
        }
    }

    /// Reads the whole held set into memory (a grow or a shrink, which
    /// count over every block).
    ///
    /// # Errors
    /// An image's block cannot be read.
    pub fn hold_whole(&mut self) -> Result<()> {
        let Some(l) = self.held_lazy.take() else { return Ok(()) };
        let mut held = Vec::with_capacity(self.bitmap.len());
        for b in 0..self.bitmap.block_count() as u32 {
            match l.read(b, self.block_words(b)) {
                Ok(v) => held.extend_from_slice(&v),
                Err(e) => {
                    self.held_lazy = Some(l);
                    return Err(e);
                }
            }
        }
        held.resize(self.bitmap.len(), 0);
        // The count the list carried stands: it is what these blocks make.
        self.held = held;
        Ok(())
    }

    /// Word `w` of the held set.
    pub(super) fn held_word(&self, w: usize) -> u64 {
        match &self.held_lazy {
            Some(l) if w < self.bitmap.len() => {
                let per = self.bitmap.per_block();
                let b = (w / per) as u32;
                match l.read(b, self.block_words(b)) {
                    Ok(v) => v.get(w % per).copied().unwrap_or(0),
                    Err(e) => {
                        // Not knowing, hold it: a block is then written
                        // elsewhere rather than over what an image keeps.
                        log::error!("what snapshots hold in data bitmap block {b} cannot be read: {e}");
                        !0
                    }
                }
            }
            Some(_) => 0,
            None => self.held.get(w).copied().unwrap_or(0),
        }
    }
}
