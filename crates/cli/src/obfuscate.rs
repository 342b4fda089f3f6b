//! What `dualfs metadump` removes from a meta-data device's blocks by
//! default: names become pseudo-random names of the same length, symlink
//! targets the same (component by component, keeping `/`, `.` and `..`),
//! inline file data and xattr values zeros, snapshot and tree names
//! other names of the same length (valid snapshot names). Blocks are edited in place,
//! byte by byte, so that every length, offset and key stays as it was;
//! each rewritten block gets its CRC again (the descriptors and
//! checkpoints that cover those CRCs are resealed by [`crate::metadump`]).
//!
//! The parsing here is lenient and never panics: a record or entry that
//! does not parse is left alone, a block whose CRC fails is not resealed
//! (its payload is dropped: it may hold names, and its damage stays).

use std::collections::{HashMap, HashSet};

use dualfs_engine::format::block::{BlockKind, HEADER_LEN, PAYLOAD_LEN};
use dualfs_engine::format::checksum;
use dualfs_engine::format::descriptor::PsKind;
use dualfs_engine::format::inode::EXTENT_LEN;
use dualfs_engine::format::name::hash_position;
use dualfs_engine::format::node::TreeKind;
use dualfs_engine::format::raw::{
    self, BLOB_COUNT_AT, BLOB_IDS_AT, BODY_BLOB, BODY_ENTRIES, BODY_INLINE, DESC_STREAM_AT, DIRENT_NAME_AT, FSYNC_DATA,
    FSYNC_DATA_CRC_AT, FSYNC_DATA_LEN, FSYNC_INODE, FSYNC_INODE_LEN_AT, FSYNC_INODE_RECORD_AT, FSYNC_LINK,
    FSYNC_LINK_FIXED, FSYNC_LINK_NAME_LEN_AT, FSYNC_RANGE, FSYNC_RANGE_COUNT_AT, FSYNC_RANGE_FIXED, FSYNC_WRITTEN,
    FSYNC_WRITTEN_LEN, INODE_BODY_KIND_AT, INODE_BODY_LEN_AT, INODE_FIXED_LEN, INODE_MODE_AT, INODE_XATTR_KIND_AT,
    INODE_XATTR_LEN_AT, LEAF_ENTRY_FIXED, NODE_COUNT_AT, NODE_ENTRIES_AT, NODE_TREE_AT, STREAM_BLOCKS_AT,
    STREAM_FIXED_LEN, STREAM_KIND_AT, STREAM_RECORDS_AT, XATTR_VALUE_INLINE, XATTRS_INLINE, u32_at, u64_at,
};
use dualfs_engine::format::snapshot::{DEFAULT_TREE, bad_name};

/// Block kinds this module rewrites or knows to hold no names; any other
/// kind's payload is dropped.
const KNOWN_KINDS: [BlockKind; 8] = [
    BlockKind::Descriptor,
    BlockKind::Inodes,
    BlockKind::Node,
    BlockKind::Blob,
    BlockKind::IFileTable,
    BlockKind::IFileIndex,
    BlockKind::SnapshotList,
    BlockKind::Snapshot,
];
/// Partial segment kinds whose descriptors hold no names.
const KNOWN_DESCRIPTORS: [PsKind; 2] = [PsKind::Normal, PsKind::Checkpoint];
/// Descriptor blocks one partial segment may have (a segment's blocks).
const MAX_DESCRIPTOR_BLOCKS: u64 = 65_536;

/// A symlink's file type in a mode (POSIX).
const S_IFMT: u32 = 0o170_000;
const S_IFLNK: u32 = 0o120_000;

/// Names kept as they are: they carry no one's information and tools
/// look for them.
const KEPT_NAMES: [&[u8]; 3] = [b".", b"..", b"lost+found"];
/// The live tree's name while no list names another: `-o clone=main`
/// makes it live again, so it stays.
const KEPT_TREE: &[u8] = DEFAULT_TREE.as_bytes();
/// Xattrs kept whole, value included: POSIX ACLs hold only ids and
/// permission bits, and a zeroed ACL would make every access to its file
/// an error on the restored volume.
const KEPT_XATTRS: [&[u8]; 2] = [b"system.posix_acl_access", b"system.posix_acl_default"];

