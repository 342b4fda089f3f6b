//! The meta-data cache: decoded inodes and nodes, with dirty tracking.
//!
//! Every piece of meta-data is read through here and modified here; a dirty
//! object is written by the next partial segment. A clean object may be
//! dropped only once the partial segment holding its newest copy is durable
//! (before that the disk does not have it yet).

use std::collections::{BTreeSet, HashSet};

use rustc_hash::FxHashMap;

use super::quota_usage::{Charge, QuotaUsage};
use crate::format::inode::InodeRecord;
use crate::format::node::Node;
use crate::types::{InodeNo, NodeId, Seq};

/// A meta-data object named by a node id.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Object {
    /// A B-tree node.
    Node(Node),
    /// A piece of a long value.
    Blob(Vec<u8>),
}

#[derive(Debug)]
struct Entry<T> {
    value: T,
    owner: InodeNo,
    dirty: bool,
    /// Encoded bytes this entry adds to the dirty total (inodes only).
    charged: usize,
    /// Partial segment holding the newest written copy.
    written: Seq,
    touched: u64,
    /// Bytes of memory it is reckoned to hold ([`MetaCache::bytes`]).
    cost: usize,
}

/// Memory an inode record holds beyond its encoding: the map's slot and
/// the record's fixed fields (the size of `Entry<InodeRecord>`, rounded).
const INODE_OVERHEAD: usize = 256;
/// Memory an object holds beyond twice its encoding: a decoded leaf keeps
/// each value in its own allocation (a 24-byte vector and the allocator's
/// rounding), about as much again as the value for directory entries.
const OBJECT_OVERHEAD: usize = 128;

fn inode_cost(rec: &InodeRecord) -> usize {
    rec.encoded_len() + INODE_OVERHEAD
}

fn object_cost(obj: &Object) -> usize {
    match obj {
        Object::Node(n) => 2 * n.encoded_len() + OBJECT_OVERHEAD,
        Object::Blob(b) => b.len() + OBJECT_OVERHEAD,
    }
}

/// Decoded meta-data objects by name.
#[derive(Debug, Default)]
pub struct MetaCache {
    inodes: FxHashMap<InodeNo, Entry<InodeRecord>>,
    nodes: FxHashMap<NodeId, Entry<Object>>,
    dirty_inodes: BTreeSet<InodeNo>,
    dirty_nodes: BTreeSet<NodeId>,
    dirty_inode_bytes: usize,
    max_dirty_record: usize,
    clock: u64,
    /// Inodes never evicted even when clean: their records on disk show a
    /// shorter size than their data in memory reaches (delayed tails).
    pinned: HashSet<InodeNo>,
    /// Memory the entries are reckoned to hold (their `cost`s).
    bytes: usize,
    /// At most this many entries and bytes (None: no limit).
    limits: Option<(usize, usize)>,
    /// Inodes cached per inode-map block: such a block stays in memory
    /// ([`MetaCache::holds_map_block`]).
    map_blocks: FxHashMap<u32, u32>,
    /// Usage per user, group and project, kept as records change (None:
    /// the volume keeps no quotas, or has not counted them yet).
    quota: Option<QuotaUsage>,
}

fn map_block_of(ino: InodeNo) -> u32 {
    (ino.0 / crate::format::ifile::TableId::InodeMap.per_block() as u64) as u32
}

/// Mutable access to a cached inode. When it goes out of scope the dirty
/// byte count is brought up to date, so that the log always knows exactly
/// how large the next partial segment would be.
#[derive(Debug)]
pub struct InodeGuard<'a> {
    entry: &'a mut Entry<InodeRecord>,
    bytes: &'a mut usize,
    max: &'a mut usize,
    /// The usage to move, and what the record was charged before.
    quota: Option<(&'a mut QuotaUsage, Charge)>,
}

impl std::ops::Deref for InodeGuard<'_> {
    type Target = InodeRecord;
    fn deref(&self) -> &InodeRecord {
        &self.entry.value
    }
}

