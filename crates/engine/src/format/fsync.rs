//! Fsync records: what an fsync partial segment (kind 3) says.
//!
//! An fsync makes one file durable without committing everything else that
//! is dirty. The commit group cannot do that: a directory leaf or an inode
//! block holds other files' uncommitted changes, and an entry naming an
//! inode whose record is not durable is corruption. So an fsync writes
//! *logical* records instead (F2FS's fsync-marked node blocks and ext4's
//! fast commits are the peers): the file's inode as it is now, the ranges
//! of its block map that changed, the names that reach it when it is new,
//! and, for small writes, the data itself (ZFS's intent log). Roll-forward
//! keeps the records that follow the last complete commit group and the
//! volume replays them through the namespace at mount; a later commit group
//! carries everything they said, so they are dropped once one is durable.

use super::codec::{DecodeResult, Reader, Writer, bad};
use super::inode::{EXTENT_LEN, Extent, InodeRecord};
use crate::types::{DataBlock, FileKind, InodeNo};

/// [`FsyncRecord::Inode`] flag: the inode was created after the last
/// commit group; replay brings its number into use.
pub const FSYNC_NEW: u8 = 1;
/// [`FsyncRecord::Inode`] flag: the file's block map is the one the volume
/// already has, changed by the [`FsyncRecord::Range`] records that follow
/// (the record's own body is empty). Without it a regular file's body is
/// the record's (inline bytes, or nothing).
pub const FSYNC_MAPPED: u8 = 2;
const KNOWN_FLAGS: u8 = FSYNC_NEW | FSYNC_MAPPED;

/// Most extents one range record carries.
pub const MAX_RANGE_EXTENTS: usize = 4096;

/// One logical change an fsync made durable.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum FsyncRecord {
    /// The inode as it is (`FSYNC_*` flags). Its link count is ignored:
    /// replay keeps the count an existing inode has and counts the links
    /// it replays for a new one.
    Inode {
        /// `FSYNC_NEW`, `FSYNC_MAPPED`.
        flags: u8,
        /// The record; its body is empty for directories and mapped files.
        record: InodeRecord,
    },
    /// File blocks `[first, end)` of `ino` map exactly to `extents` (all
    /// inside the range, sorted, disjoint): what was mapped there before is
    /// unmapped and freed unless listed again.
    Range {
        /// The file.
        ino: InodeNo,
        /// First file block of the range.
        first: u64,
        /// One past its last block (`u64::MAX`: to the end of the file).
        end: u64,
        /// The mapping inside the range.
        extents: Vec<Extent>,
    },
    /// A name for an inode created after the last commit group.
    Link {
        /// The directory.
        dir: InodeNo,
        /// The inode named.
        ino: InodeNo,
        /// What it is.
        kind: FileKind,
        /// The name (1–255 bytes, no `/` or NUL, not `.` or `..`).
        name: Vec<u8>,
    },
    /// The next raw body block of the partial segment holds file block
    /// `block` of `ino`, whose home is data block `at`; `crc` is its CRC32C.
    Data {
        /// The file.
        ino: InodeNo,
        /// Its file block.
        block: u64,
        /// Where the block lives on the data device.
        at: DataBlock,
        /// CRC32C of the 4096 bytes.
        crc: u32,
    },
    /// Data blocks `[start, start + len)` were written in place and flushed
    /// before this record: copies of them in earlier records are stale.
    Written {
        /// First data block.
        start: DataBlock,
        /// Blocks.
        len: u32,
    },
}

