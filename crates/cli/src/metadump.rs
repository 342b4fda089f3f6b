//! `dualfs metadump` and `dualfs metarestore`: a volume's meta-data, without
//! file contents and (by default) without names, in one file a developer
//! can turn back into a mountable pair (e2image -Q, xfs_metadump).
//!
//! The dump copies blocks as they are: the volume need not mount, nor its
//! log decode. With obfuscation, [`crate::obfuscate`] rewrites the blocks
//! that hold names and inline data; the CRCs that cover a rewritten
//! block's CRC are resealed here, in the order the log chains them (body
//! checksum, descriptor checksum, the next descriptor's `prev_crc`, the
//! checkpoint's `log_prev_crc`), but only where they verified before: a
//! damaged volume restores to the same damage. Fsync descriptors hold
//! names in their records, across descriptor blocks, so they are rewritten
//! here whole, with their raw data copies zeroed. The dump format is in
//! docs/FORMAT.md, section 5.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, IsTerminal, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use dualfs_engine::device::BlockDevice;
use dualfs_engine::format::block::{BlockKind, HEADER_LEN};
use dualfs_engine::format::checkpoint::CHECKPOINT_MAGIC;
use dualfs_engine::format::checksum::{self, crc32c};
use dualfs_engine::format::descriptor::PsKind;
use dualfs_engine::format::raw::{self, u32_at, u64_at};
use dualfs_engine::format::superblock::{INCOMPAT_SCANNED_NAMES, Role, SUPER_MAGIC, Superblock};
use dualfs_engine::types::BLOCK_BYTES;

use crate::args::{MetadumpArgs, MetarestoreArgs};
use crate::devices::{Access, open_pair};
use crate::obfuscate::{Obfuscator, Outcome, zeros_with_crc};
use crate::words::{human_bytes, uuid};

/// `"DUALDUMP"`: the dump's magic.
const DUMP_MAGIC: &[u8; 8] = b"DUALDUMP";
/// The dump format's version.
const DUMP_VERSION: u32 = 1;
/// Header flag: names and inline data were replaced.
const FLAG_OBFUSCATED: u32 = 1;
/// Header bytes.
const HEADER_BYTES: usize = 64;
/// Run header bytes.
const RUN_BYTES: usize = 24;
/// Longest run: blocks read and written at a time.
const RUN_MAX: usize = 256;
/// Run device codes.
const RUN_END: u8 = 0;
const RUN_META: u8 = 1;
const RUN_DATA: u8 = 2;
const BS: usize = BLOCK_BYTES as usize;
/// The smallest devices mkfs makes (17 segments of at least one block; 256
/// data blocks): a dump naming less is damaged.
const MIN_META_BYTES: u64 = 17 * BLOCK_BYTES;
const MIN_DATA_BYTES: u64 = 256 * BLOCK_BYTES;

/// The dump's header.
struct Header {
    flags: u32,
    meta_bytes: u64,
    data_bytes: u64,
    volume_uuid: [u8; 16],
}

impl Header {
    fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[..8].copy_from_slice(DUMP_MAGIC);
        h[8..12].copy_from_slice(&DUMP_VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&self.flags.to_le_bytes());
        h[16..24].copy_from_slice(&self.meta_bytes.to_le_bytes());
        h[24..32].copy_from_slice(&self.data_bytes.to_le_bytes());
        h[32..48].copy_from_slice(&self.volume_uuid);
        checksum::seal(&mut h, 60);
        h
    }

    fn decode(h: &[u8; HEADER_BYTES]) -> Result<Header> {
        if &h[..8] != DUMP_MAGIC {
            bail!("not a DualFS meta-data dump (no DUALDUMP magic)");
        }
        if !checksum::verify(h, 60) {
            bail!("the dump's header is damaged (checksum mismatch)");
        }
        let version = u32_at(h, 8).unwrap_or(0);
        if version != DUMP_VERSION {
            bail!("the dump is of format version {version}; this dualfs reads version {DUMP_VERSION}");
        }
        let mut volume_uuid = [0u8; 16];
        volume_uuid.copy_from_slice(&h[32..48]);
        Ok(Header {
            flags: u32_at(h, 12).unwrap_or(0),
            meta_bytes: u64_at(h, 16).unwrap_or(0),
            data_bytes: u64_at(h, 24).unwrap_or(0),
            volume_uuid,
        })
    }
}

