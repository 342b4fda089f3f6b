//! Names and attributes: LOOKUP, FORGET, GETATTR, SETATTR, READLINK, the
//! requests that make and remove names, READDIR(PLUS), STATFS.

use std::time::Duration;

use dualfs_engine::Error;
use dualfs_engine::types::{InodeNo, Timestamp};
use dualfs_engine::volume::{Attr, Changer, Listing, SetAttr, Stamp, StatFs, TimeSet};

use super::{creds, report};
use crate::answers::{Caller, Entry, Errno, FOPEN_KEEP_CACHE, Opened};
use crate::convert;
use crate::requests::Op;
use crate::{DualFs, caller};

/// Entries listed per engine call in readdirplus: the attributes are read
/// outside the directory walk, a batch at a time, so that a reply buffer
/// that fills early wastes few look-ups.
const PLUS_BATCH: usize = 32;

/// A SETATTR, as the kernel asks it (the fields its `valid` bits name).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttrIn {
    /// New permission bits (the type bits are ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size.
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<TimeSet>,
    /// New modification time.
    pub mtime: Option<TimeSet>,
    /// The change time the kernel stamped.
    pub ctime: Option<Timestamp>,
    /// FATTR_KILL_SUIDGID (FUSE_HANDLE_KILLPRIV_V2): the kernel asks the
    /// set-id bits dropped, on every chown of a non-directory and on a
    /// truncation by a caller without CAP_FSETID; `None` where the
    /// transport does not say.
    pub kill_suidgid: Option<bool>,
}

fn ino(n: u64) -> InodeNo {
    InodeNo(n)
}

impl DualFs {
    /// The lifetime of attributes in GETATTR and SETATTR answers.
    #[must_use]
    pub fn attr_ttl(&self) -> Duration {
        self.options.attr_ttl
    }

    /// An entry the kernel takes a lookup reference on; the engine has
    /// already counted it (create, mkdir, mknod, symlink, link) or the
    /// caller has (lookup).
    pub(crate) fn entry(&self, a: Attr) -> Entry {
        Entry { attr: Some(a), attr_ttl: self.options.attr_ttl, entry_ttl: self.options.entry_ttl }
    }

    fn answer_entry(&self, op: &str, r: Result<Attr, Error>) -> Result<Entry, Errno> {
        r.map(|a| self.entry(a)).map_err(|e| report(op, &e))
    }