/// Characters of obfuscated names, while the name's length has room.
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// What happened to one block.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// Nothing to change.
    Kept,
    /// Rewritten and resealed: its stored CRC went from `.0` to `.1`.
    Resealed(u32, u32),
    /// Its CRC failed (or its kind is unknown): payload dropped, header
    /// kept, not resealed, so that it reads as damaged as before.
    Dropped,
    /// Not a meta-data block: cleared to zeros.
    Cleared,
}

/// Counts for the summary.
#[derive(Default, Debug)]
pub struct Counts {
    /// Directory entry names replaced (every occurrence, old blocks too).
    pub names: u64,
    /// Xattr names replaced.
    pub xattrs: u64,
    /// Symlink targets replaced.
    pub symlinks: u64,
    /// Snapshot and tree names replaced (records and the live tree's).
    pub trees: u64,
    /// Inline file contents, xattr values and value blobs zeroed.
    pub zeroed: u64,
    /// Blocks whose CRC failed, payload dropped.
    pub damaged: u64,
    /// Blocks of kinds this version does not know, payload dropped.
    pub unknown: u64,
    /// Blocks that were not meta-data blocks, cleared.
    pub cleared: u64,
    /// Raw data copies of fsync partial segments zeroed.
    pub copies: u64,
}

/// The replacement names of one dump: the same name always gets the same
/// replacement, and two names never share one.
pub struct Obfuscator {
    key: [u8; 16],
    names: HashMap<Vec<u8>, Vec<u8>>,
    used: HashSet<Vec<u8>>,
    /// Node ids of blobs that hold symlink targets (the rest hold xattr
    /// values, which are zeroed).
    symlink_blobs: HashSet<u64>,
    /// Continuation descriptor blocks (aux > 0) of sound normal and
    /// checkpoint descriptors: kept. Any other descriptor block that is not
    /// a sound normal or checkpoint first block is dropped unless the dump
    /// rewrote it whole (an fsync descriptor): its records may hold names.
    plain: HashSet<u64>,
    /// Raw data blocks of fsync partial segments, with the sequence number
    /// of the descriptor that lists them: zeroed, unless a newer meta-data
    /// block has taken the place since.
    raw: HashMap<u64, u64>,
    /// What was done, for the summary.
    pub counts: Counts,
}

/// A length or count stored as a `u16`.
fn len_at(b: &[u8], at: usize) -> Option<usize> {
    raw::u16_at(b, at).map(usize::from)
}

/// Whether a first descriptor block's stream is of one of `kinds`.
fn stream_of(payload: &[u8], kinds: &[PsKind]) -> bool {
    payload.get(DESC_STREAM_AT + STREAM_KIND_AT).is_some_and(|k| kinds.iter().any(|p| p.code() == *k))
}

impl Obfuscator {
    /// A fresh obfuscator; `key` (random, never stored) makes the
    /// replacements of one dump unpredictable from another's.
    #[must_use]
    pub fn new(key: [u8; 16]) -> Obfuscator {
        Obfuscator {
            key,
            names: HashMap::new(),
            // No name becomes `main`, which a tree keeps.
            used: HashSet::from([KEPT_TREE.to_vec()]),
            symlink_blobs: HashSet::new(),
            plain: HashSet::new(),
            raw: HashMap::new(),
            counts: Counts::default(),
        }
    }

