//! A B+-tree keyed by `u64` with variable-length values, stored in node blocks.
//!
//! One implementation serves directories, large extent maps and large xattr
//! sets. Nodes refer to children by node id, so rewriting a node in the log
//! never touches its parent: an insert dirties the leaf, and its ancestors
//! only when it splits.
//!
//! Invariants (checked by fsck's [`crate::check::tree::check`]):
//! - keys strictly increase within a node, and every key of child `i` of an
//!   internal node is `>=` its separator `i` (for `i > 0`) and `<` separator
//!   `i + 1`. The separator of child 0 is never used: keys below every
//!   separator go to child 0, so it would go stale, and nothing reads it;
//! - all leaves are at level 0 and a node at level `l > 0` has children at `l - 1`;
//! - no node is empty, and every node's encoding fits a block.

use crate::error::Result;
use crate::format::block::PAYLOAD_LEN;
use crate::format::node::{
    Entries, INTERNAL_ENTRY_LEN, MAX_VALUE_LEN, NODE_HEADER_LEN, Node, TreeKind, leaf_entry_len,
};
use crate::types::NodeId;

// The traits live with the node format, below the meta log that implements
// them; the tree's users name them through here.
pub use crate::format::node::{NodeSource, NodeStore};

/// Nodes smaller than this are merged with or refilled from a sibling.
const UNDERFULL: usize = PAYLOAD_LEN / 4;

/// Index of the child of an internal node whose range holds `key`.
fn child_index(entries: &[(u64, NodeId)], key: u64) -> usize {
    entries.partition_point(|(k, _)| *k <= key).saturating_sub(1)
}

/// The value stored under `key`.
///
/// # Errors
/// A node cannot be read.
pub fn get(store: &mut dyn NodeSource, root: Option<NodeId>, key: u64) -> Result<Option<Vec<u8>>> {
    let Some(mut id) = root else { return Ok(None) };
    loop {
        match &store.node(id)?.entries {
            Entries::Internal(e) => id = e[child_index(e, key)].1,
            Entries::Leaf(e) => {
                return Ok(e.binary_search_by_key(&key, |(k, _)| *k).ok().map(|i| e[i].1.clone()));
            }
        }
    }
}

/// Calls `visit` on entries with keys `>= from`, in key order, until it returns false.
///
/// # Errors
/// A node cannot be read.
pub fn scan(
    store: &mut dyn NodeSource,
    root: Option<NodeId>,
    from: u64,
    visit: &mut dyn FnMut(u64, &[u8]) -> bool,
) -> Result<()> {
    let Some(root) = root else { return Ok(()) };
    let mut from = from;
    loop {
        // Descend to the leaf holding `from`, remembering where the leaf's
        // range ends; then visit it in place (a lookup in a directory stops
        // at its first entry: copying the rest of the leaf was most of the
        // cost of a lookup).
        let mut id = root;
        let mut upper: Option<u64> = None;
        loop {
            match &store.node(id)?.entries {
                Entries::Internal(e) => {
                    let i = child_index(e, from);
                    if let Some((k, _)) = e.get(i + 1) {
                        upper = Some(*k);
                    }
                    id = e[i].1;
                }
                Entries::Leaf(e) => {
                    let start = e.partition_point(|(k, _)| *k < from);
                    for (k, v) in &e[start..] {
                        if !visit(*k, v) {
                            return Ok(());
                        }
                    }
                    break;
                }
            }
        }
        match upper {
            Some(u) => from = u,
            None => return Ok(()),
        }
    }
}

/// The entry with the largest key `<= key`.
///
/// # Errors
/// A node cannot be read.
pub fn last_le(store: &mut dyn NodeSource, root: Option<NodeId>, key: u64) -> Result<Option<(u64, Vec<u8>)>> {
    match root {
        None => Ok(None),
        Some(id) => last_le_in(store, id, key),
    }
}

fn last_le_in(store: &mut dyn NodeSource, id: NodeId, key: u64) -> Result<Option<(u64, Vec<u8>)>> {
    let children = match &store.node(id)?.entries {
        Entries::Leaf(e) => {
            let i = e.partition_point(|(k, _)| *k <= key);
            return Ok(i.checked_sub(1).map(|i| e[i].clone()));
        }
        Entries::Internal(e) => e.clone(),
    };
    // The first child's separator is not a lower bound, so the answer may sit
    // in an earlier child when the chosen one holds nothing small enough.
    let mut i = child_index(&children, key);
    loop {
        if let Some(found) = last_le_in(store, children[i].1, key)? {
            return Ok(Some(found));
        }
        if i == 0 {
            return Ok(None);
        }
        i -= 1;
    }
}