fn run_header(device: u8, first: u64, count: u32, data_crc: u32) -> [u8; RUN_BYTES] {
    let mut r = [0u8; RUN_BYTES];
    r[0] = device;
    r[4..8].copy_from_slice(&count.to_le_bytes());
    r[8..16].copy_from_slice(&first.to_le_bytes());
    r[16..20].copy_from_slice(&data_crc.to_le_bytes());
    checksum::seal(&mut r, 20);
    r
}

/// Writes runs of non-zero blocks.
struct RunWriter<W: Write> {
    out: W,
    device: u8,
    first: u64,
    buf: Vec<u8>,
    runs: u64,
    blocks: u64,
}

impl<W: Write> RunWriter<W> {
    fn block(&mut self, address: u64, block: &[u8]) -> Result<()> {
        let zero = block.iter().all(|&b| b == 0);
        let contiguous = self.first + (self.buf.len() / BS) as u64 == address;
        if !self.buf.is_empty() && (zero || !contiguous || self.buf.len() / BS >= RUN_MAX) {
            self.finish_run()?;
        }
        if !zero {
            if self.buf.is_empty() {
                self.first = address;
            }
            self.buf.extend_from_slice(block);
        }
        Ok(())
    }

    fn finish_run(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let count = (self.buf.len() / BS) as u32;
        self.out.write_all(&run_header(self.device, self.first, count, crc32c(&self.buf)))?;
        self.out.write_all(&self.buf)?;
        self.runs += 1;
        self.blocks += u64::from(count);
        self.buf.clear();
        Ok(())
    }
}

/// The superblock with [`INCOMPAT_SCANNED_NAMES`] set (format 1.2), when
/// it verifies; a damaged one stays as it is.
fn mark_scanned(block: &mut [u8]) {
    if u32_at(block, 0) != Some(SUPER_MAGIC) || !raw::verifies(block) {
        return;
    }
    let (Some(incompat), Some(minor)) = (u64_at(block, raw::SUPER_INCOMPAT_AT), raw::u16_at(block, raw::MINOR_AT))
    else {
        return;
    };
    raw::put_u64(block, raw::SUPER_INCOMPAT_AT, incompat | INCOMPAT_SCANNED_NAMES);
    raw::put_u16(block, raw::MINOR_AT, minor.max(2));
    raw::reseal(block);
}

fn read_block(dev: &dyn BlockDevice, address: u64, what: &str) -> Result<Vec<u8>> {
    let mut b = vec![0u8; BS];
    dev.read_blocks(address, &mut b).with_context(|| format!("cannot read block {address} of the {what}"))?;
    Ok(b)
}

/// Refuses a pair that holds no DualFS superblock, or holds it the wrong
/// way round; returns what the superblocks say (either may be damaged).
fn identify(meta: &dyn BlockDevice, data: &dyn BlockDevice, args: &MetadumpArgs) -> Result<Option<Superblock>> {
    let m = read_block(meta, 0, "meta-data device")?;
    let d = if data.block_count() > 0 { read_block(data, 0, "data device")? } else { vec![0; BS] };
    let (ms, ds) = (Superblock::decode(&m), Superblock::decode(&d));
    if u32_at(&m, 0) != Some(SUPER_MAGIC) && u32_at(&d, 0) != Some(SUPER_MAGIC) {
        bail!(
            "neither {} nor {} holds a DualFS superblock: they are not a DualFS volume",
            args.meta.display(),
            args.data.display()
        );
    }
    if let Ok(sb) = &ms
        && sb.role != Role::Meta
    {
        bail!("{} is a DualFS data device: give the meta-data device first", args.meta.display());
    }
    if let Ok(sb) = &ds
        && sb.role != Role::Data
    {
        bail!("{} is a DualFS meta-data device: give the data device second", args.data.display());
    }
    if let (Ok(a), Ok(b)) = (&ms, &ds)
        && a.volume_uuid != b.volume_uuid
    {
        bail!("{} and {} belong to different DualFS volumes", args.meta.display(), args.data.display());
    }
    Ok(ms.ok().or(ds.ok()))
}

/// The first descriptor blocks of the device: (address, sequence, blocks).
type Descriptors = Vec<(u64, u64, u64)>;

