//! The namespace: inodes, directories, extent maps and extended attributes,
//! all built on one B-tree.

pub mod btree;
