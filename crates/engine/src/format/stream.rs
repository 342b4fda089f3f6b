//! The send stream (FORMAT.md section 6): what `dualfs send` writes and
//! `dualfs receive` reads, the difference between two snapshots (or one
//! whole snapshot) as a sequence of checksummed records.
//!
//! A stream is a 16-byte prelude (magic, version) and then frames: an
//! 8-byte head (kind, reserved, payload length), the payload, and the
//! CRC32C of head and payload. The first record is the header, the last
//! the end record, which counts what came before it. Decoding checks every
//! length against a bound before it allocates, and never panics: a
//! truncated or corrupted stream is refused with the reason.

use super::checksum::crc32c;
use super::codec::{DecodeResult, Reader, Writer, bad, bounded};
use crate::types::{FileKind, InodeNo, Timestamp};

/// The first eight bytes of every stream.
pub const MAGIC: [u8; 8] = *b"DUALSEND";
/// The stream format version this code writes. Version 2 added the
/// inode record's project id; a version 1 stream is read too (its inodes
/// have project 0). A reader of version 1 alone refuses a version 2
/// stream: it would put inode flags into records that its own volume
/// refuses.
pub const VERSION: u32 = 2;
/// The oldest stream version this code reads.
pub const OLDEST_VERSION: u32 = 1;
/// Bytes of the prelude: magic, version, reserved.
pub const PRELUDE_LEN: usize = 16;
/// Bytes of a frame's head: kind, three reserved bytes, payload length.
pub const FRAME_HEAD_LEN: usize = 8;
/// Bytes of a frame's checksum.
pub const FRAME_CRC_LEN: usize = 4;
/// Most file bytes one write record carries.
pub const WRITE_MAX: usize = 256 * 1024;
/// Largest payload of any record (a write record's offset and data).
pub const MAX_PAYLOAD: usize = WRITE_MAX + 64;
/// Longest name (file or extended attribute) a record may carry.
const NAME_MAX: usize = 255;
/// Longest snapshot name in a header.
const SNAPSHOT_NAME_MAX: usize = 64;

/// Record kinds, as stored in a frame's first byte.
mod kind {
    pub const HEADER: u8 = 1;
    pub const INODE: u8 = 2;
    pub const GONE: u8 = 3;
    pub const LINK: u8 = 4;
    pub const UNLINK: u8 = 5;
    pub const TRUNCATE: u8 = 6;
    pub const WRITE: u8 = 7;
    pub const HOLE: u8 = 8;
    pub const SYMLINK: u8 = 9;
    pub const XATTR_SET: u8 = 10;
    pub const XATTR_REMOVE: u8 = 11;
    pub const END: u8 = 12;
}

/// Which snapshot of the source a stream was made from or against.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SnapshotIdentity {
    /// The snapshot's id on the source volume (never reused there).
    pub id: u64,
    /// The checkpoint it keeps.
    pub checkpoint: u64,
    /// When it was made.
    pub created: Timestamp,
    /// Its name.
    pub name: String,
}

/// The first record: where the stream comes from and what it takes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StreamHeader {
    /// The source volume's UUID.
    pub source: [u8; 16],
    /// The snapshot the stream is a difference against; `None` for a full stream.
    pub base: Option<SnapshotIdentity>,
    /// The snapshot the stream brings the receiver to.
    pub target: SnapshotIdentity,
}

/// An inode's attributes as the target snapshot has them.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct InodeAttrs {
    /// Its number (kept by the receiver).
    pub ino: InodeNo,
    /// Generation of the number.
    pub generation: u32,
    /// File type and permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Hard links.
    pub nlink: u32,
    /// Inode flags.
    pub flags: u32,
    /// Size in bytes.
    pub size: u64,
    /// Device number of device nodes.
    pub rdev: u64,
    /// A directory's parent; 0 for other kinds.
    pub parent: InodeNo,
    /// Last access.
    pub atime: Timestamp,
    /// Last modification.
    pub mtime: Timestamp,
    /// Last change.
    pub ctime: Timestamp,
    /// Creation.
    pub crtime: Timestamp,
    /// Project id (stream version 2; 0 in version 1).
    pub project: u32,
}

