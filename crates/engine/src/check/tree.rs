//! fsck's own walk of a B-tree: every invariant the tree keeps (see
//! [`crate::namespace::btree`]), read through a [`NodeSource`] of nodes fsck
//! decoded itself, never through the namespace's tree code.

use crate::error::Result;
use crate::format::block::PAYLOAD_LEN;
use crate::format::node::{Entries, MAX_LEVEL, NodeSource, TreeKind};
use crate::types::NodeId;

/// The entries of a tree in order, or the first broken invariant.
pub type Checked = std::result::Result<Vec<(u64, Vec<u8>)>, String>;

/// Walks the whole tree, checking every invariant; returns the entries in order.
/// `visit_node` sees each node id (for reachability and ownership checks).
///
/// # Errors
/// A node cannot be read, or a description of the first broken invariant.
pub fn check(
    store: &mut dyn NodeSource,
    root: Option<NodeId>,
    tree: TreeKind,
    visit_node: &mut dyn FnMut(NodeId),
) -> Result<Checked> {
    let mut out = Vec::new();
    let Some(root) = root else { return Ok(Ok(out)) };
    let level = store.node(root)?.level;
    let res = check_in(store, root, tree, level, None, None, &mut out, visit_node)?;
    Ok(res.map(|()| out))
}

#[allow(clippy::too_many_arguments)]
fn check_in(
    store: &mut dyn NodeSource,
    id: NodeId,
    tree: TreeKind,
    level: u16,
    lower: Option<u64>,
    upper: Option<u64>,
    out: &mut Vec<(u64, Vec<u8>)>,
    visit_node: &mut dyn FnMut(NodeId),
) -> Result<std::result::Result<(), String>> {
    visit_node(id);
    let node = store.node(id)?.clone();
    if node.tree != tree {
        return Ok(Err(format!("node {id:?} belongs to a {:?} tree, not {tree:?}", node.tree)));
    }
    if node.level != level {
        return Ok(Err(format!("node {id:?} is at level {} where {level} was expected", node.level)));
    }
    if node.is_empty() {
        return Ok(Err(format!("node {id:?} is empty")));
    }
    if node.encoded_len() > PAYLOAD_LEN {
        return Ok(Err(format!("node {id:?} does not fit a block")));
    }
    let in_range = |k: u64| lower.is_none_or(|l| k >= l) && upper.is_none_or(|u| k < u);
    match &node.entries {
        Entries::Leaf(e) => {
            for w in e.windows(2) {
                if w[0].0 >= w[1].0 {
                    return Ok(Err(format!("node {id:?}: keys out of order")));
                }
            }
            if let Some((k, _)) = e.iter().find(|(k, _)| !in_range(*k)) {
                return Ok(Err(format!("node {id:?}: key {k:#x} outside its parent's range")));
            }
            out.extend(e.iter().cloned());
        }
        Entries::Internal(e) => {
            if level == 0 {
                return Ok(Err(format!("node {id:?}: internal node at level 0")));
            }
            for (j, (k, c)) in e.iter().enumerate() {
                if j > 0 && ((j > 1 && e[j - 1].0 >= *k) || !in_range(*k)) {
                    return Ok(Err(format!("node {id:?}: separator {k:#x} out of order or range")));
                }
                let lo = if j == 0 { lower } else { Some(*k) };
                let hi = e.get(j + 1).map(|(k, _)| *k).or(upper);
                let r = check_in(store, *c, tree, level - 1, lo, hi, out, visit_node)?;
                if r.is_err() {
                    return Ok(r);
                }
            }
        }
    }
    Ok(Ok(()))
}

/// Every leaf entry reachable from `root`, in key order, skipping what
/// cannot be read: the space check wants whatever a damaged tree still maps.
/// Depth is bounded, so a cycle of nodes cannot keep the walk going.
pub fn leaf_entries(store: &mut dyn NodeSource, root: NodeId, out: &mut Vec<(u64, Vec<u8>)>) {
    leaf_entries_in(store, root, MAX_LEVEL, out);
}

fn leaf_entries_in(store: &mut dyn NodeSource, id: NodeId, depth: u16, out: &mut Vec<(u64, Vec<u8>)>) {
    let Ok(node) = store.node(id).cloned() else { return };
    match node.entries {
        Entries::Leaf(e) => out.extend(e),
        Entries::Internal(e) if depth > 0 => {
            for (_, child) in e {
                leaf_entries_in(store, child, depth - 1, out);
            }
        }
        Entries::Internal(_) => {}
    }
}
