//! `dualfs send`: the difference between two images of a volume (two
//! snapshots, or a snapshot and the live tree) as stream records
//! (DESIGN.md, "Send and receive"; FORMAT.md section 6).
//!
//! The cost follows what changed, not the volume: an inode-map block at the
//! same log address in both images holds the same entries, so its inodes
//! are skipped whole; an inode whose map entry names the same inode block
//! is the same record; and a file block mapped to the same data block in
//! both is the same bytes, since a block a snapshot holds is never
//! overwritten in place (`DataSpace::held`).

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::sync::Arc;

use super::{MountOptions, Volume};
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::inode::{Body, Extent, InodeRecord, Xattrs};
use crate::format::stream::{self, InodeAttrs, Record, SnapshotIdentity, StreamCounts, StreamHeader, WRITE_MAX};
use crate::meta_log::Log;
use crate::meta_log::mount::OpenReport;
use crate::types::{BLOCK_BYTES, FileKind, InodeNo};

/// Where the difference goes: a stream, or a check that wants none.
pub(crate) trait DiffSink {
    /// Takes the next record.
    ///
    /// # Errors
    /// The sink refuses it (a check that found a change) or cannot write it.
    fn record(&mut self, rec: Record) -> Result<()>;
}

/// What a send did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendReport {
    /// What the end record counts.
    pub counts: StreamCounts,
    /// Bytes of stream written.
    pub stream_bytes: u64,
    /// Inode-map blocks compared entry by entry (the rest were skipped whole).
    pub map_blocks_compared: u64,
    /// Inode records read and compared.
    pub inodes_compared: u64,
}

/// How two images are compared.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DiffOptions {
    /// Access times are no change (the receiver's check of its live tree:
    /// reading a mirror is not changing it).
    pub ignore_atime: bool,
}

/// Counters of a comparison.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DiffStats {
    pub map_blocks_compared: u64,
    pub inodes_compared: u64,
}

/// The stream sink: frames written to `out`, counted.
struct StreamSink<'a> {
    out: &'a mut dyn Write,
    counts: StreamCounts,
    bytes: u64,
}

impl StreamSink<'_> {
    fn put(&mut self, rec: &Record) -> Result<()> {
        let frame = stream::encode(rec);
        self.out.write_all(&frame).map_err(|e| Error::Stream(format!("writing the stream: {e}")))?;
        self.bytes += frame.len() as u64;
        Ok(())
    }
}

impl DiffSink for StreamSink<'_> {
    fn record(&mut self, rec: Record) -> Result<()> {
        match &rec {
            Record::Inode(_) => self.counts.inodes += 1,
            Record::Gone(_) => self.counts.gone += 1,
            Record::Write { data, .. } => self.counts.data_bytes += data.len() as u64,
            _ => {}
        }
        self.counts.records += 1;
        self.put(&rec)
    }
}

/// The identity a stream gives a snapshot of `log`'s volume.
fn identity(log: &Log, name: &str) -> Result<(SnapshotIdentity, crate::format::checkpoint::Checkpoint)> {
    let s = log.snapshots().iter().find(|s| s.name == name).ok_or_else(|| Error::NoSnapshot(name.to_string()))?;
    if s.writable {
        // It may become the live tree, and change, at the next mount.
        return Err(Error::SnapshotRefused(format!(
            "{name} is a writable tree, not a snapshot: mount it (-o clone={name}), snapshot it, and send the snapshot"
        )));
    }
    let id = SnapshotIdentity { id: s.id, checkpoint: s.checkpoint.number, created: s.created, name: s.name.clone() };
    Ok((id, s.checkpoint.clone()))
}

/// Opens the image a snapshot keeps, read-only (as
/// [`Volume::open_snapshot`], sharing one open of the live log).
fn open_image(
    live: &Log,
    report: &OpenReport,
    c: &crate::format::checkpoint::Checkpoint,
    meta: &Arc<dyn BlockDevice>,
    data: &Arc<dyn BlockDevice>,
    name: &str,
) -> Result<Volume> {
    let image = live.open_image(c)?;
    Volume::over_image(image, report.clone(), meta.clone(), data.clone(), name, MountOptions::default())
}