impl InodeAttrs {
    /// What the inode is, from its mode.
    #[must_use]
    pub fn kind(&self) -> Option<FileKind> {
        FileKind::from_mode(self.mode)
    }
}

/// What the end record counts: the receiver checks it saw as much.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct StreamCounts {
    /// Records before the end record, the header included.
    pub records: u64,
    /// Inode records.
    pub inodes: u64,
    /// Gone records.
    pub gone: u64,
    /// File bytes carried by write records.
    pub data_bytes: u64,
}

/// One record of a stream. Every record after an inode record, up to the
/// next inode, gone or end record, is about that inode (its section).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Record {
    /// The stream's identity.
    Header(StreamHeader),
    /// Starts an inode's section: create it, or replace its attributes.
    Inode(InodeAttrs),
    /// The inode no longer exists.
    Gone(InodeNo),
    /// The section's directory has entry `name` for `ino`.
    Link {
        /// The entry's name.
        name: Vec<u8>,
        /// The inode it names.
        ino: InodeNo,
        /// What that inode is.
        kind: FileKind,
    },
    /// The section's directory has no entry `name`.
    Unlink {
        /// The name.
        name: Vec<u8>,
    },
    /// The section's file has this size (cut or extended with zeros).
    Truncate {
        /// Size in bytes.
        size: u64,
    },
    /// The section's file holds `data` at `offset`.
    Write {
        /// Byte offset.
        offset: u64,
        /// The bytes (at most [`WRITE_MAX`]).
        data: Vec<u8>,
    },
    /// The section's file reads zeros in this range (a hole).
    Hole {
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        len: u64,
    },
    /// The section's symbolic link points at `target`.
    Symlink {
        /// The target.
        target: Vec<u8>,
    },
    /// The section's inode has extended attribute `name` = `value`.
    XattrSet {
        /// Full name, with its namespace.
        name: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// The section's inode has no extended attribute `name`.
    XattrRemove {
        /// Full name.
        name: Vec<u8>,
    },
    /// The last record.
    End(StreamCounts),
}

/// The stream's first 16 bytes.
#[must_use]
pub fn prelude() -> [u8; PRELUDE_LEN] {
    let mut p = [0u8; PRELUDE_LEN];
    p[..8].copy_from_slice(&MAGIC);
    p[8..12].copy_from_slice(&VERSION.to_le_bytes());
    p
}

/// Checks a stream's prelude; returns its version, which [`decode`] needs.
///
/// # Errors
/// Not a DualFS send stream, or a version this code does not read.
pub fn check_prelude(p: &[u8; PRELUDE_LEN]) -> DecodeResult<u32> {
    if p[..8] != MAGIC {
        bad!("not a DualFS send stream (bad magic)");
    }
    let version = u32::from_le_bytes([p[8], p[9], p[10], p[11]]);
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        bad!("send stream version {version}, this dualfs reads versions {OLDEST_VERSION} to {VERSION}");
    }
    if p[12..].iter().any(|&b| b != 0) {
        bad!("reserved bytes of the stream prelude are not zero");
    }
    Ok(version)
}

fn put_name(w: &mut Writer, name: &[u8]) {
    debug_assert!(name.len() <= NAME_MAX);
    w.u16(name.len() as u16).bytes(name);
}

fn get_name(r: &mut Reader<'_>, max: usize) -> DecodeResult<Vec<u8>> {
    let n = bounded(u64::from(r.u16()?), "name byte", max)?;
    if n == 0 {
        bad!("empty name");
    }
    Ok(r.bytes(n)?.to_vec())
}

fn put_identity(w: &mut Writer, s: &SnapshotIdentity) {
    w.u64(s.id).u64(s.checkpoint).timestamp(s.created);
    put_name(w, s.name.as_bytes());
}