impl std::ops::DerefMut for InodeGuard<'_> {
    fn deref_mut(&mut self) -> &mut InodeRecord {
        &mut self.entry.value
    }
}

impl Drop for InodeGuard<'_> {
    fn drop(&mut self) {
        let len = self.entry.value.encoded_len();
        *self.bytes = *self.bytes - self.entry.charged + len;
        self.entry.charged = len;
        *self.max = (*self.max).max(len);
        if let Some((usage, before)) = self.quota.take() {
            usage.change(before, Charge::of(&self.entry.value));
        }
    }
}

impl MetaCache {
    /// An empty cache.
    #[must_use]
    pub fn new() -> MetaCache {
        MetaCache::default()
    }

    /// Forgets every entry (another tree became the live one: the same
    /// inode numbers and node ids name other objects there), keeping the
    /// limits.
    ///
    /// # Panics
    /// An entry is dirty or pinned: the caller committed first.
    pub fn clear(&mut self) {
        assert!(self.dirty_inodes.is_empty() && self.dirty_nodes.is_empty(), "clearing a dirty cache");
        assert!(self.pinned.is_empty(), "clearing a cache with pinned inodes");
        // Another tree's inodes: its usage is counted again by the caller.
        *self = MetaCache { limits: self.limits, ..MetaCache::default() };
    }

    /// Starts keeping usage from `usage` (counted from every inode in
    /// use), or stops (None).
    pub fn set_quota_usage(&mut self, usage: Option<QuotaUsage>) {
        self.quota = usage;
    }

    /// The usage kept, if quotas are kept.
    #[must_use]
    pub fn quota_usage(&self) -> Option<&QuotaUsage> {
        self.quota.as_ref()
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    // ---- inodes ----

    /// A cached inode.
    pub fn inode(&mut self, ino: InodeNo) -> Option<&InodeRecord> {
        let t = self.tick();
        self.inodes.get_mut(&ino).map(|e| {
            e.touched = t;
            &e.value
        })
    }

    /// Whether `ino` is cached.
    #[must_use]
    pub fn has_inode(&self, ino: InodeNo) -> bool {
        self.inodes.contains_key(&ino)
    }

    fn forget_map_block(&mut self, ino: InodeNo) {
        let b = map_block_of(ino);
        if let Some(n) = self.map_blocks.get_mut(&b) {
            *n -= 1;
            if *n == 0 {
                self.map_blocks.remove(&b);
            }
        }
    }

    /// Whether an inode of inode-map block `b` is cached, dirty or clean.
    #[must_use]
    pub fn holds_map_block(&self, b: u32) -> bool {
        self.map_blocks.contains_key(&b)
    }

    /// The inode-map blocks an inode cached belongs to.
    #[must_use]
    pub fn map_blocks_held(&self) -> usize {
        self.map_blocks.len()
    }

    /// A cached inode, to be modified: it becomes dirty.
    pub fn inode_mut(&mut self, ino: InodeNo) -> Option<InodeGuard<'_>> {
        let t = self.tick();
        let e = self.inodes.get_mut(&ino)?;
        e.touched = t;
        if !e.dirty {
            e.dirty = true;
            e.charged = 0;
            self.dirty_inodes.insert(ino);
        }
        let quota = self.quota.as_mut().map(|q| (q, Charge::of(&e.value)));
        Some(InodeGuard { entry: e, bytes: &mut self.dirty_inode_bytes, max: &mut self.max_dirty_record, quota })
    }

    /// Caches an inode read from disk, unless a newer copy is already cached.
    pub fn insert_clean_inode(&mut self, rec: InodeRecord) {
        let t = self.tick();
        if let std::collections::hash_map::Entry::Vacant(v) = self.inodes.entry(rec.ino) {
            let cost = inode_cost(&rec);
            self.bytes += cost;
            *self.map_blocks.entry(map_block_of(rec.ino)).or_default() += 1;
            v.insert(Entry {
                value: rec,
                owner: InodeNo(0),
                dirty: false,
                charged: 0,
                written: Seq(0),
                touched: t,
                cost,
            });
        }
    }

