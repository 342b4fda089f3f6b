//! Inode records: the variable-length form in which inodes are packed into
//! inode blocks.
//!
//! A record is a 136-byte fixed part, then a body (inline data, inline
//! extents, a B-tree root, or blob pointers) and an xattr area (inline pairs
//! or a B-tree root).

use super::codec::{DecodeResult, Reader, Writer, bad};
use crate::types::{DataBlock, GroupNo, InodeNo, NodeId, Timestamp};

/// Size of the fixed part of a record.
pub const FIXED_LEN: usize = 136;
/// Most extents kept in the inode before the map moves to a B-tree.
pub const MAX_INLINE_EXTENTS: usize = 16;
/// Encoded size of one extent.
pub const EXTENT_LEN: usize = 21;
/// Most encoded bytes of inline extended attributes.
pub const MAX_INLINE_XATTR_BYTES: usize = 512;
/// Most blob blocks a body may name (a 4095-byte symlink needs two).
pub const MAX_BLOB_NODES: usize = 32;
/// Largest size of a regular file (16 TiB): a larger one on disk is
/// corruption, refused by the decoder, not a file reads never finish.
pub const MAX_FILE_SIZE: u64 = 1 << 44;

/// Inode flag: writes are durable when they return (`chattr +S`).
pub const FLAG_SYNC: u32 = 0x8;
/// Inode flag: nothing changes the inode or its data, nor its names
/// (`chattr +i`).
pub const FLAG_IMMUTABLE: u32 = 0x10;
/// Inode flag: data only appended, never rewritten, truncated nor its
/// name removed (`chattr +a`).
pub const FLAG_APPEND: u32 = 0x20;
/// Inode flag: dump(8) skips the file (`chattr +d`).
pub const FLAG_NODUMP: u32 = 0x40;
/// Inode flag: reads never update the access time (`chattr +A`).
pub const FLAG_NOATIME: u32 = 0x80;
/// Inode flag: a directory's changes are durable when they return
/// (`chattr +D`).
pub const FLAG_DIRSYNC: u32 = 0x1_0000;
/// Inode flag: a directory's new entries take its project id (`chattr +P`).
pub const FLAG_PROJINHERIT: u32 = 0x2000_0000;
/// Every inode flag a record may carry (format 1.6, `INCOMPAT_INODE_FLAGS`):
/// the values of Linux's `FS_*_FL`, as FS_IOC_GETFLAGS shows them.
pub const KNOWN_FLAGS: u32 =
    FLAG_SYNC | FLAG_IMMUTABLE | FLAG_APPEND | FLAG_NODUMP | FLAG_NOATIME | FLAG_DIRSYNC | FLAG_PROJINHERIT;

/// Each flag with the letter `chattr` sets it by, in `lsattr`'s order.
pub const FLAG_LETTERS: [(u32, char); 7] = [
    (FLAG_SYNC, 'S'),
    (FLAG_IMMUTABLE, 'i'),
    (FLAG_APPEND, 'a'),
    (FLAG_NODUMP, 'd'),
    (FLAG_NOATIME, 'A'),
    (FLAG_DIRSYNC, 'D'),
    (FLAG_PROJINHERIT, 'P'),
];

/// `flags` as `chattr` letters ("iA"); unknown bits as hexadecimal after
/// them ("i+0x40000000"), empty for none.
#[must_use]
pub fn flag_letters(flags: u32) -> String {
    let mut s: String = FLAG_LETTERS.iter().filter(|(f, _)| flags & f != 0).map(|(_, c)| *c).collect();
    if flags & !KNOWN_FLAGS != 0 {
        s.push_str(&format!("+{:#x}", flags & !KNOWN_FLAGS));
    }
    s
}

