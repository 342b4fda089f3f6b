//! Applying a stream's records to the volume, with the namespace's own
//! steps (no link counting, no emptiness checks: the tree is consistent at
//! the end, not after each record). A receive checks each record as it
//! goes and the whole at the end ([`Ledger`]); a rollback applies the
//! records of a comparison between two of the volume's own images, which
//! need no check.

use std::collections::HashSet;

use super::super::{FallocateMode, Stamp, Volume};
use super::ledger::{self, Ledger};
use super::{RECEIVED_XATTR, RECEIVING_XATTR, Touched};
use crate::error::{Error, Result};
use crate::format::inode::{Body, InodeRecord};
use crate::format::name::FileName;
use crate::format::stream::{InodeAttrs, Record};
use crate::namespace::xattr::SetMode;
use crate::types::{BLOCK_BYTES, FileKind, GroupNo, InodeNo};

/// Whether `name` on inode `ino` is one of the receive's own marks, which
/// a stream never sets (the source's, when it is a mirror itself, are its
/// own business) and a rollback never undoes.
pub(super) fn is_mark(ino: InodeNo, name: &[u8]) -> bool {
    ino == InodeNo::ROOT
        && (name == RECEIVED_XATTR || name == RECEIVING_XATTR || name == crate::format::quota::QUOTA_XATTR)
}

/// The state of applying a stream's records.
pub(super) struct Apply<'a> {
    vol: &'a Volume,
    /// The inode whose section is open: its attributes, set when it closes.
    section: Option<InodeAttrs>,
    /// The last inode or gone record: (number, whether it was an inode record).
    last: (u64, bool),
    /// Numbers freed since the last commit: not reused before one.
    pub(super) freed: HashSet<InodeNo>,
    /// The data group new files take (their directory's, most likely).
    group: GroupNo,
    /// What a cache of the tree must forget.
    touched: &'a mut Touched,
    /// The check of a received stream; None for a rollback.
    ledger: Option<Ledger>,
    /// The root's attributes, set only at the end of a received stream:
    /// until then the root shows those of the last complete tree (an
    /// empty volume's, which a rollback cannot know, among them).
    root: Option<InodeAttrs>,
    /// The volume is marked as keeping inode flags (format 1.6).
    flags_marked: bool,
    /// The open section makes a symlink, not made yet: it is made with its
    /// target, in one step. A commit between the inode record and the
    /// target's (one every `COMMIT_EVERY` records, the rollback's first,
    /// the mount's timer) would otherwise make a symlink without a target
    /// durable, which a crash then leaves for fsck to call broken.
    unborn: bool,
}

impl<'a> Apply<'a> {
    /// Applies records checked (`checked`: a stream from outside) or not
    /// (the volume's own images compared).
    pub(super) fn new(vol: &'a Volume, touched: &'a mut Touched, checked: bool) -> Self {
        Apply {
            vol,
            section: None,
            last: (0, false),
            freed: HashSet::new(),
            group: GroupNo(0),
            touched,
            ledger: checked.then(Ledger::default),
            root: None,
            flags_marked: false,
            unborn: false,
        }
    }

