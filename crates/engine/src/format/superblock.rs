//! The superblock: block 0 of both devices.
//!
//! The two copies are identical except for `role`; each names the volume and
//! both devices by UUID, so that a data device paired with the wrong meta-data
//! device is refused before anything is read from it.

use super::codec::{DecodeResult, Writer, bad};
use crate::types::{BLOCK_SIZE, MetaBlock, SegmentNo, Timestamp};

/// `"DUAL"` little-endian.
pub const SUPER_MAGIC: u32 = u32::from_le_bytes(*b"DUAL");
/// On-disk format version this library writes.
pub const FORMAT_MAJOR: u16 = 1;
/// Minor version: additions that older readers may ignore. 1.1 added
/// [`COMPAT_MOUNT_OPTIONS`] and [`INCOMPAT_BLOCK_ID`]; 1.2 added
/// [`INCOMPAT_FSYNC_LOG`]; 1.3 added [`INCOMPAT_SNAPSHOTS`] and [`INCOMPAT_RESIZED`];
/// 1.4 added [`INCOMPAT_CLONES`]; 1.5 added [`INCOMPAT_INDEX_RUNS`]; 1.6
/// added [`INCOMPAT_INODE_FLAGS`]; 1.7 added [`INCOMPAT_SPARSE_IFILE`]; 1.9
/// added [`INCOMPAT_QUOTA`]; 1.10 added [`INCOMPAT_META_REDUNDANCY`]; 1.11
/// added [`INCOMPAT_SNAPSHOT_RECORDS`]. A volume is written with the
/// highest minor any of its features needs.
pub const FORMAT_MINOR: u16 = 11;
/// The minor version a resize raises an older volume to.
pub const FORMAT_MINOR_RESIZE: u16 = 3;
/// `compat`: default mount options are stored at bytes 256..320 (`dualfs
/// tune -o`). Since 1.1.
pub const COMPAT_MOUNT_OPTIONS: u64 = 1;
/// `incompat`: meta-data block headers carry `block_id` (bytes 320..328)
/// rather than the first 8 bytes of `volume_uuid`, which `dualfs tune -U`
/// changed after the blocks were written. Since 1.1.
pub const INCOMPAT_BLOCK_ID: u64 = 1;
/// `incompat`: names are not at the hash positions of their keys (a volume
/// restored by `dualfs metarestore` from a dump whose names were replaced):
/// a reader looks a name up by scanning its directory or xattr tree, and
/// the volume mounts read-only only. A reader that hashed would find
/// nothing, hence incompat. Bit 1 belongs to the fsync log of 1.2. Since 1.2.
pub const INCOMPAT_SCANNED_NAMES: u64 = 1 << 2;
/// `incompat`: the log may hold fsync partial segments (descriptor kind 3),
/// which a reader must replay; one that does not know them would take the
/// first for a torn tail and drop what was fsync'd, and everything after.
/// mkfs sets it. Since 1.2.
pub const INCOMPAT_FSYNC_LOG: u64 = 1 << 1;
/// `incompat`: the volume has had snapshots: checkpoints may name a
/// snapshot list (bytes 88..96), whose snapshots keep log segments and
/// data blocks that the live volume no longer maps. A reader unaware of
/// them would reuse those, destroying the snapshots, hence incompat. Set
/// when the first snapshot is made; bit 0x8 belongs to another feature of
/// 1.3. Since 1.3.
pub const INCOMPAT_SNAPSHOTS: u64 = 1 << 4;
/// `incompat`: the volume was resized (`dualfs resize`). Every checkpoint
/// then carries the geometry in use (segment count, data blocks), and the
/// superblock's geometry is only the reach the devices were given: a
/// checkpoint written before a resize took effect mounts at the old size
/// although the superblock names the new one. A reader unaware of it would
/// size the IFile from the superblock and refuse (or misread) every
/// checkpoint, hence incompat. Bits 0x8 and 0x10 belong to other features
/// of 1.3. Since 1.3.
pub const INCOMPAT_RESIZED: u64 = 1 << 5;
/// `incompat`: the volume has writable trees besides the live one (clones,
/// or the tree that was live before a clone was mounted): snapshot records
/// may be writable, and the snapshot list may name the live tree. A reader
/// of 1.3 would refuse those fields as corrupt; one that took a writable
/// tree for a snapshot would let `-o snapshot=` read blocks that mounting
/// that tree moves. Set by the first clone. Since 1.4.
pub const INCOMPAT_CLONES: u64 = 1 << 6;
/// `incompat`: an index entry of a checkpoint or snapshot record may name
/// a run of IFile index blocks at consecutive addresses (3.2 bytes 2..4 of
/// an entry), so that one record indexes an IFile of more than 249 index
/// blocks (a data device past about 14.7 TiB). A reader of 1.4 would
/// refuse the run length as a reserved field set, hence incompat. mkfs
/// sets it. Since 1.5.
pub const INCOMPAT_INDEX_RUNS: u64 = 1 << 7;
/// `incompat`: inode records may carry inode flags (immutable, append-only, sync,
/// dirsync, noatime, nodump, project inheritance) and a project id: an
/// older reader would refuse the records as corrupt, or ignore what
/// immutable and append-only forbid. mkfs sets it; an older volume gets it
/// before its first inode is given a flag or a project id (format 1.6).
pub const INCOMPAT_INODE_FLAGS: u64 = 1 << 8;
/// Format minor version that introduced [`INCOMPAT_INODE_FLAGS`].
pub const FORMAT_MINOR_INODE_FLAGS: u16 = 6;
/// `incompat`: the IFile is sparse. A table block an index block lists at
/// address 0, and every block of a chunk the checkpoint names no index
/// block for, was never written and holds its table's fresh entries (a
/// free segment, a wholly free group, free bits); segment usage entries
/// count the IFile blocks in their segment; a checkpoint ends with where
/// its own partial segments start, the segments holding nothing and the
/// live bytes in all. So mkfs writes what a fresh volume needs and a mount
/// reads what it uses, whatever the size. A reader unaware of it would
/// refuse the missing blocks, or take a segment holding the IFile for
/// free, hence incompat. mkfs sets it. Since 1.7.
pub const INCOMPAT_SPARSE_IFILE: u64 = 1 << 9;
/// `incompat`: user, group and project quotas are kept: the root
/// directory holds the quota record (FORMAT.md 3.17) and the volume
/// refuses what would pass a limit. An older reader would let every
/// write through and leave the grace times stale, hence incompat. Set by
/// `mkfs --quota` or `dualfs quota on`. Since 1.9.
pub const INCOMPAT_QUOTA: u64 = 1 << 12;
/// Format minor version that introduced [`INCOMPAT_QUOTA`].
pub const FORMAT_MINOR_QUOTA: u16 = 9;
/// `incompat`: the log's meta-data is kept redundantly: the partial
/// segments an fsync or a sync waits for may be followed by a twin
/// (descriptor flags `PS_TWINNED`, `PS_TWIN`), which roll-forward takes
/// when the original is damaged and otherwise steps over. An older reader
/// would refuse the flags and take the last acknowledged fsync for a torn
/// tail, hence incompat. mkfs sets it. Since 1.10.
pub const INCOMPAT_META_REDUNDANCY: u64 = 1 << 10;
/// `incompat`: a snapshot block may carry what its image pins (the log
/// segments, and how many meta-data blocks it reaches) and the snapshot
/// list the count of free data blocks the snapshots hold (record flag
/// `RECORD_PINS`, list flag `LIST_HELD_FREE`, FORMAT.md 3.15, 3.16), so
/// that a mount reads neither an image nor a bitmap whole. An older
/// reader would refuse the flags. mkfs sets it; an older volume with
/// snapshots gets it at its first writable mount. Since 1.11.
pub const INCOMPAT_SNAPSHOT_RECORDS: u64 = 1 << 15;
/// Format minor version that introduced [`INCOMPAT_SNAPSHOT_RECORDS`].
pub const FORMAT_MINOR_SNAPSHOT_RECORDS: u16 = 11;
/// Feature bits this library understands, by class.
pub const KNOWN_COMPAT: u64 = COMPAT_MOUNT_OPTIONS;
/// Unknown `ro_compat` bits force a read-only mount.
pub const KNOWN_RO_COMPAT: u64 = 0;
/// Unknown `incompat` bits refuse the mount.
pub const KNOWN_INCOMPAT: u64 = INCOMPAT_BLOCK_ID
    | INCOMPAT_FSYNC_LOG
    | INCOMPAT_SCANNED_NAMES
    | INCOMPAT_SNAPSHOTS
    | INCOMPAT_RESIZED
    | INCOMPAT_CLONES
    | INCOMPAT_INDEX_RUNS
    | INCOMPAT_INODE_FLAGS
    | INCOMPAT_SPARSE_IFILE
    | INCOMPAT_QUOTA
    | INCOMPAT_META_REDUNDANCY
    | INCOMPAT_SNAPSHOT_RECORDS;