    /// First pass: learns from an inode block which blobs hold symlink
    /// targets, from a normal or checkpoint descriptor which continuation
    /// blocks to keep, and from an fsync descriptor where its raw data
    /// blocks are. Blocks whose CRC fails teach nothing.
    pub fn learn(&mut self, address: u64, block: &[u8]) {
        let Some(h) = raw::header(block) else { return };
        if !raw::verifies(block) {
            return;
        }
        let Some(payload) = raw::payload(block, &h) else { return };
        if h.is(BlockKind::Descriptor) {
            // The first descriptor block (aux 0) carries the stream's kind
            // and, in its header name, the number of descriptor blocks.
            if h.aux != 0 {
                return;
            }
            let n = h.name.clamp(1, MAX_DESCRIPTOR_BLOCKS);
            if stream_of(payload, &KNOWN_DESCRIPTORS) {
                self.plain.extend(address + 1..address + n);
            } else if stream_of(payload, &[PsKind::Fsync]) {
                let copies = u64::from(u32_at(payload, DESC_STREAM_AT + STREAM_BLOCKS_AT).unwrap_or(0))
                    .min(MAX_DESCRIPTOR_BLOCKS);
                let seq = h.seq;
                for a in address + n..address + n + copies {
                    let s = self.raw.entry(a).or_insert(seq);
                    *s = (*s).max(seq);
                }
            }
            return;
        }
        if !h.is(BlockKind::Inodes) {
            return;
        }
        for r in raw::inode_records(payload) {
            let rec = &payload[r];
            let is_link = u32_at(rec, INODE_MODE_AT).is_some_and(|m| m & S_IFMT == S_IFLNK);
            if !is_link || rec.get(INODE_BODY_KIND_AT) != Some(&BODY_BLOB) {
                continue;
            }
            let Some(body_len) = len_at(rec, INODE_BODY_LEN_AT) else { continue };
            let Some(body) = rec.get(INODE_FIXED_LEN..INODE_FIXED_LEN + body_len) else { continue };
            let n = len_at(body, BLOB_COUNT_AT).unwrap_or(0);
            for i in 0..n {
                if let Some(id) = u64_at(body, BLOB_IDS_AT + 8 * i) {
                    self.symlink_blobs.insert(id);
                }
            }
        }
    }

    /// The replacement of a name: same length, never `.`, `..`,
    /// `lost+found`, itself or another name's replacement.
    pub fn name(&mut self, name: &[u8]) -> Vec<u8> {
        if name.is_empty() || KEPT_NAMES.contains(&name) {
            return name.to_vec();
        }
        if let Some(n) = self.names.get(name) {
            return n.clone();
        }
        let mut chosen = None;
        for attempt in 0u32..2000 {
            let mut seed_input = name.to_vec();
            seed_input.extend_from_slice(&attempt.to_le_bytes());
            let mut state = hash_position(&self.key, &seed_input);
            let candidate: Vec<u8> = (0..name.len())
                .map(|_| {
                    state = splitmix(state);
                    // Short names run out of the alphabet's combinations:
                    // then any byte a name may hold but '/' and NUL.
                    if attempt < 100 {
                        ALPHABET[(state % ALPHABET.len() as u64) as usize]
                    } else {
                        let b = (state % 254) as u8 + 1;
                        if b == b'/' { 0xff } else { b }
                    }
                })
                .collect();
            if candidate != name && !KEPT_NAMES.contains(&candidate.as_slice()) && !self.used.contains(&candidate) {
                chosen = Some(candidate);
                break;
            }
        }
        // Every name of this length is taken (a directory of all 1-byte
        // names): the name stays as it was.
        let chosen = chosen.unwrap_or_else(|| name.to_vec());
        self.used.insert(chosen.clone());
        self.names.insert(name.to_vec(), chosen.clone());
        chosen
    }

    /// A snapshot's or tree's name replaced in place, by the same
    /// replacement as everywhere (a clone's name in its record and as the
    /// live tree's name stays one tree), when that replacement is a name a
    /// snapshot may have; `main` stays. Whether it changed.
    fn tree(&mut self, name: &mut [u8]) -> bool {
        if name == KEPT_TREE {
            return false;
        }
        let n = self.name(name);
        let valid = std::str::from_utf8(&n).is_ok_and(|n| bad_name(n).is_none() && n != DEFAULT_TREE);
        if !valid || n == name {
            return false;
        }
        name.copy_from_slice(&n);
        self.counts.trees += 1;
        true
    }

    /// An xattr name's replacement: the namespace (through the first '.')
    /// stays, so that the kernel still knows what the attribute is.
    fn xattr_name(&mut self, name: &[u8]) -> Vec<u8> {
        let cut = name.iter().position(|&b| b == b'.').map_or(0, |i| i + 1);
        let mut out = name[..cut].to_vec();
        out.extend(self.name(&name[cut..]));
        out
    }