fn get_identity(r: &mut Reader<'_>) -> DecodeResult<SnapshotIdentity> {
    let id = r.u64()?;
    let checkpoint = r.u64()?;
    let created = r.timestamp()?;
    let name = get_name(r, SNAPSHOT_NAME_MAX)?;
    let Ok(name) = String::from_utf8(name) else { bad!("snapshot name is not UTF-8") };
    Ok(SnapshotIdentity { id, checkpoint, created, name })
}

fn put_attrs(w: &mut Writer, a: &InodeAttrs) {
    w.u64(a.ino.0).u32(a.generation).u32(a.mode).u32(a.uid).u32(a.gid).u32(a.nlink).u32(a.flags);
    w.u64(a.size).u64(a.rdev).u64(a.parent.0);
    w.timestamp(a.atime).timestamp(a.mtime).timestamp(a.ctime).timestamp(a.crtime);
    w.u32(a.project);
}

fn get_attrs(r: &mut Reader<'_>, version: u32) -> DecodeResult<InodeAttrs> {
    let ino = InodeNo(r.u64()?);
    if ino.0 == 0 {
        bad!("inode record for inode 0");
    }
    let a = InodeAttrs {
        ino,
        generation: r.u32()?,
        mode: r.u32()?,
        uid: r.u32()?,
        gid: r.u32()?,
        nlink: r.u32()?,
        flags: r.u32()?,
        size: r.u64()?,
        rdev: r.u64()?,
        parent: InodeNo(r.u64()?),
        atime: r.timestamp()?,
        mtime: r.timestamp()?,
        ctime: r.timestamp()?,
        crtime: r.timestamp()?,
        project: if version >= 2 { r.u32()? } else { 0 },
    };
    if a.flags & !crate::format::inode::KNOWN_FLAGS != 0 {
        bad!("inode {ino} has unknown flags {:#x}", a.flags & !crate::format::inode::KNOWN_FLAGS);
    }
    let Some(kind) = a.kind() else {
        bad!("inode {ino} has mode {:#o} of no known type", a.mode);
    };
    if a.flags & !crate::format::inode::flags_for(kind) != 0 {
        bad!("inode {ino} of mode {:#o} has flags {:#x} its kind does not keep", a.mode, a.flags);
    }
    if a.size > crate::format::inode::MAX_FILE_SIZE {
        bad!("inode {ino} has size {} beyond the largest file", a.size);
    }
    Ok(a)
}

/// Encodes `rec` as one whole frame: head, payload, checksum.
///
/// # Panics
/// A record larger than the format allows (a write of more than
/// [`WRITE_MAX`] bytes, a name longer than 255 bytes): the sender never
/// builds one.
#[must_use]
pub fn encode(rec: &Record) -> Vec<u8> {
    let mut w = Writer::new();
    let k = match rec {
        Record::Header(h) => {
            w.bytes(&h.source);
            match &h.base {
                Some(b) => {
                    w.u8(1);
                    put_identity(&mut w, b);
                }
                None => {
                    w.u8(0);
                }
            }
            put_identity(&mut w, &h.target);
            kind::HEADER
        }
        Record::Inode(a) => {
            put_attrs(&mut w, a);
            kind::INODE
        }
        Record::Gone(ino) => {
            w.u64(ino.0);
            kind::GONE
        }
        Record::Link { name, ino, kind: k } => {
            w.u64(ino.0).u8(k.dirent_type());
            put_name(&mut w, name);
            kind::LINK
        }
        Record::Unlink { name } => {
            put_name(&mut w, name);
            kind::UNLINK
        }
        Record::Truncate { size } => {
            w.u64(*size);
            kind::TRUNCATE
        }
        Record::Write { offset, data } => {
            assert!(data.len() <= WRITE_MAX, "a write record of {} bytes", data.len());
            w.u64(*offset).bytes(data);
            kind::WRITE
        }
        Record::Hole { offset, len } => {
            w.u64(*offset).u64(*len);
            kind::HOLE
        }
        Record::Symlink { target } => {
            w.bytes(target);
            kind::SYMLINK
        }
        Record::XattrSet { name, value } => {
            put_name(&mut w, name);
            w.bytes(value);
            kind::XATTR_SET
        }
        Record::XattrRemove { name } => {
            put_name(&mut w, name);
            kind::XATTR_REMOVE
        }
        Record::End(c) => {
            w.u64(c.records).u64(c.inodes).u64(c.gone).u64(c.data_bytes);
            kind::END
        }
    };
    let payload = w.into_inner();
    assert!(payload.len() <= MAX_PAYLOAD, "a record of {} bytes", payload.len());
    let mut out = Vec::with_capacity(FRAME_HEAD_LEN + payload.len() + FRAME_CRC_LEN);
    out.push(k);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&payload);
    let crc = crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Reads a frame's head: the payload length to read next (with the four