/// Bytes of the default mount options field.
pub const MOUNT_OPTIONS_BYTES: usize = 64;
/// Largest inline-data limit: an inode record must fit an inode block.
pub const MAX_INLINE_DATA: u32 = 3072;
/// The two checkpoint slots.
pub const CHECKPOINT_SLOTS: [MetaBlock; 2] = [MetaBlock(1), MetaBlock(2)];

/// Which device a superblock copy sits on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// The meta-data device.
    Meta,
    /// The data device.
    Data,
}

/// The volume's geometry and identity.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Superblock {
    /// Which device this copy sits on.
    pub role: Role,
    /// Format major version.
    pub major: u16,
    /// Format minor version.
    pub minor: u16,
    /// Features that older readers can ignore.
    pub compat: u64,
    /// Features that older readers may read but not write.
    pub ro_compat: u64,
    /// Features that older readers must not touch.
    pub incompat: u64,
    /// The volume.
    pub volume_uuid: [u8; 16],
    /// The meta-data device.
    pub meta_uuid: [u8; 16],
    /// The data device.
    pub data_uuid: [u8; 16],
    /// Blocks per log segment.
    pub segment_blocks: u32,
    /// Blocks of the meta-data device in use.
    pub meta_blocks: u64,
    /// Blocks of the data device in use.
    pub data_blocks: u64,
    /// Blocks per data group.
    pub group_blocks: u32,
    /// Number of data groups.
    pub group_count: u32,
    /// Number of log segments.
    pub segment_count: u32,
    /// Where segment 0 starts on the meta-data device.
    pub first_segment_block: u64,
    /// Files up to this many bytes keep their data in the inode.
    pub inline_max: u32,
    /// Key of the keyed hash used for directory and xattr names.
    pub hash_key: [u8; 16],
    /// When mkfs ran.
    pub created: Timestamp,
    /// A name for people, NUL-padded.
    pub label: [u8; 64],
    /// Default mount options, NUL-padded; all zero unless
    /// [`COMPAT_MOUNT_OPTIONS`] is set.
    pub mount_options: [u8; MOUNT_OPTIONS_BYTES],
    /// The id in meta-data block headers when [`INCOMPAT_BLOCK_ID`] is set;
    /// zero otherwise.
    pub block_id: u64,
    /// Copies of the meta-data device kept alike (1.10, bytes 328..332): 2
    /// for a mirrored meta-data log, 0 otherwise.
    pub meta_copies: u32,
    /// [`MIRROR_DEGRADED`] while a copy is missing or stale (bytes 332..336).
    pub mirror_state: u32,
    /// Raised each time the mirror's state changes (bytes 336..344): a copy
    /// whose superblock names a lower generation than the data device's
    /// missed writes and is not trusted.
    pub mirror_generation: u64,
}