    /// A symlink target's replacement, component by component.
    fn path(&mut self, target: &mut [u8]) {
        let mut start = 0;
        while start <= target.len() {
            let end = target[start..].iter().position(|&b| b == b'/').map_or(target.len(), |i| start + i);
            if end > start {
                let n = self.name(&target[start..end]);
                target[start..end].copy_from_slice(&n);
            }
            start = end + 1;
        }
    }

    /// Rewrites one block of the meta-data device (not blocks 0–2: the
    /// superblock and checkpoints are handled by the dump).
    pub fn rewrite(&mut self, address: u64, block: &mut [u8]) -> Outcome {
        // A meta-data block written after the fsync partial segment (its
        // place reused) is the volume's; anything else there is a file's
        // data, whatever it looks like.
        if self.is_copy(address, block) {
            if block.iter().all(|&b| b == 0) {
                return Outcome::Kept;
            }
            block.fill(0);
            self.counts.copies += 1;
            return Outcome::Cleared;
        }
        let Some(h) = raw::header(block) else {
            if block.iter().all(|&b| b == 0) {
                return Outcome::Kept;
            }
            // No meta-data block lives here: whatever it is (an old
            // device's contents, garbage) it is not the volume's.
            block.fill(0);
            self.counts.cleared += 1;
            return Outcome::Cleared;
        };
        let plain_descriptor = !h.is(BlockKind::Descriptor)
            || if h.aux == 0 {
                block.get(HEADER_LEN..).is_some_and(|p| stream_of(p, &KNOWN_DESCRIPTORS))
            } else {
                self.plain.contains(&address)
            };
        let known = KNOWN_KINDS.iter().any(|k| h.is(*k)) && plain_descriptor;
        if !raw::verifies(block) || !known {
            block[HEADER_LEN..].fill(0);
            if known {
                self.counts.damaged += 1;
            } else {
                self.counts.unknown += 1;
            }
            return Outcome::Dropped;
        }
        let old = raw::stored_crc(block).unwrap_or(0);
        let (level, node_id) = (h.aux, h.name);
        let Some(payload) = raw::payload_mut(block, &h) else { return Outcome::Kept };
        let changed = match BlockKind::from_code(h.kind) {
            Some(BlockKind::Inodes) => {
                let mut any = false;
                for r in raw::inode_records(payload) {
                    any |= self.record(&mut payload[r]);
                }
                any
            }
            Some(BlockKind::Node) if level == 0 => self.leaf(payload),
            Some(BlockKind::Snapshot) => raw::snapshot_name(payload).is_some_and(|r| self.tree(&mut payload[r])),
            Some(BlockKind::SnapshotList) => raw::live_tree_name(payload).is_some_and(|r| self.tree(&mut payload[r])),
            Some(BlockKind::Blob) if !payload.is_empty() => {
                if self.symlink_blobs.contains(&node_id) {
                    self.path(payload);
                    self.counts.symlinks += 1;
                } else {
                    payload.fill(0);
                    self.counts.zeroed += 1;
                }
                true
            }
            _ => false,
        };
        if !changed {
            return Outcome::Kept;
        }
        raw::reseal(block);
        let new = raw::stored_crc(block).unwrap_or(0);
        if new == old { Outcome::Kept } else { Outcome::Resealed(old, new) }
    }

