//! The root's receive mark, read by fsck's own decoders: a receive under
//! way (`trusted.dualfs.receiving`, DESIGN.md "Receive: a receive under
//! way is a state every tool knows") makes the namespace disagreements it
//! explains no problems until it ends.

use super::Loaded;
use super::tree;
use super::walk::Source;
use crate::format::codec::Reader;
use crate::format::inode::Xattrs;
use crate::format::node::TreeKind;
use crate::meta_log::Object;
use crate::types::{InodeNo, NodeId};

/// The value of extended attribute `name` of the root, as loaded; None
/// when it has none, or it cannot be read (then the checks say why).
pub(super) fn root_xattr(loaded: &Loaded, name: &[u8]) -> Option<Vec<u8>> {
    let root = loaded.inodes.get(&InodeNo::ROOT)?;
    match &root.xattrs {
        Xattrs::Inline(list) => list.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()),
        Xattrs::Tree(t) => {
            let entries =
                tree::check(&mut Source { loaded }, Some(t.root), TreeKind::Xattrs, &mut |_| {}).ok()?.ok()?;
            entries.into_iter().find_map(|(_, v)| {
                let mut r = Reader::new(&v);
                let form = r.u8().ok()?;
                let nl = usize::from(r.u8().ok()?);
                if r.bytes(nl).ok()? != name {
                    return None;
                }
                match form {
                    0 => Some(r.bytes(r.remaining()).ok()?.to_vec()),
                    1 => {
                        let len = r.u32().ok()? as usize;
                        let mut value = Vec::with_capacity(len.min(1 << 16));
                        while r.remaining() >= 8 {
                            match loaded.nodes.get(&NodeId(r.u64().ok()?)) {
                                Some((_, Object::Blob(b))) => value.extend_from_slice(b),
                                _ => return None,
                            }
                        }
                        (value.len() == len).then_some(value)
                    }
                    _ => None,
                }
            })
        }
    }
}