/// The flags an inode of `kind` may carry, as ext4 masks them
/// (`ext4_mask_flags`): a directory all, a regular file all but dirsync
/// and project inheritance, any other kind nodump and noatime only.
#[must_use]
pub fn flags_for(kind: crate::types::FileKind) -> u32 {
    use crate::types::FileKind;
    match kind {
        FileKind::Directory => KNOWN_FLAGS,
        FileKind::Regular => KNOWN_FLAGS & !(FLAG_DIRSYNC | FLAG_PROJINHERIT),
        _ => FLAG_NODUMP | FLAG_NOATIME,
    }
}

/// Extent flag: allocated but never written (reads as zeros).
pub const EXTENT_UNWRITTEN: u8 = 1;

/// A run of file blocks mapped to consecutive data-device blocks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Extent {
    /// First file block.
    pub logical: u64,
    /// First data-device block.
    pub physical: DataBlock,
    /// Number of blocks (at least 1).
    pub len: u32,
    /// Allocated by fallocate and not yet written: reads as zeros.
    pub unwritten: bool,
}

impl Extent {
    /// One past the last file block.
    #[must_use]
    pub fn logical_end(&self) -> u64 {
        self.logical + u64::from(self.len)
    }

    /// Appends the 21-byte encoding.
    pub fn encode(&self, w: &mut Writer) {
        w.u64(self.logical).u64(self.physical.0).u32(self.len).u8(if self.unwritten { EXTENT_UNWRITTEN } else { 0 });
    }

    /// Reads one extent.
    ///
    /// # Errors
    /// Out of bytes, zero length, unknown flags, or overflow.
    pub fn decode(r: &mut Reader<'_>) -> DecodeResult<Extent> {
        let logical = r.u64()?;
        let physical = DataBlock(r.u64()?);
        let len = r.u32()?;
        let flags = r.u8()?;
        if len == 0 {
            bad!("extent at file block {logical} has length 0");
        }
        if flags & !EXTENT_UNWRITTEN != 0 {
            bad!("extent has unknown flags {flags:#x}");
        }
        if logical.checked_add(u64::from(len)).is_none() || physical.0.checked_add(u64::from(len)).is_none() {
            bad!("extent at file block {logical} overflows");
        }
        Ok(Extent { logical, physical, len, unwritten: flags & EXTENT_UNWRITTEN != 0 })
    }
}

/// The root of a per-inode B-tree.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TreeRoot {
    /// Node id of the root node.
    pub root: NodeId,
    /// Entries in the tree.
    pub count: u64,
}

/// What an inode's body holds.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub enum Body {
    /// Nothing: an empty file or directory, or a device node.
    #[default]
    Empty,
    /// The file's bytes, or a short symlink target.
    Inline(Vec<u8>),
    /// A regular file's extents, sorted, non-overlapping.
    Extents(Vec<Extent>),
    /// A B-tree: a directory's entries, or a large file's extents.
    Tree(TreeRoot),
    /// A small directory's entries, kept in the inode: the same keys and
    /// values as a leaf of its tree would hold, sorted by key.
    Entries(Vec<(u64, Vec<u8>)>),
    /// A long symlink target stored in blob blocks.
    Blob {
        /// Length of the value in bytes.
        len: u32,
        /// The blob blocks, in order.
        nodes: Vec<NodeId>,
    },
}

/// Where an inode's extended attributes live.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Xattrs {
    /// Name/value pairs kept in the record, sorted by name.
    Inline(Vec<(Vec<u8>, Vec<u8>)>),
    /// A B-tree of them.
    Tree(TreeRoot),
}

impl Default for Xattrs {
    fn default() -> Self {
        Xattrs::Inline(Vec::new())
    }
}

/// Encoded size of inline directory entries.
#[must_use]
pub fn inline_entries_len(entries: &[(u64, Vec<u8>)]) -> usize {
    2 + entries.iter().map(|(_, v)| 10 + v.len()).sum::<usize>()
}