/// Writes the stream that brings a volume holding snapshot `from` of the
/// volume on `meta` and `data` (or an empty volume, without `from`) to
/// snapshot `to`. The live volume may be mounted meanwhile.
///
/// # Errors
/// No such snapshot, `from` is not older than `to`, a device fails, or
/// `out` does.
pub fn send(
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    from: Option<&str>,
    to: &str,
    out: &mut dyn Write,
) -> Result<SendReport> {
    let (live, report) = Log::open(meta.clone(), data.clone())?;
    let (target_id, target_ckpt) = identity(&live, to)?;
    let base = match from {
        Some(name) => {
            let (id, c) = identity(&live, name)?;
            if id.id >= target_id.id {
                return Err(Error::Stream(format!(
                    "snapshot {name} is not older than {to}: send --from the older one"
                )));
            }
            Some((id, c))
        }
        None => None,
    };
    let source = live.superblock().volume_uuid;
    let b = open_image(&live, &report, &target_ckpt, &meta, &data, to)?;
    let a = match &base {
        Some((id, c)) => Some(open_image(&live, &report, c, &meta, &data, &id.name)?),
        None => None,
    };
    drop(live);
    let header = StreamHeader { source, base: base.map(|(id, _)| id), target: target_id };
    out.write_all(&stream::prelude()).map_err(|e| Error::Stream(format!("writing the stream: {e}")))?;
    let mut sink = StreamSink { out, counts: StreamCounts::default(), bytes: stream::PRELUDE_LEN as u64 };
    sink.record(Record::Header(header))?;
    let stats = diff(a.as_ref(), &b, DiffOptions::default(), &mut sink)?;
    let counts = sink.counts;
    sink.put(&Record::End(counts))?;
    sink.out.flush().map_err(|e| Error::Stream(format!("writing the stream: {e}")))?;
    Ok(SendReport {
        counts,
        stream_bytes: sink.bytes,
        map_blocks_compared: stats.map_blocks_compared,
        inodes_compared: stats.inodes_compared,
    })
}

/// One inode-map block of an image: its durable address (0 when it is
/// dirty in memory, so that it never equals another's) and its entries.
fn map_block(vol: &Volume, b: usize, dirty: &HashSet<u32>) -> Result<(u64, Vec<crate::format::ifile::ImapEntry>)> {
    vol.with_fs(|fs| {
        // A block given back (a budget for the map) is read again.
        let first = (b * fs.log.ifile().inodes.per_block()) as u64;
        fs.log.map_entry(InodeNo(first))?;
        let t = &fs.log.ifile().inodes;
        let entries = if b < t.block_count() { t.block_entries(b as u32).to_vec() } else { Vec::new() };
        let at = if b < t.block_count() && !dirty.contains(&(b as u32)) { t.address(b as u32).0 } else { 0 };
        Ok((at, entries))
    })
}

fn dirty_map_blocks(vol: &Volume) -> HashSet<u32> {
    vol.with_fs(|fs| fs.log.ifile().inodes.dirty_blocks().into_iter().collect())
}

/// Sends to `sink` the records that turn image `a` (or an empty volume)
/// into image `b`, inode by inode in increasing number.
///
/// # Errors
/// A device fails, an image is damaged, or the sink refuses a record.
pub(crate) fn diff(a: Option<&Volume>, b: &Volume, opts: DiffOptions, sink: &mut dyn DiffSink) -> Result<DiffStats> {
    let mut stats = DiffStats::default();
    let len_of = |v: &Volume| v.with_fs(|fs| fs.log.ifile().inodes.len());
    let per = b.with_fs(|fs| fs.log.ifile().inodes.per_block());
    let len = len_of(b).max(a.map_or(0, len_of));
    let dirty_b = dirty_map_blocks(b);
    let dirty_a = a.map(dirty_map_blocks).unwrap_or_default();
    for block in 0..len.div_ceil(per) {
        let (at_b, entries_b) = map_block(b, block, &dirty_b)?;
        let (at_a, entries_a) = match a {
            Some(a) => map_block(a, block, &dirty_a)?,
            None => (0, Vec::new()),
        };
        if at_a != 0 && at_a == at_b {
            continue;
        }
        stats.map_blocks_compared += 1;
        for i in 0..entries_a.len().max(entries_b.len()) {
            let ino = InodeNo((block * per + i) as u64);
            if ino.0 == 0 {
                continue;
            }
            let ea = entries_a.get(i).filter(|e| e.in_use());
            let eb = entries_b.get(i).filter(|e| e.in_use());
            if let (Some(x), Some(y)) = (ea, eb)
                && x.address.0 != 0
                && x.address == y.address
                && x.generation == y.generation
            {
                continue;
            }
            if ea.is_none() && eb.is_none() {
                continue;
            }
            stats.inodes_compared += 1;
            let ra = match (a, ea) {
                (Some(a), Some(_)) => live_record(a, ino)?,
                _ => None,
            };
            let rb = if eb.is_some() { live_record(b, ino)? } else { None };
            diff_inode(a, b, ino, ra.as_ref(), rb.as_ref(), opts, sink)?;
        }
    }
    Ok(stats)
}