    /// Edits an fsync descriptor's stream (FORMAT.md 3.4.8) in place,
    /// lengths unchanged: `Link` names as directory entries, `Inode`
    /// records as in inode blocks, and each `Data` record's `crc` set to
    /// `zero_crc` (its block is zeroed by the dump) where it matched the
    /// block's old checksum (`old_copies[i]`, if the block was readable).
    /// Returns the `Data` records' old checksums; `None` when the records
    /// do not parse: the caller drops the stream.
    pub fn fsync_stream(&mut self, stream: &mut [u8], old_copies: &[u32], zero_crc: u32) -> Option<Vec<u32>> {
        let copies = u32_at(stream, STREAM_BLOCKS_AT)? as usize;
        let n_records = u32_at(stream, STREAM_RECORDS_AT)? as usize;
        let mut at = STREAM_FIXED_LEN;
        let mut data = 0;
        let mut wanted = Vec::new();
        for _ in 0..n_records {
            let len = match *stream.get(at)? {
                FSYNC_INODE => {
                    let len = len_at(stream, at + FSYNC_INODE_LEN_AT)?;
                    let start = at + FSYNC_INODE_RECORD_AT;
                    self.record(stream.get_mut(start..start + len)?);
                    FSYNC_INODE_RECORD_AT + len
                }
                FSYNC_RANGE => FSYNC_RANGE_FIXED + EXTENT_LEN * len_at(stream, at + FSYNC_RANGE_COUNT_AT)?,
                FSYNC_LINK => {
                    let name_len = usize::from(*stream.get(at + FSYNC_LINK_NAME_LEN_AT)?);
                    let start = at + FSYNC_LINK_FIXED;
                    let name = stream.get_mut(start..start + name_len)?;
                    let n = self.name(name);
                    name.copy_from_slice(&n);
                    self.counts.names += 1;
                    FSYNC_LINK_FIXED + name_len
                }
                FSYNC_DATA => {
                    let crc = u32_at(stream, at + FSYNC_DATA_CRC_AT)?;
                    wanted.push(crc);
                    if old_copies.get(data) == Some(&crc) {
                        raw::put_u32(stream, at + FSYNC_DATA_CRC_AT, zero_crc);
                    }
                    data += 1;
                    FSYNC_DATA_LEN
                }
                FSYNC_WRITTEN => FSYNC_WRITTEN_LEN,
                _ => return None,
            };
            at += len;
        }
        (at == stream.len() && data == copies).then_some(wanted)
    }

    /// Whether the block at `address` is a raw data copy of an fsync
    /// partial segment (zeroed by [`Obfuscator::rewrite`]).
    #[must_use]
    pub fn is_copy(&self, address: u64, block: &[u8]) -> bool {
        self.raw
            .get(&address)
            .is_some_and(|&seq| !(raw::header(block).is_some_and(|h| h.seq > seq) && raw::verifies(block)))
    }

    /// One inode record: its body (inline data, inline entries, an inline
    /// symlink target) and its inline xattrs.
    fn record(&mut self, rec: &mut [u8]) -> bool {
        let (Some(mode), Some(body_len), Some(xattr_len)) =
            (u32_at(rec, INODE_MODE_AT), len_at(rec, INODE_BODY_LEN_AT), len_at(rec, INODE_XATTR_LEN_AT))
        else {
            return false;
        };
        if INODE_FIXED_LEN + body_len + xattr_len != rec.len() {
            return false;
        }
        let (body_kind, xattr_kind) = (rec[INODE_BODY_KIND_AT], rec[INODE_XATTR_KIND_AT]);
        let (body, xattrs) = rec[INODE_FIXED_LEN..].split_at_mut(body_len);
        let mut changed = false;
        match body_kind {
            BODY_INLINE if mode & S_IFMT == S_IFLNK => {
                self.path(body);
                self.counts.symlinks += 1;
                changed = true;
            }
            BODY_INLINE if body.iter().any(|&b| b != 0) => {
                body.fill(0);
                self.counts.zeroed += 1;
                changed = true;
            }
            BODY_ENTRIES => changed |= self.entries(body, 2, len_at(body, 0).unwrap_or(0)),
            _ => {}
        }
        if xattr_kind == XATTRS_INLINE && !xattrs.is_empty() {
            changed |= self.inline_xattrs(xattrs);
        }
        changed
    }

    /// `count` directory entries `(u64 key, u16 len, value)` from `at`: the
    /// name at the end of each value is replaced.
    fn entries(&mut self, b: &mut [u8], mut at: usize, count: usize) -> bool {
        let mut changed = false;
        for _ in 0..count {
            let Some(len) = len_at(b, at + 8) else { break };
            let Some(value) = b.get_mut(at + LEAF_ENTRY_FIXED..at + LEAF_ENTRY_FIXED + len) else { break };
            if value.len() > DIRENT_NAME_AT {
                let n = self.name(&value[DIRENT_NAME_AT..]);
                value[DIRENT_NAME_AT..].copy_from_slice(&n);
                self.counts.names += 1;
                changed = true;
            }
            at += LEAF_ENTRY_FIXED + len;
        }
        changed
    }

