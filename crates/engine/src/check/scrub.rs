//! Scrub: read every live meta-data block and every allocated data block of
//! a volume, mounted or not, and report what does not read back right, by
//! block and by file.
//!
//! Meta-data blocks are checked as their decoders check them (checksum,
//! kind, address, name, structure) against what the maps say is there
//! ([`crate::meta_log::live`]); data blocks carry no checksum, so only a
//! device's read error can be found in them. The blocks are read without
//! the volume's lock, in address order, at the rate asked; the lock is
//! taken to list them and again for each block that fails, to tell damage
//! from an object the log moved meanwhile. The files a bad block costs are
//! named by path where the namespace still reaches them, else by number.
//!
//! A mirrored meta-data device is read copy by copy ([`copies`]): each
//! block from each copy, with the same checks; a block bad on one copy and
//! good on the other is rewritten on the bad one.

mod copies;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Loaded;
use super::space::data_map;
use super::tree;
use super::walk::Source;
use crate::device::{BlockDevice, MirrorDevice};
use crate::error::Result;
use crate::format::codec::Reader;
use crate::format::inode::Body;
use crate::meta_log::Log;
use crate::meta_log::live::{Decoded, LiveBlock, LiveKind, TailDamage, Verifier};
use crate::types::{BLOCK_BYTES, BLOCK_SIZE, FileKind, InodeNo, MetaBlock};

/// Blocks read in one request at most.
const RUN_BLOCKS: u64 = 256;

/// What to scrub and how fast.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScrubOptions {
    /// Bytes read per second at most (None: as fast as the devices go).
    pub rate: Option<u64>,
    /// Skip the data device.
    pub meta_only: bool,
}

/// A meta-data block that failed its check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadMeta {
    /// Its address on the meta-data device.
    pub block: u64,
    /// What it holds ("inode block", "node 12", "inode map block 0", "log").
    pub structure: String,
    /// The tree it belongs to: "live", or "snapshot NAME".
    pub tree: String,
    /// What is wrong.
    pub error: String,
    /// The files it costs, by number.
    pub inodes: Vec<InodeNo>,
    /// Their paths, where the namespace still reaches them (same order;
    /// None where it does not).
    pub paths: Vec<Option<String>>,
    /// Rewritten from a good copy.
    pub repaired: bool,
    /// The copies it was bad on, numbered from 1 (copy 1 alone on a
    /// volume with one meta-data copy).
    pub copies: Vec<u32>,
}

/// A data block the data device failed to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataError {
    /// Its address on the data device.
    pub block: u64,
    /// The file it belongs to.
    pub ino: InodeNo,
    /// Its block number within the file.
    pub file_block: u64,
    /// The file's path, where the namespace reaches it.
    pub path: Option<String>,
    /// The tree: "live", or "snapshot NAME".
    pub tree: String,
    /// The device's error.
    pub error: String,
}

/// What a scrub found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubReport {
    /// Meta-data blocks read and checked.
    pub meta_blocks: u64,
    /// Data blocks read.
    pub data_blocks: u64,
    /// Wall time.
    pub micros: u64,
    /// Meta-data blocks that failed their check.
    pub bad_meta: Vec<BadMeta>,
    /// Data blocks that failed to read.
    pub data_errors: Vec<DataError>,
    /// Blocks that failed while the volume was changing and turned out to
    /// have been moved or rewritten meanwhile (not damage).
    pub moved: u64,
    /// Stopped before the end (asked to).
    pub stopped: bool,
    /// Copies of the meta-data each block was read from.
    pub copies: u32,
    /// Why only one copy of a mirrored meta-data device was read (it runs
    /// degraded).
    pub degraded: Option<String>,
}

impl ScrubReport {
    /// Errors a good copy repaired.
    #[must_use]
    pub fn corrected(&self) -> usize {
        self.bad_meta.iter().filter(|b| b.repaired).count()
    }