/// Reseals the descriptors and checkpoints that cover rewritten blocks'
/// CRCs, and rewrites fsync descriptors whole (their records hold names,
/// their data copies are zeroed); returns the replaced blocks.
fn reseal_log(
    meta: &dyn BlockDevice,
    ob: &mut Obfuscator,
    stored: &[u32],
    new_crcs: &HashMap<u64, u32>,
    mut descriptors: Descriptors,
) -> Result<HashMap<u64, Vec<u8>>> {
    let mut replaced = HashMap::new();
    // (sequence, old desc_crc) → new desc_crc, for the next one's chain.
    let mut chain: HashMap<(u64, u32), u32> = HashMap::new();
    // A zeroed data copy's checksum, as an fsync record names it.
    let zero_crc = crc32c(&[0u8; BS]);
    descriptors.sort_by_key(|&(_, seq, _)| seq);
    for (address, seq, n) in descriptors {
        let mut blocks = Vec::new();
        let mut payloads = Vec::new();
        for i in 0..n {
            let b = read_block(meta, address + i, "meta-data device")?;
            let sound = raw::header(&b)
                .filter(|h| raw::verifies(&b) && h.is(BlockKind::Descriptor) && h.seq == seq && u64::from(h.aux) == i);
            let Some(payload) = sound.and_then(|h| raw::payload(&b, &h)) else { break };
            payloads.extend_from_slice(payload);
            blocks.push(b);
        }
        // An fsync descriptor left out here is dropped by the obfuscator.
        if (blocks.len() as u64) < n || payloads.len() < raw::DESC_STREAM_AT + raw::STREAM_FIXED_LEN {
            continue;
        }
        let (Some(stream_len), Some(old_desc)) =
            (u32_at(&payloads, raw::DESC_STREAM_LEN_AT), u32_at(&payloads, raw::DESC_CRC_AT))
        else {
            continue;
        };
        let stream_len = stream_len as usize;
        if payloads.len() != raw::DESC_STREAM_AT + stream_len || stream_len < raw::STREAM_FIXED_LEN {
            continue;
        }
        let mut s = payloads[raw::DESC_STREAM_AT..].to_vec();
        if crc32c(&s) != old_desc {
            continue;
        }
        // The stream's fixed part is there (its length was checked).
        let field = |s: &[u8], at| u32_at(s, at).unwrap_or(0);
        let fsync = s[raw::STREAM_KIND_AT] == PsKind::Fsync.code();
        let prev = field(&s, raw::STREAM_PREV_CRC_AT);
        let body = field(&s, raw::STREAM_BODY_CRC_AT);
        let first_body = address + n;
        let new_body = if fsync {
            // Raw data blocks: crc(x) is CRC32C of the block (3.4.7).
            let copies = u64::from(field(&s, raw::STREAM_BLOCKS_AT));
            let mut raw = Vec::new();
            for a in first_body..(first_body + copies).min(meta.block_count()) {
                raw.push(read_block(meta, a, "meta-data device")?);
            }
            let old: Vec<u32> = raw.iter().map(|b| crc32c(b)).collect();
            let Some(wanted) = ob.fsync_stream(&mut s, &old, zero_crc) else { continue };
            // A copy that failed its record's checksum fails it again with
            // the same numbers: zeros but for 4 bytes that give its CRC.
            let mut new = Vec::new();
            for (i, (b, &was)) in raw.iter().zip(&old).enumerate() {
                let a = first_body + i as u64;
                if wanted.get(i) == Some(&was) || !ob.is_copy(a, b) {
                    new.push(zero_crc);
                } else {
                    replaced.insert(a, zeros_with_crc(was));
                    new.push(was);
                }
            }
            let bytes = |c: &[u32]| -> Vec<u8> { c.iter().flat_map(|c| c.to_le_bytes()).collect() };
            if old.len() as u64 == copies && crc32c(&bytes(&old)) == body { crc32c(&bytes(&new)) } else { body }
        } else {
            let body_blocks =
                u64::from(field(&s, raw::STREAM_BLOCKS_AT)) + u64::from(field(&s, raw::STREAM_INODE_BLOCKS_AT));
            let crcs = |pick: &dyn Fn(u64) -> u32| -> Option<u32> {
                let mut bytes = Vec::new();
                for a in first_body..first_body + body_blocks {
                    stored.get(usize::try_from(a).ok()?)?;
                    bytes.extend_from_slice(&pick(a).to_le_bytes());
                }
                Some(crc32c(&bytes))
            };
            let old_body = crcs(&|a| stored[a as usize]);
            if old_body == Some(body) {
                crcs(&|a| new_crcs.get(&a).copied().unwrap_or(stored[a as usize])).unwrap_or(body)
            } else {
                body
            }
        };
        let new_prev = seq.checked_sub(1).and_then(|p| chain.get(&(p, prev))).copied().unwrap_or(prev);
        if !fsync && new_prev == prev && new_body == body {
            continue;
        }
        raw::put_u32(&mut s, raw::STREAM_PREV_CRC_AT, new_prev);
        raw::put_u32(&mut s, raw::STREAM_BODY_CRC_AT, new_body);
        let new_desc = crc32c(&s);
        chain.insert((seq, old_desc), new_desc);
        // The payloads again, cut as they were: desc_crc, stream_len, then
        // the stream (only an fsync stream changed past its fixed fields).
        let mut bytes = new_desc.to_le_bytes().to_vec();
        bytes.extend_from_slice(&payloads[4..8]);
        bytes.extend_from_slice(&s);
        let mut at = 0;
        for (i, mut b) in blocks.into_iter().enumerate() {
            // Each block was read sound above: its header is there.
            let len = raw::header(&b).map_or(0, |h| h.payload_len);
            if b[HEADER_LEN..HEADER_LEN + len] != bytes[at..at + len] {
                b[HEADER_LEN..HEADER_LEN + len].copy_from_slice(&bytes[at..at + len]);
                raw::reseal(&mut b);
                replaced.insert(address + i as u64, b);
            } else if fsync {
                // Unchanged, but kept: the obfuscator drops fsync
                // descriptor blocks the dump does not give it.
                replaced.insert(address + i as u64, b);
            }
            at += len;
        }
    }
    for slot in [1u64, 2] {
        let mut b = read_block(meta, slot, "meta-data device")?;
        if u32_at(&b, 0) != Some(CHECKPOINT_MAGIC) || !raw::verifies(&b) {
            continue;
        }
        let (Some(log_seq), Some(prev)) =
            (u64_at(&b, raw::CHECKPOINT_LOG_SEQ_AT), u32_at(&b, raw::CHECKPOINT_PREV_CRC_AT))
        else {
            continue;
        };
        if let Some(&new) = log_seq.checked_sub(1).and_then(|p| chain.get(&(p, prev))) {
            raw::put_u32(&mut b, raw::CHECKPOINT_PREV_CRC_AT, new);
            raw::reseal(&mut b);
            replaced.insert(slot, b);
        }
    }
    Ok(replaced)
}