/// Encoded size of an inline xattr list.
#[must_use]
pub fn inline_xattrs_len(pairs: &[(Vec<u8>, Vec<u8>)]) -> usize {
    2 + pairs.iter().map(|(n, v)| 3 + n.len() + v.len()).sum::<usize>()
}

/// An inode as stored.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct InodeRecord {
    /// Its number.
    pub ino: InodeNo,
    /// Generation of the number.
    pub generation: u32,
    /// File type and permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Hard links (directories: 2 + subdirectories).
    pub nlink: u32,
    /// Inode flags ([`KNOWN_FLAGS`]; 0 before format 1.6).
    pub flags: u32,
    /// Size in bytes.
    pub size: u64,
    /// Data blocks allocated to the file.
    pub blocks: u64,
    /// Last access.
    pub atime: Timestamp,
    /// Last modification of the contents.
    pub mtime: Timestamp,
    /// Last change of the inode.
    pub ctime: Timestamp,
    /// Creation.
    pub crtime: Timestamp,
    /// Device number of device nodes.
    pub rdev: u64,
    /// Data group this file allocates from (a directory: the group bound to it).
    pub group: GroupNo,
    /// A directory's parent (its `..`); 0 for other kinds.
    pub parent: InodeNo,
    /// The body.
    pub body: Body,
    /// The extended attributes.
    pub xattrs: Xattrs,
    /// Project id (FS_IOC_FSSETXATTR; 0 before format 1.6).
    pub project: u32,
}

const BODY_EMPTY: u8 = 0;
const BODY_INLINE: u8 = 1;
const BODY_EXTENTS: u8 = 2;
const BODY_TREE: u8 = 3;
const BODY_BLOB: u8 = 4;
const BODY_ENTRIES: u8 = 5;
const XATTR_INLINE: u8 = 0;
const XATTR_TREE: u8 = 1;

impl InodeRecord {
    /// Encoded size of the body.
    #[must_use]
    pub fn body_len(&self) -> usize {
        match &self.body {
            Body::Empty => 0,
            Body::Inline(d) => d.len(),
            Body::Extents(e) => e.len() * EXTENT_LEN,
            Body::Tree(_) => 16,
            Body::Blob { nodes, .. } => 6 + nodes.len() * 8,
            Body::Entries(e) => inline_entries_len(e),
        }
    }

    /// Encoded size of the xattr area.
    #[must_use]
    pub fn xattr_len(&self) -> usize {
        match &self.xattrs {
            Xattrs::Inline(p) if p.is_empty() => 0,
            Xattrs::Inline(p) => inline_xattrs_len(p),
            Xattrs::Tree(_) => 16,
        }
    }