    /// Caches a new inode as dirty.
    pub fn insert_dirty_inode(&mut self, rec: InodeRecord) {
        let ino = rec.ino;
        self.remove_inode(ino);
        if let Some(q) = &mut self.quota {
            q.count(Charge::of(&rec), true);
        }
        let t = self.tick();
        let cost = inode_cost(&rec);
        self.bytes += cost;
        *self.map_blocks.entry(map_block_of(ino)).or_default() += 1;
        self.inodes.insert(
            ino,
            Entry { value: rec, owner: InodeNo(0), dirty: false, charged: 0, written: Seq(0), touched: t, cost },
        );
        drop(self.inode_mut(ino));
    }

    /// Forgets an inode that was freed; it will not be written.
    pub fn remove_inode(&mut self, ino: InodeNo) {
        if let Some(e) = self.inodes.remove(&ino) {
            if let Some(q) = &mut self.quota {
                q.count(Charge::of(&e.value), false);
            }
            self.dirty_inode_bytes -= e.charged;
            self.bytes -= e.cost;
            self.forget_map_block(ino);
        }
        self.dirty_inodes.remove(&ino);
    }

    /// Whether `ino`'s cached record is newer than every sealed one.
    #[must_use]
    pub fn is_dirty_inode(&self, ino: InodeNo) -> bool {
        self.dirty_inodes.contains(&ino)
    }

    /// Dirty inodes, by number.
    #[must_use]
    pub fn dirty_inodes(&self) -> Vec<InodeNo> {
        self.dirty_inodes.iter().copied().collect()
    }

    /// Number of dirty inodes.
    #[must_use]
    pub fn dirty_inode_count(&self) -> usize {
        self.dirty_inodes.len()
    }

    /// Encoded bytes of all dirty inodes.
    #[must_use]
    pub fn dirty_inode_bytes(&self) -> usize {
        debug_assert_eq!(
            self.dirty_inode_bytes,
            self.dirty_inodes.iter().filter_map(|i| self.inodes.get(i)).map(|e| e.value.encoded_len()).sum::<usize>()
        );
        self.dirty_inode_bytes
    }

    /// The largest dirty inode record since the last seal.
    #[must_use]
    pub fn max_dirty_record(&self) -> usize {
        self.max_dirty_record
    }

    /// A dirty inode's record, for sealing.
    #[must_use]
    pub fn peek_inode(&self, ino: InodeNo) -> Option<&InodeRecord> {
        self.inodes.get(&ino).map(|e| &e.value)
    }

    // ---- nodes ----

    /// A cached object.
    pub fn object(&mut self, id: NodeId) -> Option<&Object> {
        let t = self.tick();
        self.nodes.get_mut(&id).map(|e| {
            e.touched = t;
            &e.value
        })
    }

    /// A cached object, to be modified: it becomes dirty.
    pub fn object_mut(&mut self, id: NodeId) -> Option<&mut Object> {
        let t = self.tick();
        let e = self.nodes.get_mut(&id)?;
        e.touched = t;
        e.dirty = true;
        self.dirty_nodes.insert(id);
        Some(&mut e.value)
    }

    /// Owner of a cached object.
    #[must_use]
    pub fn owner(&self, id: NodeId) -> Option<InodeNo> {
        self.nodes.get(&id).map(|e| e.owner)
    }

    /// Caches an object read from disk.
    pub fn insert_clean_object(&mut self, id: NodeId, owner: InodeNo, obj: Object) {
        let t = self.tick();
        if let std::collections::hash_map::Entry::Vacant(v) = self.nodes.entry(id) {
            let cost = object_cost(&obj);
            self.bytes += cost;
            v.insert(Entry { value: obj, owner, dirty: false, charged: 0, written: Seq(0), touched: t, cost });
        }
    }