    /// LOOKUP of `name` in `parent`; a name that is not there is a negative
    /// entry the kernel may keep: the name can appear only through this
    /// kernel, which then replaces it.
    ///
    /// # Errors
    /// The engine's.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Entry, Errno> {
        let _t = self.requests.time(Op::Lookup);
        // Path walks never send ".": the kernel asks it of a node id taken
        // from a file handle (open_by_handle_at, the NFS server) whose inode
        // it no longer caches, and that node may be any kind of file. A free
        // or reused inode number answers ENOENT or another generation, which
        // the kernel turns into ESTALE.
        let found = if name == b"." { self.vol.getattr(ino(parent)) } else { self.vol.lookup(ino(parent), name) };
        match found {
            Ok(a) => {
                self.vol.remember(a.ino, 1);
                Ok(self.entry(a))
            }
            Err(Error::NotFound) => {
                Ok(Entry { attr: None, attr_ttl: Duration::ZERO, entry_ttl: self.options.entry_ttl })
            }
            Err(e) => Err(report("lookup", &e)),
        }
    }

    /// FORGET (one of a BATCH_FORGET's too): the kernel dropped `nlookup`
    /// references to `node`.
    pub fn forget(&self, node: u64, nlookup: u64) {
        let _t = self.requests.time(Op::Forget);
        if let Err(e) = self.vol.forget(ino(node), nlookup) {
            log::error!("forget of inode {node}: {e}");
        }
    }

    /// GETATTR.
    ///
    /// # Errors
    /// The engine's.
    pub fn getattr(&self, node: u64) -> Result<Attr, Errno> {
        let _t = self.requests.time(Op::Getattr);
        self.vol.getattr(ino(node)).map_err(|e| report("getattr", &e))
    }

    /// SETATTR. The kernel has done the permission checks; a mode it sends
    /// is applied as it is. The set-id bits a truncation or chown drops
    /// are the engine's to decide ([`dualfs_engine::volume::Changer`]).
    ///
    /// # Errors
    /// The engine's.
    pub fn setattr(&self, caller: Caller, node: u64, set: &SetAttrIn) -> Result<Attr, Errno> {
        let _t = self.requests.time(Op::Setattr);
        if let (Some(clock), Some(c)) = (&self.clock, set.ctime) {
            clock.saw(c);
        }
        let set = SetAttr {
            mode: set.mode.map(|m| m & 0o7777),
            uid: set.uid,
            gid: set.gid,
            size: set.size,
            atime: set.atime,
            mtime: set.mtime,
            ctime: set.ctime,
            // With the writeback cache the kernel owns mtime and ctime and
            // sends them when a truncation should move them (not, for one,
            // when truncate(2) leaves the size as it was).
            size_stamp: if self.writeback() { Stamp::Keep } else { Stamp::Now },
            changer: self.setattr_changer(caller, node, set),
        };
        self.vol.setattr(ino(node), &set).map_err(|e| report("setattr", &e))
    }

    /// Who a SETATTR's truncation or chown is by. A truncation flagged
    /// FATTR_KILL_SUIDGID is by a caller without CAP_FSETID, one without
    /// the flag by one the kernel found privileged; a chown is always
    /// flagged, and root stands for CAP_FSETID (the kernel does not say).
    fn setattr_changer(&self, caller: Caller, node: u64, set: &SetAttrIn) -> Changer {
        if set.size.is_none() && set.uid.is_none() && set.gid.is_none() {
            return Changer::Privileged;
        }
        let chown = set.uid.is_some() || set.gid.is_some();
        let privileged = match set.kill_suidgid {
            _ if chown => caller.uid == 0,
            Some(kill) => !kill,
            None => caller.uid == 0,
        };
        let mode = if privileged { 0 } else { self.vol.getattr(ino(node)).map_or(0o2000, |a| a.perm) };
        caller::changer(caller, privileged, mode)
    }

    /// READLINK.
    ///
    /// # Errors
    /// The engine's.
    pub fn readlink(&self, node: u64) -> Result<Vec<u8>, Errno> {
        let _t = self.requests.time(Op::Readlink);
        self.vol.readlink(ino(node)).map_err(|e| report("readlink", &e))
    }

    /// MKNOD.
    ///
    /// # Errors
    /// EINVAL for type bits that name no kind of file; the engine's.
    pub fn mknod(
        &self,
        caller: Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<Entry, Errno> {
        let _t = self.requests.time(Op::Mknod);
        let kind = convert::mknod_kind(mode)?;
        let r = self.vol.mknod(ino(parent), name, kind, mode & 0o7777, u64::from(rdev), creds(caller, umask));
        self.answer_entry("mknod", r)
    }

    /// MKDIR.
    ///
    /// # Errors
    /// The engine's.
    pub fn mkdir(&self, caller: Caller, parent: u64, name: &[u8], mode: u32, umask: u32) -> Result<Entry, Errno> {
        let _t = self.requests.time(Op::Mkdir);
        let r = self.vol.mkdir(ino(parent), name, mode & 0o7777, creds(caller, umask));
        self.answer_entry("mkdir", r)
    }

    /// UNLINK.
    ///
    /// # Errors
    /// The engine's.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        let _t = self.requests.time(Op::Unlink);
        self.vol.unlink(ino(parent), name).map_err(|e| report("unlink", &e))
    }

    /// RMDIR.
    ///
    /// # Errors
    /// The engine's.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        let _t = self.requests.time(Op::Rmdir);
        self.vol.rmdir(ino(parent), name).map_err(|e| report("rmdir", &e))
    }

    /// SYMLINK.
    ///
    /// # Errors
    /// The engine's.
    pub fn symlink(&self, caller: Caller, parent: u64, name: &[u8], target: &[u8]) -> Result<Entry, Errno> {
        let _t = self.requests.time(Op::Symlink);
        let r = self.vol.symlink(ino(parent), name, target, creds(caller, 0));
        self.answer_entry("symlink", r)
    }

    /// RENAME and RENAME2; a whiteout is the caller's (the kernel checked
    /// CAP_MKNOD).
    ///
    /// # Errors
    /// EINVAL for flags other than NOREPLACE, EXCHANGE and WHITEOUT; the engine's.
    pub fn rename(
        &self,
        caller: Caller,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: u32,
    ) -> Result<(), Errno> {
        let _t = self.requests.time(Op::Rename);
        let flags = convert::rename_flags(flags, (caller.uid, caller.gid))?;
        let r = self.vol.rename(ino(parent), name, ino(new_parent), new_name, flags);
        r.map_err(|e| report("rename", &e))
    }

    /// LINK.
    ///
    /// # Errors
    /// The engine's.
    pub fn link(&self, node: u64, new_parent: u64, new_name: &[u8]) -> Result<Entry, Errno> {
        let _t = self.requests.time(Op::Link);
        let r = self.vol.link(ino(node), ino(new_parent), new_name);
        self.answer_entry("link", r)
    }

    /// OPENDIR: ENOSYS, so that the kernel stops asking (`no_opendir`,
    /// Linux 5.1 and later) and opens directories on its own from then on,
    /// without RELEASEDIR either. A directory handle would carry nothing
    /// here (listings go by offset, the kernel has checked the permission
    /// and holds the inode), and each listing saves two round trips: two of
    /// the five `find` sends per directory.
    ///
    /// # Errors
    /// Always ENOSYS.
    pub fn opendir(&self, _node: u64) -> Result<Opened, Errno> {
        let _t = self.requests.time(Op::Opendir);
        Err(Errno::ENOSYS)
    }

    /// READDIR from `offset`: `add` takes each entry and says whether the
    /// reply is full (the entry did not fit, and is not taken).
    ///
    /// # Errors
    /// The engine's.
    pub fn readdir(&self, node: u64, offset: u64, add: &mut dyn FnMut(&Listing) -> bool) -> Result<(), Errno> {
        let _t = self.requests.time(Op::Readdir);
        self.vol.readdir(ino(node), offset, &mut |l| !add(&l)).map_err(|e| report("readdir", &e))
    }

    /// READDIRPLUS from `offset`: `add` takes each entry with its
    /// attributes and says whether the reply is full. The kernel takes a
    /// lookup reference on every entry taken but `.` and `..`, which this
    /// counts.
    ///
    /// With `known_bare`, an entry whose inode the kernel holds already
    /// (it has a lookup reference: its attributes are cached, and kept
    /// fresh by the kernel's own changes and the adapter's notifications)
    /// comes without attributes (`attr` None), to be sent with node id 0:
    /// the kernel lists the name and leaves what it caches of the inode
    /// alone, its ACLs among them, which fresh attributes would drop (so a
    /// warm `ls -l` would ask for them all again). No reference is taken
    /// for it. Without `known_bare` every entry carries its attributes.
    ///
    /// # Errors
    /// The engine's.
    pub fn readdirplus(
        &self,
        node: u64,
        offset: u64,
        known_bare: bool,
        add: &mut dyn FnMut(&Listing, &Entry) -> bool,
    ) -> Result<(), Errno> {
        let _t = self.requests.time(Op::Readdirplus);
        self.readdirplus_fill(ino(node), offset, known_bare, add).map_err(|e| report("readdirplus", &e))
    }

    /// Lists up to [`PLUS_BATCH`] entries from `offset`.
    fn list_batch(&self, dir: InodeNo, offset: u64) -> Result<Vec<Listing>, Error> {
        let mut batch = Vec::with_capacity(PLUS_BATCH);
        self.vol.readdir(dir, offset, &mut |l| {
            batch.push(l);
            batch.len() < PLUS_BATCH
        })?;
        Ok(batch)
    }

    fn readdirplus_fill(
        &self,
        dir: InodeNo,
        mut offset: u64,
        known_bare: bool,
        add: &mut dyn FnMut(&Listing, &Entry) -> bool,
    ) -> Result<(), Error> {
        loop {
            let batch = self.list_batch(dir, offset)?;
            let last = batch.len() < PLUS_BATCH;
            for l in batch {
                let dots = l.name == b"." || l.name == b"..";
                if known_bare && !dots && self.vol.references(l.ino) > 0 {
                    let bare = Entry { attr: None, attr_ttl: Duration::ZERO, entry_ttl: Duration::ZERO };
                    if add(&l, &bare) {
                        return Ok(());
                    }
                    offset = l.next;
                    continue;
                }
                let attr = match self.vol.getattr(l.ino) {
                    Ok(a) => a,
                    // Removed since it was listed: leave it out.
                    Err(Error::NotFound) => {
                        offset = l.next;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let entry =
                    Entry { attr: Some(attr), attr_ttl: self.options.entry_ttl, entry_ttl: self.options.entry_ttl };
                if add(&l, &entry) {
                    return Ok(());
                }
                if !dots {
                    self.vol.remember(l.ino, 1);
                }
                offset = l.next;
            }
            if last {
                return Ok(());
            }
        }
    }

    /// RELEASEDIR: nothing to do, handles are stateless.
    pub fn releasedir(&self) {
        let _t = self.requests.time(Op::Releasedir);
    }

    /// FSYNCDIR.
    ///
    /// # Errors
    /// The engine's.
    pub fn fsyncdir(&self, node: u64) -> Result<(), Errno> {
        let _t = self.requests.time(Op::Fsyncdir);
        self.vol.fsync(ino(node)).map_err(|e| report("fsyncdir", &e))
    }

    /// STATFS, with the available blocks the writeback cache leaves.
    pub fn statfs(&self) -> StatFs {
        let _t = self.requests.time(Op::Statfs);
        let mut s = self.vol.statfs();
        s.bavail = self.available_blocks(&s);
        s
    }

    /// ACCESS: only sent without default_permissions, which this adapter
    /// always mounts with: the kernel checks the mode bits itself. Answer
    /// for existence, as F_OK would.
    ///
    /// # Errors
    /// The engine's.
    pub fn access(&self, node: u64) -> Result<(), Errno> {
        let _t = self.requests.time(Op::Access);
        self.vol.getattr(ino(node)).map(|_| ()).map_err(|e| report("access", &e))
    }

    /// CREATE: a new regular file, opened.
    ///
    /// # Errors
    /// The engine's.
    pub fn create(
        &self,
        caller: Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
    ) -> Result<(Entry, Opened), Errno> {
        let _t = self.requests.time(Op::Create);
        match self.vol.create(ino(parent), name, mode & 0o7777, creds(caller, umask)) {
            Ok(a) => {
                let flags = FOPEN_KEEP_CACHE | self.write_open_flags(a.ino);
                let entry =
                    Entry { attr: Some(a), attr_ttl: self.options.entry_ttl, entry_ttl: self.options.entry_ttl };
                Ok((entry, Opened { fh: 0, flags }))
            }
            Err(e) => Err(report("create", &e)),
        }
    }

    /// TMPFILE: an unnamed regular file in `parent`, an orphan until a
    /// LINK names it (`linkat` with AT_EMPTY_PATH, or of /proc/self/fd),
    /// freed when the kernel forgets it otherwise, and by recovery after a
    /// crash. Answered as CREATE: the entry has no link.
    ///
    /// # Errors
    /// The engine's.
    pub fn tmpfile(&self, caller: Caller, parent: u64, mode: u32, umask: u32) -> Result<(Entry, Opened), Errno> {
        let _t = self.requests.time(Op::Create);
        match self.vol.tmpfile(ino(parent), mode & 0o7777, creds(caller, umask)) {
            Ok(a) => {
                let flags = FOPEN_KEEP_CACHE | self.write_open_flags(a.ino);
                let entry =
                    Entry { attr: Some(a), attr_ttl: self.options.entry_ttl, entry_ttl: self.options.entry_ttl };
                Ok((entry, Opened { fh: 0, flags }))
            }
            Err(e) => Err(report("tmpfile", &e)),
        }
    }
}