/// Blocks of the meta-data device read at a time.
const SWEEP: u64 = 256;

/// Calls `each(address, block)` for every block of the device.
fn sweep(dev: &dyn BlockDevice, each: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>) -> Result<()> {
    let total = dev.block_count();
    let mut buf = vec![0u8; SWEEP as usize * BS];
    let mut at = 0;
    while at < total {
        let n = SWEEP.min(total - at);
        let chunk = &mut buf[..n as usize * BS];
        dev.read_blocks(at, chunk)
            .with_context(|| format!("cannot read blocks {at}..{} of the meta-data device", at + n))?;
        for (i, block) in chunk.chunks_mut(BS).enumerate() {
            each(at + i as u64, block)?;
        }
        at += n;
    }
    Ok(())
}

/// Where the dump goes: a new file (removed again if the dump fails) or
/// standard output.
fn open_out(args: &MetadumpArgs) -> Result<Box<dyn Write>> {
    if args.out.as_os_str() == "-" {
        if std::io::stdout().is_terminal() {
            bail!("the dump is binary and standard output is a terminal: give a file name, or pipe it");
        }
        return Ok(Box::new(std::io::stdout().lock()));
    }
    for device in [&args.meta, &args.data] {
        if same_file(&args.out, device) {
            bail!("{} is the volume's device {}: the dump must go elsewhere", args.out.display(), device.display());
        }
    }
    crate::itself::Itself::devices(&args.meta, &args.data).refuse(&args.out, "the dump")?;
    if let Ok(m) = std::fs::metadata(&args.out)
        && m.file_type().is_block_device()
    {
        bail!("{} is a block device: the dump is a file", args.out.display());
    }
    let mut o = OpenOptions::new();
    o.write(true);
    if args.force {
        o.create(true).truncate(true);
    } else {
        o.create_new(true);
    }
    let f = o.open(&args.out).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow!("{} exists: give another name, or --force to overwrite it", args.out.display())
        } else {
            anyhow!("cannot create {}: {e}", args.out.display())
        }
    })?;
    Ok(Box::new(f))
}