    /// A B-tree leaf: directory entries' names, xattr names and inline
    /// values; extent leaves hold nothing to hide.
    fn leaf(&mut self, payload: &mut [u8]) -> bool {
        let (Some(&tree), Some(count)) = (payload.get(NODE_TREE_AT), len_at(payload, NODE_COUNT_AT)) else {
            return false;
        };
        if tree == TreeKind::Directory.code() {
            self.entries(payload, NODE_ENTRIES_AT, count)
        } else if tree == TreeKind::Xattrs.code() {
            let mut at = NODE_ENTRIES_AT;
            let mut changed = false;
            for _ in 0..count {
                let Some(len) = len_at(payload, at + 8) else { break };
                let Some(value) = payload.get_mut(at + LEAF_ENTRY_FIXED..at + LEAF_ENTRY_FIXED + len) else { break };
                changed |= self.tree_xattr(value);
                at += LEAF_ENTRY_FIXED + len;
            }
            changed
        } else {
            false
        }
    }

    /// One xattr tree value: `form, name_len, name, value or blob list`.
    fn tree_xattr(&mut self, v: &mut [u8]) -> bool {
        let (Some(&form), Some(&name_len)) = (v.first(), v.get(1)) else { return false };
        let end = 2 + usize::from(name_len);
        let Some(name) = v.get(2..end) else { return false };
        if KEPT_XATTRS.contains(&name) {
            return false;
        }
        let n = self.xattr_name(name);
        v[2..end].copy_from_slice(&n);
        self.counts.xattrs += 1;
        if form == XATTR_VALUE_INLINE && v.len() > end {
            v[end..].fill(0);
            self.counts.zeroed += 1;
        }
        true
    }

    /// An inode's inline xattr list: names replaced, values zeroed, pairs
    /// sorted again by their new names (the format keeps them in order).
    fn inline_xattrs(&mut self, area: &mut [u8]) -> bool {
        let Some(count) = len_at(area, 0) else { return false };
        let mut pairs = Vec::with_capacity(count);
        let mut at = 2;
        for _ in 0..count {
            let (Some(&name_len), Some(value_len)) = (area.get(at), len_at(area, at + 1)) else { return false };
            let name_end = at + 3 + usize::from(name_len);
            let (Some(name), Some(value)) = (area.get(at + 3..name_end), area.get(name_end..name_end + value_len))
            else {
                return false;
            };
            pairs.push((name.to_vec(), value.to_vec()));
            at = name_end + value_len;
        }
        if at != area.len() {
            return false;
        }
        let mut changed = false;
        for (name, value) in &mut pairs {
            if KEPT_XATTRS.contains(&name.as_slice()) {
                continue;
            }
            *name = self.xattr_name(name);
            value.fill(0);
            self.counts.xattrs += 1;
            changed = true;
        }
        pairs.sort();
        let mut out = Vec::with_capacity(area.len());
        out.extend_from_slice(&area[..2]);
        for (name, value) in &pairs {
            out.push(name.len() as u8);
            out.extend_from_slice(&(value.len() as u16).to_le_bytes());
            out.extend_from_slice(name);
            out.extend_from_slice(value);
        }
        area.copy_from_slice(&out);
        changed
    }
}