/// checksum bytes after it).
///
/// # Errors
/// Reserved bytes set, an unknown kind, or a length beyond [`MAX_PAYLOAD`].
pub fn frame_len(head: &[u8; FRAME_HEAD_LEN]) -> DecodeResult<usize> {
    if !(kind::HEADER..=kind::END).contains(&head[0]) {
        bad!("unknown record kind {}", head[0]);
    }
    if head[1..4] != [0, 0, 0] {
        bad!("reserved bytes of a record head are not zero");
    }
    let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    bounded(u64::from(len), "record payload byte", MAX_PAYLOAD)
}

/// Decodes one frame of a stream of `version` ([`check_prelude`]): `head`
/// as [`frame_len`] accepted it, then `rest`, the payload and its checksum.
///
/// # Errors
/// A checksum mismatch, or a payload that is not a valid record.
pub fn decode(version: u32, head: &[u8; FRAME_HEAD_LEN], rest: &[u8]) -> DecodeResult<Record> {
    let len = frame_len(head)?;
    if rest.len() != len + FRAME_CRC_LEN {
        bad!("record of {} bytes, its head says {}", rest.len(), len + FRAME_CRC_LEN);
    }
    let (payload, crc) = rest.split_at(len);
    let want = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let mut covered = Vec::with_capacity(FRAME_HEAD_LEN + len);
    covered.extend_from_slice(head);
    covered.extend_from_slice(payload);
    if crc32c(&covered) != want {
        bad!("record checksum mismatch (kind {})", head[0]);
    }
    let mut r = Reader::new(payload);
    let rec = match head[0] {
        kind::HEADER => {
            let source = r.array::<16>()?;
            let base = match r.u8()? {
                0 => None,
                1 => Some(get_identity(&mut r)?),
                b => bad!("header's base flag is {b}"),
            };
            let target = get_identity(&mut r)?;
            Record::Header(StreamHeader { source, base, target })
        }
        kind::INODE => Record::Inode(get_attrs(&mut r, version)?),
        kind::GONE => {
            let ino = InodeNo(r.u64()?);
            if ino.0 <= InodeNo::ROOT.0 {
                bad!("gone record for inode {ino}");
            }
            Record::Gone(ino)
        }
        kind::LINK => {
            let ino = InodeNo(r.u64()?);
            let Some(k) = FileKind::from_dirent_type(r.u8()?) else { bad!("link record of no known type") };
            if ino.0 == 0 {
                bad!("link record naming inode 0");
            }
            Record::Link { name: get_name(&mut r, NAME_MAX)?, ino, kind: k }
        }
        kind::UNLINK => Record::Unlink { name: get_name(&mut r, NAME_MAX)? },
        kind::TRUNCATE => {
            let size = r.u64()?;
            if size > crate::format::inode::MAX_FILE_SIZE {
                bad!("truncate to {size} bytes, beyond the largest file");
            }
            Record::Truncate { size }
        }
        kind::WRITE => {
            let offset = r.u64()?;
            let data = r.bytes(r.remaining())?.to_vec();
            if data.is_empty() || data.len() > WRITE_MAX {
                bad!("write record of {} bytes", data.len());
            }
            if offset.checked_add(data.len() as u64).is_none_or(|e| e > crate::format::inode::MAX_FILE_SIZE) {
                bad!("write record at {offset} ends beyond the largest file");
            }
            Record::Write { offset, data }
        }
        kind::HOLE => {
            let offset = r.u64()?;
            let len = r.u64()?;
            if len == 0 || offset.checked_add(len).is_none_or(|e| e > crate::format::inode::MAX_FILE_SIZE) {
                bad!("hole record at {offset} of {len} bytes");
            }
            Record::Hole { offset, len }
        }
        kind::SYMLINK => {
            let target = r.bytes(r.remaining())?.to_vec();
            if target.is_empty() || target.len() > 4095 {
                bad!("symlink record of {} bytes", target.len());
            }
            Record::Symlink { target }
        }
        kind::XATTR_SET => {
            let name = get_name(&mut r, NAME_MAX)?;
            Record::XattrSet { name, value: r.bytes(r.remaining())?.to_vec() }
        }
        kind::XATTR_REMOVE => Record::XattrRemove { name: get_name(&mut r, NAME_MAX)? },
        kind::END => {
            Record::End(StreamCounts { records: r.u64()?, inodes: r.u64()?, gone: r.u64()?, data_bytes: r.u64()? })
        }
        k => bad!("unknown record kind {k}"),
    };
    if r.remaining() != 0 {
        bad!("{} bytes follow a record of kind {}", r.remaining(), head[0]);
    }
    Ok(rec)
}

