//! `dualfs receive`: applies a send stream to this volume, which becomes a
//! mirror of the source volume (LinLogFS's mirror update; DESIGN.md, "Send
//! and receive"). The source's inode numbers are kept, so that a later
//! incremental stream names the same inodes here.
//!
//! Every record states what the target snapshot has (an entry, a file's
//! bytes in a range, an attribute), not an edit of what was there, so that
//! applying a stream again over a partly applied copy of itself ends in the
//! same tree: a crash mid-receive is finished by receiving the same stream
//! again. The root's `trusted.dualfs.receiving` attribute says which stream
//! is half applied; `trusted.dualfs.received` which snapshot of which
//! source the tree is, and the snapshot receive makes at the end keeps it.

use std::collections::HashSet;
use std::io::Read;

use super::send::{DiffOptions, DiffSink, diff};
use super::{FallocateMode, MountOptions, Stamp, Volume};
use crate::error::{Error, Result};
use crate::format::inode::{Body, InodeRecord};
use crate::format::name::FileName;
use crate::format::stream::{
    self, FRAME_CRC_LEN, FRAME_HEAD_LEN, InodeAttrs, PRELUDE_LEN, Record, SnapshotIdentity, StreamCounts, StreamHeader,
};
use crate::namespace::xattr::SetMode;
use crate::types::{BLOCK_BYTES, FileKind, GroupNo, InodeNo};

/// Root attribute naming the source snapshot the tree is a copy of.
pub const RECEIVED_XATTR: &[u8] = b"trusted.dualfs.received";
/// Root attribute naming the stream a receive is applying (until it ends).
pub const RECEIVING_XATTR: &[u8] = b"trusted.dualfs.receiving";

/// Records applied between commits: a receive commits as it goes, as a
/// mounted volume's flusher would, so that its commit groups stay small
/// and an offline receive makes durable progress at the same pace as one
/// through a mount.
const COMMIT_EVERY: u64 = 1024;

/// What a receive did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiveReport {
    /// The snapshot made at its end (the source snapshot's name).
    pub snapshot: String,
    /// What the stream's end record counted.
    pub counts: StreamCounts,
    /// It finished a receive of the same stream that a crash interrupted.
    pub resumed: bool,
    /// Inodes it created, changed or freed: what a cache of the tree (the
    /// kernel's, through a mount) must forget.
    pub inodes: Vec<InodeNo>,
    /// Names it added or removed, by directory: likewise.
    pub names: Vec<(InodeNo, Vec<u8>)>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The provenance text of snapshot `s` of volume `source`.
fn provenance(source: &[u8; 16], s: &SnapshotIdentity) -> Vec<u8> {
    format!("{} {} {}", hex(source), s.id, s.checkpoint).into_bytes()
}

/// The text naming a stream being applied.
fn pending(h: &StreamHeader) -> Vec<u8> {
    let mut t = provenance(&h.source, &h.target);
    match &h.base {
        Some(b) => t.extend_from_slice(format!(" from {} {}", b.id, b.checkpoint).as_bytes()),
        None => t.extend_from_slice(b" full"),
    }
    t
}

/// Reads records from a stream, counting them, refusing what is malformed.
struct StreamReader<'a> {
    input: &'a mut dyn Read,
    counts: StreamCounts,
    /// The stream's version, from its prelude.
    version: u32,
}

impl StreamReader<'_> {
    fn read_exact(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        self.input.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                Error::Stream(format!("the stream ends inside {what}: it was cut short (no end record)"))
            }
            _ => Error::Stream(format!("reading the stream: {e}")),
        })
    }

    fn prelude(&mut self) -> Result<()> {
        let mut p = [0u8; PRELUDE_LEN];
        self.read_exact(&mut p, "its prelude")?;
        self.version = stream::check_prelude(&p).map_err(|e| Error::Stream(e.0))?;
        Ok(())
    }

    fn next(&mut self) -> Result<Record> {
        let mut head = [0u8; FRAME_HEAD_LEN];
        self.read_exact(&mut head, "a record head")?;
        let len = stream::frame_len(&head).map_err(|e| self.bad(e.0))?;
        let mut rest = vec![0u8; len + FRAME_CRC_LEN];
        self.read_exact(&mut rest, "a record")?;
        let rec = stream::decode(self.version, &head, &rest).map_err(|e| self.bad(e.0))?;
        if !matches!(rec, Record::End(_)) {
            self.counts.records += 1;
            match &rec {
                Record::Inode(_) => self.counts.inodes += 1,
                Record::Gone(_) => self.counts.gone += 1,
                Record::Write { data, .. } => self.counts.data_bytes += data.len() as u64,
                _ => {}
            }
        }
        Ok(rec)
    }

    fn bad(&self, why: String) -> Error {
        Error::Stream(format!("record {}: {why}", self.counts.records + 1))
    }

    /// After the end record: nothing may follow.
    fn expect_eof(&mut self) -> Result<()> {
        let mut b = [0u8; 1];
        match self.input.read(&mut b) {
            Ok(0) => Ok(()),
            Ok(_) => Err(Error::Stream("bytes follow the end record".into())),
            Err(e) => Err(Error::Stream(format!("reading the stream: {e}"))),
        }
    }
}