/// Inserts or replaces `key`. Returns the new root and the old value.
///
/// # Panics
/// If `value` exceeds [`MAX_VALUE_LEN`]; callers size values below it.
///
/// # Errors
/// A node cannot be read.
pub fn insert(
    store: &mut dyn NodeStore,
    root: Option<NodeId>,
    tree: TreeKind,
    key: u64,
    value: Vec<u8>,
) -> Result<(NodeId, Option<Vec<u8>>)> {
    assert!(value.len() <= MAX_VALUE_LEN, "B-tree value of {} bytes", value.len());
    let Some(root) = root else {
        let id = store.alloc(Node { tree, level: 0, entries: Entries::Leaf(vec![(key, value)]) });
        return Ok((id, None));
    };
    let (old, split) = insert_in(store, root, key, value)?;
    let Some((sep, right)) = split else {
        return Ok((root, old));
    };
    // The root split: a new root above the two halves.
    let (level, first) = {
        let n = store.node(root)?;
        let first = match &n.entries {
            Entries::Leaf(e) => e[0].0,
            Entries::Internal(e) => e[0].0,
        };
        (n.level, first)
    };
    let new_root =
        store.alloc(Node { tree, level: level + 1, entries: Entries::Internal(vec![(first, root), (sep, right)]) });
    Ok((new_root, old))
}

type Split = Option<(u64, NodeId)>;

fn insert_in(store: &mut dyn NodeStore, id: NodeId, key: u64, value: Vec<u8>) -> Result<(Option<Vec<u8>>, Split)> {
    let child = match &store.node(id)?.entries {
        Entries::Internal(e) => {
            let i = child_index(e, key);
            Some((i, e[i].1))
        }
        Entries::Leaf(_) => None,
    };
    let Some((i, child)) = child else {
        let node = store.node_mut(id)?;
        let Entries::Leaf(e) = &mut node.entries else { unreachable!() };
        let old = match e.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(j) => Some(std::mem::replace(&mut e[j].1, value)),
            Err(j) => {
                e.insert(j, (key, value));
                None
            }
        };
        let split = split_if_full(store, id)?;
        return Ok((old, split));
    };
    let (old, split) = insert_in(store, child, key, value)?;
    if let Some((sep, right)) = split {
        let node = store.node_mut(id)?;
        let Entries::Internal(e) = &mut node.entries else { unreachable!() };
        e.insert(i + 1, (sep, right));
        return Ok((old, split_if_full(store, id)?));
    }
    Ok((old, None))
}

/// Splits a node whose encoding outgrew a block into two of about equal size.
fn split_if_full(store: &mut dyn NodeStore, id: NodeId) -> Result<Split> {
    let node = store.node_mut(id)?;
    if node.encoded_len() <= PAYLOAD_LEN {
        return Ok(None);
    }
    let (tree, level) = (node.tree, node.level);
    let right = match &mut node.entries {
        Entries::Leaf(e) => Entries::Leaf(e.split_off(split_point_leaf(e))),
        Entries::Internal(e) => {
            let at = e.len() / 2;
            Entries::Internal(e.split_off(at))
        }
    };
    let sep = match &right {
        Entries::Leaf(e) => e[0].0,
        Entries::Internal(e) => e[0].0,
    };
    let right_id = store.alloc(Node { tree, level, entries: right });
    Ok(Some((sep, right_id)))
}

/// Where to cut a leaf so both halves hold about the same number of bytes.
fn split_point_leaf(e: &[(u64, Vec<u8>)]) -> usize {
    let total: usize = e.iter().map(|(_, v)| leaf_entry_len(v.len())).sum();
    let mut acc = 0;
    for (i, (_, v)) in e.iter().enumerate() {
        acc += leaf_entry_len(v.len());
        if acc * 2 >= total {
            return (i + 1).clamp(1, e.len() - 1);
        }
    }
    e.len() / 2
}

/// Removes `key`. Returns the new root (None when the tree became empty) and the old value.
///
/// # Errors
/// A node cannot be read.
pub fn remove(store: &mut dyn NodeStore, root: Option<NodeId>, key: u64) -> Result<(Option<NodeId>, Option<Vec<u8>>)> {
    let Some(root) = root else {
        return Ok((None, None));
    };
    let old = remove_in(store, root, key)?;
    if old.is_none() {
        return Ok((Some(root), None));
    }
    // Shrink from the top: an empty leaf root vanishes, a one-child internal root
    // hands over to its child.
    let mut root = root;
    loop {
        let next = match &store.node(root)?.entries {
            Entries::Leaf(e) if e.is_empty() => {
                store.free(root);
                return Ok((None, old));
            }
            Entries::Internal(e) if e.len() == 1 => e[0].1,
            _ => return Ok((Some(root), old)),
        };
        store.free(root);
        root = next;
    }
}