    /// Errors left: bad meta-data blocks not repaired, data read errors.
    #[must_use]
    pub fn uncorrectable(&self) -> usize {
        self.bad_meta.iter().filter(|b| !b.repaired).count() + self.data_errors.len()
    }

    /// On copy `copy` (from 1): the meta-data blocks found bad, and how
    /// many of them were rewritten from the other copy.
    #[must_use]
    pub fn bad_on_copy(&self, copy: u32) -> (usize, usize) {
        let on = self.bad_meta.iter().filter(|b| b.copies.contains(&copy));
        let bad = on.clone().count();
        let repaired = on.filter(|b| b.repaired).count();
        (bad, repaired)
    }

    /// Bytes read from both devices.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        (self.meta_blocks + self.data_blocks) * BLOCK_BYTES
    }
}

/// What scrub needs of the volume it runs on: the log, under the volume's
/// lock when it is mounted.
pub trait ScrubHost {
    /// Runs `f` on the log. `settled`: with no commit in flight either
    /// (every block the maps name written), for the second look at a block
    /// that failed.
    fn with_log<R>(&self, settled: bool, f: impl FnOnce(&mut Log) -> R) -> R;
    /// The meta-data device.
    fn meta(&self) -> Arc<dyn BlockDevice>;
    /// The data device.
    fn data(&self) -> Arc<dyn BlockDevice>;
    /// The meta-data mirror, when the meta-data device is one.
    fn mirror(&self) -> Option<Arc<MirrorDevice>> {
        None
    }
    /// Why a mirrored volume runs on one copy.
    fn degraded(&self) -> Option<String> {
        None
    }
}

/// One tree's blocks: the live volume's, or a snapshot's image.
struct Tree {
    name: String,
    blocks: Vec<LiveBlock>,
    /// The image's log, for its owners of a bad block (None: the live one).
    image: Option<Log>,
}

/// A scrub under way: the counts, the pace, the progress.
struct Run<'a> {
    opts: ScrubOptions,
    started: Instant,
    done: u64,
    total: u64,
    progress: &'a mut dyn FnMut(u64, u64) -> bool,
    report: ScrubReport,
}

