//! The quota record (format 1.9, `INCOMPAT_QUOTA`, FORMAT.md 3.17): the
//! limits and grace times of users, groups and projects, kept as the value
//! of the root directory's `dualfs.quota` attribute, a name no caller can
//! reach. Usage is not stored: the volume counts it from the inodes
//! (DESIGN.md, "Quotas").

use super::checksum;
use super::codec::{DecodeResult, Reader, Writer, bad};

/// `"DFQT"` little-endian.
pub const QUOTA_MAGIC: u32 = u32::from_le_bytes(*b"DFQT");
/// Layout version of the record.
pub const QUOTA_VERSION: u16 = 1;
/// The attribute of the root directory that holds the record.
pub const QUOTA_XATTR: &[u8] = b"system.dualfs.quota";
const FIXED_LEN: usize = 64;
const ENTRY_LEN: usize = 56;
const CRC_AT: usize = 4;
/// Most entries a record holds: what fits in 64 KiB, the largest
/// attribute value Linux passes.
pub const MAX_ENTRIES: usize = (65_536 - FIXED_LEN) / ENTRY_LEN;
/// The grace time a volume starts with, as ext4's and XFS's: seven days.
pub const DEFAULT_GRACE_SECS: u64 = 7 * 24 * 3600;

/// Whose usage a limit bounds.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum QuotaKind {
    /// An owner (uid).
    User,
    /// A group (gid).
    Group,
    /// A project (the inode's project id).
    Project,
}

impl QuotaKind {
    /// The three kinds, in stored order.
    pub const ALL: [QuotaKind; 3] = [QuotaKind::User, QuotaKind::Group, QuotaKind::Project];

    /// The byte stored on disk.
    #[must_use]
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The kind a stored byte names.
    #[must_use]
    pub fn from_code(code: u8) -> Option<QuotaKind> {
        QuotaKind::ALL.get(usize::from(code)).copied()
    }

    /// A name for people.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            QuotaKind::User => "user",
            QuotaKind::Group => "group",
            QuotaKind::Project => "project",
        }
    }
}

/// The four limits of one id; 0 is no limit (as setquota's). Blocks are
/// data blocks of 4 KiB.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Limits {
    /// Blocks past which the grace time runs.
    pub block_soft: u64,
    /// Blocks never exceeded.
    pub block_hard: u64,
    /// Inodes past which the grace time runs.
    pub inode_soft: u64,
    /// Inodes never exceeded.
    pub inode_hard: u64,
}

impl Limits {
    /// Whether no limit is set.
    #[must_use]
    pub fn is_none(&self) -> bool {
        *self == Limits::default()
    }
}

/// One id's limits and running grace times.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct QuotaEntry {
    /// Its limits.
    pub limits: Limits,
    /// When the block grace time ends (seconds since the epoch), 0 while
    /// usage is not past the soft limit.
    pub block_grace_end: u64,
    /// When the inode grace time ends, as `block_grace_end`.
    pub inode_grace_end: u64,
}

/// The whole record: grace times per kind and one entry per limited id.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct QuotaTable {
    /// Block and inode grace times in seconds, per kind (user, group,
    /// project).
    pub grace: [(u64, u64); 3],
    /// Entries by kind and id.
    pub entries: std::collections::BTreeMap<(QuotaKind, u32), QuotaEntry>,
}

impl Default for QuotaTable {
    fn default() -> QuotaTable {
        QuotaTable { grace: [(DEFAULT_GRACE_SECS, DEFAULT_GRACE_SECS); 3], entries: Default::default() }
    }
}