/// Whether two paths name one existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Runs `dualfs metadump`.
///
/// # Errors
/// Not a DualFS volume, unreadable devices, an unwritable OUT.
pub fn metadump(args: &MetadumpArgs) -> Result<()> {
    let (meta, data) = open_pair(&args.meta, &args.data, Access::Shared)?;
    let sb = identify(meta.as_ref(), data.as_ref(), args)?;
    let obfuscate = !args.no_obfuscate;
    let to_file = args.out.as_os_str() != "-";
    let out = open_out(args)?;
    let result = write_dump(meta.as_ref(), data.as_ref(), sb.as_ref(), obfuscate, out);
    match result {
        Ok(summary) => {
            if to_file {
                say!("{summary}");
            } else {
                eprintln!("dualfs: {summary}");
            }
            Ok(())
        }
        Err(e) => {
            if to_file && std::fs::remove_file(&args.out).is_ok() {
                eprintln!("dualfs: removed the incomplete dump {}", args.out.display());
            }
            Err(e)
        }
    }
}

fn write_dump(
    meta: &dyn BlockDevice,
    data: &dyn BlockDevice,
    sb: Option<&Superblock>,
    obfuscate: bool,
    out: Box<dyn Write>,
) -> Result<String> {
    let key = *uuid::Uuid::new_v4().as_bytes();
    let mut ob = Obfuscator::new(key);
    let mut replaced = HashMap::new();
    let mut fsync_counts = crate::obfuscate::Counts::default();
    if obfuscate {
        // First sweep: which blobs are symlink targets, every block's
        // stored CRC, where descriptors start.
        let mut stored = vec![0u32; usize::try_from(meta.block_count())?];
        let mut descriptors = Vec::new();
        sweep(meta, &mut |a, b| {
            ob.learn(a, b);
            stored[a as usize] = raw::stored_crc(b).unwrap_or(0);
            // Descriptors of kinds the obfuscator drops are not resealed.
            let known_kind = [PsKind::Normal, PsKind::Checkpoint, PsKind::Fsync]
                .iter()
                .any(|k| b.get(HEADER_LEN + raw::DESC_STREAM_AT + raw::STREAM_KIND_AT) == Some(&k.code()));
            if let Some(h) = raw::header(b)
                && h.is(BlockKind::Descriptor)
                && h.aux == 0
                && known_kind
                && raw::verifies(b)
            {
                // A first descriptor block's name is its block count.
                descriptors.push((a, h.seq, h.name));
            }
            Ok(())
        })?;
        // Second sweep: the new CRCs (names are chosen here, once).
        let mut new_crcs = HashMap::new();
        sweep(meta, &mut |a, b| {
            if a > 2
                && let Outcome::Resealed(_, new) = ob.rewrite(a, b)
            {
                new_crcs.insert(a, new);
            }
            Ok(())
        })?;
        // What the fsync records held is counted here, the rest by the
        // last sweep.
        ob.counts = Default::default();
        replaced = reseal_log(meta, &mut ob, &stored, &new_crcs, descriptors)?;
        fsync_counts = std::mem::take(&mut ob.counts);
    }
    let header = Header {
        flags: if obfuscate { FLAG_OBFUSCATED } else { 0 },
        meta_bytes: meta.block_count() * BLOCK_BYTES,
        data_bytes: data.block_count() * BLOCK_BYTES,
        volume_uuid: sb.map_or([0; 16], |s| s.volume_uuid),
    };
    let mut w = RunWriter { out: BufWriter::new(out), device: RUN_META, first: 0, buf: Vec::new(), runs: 0, blocks: 0 };
    w.out.write_all(&header.encode())?;
    sweep(meta, &mut |a, b| {
        if let Some(r) = replaced.get(&a) {
            b.copy_from_slice(r);
        } else if obfuscate && a == 0 {
            mark_scanned(b);
        } else if obfuscate && a > 2 {
            ob.rewrite(a, b);
        }
        w.block(a, b)
    })?;
    w.finish_run()?;
    let meta_blocks = w.blocks;
    if data.block_count() > 0 {
        let mut d = read_block(data, 0, "data device")?;
        if obfuscate {
            mark_scanned(&mut d);
        }
        w.device = RUN_DATA;
        w.block(0, &d)?;
        w.finish_run()?;
    }
    let runs = w.runs;
    w.out.write_all(&run_header(RUN_END, runs, 0, 0))?;
    w.out.flush()?;
    let mut summary = format!(
        "dumped {} of meta-data ({} blocks) and the data device's superblock",
        human_bytes(meta_blocks * BLOCK_BYTES),
        meta_blocks
    );
    if obfuscate {
        let (c, f) = (&ob.counts, &fsync_counts);
        summary.push_str(&format!(
            "; replaced {} entry names, {} xattr names and {} symlink targets, zeroed {} inline contents and values",
            c.names + f.names,
            c.xattrs + f.xattrs,
            c.symlinks + f.symlinks,
            c.zeroed + f.zeroed
        ));
        if c.copies > 0 {
            summary.push_str(&format!(" and {} data copies of fsync records", c.copies));
        }
        if c.trees > 0 {
            summary.push_str(&format!("; replaced {} snapshot and tree names", c.trees));
        }
        if c.damaged + c.unknown + c.cleared > 0 {
            summary.push_str(&format!(
                "; dropped the contents of {} damaged blocks, {} of unknown kinds, cleared {} that were not meta-data",
                c.damaged, c.unknown, c.cleared
            ));
        }
    } else {
        summary.push_str(" (names and inline data kept: --no-obfuscate)");
    }
    Ok(summary)
}