    /// Encoded size of the whole record.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        FIXED_LEN + self.body_len() + self.xattr_len()
    }

    /// Appends the encoding.
    pub fn encode(&self, w: &mut Writer) {
        let start = w.len();
        let body_kind = match &self.body {
            Body::Empty => BODY_EMPTY,
            Body::Inline(_) => BODY_INLINE,
            Body::Extents(_) => BODY_EXTENTS,
            Body::Tree(_) => BODY_TREE,
            Body::Blob { .. } => BODY_BLOB,
            Body::Entries(_) => BODY_ENTRIES,
        };
        let xattr_kind = match &self.xattrs {
            Xattrs::Inline(_) => XATTR_INLINE,
            Xattrs::Tree(_) => XATTR_TREE,
        };
        w.u64(self.ino.0)
            .u32(self.generation)
            .u32(self.mode)
            .u32(self.uid)
            .u32(self.gid)
            .u32(self.nlink)
            .u32(self.flags)
            .u64(self.size)
            .u64(self.blocks)
            .timestamp(self.atime)
            .timestamp(self.mtime)
            .timestamp(self.ctime)
            .timestamp(self.crtime)
            .u64(self.rdev)
            .u32(self.group.0)
            .u64(self.parent.0)
            .u8(body_kind)
            .u8(xattr_kind)
            .u16(self.body_len() as u16)
            .u16(self.xattr_len() as u16)
            .u32(self.project);
        w.zeros(FIXED_LEN - (w.len() - start));
        match &self.body {
            Body::Empty => {}
            Body::Inline(d) => {
                w.bytes(d);
            }
            Body::Extents(es) => es.iter().for_each(|e| e.encode(w)),
            Body::Tree(t) => {
                w.u64(t.root.0).u64(t.count);
            }
            Body::Blob { len, nodes } => {
                w.u32(*len).u16(nodes.len() as u16);
                nodes.iter().for_each(|n| {
                    w.u64(n.0);
                });
            }
            Body::Entries(e) => {
                w.u16(e.len() as u16);
                for (k, v) in e {
                    w.u64(*k).u16(v.len() as u16).bytes(v);
                }
            }
        }
        match &self.xattrs {
            Xattrs::Inline(p) if p.is_empty() => {}
            Xattrs::Inline(p) => {
                w.u16(p.len() as u16);
                for (n, v) in p {
                    w.u8(n.len() as u8).u16(v.len() as u16).bytes(n).bytes(v);
                }
            }
            Xattrs::Tree(t) => {
                w.u64(t.root.0).u64(t.count);
            }
        }
        debug_assert_eq!(w.len() - start, self.encoded_len());
    }

    /// Decodes one record occupying all of `bytes`.
    ///
    /// # Errors
    /// Any field out of range or inconsistent with its length.
    pub fn decode(bytes: &[u8]) -> DecodeResult<InodeRecord> {
        decode_record(bytes, None)
    }

    /// Decodes a record for repair: what the strict decoder refuses but a
    /// record can do without is set right and said (a size above the
    /// maximum, unknown flags, reserved bytes, extents, inline entries or
    /// inline xattrs out of order or malformed: those are dropped), one
    /// sentence each in the second value. What leaves nothing to go on (an
    /// unknown file type, lengths that do not add up) is still an error.
    ///
    /// # Errors
    /// As [`InodeRecord::decode`], for what cannot be set right.
    pub fn decode_salvaging(bytes: &[u8]) -> DecodeResult<(InodeRecord, Vec<String>)> {
        let mut notes = Vec::new();
        let rec = decode_record(bytes, Some(&mut notes))?;
        Ok((rec, notes))
    }
}

