//! DualFS: a file system that keeps data and meta-data on two devices.
//!
//! The data device is cut into groups and written in place; the meta-data
//! device is a log of partial segments holding the only copy of every piece
//! of meta-data. See `docs/DESIGN.md` for the why and `docs/FORMAT.md` for the
//! bytes. Layers, from the bottom (`tests/layers.rs` holds the order and
//! fails on an import that points up):
//!
//! ```text
//! types, error, faults   what every layer uses
//! device      BlockDevice: read/write/flush whole blocks
//! format      on-disk structures: encode/decode/checksum
//! table       one IFile table in memory: entries, dirty blocks, addresses
//! data_space  data-device allocator: groups, extents, deferred frees
//! ifile       inode map, node map, segment usage
//! meta_log    block cache, partial segments, checkpoints, roll-forward
//! check       fsck: mount's recovery, then an independent walk of the volume
//! namespace   inodes, directories, extent maps, xattrs (B-trees)
//! volume      Volume: the POSIX-style API
//! ```
#![forbid(unsafe_code)]

pub mod check;
pub mod data_space;
pub mod device;
pub mod error;
pub mod faults;
pub mod format;
pub mod ifile;
pub mod meta_log;
pub mod namespace;
pub mod repair;
pub mod table;
pub mod types;
pub mod volume;

pub use error::{DeviceRole, Error, Result};
pub use volume::Volume;