/// `mirror_state`: one copy is missing or stale; the volume runs on the
/// other, and the absent one is never read again.
pub const MIRROR_DEGRADED: u32 = 1;

/// The part of the geometry a resize changes: how many log segments and
/// data blocks are in use. The rest (segment and group size, where
/// segments start) never changes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Geometry {
    /// Log segments.
    pub segment_count: u32,
    /// Data device blocks.
    pub data_blocks: u64,
}

impl Superblock {
    /// The segment count and data blocks this superblock names.
    #[must_use]
    pub fn geometry(&self) -> Geometry {
        Geometry { segment_count: self.segment_count, data_blocks: self.data_blocks }
    }

    /// This superblock with `g`'s segments and data blocks, and the
    /// meta-data blocks and group count that follow from them (the
    /// meta-data device's unused tail is kept when the segment count does
    /// not change). `None` when `g` does not make a valid superblock.
    #[must_use]
    pub fn with_geometry(&self, g: Geometry) -> Option<Superblock> {
        let mut sb = self.clone();
        if g.segment_count != self.segment_count {
            sb.meta_blocks = self
                .first_segment_block
                .checked_add(u64::from(g.segment_count).checked_mul(u64::from(self.segment_blocks))?)?;
        }
        sb.segment_count = g.segment_count;
        sb.data_blocks = g.data_blocks;
        sb.group_count = u32::try_from(g.data_blocks.div_ceil(u64::from(self.group_blocks))).ok()?;
        (g.segment_count >= 16 && g.data_blocks >= 256).then_some(sb)
    }