/// A target of metarestore: opened for writing, refused when in use or
/// holding a file system (unless --force), sized as the dump says.
fn open_target(path: &Path, bytes: u64, force: bool, role: &str) -> Result<File> {
    crate::claim::refuse_in_use(path)?;
    if path.exists() {
        let dev = dualfs_engine::device::FileDevice::open(path, true, false)
            .with_context(|| format!("cannot open {} ({role})", path.display()))?;
        if !force && let Some(fs) = dualfs_engine::volume::probe_existing(&dev)? {
            bail!("{} ({role}) already holds {fs} (use --force to overwrite it)", path.display());
        }
    }
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("cannot open {} ({role}) for writing", path.display()))?;
    if f.metadata()?.file_type().is_block_device() {
        let size = f.seek(SeekFrom::End(0))?;
        if size < bytes {
            bail!("{} ({role}) has {} but the dump needs {}", path.display(), human_bytes(size), human_bytes(bytes));
        }
        zero_device(&f, bytes).with_context(|| format!("cannot clear {} ({role})", path.display()))?;
    } else {
        // Truncating first makes every block not in the dump read as zeros.
        f.set_len(0)?;
        f.set_len(bytes).with_context(|| format!("cannot size {} to {bytes} bytes", path.display()))?;
    }
    Ok(f)
}