impl QuotaTable {
    /// Encodes the record, checksummed. Entries with no limit and no grace
    /// time running are left out.
    ///
    /// # Panics
    /// More than [`MAX_ENTRIES`] entries: [`QuotaTable::room_for`] is
    /// asked before one is added.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let kept: Vec<_> = self.entries.iter().filter(|(_, e)| **e != QuotaEntry::default()).collect();
        assert!(kept.len() <= MAX_ENTRIES, "{} quota entries", kept.len());
        let mut w = Writer::with_capacity(FIXED_LEN + kept.len() * ENTRY_LEN);
        w.u32(QUOTA_MAGIC).u32(0).u16(QUOTA_VERSION).u16(kept.len() as u16).u32(0);
        for (b, i) in self.grace {
            w.u64(b).u64(i);
        }
        debug_assert_eq!(w.len(), FIXED_LEN);
        for ((kind, id), e) in kept {
            w.u8(kind.code()).zeros(3).u32(*id);
            let l = e.limits;
            w.u64(l.block_soft).u64(l.block_hard).u64(l.inode_soft).u64(l.inode_hard);
            w.u64(e.block_grace_end).u64(e.inode_grace_end);
        }
        let mut out = w.into_inner();
        checksum::seal(&mut out, CRC_AT);
        out
    }

    /// Whether one more entry fits.
    #[must_use]
    pub fn room_for(&self, key: (QuotaKind, u32)) -> bool {
        self.entries.contains_key(&key) || self.entries.len() < MAX_ENTRIES
    }

    /// Decodes a record.
    ///
    /// # Errors
    /// Wrong magic, version, length or checksum; an unknown kind; entries
    /// not in increasing order of kind and id.
    pub fn decode(buf: &[u8]) -> DecodeResult<QuotaTable> {
        let mut r = Reader::new(buf);
        if r.u32()? != QUOTA_MAGIC {
            bad!("not a quota record (bad magic)");
        }
        let _crc = r.u32()?;
        let version = r.u16()?;
        if version != QUOTA_VERSION {
            bad!("quota record version {version}, this version reads {QUOTA_VERSION}");
        }
        let count = usize::from(r.u16()?);
        r.reserved(4)?;
        if buf.len() != FIXED_LEN + count * ENTRY_LEN {
            bad!("quota record of {} bytes for {count} entries", buf.len());
        }
        if !checksum::verify(buf, CRC_AT) {
            bad!("quota record checksum mismatch");
        }
        let mut grace = [(0, 0); 3];
        for g in &mut grace {
            *g = (r.u64()?, r.u64()?);
        }
        let mut entries = std::collections::BTreeMap::new();
        let mut last: Option<(QuotaKind, u32)> = None;
        for _ in 0..count {
            let code = r.u8()?;
            let Some(kind) = QuotaKind::from_code(code) else { bad!("unknown quota kind {code}") };
            r.reserved(3)?;
            let key = (kind, r.u32()?);
            if last.is_some_and(|l| l >= key) {
                bad!("quota entries out of order at {} {}", kind.name(), key.1);
            }
            last = Some(key);
            let limits =
                Limits { block_soft: r.u64()?, block_hard: r.u64()?, inode_soft: r.u64()?, inode_hard: r.u64()? };
            let e = QuotaEntry { limits, block_grace_end: r.u64()?, inode_grace_end: r.u64()? };
            entries.insert(key, e);
        }
        Ok(QuotaTable { grace, entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> QuotaTable {
        let mut t = QuotaTable::default();
        t.grace[2] = (60, 120);
        let limits = Limits { block_soft: 10, block_hard: 20, inode_soft: 3, inode_hard: 4 };
        t.entries.insert((QuotaKind::User, 1000), QuotaEntry { limits, block_grace_end: 99, inode_grace_end: 0 });
        t.entries.insert((QuotaKind::Project, 7), QuotaEntry { limits, ..QuotaEntry::default() });
        t
    }

    #[test]
    fn a_record_round_trips_and_leaves_out_empty_entries() {
        let mut t = sample();
        t.entries.insert((QuotaKind::Group, 5), QuotaEntry::default());
        let bytes = t.encode();
        assert_eq!(bytes.len(), FIXED_LEN + 2 * ENTRY_LEN);
        t.entries.remove(&(QuotaKind::Group, 5));
        assert_eq!(QuotaTable::decode(&bytes).unwrap(), t);
    }

    #[test]
    fn every_flipped_byte_and_every_cut_is_refused() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(QuotaTable::decode(&b).is_err(), "flip at {i} accepted");
        }
        for n in 0..bytes.len() {
            assert!(QuotaTable::decode(&bytes[..n]).is_err(), "cut at {n} accepted");
        }
    }

    #[test]
    fn entries_out_of_order_are_refused() {
        let mut bytes = sample().encode();
        // Swap the two entries, then reseal.
        let (a, b) = (FIXED_LEN, FIXED_LEN + ENTRY_LEN);
        let first: Vec<u8> = bytes[a..b].to_vec();
        bytes.copy_within(b..b + ENTRY_LEN, a);
        bytes[b..b + ENTRY_LEN].copy_from_slice(&first);
        checksum::seal(&mut bytes, CRC_AT);
        assert!(QuotaTable::decode(&bytes).unwrap_err().0.contains("out of order"));
    }
}
