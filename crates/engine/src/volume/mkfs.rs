//! Creating a volume: geometry, superblocks, the root directory and the
//! first checkpoint.

use std::sync::Arc;

use super::{MkfsOptions, Volume};
use crate::device::{self, BlockDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::format::checkpoint::{MAX_INDEX_BLOCKS, MAX_INDEX_BLOCKS_SPARSE, index_blocks_for, index_entries_bound};
use crate::format::superblock::{
    CHECKPOINT_SLOTS, FORMAT_MAJOR, FORMAT_MINOR, MAX_INLINE_DATA, Role, SUPER_MAGIC, Superblock,
};
use crate::meta_log::Log;
use crate::namespace::inode::NewInode;
use crate::namespace::{Fs, FsConfig};
use crate::types::{BLOCK_SIZE, FileKind, InodeNo};

/// Fewest segments a meta-data device may have.
pub const MIN_SEGMENTS: u32 = 16;
/// Smallest data device, in blocks (1 MiB).
pub const MIN_DATA_BLOCKS: u64 = 256;

/// Says what a device already holds, if it recognises it, as a noun
/// phrase ("an XFS file system", "swap space").
///
/// # Errors
/// The device cannot be read.
pub fn probe_existing(dev: &dyn BlockDevice) -> Result<Option<&'static str>> {
    if dev.block_count() == 0 {
        return Ok(None);
    }
    let head = device::read(dev, DeviceRole::Meta, 0, 1)?;
    if head[..4] == SUPER_MAGIC.to_le_bytes() {
        return Ok(Some("a DualFS file system"));
    }
    if &head[..4] == b"XFSB" {
        return Ok(Some("an XFS file system"));
    }
    if head[1080..1082] == [0x53, 0xEF] {
        return Ok(Some("an ext2/3/4 file system"));
    }
    // mkswap's signature ends the first page (4 KiB here; old or new style).
    if &head[4086..4096] == b"SWAPSPACE2" || &head[4086..4096] == b"SWAP-SPACE" {
        return Ok(Some("swap space"));
    }
    if head[..6] == *b"LUKS\xba\xbe" {
        return Ok(Some("a LUKS encrypted volume"));
    }
    if dev.block_count() > 16 {
        let b = device::read(dev, DeviceRole::Meta, 16, 1)?;
        if &b[64..72] == b"_BHRfS_M" {
            return Ok(Some("a btrfs file system"));
        }
    }
    Ok(None)
}

/// Where a new volume's UUIDs and hash key come from: random, or (for
/// replayable tests) a splitmix64 sequence from a seed.
fn identity_source(seed: Option<u64>) -> impl FnMut() -> [u8; 16] {
    let mut state = seed;
    move || match &mut state {
        None => *uuid::Uuid::new_v4().as_bytes(),
        Some(s) => {
            let mut next = || {
                *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = *s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^ (z >> 31)
            };
            let mut out = [0u8; 16];
            out[..8].copy_from_slice(&next().to_le_bytes());
            out[8..].copy_from_slice(&next().to_le_bytes());
            out
        }
    }
}

