//! The `fuser::Filesystem` shim: each request's fuser types turned into
//! the transport-neutral method of [`DualFs`] (crate `ops`) that does its
//! work, and the answer into fuser's reply.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::SystemTime;

use dualfs_engine::volume::Attr;
use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::DualFs;
use crate::answers::{self, Caller, Entry, Notify, Opened, Xattr};
use crate::convert::{self, file_attr, file_type};
use crate::ops::SetAttrIn;

fn name(n: &OsStr) -> &[u8] {
    n.as_bytes()
}

fn caller(req: &Request) -> Caller {
    Caller { uid: req.uid(), gid: req.gid(), pid: req.pid() }
}

fn fuser_errno(e: answers::Errno) -> Errno {
    Errno::from_i32(e.code())
}

fn reply_entry(r: Result<Entry, answers::Errno>, reply: ReplyEntry) {
    match r {
        Ok(e) => {
            let attr = e.attr.as_ref().map_or_else(convert::absent, file_attr);
            reply.entry_with_ttls(&e.attr_ttl, &e.entry_ttl, &attr, Generation(e.generation()));
        }
        Err(e) => reply.error(fuser_errno(e)),
    }
}

fn reply_empty(r: Result<(), answers::Errno>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(fuser_errno(e)),
    }
}

fn reply_open(r: Result<Opened, answers::Errno>, reply: ReplyOpen) {
    match r {
        Ok(o) => reply.opened(FileHandle(o.fh), FopenFlags::from_bits_retain(o.flags)),
        Err(e) => reply.error(fuser_errno(e)),
    }
}

fn reply_xattr(r: Result<Xattr, answers::Errno>, reply: ReplyXattr) {
    match r {
        Ok(Xattr::Size(n)) => reply.size(n),
        Ok(Xattr::Data(d)) => reply.data(&d),
        Err(e) => reply.error(fuser_errno(e)),
    }
}

impl DualFs {
    fn reply_attr(&self, r: Result<Attr, answers::Errno>, reply: ReplyAttr) {
        match r {
            Ok(a) => reply.attr(&self.attr_ttl(), &file_attr(&a)),
            Err(e) => reply.error(fuser_errno(e)),
        }
    }
}

/// fuser's notifier, for the fuser session.
impl Notify for fuser::Notifier {
    fn inval_inode(&self, ino: u64, offset: i64, len: i64) -> io::Result<()> {
        fuser::Notifier::inval_inode(self, INodeNo(ino), offset, len)
    }

    fn inval_entry(&self, parent: u64, name: &[u8]) -> io::Result<()> {
        fuser::Notifier::inval_entry(self, INodeNo(parent), OsStr::from_bytes(name))
    }
}