fn remove_in(store: &mut dyn NodeStore, id: NodeId, key: u64) -> Result<Option<Vec<u8>>> {
    let child = match &store.node(id)?.entries {
        Entries::Internal(e) => {
            let i = child_index(e, key);
            Some((i, e[i].1))
        }
        Entries::Leaf(e) => {
            if e.binary_search_by_key(&key, |(k, _)| *k).is_err() {
                return Ok(None);
            }
            None
        }
    };
    let Some((i, child)) = child else {
        let node = store.node_mut(id)?;
        let Entries::Leaf(e) = &mut node.entries else { unreachable!() };
        let j = e.binary_search_by_key(&key, |(k, _)| *k).map_err(|_| crate::Error::NotFound)?;
        return Ok(Some(e.remove(j).1));
    };
    let old = remove_in(store, child, key)?;
    if old.is_some() {
        rebalance(store, id, i)?;
    }
    Ok(old)
}

/// After a removal below child `i` of internal node `parent`: if that child
/// is underfull, merge it with a sibling or share the sibling's entries.
fn rebalance(store: &mut dyn NodeStore, parent: NodeId, i: usize) -> Result<()> {
    let entries = match &store.node(parent)?.entries {
        Entries::Internal(e) => e.clone(),
        Entries::Leaf(_) => unreachable!("rebalance on a leaf"),
    };
    let child = entries[i].1;
    if store.node(child)?.encoded_len() >= UNDERFULL {
        return Ok(());
    }
    if entries.len() < 2 {
        // An only child has no sibling to merge with; the root shrink or the
        // level above takes care of it.
        return Ok(());
    }
    let (l, r) = if i + 1 < entries.len() { (i, i + 1) } else { (i - 1, i) };
    let (left, right) = (entries[l].1, entries[r].1);
    let sep = entries[r].0;
    let mut right_entries = store.node(right)?.entries.clone();
    // The right node's first separator must become a true lower bound before
    // it can sit after other entries.
    if let Entries::Internal(e) = &mut right_entries {
        e[0].0 = sep;
    }
    let left_node = store.node_mut(left)?;
    match (&mut left_node.entries, right_entries) {
        (Entries::Leaf(a), Entries::Leaf(b)) => a.extend(b),
        (Entries::Internal(a), Entries::Internal(b)) => a.extend(b),
        _ => {
            return Err(crate::Error::corrupt_meta("B-tree node", right.0, "siblings at different levels"));
        }
    }
    if left_node.encoded_len() <= PAYLOAD_LEN {
        // Merge: the right node disappears.
        store.free(right);
        let Entries::Internal(e) = &mut store.node_mut(parent)?.entries else { unreachable!() };
        e.remove(r);
        return Ok(());
    }
    // Too much for one node: share evenly and move the separator.
    let moved = match &mut left_node.entries {
        Entries::Leaf(a) => Entries::Leaf(a.split_off(split_point_leaf(a))),
        Entries::Internal(a) => {
            let at = a.len() / 2;
            Entries::Internal(a.split_off(at))
        }
    };
    let new_sep = match &moved {
        Entries::Leaf(e) => e[0].0,
        Entries::Internal(e) => e[0].0,
    };
    store.node_mut(right)?.entries = moved;
    let Entries::Internal(e) = &mut store.node_mut(parent)?.entries else { unreachable!() };
    e[r].0 = new_sep;
    Ok(())
}

/// Frees every node of a tree.
///
/// # Errors
/// A node cannot be read.
pub fn destroy(store: &mut dyn NodeStore, root: Option<NodeId>) -> Result<()> {
    let Some(id) = root else { return Ok(()) };
    let children: Vec<NodeId> = match &store.node(id)?.entries {
        Entries::Internal(e) => e.iter().map(|(_, c)| *c).collect(),
        Entries::Leaf(_) => Vec::new(),
    };
    for c in children {
        destroy(store, Some(c))?;
    }
    store.free(id);
    Ok(())
}

/// Most leaves `entries` values of `value_len` bytes can take (each leaf
/// at least a quarter full), for capacity planning.
#[must_use]
pub fn leaves_for(entries: usize, value_len: usize) -> usize {
    (entries * leaf_entry_len(value_len)).div_ceil(UNDERFULL) + 1
}