    pub(super) fn record(&mut self, rec: Record) -> Result<()> {
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

    /// Closes the last section, then (for a received stream) checks the
    /// tree the records built.
    pub(super) fn end(&mut self) -> Result<()> {
        self.finish()?;
        if let Some(a) = self.root.take() {
            self.set_attrs(&a)?;
        }
        match &self.ledger {
            Some(l) => l.verify(self.vol),
            None => Ok(()),
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

    /// Frees `ino` (a directory's entries with it).
    fn delete(&mut self, ino: InodeNo) -> Result<()> {
        if let Some(l) = self.ledger.as_mut() {
            l.deleting(self.vol, ino)?;
        }
        self.vol.delete_inode(ino)?;
        self.freed.insert(ino);
        Ok(())
    }

    fn gone(&mut self, ino: InodeNo) -> Result<()> {
        self.finish()?;
        self.order(ino, false)?;
        self.touched.inodes.push(ino);
        if self.vol.with_fs(|fs| fs.inode(ino).is_ok()) {
            self.delete(ino)?;
        }
        Ok(())
    }

    fn inode(&mut self, a: InodeAttrs) -> Result<()> {
        self.finish()?;
        self.order(a.ino, true)?;
        if let Some(l) = self.ledger.as_mut() {
            ledger::check_attrs(&a)?;
            l.touch(self.vol, a.ino)?;
        }
        self.touched.inodes.push(a.ino);
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
                self.delete(a.ino)?;
                self.begin(&a, kind)?;
            }
            None => self.begin(&a, kind)?,
        }
        if kind == FileKind::Directory {
            self.group = self.vol.with_fs(|fs| fs.inode(a.ino).map(|r| r.group))?;
        }
        self.section = Some(a);
        Ok(())
    }

    /// Makes the inode a section opens, or for a symlink, leaves it to
    /// its target's record.
    fn begin(&mut self, a: &InodeAttrs, kind: FileKind) -> Result<()> {
        if kind == FileKind::Symlink {
            self.unborn = true;
            return Ok(());
        }
        self.create(a, kind, None)
    }

    /// Makes inode `a` of `kind`; a symlink with its `target`, in the same step.
    fn create(&mut self, a: &InodeAttrs, kind: FileKind, target: Option<&[u8]>) -> Result<()> {
        if self.freed.contains(&a.ino) {
            // A number freed in this commit group is reused only in a later
            // one (roll-forward must never meet two lives of it in one group).
            self.vol.commit()?;
            self.freed.clear();
        }
        let group = self.group;
        self.vol.with_step(|fs| {
            let group = if kind == FileKind::Directory { fs.bind_new_directory(a.parent)? } else { group };
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
            if let Some(target) = target {
                fs.set_symlink_target(a.ino, target)?;
            }
            Ok(())
        })
    }

    /// Checks an entry about to name `child` as a `kind` in directory
    /// `dir`: what can be refused at once is (an inode the stream has
    /// passed is as it will stay); the rest waits for the end.
    fn check_link(&self, dir: InodeNo, child: InodeNo, kind: FileKind) -> Result<()> {
        if self.ledger.is_none() {
            return Ok(());
        }
        if child == InodeNo::ROOT {
            return Err(Error::Stream(format!("an entry in directory {dir} names the root directory")));
        }
        if child == dir {
            return Err(Error::Stream(format!("directory {dir} names itself")));
        }
        if child < dir {
            let now = match self.vol.with_fs(|fs| fs.inode(child).map(|r| FileKind::from_mode(r.mode))) {
                Ok(k) => k,
                Err(Error::NotFound) => {
                    return Err(Error::Stream(format!(
                        "an entry in directory {dir} names inode {child}, which the stream does not create"
                    )));
                }
                Err(e) => return Err(e),
            };
            if now != Some(kind) {
                return Err(Error::Stream(format!(
                    "an entry in directory {dir} names inode {child} as a {}, but it is a {}",
                    ledger::word(kind),
                    now.map_or("thing of no known type", ledger::word)
                )));
            }
        }
        Ok(())
    }

    fn link(&mut self, dir: InodeNo, name: Vec<u8>, child: InodeNo, k: FileKind) -> Result<()> {
        let fname = FileName::new(&name).map_err(|_| Error::Stream("a link record's name is invalid".into()))?;
        self.check_link(dir, child, k)?;
        self.touched.names.push((dir, name.clone()));
        let was = self.vol.with_fs(|fs| fs.dir_lookup(dir, &name))?;
        if let Some(e) = &was
            && e.ino == child
            && e.kind == k
        {
            return Ok(());
        }
        if let Some(l) = self.ledger.as_mut() {
            if let Some(e) = &was {
                l.removed(self.vol, dir, e.ino, e.kind)?;
            }
            l.added(self.vol, dir, child, k)?;
        }
        self.vol.with_step(|fs| match &was {
            Some(e) => fs.dir_replace(dir, e, child, k),
            None => fs.dir_insert(dir, &fname, child, k).map(|_| ()),
        })
    }

    fn unlink(&mut self, dir: InodeNo, name: Vec<u8>) -> Result<()> {
        let Some(e) = self.vol.with_fs(|fs| fs.dir_lookup(dir, &name))? else { return Ok(()) };
        self.touched.names.push((dir, name));
        if let Some(l) = self.ledger.as_mut() {
            l.removed(self.vol, dir, e.ino, e.kind)?;
        }
        self.vol.with_step(|fs| fs.dir_remove(dir, e.position))
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
                self.link(ino, name, child, k)
            }
            Record::Unlink { name } => {
                if kind != Some(FileKind::Directory) {
                    return wrong("unlink");
                }
                self.unlink(ino, name)
            }
            Record::Truncate { size } if kind == Some(FileKind::Regular) => vol.truncate(ino, size),
            Record::Write { offset, data } if kind == Some(FileKind::Regular) => {
                vol.write_with(ino, offset, &data, Stamp::Keep).map(|_| ())
            }
            Record::Hole { offset, len } if kind == Some(FileKind::Regular) => {
                let mode = FallocateMode::PUNCH_HOLE;
                vol.fallocate(ino, offset, len, mode)
            }
            Record::Truncate { .. } | Record::Write { .. } | Record::Hole { .. } => wrong("file data"),
            Record::Symlink { target } => {
                if kind != Some(FileKind::Symlink) {
                    return wrong("symlink");
                }
                if std::mem::take(&mut self.unborn) {
                    return self.create(a, FileKind::Symlink, Some(target.as_slice()));
                }
                vol.with_step(|fs| {
                    if let Body::Blob { nodes, .. } = fs.inode(ino)?.body.clone() {
                        fs.free_blob(&nodes);
                    }
                    fs.set_symlink_target(ino, &target)
                })
            }
            _ if self.unborn => Err(Error::Stream(format!("a record for symlink {ino} before its target"))),
            Record::XattrSet { name, .. } | Record::XattrRemove { name } if is_mark(ino, &name) => Ok(()),
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
    pub(super) fn finish(&mut self) -> Result<()> {
        let Some(a) = self.section.take() else { return Ok(()) };
        if std::mem::take(&mut self.unborn) {
            return Err(Error::Stream(format!("symlink {} has no target record", a.ino)));
        }
        if (a.flags != 0 || a.project != 0) && !self.flags_marked {
            self.vol.mark_inode_flags()?;
            self.flags_marked = true;
        }
        if a.ino == InodeNo::ROOT && self.ledger.is_some() {
            self.root = Some(a);
            return Ok(());
        }
        self.set_attrs(&a)
    }

    fn set_attrs(&self, a: &InodeAttrs) -> Result<()> {
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