/// The record of `ino` in `vol` if the inode is part of the tree: an inode
/// with no links left (kept open when the image was taken) is not.
fn live_record(vol: &Volume, ino: InodeNo) -> Result<Option<InodeRecord>> {
    match vol.with_fs(|fs| fs.inode(ino).cloned()) {
        Ok(r) if r.nlink > 0 || ino == InodeNo::ROOT => Ok(Some(r)),
        Ok(_) | Err(Error::NotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The attributes a stream carries of record `r`.
#[must_use]
pub(crate) fn attrs_of(r: &InodeRecord) -> InodeAttrs {
    InodeAttrs {
        ino: r.ino,
        generation: r.generation,
        mode: r.mode,
        uid: r.uid,
        gid: r.gid,
        nlink: r.nlink,
        flags: r.flags,
        size: r.size,
        rdev: r.rdev,
        parent: r.parent,
        atime: r.atime,
        mtime: r.mtime,
        ctime: r.ctime,
        crtime: r.crtime,
        project: r.project,
    }
}

fn kind(r: &InodeRecord) -> Option<FileKind> {
    FileKind::from_mode(r.mode)
}

/// The records of one inode's change.
#[allow(clippy::too_many_arguments)]
fn diff_inode(
    a: Option<&Volume>,
    b: &Volume,
    ino: InodeNo,
    ra: Option<&InodeRecord>,
    rb: Option<&InodeRecord>,
    opts: DiffOptions,
    sink: &mut dyn DiffSink,
) -> Result<()> {
    let Some(rb) = rb else {
        if ra.is_some() {
            sink.record(Record::Gone(ino))?;
        }
        return Ok(());
    };
    // The same life of the number: otherwise the old one goes first and
    // the new one is sent whole. The root is always the same directory.
    let same = ra.filter(|ra| kind(ra) == kind(rb) && (ra.generation == rb.generation || ino == InodeNo::ROOT));
    if ra.is_some() && same.is_none() {
        sink.record(Record::Gone(ino))?;
    }
    let ra = same;
    if let Some(ra) = ra
        && ra == rb
        && !matches!(rb.body, Body::Tree(_))
        && !matches!(rb.xattrs, Xattrs::Tree(_))
    {
        // Moved by the cleaner, not changed: a record names all its
        // contents but its trees' nodes.
        return Ok(());
    }
    let va = a.filter(|_| ra.is_some());
    let mut content = Vec::new();
    let mut runs = Vec::new();
    match kind(rb) {
        Some(FileKind::Directory) => entry_records(va, b, ino, &mut content)?,
        Some(FileKind::Regular) => runs = data_plan(va, b, ra, rb, &mut content)?,
        Some(FileKind::Symlink) => {
            let tb = b.readlink(ino)?;
            let ta = match va {
                Some(va) => Some(va.readlink(ino)?),
                None => None,
            };
            if ta.as_ref() != Some(&tb) {
                content.push(Record::Symlink { target: tb });
            }
        }
        _ => {}
    }
    xattr_records(va, b, ino, &mut content)?;
    let attrs = attrs_of(rb);
    let attrs_same = ra.is_some_and(|ra| {
        let mut old = attrs_of(ra);
        if opts.ignore_atime {
            old.atime = attrs.atime;
        }
        old == attrs
    });
    if attrs_same && content.is_empty() && runs.is_empty() {
        return Ok(());
    }
    sink.record(Record::Inode(attrs))?;
    for rec in content {
        sink.record(rec)?;
    }
    for run in runs {
        emit_run(b, ino, rb.size, run, sink)?;
    }
    Ok(())
}

/// The entries of directory `ino`, by name.
fn entries(vol: &Volume, ino: InodeNo) -> Result<BTreeMap<Vec<u8>, (InodeNo, FileKind)>> {
    let mut out = BTreeMap::new();
    vol.with_fs(|fs| {
        fs.dir_scan(ino, 0, &mut |e| {
            out.insert(e.name, (e.ino, e.kind));
            true
        })
    })?;
    Ok(out)
}

/// Unlinks of names gone or changed, then links of names new or changed.
fn entry_records(a: Option<&Volume>, b: &Volume, ino: InodeNo, out: &mut Vec<Record>) -> Result<()> {
    let eb = entries(b, ino)?;
    let ea = match a {
        Some(a) => entries(a, ino)?,
        None => BTreeMap::new(),
    };
    for (name, was) in &ea {
        if eb.get(name) != Some(was) {
            out.push(Record::Unlink { name: name.clone() });
        }
    }
    for (name, &(child, k)) in &eb {
        if ea.get(name) != Some(&(child, k)) {
            out.push(Record::Link { name: name.clone(), ino: child, kind: k });
        }
    }
    Ok(())
}

/// Set and removed extended attributes.
fn xattr_records(a: Option<&Volume>, b: &Volume, ino: InodeNo, out: &mut Vec<Record>) -> Result<()> {
    let all = |v: &Volume| -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
        v.with_fs(|fs| {
            let mut m = BTreeMap::new();
            for name in fs.xattr_list(ino)? {
                if ino == InodeNo::ROOT && name == crate::format::quota::QUOTA_XATTR {
                    // Limits are the sending volume's own, as a receive's marks.
                    continue;
                }
                let value = fs.xattr_get(ino, &name)?;
                m.insert(name, value);
            }
            Ok(m)
        })
    };
    let xb = all(b)?;
    let xa = match a {
        Some(a) => all(a)?,
        None => BTreeMap::new(),
    };
    for name in xa.keys() {
        if !xb.contains_key(name) {
            out.push(Record::XattrRemove { name: name.clone() });
        }
    }
    for (name, value) in xb {
        if xa.get(&name) != Some(&value) {
            out.push(Record::XattrSet { name, value });
        }
    }
    Ok(())
}

/// A run of file blocks to send: `data` (the target's bytes) or a hole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    start: u64,
    len: u64,
    data: bool,
}

fn extents(vol: &Volume, ino: InodeNo) -> Result<Vec<Extent>> {
    vol.with_fs(|fs| {
        if !matches!(fs.inode(ino)?.body, Body::Extents(_) | Body::Tree(_)) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let mut next = 0;
        while let Some(e) = fs.next_extent(ino, next)? {
            next = e.logical_end();
            out.push(e);
        }
        Ok(out)
    })
}

/// What a file's data needs: a truncation first (into `out`), then runs of
/// blocks to write or punch.
fn data_plan(
    a: Option<&Volume>,
    b: &Volume,
    ra: Option<&InodeRecord>,
    rb: &InodeRecord,
    out: &mut Vec<Record>,
) -> Result<Vec<Run>> {
    let blocks_b = rb.size.div_ceil(BLOCK_BYTES);
    let inline = |r: &InodeRecord| matches!(r.body, Body::Inline(_));
    let (ra, a) = match (ra, a) {
        (Some(ra), Some(a)) if !inline(ra) && !inline(rb) => (ra, a),
        (Some(ra), _) if inline(ra) && ra.body == rb.body && ra.size == rb.size => return Ok(Vec::new()),
        (ra, _) => {
            // Sent whole: from empty (a file changing form has nothing to
            // compare block by block).
            if ra.is_some_and(|r| r.size > 0) {
                out.push(Record::Truncate { size: 0 });
            }
            if rb.size > 0 {
                out.push(Record::Truncate { size: rb.size });
            }
            let runs = if inline(rb) {
                vec![Run { start: 0, len: blocks_b, data: true }]
            } else {
                changed_runs(&[], 0, &extents(b, rb.ino)?, blocks_b)
            };
            return Ok(runs.into_iter().filter(|r| r.data).collect());
        }
    };
    if ra.size != rb.size {
        out.push(Record::Truncate { size: rb.size });
    }
    let ea = extents(a, ra.ino)?;
    let eb = extents(b, rb.ino)?;
    Ok(changed_runs(&ea, ra.size.div_ceil(BLOCK_BYTES), &eb, blocks_b))
}

/// How file block `block` is mapped: (data block, unwritten), if at all.
fn mapping(ext: &[Extent], limit: u64, block: u64) -> Option<(u64, bool)> {
    if block >= limit {
        return None;
    }
    let i = ext.partition_point(|e| e.logical_end() <= block);
    let e = ext.get(i).filter(|e| e.logical <= block)?;
    Some((e.physical.0 + (block - e.logical), e.unwritten))
}

/// The runs of blocks below `limit_b` mapped differently in `a` and `b`:
/// to write where `b` holds data, to punch where it holds none and `a` did.
fn changed_runs(a: &[Extent], limit_a: u64, b: &[Extent], limit_b: u64) -> Vec<Run> {
    let mut cuts: Vec<u64> = vec![0, limit_b];
    for e in a.iter().chain(b) {
        cuts.push(e.logical.min(limit_b));
        cuts.push(e.logical_end().min(limit_b));
    }
    cuts.push(limit_a.min(limit_b));
    cuts.sort_unstable();
    cuts.dedup();
    let mut runs: Vec<Run> = Vec::new();
    for w in cuts.windows(2) {
        let (p, q) = (w[0], w[1]);
        // Within [p, q) both mappings are linear: the first block decides.
        let ma = mapping(a, limit_a, p);
        let mb = mapping(b, limit_b, p);
        if ma == mb {
            continue;
        }
        let data_b = mb.is_some_and(|(_, unwritten)| !unwritten);
        let data_a = ma.is_some_and(|(_, unwritten)| !unwritten);
        if !data_b && !data_a {
            continue;
        }
        match runs.last_mut() {
            Some(r) if r.start + r.len == p && r.data == data_b => r.len += q - p,
            _ => runs.push(Run { start: p, len: q - p, data: data_b }),
        }
    }
    runs
}

/// Sends one run: its bytes (clipped to the file's size) in write records,
/// or a hole record.
fn emit_run(b: &Volume, ino: InodeNo, size: u64, run: Run, sink: &mut dyn DiffSink) -> Result<()> {
    let start = run.start * BLOCK_BYTES;
    let end = ((run.start + run.len) * BLOCK_BYTES).min(size);
    if start >= end {
        return Ok(());
    }
    if !run.data {
        return sink.record(Record::Hole { offset: start, len: end - start });
    }
    let mut at = start;
    while at < end {
        let n = (end - at).min(WRITE_MAX as u64) as usize;
        let data = b.read(ino, at, n)?;
        if data.len() != n {
            return Err(Error::corrupt_meta("inode", 0, format!("file {ino} reads short at {at} in a snapshot")));
        }
        sink.record(Record::Write { offset: at, data })?;
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DataBlock;

    fn ext(logical: u64, physical: u64, len: u32) -> Extent {
        Extent { logical, physical: DataBlock(physical), len, unwritten: false }
    }

    #[test]
    fn unchanged_mappings_send_nothing() {
        let e = [ext(0, 100, 10), ext(20, 500, 5)];
        assert!(changed_runs(&e, 25, &e, 25).is_empty());
    }

    #[test]
    fn a_moved_block_is_sent_and_a_dropped_one_punched() {
        let a = [ext(0, 100, 10)];
        let b = [ext(0, 100, 3), ext(3, 900, 1), ext(4, 104, 2)];
        assert_eq!(
            changed_runs(&a, 10, &b, 10),
            vec![Run { start: 3, len: 1, data: true }, Run { start: 6, len: 4, data: false }]
        );
    }

    #[test]
    fn growth_beyond_the_old_size_is_sent() {
        let a = [ext(0, 100, 2)];
        let b = [ext(0, 100, 4)];
        assert_eq!(changed_runs(&a, 2, &b, 4), vec![Run { start: 2, len: 2, data: true }]);
        assert_eq!(changed_runs(&[], 0, &b, 3), vec![Run { start: 0, len: 3, data: true }]);
    }
}