impl Run<'_> {
    /// Counts `blocks` read, keeps to the rate, and asks whether to go on.
    fn read(&mut self, blocks: u64) -> bool {
        self.done += blocks * BLOCK_BYTES;
        if let Some(rate) = self.opts.rate.filter(|&r| r > 0) {
            let due = Duration::from_secs_f64(self.done as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(self.started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        self.total = self.total.max(self.done);
        if !(self.progress)(self.done, self.total) {
            self.report.stopped = true;
        }
        !self.report.stopped
    }
}

/// Scrubs the volume `host` serves. `progress(done, total)` (bytes) is
/// called after each read; once it returns false the scrub stops and
/// reports what it has read.
///
/// # Errors
/// The maps cannot be read, or a device fails in a way that is no read
/// error of one block (the list of blocks cannot be made at all).
pub fn scrub<H: ScrubHost>(
    host: &H,
    opts: ScrubOptions,
    progress: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<ScrubReport> {
    let started = Instant::now();
    // Both copies read one by one while both are in use; a copy dropped
    // for failing leaves the other, read through the device as one.
    let mirror = host.mirror().filter(|m| m.in_use().len() == 2);
    let degraded = host.degraded().or_else(|| {
        let (i, why) = host.mirror()?.failed_copy()?;
        Some(format!("copy {} was dropped: {why}", i + 1))
    });
    let n_copies: u64 = if mirror.is_some() { 2 } else { 1 };
    let (Listed { verifier, mut trees, tail, data_estimate }, healed) = host.with_log(false, |log| -> Result<_> {
        // A lazy mount's inode map and IFile index are read in through
        // the mirror, which heals what fails on the first copy: those
        // blocks are the scrub's to report, its own reads find them good.
        let Some(m) = &mirror else { return Ok((list(log, false)?, Vec::new())) };
        let (listed, healed) = m.heals_during(|| list(log, true));
        let listed = listed?;
        let healed = copies::listed_heals(log, &listed.trees, healed)?;
        Ok((listed, healed))
    })?;
    let meta_total: u64 = (trees.iter().map(|t| t.blocks.len() as u64).sum::<u64>() + tail.0) * n_copies;
    let data_total = if opts.meta_only { 0 } else { data_estimate };
    let mut run = Run {
        opts,
        started,
        done: 0,
        total: (meta_total + data_total) * BLOCK_BYTES,
        progress,
        report: ScrubReport { copies: n_copies as u32, degraded, ..ScrubReport::default() },
    };
    run.report.meta_blocks += tail.0;
    run.report.bad_meta.extend(healed);
    for (block, structure, error) in tail.1 {
        run.report.bad_meta.push(BadMeta {
            block,
            structure: structure.into(),
            tree: "live".into(),
            error,
            inodes: Vec::new(),
            paths: Vec::new(),
            repaired: false,
            copies: vec![1],
        });
    }
    if let Some(m) = &mirror {
        copies::tail(host, m, &mut run)?;
    }
    let meta = host.meta();
    let mut loaded: Vec<Loaded> = Vec::new();
    for t in &mut trees {
        let mut l = Loaded::default();
        if !run.report.stopped {
            match &mirror {
                Some(m) => copies::read_tree(host, m, verifier, t, &mut run, &mut l)?,
                None => read_meta_tree(host, &meta, verifier, t, &mut run, &mut l)?,
            }
        }
        loaded.push(l);
    }
    // The paths of every tree, for naming what a bad block costs.
    let names: Vec<HashMap<InodeNo, String>> = loaded.iter().map(paths).collect();
    for b in &mut run.report.bad_meta {
        let i = trees.iter().position(|t| t.name == b.tree).unwrap_or(0);
        b.paths = b.inodes.iter().map(|ino| names[i].get(ino).cloned()).collect();
    }
    if !opts.meta_only && !run.report.stopped {
        read_data(host, &trees, &loaded, &names, &mut run);
    }
    run.report.micros = started.elapsed().as_micros() as u64;
    Ok(run.report)
}

/// What a scrub reads, listed under the file system's lock.
struct Listed {
    verifier: Verifier,
    /// The live tree, then each snapshot's and clone's image.
    trees: Vec<Tree>,
    /// The log after the checkpoint, walked (not for a mirror, whose
    /// copies are walked each alone).
    tail: (u64, Vec<TailDamage>),
    /// Data blocks in use.
    data_estimate: u64,
}

/// Lists every tree's live blocks; walks the log after the checkpoint
/// unless `mirrored`.
fn list(log: &mut Log, mirrored: bool) -> Result<Listed> {
    let live = log.live_blocks(true)?;
    let tail = if mirrored { (0, Vec::new()) } else { log.scrub_log_tail()? };
    let mut trees = vec![Tree { name: "live".into(), blocks: live, image: None }];
    let mut seen: HashSet<MetaBlock> = trees[0].blocks.iter().map(|b| b.at).collect();
    for s in log.snapshots().to_vec() {
        let mut image = log.open_image(&s.checkpoint)?;
        let blocks = image.live_blocks(false)?;
        // Blocks the live tree or an earlier image shares are read once.
        let blocks = blocks.into_iter().filter(|b| seen.insert(b.at)).collect();
        let kind = if s.writable { "clone" } else { "snapshot" };
        trees.push(Tree { name: format!("{kind} {}", s.name), blocks, image: Some(image) });
    }
    let sb = log.superblock();
    let data_estimate = sb.data_blocks.saturating_sub(log.space().free_blocks());
    Ok(Listed { verifier: log.verifier(), trees, tail, data_estimate })
}

/// Reads one tree's meta-data blocks in runs of neighbours, checks each,
/// keeps what the data pass and the names need in `loaded`.
fn read_meta_tree<H: ScrubHost>(
    host: &H,
    meta: &Arc<dyn BlockDevice>,
    verifier: Verifier,
    t: &mut Tree,
    run: &mut Run<'_>,
    loaded: &mut Loaded,
) -> Result<()> {
    for r in neighbour_runs(&t.blocks) {
        let first = t.blocks[r.start].at.0;
        let count = (t.blocks[r.end - 1].at.0 - first + 1) as usize;
        let mut raw = vec![0u8; count * BLOCK_SIZE];
        let whole = meta.read_blocks(first, &mut raw);
        for b in &t.blocks[r] {
            let off = (b.at.0 - first) as usize * BLOCK_SIZE;
            let one = &mut raw[off..off + BLOCK_SIZE];
            // A run that failed to read is read again a block at a time.
            let got = match &whole {
                Ok(()) => Ok(()),
                Err(_) => meta.read_blocks(b.at.0, one),
            };
            let verdict = match got {
                Ok(()) => verifier.verify(one, b),
                Err(e) => Err(format!("the device fails to read it: {e}")),
            };
            match verdict {
                Ok(d) => keep(loaded, d),
                Err(error) => second_look(host, meta, verifier, t, b, error, run, loaded)?,
            }
        }
        run.report.meta_blocks += count as u64;
        if !run.read(count as u64) {
            break;
        }
    }
    Ok(())
}

/// The index ranges of `blocks` (in address order) that are runs of
/// neighbours, each at most [`RUN_BLOCKS`] long: one read each.
fn neighbour_runs(blocks: &[LiveBlock]) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < blocks.len() {
        let first = blocks[i].at.0;
        let mut j = i + 1;
        while j < blocks.len() && blocks[j].at.0 == blocks[j - 1].at.0 + 1 && blocks[j].at.0 - first < RUN_BLOCKS {
            j += 1;
        }
        runs.push(i..j);
        i = j;
    }
    runs
}

fn keep(loaded: &mut Loaded, d: Decoded) {
    match d {
        Decoded::Nothing => {}
        Decoded::Inodes(records) => {
            for r in records {
                loaded.inodes.insert(r.ino, r);
            }
        }
        Decoded::Object(id, owner, obj) => {
            loaded.nodes.insert(id, (owner, obj));
        }
    }
}

/// What a second look at a failed block found.
enum Look {
    /// The maps no longer name it there, or it reads right now.
    Moved(Option<Decoded>),
    /// Still bad: what is wrong, and the inodes it costs.
    Bad(String, Vec<InodeNo>),
}

/// A block that failed: on the live tree, looked at again with no commit in
/// flight, and reported only if the maps still name it and it still fails.
#[allow(clippy::too_many_arguments)]
fn second_look<H: ScrubHost>(
    host: &H,
    meta: &Arc<dyn BlockDevice>,
    verifier: Verifier,
    t: &Tree,
    b: &LiveBlock,
    error: String,
    run: &mut Run<'_>,
    loaded: &mut Loaded,
) -> Result<()> {
    let look = match &t.image {
        // An image never changes: a failure is damage.
        Some(image) => Look::Bad(error, image.owners_of(b.at)?),
        None => host.with_log(true, |log| -> Result<Look> {
            if !log.still_live(b)? {
                return Ok(Look::Moved(None));
            }
            let mut raw = vec![0u8; BLOCK_SIZE];
            let error = match meta.read_blocks(b.at.0, &mut raw) {
                Err(e) => format!("the device fails to read it: {e}"),
                Ok(()) => match verifier.verify(&raw, b) {
                    Ok(d) => return Ok(Look::Moved(Some(d))),
                    Err(e) => e,
                },
            };
            Ok(Look::Bad(error, log.owners_of(b.at)?))
        })?,
    };
    match look {
        Look::Moved(d) => {
            run.report.moved += 1;
            if let Some(d) = d {
                keep(loaded, d);
            }
        }
        Look::Bad(error, owners) => run.report.bad_meta.push(bad_meta(t, b, error, owners, false, vec![1])),
    }
    Ok(())
}

/// The report of block `b` of tree `t`, found bad: the inodes it costs are
/// `owners` (from its partial segment's summary) and, for an inode block,
/// those the map puts there.
fn bad_meta(
    t: &Tree,
    b: &LiveBlock,
    error: String,
    mut owners: Vec<InodeNo>,
    repaired: bool,
    copies: Vec<u32>,
) -> BadMeta {
    if let LiveKind::Inodes(inos) = &b.kind {
        owners.extend(inos.iter().copied());
    }
    owners.sort_unstable();
    owners.dedup();
    BadMeta {
        block: b.at.0,
        structure: b.kind.structure(),
        tree: t.name.clone(),
        error,
        inodes: owners,
        paths: Vec::new(),
        repaired,
        copies,
    }
}

/// Every file's path in one tree, from its root, breadth first.
fn paths(loaded: &Loaded) -> HashMap<InodeNo, String> {
    let mut out = HashMap::new();
    out.insert(InodeNo::ROOT, "/".to_string());
    let mut queue = VecDeque::from([InodeNo::ROOT]);
    let mut seen = HashSet::from([InodeNo::ROOT]);
    while let Some(dir) = queue.pop_front() {
        let Some(rec) = loaded.inodes.get(&dir) else { continue };
        let entries = match &rec.body {
            Body::Entries(e) => e.clone(),
            Body::Tree(t) => {
                let mut e = Vec::new();
                tree::leaf_entries(&mut Source { loaded }, t.root, &mut e);
                e
            }
            _ => Vec::new(),
        };
        let base = out.get(&dir).cloned().unwrap_or_default();
        for (_, v) in entries {
            let mut r = Reader::new(&v);
            let (Ok(ino), Ok(_)) = (r.u64(), r.u8()) else { continue };
            let name = r.bytes(r.remaining()).unwrap_or_default();
            let ino = InodeNo(ino);
            let path = format!("{}/{}", base.trim_end_matches('/'), String::from_utf8_lossy(name));
            out.entry(ino).or_insert(path);
            let is_dir = loaded.inodes.get(&ino).and_then(|r| FileKind::from_mode(r.mode)) == Some(FileKind::Directory);
            if is_dir && seen.insert(ino) {
                queue.push_back(ino);
            }
        }
    }
    out
}

/// Reads every data block the trees' files map, once each, and reports the
/// blocks the device fails to read with their files.
fn read_data<H: ScrubHost>(
    host: &H,
    trees: &[Tree],
    loaded: &[Loaded],
    names: &[HashMap<InodeNo, String>],
    run: &mut Run<'_>,
) {
    let data = host.data();
    let mut extents: Vec<(u64, u64, InodeNo, u64, usize)> = Vec::new();
    for (i, l) in loaded.iter().enumerate() {
        extents.extend(data_map(l).into_iter().map(|(p, n, ino, k)| (p, n, ino, k, i)));
    }
    // Shared with a snapshot: read once, for the first tree that maps it.
    extents.sort_by_key(|e| (e.0, e.4));
    // Pieces of at most a run each, disjoint, in block order.
    let mut pieces: Vec<Piece> = Vec::new();
    let mut covered = 0u64;
    for (first, len, ino, file_block, tree) in extents {
        let end = first.saturating_add(len).min(data.block_count());
        let mut at = first.max(covered);
        while at < end {
            let n = (end - at).min(RUN_BLOCKS);
            pieces.push(Piece { at, n, ino, file_block: file_block + (at - first), tree });
            at += n;
        }
        covered = covered.max(end);
    }
    let total: u64 = pieces.iter().map(|p| p.n).sum();
    run.total = run.done + total * BLOCK_BYTES;
    let mut buf = vec![0u8; RUN_BLOCKS as usize * BLOCK_SIZE];
    let mut i = 0;
    while i < pieces.len() {
        // Neighbouring pieces (small files written together) in one request.
        let first = pieces[i].at;
        let mut j = i + 1;
        while j < pieces.len()
            && pieces[j].at == pieces[j - 1].at + pieces[j - 1].n
            && pieces[j].at + pieces[j].n - first <= RUN_BLOCKS
        {
            j += 1;
        }
        let n = pieces[j - 1].at + pieces[j - 1].n - first;
        let buf = &mut buf[..n as usize * BLOCK_SIZE];
        if data.read_blocks(first, buf).is_err() {
            for p in &pieces[i..j] {
                for b in p.at..p.at + p.n {
                    if let Err(e) = data.read_blocks(b, &mut buf[..BLOCK_SIZE]) {
                        run.report.data_errors.push(DataError {
                            block: b,
                            ino: p.ino,
                            file_block: p.file_block + (b - p.at),
                            path: names[p.tree].get(&p.ino).cloned(),
                            tree: trees[p.tree].name.clone(),
                            error: e.to_string(),
                        });
                    }
                }
            }
        }
        run.report.data_blocks += n;
        if !run.read(n) {
            return;
        }
        i = j;
    }
}

/// Data blocks of one file to read: `n` blocks from `at`, its block
/// `file_block` first.
struct Piece {
    at: u64,
    n: u64,
    ino: InodeNo,
    file_block: u64,
    tree: usize,
}

/// An unmounted volume: the log opened as fsck opens it (roll-forward in
/// memory, nothing written), nobody else changing it.
struct Unmounted {
    log: std::sync::Mutex<Log>,
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    copies: Copies,
}

/// The copies of a mirrored meta-data device an unmounted scrub reads, as
/// a mount assembles them.
#[derive(Clone, Debug, Default)]
pub struct Copies {
    /// The mirror, both copies in sync (the meta-data device given is it).
    pub mirror: Option<Arc<MirrorDevice>>,
    /// Why one copy alone is read.
    pub degraded: Option<String>,
}

impl ScrubHost for Unmounted {
    fn with_log<R>(&self, _settled: bool, f: impl FnOnce(&mut Log) -> R) -> R {
        f(&mut self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn meta(&self) -> Arc<dyn BlockDevice> {
        self.meta.clone()
    }

    fn data(&self) -> Arc<dyn BlockDevice> {
        self.data.clone()
    }

    fn mirror(&self) -> Option<Arc<MirrorDevice>> {
        self.copies.mirror.clone()
    }

    fn degraded(&self) -> Option<String> {
        self.copies.degraded.clone()
    }
}

/// Scrubs the volume on `meta` and `data`, which must not be mounted.
/// Damage the open itself met (commits lost past a damaged block, a
/// checkpoint that did not load, a superblock copy rewritten) is reported
/// first, as bad meta-data blocks.
///
/// # Errors
/// The volume cannot be opened at all, or as [`scrub`].
pub fn scrub_unmounted(
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    opts: ScrubOptions,
    progress: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<ScrubReport> {
    scrub_unmounted_copies(meta, data, Copies::default(), opts, progress)
}

/// [`scrub_unmounted`] of a mirrored volume: `meta` is the mirror of
/// `copies` (or the one copy read when it is degraded). The mirror's own
/// reads write nothing back while the volume is opened, so that each
/// copy's damage is found and counted by the scrub, which mends it.
///
/// # Errors
/// As [`scrub_unmounted`].
pub fn scrub_unmounted_copies(
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    copies: Copies,
    opts: ScrubOptions,
    progress: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<ScrubReport> {
    if let Some(m) = &copies.mirror {
        m.without_write_back();
    }
    let (log, open) = Log::open(meta.clone(), data.clone())?;
    let host = Unmounted { log: std::sync::Mutex::new(log), meta, data, copies };
    let mut report = scrub(&host, opts, progress)?;
    let opened: Vec<BadMeta> = open
        .damage
        .iter()
        .chain(open.superblock_repair.iter())
        .map(|d| BadMeta {
            block: 0,
            structure: "log (found at the open)".into(),
            tree: "live".into(),
            error: d.clone(),
            inodes: Vec::new(),
            paths: Vec::new(),
            repaired: false,
            copies: vec![1],
        })
        .collect();
    report.bad_meta.splice(0..0, opened);
    Ok(report)
}
