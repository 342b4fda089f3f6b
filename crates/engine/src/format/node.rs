//! B-tree nodes: the blocks of directories, large extent maps and large xattr sets.
//!
//! Payload: `u8` tree kind, `u8` reserved, `u16` count, then the entries.
//! A leaf entry is `(u64 key, u16 len, value)`; an internal entry is
//! `(u64 key, u64 child node id)`, where `key` is the smallest key the child
//! may hold. The tree level sits in the block header's `aux` (0 = leaf).

use super::block::PAYLOAD_LEN;
use super::codec::{DecodeResult, Reader, Writer, bad};
use crate::error::Result;
use crate::types::NodeId;

/// Bytes before the first entry.
pub const NODE_HEADER_LEN: usize = 4;
/// Largest value a leaf entry may carry, so that any node holds at least four.
pub const MAX_VALUE_LEN: usize = 960;
/// Encoded size of an internal entry.
pub const INTERNAL_ENTRY_LEN: usize = 16;
/// Deepest tree a decoder accepts (far beyond what 2^64 keys need).
pub const MAX_LEVEL: u16 = 16;

/// Which kind of tree a node belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum TreeKind {
    /// Directory entries keyed by name-hash position.
    Directory,
    /// File extents keyed by first file block.
    Extents,
    /// Extended attributes keyed by name-hash position.
    Xattrs,
}

impl TreeKind {
    /// The byte a node stores.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            TreeKind::Directory => 1,
            TreeKind::Extents => 2,
            TreeKind::Xattrs => 3,
        }
    }
    pub(crate) fn from_code(c: u8) -> Option<TreeKind> {
        Some(match c {
            1 => TreeKind::Directory,
            2 => TreeKind::Extents,
            3 => TreeKind::Xattrs,
            _ => return None,
        })
    }
}

/// The entries of a node.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Entries {
    /// Keys and values, sorted by key.
    Leaf(Vec<(u64, Vec<u8>)>),
    /// Separator keys and children, sorted by key.
    Internal(Vec<(u64, NodeId)>),
}

/// A decoded B-tree node.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Node {
    /// The tree it belongs to.
    pub tree: TreeKind,
    /// 0 for leaves.
    pub level: u16,
    /// Its entries.
    pub entries: Entries,
}

/// Encoded size of a leaf entry with a value of `value_len` bytes.
#[must_use]
pub fn leaf_entry_len(value_len: usize) -> usize {
    10 + value_len
}

impl Node {
    /// An empty leaf.
    #[must_use]
    pub fn leaf(tree: TreeKind) -> Node {
        Node { tree, level: 0, entries: Entries::Leaf(Vec::new()) }
    }