impl Volume {
    /// Formats `meta` and `data` as a new DualFS volume.
    ///
    /// # Errors
    /// A device is too small or already holds a file system (unless
    /// `force`), or I/O fails.
    pub fn format(meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>, opts: &MkfsOptions) -> Result<()> {
        if !(128..=65536).contains(&opts.segment_blocks) {
            return Err(Error::Invalid("segment size must be 128 to 65536 blocks (512 KiB to 256 MiB)"));
        }
        if opts.group_blocks < 64 || !opts.group_blocks.is_multiple_of(64) {
            return Err(Error::Invalid("data group size must be a positive multiple of 64 blocks"));
        }
        if opts.meta_mirror && !opts.fsync_log {
            return Err(Error::Invalid("a meta-data mirror needs format 1.10 (not with the fsync log off)"));
        }
        if opts.inline_max > MAX_INLINE_DATA {
            return Err(Error::Invalid("inline limit too large (at most 3072 bytes)"));
        }
        let seg = u64::from(opts.segment_blocks);
        let meta_blocks = meta.block_count();
        let segment_count = (meta_blocks.saturating_sub(seg) / seg).min(u64::from(u32::MAX)) as u32;
        if segment_count < MIN_SEGMENTS {
            return Err(Error::WrongVolume(format!(
                "the meta-data device is too small: {} KiB holds {segment_count} segments of {} KiB, at least {MIN_SEGMENTS} are needed ({} KiB)",
                meta_blocks * 4,
                seg * 4,
                (u64::from(MIN_SEGMENTS) + 1) * seg * 4
            )));
        }
        let data_blocks = data.block_count();
        if data_blocks < MIN_DATA_BLOCKS {
            return Err(Error::WrongVolume(format!(
                "the data device is too small: {} KiB, at least {} KiB are needed",
                data_blocks * 4,
                MIN_DATA_BLOCKS * 4
            )));
        }
        if !opts.force {
            for (dev, role) in [(&meta, DeviceRole::Meta), (&data, DeviceRole::Data)] {
                if let Some(fs) = probe_existing(dev.as_ref())? {
                    return Err(Error::Busy(format!("the {role} already holds {fs} (use --force to overwrite it)")));
                }
            }
        }
        let mut label = [0u8; 64];
        let mut end = opts.label.len().min(64);
        while !opts.label.is_char_boundary(end) {
            end -= 1;
        }
        label[..end].copy_from_slice(&opts.label.as_bytes()[..end]);
        let mut identity = identity_source(opts.identity_seed);
        let sb = Superblock {
            role: Role::Meta,
            major: FORMAT_MAJOR,
            minor: FORMAT_MINOR,
            compat: 0,
            ro_compat: 0,
            // Snapshots and clones are on from the start: setting the bits
            // later means rewriting both superblocks in place, whose torn
            // write a crash could leave (a volume of an older mkfs still
            // gets them that way, `Volume::mark_features`). Off with the
            // fsync log: such a volume is made for older readers.
            incompat: if opts.fsync_log {
                crate::format::superblock::INCOMPAT_FSYNC_LOG
                    | crate::format::superblock::INCOMPAT_SNAPSHOTS
                    | crate::format::superblock::INCOMPAT_CLONES
                    | crate::format::superblock::INCOMPAT_INDEX_RUNS
                    | crate::format::superblock::INCOMPAT_INODE_FLAGS
                    | crate::format::superblock::INCOMPAT_SPARSE_IFILE
                    | crate::format::superblock::INCOMPAT_META_REDUNDANCY
                    | crate::format::superblock::INCOMPAT_SNAPSHOT_RECORDS
            } else {
                0
            },
            volume_uuid: identity(),
            meta_uuid: identity(),
            data_uuid: identity(),
            segment_blocks: opts.segment_blocks,
            meta_blocks: seg + u64::from(segment_count) * seg,
            data_blocks,
            group_blocks: opts.group_blocks,
            group_count: data_blocks.div_ceil(u64::from(opts.group_blocks)) as u32,
            segment_count,
            first_segment_block: seg,
            inline_max: opts.inline_max,
            hash_key: identity(),
            created: opts.now,
            label,
            mount_options: [0; crate::format::superblock::MOUNT_OPTIONS_BYTES],
            block_id: 0,
            meta_copies: if opts.meta_mirror && opts.fsync_log { 2 } else { 0 },
            mirror_state: 0,
            mirror_generation: 0,
        };
        let index_blocks = index_blocks_for(u64::from(segment_count), u64::from(sb.group_count), data_blocks, 1, 1);
        let max = if sb.sparse_ifile() { MAX_INDEX_BLOCKS_SPARSE } else { MAX_INDEX_BLOCKS };
        if index_entries_bound(index_blocks, sb.segment_blocks, sb.index_runs()) > max {
            return Err(Error::WrongVolume(format!(
                "the data device is too large: its IFile needs {index_blocks} index blocks, more than one checkpoint \
                 can name with segments of {} KiB",
                seg * 4
            )));
        }
        // Stale checkpoints of an earlier volume on the same device must not
        // be mistaken for this one's.
        let zero = vec![0u8; BLOCK_SIZE];
        for slot in CHECKPOINT_SLOTS {
            device::write(meta.as_ref(), DeviceRole::Meta, slot.0, &zero)?;
        }
        device::write(meta.as_ref(), DeviceRole::Meta, 0, &sb.encode())?;
        device::write(data.as_ref(), DeviceRole::Data, 0, &Superblock { role: Role::Data, ..sb.clone() }.encode())?;
        device::flush(data.as_ref(), DeviceRole::Data)?;
        device::flush(meta.as_ref(), DeviceRole::Meta)?;

        let log = Log::fresh(sb, meta.clone(), data.clone());
        let mut fs = Fs::new(log, FsConfig::default());
        let root = fs.new_inode(
            InodeNo::ROOT,
            NewInode { kind: FileKind::Directory, perm: 0o755, uid: 0, gid: 0, rdev: 0 },
            opts.now,
        )?;
        debug_assert_eq!(root, InodeNo::ROOT);
        if let Some(s) = fs.log.seal(Vec::new(), opts.now)? {
            s.write(&meta, &data)?;
            fs.log.complete(&s);
        }
        let c = fs.log.seal_checkpoint(opts.now)?;
        c.write(&meta, &data)?;
        fs.log.complete_checkpoint(&c);
        Ok(())
    }
}