impl FsyncRecord {
    /// Bytes the record takes in a descriptor stream.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        match self {
            FsyncRecord::Inode { record, .. } => 4 + record.encoded_len(),
            FsyncRecord::Range { extents, .. } => 27 + extents.len() * EXTENT_LEN,
            FsyncRecord::Link { name, .. } => 19 + name.len(),
            FsyncRecord::Data { .. } => 29,
            FsyncRecord::Written { .. } => 13,
        }
    }

    /// Appends the record (tag, then fields) to `w`.
    pub fn encode(&self, w: &mut Writer) {
        match self {
            FsyncRecord::Inode { flags, record } => {
                w.u8(1).u8(*flags).u16(record.encoded_len() as u16);
                record.encode(w);
            }
            FsyncRecord::Range { ino, first, end, extents } => {
                w.u8(2).u64(ino.0).u64(*first).u64(*end).u16(extents.len() as u16);
                for e in extents {
                    e.encode(w);
                }
            }
            FsyncRecord::Link { dir, ino, kind, name } => {
                w.u8(3).u64(dir.0).u64(ino.0).u8(kind.dirent_type()).u8(name.len() as u8).bytes(name);
            }
            FsyncRecord::Data { ino, block, at, crc } => {
                w.u8(4).u64(ino.0).u64(*block).u64(at.0).u32(*crc);
            }
            FsyncRecord::Written { start, len } => {
                w.u8(5).u64(start.0).u32(*len);
            }
        }
    }

    /// Reads one record.
    ///
    /// # Errors
    /// Out of bytes, an unknown tag or flag, or a field out of range.
    pub fn decode(r: &mut Reader<'_>) -> DecodeResult<FsyncRecord> {
        Ok(match r.u8()? {
            1 => {
                let flags = r.u8()?;
                if flags & !KNOWN_FLAGS != 0 {
                    bad!("fsync inode record has unknown flags {flags:#x}");
                }
                let len = usize::from(r.u16()?);
                let record = InodeRecord::decode(r.bytes(len)?)?;
                FsyncRecord::Inode { flags, record }
            }
            2 => {
                let ino = InodeNo(r.u64()?);
                let first = r.u64()?;
                let end = r.u64()?;
                let n = usize::from(r.u16()?);
                if first >= end {
                    bad!("fsync range [{first}, {end}) of inode {ino} is empty");
                }
                if n > MAX_RANGE_EXTENTS || n * EXTENT_LEN > r.remaining() {
                    bad!("fsync range of inode {ino} claims {n} extents");
                }
                let mut extents: Vec<Extent> = Vec::with_capacity(n);
                for _ in 0..n {
                    let e = Extent::decode(r)?;
                    if e.logical < first || e.logical_end() > end {
                        bad!("extent at file block {} lies outside its range [{first}, {end})", e.logical);
                    }
                    if extents.last().is_some_and(|p| p.logical_end() > e.logical) {
                        bad!("extents of an fsync range overlap or are out of order");
                    }
                    extents.push(e);
                }
                FsyncRecord::Range { ino, first, end, extents }
            }
            3 => {
                let dir = InodeNo(r.u64()?);
                let ino = InodeNo(r.u64()?);
                let t = r.u8()?;
                let Some(kind) = FileKind::from_dirent_type(t) else { bad!("fsync link names file type {t}") };
                let len = usize::from(r.u8()?);
                let name = r.bytes(len)?.to_vec();
                if name.is_empty() || name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0) {
                    bad!("fsync link into inode {dir} has an invalid name");
                }
                if dir.0 == 0 || ino.0 == 0 {
                    bad!("fsync link names inode 0");
                }
                FsyncRecord::Link { dir, ino, kind, name }
            }
            4 => FsyncRecord::Data { ino: InodeNo(r.u64()?), block: r.u64()?, at: DataBlock(r.u64()?), crc: r.u32()? },
            5 => {
                let start = DataBlock(r.u64()?);
                let len = r.u32()?;
                if len == 0 || start.0.checked_add(u64::from(len)).is_none() {
                    bad!("fsync written range at data block {} of {len} blocks", start.0);
                }
                FsyncRecord::Written { start, len }
            }
            t => bad!("unknown fsync record {t}"),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::format::inode::Body;
    use crate::types::Timestamp;

    pub(crate) fn samples() -> Vec<FsyncRecord> {
        let record = InodeRecord {
            ino: InodeNo(7),
            generation: 3,
            mode: libc::S_IFREG | 0o644,
            nlink: 1,
            size: 9000,
            mtime: Timestamp { sec: 5, nsec: 6 },
            body: Body::Inline(vec![1, 2, 3]),
            ..InodeRecord::default()
        };
        vec![
            FsyncRecord::Inode { flags: FSYNC_NEW | FSYNC_MAPPED, record },
            FsyncRecord::Range {
                ino: InodeNo(7),
                first: 0,
                end: u64::MAX,
                extents: vec![
                    Extent { logical: 0, physical: DataBlock(100), len: 2, unwritten: false },
                    Extent { logical: 5, physical: DataBlock(300), len: 1, unwritten: true },
                ],
            },
            FsyncRecord::Link { dir: InodeNo(1), ino: InodeNo(7), kind: FileKind::Regular, name: b"foo".to_vec() },
            FsyncRecord::Data { ino: InodeNo(7), block: 1, at: DataBlock(101), crc: 0xDEAD_BEEF },
            FsyncRecord::Written { start: DataBlock(100), len: 2 },
        ]
    }

    #[test]
    fn every_record_round_trips_with_its_length() {
        for rec in samples() {
            let mut w = Writer::new();
            rec.encode(&mut w);
            let bytes = w.into_inner();
            assert_eq!(bytes.len(), rec.encoded_len(), "{rec:?}");
            let mut r = Reader::new(&bytes);
            assert_eq!(FsyncRecord::decode(&mut r).unwrap(), rec);
            assert_eq!(r.remaining(), 0);
        }
    }

    #[test]
    fn truncated_records_are_refused() {
        for rec in samples() {
            let mut w = Writer::new();
            rec.encode(&mut w);
            let bytes = w.into_inner();
            for n in 0..bytes.len() {
                assert!(FsyncRecord::decode(&mut Reader::new(&bytes[..n])).is_err(), "{rec:?} cut at {n}");
            }
        }
    }

    #[test]
    fn ranges_with_stray_or_overlapping_extents_are_refused() {
        let e = |l, n| Extent { logical: l, physical: DataBlock(50), len: n, unwritten: false };
        for extents in [vec![e(9, 2)], vec![e(2, 3), e(3, 1)], vec![e(4, 1), e(2, 1)]] {
            let rec = FsyncRecord::Range { ino: InodeNo(2), first: 2, end: 10, extents };
            let mut w = Writer::new();
            rec.encode(&mut w);
            assert!(FsyncRecord::decode(&mut Reader::new(&w.into_inner())).is_err());
        }
        let mut w = Writer::new();
        FsyncRecord::Link { dir: InodeNo(1), ino: InodeNo(2), kind: FileKind::Regular, name: b"..".to_vec() }
            .encode(&mut w);
        assert!(FsyncRecord::decode(&mut Reader::new(&w.into_inner())).is_err());
    }
}
