//! The `fuser::Filesystem` implementation: one method per kernel request,
//! each a call into the engine and a reply.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use dualfs_engine::Error;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{AclKind, Attr, Creds, Listing, SetAttr, Stamp};
use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::DualFs;
use crate::caller;
use crate::convert::{self, errno, file_attr, file_type, ino};
use crate::requests::Op;

/// Capabilities asked of the kernel, each for a reason:
/// writeback caching (large, merged writes), readdirplus (one round trip
/// for `ls -l`, adaptively), parallel lookups in one directory (the engine
/// is thread-safe), cached symlink targets (they never change),
/// lookups of `.`/`..` for NFS export (inode numbers and generations are
/// stable across mounts), and POSIX ACLs: the kernel checks them and the
/// engine keeps them, which needs the umask unapplied (a directory's
/// default ACL replaces it).
const WANTED: [InitFlags; 10] = [
    InitFlags::FUSE_POSIX_ACL,
    InitFlags::FUSE_DONT_MASK,
    InitFlags::FUSE_WRITEBACK_CACHE,
    InitFlags::FUSE_DO_READDIRPLUS,
    InitFlags::FUSE_READDIRPLUS_AUTO,
    InitFlags::FUSE_PARALLEL_DIROPS,
    InitFlags::FUSE_CACHE_SYMLINKS,
    InitFlags::FUSE_EXPORT_SUPPORT,
    // We drop set-id bits and file capabilities on write, truncate and
    // chown ourselves; in return the kernel stops asking for
    // security.capability before every write (it sets SB_NOSEC).
    InitFlags::FUSE_HANDLE_KILLPRIV_V2,
    // Files opened for direct I/O on a nearly full volume (see `open`) can
    // still be mapped (kernel 6.6 and later; older kernels refuse mmap).
    InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
];

/// Entries listed per engine call in readdirplus: the attributes are read
/// outside the directory walk, a batch at a time, so that a reply buffer
/// that fills early wastes few look-ups.
const PLUS_BATCH: usize = 32;

/// Most bytes one `copy_file_range` request copies; the caller loops.
const COPY_MAX: u64 = 64 << 20;
/// Bytes read and written at a time by `copy_file_range`.
const COPY_CHUNK: u64 = 1 << 20;

fn name(n: &OsStr) -> &[u8] {
    n.as_bytes()
}

/// The creator of a new inode. The kernel sends the mode unmasked
/// (FUSE_DONT_MASK) with the umask beside it; the engine applies one or the
/// directory's default ACL. A kernel that masked already loses nothing by
/// masking twice.
fn creds(req: &Request, umask: u32) -> Creds {
    Creds { uid: req.uid(), gid: req.gid(), umask: umask & 0o777 }
}

/// POSIX ACLs travel as these xattrs.
fn acl_kind(n: &OsStr) -> Option<AclKind> {
    AclKind::of_xattr(n.as_bytes())
}

/// Logs errors the kernel's caller will only see as an errno but an
/// administrator must hear about (I/O, corruption, a volume gone read-only).
pub(crate) fn report(op: &str, e: &Error) -> Errno {
    match e {
        Error::NoSpace(role) => warn_no_space(op, e, *role),
        Error::Io { .. } | Error::Corrupt { .. } => log::error!("{op}: {e}"),
        Error::ReadOnly(why) if why.contains("after an error") => log::warn!("{op}: {e}"),
        _ => log::debug!("{op}: {e}"),
    }
    errno(e)
}

/// When ENOSPC was last logged (seconds since the epoch), per device: a
/// full device fails every write, and one line every ten seconds says it.
static NO_SPACE_LOGGED: [std::sync::atomic::AtomicU64; 2] =
    [std::sync::atomic::AtomicU64::new(0), std::sync::atomic::AtomicU64::new(0)];

fn warn_no_space(op: &str, e: &Error, role: dualfs_engine::error::DeviceRole) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let slot = &NO_SPACE_LOGGED[usize::from(role == dualfs_engine::error::DeviceRole::Meta)];
    let last = slot.load(std::sync::atomic::Ordering::Relaxed);
    if now >= last + 10
        && slot
            .compare_exchange(last, now, std::sync::atomic::Ordering::Relaxed, std::sync::atomic::Ordering::Relaxed)
            .is_ok()
    {
        log::warn!("{op}: {e}: {}", dualfs_engine::volume::no_space_advice(role));
    } else {
        log::debug!("{op}: {e}");
    }
}