/// The one decoder of records: strict when `salvage` is None, otherwise
/// setting right what it can and noting it there.
fn decode_record(bytes: &[u8], mut salvage: Option<&mut Vec<String>>) -> DecodeResult<InodeRecord> {
    let mut r = Reader::new(bytes);
    let ino = InodeNo(r.u64()?);
    let generation = r.u32()?;
    let mode = r.u32()?;
    let uid = r.u32()?;
    let gid = r.u32()?;
    let nlink = r.u32()?;
    let mut flags = r.u32()?;
    let mut size = r.u64()?;
    if mode & 0o170_000 == 0o100_000 && size > MAX_FILE_SIZE {
        match salvage.as_deref_mut() {
            None => bad!("inode {ino}: size {size} is above the maximum of {MAX_FILE_SIZE}"),
            Some(notes) => {
                notes.push(format!("size {size} is above the maximum of {MAX_FILE_SIZE}"));
                size = MAX_FILE_SIZE;
            }
        }
    }
    let blocks = r.u64()?;
    let atime = r.timestamp()?;
    let mtime = r.timestamp()?;
    let ctime = r.timestamp()?;
    let crtime = r.timestamp()?;
    let rdev = r.u64()?;
    let group = GroupNo(r.u32()?);
    let parent = InodeNo(r.u64()?);
    let body_kind = r.u8()?;
    let xattr_kind = r.u8()?;
    let body_len = usize::from(r.u16()?);
    let xattr_len = usize::from(r.u16()?);
    let project = r.u32()?;
    match salvage.as_deref_mut() {
        None => r.reserved(FIXED_LEN - r.position())?,
        Some(notes) => {
            if r.bytes(FIXED_LEN - r.position())?.iter().any(|&b| b != 0) {
                notes.push("reserved bytes of the record are not zero".into());
            }
        }
    }
    if ino.0 == 0 {
        bad!("inode number 0");
    }
    if crate::types::FileKind::from_mode(mode).is_none() {
        bad!("inode {ino} has an unknown file type in mode {mode:#o}");
    }
    if flags & !KNOWN_FLAGS != 0 {
        match salvage.as_deref_mut() {
            None => bad!("inode {ino} has unknown flags {flags:#x}"),
            Some(notes) => {
                notes.push(format!("unknown flags {:#x}", flags & !KNOWN_FLAGS));
                flags &= KNOWN_FLAGS;
            }
        }
    }
    if r.remaining() != body_len + xattr_len {
        bad!("inode {ino}: body {body_len} + xattrs {xattr_len} bytes, but {} remain", r.remaining());
    }
    let body = decode_body(&mut Reader::new(r.bytes(body_len)?), body_kind, body_len, ino, salvage.as_deref_mut())?;
    let xattrs = decode_xattrs(&mut Reader::new(r.bytes(xattr_len)?), xattr_kind, xattr_len, ino, salvage)?;
    Ok(InodeRecord {
        ino,
        generation,
        mode,
        uid,
        gid,
        nlink,
        flags,
        size,
        blocks,
        atime,
        mtime,
        ctime,
        crtime,
        rdev,
        group,
        parent,
        body,
        xattrs,
        project,
    })
}

fn decode_tree_root(r: &mut Reader<'_>, ino: InodeNo) -> DecodeResult<TreeRoot> {
    let root = NodeId(r.u64()?);
    let count = r.u64()?;
    if root.0 == 0 {
        bad!("inode {ino} has a B-tree with node id 0");
    }
    Ok(TreeRoot { root, count })
}

fn decode_body(
    r: &mut Reader<'_>,
    kind: u8,
    len: usize,
    ino: InodeNo,
    mut salvage: Option<&mut Vec<String>>,
) -> DecodeResult<Body> {
    let body = match kind {
        BODY_EMPTY => Body::Empty,
        BODY_INLINE => Body::Inline(r.bytes(len)?.to_vec()),
        BODY_EXTENTS => {
            if !len.is_multiple_of(EXTENT_LEN) || len / EXTENT_LEN > MAX_INLINE_EXTENTS {
                bad!("inode {ino}: {len} bytes of inline extents");
            }
            let mut es: Vec<Extent> = Vec::with_capacity(len / EXTENT_LEN);
            for _ in 0..len / EXTENT_LEN {
                let raw = r.bytes(EXTENT_LEN)?;
                let e = Extent::decode(&mut Reader::new(raw)).and_then(|e| {
                    if es.last().is_some_and(|p| p.logical_end() > e.logical) {
                        bad!("inode {ino}: extents out of order or overlapping at file block {}", e.logical);
                    }
                    Ok(e)
                });
                match (e, salvage.as_deref_mut()) {
                    (Ok(e), _) => es.push(e),
                    (Err(e), None) => return Err(e),
                    (Err(e), Some(notes)) => notes.push(format!("extent dropped: {}", e.0)),
                }
            }
            Body::Extents(es)
        }
        BODY_TREE => Body::Tree(decode_tree_root(r, ino)?),
        BODY_BLOB => {
            let vlen = r.u32()?;
            let n = usize::from(r.u16()?);
            if n > MAX_BLOB_NODES {
                bad!("inode {ino}: {n} blob blocks");
            }
            let mut nodes = Vec::with_capacity(n);
            for _ in 0..n {
                nodes.push(NodeId(r.u64()?));
            }
            Body::Blob { len: vlen, nodes }
        }
        BODY_ENTRIES => {
            let n = usize::from(r.u16()?);
            let mut e: Vec<(u64, Vec<u8>)> = Vec::with_capacity(n.min(len / 10));
            for _ in 0..n {
                let k = r.u64()?;
                let vl = usize::from(r.u16()?);
                let v = r.bytes(vl)?.to_vec();
                if e.last().is_some_and(|(p, _)| *p >= k) {
                    match salvage.as_deref_mut() {
                        None => bad!("inode {ino}: inline entries out of order at {k:#x}"),
                        Some(notes) => {
                            notes.push(format!("inline directory entry at {k:#x} out of order, dropped"));
                            continue;
                        }
                    }
                }
                e.push((k, v));
            }
            Body::Entries(e)
        }
        other => bad!("inode {ino} has unknown body kind {other}"),
    };
    if r.remaining() != 0 {
        bad!("inode {ino}: body has {} trailing bytes", r.remaining());
    }
    Ok(body)
}