/// Encoded size of an internal node with `n` children (for capacity planning).
#[must_use]
pub fn internal_len(n: usize) -> usize {
    NODE_HEADER_LEN + n * INTERNAL_ENTRY_LEN
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::{BTreeMap, HashMap};

    use proptest::prelude::*;

    use super::*;

    /// A node store in a plain map.
    #[derive(Default)]
    pub(crate) struct MapStore {
        pub nodes: HashMap<NodeId, Node>,
        next: u64,
    }

    impl NodeSource for MapStore {
        fn node(&mut self, id: NodeId) -> Result<&Node> {
            self.nodes.get(&id).ok_or(crate::Error::NotFound)
        }
    }

    impl NodeStore for MapStore {
        fn node_mut(&mut self, id: NodeId) -> Result<&mut Node> {
            self.nodes.get_mut(&id).ok_or(crate::Error::NotFound)
        }
        fn alloc(&mut self, node: Node) -> NodeId {
            self.next += 1;
            let id = NodeId(self.next);
            self.nodes.insert(id, node);
            id
        }
        fn free(&mut self, id: NodeId) {
            assert!(self.nodes.remove(&id).is_some(), "double free of {id:?}");
        }
    }

    fn all(store: &mut MapStore, root: Option<NodeId>) -> Vec<(u64, Vec<u8>)> {
        let mut seen = 0;
        let out = crate::check::tree::check(store, root, TreeKind::Directory, &mut |_| seen += 1).unwrap().unwrap();
        assert_eq!(seen, store.nodes.len(), "unreachable nodes leaked");
        out
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, usize),
        Remove(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u64..2000, 0usize..300).prop_map(|(k, l)| Op::Insert(k, l)),
            2 => (0u64..2000).prop_map(Op::Remove),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn behaves_like_a_btreemap(ops in proptest::collection::vec(op(), 1..1500)) {
            let mut store = MapStore::default();
            let mut model = BTreeMap::new();
            let mut root = None;
            for op in ops {
                match op {
                    Op::Insert(k, len) => {
                        let v = vec![(k % 251) as u8; len];
                        let (r, old) = insert(&mut store, root, TreeKind::Directory, k, v.clone()).unwrap();
                        root = Some(r);
                        prop_assert_eq!(old, model.insert(k, v));
                    }
                    Op::Remove(k) => {
                        let (r, old) = remove(&mut store, root, k).unwrap();
                        root = r;
                        prop_assert_eq!(old, model.remove(&k));
                    }
                }
            }
            let got = all(&mut store, root);
            let want: Vec<(u64, Vec<u8>)> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
            prop_assert_eq!(&got, &want);
            for probe in [0u64, 1, 500, 999, 1999, 5000] {
                prop_assert_eq!(get(&mut store, root, probe).unwrap(), model.get(&probe).cloned());
                let le = last_le(&mut store, root, probe).unwrap();
                prop_assert_eq!(le, model.range(..=probe).next_back().map(|(k, v)| (*k, v.clone())));
                let mut scanned = Vec::new();
                scan(&mut store, root, probe, &mut |k, _| { scanned.push(k); scanned.len() < 50 }).unwrap();
                let want: Vec<u64> = model.range(probe..).map(|(k, _)| *k).take(50).collect();
                prop_assert_eq!(scanned, want);
            }
        }
    }

    #[test]
    fn many_sequential_inserts_then_removes_leave_nothing() {
        let mut store = MapStore::default();
        let mut root = None;
        for k in 0..20_000u64 {
            root = Some(insert(&mut store, root, TreeKind::Directory, k, vec![1; 40]).unwrap().0);
        }
        assert_eq!(all(&mut store, root).len(), 20_000);
        let depth = store.node(root.unwrap()).unwrap().level;
        assert!(depth <= 3, "depth {depth}");
        for k in (0..20_000u64).rev().step_by(2).chain((0..20_000u64).step_by(2)) {
            root = remove(&mut store, root, k).unwrap().0;
        }
        assert_eq!(root, None);
        assert!(store.nodes.is_empty());
    }

    #[test]
    fn destroy_frees_every_node() {
        let mut store = MapStore::default();
        let mut root = None;
        for k in 0..5_000u64 {
            root = Some(insert(&mut store, root, TreeKind::Extents, k * 7, vec![0; 13]).unwrap().0);
        }
        destroy(&mut store, root).unwrap();
        assert!(store.nodes.is_empty());
    }
}