/// A block of zeros but for its last 4 bytes, whose CRC32C is `crc`: what
/// a damaged data copy becomes, so that it fails its record's checksum
/// with the same numbers as before and holds nothing else. CRC32C is
/// affine over GF(2): the 32 bits at the end map one to one onto the
/// checksum, so the 32 equations are solved by elimination.
#[must_use]
pub fn zeros_with_crc(crc: u32) -> Vec<u8> {
    let mut block = vec![0u8; PAYLOAD_LEN + HEADER_LEN];
    let n = block.len();
    let base = checksum::crc32c(&block);
    // rows[i] = (effect of tail bit i on the checksum, the bit itself).
    let mut rows: Vec<(u32, u32)> = (0..32)
        .map(|i| {
            block[n - 4..].copy_from_slice(&(1u32 << i).to_le_bytes());
            (checksum::crc32c(&block) ^ base, 1u32 << i)
        })
        .collect();
    let mut target = crc ^ base;
    let mut tail = 0u32;
    for bit in 0..32 {
        let Some(p) = (bit..32).find(|&r| rows[r].0 & (1 << bit) != 0) else { continue };
        rows.swap(bit, p);
        let pivot = rows[bit];
        for (r, row) in rows.iter_mut().enumerate() {
            if r != bit && row.0 & (1 << bit) != 0 {
                row.0 ^= pivot.0;
                row.1 ^= pivot.1;
            }
        }
    }
    for (bit, &(effect, tail_bits)) in rows.iter().enumerate() {
        if effect == 1 << bit && target & (1 << bit) != 0 {
            tail ^= tail_bits;
            target ^= effect;
        }
    }
    block[n - 4..].copy_from_slice(&tail.to_le_bytes());
    block
}

