//! `dualfs receive`: applies a send stream to this volume, which becomes a
//! mirror of the source volume (LinLogFS's mirror update; DESIGN.md, "Send
//! and receive"). The source's inode numbers are kept, so that a later
//! incremental stream names the same inodes here.
//!
//! Every record states what the target snapshot has (an entry, a file's
//! bytes in a range, an attribute), not an edit of what was there. A
//! stream is input from outside: each record is checked against the tree
//! it builds, and the whole tree before the receive ends ([`ledger`]). The
//! root's `trusted.dualfs.receiving` attribute marks a receive under way
//! (durable before the first record is applied, removed in the commit that
//! ends it); a receive refused or cut short goes back to the last complete
//! tree and removes it ([`rollback`]); one a crash interrupted is ended by
//! receiving the same stream again (back to the last complete tree, then
//! the stream) or by [`Volume::receive_abort`]. fsck, repair and mount know
//! the mark. `trusted.dualfs.received` says which snapshot of which source
//! the tree is, and the snapshot receive makes at the end keeps it.

mod apply;
mod ledger;
mod reader;
mod rollback;

use std::collections::HashSet;
use std::io::Read;

use super::send::{DiffOptions, DiffSink, attrs_of, diff};
use super::{MountOptions, Volume};
use crate::error::{Error, Result};
use crate::format::stream::{InodeAttrs, Record, SnapshotIdentity, StreamCounts, StreamHeader};
use crate::namespace::xattr::SetMode;
use crate::types::{FileKind, InodeNo};
use apply::Apply;
use reader::StreamReader;

pub use crate::format::stream::{RECEIVED_XATTR, RECEIVING_XATTR, describe_mark};

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
}

/// What a receive or its rollback changed: what a cache of the tree (the
/// kernel's, through a mount) must forget, whether the receive ended well
/// or not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Touched {
    /// Inodes created, changed or freed.
    pub inodes: Vec<InodeNo>,
    /// Names added or removed, by directory.
    pub names: Vec<(InodeNo, Vec<u8>)>,
}

/// What `dualfs receive --abort` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbortReport {
    /// The stream that was under way, as its mark names it.
    pub stream: String,
    /// The snapshot the tree went back to (None: the empty volume a full
    /// stream started from).
    pub base: Option<String>,
    /// Inodes brought back.
    pub inodes: u64,
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

/// A receive-under-way mark, read: which snapshot id it started from
/// (None: a full stream, from an empty volume).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Marker {
    base: Option<u64>,
}

impl Marker {
    fn parse(text: &[u8]) -> Result<Marker> {
        let base = crate::format::stream::mark_base(text).map_err(|e| Error::corrupt_meta("inode", 0, e.0))?;
        Ok(Marker { base })
    }
}

/// A check that the tree did not change since a snapshot (access times
/// aside): a record of the comparison is a change unless it states what
/// the snapshot holds already (the same bytes, in other blocks: what a
/// rollback leaves where a receive had written).
struct Unchanged<'a> {
    base: &'a Volume,
    section: InodeNo,
}

fn changed(ino: InodeNo) -> Error {
    Error::ReceiveRefused(format!("inode {ino} changed"))
}

impl DiffSink for Unchanged<'_> {
    fn record(&mut self, rec: Record) -> Result<()> {
        let ino = self.section;
        match rec {
            Record::Inode(a) => {
                let same = match self.base.with_fs(|fs| fs.inode(a.ino).map(attrs_of)) {
                    Ok(mut old) => {
                        old.atime = a.atime;
                        old == a
                    }
                    Err(_) => false,
                };
                if !same {
                    return Err(changed(a.ino));
                }
                self.section = a.ino;
                Ok(())
            }
            // Sizes are compared with the attributes.
            Record::Truncate { .. } => Ok(()),
            Record::Write { offset, data } => {
                if self.base.read(ino, offset, data.len())? == data {
                    Ok(())
                } else {
                    Err(changed(ino))
                }
            }
            Record::Hole { offset, len } => {
                let mut at = offset;
                while at < offset + len {
                    let n = (offset + len - at).min(1 << 20) as usize;
                    if self.base.read(ino, at, n)?.iter().any(|&b| b != 0) {
                        return Err(changed(ino));
                    }
                    at += n as u64;
                }
                Ok(())
            }
            Record::Gone(g) => Err(changed(g)),
            _ => Err(changed(ino)),
        }
    }
}