impl Filesystem for DualFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let wanted = self.negotiate(config.capabilities().bits());
        // negotiate asks only for what is offered: this cannot fail.
        if let Err(missing) = config.add_capabilities(InitFlags::from_bits_retain(wanted)) {
            log::info!("the kernel does not offer {missing:?}; going on without it");
        }
        if let Err(nearest) = config.set_max_write(self.max_write()) {
            log::info!("max_write {} refused; using {nearest}", self.max_write());
            let _ = config.set_max_write(nearest);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.shutdown();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        reply_entry(DualFs::lookup(self, parent.0, name(n)), reply);
    }

    fn forget(&self, _req: &Request, node: INodeNo, nlookup: u64) {
        DualFs::forget(self, node.0, nlookup);
    }

    fn getattr(&self, _req: &Request, node: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.reply_attr(DualFs::getattr(self, node.0), reply);
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
        let set = SetAttrIn {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(convert::time_set),
            mtime: mtime.map(convert::time_set),
            ctime: ctime.map(convert::request_time),
            ..SetAttrIn::default()
        };
        self.reply_attr(DualFs::setattr(self, caller(req), node.0, &set), reply);
    }

    fn readlink(&self, _req: &Request, node: INodeNo, reply: ReplyData) {
        match DualFs::readlink(self, node.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(fuser_errno(e)),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, n: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        reply_entry(DualFs::mknod(self, caller(req), parent.0, name(n), mode, umask, rdev), reply);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, n: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        reply_entry(DualFs::mkdir(self, caller(req), parent.0, name(n), mode, umask), reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        reply_empty(DualFs::unlink(self, parent.0, name(n)), reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        reply_empty(DualFs::rmdir(self, parent.0, name(n)), reply);
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let r = DualFs::symlink(self, caller(req), parent.0, name(link_name), target.as_os_str().as_bytes());
        reply_entry(r, reply);
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
        reply_empty(DualFs::rename(self, parent.0, name(n), new_parent.0, name(new_name), flags.bits()), reply);
    }

    fn link(&self, _req: &Request, node: INodeNo, new_parent: INodeNo, new_name: &OsStr, reply: ReplyEntry) {
        reply_entry(DualFs::link(self, node.0, new_parent.0, name(new_name)), reply);
    }

    fn open(&self, _req: &Request, node: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        reply_open(DualFs::open(self, node.0, flags.0), reply);
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
        let mut reply = Some(reply);
        let read = DualFs::read(self, node.0, offset, size, |d| reply.take().map(|r| r.data(d)));
        if let (Err(e), Some(r)) = (read, reply) {
            r.error(fuser_errno(e));
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
        match DualFs::write(self, caller(req), node.0, offset, data, write_flags.bits()) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(fuser_errno(e)),
        }
    }

    fn flush(&self, _req: &Request, node: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply_empty(DualFs::flush(self, node.0), reply);
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
        DualFs::release(self, node.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, node: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        reply_empty(DualFs::fsync(self, node.0, datasync), reply);
    }

    fn opendir(&self, _req: &Request, node: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply_open(DualFs::opendir(self, node.0), reply);
    }

    fn readdir(&self, _req: &Request, node: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let r = DualFs::readdir(self, node.0, offset, &mut |l| {
            reply.add(INodeNo(l.ino.0), l.next, file_type(l.kind), OsStr::from_bytes(&l.name))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fuser_errno(e)),
        }
    }

    fn readdirplus(&self, _req: &Request, node: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        // fuser writes the inode number as the node id: every entry comes with attributes.
        let r = DualFs::readdirplus(self, node.0, offset, false, &mut |l, e| {
            let attr = e.attr.as_ref().map_or_else(convert::absent, file_attr);
            reply.add(
                INodeNo(l.ino.0),
                l.next,
                OsStr::from_bytes(&l.name),
                &e.entry_ttl,
                &attr,
                Generation(e.generation()),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fuser_errno(e)),
        }
    }

    fn releasedir(&self, _req: &Request, _node: INodeNo, _fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        DualFs::releasedir(self);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, node: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply_empty(DualFs::fsyncdir(self, node.0), reply);
    }

    fn statfs(&self, _req: &Request, _node: INodeNo, reply: ReplyStatfs) {
        let s = DualFs::statfs(self);
        reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize);
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
        reply_empty(DualFs::setxattr(self, caller(req), node.0, name(n), value, flags), reply);
    }

    fn getxattr(&self, req: &Request, node: INodeNo, n: &OsStr, size: u32, reply: ReplyXattr) {
        reply_xattr(DualFs::getxattr(self, caller(req), node.0, name(n), size), reply);
    }

    fn listxattr(&self, _req: &Request, node: INodeNo, size: u32, reply: ReplyXattr) {
        reply_xattr(DualFs::listxattr(self, node.0, size), reply);
    }

    fn removexattr(&self, req: &Request, node: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        reply_empty(DualFs::removexattr(self, caller(req), node.0, name(n)), reply);
    }

    fn access(&self, _req: &Request, node: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        reply_empty(DualFs::access(self, node.0), reply);
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
        match DualFs::create(self, caller(req), parent.0, name(n), mode, umask) {
            Ok((e, o)) => {
                let attr = e.attr.as_ref().map_or_else(convert::absent, file_attr);
                reply.created(
                    &e.entry_ttl,
                    &attr,
                    Generation(e.generation()),
                    FileHandle(o.fh),
                    FopenFlags::from_bits_retain(o.flags),
                );
            }
            Err(e) => reply.error(fuser_errno(e)),
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
        // fuser's default would log a warning per request.
        match DualFs::ioctl(self) {
            Ok(d) => reply.ioctl(0, &d),
            Err(e) => reply.error(fuser_errno(e)),
        }
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
        reply_empty(DualFs::fallocate(self, caller(req), node.0, offset, length, mode), reply);
    }

    fn lseek(&self, _req: &Request, node: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        match DualFs::lseek(self, node.0, offset, whence) {
            Ok(pos) => reply.offset(pos),
            Err(e) => reply.error(fuser_errno(e)),
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
        match DualFs::copy_file_range(self, ino_in.0, offset_in, ino_out.0, offset_out, len, flags.bits()) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(fuser_errno(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answers::init;

    #[test]
    fn the_uapi_bits_are_fusers() {
        for (ours, theirs) in [
            (init::FUSE_POSIX_ACL, InitFlags::FUSE_POSIX_ACL),
            (init::FUSE_DONT_MASK, InitFlags::FUSE_DONT_MASK),
            (init::FUSE_WRITEBACK_CACHE, InitFlags::FUSE_WRITEBACK_CACHE),
            (init::FUSE_DO_READDIRPLUS, InitFlags::FUSE_DO_READDIRPLUS),
            (init::FUSE_READDIRPLUS_AUTO, InitFlags::FUSE_READDIRPLUS_AUTO),
            (init::FUSE_PARALLEL_DIROPS, InitFlags::FUSE_PARALLEL_DIROPS),
            (init::FUSE_CACHE_SYMLINKS, InitFlags::FUSE_CACHE_SYMLINKS),
            (init::FUSE_EXPORT_SUPPORT, InitFlags::FUSE_EXPORT_SUPPORT),
            (init::FUSE_HANDLE_KILLPRIV_V2, InitFlags::FUSE_HANDLE_KILLPRIV_V2),
            (init::FUSE_DIRECT_IO_ALLOW_MMAP, InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP),
        ] {
            assert_eq!(ours, theirs.bits(), "{theirs:?}");
        }
        assert_eq!(answers::FOPEN_DIRECT_IO, FopenFlags::FOPEN_DIRECT_IO.bits());
        assert_eq!(answers::FOPEN_KEEP_CACHE, FopenFlags::FOPEN_KEEP_CACHE.bits());
        assert_eq!(answers::FUSE_WRITE_CACHE, WriteFlags::FUSE_WRITE_CACHE.bits());
        assert_eq!(answers::FUSE_WRITE_KILL_SUIDGID, WriteFlags::FUSE_WRITE_KILL_SUIDGID.bits());
    }
}
