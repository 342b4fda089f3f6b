//! On-disk structures: encode, decode, checksums and versions. Nothing else:
//! no I/O and no state. `docs/FORMAT.md` describes every byte.
//!
//! Decoding follows one order everywhere: checksum, then magic/kind/version,
//! then fields with checked arithmetic, then semantic checks, then the typed
//! value. Bad bytes give a [`codec::DecodeError`], never a panic.
//!
//! Blob blocks need no module of their own: their payload is the raw bytes of
//! a piece of a long value, its length given by the block header.

pub mod block;
pub mod checkpoint;
pub mod checksum;
pub mod classify;
pub mod codec;
pub mod descriptor;
pub mod fsync;
pub mod ifile;
pub mod inode;
pub mod inode_block;
pub mod name;
pub mod node;
pub mod quota;
pub mod raw;
pub mod record;
pub mod snapshot;
pub mod stream;
pub mod superblock;