/// Zeros the first `bytes` of a block device (BLKZEROOUT, or writes).
#[allow(unsafe_code)]
fn zero_device(f: &File, bytes: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    const BLKZEROOUT: libc::c_ulong = 0x127f;
    let range: [u64; 2] = [0, bytes];
    // SAFETY: BLKZEROOUT reads two u64 (start, length) from the pointer,
    // which points at such an array alive for the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), BLKZEROOUT, range.as_ptr()) };
    if r == 0 {
        return Ok(());
    }
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(zeros.len() as u64) as usize;
        f.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Runs `dualfs metarestore`.
///
/// # Errors
/// Not a dump, a damaged or cut dump, targets in use or holding a file
/// system (without --force), I/O errors.
pub fn metarestore(args: &MetarestoreArgs) -> Result<()> {
    for device in [&args.meta, &args.data] {
        if same_file(&args.dump, device) {
            bail!("{} is the dump itself: restore it to other files", device.display());
        }
    }
    let input: Box<dyn Read> = if args.dump.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(File::open(&args.dump).with_context(|| format!("cannot open {}", args.dump.display()))?)
    };
    let mut input = BufReader::new(input);
    let mut h = [0u8; HEADER_BYTES];
    input
        .read_exact(&mut h)
        .map_err(|_| anyhow!("{} is not a DualFS meta-data dump (too short)", args.dump.display()))?;
    let header = Header::decode(&h).with_context(|| format!("{}", args.dump.display()))?;
    for (bytes, least, what) in
        [(header.meta_bytes, MIN_META_BYTES, "meta-data device"), (header.data_bytes, MIN_DATA_BYTES, "data device")]
    {
        if bytes < least || !bytes.is_multiple_of(BLOCK_BYTES) {
            bail!(
                "the dump is damaged: its header gives the {what} {bytes} bytes, which no DualFS {what} has (a \
                 whole number of 4 KiB blocks, at least {}): nothing was restored",
                human_bytes(least)
            );
        }
    }
    if args.meta == args.data {
        bail!("{} is given twice: DualFS needs two different devices or image files", args.meta.display());
    }
    // One file under two names must be refused before either is cleared.
    if args.meta.exists() && args.data.exists() {
        crate::devices::check_distinct(&args.meta, &args.data)?;
    }
    let meta = open_target(&args.meta, header.meta_bytes, args.force, "meta-data device")?;
    let data = open_target(&args.data, header.data_bytes, args.force, "data device")?;
    let mut runs = 0u64;
    let mut blocks = 0u64;
    loop {
        let mut r = [0u8; RUN_BYTES];
        input
            .read_exact(&mut r)
            .map_err(|_| anyhow!("the dump is cut short after {runs} runs: the devices are incomplete"))?;
        if !checksum::verify(&r, 20) {
            bail!("the dump is damaged (run {runs} has a bad checksum): the devices are incomplete");
        }
        let (device, count, first) = (r[0], u32_at(&r, 4).unwrap_or(0), u64_at(&r, 8).unwrap_or(0));
        if device == RUN_END {
            if first != runs {
                bail!("the dump ends after {runs} runs but says it holds {first}: the devices are incomplete");
            }
            break;
        }
        let (target, limit, what) = match device {
            RUN_META => (&meta, header.meta_bytes, "meta-data device"),
            RUN_DATA => (&data, header.data_bytes, "data device"),
            _ => bail!("the dump is damaged (run {runs} names device {device})"),
        };
        // Checked before the blocks are read (or memory given for them): a
        // run near 2^64 or past the device's end is damage, not a write.
        let end = first.checked_add(u64::from(count)).and_then(|e| e.checked_mul(BLOCK_BYTES));
        if end.is_none_or(|e| e > limit) || count == 0 || count as usize > RUN_MAX {
            bail!(
                "the dump is damaged (run {runs}, blocks {first}+{count}, lies past the end of the {what}, {} \
                 blocks): the devices are incomplete",
                limit / BLOCK_BYTES
            );
        }
        let mut buf = vec![0u8; count as usize * BS];
        input
            .read_exact(&mut buf)
            .map_err(|_| anyhow!("the dump is cut short in run {runs}: the devices are incomplete"))?;
        if Some(crc32c(&buf)) != u32_at(&r, 16) {
            bail!("the dump is damaged (run {runs}'s blocks fail their checksum): the devices are incomplete");
        }
        target.write_all_at(&buf, first * BLOCK_BYTES).with_context(|| format!("cannot write the {what}"))?;
        runs += 1;
        blocks += u64::from(count);
    }
    meta.sync_all().context("cannot flush the meta-data device")?;
    data.sync_all().context("cannot flush the data device")?;
    say!(
        "restored volume {} from {} ({} blocks): {} meta-data device, {} data device",
        uuid(&header.volume_uuid),
        args.dump.display(),
        blocks,
        human_bytes(header.meta_bytes),
        human_bytes(header.data_bytes)
    );
    if header.flags & FLAG_OBFUSCATED != 0 {
        say!("names were replaced and file contents read as zeros: mount it read-only (-o ro)");
    } else {
        say!("file contents read as zeros");
    }
    Ok(())
}