    /// Number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        match &self.entries {
            Entries::Leaf(e) => e.len(),
            Entries::Internal(e) => e.len(),
        }
    }

    /// Whether it has no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Encoded payload size.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        NODE_HEADER_LEN
            + match &self.entries {
                Entries::Leaf(e) => e.iter().map(|(_, v)| leaf_entry_len(v.len())).sum(),
                Entries::Internal(e) => e.len() * INTERNAL_ENTRY_LEN,
            }
    }

    /// Encodes the payload.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        debug_assert!(self.encoded_len() <= PAYLOAD_LEN);
        let mut w = Writer::with_capacity(self.encoded_len());
        w.u8(self.tree.code()).u8(0).u16(self.len() as u16);
        match &self.entries {
            Entries::Leaf(e) => {
                for (k, v) in e {
                    w.u64(*k).u16(v.len() as u16).bytes(v);
                }
            }
            Entries::Internal(e) => {
                for (k, c) in e {
                    w.u64(*k).u64(c.0);
                }
            }
        }
        w.into_inner()
    }

    /// Decodes a payload; `level` comes from the block header.
    ///
    /// # Errors
    /// Unknown tree kind, keys out of order, values too long, trailing bytes.
    pub fn decode(payload: &[u8], level: u16) -> DecodeResult<Node> {
        let mut r = Reader::new(payload);
        let code = r.u8()?;
        let Some(tree) = TreeKind::from_code(code) else { bad!("unknown tree kind {code}") };
        r.reserved(1)?;
        let n = usize::from(r.u16()?);
        if level > MAX_LEVEL {
            bad!("node level {level} exceeds {MAX_LEVEL}");
        }
        let mut last: Option<u64> = None;
        let mut check_order = |k: u64| -> DecodeResult<()> {
            if last.is_some_and(|l| l >= k) {
                bad!("keys out of order at {k:#x}");
            }
            last = Some(k);
            Ok(())
        };
        let entries = if level == 0 {
            let mut e = Vec::with_capacity(n.min(PAYLOAD_LEN / 10));
            for _ in 0..n {
                let k = r.u64()?;
                check_order(k)?;
                let len = usize::from(r.u16()?);
                if len > MAX_VALUE_LEN {
                    bad!("value of {len} bytes exceeds {MAX_VALUE_LEN}");
                }
                e.push((k, r.bytes(len)?.to_vec()));
            }
            Entries::Leaf(e)
        } else {
            if n == 0 {
                bad!("internal node without children");
            }
            let mut e = Vec::with_capacity(n.min(PAYLOAD_LEN / INTERNAL_ENTRY_LEN));
            for i in 0..n {
                let k = r.u64()?;
                // The first separator of an internal node is never used for
                // routing and need not be a lower bound (see namespace::btree).
                if i > 0 {
                    check_order(k)?;
                }
                let c = r.u64()?;
                if c == 0 {
                    bad!("child node id 0");
                }
                e.push((k, NodeId(c)));
            }
            Entries::Internal(e)
        };
        if r.remaining() != 0 {
            bad!("{} trailing bytes", r.remaining());
        }
        Ok(Node { tree, level, entries })
    }
}

/// Where a tree's nodes are read from.
pub trait NodeSource {
    /// Reads a node.
    ///
    /// # Errors
    /// The node cannot be read or decoded.
    fn node(&mut self, id: NodeId) -> Result<&Node>;
}

/// Where a tree's nodes live and change. The engine's implementation goes
/// through the meta-data cache and the node map; tests use a plain map.
pub trait NodeStore: NodeSource {
    /// Reads a node for modification; it will be written with the next partial segment.
    ///
    /// # Errors
    /// As [`NodeStore::node`].
    fn node_mut(&mut self, id: NodeId) -> Result<&mut Node>;
    /// Stores a new node and names it.
    fn alloc(&mut self, node: Node) -> NodeId;
    /// Releases a node.
    fn free(&mut self, id: NodeId);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_and_internal_round_trip() {
        let leaf = Node {
            tree: TreeKind::Directory,
            level: 0,
            entries: Entries::Leaf(vec![(1, b"a".to_vec()), (5, vec![]), (9, vec![7; 900])]),
        };
        assert_eq!(Node::decode(&leaf.encode(), 0).unwrap(), leaf);
        assert_eq!(leaf.encode().len(), leaf.encoded_len());
        let internal = Node {
            tree: TreeKind::Extents,
            level: 2,
            entries: Entries::Internal(vec![(0, NodeId(3)), (100, NodeId(4))]),
        };
        assert_eq!(Node::decode(&internal.encode(), 2).unwrap(), internal);
    }

    #[test]
    fn out_of_order_keys_and_truncation_are_errors() {
        let bad_order =
            Node { tree: TreeKind::Xattrs, level: 0, entries: Entries::Leaf(vec![(5, vec![]), (1, vec![])]) };
        assert!(Node::decode(&bad_order.encode(), 0).is_err());
        let ok = Node { tree: TreeKind::Xattrs, level: 0, entries: Entries::Leaf(vec![(1, b"xyz".to_vec())]) };
        let p = ok.encode();
        for n in 0..p.len() {
            assert!(Node::decode(&p[..n], 0).is_err(), "prefix {n}");
        }
    }
}