impl DualFs {
    fn generation(a: &Attr) -> Generation {
        Generation(u64::from(a.generation))
    }

    /// Replies with an entry the kernel takes a lookup reference on; the
    /// engine has already counted it (create, mkdir, mknod, symlink, link)
    /// or the caller has (lookup).
    fn entry(&self, reply: ReplyEntry, a: &Attr) {
        reply.entry_with_ttls(&self.options.attr_ttl, &self.options.entry_ttl, &file_attr(a), Self::generation(a));
    }

    fn reply_entry(&self, op: &str, r: Result<Attr, Error>, reply: ReplyEntry) {
        match r {
            Ok(a) => self.entry(reply, &a),
            Err(e) => reply.error(report(op, &e)),
        }
    }

    fn reply_empty(op: &str, r: Result<(), Error>, reply: ReplyEmpty) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(report(op, &e)),
        }
    }

    fn reply_xattr(data: Vec<u8>, size: u32, reply: ReplyXattr) {
        // size 0 asks how large a buffer to bring; too small a buffer is ERANGE.
        let Ok(len) = u32::try_from(data.len()) else {
            return reply.error(Errno::E2BIG);
        };
        if size == 0 {
            reply.size(len);
        } else if len > size {
            reply.error(Errno::ERANGE);
        } else {
            reply.data(&data);
        }
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

    fn readdirplus_fill(&self, dir: InodeNo, mut offset: u64, reply: &mut ReplyDirectoryPlus) -> Result<(), Error> {
        loop {
            let batch = self.list_batch(dir, offset)?;
            let last = batch.len() < PLUS_BATCH;
            for l in batch {
                let attr = match self.vol.getattr(l.ino) {
                    Ok(a) => a,
                    // Removed since it was listed: leave it out.
                    Err(Error::NotFound) => {
                        offset = l.next;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let full = reply.add(
                    INodeNo(l.ino.0),
                    l.next,
                    OsStr::from_bytes(&l.name),
                    &self.options.entry_ttl,
                    &file_attr(&attr),
                    Self::generation(&attr),
                );
                if full {
                    return Ok(());
                }
                // The kernel takes a lookup reference on every entry but
                // `.` and `..`.
                if l.name != b"." && l.name != b".." {
                    self.vol.remember(l.ino, 1);
                }
                offset = l.next;
            }
            if last {
                return Ok(());
            }
        }
    }

    /// Sets or removes an ACL. Without FUSE_POSIX_ACL the kernel would
    /// neither check ACLs nor keep them cached; they are refused then, as
    /// by a file system without ACL support, and tools fall back to chmod.
    ///
    /// Setting an access ACL drops the set-group-id bit unless the caller
    /// is in the file's group or privileged (as `posix_acl_update_mode`).
    /// The kernel tells a FUSE server that only through FUSE_SETXATTR_EXT,
    /// which fuser does not decode, so the adapter works it out itself.
    fn set_acl(&self, req: &Request, node: InodeNo, kind: AclKind, value: Option<&[u8]>) -> Result<(), Error> {
        if !self.acl {
            return Err(Error::NotSupported);
        }
        let clear_setgid = match (kind, value) {
            (AclKind::Access, Some(_)) => {
                let gid = self.vol.getattr(node)?.gid;
                !caller::in_group_or_root(req.uid(), req.gid(), req.pid(), gid)
            }
            _ => false,
        };
        self.vol.set_acl(node, kind, value, clear_setgid)
    }

    /// Makes the kernel forget the attributes it caches of `node` when the
    /// volume changed them behind a request that does not say so (the
    /// set-id bits dropped by a write or fallocate), so that the next stat
    /// asks. Only the attributes: offset -1 leaves the page cache alone.
    fn attributes_changed(&self, node: INodeNo, changed: bool) {
        if !changed {
            return;
        }
        if let Some(n) = self.notifier.get()
            && let Err(e) = n.inval_inode(node, -1, 0)
        {
            log::debug!("cannot invalidate the attributes of inode {}: {e}", node.0);
        }
    }

    fn copy_range(&self, from: InodeNo, from_off: u64, to: InodeNo, to_off: u64, len: u64) -> Result<u64, Error> {
        let want = len.min(COPY_MAX);
        let mut done = 0u64;
        while done < want {
            let chunk = (want - done).min(COPY_CHUNK) as usize;
            let data = match self.vol.read(from, from_off + done, chunk) {
                Ok(d) => d,
                Err(e) if done > 0 => {
                    log::debug!("copy_file_range stopped after {done} bytes: {e}");
                    break;
                }
                Err(e) => return Err(e),
            };
            if data.is_empty() {
                break;
            }
            match self.vol.write(to, to_off + done, &data) {
                Ok(n) => done += n as u64,
                Err(e) if done > 0 => {
                    log::debug!("copy_file_range stopped after {done} bytes: {e}");
                    break;
                }
                Err(e) => return Err(e),
            }
            if data.len() < chunk {
                break;
            }
        }
        Ok(done)
    }
}

impl Filesystem for DualFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        for cap in WANTED {
            if cap == InitFlags::FUSE_WRITEBACK_CACHE && !self.options.writeback_cache {
                continue;
            }
            match config.add_capabilities(cap) {
                Ok(()) if cap == InitFlags::FUSE_POSIX_ACL => self.acl = true,
                Ok(()) => {}
                Err(missing) => {
                    log::info!("the kernel does not offer {missing:?}; going on without it");
                    if cap == InitFlags::FUSE_WRITEBACK_CACHE {
                        // Then the engine owns the times of writes and truncations.
                        self.options.writeback_cache = false;
                    }
                }
            }
        }
        if let Err(nearest) = config.set_max_write(self.options.max_write) {
            log::info!("max_write {} refused; using {nearest}", self.options.max_write);
            let _ = config.set_max_write(nearest);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        // A clean started through the control attribute holds the volume:
        // it must end before the volume can be closed.
        self.control.shutdown();
        self.receiver.shutdown();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        let _t = self.requests.time(Op::Lookup);
        // Path walks never send ".": the kernel asks it of a node id taken
        // from a file handle (open_by_handle_at, the NFS server) whose inode
        // it no longer caches, and that node may be any kind of file. A free
        // or reused inode number answers ENOENT or another generation, which
        // the kernel turns into ESTALE.
        let found = if name(n) == b"." { self.vol.getattr(ino(parent)) } else { self.vol.lookup(ino(parent), name(n)) };
        match found {
            Ok(a) => {
                self.vol.remember(a.ino, 1);
                self.entry(reply, &a);
            }
            // A negative entry the kernel may keep: the name can appear
            // only through this kernel, which then replaces it.
            Err(Error::NotFound) => {
                reply.entry_with_ttls(&Duration::ZERO, &self.options.entry_ttl, &convert::absent(), Generation(0))
            }
            Err(e) => reply.error(report("lookup", &e)),
        }
    }

    fn forget(&self, _req: &Request, node: INodeNo, nlookup: u64) {
        let _t = self.requests.time(Op::Forget);
        if let Err(e) = self.vol.forget(ino(node), nlookup) {
            log::error!("forget of inode {}: {e}", node.0);
        }
    }

    fn getattr(&self, _req: &Request, node: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _t = self.requests.time(Op::Getattr);
        match self.vol.getattr(ino(node)) {
            Ok(a) => reply.attr(&self.options.attr_ttl, &file_attr(&a)),
            Err(e) => reply.error(report("getattr", &e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        node: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _t = self.requests.time(Op::Setattr);
        // The kernel has done the permission checks and computed any set-id
        // bits to clear (it sends them as a mode): apply exactly what it says.
        if let (Some(clock), Some(c)) = (&self.clock, ctime) {
            clock.saw(convert::request_time(c));
        }
        let set = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(convert::time_set),
            mtime: mtime.map(convert::time_set),
            ctime: ctime.map(convert::request_time),
            // With the writeback cache the kernel owns mtime and ctime and
            // sends them when a truncation should move them (not, for one,
            // when truncate(2) leaves the size as it was).
            size_stamp: if self.options.writeback_cache { Stamp::Keep } else { Stamp::Now },
            // The kernel flags an unprivileged truncation with
            // FATTR_KILL_SUIDGID, which fuser does not pass on; root stands
            // in for "has CAP_FSETID".
            kill_privileges: req.uid() != 0,
        };
        match self.vol.setattr(ino(node), &set) {
            Ok(a) => reply.attr(&self.options.attr_ttl, &file_attr(&a)),
            Err(e) => reply.error(report("setattr", &e)),
        }
    }

    fn readlink(&self, _req: &Request, node: INodeNo, reply: ReplyData) {
        let _t = self.requests.time(Op::Readlink);
        match self.vol.readlink(ino(node)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(report("readlink", &e)),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, n: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let _t = self.requests.time(Op::Mknod);
        let kind = match convert::mknod_kind(mode) {
            Ok(k) => k,
            Err(e) => return reply.error(e),
        };
        let r = self.vol.mknod(ino(parent), name(n), kind, mode & 0o7777, u64::from(rdev), creds(req, umask));
        self.reply_entry("mknod", r, reply);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, n: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let _t = self.requests.time(Op::Mkdir);
        let r = self.vol.mkdir(ino(parent), name(n), mode & 0o7777, creds(req, umask));
        self.reply_entry("mkdir", r, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let _t = self.requests.time(Op::Unlink);
        Self::reply_empty("unlink", self.vol.unlink(ino(parent), name(n)), reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let _t = self.requests.time(Op::Rmdir);
        Self::reply_empty("rmdir", self.vol.rmdir(ino(parent), name(n)), reply);
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let _t = self.requests.time(Op::Symlink);
        let r = self.vol.symlink(ino(parent), name(link_name), target.as_os_str().as_bytes(), creds(req, 0));
        self.reply_entry("symlink", r, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        n: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _t = self.requests.time(Op::Rename);
        let flags = match convert::rename_flags(flags.bits()) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let r = self.vol.rename(ino(parent), name(n), ino(new_parent), name(new_name), flags);
        Self::reply_empty("rename", r, reply);
    }

    fn link(&self, _req: &Request, node: INodeNo, new_parent: INodeNo, new_name: &OsStr, reply: ReplyEntry) {
        let _t = self.requests.time(Op::Link);
        let r = self.vol.link(ino(node), ino(new_parent), name(new_name));
        self.reply_entry("link", r, reply);
    }

    fn open(&self, _req: &Request, node: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _t = self.requests.time(Op::Open);
        // Stateless handles: the kernel's lookup reference keeps an open,
        // unlinked file alive. Keeping the page cache across opens is safe
        // because nobody but this kernel changes the volume. But reads the
        // cache answers never reach the engine, which keeps access times:
        // when a read would update one (under relatime, once after each
        // change), the cache is dropped so that this open's reads arrive.
        let reads = flags.acc_mode() != OpenAccMode::O_WRONLY;
        let writes = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let direct = if writes { self.write_open_flags() } else { FopenFlags::empty() };
        match self.vol.getattr(ino(node)) {
            Ok(_) if !direct.is_empty() => reply.opened(FileHandle(0), direct),
            Ok(_) if reads && self.vol.access_due(ino(node)) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(report("open", &e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        node: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _t = self.requests.time(Op::Read);
        match self.vol.read(ino(node), offset, size as usize) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(report("read", &e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        node: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _t = self.requests.time(Op::Write);
        // Pages written back from the kernel's cache carry times the kernel
        // already owns (it sends them with a setattr); a direct write does not.
        let cached = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        let stamp = if cached { Stamp::Keep } else { Stamp::Now };
        // The kernel flags the writes it knows to be unprivileged, but not
        // an O_DIRECT write under the writeback cache: a write that comes
        // straight from a caller other than root stands for one without
        // CAP_FSETID, as for truncation. Page-cache write-back carries the
        // flusher's credentials, so only the flag speaks for it.
        let set_id = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) || (!cached && req.uid() != 0);
        match self.vol.drop_privileges(ino(node), set_id) {
            Ok(dropped) => self.attributes_changed(node, dropped),
            Err(e) => return reply.error(report("write", &e)),
        }
        if let Some(w) = self.window.get() {
            w.write(node.0, data.len());
        }
        match self.vol.write_with(ino(node), offset, data, stamp) {
            // max_write bounds a request far below 4 GiB.
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(report("write", &e)),
        }
    }

    fn flush(&self, _req: &Request, node: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        let _t = self.requests.time(Op::Flush);
        // close(2) is not a durability point; fsync is. But the kernel has
        // sent the file's dirty pages by now, so a rewrite after O_TRUNC is
        // complete: the volume commits it whole (replace semantics).
        self.vol.file_closed(ino(node));
        // ENOSYS makes the kernel stop sending FLUSH (it sets no_flush and
        // close(2) returns 0): one round trip less per close. It still
        // writes a file's dirty pages at every close, and RELEASE, sent
        // after the last close of an open file, ends a rewrite from then on.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        node: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _t = self.requests.time(Op::Release);
        // The end of a rewrite (see flush): FLUSH is answered once only.
        self.vol.file_closed(ino(node));
        reply.ok();
    }

    fn fsync(&self, _req: &Request, node: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let _t = self.requests.time(Op::Fsync);
        if let Some(w) = self.window.get() {
            w.fsync(node.0);
        }
        let r = if datasync { self.vol.fdatasync(ino(node)) } else { self.vol.fsync(ino(node)) };
        Self::reply_empty("fsync", r, reply);
    }

    fn opendir(&self, _req: &Request, node: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _t = self.requests.time(Op::Opendir);
        match self.vol.getattr(ino(node)) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(report("opendir", &e)),
        }
    }

    fn readdir(&self, _req: &Request, node: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let _t = self.requests.time(Op::Readdir);
        let r = self.vol.readdir(ino(node), offset, &mut |l| {
            !reply.add(INodeNo(l.ino.0), l.next, file_type(l.kind), OsStr::from_bytes(&l.name))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(report("readdir", &e)),
        }
    }

    fn readdirplus(&self, _req: &Request, node: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let _t = self.requests.time(Op::Readdirplus);
        match self.readdirplus_fill(ino(node), offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(report("readdirplus", &e)),
        }
    }

    fn releasedir(&self, _req: &Request, _node: INodeNo, _fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        let _t = self.requests.time(Op::Releasedir);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, node: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let _t = self.requests.time(Op::Fsyncdir);
        Self::reply_empty("fsyncdir", self.vol.fsync(ino(node)), reply);
    }

    fn statfs(&self, _req: &Request, _node: INodeNo, reply: ReplyStatfs) {
        let _t = self.requests.time(Op::Statfs);
        let s = self.vol.statfs();
        let bavail = self.available_blocks(&s);
        reply.statfs(s.blocks, s.bfree, bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize);
    }

    fn setxattr(
        &self,
        req: &Request,
        node: INodeNo,
        n: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _t = self.requests.time(Op::Setxattr);
        if Self::is_control(node, n) {
            return match self.control_set(req, n, Some(value)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            };
        }
        if let Some(kind) = acl_kind(n) {
            let r = self.set_acl(req, ino(node), kind, Some(value));
            if r.is_ok() {
                // The mode follows an access ACL, and loses set-group-id.
                self.attributes_changed(node, true);
            }
            return Self::reply_empty("setxattr", r, reply);
        }
        let mode = match convert::xattr_mode(flags) {
            Ok(m) => m,
            Err(e) => return reply.error(e),
        };
        let r = self.vol.setxattr(ino(node), name(n), value, mode);
        Self::reply_empty("setxattr", r, reply);
    }

    fn getxattr(&self, req: &Request, node: INodeNo, n: &OsStr, size: u32, reply: ReplyXattr) {
        let _t = self.requests.time(Op::Getxattr);
        if Self::is_control(node, n) {
            return match self.control_get(req, n) {
                Ok(v) => Self::reply_xattr(v, size, reply),
                Err(e) => reply.error(e),
            };
        }
        match self.vol.getxattr(ino(node), name(n)) {
            Ok(v) => Self::reply_xattr(v, size, reply),
            Err(e) => reply.error(report("getxattr", &e)),
        }
    }

    fn listxattr(&self, _req: &Request, node: INodeNo, size: u32, reply: ReplyXattr) {
        let _t = self.requests.time(Op::Listxattr);
        match self.vol.listxattr(ino(node)) {
            Ok(names) => Self::reply_xattr(convert::xattr_names(&names), size, reply),
            Err(e) => reply.error(report("listxattr", &e)),
        }
    }

    fn removexattr(&self, req: &Request, node: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let _t = self.requests.time(Op::Removexattr);
        if Self::is_control(node, n) {
            return match self.control_set(req, n, None) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            };
        }
        if let Some(kind) = acl_kind(n) {
            let r = self.set_acl(req, ino(node), kind, None);
            if r.is_ok() {
                self.attributes_changed(node, true);
            }
            return Self::reply_empty("removexattr", r, reply);
        }
        let r = self.vol.removexattr(ino(node), name(n));
        Self::reply_empty("removexattr", r, reply);
    }

    fn access(&self, _req: &Request, node: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        let _t = self.requests.time(Op::Access);
        // Only sent without default_permissions, which this adapter always
        // mounts with: the kernel checks the mode bits itself. Answer for
        // existence, as F_OK would.
        Self::reply_empty("access", self.vol.getattr(ino(node)).map(|_| ()), reply);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let _t = self.requests.time(Op::Create);
        match self.vol.create(ino(parent), name(n), mode & 0o7777, creds(req, umask)) {
            Ok(a) => reply.created(
                &self.options.entry_ttl,
                &file_attr(&a),
                Self::generation(&a),
                FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE | self.write_open_flags(),
            ),
            Err(e) => reply.error(report("create", &e)),
        }
    }

    fn ioctl(
        &self,
        _req: &Request,
        _node: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        let _t = self.requests.time(Op::Ioctl);
        // No ioctl is implemented. ENOTTY is what a file system says to one
        // it does not know (isatty's TCGETS on every open by Python, say),
        // and fuser's default would log a warning per request.
        reply.error(Errno::ENOTTY);
    }

    fn fallocate(
        &self,
        req: &Request,
        node: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _t = self.requests.time(Op::Fallocate);
        let mode = match convert::fallocate_mode(mode) {
            Ok(m) => m,
            Err(e) => return reply.error(e),
        };
        // As ext4's `file_modified`: every mode drops file capabilities, and
        // the set-id bits unless the caller may keep them (root stands for
        // CAP_FSETID; the kernel does not say).
        let r = self.vol.drop_privileges(ino(node), req.uid() != 0).and_then(|dropped| {
            self.attributes_changed(node, dropped);
            self.vol.fallocate(ino(node), offset, length, mode)
        });
        Self::reply_empty("fallocate", r, reply);
    }

    fn lseek(&self, _req: &Request, node: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        let _t = self.requests.time(Op::Lseek);
        let Ok(from) = u64::try_from(offset) else {
            return reply.error(Errno::EINVAL);
        };
        let r = match convert::whence(whence) {
            Some(w) => self.vol.seek(ino(node), from, w),
            // The kernel answers the other whence values itself; should one
            // come, SEEK_SET and SEEK_END have an answer without a position.
            None if whence == libc::SEEK_SET => Ok(from),
            None if whence == libc::SEEK_END => self.vol.getattr(ino(node)).map(|a| a.size.saturating_add(from)),
            None => return reply.error(Errno::EINVAL),
        };
        match r.map(i64::try_from) {
            Ok(Ok(pos)) => reply.offset(pos),
            Ok(Err(_)) => reply.error(Errno::EOVERFLOW),
            Err(e) => reply.error(report("lseek", &e)),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let _t = self.requests.time(Op::CopyFileRange);
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        match self.copy_range(ino(ino_in), offset_in, ino(ino_out), offset_out, len) {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(report("copy_file_range", &e)),
        }
    }
}