    /// Caches a new object as dirty.
    pub fn insert_dirty_object(&mut self, id: NodeId, owner: InodeNo, obj: Object) {
        let t = self.tick();
        let cost = object_cost(&obj);
        self.bytes += cost;
        if let Some(old) = self
            .nodes
            .insert(id, Entry { value: obj, owner, dirty: true, charged: 0, written: Seq(0), touched: t, cost })
        {
            self.bytes -= old.cost;
        }
        self.dirty_nodes.insert(id);
    }

    /// Forgets a freed object.
    pub fn remove_object(&mut self, id: NodeId) {
        if let Some(e) = self.nodes.remove(&id) {
            self.bytes -= e.cost;
        }
        self.dirty_nodes.remove(&id);
    }

    /// Dirty objects with their owners, grouped by owner.
    #[must_use]
    pub fn dirty_objects(&self) -> Vec<(InodeNo, NodeId)> {
        let mut v: Vec<(InodeNo, NodeId)> =
            self.dirty_nodes.iter().filter_map(|id| self.nodes.get(id).map(|e| (e.owner, *id))).collect();
        v.sort_unstable();
        v
    }

    /// Number of dirty objects.
    #[must_use]
    pub fn dirty_object_count(&self) -> usize {
        self.dirty_nodes.len()
    }

    /// A cached object, for sealing.
    #[must_use]
    pub fn peek_object(&self, id: NodeId) -> Option<&Object> {
        self.nodes.get(&id).map(|e| &e.value)
    }

    /// Marks an object dirty so it is rewritten (the cleaner moves live
    /// blocks this way).
    pub fn touch_object(&mut self, id: NodeId) -> bool {
        match self.nodes.get_mut(&id) {
            Some(e) => {
                e.dirty = true;
                self.dirty_nodes.insert(id);
                true
            }
            None => false,
        }
    }

    // ---- sealing and eviction ----

    /// After sealing partial segment `seq`: everything that was dirty is now
    /// written there.
    pub fn mark_sealed(&mut self, inodes: &[InodeNo], objects: &[NodeId], seq: Seq) {
        for i in inodes {
            if let Some(e) = self.inodes.get_mut(i) {
                e.dirty = false;
                e.written = seq;
                self.dirty_inode_bytes -= e.charged;
                e.charged = 0;
                // Changed while dirty: its cost is taken again.
                let cost = inode_cost(&e.value);
                self.bytes = self.bytes - e.cost + cost;
                e.cost = cost;
            }
            self.dirty_inodes.remove(i);
        }
        if self.dirty_inodes.is_empty() {
            self.max_dirty_record = 0;
        }
        for id in objects {
            if let Some(e) = self.nodes.get_mut(id) {
                e.dirty = false;
                e.written = seq;
                let cost = object_cost(&e.value);
                self.bytes = self.bytes - e.cost + cost;
                e.cost = cost;
            }
            self.dirty_nodes.remove(id);
        }
    }