/// A check that the tree did not change: any record is a change.
struct Unchanged;

impl DiffSink for Unchanged {
    fn record(&mut self, rec: Record) -> Result<()> {
        let ino = match rec {
            Record::Inode(a) => a.ino,
            Record::Gone(ino) => ino,
            _ => InodeNo(0),
        };
        Err(Error::ReceiveRefused(format!("inode {ino} changed")))
    }
}

impl Volume {
    /// Applies the send stream read from `input`, then makes a snapshot
    /// named as the stream's target snapshot. A full stream needs an empty
    /// volume; an incremental one needs the snapshot its base was received
    /// as, and a live tree unchanged since (access times aside). A stream
    /// a crash interrupted is finished by receiving it again; until then
    /// every other stream is refused.
    ///
    /// # Errors
    /// `ReceiveRefused` (nothing was changed), `Stream` for a malformed or
    /// cut stream (what came before stays, marked as pending), a device fails.
    pub fn receive(&self, input: &mut dyn Read) -> Result<ReceiveReport> {
        self.check_writable()?;
        let mut reader = StreamReader { input, counts: StreamCounts::default(), version: stream::VERSION };
        reader.prelude()?;
        let Record::Header(header) = reader.next()? else {
            return Err(Error::Stream("the first record is not the header".into()));
        };
        let marker = pending(&header);
        let root_xattr = |name: &[u8]| self.with_fs(|fs| fs.xattr_get(InodeNo::ROOT, name).ok());
        let resumed = match root_xattr(RECEIVING_XATTR) {
            Some(m) if m == marker => true,
            Some(m) => {
                return Err(Error::ReceiveRefused(format!(
                    "a receive interrupted on this volume is not finished ({}): receive that stream again first",
                    String::from_utf8_lossy(&m)
                )));
            }
            None => false,
        };
        let done_before = root_xattr(RECEIVED_XATTR).is_some_and(|p| p == provenance(&header.source, &header.target));
        let has_snapshot = |name: &str| self.snapshot_list().iter().any(|s| s.name == name);
        if has_snapshot(&header.target.name) {
            let what = if done_before { "was received already" } else { "exists on this volume" };
            return Err(Error::ReceiveRefused(format!("a snapshot named {} {what}", header.target.name)));
        }
        if done_before && !resumed {
            // A crash came between the last commit and the snapshot.
            self.snapshot_create(&header.target.name)?;
            return Ok(ReceiveReport { snapshot: header.target.name.clone(), resumed, ..ReceiveReport::default() });
        }
        if !resumed {
            self.check_base(&header)?;
            // The mark is durable before any record is applied: a crash
            // from here on leaves a tree marked for finishing.
            if !crate::faults::active(crate::faults::Fault::ReceiveWithoutMark) {
                self.with_step(|fs| fs.xattr_set(InodeNo::ROOT, RECEIVING_XATTR, &marker, SetMode::Any))?;
                self.commit()?;
            }
        }
        let mut apply = Apply {
            vol: self,
            section: None,
            last: (0, false),
            freed: HashSet::new(),
            group: GroupNo(0),
            inodes: Vec::new(),
            names: Vec::new(),
            flags_marked: false,
        };
        let counts = loop {
            match reader.next()? {
                Record::Header(_) => return Err(Error::Stream("a second header".into())),
                Record::End(c) => break c,
                rec => {
                    apply.record(rec)?;
                    if reader.counts.records.is_multiple_of(COMMIT_EVERY) {
                        self.commit()?;
                        apply.freed.clear();
                    }
                }
            }
        };
        apply.finish()?;
        if counts != reader.counts {
            return Err(Error::Stream(format!(
                "the end record counts {counts:?}, the stream held {:?}: records are missing",
                reader.counts
            )));
        }
        reader.expect_eof()?;
        let stamp = provenance(&header.source, &header.target);
        self.with_step(|fs| {
            fs.xattr_set(InodeNo::ROOT, RECEIVED_XATTR, &stamp, SetMode::Any)?;
            if fs.xattr_has(InodeNo::ROOT, RECEIVING_XATTR)? {
                fs.xattr_remove(InodeNo::ROOT, RECEIVING_XATTR)
            } else {
                Ok(())
            }
        })?;
        self.snapshot_create(&header.target.name)?;
        let mut names = apply.names;
        names.extend(self.names_of_referenced(&apply.inodes)?);
        Ok(ReceiveReport { snapshot: header.target.name.clone(), counts, resumed, inodes: apply.inodes, names })
    }

