//! The name the kernel last learned each regular file by (LOOKUP, CREATE,
//! RENAME), under the writeback cache, so that the adapter can have the
//! kernel drop a file's inode (docs/DESIGN.md, "Change times the kernel
//! keeps").
//!
//! Under the writeback cache the kernel keeps a regular file's mtime and
//! ctime itself and takes neither from the server while it caches the
//! inode (`fuse_change_attributes_i`, fs/fuse/inode.c: `cache_mask`), so
//! a change only the volume sees, an inode flag set through FS_IOC_SETFLAGS,
//! leaves `stat` showing the old ctime. Invalidating the name the kernel
//! knows the file by unhashes its dentry; once nothing holds the file the
//! kernel drops the inode (FUSE inodes are never kept unreferenced), and
//! the next lookup reads the volume's ctime.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A parent's node id and a name in it.
type Name = (u64, Box<[u8]>);

/// Node id to the name the kernel knows it by; an entry goes at FORGET.
#[derive(Debug, Default)]
pub struct KnownNames {
    names: Mutex<HashMap<u64, Name>>,
}

impl KnownNames {
    /// The kernel knows `node` as `name` in `parent` now.
    pub fn learned(&self, node: u64, parent: u64, name: &[u8]) {
        let mut names = self.lock();
        match names.get_mut(&node) {
            Some((p, n)) if *p == parent && **n == *name => {}
            Some(slot) => *slot = (parent, name.into()),
            None => {
                names.insert(node, (parent, name.into()));
            }
        }
    }

    /// The kernel forgot `node`.
    pub fn forgotten(&self, node: u64) {
        self.lock().remove(&node);
    }

    /// The name the kernel last learned `node` by, if any.
    pub fn name_of(&self, node: u64) -> Option<Name> {
        self.lock().get(&node).cloned()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Name>> {
        self.names.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_name_learned_counts_until_forgotten() {
        let k = KnownNames::default();
        assert_eq!(k.name_of(5), None);
        k.learned(5, 1, b"a");
        k.learned(5, 2, b"b");
        assert_eq!(k.name_of(5), Some((2, (*b"b").into())));
        k.forgotten(5);
        assert_eq!(k.name_of(5), None);
    }
}