    /// Number of cached objects and inodes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.inodes.len() + self.nodes.len()
    }

    /// Cached inodes and objects (nodes and blobs), counted apart.
    #[must_use]
    pub fn counts(&self) -> (usize, usize) {
        (self.inodes.len(), self.nodes.len())
    }

    /// Whether nothing is cached.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.inodes.is_empty() && self.nodes.is_empty()
    }

    /// Replaces the set of inodes never evicted.
    pub fn set_pinned(&mut self, pinned: HashSet<InodeNo>) {
        self.pinned = pinned;
    }

    /// Memory the cached entries are reckoned to hold: their encodings,
    /// twice for decoded nodes, and a fixed overhead each (as of their last
    /// seal for entries changed since).
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Sets the limits [`MetaCache::trim`] keeps to: entries and bytes.
    pub fn set_limits(&mut self, entries: usize, bytes: usize) {
        self.limits = Some((entries, bytes));
    }

    /// Evicts down to the limits (at the end of a commit).
    pub fn trim(&mut self, durable: Seq) {
        if let Some((n, b)) = self.limits {
            self.evict(n, b, durable);
        }
    }

    /// Evicts when an eighth past the limits (after a reader, between
    /// operations: an operation may count on what it read staying cached
    /// until it ends). A walk that only reads, such as `find`, commits
    /// nothing, yet must not fill memory.
    pub fn trim_if_over(&mut self, durable: Seq) {
        if let Some((n, b)) = self.limits
            && (self.len() > n + n / 8 || self.bytes > b + b / 8)
        {
            self.evict(n, b, durable);
        }
    }

    /// Drops the least recently used clean entries whose newest copy is
    /// durable, when more than `budget` entries or `max_bytes` bytes are
    /// held, until at most three quarters of each remain (so that the scan
    /// of every entry this takes is paid once per quarter of the cache).
    pub fn evict(&mut self, budget: usize, max_bytes: usize, durable: Seq) {
        if self.len() <= budget && self.bytes <= max_bytes {
            return;
        }
        let (keep_len, keep_bytes) = (budget / 4 * 3, max_bytes / 4 * 3);
        let mut victims: Vec<(u64, bool, u64, usize)> = self
            .inodes
            .iter()
            .filter(|(k, e)| !e.dirty && e.written <= durable && !self.pinned.contains(k))
            .map(|(k, e)| (e.touched, true, k.0, e.cost))
            .chain(
                self.nodes
                    .iter()
                    .filter(|(_, e)| !e.dirty && e.written <= durable)
                    .map(|(k, e)| (e.touched, false, k.0, e.cost)),
            )
            .collect();
        victims.sort_unstable();
        let (mut len, mut bytes) = (self.len(), self.bytes);
        for (_, is_inode, k, cost) in victims {
            if len <= keep_len && bytes <= keep_bytes {
                break;
            }
            if is_inode {
                self.inodes.remove(&InodeNo(k));
                self.forget_map_block(InodeNo(k));
            } else {
                self.nodes.remove(&NodeId(k));
            }
            len -= 1;
            bytes -= cost;
        }
        self.bytes = bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::node::TreeKind;

    fn rec(i: u64) -> InodeRecord {
        InodeRecord { ino: InodeNo(i), mode: libc::S_IFREG, ..InodeRecord::default() }
    }

    #[test]
    fn dirty_tracking_and_sealing() {
        let mut c = MetaCache::new();
        c.insert_clean_inode(rec(1));
        c.insert_dirty_inode(rec(2));
        assert_eq!(c.dirty_inodes(), vec![InodeNo(2)]);
        c.inode_mut(InodeNo(1)).unwrap().size = 5;
        assert_eq!(c.dirty_inodes(), vec![InodeNo(1), InodeNo(2)]);
        c.insert_dirty_object(NodeId(3), InodeNo(2), Object::Node(Node::leaf(TreeKind::Directory)));
        c.mark_sealed(&[InodeNo(1), InodeNo(2)], &[NodeId(3)], Seq(7));
        assert!(c.dirty_inodes().is_empty() && c.dirty_objects().is_empty());
    }

    #[test]
    fn eviction_spares_dirty_and_undurable_entries() {
        let mut c = MetaCache::new();
        for i in 1..=100 {
            c.insert_clean_inode(rec(i));
        }
        c.insert_dirty_inode(rec(200));
        c.insert_dirty_inode(rec(201));
        c.mark_sealed(&[InodeNo(201)], &[], Seq(9));
        c.evict(10, usize::MAX, Seq(8));
        assert!(c.has_inode(InodeNo(200)), "dirty entry evicted");
        assert!(c.has_inode(InodeNo(201)), "entry not yet durable evicted");
        assert!(c.len() <= 10);
    }
}