/// Root attribute naming the source snapshot a received tree is a copy of
/// (FORMAT.md 6.3).
pub const RECEIVED_XATTR: &[u8] = b"trusted.dualfs.received";
/// Root attribute naming the stream a receive is applying, until it ends:
/// a receive under way.
pub const RECEIVING_XATTR: &[u8] = b"trusted.dualfs.receiving";

/// A receive-under-way mark, read: the snapshot id its stream started
/// from, None for a full stream (from an empty volume).
///
/// # Errors
/// Not a mark dualfs writes.
pub fn mark_base(text: &[u8]) -> DecodeResult<Option<u64>> {
    let t = std::str::from_utf8(text).unwrap_or("");
    match t.split(' ').collect::<Vec<_>>().as_slice() {
        [_, _, _, "full"] => Ok(None),
        [_, _, _, "from", id, _] => match id.parse::<u64>() {
            Ok(id) => Ok(Some(id)),
            Err(_) => bad!("the receive mark {t:?} names no snapshot id"),
        },
        _ => bad!("the receive mark {t:?} is not one dualfs writes"),
    }
}

/// A receive-under-way mark in words.
#[must_use]
pub fn describe_mark(text: &[u8]) -> String {
    let t = String::from_utf8_lossy(text);
    match t.split(' ').collect::<Vec<_>>().as_slice() {
        [src, id, _, "full"] => format!("a full stream of snapshot id {id} of volume {src}"),
        [src, id, _, "from", base, _] => {
            format!("a stream of snapshot id {id} of volume {src}, from its snapshot id {base}")
        }
        _ => format!("{t:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Record> {
        let id = |n: u64, name: &str| SnapshotIdentity {
            id: n,
            checkpoint: 10 * n,
            created: Timestamp { sec: 1_700_000_000, nsec: 5 },
            name: name.into(),
        };
        vec![
            Record::Header(StreamHeader { source: [7; 16], base: Some(id(1, "a")), target: id(2, "b") }),
            Record::Header(StreamHeader { source: [7; 16], base: None, target: id(2, "b") }),
            Record::Inode(InodeAttrs {
                ino: InodeNo(12),
                generation: 3,
                mode: libc::S_IFREG | 0o644,
                nlink: 2,
                size: 5000,
                flags: crate::format::inode::FLAG_IMMUTABLE,
                project: 42,
                ..InodeAttrs::default()
            }),
            Record::Gone(InodeNo(9)),
            Record::Link { name: b"x".to_vec(), ino: InodeNo(12), kind: FileKind::Regular },
            Record::Unlink { name: b"old name".to_vec() },
            Record::Truncate { size: 4096 },
            Record::Write { offset: 4096, data: vec![0xab; 9000] },
            Record::Hole { offset: 0, len: 4096 },
            Record::Symlink { target: b"../t".to_vec() },
            Record::XattrSet { name: b"user.a".to_vec(), value: Vec::new() },
            Record::XattrRemove { name: b"user.b".to_vec() },
            Record::End(StreamCounts { records: 11, inodes: 1, gone: 1, data_bytes: 9000 }),
        ]
    }

    fn split(frame: &[u8]) -> ([u8; FRAME_HEAD_LEN], &[u8]) {
        let mut head = [0u8; FRAME_HEAD_LEN];
        head.copy_from_slice(&frame[..FRAME_HEAD_LEN]);
        (head, &frame[FRAME_HEAD_LEN..])
    }

    #[test]
    fn every_record_reads_back_what_was_written() {
        for rec in samples() {
            let frame = encode(&rec);
            let (head, rest) = split(&frame);
            assert_eq!(frame_len(&head).unwrap() + FRAME_CRC_LEN, rest.len());
            assert_eq!(decode(VERSION, &head, rest).unwrap(), rec);
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_is_refused() {
        for rec in samples() {
            let frame = encode(&rec);
            for i in 0..frame.len() {
                let mut bad = frame.clone();
                bad[i] ^= 0x10;
                let (head, rest) = split(&bad);
                let refused = frame_len(&head).is_err() || decode(VERSION, &head, rest).is_err();
                assert!(refused, "{rec:?} with byte {i} flipped was accepted");
            }
        }
    }

    #[test]
    fn a_truncated_record_is_refused() {
        for rec in samples() {
            let frame = encode(&rec);
            let (head, rest) = split(&frame);
            for cut in 0..rest.len() {
                assert!(decode(VERSION, &head, &rest[..cut]).is_err());
            }
        }
    }

    #[test]
    fn a_version_1_inode_record_reads_with_project_0_and_unknown_flags_are_refused() {
        let a = InodeAttrs { ino: InodeNo(5), mode: libc::S_IFDIR | 0o755, ..InodeAttrs::default() };
        let frame = encode(&Record::Inode(a.clone()));
        // Version 1's record is version 2's without the trailing project.
        let mut v1 = frame[..frame.len() - 8].to_vec();
        v1[4..8].copy_from_slice(&104u32.to_le_bytes());
        let crc = crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        let (head, rest) = split(&v1);
        assert_eq!(decode(1, &head, rest).unwrap(), Record::Inode(a.clone()));
        assert!(decode(2, &head, rest).is_err(), "a version 2 inode record carries its project");
        let odd = InodeAttrs { flags: 0x4000_0000, ..a };
        let frame = encode(&Record::Inode(odd));
        let (head, rest) = split(&frame);
        assert!(decode(VERSION, &head, rest).unwrap_err().0.contains("unknown flags"));
    }

    #[test]
    fn the_prelude_names_magic_and_version() {
        assert_eq!(check_prelude(&prelude()).unwrap(), VERSION);
        let mut p = prelude();
        p[8] = 1;
        assert_eq!(check_prelude(&p).unwrap(), 1);
        p[8] = 3;
        assert!(check_prelude(&p).unwrap_err().0.contains("version 3"));
        let mut p = prelude();
        p[0] = b'X';
        assert!(check_prelude(&p).is_err());
    }

    #[test]
    fn decoding_garbage_never_panics() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let bytes = seed.to_le_bytes();
            let mut head = [0u8; FRAME_HEAD_LEN];
            head[0] = bytes[0] % 14;
            head[4] = bytes[1] % 64;
            let rest: Vec<u8> = (0..usize::from(bytes[1] % 64) + 4).map(|i| bytes[i % 8]).collect();
            let _ = decode(VERSION, &head, &rest);
        }
    }
}