    /// The names, in directories the kernel holds, of the inodes among
    /// `changed` it holds too. A kernel that caches writes trusts its own
    /// size of a file it holds over the volume's: only a file it forgets
    /// (every name of it dropped) is read again. Costs nothing when the
    /// kernel holds none of them (a mirror nobody browsed).
    fn names_of_referenced(&self, changed: &[InodeNo]) -> Result<Vec<(InodeNo, Vec<u8>)>> {
        let held: HashSet<InodeNo> =
            self.with_fs(|fs| changed.iter().copied().filter(|i| fs.refs(*i) > 0 && *i != InodeNo::ROOT).collect());
        let mut out = Vec::new();
        if held.is_empty() {
            return Ok(out);
        }
        // The root is held without a lookup.
        let mut dirs = self.with_fs(|fs| fs.referenced());
        dirs.push(InodeNo::ROOT);
        dirs.sort_unstable();
        dirs.dedup();
        for dir in dirs {
            let is_dir = self.with_fs(|fs| fs.inode(dir).map(|r| FileKind::from_mode(r.mode)));
            if !matches!(is_dir, Ok(Some(FileKind::Directory))) {
                continue;
            }
            self.with_fs(|fs| {
                fs.dir_scan(dir, 0, &mut |e| {
                    if held.contains(&e.ino) {
                        out.push((dir, e.name));
                    }
                    true
                })
            })?;
        }
        Ok(out)
    }

    fn with_step(&self, mut f: impl FnMut(&mut crate::namespace::Fs) -> Result<()>) -> Result<()> {
        self.repair_step(|fs, _| f(fs))
    }

    /// Refuses a stream this volume cannot take, before changing anything.
    fn check_base(&self, header: &StreamHeader) -> Result<()> {
        let Some(base) = &header.base else {
            self.finish_loading()?;
            let empty = self.with_fs(|fs| -> Result<bool> {
                Ok(fs.log.ifile().used_inodes() <= 1 && fs.dir_is_empty(InodeNo::ROOT)?)
            })?;
            if !empty {
                return Err(Error::ReceiveRefused(
                    "a full stream goes to an empty volume, and this one holds files: make a new volume, \
                     or send an incremental stream from a snapshot this volume received"
                        .into(),
                ));
            }
            return Ok(());
        };
        let missing = || {
            Error::ReceiveRefused(format!(
                "this volume does not hold the stream's base, snapshot {} (id {}) of volume {}: send from a \
                 snapshot it received, or a full stream to an empty volume",
                base.name,
                base.id,
                hex(&header.source)
            ))
        };
        let snap =
            match Volume::open_snapshot(self.meta.clone(), self.data.clone(), &base.name, MountOptions::default()) {
                Ok(v) => v,
                Err(Error::NoSnapshot(_)) => return Err(missing()),
                Err(e) => return Err(e),
            };
        let held = snap.with_fs(|fs| fs.xattr_get(InodeNo::ROOT, RECEIVED_XATTR).ok());
        if held.as_deref() != Some(provenance(&header.source, base).as_slice()) {
            return Err(missing());
        }
        self.commit()?;
        match diff(Some(&snap), self, DiffOptions { ignore_atime: true }, &mut Unchanged) {
            Ok(_) => Ok(()),
            Err(Error::ReceiveRefused(what)) => Err(Error::ReceiveRefused(format!(
                "this volume changed since snapshot {} was received ({what}): a mirror takes changes only \
                 from its source",
                base.name
            ))),
            Err(e) => Err(e),
        }
    }
}