/// splitmix64: the next state of a small generator.
fn splitmix(s: u64) -> u64 {
    let mut z = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_length_and_never_meet() {
        let mut o = Obfuscator::new([3; 16]);
        let mut seen = HashSet::new();
        for n in 0..=255u8 {
            if n == b'/' || n == 0 || n == b'.' {
                continue;
            }
            let r = o.name(&[n]);
            assert_eq!(r.len(), 1);
            assert!(!r.contains(&b'/') && !r.contains(&0) && r != b".");
            assert!(seen.insert(r), "two 1-byte names share a replacement");
        }
        assert_eq!(o.name(b"hello"), o.name(b"hello"));
        assert_ne!(o.name(b"hello"), b"hello");
        assert_eq!(o.name(b"lost+found"), b"lost+found");
        let mut t = *b"../a/bc//lost+found/.";
        o.path(&mut t);
        assert_eq!(&t[..3], b"../");
        assert_eq!(t[4], b'/');
        assert_eq!(&t[7..9], b"//");
        assert_eq!(&t[9..], b"lost+found/.");
        assert_eq!(o.xattr_name(b"user.secret")[..5], *b"user.");
    }

    #[test]
    fn fsync_records_lose_names_and_bytes_and_keep_their_shape() {
        use dualfs_engine::format::checksum::crc32c;
        use dualfs_engine::format::descriptor::{Descriptor, PS_GROUP_END, PsKind};
        use dualfs_engine::format::fsync::{FSYNC_NEW, FsyncRecord};
        use dualfs_engine::format::inode::{Body, InodeRecord};
        use dualfs_engine::types::{DataBlock, FileKind, InodeNo, SegmentNo, Seq, Timestamp};

        let file = |ino: u64, mode: u32, body: &[u8]| InodeRecord {
            ino: InodeNo(ino),
            generation: 1,
            mode,
            nlink: 1,
            size: body.len() as u64,
            body: Body::Inline(body.to_vec()),
            ..InodeRecord::default()
        };
        let link = |dir: u64, ino: u64, name: &[u8]| FsyncRecord::Link {
            dir: InodeNo(dir),
            ino: InodeNo(ino),
            kind: FileKind::Regular,
            name: name.to_vec(),
        };
        let data = |crc: u32| FsyncRecord::Data { ino: InodeNo(7), block: 0, at: DataBlock(90), crc };
        let d = Descriptor {
            kind: PsKind::Fsync,
            flags: PS_GROUP_END,
            seq: Seq(9),
            time: Timestamp::default(),
            segment: SegmentNo(1),
            offset: 4,
            next_segment: SegmentNo(2),
            prev_crc: 5,
            body_crc: 6,
            blocks: Vec::new(),
            inode_blocks: Vec::new(),
            changes: Vec::new(),
            fsync: vec![
                FsyncRecord::Inode { flags: FSYNC_NEW, record: file(7, S_IFLNK | 0o777, b"secret-dir/secret-file") },
                link(1, 7, b"secret-file"),
                FsyncRecord::Inode { flags: FSYNC_NEW, record: file(8, 0o100_644, b"secret bytes") },
                FsyncRecord::Written { start: DataBlock(3), len: 1 },
                data(0x1111),
                data(0x2222),
            ],
        };
        let (payloads, _) = d.encode();
        assert_eq!(payloads.len(), 1);
        let mut stream = payloads[0][8..].to_vec();
        let mut o = Obfuscator::new([4; 16]);
        // The second copy's block was damaged: its record keeps its crc.
        let wanted = o.fsync_stream(&mut stream, &[0x1111, 0x3333], 0xabcd).unwrap();
        assert_eq!(wanted, [0x1111, 0x2222]);
        let mut payload = crc32c(&stream).to_le_bytes().to_vec();
        payload.extend_from_slice(&payloads[0][4..8]);
        payload.extend_from_slice(&stream);
        let (back, _) = Descriptor::decode(&[&payload], 1024).unwrap();
        let secret = o.name(b"secret-file");
        let target = [o.name(b"secret-dir"), b"/".to_vec(), secret.clone()].concat();
        let expect = vec![
            FsyncRecord::Inode { flags: FSYNC_NEW, record: file(7, S_IFLNK | 0o777, &target) },
            link(1, 7, &secret),
            FsyncRecord::Inode { flags: FSYNC_NEW, record: file(8, 0o100_644, &[0; 12]) },
            FsyncRecord::Written { start: DataBlock(3), len: 1 },
            data(0xabcd),
            data(0x2222),
        ];
        assert_eq!(back.fsync, expect);
        // Records cut short are refused, not half edited into a seal.
        assert!(o.fsync_stream(&mut stream[..stream.len() - 3].to_vec(), &[], 0).is_none());
    }

    #[test]
    fn a_zero_block_takes_any_checksum() {
        for crc in [0u32, 1, 0x43e3_00cd, 0xdead_beef, u32::MAX] {
            let b = zeros_with_crc(crc);
            assert_eq!(checksum::crc32c(&b), crc);
            assert!(b[..b.len() - 4].iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn damaged_and_foreign_blocks_keep_nothing_and_stay_damaged() {
        let mut o = Obfuscator::new([1; 16]);
        let mut b = vec![7u8; 4096];
        assert_eq!(o.rewrite(9, &mut b), Outcome::Cleared);
        assert!(b.iter().all(|&x| x == 0));
        b[..4].copy_from_slice(&dualfs_engine::format::block::BLOCK_MAGIC.to_le_bytes());
        b[8] = BlockKind::Node.code();
        b[100] = 9;
        assert_eq!(o.rewrite(9, &mut b), Outcome::Dropped);
        assert!(!checksum::verify(&b, 4));
        assert!(b[HEADER_LEN..].iter().all(|&x| x == 0));
    }

    #[test]
    fn descriptors_of_unknown_kinds_are_dropped_whole() {
        let mut o = Obfuscator::new([1; 16]);
        let descriptor = |aux: u16, stream_kind: u8| {
            let mut b = vec![0u8; 4096];
            b[..4].copy_from_slice(&dualfs_engine::format::block::BLOCK_MAGIC.to_le_bytes());
            b[8] = BlockKind::Descriptor.code();
            b[9] = 1;
            b[10..12].copy_from_slice(&aux.to_le_bytes());
            b[12..16].copy_from_slice(&100u32.to_le_bytes());
            b[48..56].copy_from_slice(&2u64.to_le_bytes());
            b[HEADER_LEN + 8] = stream_kind;
            b[HEADER_LEN + 20..HEADER_LEN + 30].copy_from_slice(b"secretname");
            checksum::seal(&mut b, 4);
            b
        };
        let (mut known, mut first, mut next) = (descriptor(0, 1), descriptor(0, 9), descriptor(1, 0));
        o.learn(5, &known);
        o.learn(10, &first);
        o.learn(11, &next);
        assert_eq!(o.rewrite(5, &mut known), Outcome::Kept);
        assert_eq!(o.rewrite(10, &mut first), Outcome::Dropped);
        assert_eq!(o.rewrite(11, &mut next), Outcome::Dropped);
        assert!(!first.windows(10).any(|w| w == b"secretname"));
        assert_eq!(o.counts.unknown, 2);
    }
}