    /// Whether an index entry may name a run of index blocks
    /// ([`INCOMPAT_INDEX_RUNS`]).
    #[must_use]
    pub fn index_runs(&self) -> bool {
        self.incompat & INCOMPAT_INDEX_RUNS != 0
    }

    /// Whether the meta-data device is mirrored (two copies kept alike).
    #[must_use]
    pub fn mirrored(&self) -> bool {
        self.meta_copies == 2
    }

    /// Whether the IFile is sparse ([`INCOMPAT_SPARSE_IFILE`]).
    #[must_use]
    pub fn sparse_ifile(&self) -> bool {
        self.incompat & INCOMPAT_SPARSE_IFILE != 0
    }

    /// Whether every checkpoint carries its own geometry ([`INCOMPAT_RESIZED`]).
    #[must_use]
    pub fn resized(&self) -> bool {
        self.incompat & INCOMPAT_RESIZED != 0
    }

    /// A 64-bit id of the volume, stored in every meta-data block header:
    /// the first 8 bytes of the volume UUID, or the `block_id` kept when
    /// the UUID was changed.
    #[must_use]
    pub fn volume_id(&self) -> u64 {
        if self.incompat & INCOMPAT_BLOCK_ID != 0 {
            return self.block_id;
        }
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.volume_uuid[..8]);
        u64::from_le_bytes(b)
    }

    /// Gives the volume a new UUID, keeping the id its meta-data blocks
    /// carry (which sets [`INCOMPAT_BLOCK_ID`] if it was not yet).
    pub fn set_volume_uuid(&mut self, uuid: [u8; 16]) {
        if self.incompat & INCOMPAT_BLOCK_ID == 0 {
            self.block_id = self.volume_id();
            self.incompat |= INCOMPAT_BLOCK_ID;
            self.minor = self.minor.max(1);
        }
        self.volume_uuid = uuid;
    }

    /// Whether names must be looked up by scanning rather than by their
    /// hash position ([`INCOMPAT_SCANNED_NAMES`]).
    #[must_use]
    pub fn scanned_names(&self) -> bool {
        self.incompat & INCOMPAT_SCANNED_NAMES != 0
    }

    /// The default mount options as text (empty when none are stored).
    #[must_use]
    pub fn mount_options_str(&self) -> String {
        let end = self.mount_options.iter().position(|&b| b == 0).unwrap_or(MOUNT_OPTIONS_BYTES);
        String::from_utf8_lossy(&self.mount_options[..end]).into_owned()
    }

    /// Stores default mount options (empty: none).
    ///
    /// # Errors
    /// Longer than [`MOUNT_OPTIONS_BYTES`], or a NUL inside.
    pub fn set_mount_options(&mut self, options: &str) -> Result<(), String> {
        if options.len() > MOUNT_OPTIONS_BYTES {
            return Err(format!("default mount options are at most {MOUNT_OPTIONS_BYTES} bytes"));
        }
        if options.contains('\0') {
            return Err("default mount options cannot contain NUL".into());
        }
        self.mount_options = [0; MOUNT_OPTIONS_BYTES];
        self.mount_options[..options.len()].copy_from_slice(options.as_bytes());
        if options.is_empty() {
            self.compat &= !COMPAT_MOUNT_OPTIONS;
        } else {
            self.compat |= COMPAT_MOUNT_OPTIONS;
            self.minor = self.minor.max(1);
        }
        Ok(())
    }

    /// Sets the label (at most 64 bytes).
    ///
    /// # Errors
    /// Longer than 64 bytes, or a NUL inside.
    pub fn set_label(&mut self, label: &str) -> Result<(), String> {
        if label.len() > self.label.len() {
            return Err(format!("the label is at most {} bytes", self.label.len()));
        }
        if label.contains('\0') {
            return Err("the label cannot contain NUL".into());
        }
        self.label = [0; 64];
        self.label[..label.len()].copy_from_slice(label.as_bytes());
        Ok(())
    }

    /// First block of segment `seg`.
    #[must_use]
    pub fn segment_start(&self, seg: SegmentNo) -> MetaBlock {
        MetaBlock(self.first_segment_block + u64::from(seg.0) * u64::from(self.segment_blocks))
    }

    /// The segment containing meta block `b`, if it lies in the segment area.
    #[must_use]
    pub fn segment_of(&self, b: MetaBlock) -> Option<SegmentNo> {
        let rel = b.0.checked_sub(self.first_segment_block)?;
        let seg = rel / u64::from(self.segment_blocks);
        (seg < u64::from(self.segment_count)).then_some(SegmentNo(seg as u32))
    }

    /// The label as text.
    #[must_use]
    pub fn label_str(&self) -> String {
        let end = self.label.iter().position(|&b| b == 0).unwrap_or(self.label.len());
        String::from_utf8_lossy(&self.label[..end]).into_owned()
    }

    /// Encodes into one block.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(BLOCK_SIZE);
        w.u32(SUPER_MAGIC)
            .u32(0)
            .u16(self.major)
            .u16(self.minor)
            .u32(match self.role {
                Role::Meta => 1,
                Role::Data => 2,
            })
            .u64(self.compat)
            .u64(self.ro_compat)
            .u64(self.incompat)
            .bytes(&self.volume_uuid)
            .bytes(&self.meta_uuid)
            .bytes(&self.data_uuid)
            .u32(BLOCK_SIZE as u32)
            .u32(self.segment_blocks)
            .u64(self.meta_blocks)
            .u64(self.data_blocks)
            .u32(self.group_blocks)
            .u32(self.group_count)
            .u32(self.segment_count)
            .u32(0)
            .u64(self.first_segment_block)
            .u64(CHECKPOINT_SLOTS[0].0)
            .u64(CHECKPOINT_SLOTS[1].0)
            .u32(self.inline_max)
            .u32(255)
            .bytes(&self.hash_key)
            .timestamp(self.created)
            .u32(0)
            .bytes(&self.label)
            .bytes(&self.mount_options)
            .u64(self.block_id)
            .u32(self.meta_copies)
            .u32(self.mirror_state)
            .u64(self.mirror_generation);
        super::record::seal(w.into_inner())
    }

    /// Decodes and validates a superblock.
    ///
    /// # Errors
    /// Not a DualFS superblock, a bad checksum, an unsupported version or
    /// feature, or a geometry that does not add up.
    pub fn decode(block: &[u8]) -> DecodeResult<Superblock> {
        let (mut r, minor) = super::record::open(block, SUPER_MAGIC, "no DualFS superblock")?;
        let role = match r.u32()? {
            1 => Role::Meta,
            2 => Role::Data,
            other => bad!("unknown device role {other}"),
        };
        let compat = r.u64()?;
        let ro_compat = r.u64()?;
        let incompat = r.u64()?;
        if incompat & !KNOWN_INCOMPAT != 0 {
            bad!(
                "the volume uses incompatible features {:#x} that this version of DualFS does not know \
                 (it was made or changed by a newer version)",
                incompat & !KNOWN_INCOMPAT
            );
        }
        let volume_uuid = r.array()?;
        let meta_uuid = r.array()?;
        let data_uuid = r.array()?;
        let block_size = r.u32()?;
        if block_size as usize != BLOCK_SIZE {
            bad!("block size {block_size} is not supported (only {BLOCK_SIZE})");
        }
        let segment_blocks = r.u32()?;
        let meta_blocks = r.u64()?;
        let data_blocks = r.u64()?;
        let group_blocks = r.u32()?;
        let group_count = r.u32()?;
        let segment_count = r.u32()?;
        r.reserved(4)?;
        let first_segment_block = r.u64()?;
        let slot_a = r.u64()?;
        let slot_b = r.u64()?;
        let inline_max = r.u32()?;
        let max_name = r.u32()?;
        let hash_key = r.array()?;
        let created = r.timestamp()?;
        r.reserved(4)?;
        let label = r.array()?;
        let mount_options: [u8; MOUNT_OPTIONS_BYTES] = r.array()?;
        if compat & COMPAT_MOUNT_OPTIONS == 0 && mount_options.iter().any(|&b| b != 0) {
            bad!("mount options are stored but the feature bit is clear");
        }
        let block_id = r.u64()?;
        if incompat & INCOMPAT_BLOCK_ID == 0 && block_id != 0 {
            bad!("a block id is stored but the feature bit is clear");
        }
        let meta_copies = r.u32()?;
        let mirror_state = r.u32()?;
        let mirror_generation = r.u64()?;
        if incompat & INCOMPAT_META_REDUNDANCY == 0 && (meta_copies, mirror_state, mirror_generation) != (0, 0, 0) {
            bad!("a meta-data mirror is recorded but the feature bit is clear");
        }
        if meta_copies != 0 && meta_copies != 2 {
            bad!("{meta_copies} meta-data copies (0 or 2 are valid)");
        }
        if mirror_state > MIRROR_DEGRADED || (meta_copies == 0 && mirror_state != 0) {
            bad!("meta-data mirror state {mirror_state} is not valid");
        }
        r.reserved(BLOCK_SIZE - r.position())?;

        if [slot_a, slot_b] != [CHECKPOINT_SLOTS[0].0, CHECKPOINT_SLOTS[1].0] {
            bad!("checkpoint slots at {slot_a} and {slot_b}, expected 1 and 2");
        }
        if max_name != 255 {
            bad!("maximum name length {max_name} is not supported");
        }
        if !(128..=65536).contains(&segment_blocks) {
            bad!("segment of {segment_blocks} blocks is out of range");
        }
        if first_segment_block < 3 {
            bad!("segment area starts at block {first_segment_block}, inside the superblock area");
        }
        let seg_end = u64::from(segment_count)
            .checked_mul(u64::from(segment_blocks))
            .and_then(|n| n.checked_add(first_segment_block));
        if segment_count < 16 || seg_end.is_none_or(|end| end > meta_blocks) {
            bad!("{segment_count} segments of {segment_blocks} blocks do not fit {meta_blocks} blocks");
        }
        if group_blocks == 0 || group_blocks % 64 != 0 {
            bad!("data group of {group_blocks} blocks is not a positive multiple of 64");
        }
        if data_blocks < 256 || u64::from(group_count) != data_blocks.div_ceil(u64::from(group_blocks)) {
            bad!("{group_count} groups of {group_blocks} blocks do not cover {data_blocks} blocks");
        }
        if inline_max > MAX_INLINE_DATA {
            bad!("inline limit {inline_max} exceeds {MAX_INLINE_DATA}");
        }
        Ok(Superblock {
            role,
            major: FORMAT_MAJOR,
            minor,
            compat,
            ro_compat,
            incompat,
            volume_uuid,
            meta_uuid,
            data_uuid,
            segment_blocks,
            meta_blocks,
            data_blocks,
            group_blocks,
            group_count,
            segment_count,
            first_segment_block,
            inline_max,
            hash_key,
            created,
            label,
            mount_options,
            block_id,
            meta_copies,
            mirror_state,
            mirror_generation,
        })
    }
}