impl Volume {
    /// The mark of a receive under way on this volume, if one is.
    #[must_use]
    pub fn receive_pending(&self) -> Option<Vec<u8>> {
        self.with_fs(|fs| fs.xattr_get(InodeNo::ROOT, RECEIVING_XATTR).ok())
    }

    /// Refuses what would keep the tree of a receive under way: a
    /// snapshot of it, or making another tree live.
    pub(super) fn refuse_while_receiving(&self, what: &str) -> Result<()> {
        match self.receive_pending() {
            Some(m) => Err(Error::ReceiveRefused(format!(
                "{what}: a receive is under way on this volume ({}) and its tree is incomplete: receive the same                  stream again to finish it, or abandon it with `dualfs receive --abort`",
                describe_mark(&m)
            ))),
            None => Ok(()),
        }
    }

    /// The id of the snapshot a receive under way started from, if any.
    pub(super) fn receive_base(&self) -> Option<u64> {
        self.receive_pending().and_then(|m| Marker::parse(&m).ok()).and_then(|m| m.base)
    }

    /// Applies the send stream read from `input`, then makes a snapshot
    /// named as the stream's target snapshot (see [`Volume::receive_with`]).
    ///
    /// # Errors
    /// As [`Volume::receive_with`].
    pub fn receive(&self, input: &mut dyn Read) -> Result<ReceiveReport> {
        self.receive_with(input, &mut Touched::default())
    }

    /// Applies the send stream read from `input`, then makes a snapshot
    /// named as the stream's target snapshot. A full stream needs an empty
    /// volume; an incremental one needs the snapshot its base was received
    /// as, and a live tree unchanged since (access times aside). Every
    /// record is checked against the tree it builds. A stream refused or
    /// cut short leaves the volume as it was; one a crash interrupted is
    /// finished by receiving it again, and until then every other stream
    /// is refused. `touched` gets what changed, whatever the outcome.
    ///
    /// # Errors
    /// `ReceiveRefused` (nothing was changed), `Stream` for a malformed,
    /// inconsistent or cut stream (the volume is brought back as it was),
    /// a device fails (then a receive may stay under way).
    pub fn receive_with(&self, input: &mut dyn Read, touched: &mut Touched) -> Result<ReceiveReport> {
        self.check_writable()?;
        let mut reader = StreamReader::new(input);
        reader.prelude()?;
        let Record::Header(header) = reader.next()? else {
            return Err(Error::Stream("the first record is not the header".into()));
        };
        let text = pending(&header);
        let resumed = match self.receive_pending() {
            Some(m) if m == text => true,
            Some(m) => {
                return Err(Error::ReceiveRefused(format!(
                    "a receive interrupted on this volume is not finished ({}): receive that stream again, or                      abandon it with `dualfs receive --abort`",
                    describe_mark(&m)
                )));
            }
            None => false,
        };
        let marker = Marker::parse(&text)?;
        let root_before = self.with_fs(|fs| fs.inode(InodeNo::ROOT).map(attrs_of))?;
        let root_xattr = |name: &[u8]| self.with_fs(|fs| fs.xattr_get(InodeNo::ROOT, name).ok());
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
        if resumed {
            // The stream is applied to the last complete tree, which it is
            // checked against: back there first.
            self.roll_back(&marker, None, touched)?;
        } else {
            self.check_base(&header)?;
            // The mark is durable before any record is applied: a crash
            // from here on leaves a tree marked for finishing.
            if !crate::faults::active(crate::faults::Fault::ReceiveWithoutMark) {
                self.with_step(|fs| fs.xattr_set(InodeNo::ROOT, RECEIVING_XATTR, &text, SetMode::Any))?;
                self.commit()?;
            }
        }
        let counts = match self.apply_stream(&mut reader, touched) {
            Ok(c) => c,
            Err(e) => return Err(self.abandon(e, &marker, &root_before, touched)),
        };
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
        self.forget_referenced(touched)?;
        Ok(ReceiveReport { snapshot: header.target.name.clone(), counts, resumed })
    }

