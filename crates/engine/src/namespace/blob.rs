//! Blobs: values too long for an inode or a B-tree entry (long symlink
//! targets, large xattr values), cut into blob blocks named by node ids.

use super::Fs;
use crate::error::{Error, Result};
use crate::format::block::PAYLOAD_LEN;
use crate::format::inode::Body;
use crate::meta_log::Object;
use crate::types::{InodeNo, NodeId};

impl Fs {
    /// Stores `value` in blob blocks owned by `owner`.
    pub fn write_blob(&mut self, owner: InodeNo, value: &[u8]) -> Vec<NodeId> {
        value.chunks(PAYLOAD_LEN).map(|c| self.log.create_object(owner, Object::Blob(c.to_vec()))).collect()
    }

    /// Gives symlink `ino` its `target`: inline when it fits the inode,
    /// else in blob blocks. A target it had before must be freed first.
    ///
    /// # Errors
    /// The inode cannot be read.
    pub fn set_symlink_target(&mut self, ino: InodeNo, target: &[u8]) -> Result<()> {
        let body = if target.len() <= self.config.inline_max as usize {
            Body::Inline(target.to_vec())
        } else {
            Body::Blob { len: target.len() as u32, nodes: self.write_blob(ino, target) }
        };
        let mut rec = self.inode_mut(ino)?;
        rec.body = body;
        rec.size = target.len() as u64;
        Ok(())
    }

    /// Reads a blob of `len` bytes.
    ///
    /// # Errors
    /// A block is missing, not a blob, or the pieces do not add up to `len`.
    pub fn read_blob(&mut self, nodes: &[NodeId], len: u32) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len as usize);
        for id in nodes {
            match self.log.object(*id)? {
                Object::Blob(b) => out.extend_from_slice(b),
                Object::Node(_) => {
                    return Err(Error::corrupt_meta(
                        "blob",
                        self.log.ifile().node_address(*id).0,
                        "a B-tree node where a blob was expected",
                    ));
                }
            }
        }
        if out.len() != len as usize {
            return Err(Error::corrupt_meta(
                "blob",
                0,
                format!("blob holds {} bytes, its owner says {len}", out.len()),
            ));
        }
        Ok(out)
    }

    /// Frees blob blocks.
    pub fn free_blob(&mut self, nodes: &[NodeId]) {
        for id in nodes {
            self.log.free_object(*id);
        }
    }
}