#[cfg(test)]
pub(crate) fn sample() -> Superblock {
    Superblock {
        role: Role::Meta,
        major: FORMAT_MAJOR,
        minor: FORMAT_MINOR,
        compat: 0,
        ro_compat: 0,
        incompat: 0,
        volume_uuid: [1; 16],
        meta_uuid: [2; 16],
        data_uuid: [3; 16],
        segment_blocks: 256,
        meta_blocks: 256 * 20,
        data_blocks: 100_000,
        group_blocks: 32768,
        group_count: 4,
        segment_count: 19,
        first_segment_block: 256,
        inline_max: 1024,
        hash_key: [9; 16],
        created: Timestamp { sec: 1, nsec: 2 },
        label: [0; 64],
        mount_options: [0; MOUNT_OPTIONS_BYTES],
        block_id: 0,
        meta_copies: 0,
        mirror_state: 0,
        mirror_generation: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let sb = sample();
        assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let block = sample().encode();
        for bit in 0..BLOCK_SIZE * 8 {
            let mut b = block.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&b).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn geometry_that_does_not_fit_is_refused() {
        let mut sb = sample();
        sb.segment_count = 100;
        assert!(Superblock::decode(&sb.encode()).unwrap_err().0.contains("do not fit"));
        let mut sb = sample();
        sb.group_count = 1;
        assert!(Superblock::decode(&sb.encode()).is_err());
        let mut sb = sample();
        sb.incompat = 1 << 40;
        assert!(Superblock::decode(&sb.encode()).unwrap_err().0.contains("incompatible"));
    }

    #[test]
    fn a_new_uuid_keeps_the_block_id_and_options_round_trip() {
        let mut sb = sample();
        let id = sb.volume_id();
        sb.set_volume_uuid([7; 16]);
        assert_eq!(sb.volume_id(), id, "blocks written before still match");
        assert_ne!(sb.incompat & INCOMPAT_BLOCK_ID, 0);
        sb.set_volume_uuid([8; 16]);
        assert_eq!(sb.volume_id(), id, "and after a second change");
        sb.set_mount_options("noatime,commit=30").unwrap();
        sb.set_label("home").unwrap();
        let back = Superblock::decode(&sb.encode()).unwrap();
        assert_eq!(back, sb);
        assert_eq!(back.mount_options_str(), "noatime,commit=30");
        assert_eq!(back.label_str(), "home");
        sb.set_mount_options("").unwrap();
        assert_eq!(sb.compat & COMPAT_MOUNT_OPTIONS, 0);
        assert!(sb.set_mount_options(&"x".repeat(65)).is_err());
        assert!(sb.set_label(&"x".repeat(65)).is_err());
    }

    #[test]
    fn stored_bytes_without_their_feature_bit_are_refused() {
        let mut sb = sample();
        sb.set_mount_options("noatime").unwrap();
        sb.compat = 0;
        assert!(Superblock::decode(&sb.encode()).unwrap_err().0.contains("feature bit"));
        let mut sb = sample();
        sb.block_id = 5;
        assert!(Superblock::decode(&sb.encode()).unwrap_err().0.contains("feature bit"));
    }

    #[test]
    fn truncated_is_an_error() {
        assert!(Superblock::decode(&sample().encode()[..200]).is_err());
        assert!(Superblock::decode(&[]).is_err());
    }

    #[test]
    fn segment_arithmetic() {
        let sb = sample();
        assert_eq!(sb.segment_start(SegmentNo(2)), MetaBlock(256 + 512));
        assert_eq!(sb.segment_of(MetaBlock(256 + 511)), Some(SegmentNo(1)));
        assert_eq!(sb.segment_of(MetaBlock(10)), None);
        assert_eq!(sb.segment_of(MetaBlock(256 + 19 * 256)), None);
    }

    #[test]
    fn the_raw_offsets_of_metadump_are_the_encoders() {
        let mut sb = sample();
        sb.incompat = 0x1234_5678;
        let b = sb.encode();
        assert_eq!(super::super::raw::u16_at(&b, super::super::raw::MINOR_AT), Some(sb.minor));
        assert_eq!(super::super::raw::u64_at(&b, super::super::raw::SUPER_INCOMPAT_AT), Some(0x1234_5678));
    }
}