    /// Applies the records after the header, checked, up to the end record.
    fn apply_stream(&self, reader: &mut StreamReader<'_>, touched: &mut Touched) -> Result<StreamCounts> {
        let mut apply = Apply::new(self, touched, true);
        let counts = loop {
            match reader.next()? {
                Record::Header(_) => return Err(reader.at_last(Error::Stream("a second header".into()))),
                Record::End(c) => break c,
                rec => {
                    apply.record(rec).map_err(|e| reader.at_last(e))?;
                    if reader.counts.records.is_multiple_of(COMMIT_EVERY) {
                        self.commit()?;
                        apply.freed.clear();
                    }
                }
            }
        };
        if counts != reader.counts {
            return Err(Error::Stream(format!(
                "the end record counts {counts:?}, the stream held {:?}: records are missing",
                reader.counts
            )));
        }
        reader.expect_eof()?;
        apply.end()?;
        Ok(counts)
    }

    /// After a receive failed with `e`: back to the last complete tree and
    /// the mark removed, when the volume can still be written. The error
    /// to report.
    fn abandon(&self, e: Error, marker: &Marker, root: &InodeAttrs, touched: &mut Touched) -> Error {
        if self.failure().is_some() {
            return e;
        }
        let back = self
            .roll_back(marker, Some(root), touched)
            .and_then(|_| self.clear_mark())
            .and_then(|()| self.forget_referenced(touched));
        match (back, e) {
            (Ok(()), Error::Stream(why)) => Error::Stream(format!("{why}; the volume is as it was before the receive")),
            (Ok(()), e) => e,
            (Err(again), e) => {
                log::error!("going back to the tree before the receive failed: {again}");
                e
            }
        }
    }

    fn clear_mark(&self) -> Result<()> {
        self.with_step(|fs| {
            if fs.xattr_has(InodeNo::ROOT, RECEIVING_XATTR)? {
                fs.xattr_remove(InodeNo::ROOT, RECEIVING_XATTR)
            } else {
                Ok(())
            }
        })?;
        self.commit()
    }

    /// Abandons the receive under way: the live tree goes back to the last
    /// complete one (the receive's base snapshot, or the empty volume a
    /// full stream started from) and the mark is removed. `touched` gets
    /// what changed.
    ///
    /// # Errors
    /// `ReceiveRefused` when no receive is under way or its base snapshot
    /// is gone; a device fails (then run it again).
    pub fn receive_abort(&self, touched: &mut Touched) -> Result<AbortReport> {
        self.check_writable()?;
        let Some(text) = self.receive_pending() else {
            return Err(Error::ReceiveRefused("no receive is under way on this volume".into()));
        };
        let marker = Marker::parse(&text)?;
        let base = marker.base.and_then(|id| self.snapshot_list().into_iter().find(|s| s.id == id)).map(|s| s.name);
        let inodes = self.roll_back(&marker, None, touched)?;
        self.clear_mark()?;
        self.forget_referenced(touched)?;
        Ok(AbortReport { stream: describe_mark(&text), base, inodes })
    }

    /// Adds to `touched` the names of the inodes it holds that the kernel
    /// references too (see [`Volume::names_of_referenced`]).
    fn forget_referenced(&self, touched: &mut Touched) -> Result<()> {
        let names = self.names_of_referenced(&touched.inodes)?;
        touched.names.extend(names);
        Ok(())
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
        match diff(
            Some(&snap),
            self,
            DiffOptions { ignore_atime: true },
            &mut Unchanged { base: &snap, section: InodeNo(0) },
        ) {
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