fn decode_xattrs(
    r: &mut Reader<'_>,
    kind: u8,
    len: usize,
    ino: InodeNo,
    mut salvage: Option<&mut Vec<String>>,
) -> DecodeResult<Xattrs> {
    let x = match kind {
        XATTR_INLINE if len == 0 => Xattrs::Inline(Vec::new()),
        XATTR_INLINE => {
            if len > MAX_INLINE_XATTR_BYTES {
                bad!("inode {ino}: {len} bytes of inline xattrs");
            }
            let n = usize::from(r.u16()?);
            let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(n.min(len));
            for _ in 0..n {
                let nl = usize::from(r.u8()?);
                let vl = usize::from(r.u16()?);
                let name = r.bytes(nl)?.to_vec();
                let value = r.bytes(vl)?.to_vec();
                if name.is_empty() || pairs.last().is_some_and(|(p, _)| *p >= name) {
                    match salvage.as_deref_mut() {
                        None => bad!("inode {ino}: inline xattr names empty or out of order"),
                        Some(notes) => {
                            notes.push(format!(
                                "inline xattr {:?} empty or out of order, dropped",
                                String::from_utf8_lossy(&name)
                            ));
                            continue;
                        }
                    }
                }
                pairs.push((name, value));
            }
            Xattrs::Inline(pairs)
        }
        XATTR_TREE => Xattrs::Tree(decode_tree_root(r, ino)?),
        other => bad!("inode {ino} has unknown xattr kind {other}"),
    };
    if r.remaining() != 0 {
        bad!("inode {ino}: xattr area has {} trailing bytes", r.remaining());
    }
    Ok(x)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample(ino: u64) -> InodeRecord {
        InodeRecord {
            ino: InodeNo(ino),
            generation: 4,
            mode: libc::S_IFREG | 0o644,
            uid: 1000,
            gid: 100,
            nlink: 1,
            flags: 0,
            size: 12345,
            blocks: 4,
            atime: Timestamp { sec: 1, nsec: 2 },
            mtime: Timestamp { sec: 3, nsec: 4 },
            ctime: Timestamp { sec: 5, nsec: 6 },
            crtime: Timestamp { sec: -7, nsec: 8 },
            rdev: 0,
            group: GroupNo(2),
            parent: InodeNo(0),
            body: Body::Extents(vec![
                Extent { logical: 0, physical: DataBlock(100), len: 3, unwritten: false },
                Extent { logical: 5, physical: DataBlock(200), len: 1, unwritten: true },
            ]),
            xattrs: Xattrs::Inline(vec![(b"user.a".to_vec(), b"1".to_vec()), (b"user.b".to_vec(), vec![])]),
            project: 0,
        }
    }

    fn enc(rec: &InodeRecord) -> Vec<u8> {
        let mut w = Writer::new();
        rec.encode(&mut w);
        w.into_inner()
    }

    #[test]
    fn every_body_kind_round_trips() {
        let mut bodies = vec![
            Body::Empty,
            Body::Inline(b"hello".to_vec()),
            Body::Tree(TreeRoot { root: NodeId(9), count: 1000 }),
            Body::Blob { len: 5000, nodes: vec![NodeId(1), NodeId(2)] },
            Body::Entries(vec![(65536, b"entry".to_vec()), (131_072, vec![])]),
        ];
        bodies.push(sample(1).body);
        for body in bodies {
            for xattrs in [Xattrs::default(), sample(1).xattrs, Xattrs::Tree(TreeRoot { root: NodeId(3), count: 2 })] {
                let rec = InodeRecord { body: body.clone(), xattrs, ..sample(7) };
                let b = enc(&rec);
                assert_eq!(b.len(), rec.encoded_len());
                assert_eq!(InodeRecord::decode(&b).unwrap(), rec);
            }
        }
    }

    #[test]
    fn truncation_is_an_error() {
        let b = enc(&sample(3));
        for n in 0..b.len() {
            assert!(InodeRecord::decode(&b[..n]).is_err(), "prefix {n}");
        }
    }

    #[test]
    fn salvaging_sets_right_what_the_strict_decoder_refuses() {
        let mut rec = sample(3);
        rec.size = u64::MAX - 7;
        rec.body = Body::Extents(vec![
            Extent { logical: 0, physical: DataBlock(1), len: 4, unwritten: false },
            Extent { logical: 3, physical: DataBlock(9), len: 1, unwritten: false },
            Extent { logical: 9, physical: DataBlock(20), len: 1, unwritten: false },
        ]);
        let b = enc(&rec);
        assert!(InodeRecord::decode(&b).is_err());
        let (got, notes) = InodeRecord::decode_salvaging(&b).unwrap();
        assert_eq!(got.size, MAX_FILE_SIZE);
        assert_eq!(
            got.body,
            Body::Extents(vec![
                Extent { logical: 0, physical: DataBlock(1), len: 4, unwritten: false },
                Extent { logical: 9, physical: DataBlock(20), len: 1, unwritten: false },
            ])
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
        let (same, none) = InodeRecord::decode_salvaging(&enc(&sample(4))).unwrap();
        assert_eq!((same, none.len()), (sample(4), 0));
    }

    #[test]
    fn flags_read_as_chattr_letters() {
        assert_eq!(flag_letters(0), "");
        assert_eq!(flag_letters(KNOWN_FLAGS), "SiadADP");
        assert_eq!(flag_letters(FLAG_NOATIME | FLAG_IMMUTABLE | 0x4000_0000), "iA+0x40000000");
    }

    #[test]
    fn known_flags_and_a_project_round_trip_and_unknown_flags_are_refused() {
        let rec = InodeRecord { flags: KNOWN_FLAGS, project: 0xdead_beef, ..sample(3) };
        assert_eq!(InodeRecord::decode(&enc(&rec)).unwrap(), rec);
        let odd = InodeRecord { flags: FLAG_IMMUTABLE | 0x4000_0000, ..sample(3) };
        assert!(InodeRecord::decode(&enc(&odd)).unwrap_err().0.contains("unknown flags"));
        let (got, notes) = InodeRecord::decode_salvaging(&enc(&odd)).unwrap();
        assert_eq!((got.flags, notes.len()), (FLAG_IMMUTABLE, 1), "the unknown bit dropped, the rest kept");
    }

    #[test]
    fn overlapping_extents_are_refused() {
        let mut rec = sample(3);
        rec.body = Body::Extents(vec![
            Extent { logical: 0, physical: DataBlock(1), len: 4, unwritten: false },
            Extent { logical: 3, physical: DataBlock(9), len: 1, unwritten: false },
        ]);
        assert!(InodeRecord::decode(&enc(&rec)).unwrap_err().0.contains("overlapping"));
    }
}