/// The state of applying a stream's records.
struct Apply<'a> {
    vol: &'a Volume,
    /// The inode whose section is open: its attributes, set when it closes.
    section: Option<InodeAttrs>,
    /// The last inode or gone record: (number, whether it was an inode record).
    last: (u64, bool),
    /// Numbers freed since the last commit: not reused before one.
    freed: HashSet<InodeNo>,
    /// The data group new files take (their directory's, most likely).
    group: GroupNo,
    /// Inodes and names changed ([`ReceiveReport`]).
    inodes: Vec<InodeNo>,
    names: Vec<(InodeNo, Vec<u8>)>,
    /// The volume is marked as keeping inode flags (format 1.6).
    flags_marked: bool,
}

impl Apply<'_> {
    fn record(&mut self, rec: Record) -> Result<()> {
        match rec {
            Record::Inode(a) => self.inode(a),
            Record::Gone(ino) => self.gone(ino),
            rec => {
                let Some(a) = self.section.clone() else {
                    return Err(Error::Stream("a record before any inode record".into()));
                };
                self.content(&a, rec)
            }
        }
    }

    fn order(&mut self, ino: InodeNo, is_inode: bool) -> Result<()> {
        // Number n needs an inode map of n 16-byte entries in the log: a
        // larger one is no stream of a volume this one can mirror.
        let most = self.vol.with_fs(|fs| fs.log.superblock().meta_blocks.saturating_mul(BLOCK_BYTES / 16));
        if ino.0 >= most {
            return Err(Error::Stream(format!(
                "inode number {ino} needs an inode map larger than this meta-data device"
            )));
        }
        let (last, was_inode) = self.last;
        if ino.0 < last || (ino.0 == last && (was_inode || !is_inode)) {
            return Err(Error::Stream(format!("inode {ino} is out of order")));
        }
        self.last = (ino.0, is_inode);
        Ok(())
    }

    fn gone(&mut self, ino: InodeNo) -> Result<()> {
        self.finish()?;
        self.order(ino, false)?;
        self.inodes.push(ino);
        if self.vol.with_fs(|fs| fs.inode(ino).is_ok()) {
            self.vol.delete_inode(ino)?;
            self.freed.insert(ino);
        }
        Ok(())
    }

    fn inode(&mut self, a: InodeAttrs) -> Result<()> {
        self.finish()?;
        self.order(a.ino, true)?;
        self.inodes.push(a.ino);
        let kind = a.kind().ok_or_else(|| Error::Stream(format!("inode {} has no known type", a.ino)))?;
        let existing = match self.vol.with_fs(|fs| fs.inode(a.ino).map(|r| (r.generation, r.mode))) {
            Ok(x) => Some(x),
            Err(Error::NotFound) => None,
            Err(e) => return Err(e),
        };
        let same = |(generation, mode): (u32, u32)| {
            FileKind::from_mode(mode) == Some(kind) && (generation == a.generation || a.ino == InodeNo::ROOT)
        };
        match existing {
            Some(e) if same(e) => {
                // Its flags are set again when the section closes: until
                // then an immutable or append-only file takes the changes
                // the stream brings.
                self.vol.with_step(|fs| {
                    if fs.inode(a.ino)?.flags != 0 {
                        fs.inode_mut(a.ino)?.flags = 0;
                    }
                    Ok(())
                })?;
            }
            Some(_) if a.ino == InodeNo::ROOT => {
                return Err(Error::Stream("the root is not a directory".into()));
            }
            Some(_) => {
                self.vol.delete_inode(a.ino)?;
                self.freed.insert(a.ino);
                self.create(&a, kind)?;
            }
            None => self.create(&a, kind)?,
        }
        if kind == FileKind::Directory {
            self.group = self.vol.with_fs(|fs| fs.inode(a.ino).map(|r| r.group))?;
        }
        self.section = Some(a);
        Ok(())
    }

    fn create(&mut self, a: &InodeAttrs, kind: FileKind) -> Result<()> {
        if self.freed.contains(&a.ino) {
            // A number freed in this commit group is reused only in a later
            // one (roll-forward must never meet two lives of it in one group).
            self.vol.commit()?;
            self.freed.clear();
        }
        let group = self.group;
        self.vol.with_step(|fs| {
            let group = if kind == FileKind::Directory { fs.log.space_mut().bind_directory()? } else { group };
            let rec = InodeRecord {
                ino: a.ino,
                generation: a.generation,
                mode: a.mode,
                uid: a.uid,
                gid: a.gid,
                nlink: a.nlink,
                rdev: a.rdev,
                parent: a.parent,
                atime: a.atime,
                mtime: a.mtime,
                ctime: a.ctime,
                crtime: a.crtime,
                group,
                ..InodeRecord::default()
            };
            fs.log.claim_inode(rec).map_err(|_| Error::Stream(format!("inode {} cannot be created", a.ino)))?;
            fs.intents.created(a.ino);
            Ok(())
        })
    }

    /// A record of the open section.
    fn content(&mut self, a: &InodeAttrs, rec: Record) -> Result<()> {
        let kind = a.kind();
        let ino = a.ino;
        let wrong = |what: &str| Err(Error::Stream(format!("{what} record for inode {ino} of mode {:#o}", a.mode)));
        let vol = self.vol;
        match rec {
            Record::Link { name, ino: child, kind: k } => {
                if kind != Some(FileKind::Directory) {
                    return wrong("link");
                }
                let fname =
                    FileName::new(&name).map_err(|_| Error::Stream("a link record's name is invalid".into()))?;
                self.names.push((ino, name.clone()));
                vol.with_step(|fs| match fs.dir_lookup(ino, &name)? {
                    Some(e) if e.ino == child && e.kind == k => Ok(()),
                    Some(e) => fs.dir_replace(ino, &e, child, k),
                    None => fs.dir_insert(ino, &fname, child, k).map(|_| ()),
                })
            }
            Record::Unlink { name } => {
                if kind != Some(FileKind::Directory) {
                    return wrong("unlink");
                }
                self.names.push((ino, name.clone()));
                vol.with_step(|fs| match fs.dir_lookup(ino, &name)? {
                    Some(e) => fs.dir_remove(ino, e.position),
                    None => Ok(()),
                })
            }
            Record::Truncate { size } if kind == Some(FileKind::Regular) => vol.truncate(ino, size),
            Record::Write { offset, data } if kind == Some(FileKind::Regular) => {
                vol.write_with(ino, offset, &data, Stamp::Keep).map(|_| ())
            }
            Record::Hole { offset, len } if kind == Some(FileKind::Regular) => {
                let mode = FallocateMode { keep_size: true, punch_hole: true, zero_range: false };
                vol.fallocate(ino, offset, len, mode)
            }
            Record::Truncate { .. } | Record::Write { .. } | Record::Hole { .. } => wrong("file data"),
            Record::Symlink { target } => {
                if kind != Some(FileKind::Symlink) {
                    return wrong("symlink");
                }
                vol.with_step(|fs| {
                    if let Body::Blob { nodes, .. } = fs.inode(ino)?.body.clone() {
                        fs.free_blob(&nodes);
                    }
                    let body = if target.len() <= fs.config.inline_max as usize {
                        Body::Inline(target.clone())
                    } else {
                        Body::Blob { len: target.len() as u32, nodes: fs.write_blob(ino, &target) }
                    };
                    let mut r = fs.inode_mut(ino)?;
                    r.body = body;
                    r.size = target.len() as u64;
                    Ok(())
                })
            }
            Record::XattrSet { name, value } => vol.with_step(|fs| {
                fs.release_replacement(ino)?;
                fs.xattr_set(ino, &name, &value, SetMode::Any)
            }),
            Record::XattrRemove { name } => vol.with_step(|fs| {
                fs.release_replacement(ino)?;
                if fs.xattr_has(ino, &name)? { fs.xattr_remove(ino, &name) } else { Ok(()) }
            }),
            Record::Header(_) | Record::Inode(_) | Record::Gone(_) | Record::End(_) => {
                Err(Error::Stream("a record out of place".into()))
            }
        }
    }

    /// Closes the open section: its attributes as the stream says, last,
    /// since what came before stamped times and counted links its own way.
    fn finish(&mut self) -> Result<()> {
        let Some(a) = self.section.take() else { return Ok(()) };
        if (a.flags != 0 || a.project != 0) && !self.flags_marked {
            self.vol.mark_inode_flags()?;
            self.flags_marked = true;
        }
        let regular = a.kind() == Some(FileKind::Regular);
        self.vol.with_step(|fs| {
            fs.release_replacement(a.ino)?;
            let mut r = fs.inode_mut(a.ino)?;
            if regular && r.size != a.size {
                return Err(Error::Stream(format!(
                    "file {} ends at {} bytes, its inode record says {}",
                    a.ino, r.size, a.size
                )));
            }
            r.mode = a.mode;
            r.uid = a.uid;
            r.gid = a.gid;
            r.nlink = a.nlink;
            r.flags = a.flags;
            r.project = a.project;
            r.rdev = a.rdev;
            r.parent = a.parent;
            r.atime = a.atime;
            r.mtime = a.mtime;
            r.ctime = a.ctime;
            r.crtime = a.crtime;
            Ok(())
        })
    }
}
