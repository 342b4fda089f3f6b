//! DualFS served by our own transports (crate `dualfs-wire`: /dev/fuse
//! read by threads, or per-CPU io_uring queues): a dispatch from each
//! decoded request to the method of [`DualFs`] that does its work (crate
//! `ops`), and the answer encoded into the reply buffer.
//!
//! Where the protocol tells more than the adapter reads yet (SETATTR's
//! FATTR_KILL_SUIDGID, SETXATTR's ACL_KILL_SGID with FUSE_SETXATTR_EXT),
//! the adapter decides from what it knows (see `ops`); each is a change of
//! its own, measured. READDIRPLUS sends entries the kernel holds without
//! attributes (node id 0).

use std::io;

use dualfs_engine::types::Timestamp;
use dualfs_engine::volume::{Attr, StatFs, TimeSet};
use dualfs_wire::abi::{
    self, EntryOut, InHeader, InitIn, InitOut, Kstatfs, ReplyBuf, Request, SetattrIn, fattr, init_flags,
};
use dualfs_wire::{Handler, Outcome};

use crate::DualFs;
use crate::answers::{Caller, Entry, Errno, Notify, Opened, Xattr};
use crate::convert;
use crate::ops::SetAttrIn;

/// The kernel's attributes of an inode.
fn wire_attr(a: &Attr) -> abi::Attr {
    abi::Attr {
        ino: a.ino.0,
        size: a.size,
        blocks: a.blocks,
        atime: a.atime.sec,
        mtime: a.mtime.sec,
        ctime: a.ctime.sec,
        atime_nsec: a.atime.nsec,
        mtime_nsec: a.mtime.nsec,
        ctime_nsec: a.ctime.nsec,
        mode: a.kind.mode_bits() | (a.perm & 0o7777),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        // The 32-bit encoded device number mknod handed the engine.
        rdev: a.rdev as u32,
        blksize: convert::blksize(a),
        flags: 0,
    }
}

/// A `fuse_entry_out`; node id 0 for a negative entry.
fn entry_out(e: &Entry) -> EntryOut {
    EntryOut {
        nodeid: e.ino(),
        generation: e.generation(),
        entry_valid: e.entry_ttl,
        attr_valid: e.attr_ttl,
        attr: e.attr.as_ref().map(wire_attr).unwrap_or_default(),
    }
}

fn kstatfs(s: &StatFs) -> Kstatfs {
    Kstatfs {
        blocks: s.blocks,
        bfree: s.bfree,
        bavail: s.bavail,
        files: s.files,
        ffree: s.ffree,
        bsize: s.bsize,
        namelen: s.namelen,
        frsize: s.bsize,
    }
}

/// A SETATTR time: "now", or the time sent.
fn time_set(valid: u32, field: u32, now: u32, sec: i64, nsec: u32) -> Option<TimeSet> {
    if valid & field == 0 {
        None
    } else if valid & now != 0 {
        Some(TimeSet::Now)
    } else {
        Some(TimeSet::At(Timestamp { sec, nsec }))
    }
}

fn setattr_in(s: &SetattrIn) -> SetAttrIn {
    let v = s.valid;
    SetAttrIn {
        mode: (v & fattr::MODE != 0).then_some(s.mode),
        uid: (v & fattr::UID != 0).then_some(s.uid),
        gid: (v & fattr::GID != 0).then_some(s.gid),
        size: (v & fattr::SIZE != 0).then_some(s.size),
        atime: time_set(v, fattr::ATIME, fattr::ATIME_NOW, s.atime, s.atime_nsec),
        mtime: time_set(v, fattr::MTIME, fattr::MTIME_NOW, s.mtime, s.mtime_nsec),
        ctime: (v & fattr::CTIME != 0).then_some(Timestamp { sec: s.ctime, nsec: s.ctime_nsec }),
        kill_suidgid: Some(v & fattr::KILL_SUIDGID != 0),
    }
}

/// A reply whose payload `encode` writes, or the error.
fn answer<T>(r: Result<T, Errno>, out: &mut ReplyBuf<'_>, encode: impl FnOnce(T, &mut ReplyBuf<'_>)) -> Outcome {
    match r {
        Ok(v) => {
            encode(v, out);
            Outcome::Reply
        }
        Err(e) => Outcome::Error(e.code()),
    }
}

fn empty(r: Result<(), Errno>) -> Outcome {
    match r {
        Ok(()) => Outcome::Reply,
        Err(e) => Outcome::Error(e.code()),
    }
}

fn xattr(r: Result<Xattr, Errno>, out: &mut ReplyBuf<'_>) -> Outcome {
    answer(r, out, |x, out| match x {
        Xattr::Size(n) => out.getxattr_out(n),
        Xattr::Data(d) => {
            out.push(&d);
        }
    })
}

fn opened(r: Result<Opened, Errno>, out: &mut ReplyBuf<'_>) -> Outcome {
    answer(r, out, |o, out| out.open_out(o.fh, o.flags))
}

/// The flags asked for besides the adapter's own (`DualFs::negotiate`):
/// asynchronous reads and large writes, and MAX_PAGES where offered.
const BASE_FLAGS: u64 = init_flags::ASYNC_READ | init_flags::BIG_WRITES | init_flags::MAX_PAGES;

impl Handler for DualFs {
    fn init(&self, offer: &InitIn) -> InitOut {
        let flags = self.negotiate(offer.flags) | (BASE_FLAGS & offer.flags);
        let max_write = self.max_write();
        // Pages enough for the larger of a write and a readahead.
        let pages = (max_write.max(offer.max_readahead).max(1) - 1) / 4096 + 1;
        InitOut {
            flags,
            max_write,
            max_readahead: offer.max_readahead,
            max_pages: u16::try_from(pages).unwrap_or(u16::MAX),
            max_background: 16,
            congestion_threshold: 12,
            time_gran: 1,
            ..InitOut::default()
        }
    }

    fn handle(&self, h: &InHeader, req: Request<'_>, out: &mut ReplyBuf<'_>) -> Outcome {
        let who = Caller { uid: h.uid, gid: h.gid, pid: h.pid };
        let node = h.nodeid;
        // A shut-down volume fails every request but those that let the
        // kernel let go of it (DESIGN.md, "Shutting down a mounted volume").
        if self.vol.is_shut_down() && !lets_go(&req) {
            return Outcome::Error(libc::EIO);
        }
        // One tree's requests at a time: this connection's tree is made
        // the live one first if another is.
        let _entered = match &self.tree {
            Some((name, served)) => match self.vol.enter_served_for(served, needs_durability(&req)) {
                Ok(g) => Some(g),
                Err(e) => {
                    log::error!("cannot enter tree {name}: {e}");
                    return Outcome::Error(convert::errno(&e).code());
                }
            },
            None => None,
        };
        match req {
            Request::Lookup { name } => answer(self.lookup(node, name), out, |e, out| out.entry_out(&entry_out(&e))),
            Request::Forget { nlookup } => {
                self.forget(node, nlookup);
                Outcome::NoReply
            }
            Request::BatchForget { forgets } => {
                for (n, nlookup) in forgets.iter() {
                    self.forget(n, nlookup);
                }
                Outcome::NoReply
            }
            Request::Getattr { .. } => {
                answer(self.getattr(node), out, |a, out| out.attr_out(&wire_attr(&a), self.attr_ttl()))
            }
            Request::Setattr(s) => answer(self.setattr(who, node, &setattr_in(&s)), out, |a, out| {
                out.attr_out(&wire_attr(&a), self.attr_ttl());
            }),
            // STATX is asked for birth time (STATX_BTIME); the volume has
            // recorded it at every creation since format 1.0, and says it
            // is unknown only for a zero time (no inode made by DualFS
            // has one).
            Request::Statx { .. } => answer(self.getattr(node), out, |a, out| {
                let btime = (a.crtime != Timestamp::default()).then_some((a.crtime.sec, a.crtime.nsec));
                out.statx_out(&wire_attr(&a), btime, self.attr_ttl());
            }),
            Request::Readlink => answer(self.readlink(node), out, |t, out| {
                out.push(&t);
            }),
            Request::Symlink { name, target } => {
                answer(self.symlink(who, node, name, target), out, |e, out| out.entry_out(&entry_out(&e)))
            }
            Request::Mknod { mode, rdev, umask, name } => {
                answer(self.mknod(who, node, name, mode, umask, rdev), out, |e, out| out.entry_out(&entry_out(&e)))
            }
            Request::Mkdir { mode, umask, name } => {
                answer(self.mkdir(who, node, name, mode, umask), out, |e, out| out.entry_out(&entry_out(&e)))
            }
            Request::Unlink { name } => empty(self.unlink(node, name)),
            Request::Rmdir { name } => empty(self.rmdir(node, name)),
            Request::Rename { newdir, name, newname } => empty(self.rename(who, node, name, newdir, newname, 0)),
            Request::Rename2 { newdir, flags, name, newname } => {
                empty(self.rename(who, node, name, newdir, newname, flags))
            }
            Request::Link { oldnodeid, newname } => {
                answer(self.link(oldnodeid, node, newname), out, |e, out| out.entry_out(&entry_out(&e)))
            }
            Request::Open { flags, .. } => {
                let r = self.open(node, flags as i32);
                if r.is_ok() {
                    self.writers.opened(node, flags);
                }
                opened(r, out)
            }
            Request::Read { offset, size, .. } => {
                // An answer too large for the payload is marked on `out`.
                let read = self.read(node, offset, size, |d| {
                    out.push(d);
                });
                answer(read, out, |(), _| {})
            }
            Request::Write { offset, data, write_flags, .. } => {
                answer(self.write(who, node, offset, data, write_flags), out, |n, out| out.write_out(n))
            }
            Request::Statfs => {
                out.statfs_out(&kstatfs(&self.statfs()));
                Outcome::Reply
            }
            Request::Release { flags, .. } => {
                self.writers.released(node, flags);
                self.release(node);
                Outcome::Reply
            }
            Request::Fsync { fsync_flags, .. } => empty(self.fsync(node, fsync_flags & 1 != 0)),
            Request::Setxattr { name, value, flags, .. } => empty(self.setxattr(who, node, name, value, flags as i32)),
            Request::Getxattr { name, size } => xattr(self.getxattr(who, node, name, size), out),
            Request::Listxattr { size } => xattr(self.listxattr(node, size), out),
            Request::Removexattr { name } => empty(self.removexattr(who, node, name)),
            Request::Flush { .. } => empty(self.flush(node)),
            Request::Opendir { .. } => opened(self.opendir(node), out),
            Request::Readdir { offset, size, .. } => {
                let size = size as usize;
                let r = self.readdir(node, offset, &mut |l| {
                    !out.push_dirent(size, l.ino.0, l.next, l.kind.mode_bits() >> 12, &l.name)
                });
                empty(r)
            }
            Request::Readdirplus { offset, size, .. } => {
                let size = size as usize;
                // Entries the kernel holds go without attributes (node id
                // 0): a warm `ls -l` then keeps the kernel's cached ACLs
                // (DESIGN.md, "FUSE adapter").
                let r = self.readdirplus(node, offset, true, &mut |l, e| {
                    let mut entry = entry_out(e);
                    // The dirent's inode number is the attributes' one.
                    entry.attr.ino = l.ino.0;
                    !out.push_direntplus(size, &entry, l.next, l.kind.mode_bits() >> 12, &l.name)
                });
                empty(r)
            }
            Request::Releasedir { .. } => {
                self.releasedir();
                Outcome::Reply
            }
            Request::Fsyncdir { .. } => empty(self.fsyncdir(node)),
            Request::Access { .. } => empty(self.access(node)),
            Request::Create { flags, mode, umask, name, .. } => {
                answer(self.create(who, node, name, mode, umask), out, |(e, o), out| {
                    self.writers.opened(e.ino(), flags);
                    out.create_out(&entry_out(&e), o.fh, o.flags);
                })
            }
            Request::Tmpfile { flags, mode, umask, .. } => {
                answer(self.tmpfile(who, node, mode, umask), out, |(e, o), out| {
                    self.writers.opened(e.ino(), flags);
                    out.create_out(&entry_out(&e), o.fh, o.flags);
                })
            }
            Request::Interrupt { .. } => Outcome::NoReply,
            Request::Destroy => {
                self.shutdown();
                Outcome::Reply
            }
            Request::Ioctl { cmd, data, out_size, .. } => {
                answer(self.ioctl(who, node, cmd, data, out_size), out, |d, out| out.ioctl_out(0, &d))
            }
            Request::Fallocate { offset, length, mode, .. } => {
                empty(self.fallocate(who, node, offset, length, mode as i32))
            }
            Request::Lseek { offset, whence, .. } => {
                // The kernel's loff_t travels as its bits.
                answer(self.lseek(node, offset as i64, whence as i32), out, |pos, out| out.lseek_out(pos as u64))
            }
            Request::CopyFileRange { off_in, nodeid_out, off_out, len, flags, .. } => {
                answer(self.copy_file_range(node, off_in, nodeid_out, off_out, len, flags), out, |n, out| {
                    out.write_out(n)
                })
            }
            // INIT is the transport's; SYNCFS and the opcodes not decoded
            // (locks, BMAP, POLL, TMPFILE...) are ENOSYS, which the kernel
            // takes as "not supported" and stops sending.
            Request::Init(_) | Request::Syncfs | Request::Unknown { .. } => Outcome::Error(libc::ENOSYS),
        }
    }

    fn destroy(&self) {
        self.shutdown();
    }
}

/// Whether `req` makes something durable (the gate counts its wait apart;
/// FLUSH does not: close is not a durability point here).
fn needs_durability(req: &Request<'_>) -> bool {
    matches!(req, Request::Fsync { .. } | Request::Fsyncdir { .. })
}

/// The requests a shut-down volume still answers: forgetting, closing
/// (a close's FLUSH and RELEASE succeed, as on XFS), and the end of the
/// session.
fn lets_go(req: &Request<'_>) -> bool {
    matches!(
        req,
        Request::Forget { .. }
            | Request::BatchForget { .. }
            | Request::Flush { .. }
            | Request::Release { .. }
            | Request::Releasedir { .. }
            | Request::Interrupt { .. }
            | Request::Destroy
    )
}

/// dualfs-wire's notifier (a write to /dev/fuse), for its session.
impl Notify for dualfs_wire::Notifier {
    fn inval_inode(&self, ino: u64, offset: i64, len: i64) -> io::Result<()> {
        dualfs_wire::Notifier::inval_inode(self, ino, offset, len)
    }

    fn inval_entry(&self, parent: u64, name: &[u8]) -> io::Result<()> {
        dualfs_wire::Notifier::inval_entry(self, parent, name)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use dualfs_engine::Volume;
    use dualfs_engine::device::{BlockDevice, MemoryDevice};
    use dualfs_engine::volume::{MkfsOptions, MountOptions};

    use super::*;
    use crate::AdapterOptions;

    fn adapter() -> DualFs {
        adapter_with(AdapterOptions::default())
    }

    fn adapter_with(options: AdapterOptions) -> DualFs {
        let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(8192));
        let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(16384));
        let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
        Volume::format(meta.clone(), data.clone(), &opts).unwrap();
        let vol = Volume::open(meta, data, MountOptions::default()).unwrap();
        DualFs::new(Arc::new(vol), options)
    }

    fn header(nodeid: u64) -> InHeader {
        InHeader { nodeid, uid: 0, gid: 0, pid: 1, ..InHeader::default() }
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn init_asks_for_the_base_flags_and_the_adapters_of_those_offered() {
        let fs = adapter();
        let offer = InitIn {
            major: 7,
            minor: 41,
            max_readahead: 128 << 10,
            flags: init_flags::ASYNC_READ | init_flags::POSIX_ACL | init_flags::MAX_PAGES | init_flags::FLOCK_LOCKS,
        };
        let out = Handler::init(&fs, &offer);
        assert_eq!(out.flags, init_flags::ASYNC_READ | init_flags::POSIX_ACL | init_flags::MAX_PAGES);
        assert_eq!((out.max_write, out.max_pages), (1 << 20, 256));
        assert_eq!(out.max_readahead, offer.max_readahead);
    }

    #[test]
    fn a_name_not_there_is_a_negative_entry_and_one_made_is_found() {
        let fs = adapter();
        let mut buf = vec![0u8; 4096];
        let mut out = ReplyBuf::new(&mut buf);
        assert_eq!(fs.handle(&header(1), Request::Lookup { name: b"nope" }, &mut out), Outcome::Reply);
        let b = out.as_slice();
        assert_eq!(b.len(), abi::ENTRY_OUT_LEN);
        assert_eq!(u64_at(b, 0), 0, "node id 0: negative");
        assert_eq!(u64_at(b, 16), AdapterOptions::default().entry_ttl.as_secs(), "the name's TTL");
        assert_eq!(u64_at(b, 24), 0, "no attributes to trust");

        let mut out = ReplyBuf::new(&mut buf);
        let mkdir = Request::Mkdir { mode: 0o755, umask: 0o022, name: b"d" };
        assert_eq!(fs.handle(&header(1), mkdir, &mut out), Outcome::Reply);
        let made = u64_at(out.as_slice(), 0);
        assert_ne!(made, 0);
        assert_eq!(u32_at(out.as_slice(), 100), libc::S_IFDIR | 0o755, "mode with the type bits");

        let mut out = ReplyBuf::new(&mut buf);
        assert_eq!(fs.handle(&header(1), Request::Lookup { name: b"d" }, &mut out), Outcome::Reply);
        assert_eq!(u64_at(out.as_slice(), 0), made);
        assert_eq!(u64_at(out.as_slice(), 40), made, "the attributes' ino");
    }

    #[test]
    fn readdirplus_fills_no_more_than_the_size_asked_and_goes_on_from_its_offset() {
        let fs = adapter();
        let mut buf = vec![0u8; 1 << 16];
        for i in 0..10 {
            let mut out = ReplyBuf::new(&mut buf);
            let name = format!("file{i}");
            let create = Request::Create { flags: 0, mode: 0o644, umask: 0, open_flags: 0, name: name.as_bytes() };
            assert_eq!(fs.handle(&header(1), create, &mut out), Outcome::Reply);
        }
        // Room for three entries of 6-letter names: 128 + 24 + 8 bytes each.
        let size = 3 * 160;
        let (mut offset, mut seen) = (0, Vec::new());
        loop {
            let mut out = ReplyBuf::new(&mut buf);
            let req = Request::Readdirplus { fh: 0, offset, size };
            assert_eq!(fs.handle(&header(1), req, &mut out), Outcome::Reply);
            let b = out.as_slice();
            assert!(b.len() <= size as usize);
            if b.is_empty() {
                break;
            }
            let mut at = 0;
            while at < b.len() {
                let d = at + abi::ENTRY_OUT_LEN;
                let namelen = u32_at(b, d + 16) as usize;
                seen.push(String::from_utf8(b[d + 24..d + 24 + namelen].to_vec()).unwrap());
                offset = u64_at(b, d + 8);
                at = d + (abi::DIRENT_LEN + namelen).next_multiple_of(8);
            }
        }
        seen.sort();
        let mut want: Vec<String> = (0..10).map(|i| format!("file{i}")).collect();
        want.extend([".".to_string(), "..".to_string()]);
        want.sort();
        assert_eq!(seen, want, "every entry once");
    }

    #[test]
    fn readdirplus_leaves_out_the_attributes_of_what_the_kernel_holds() {
        let fs = adapter();
        let mut buf = vec![0u8; 1 << 16];
        let mut out = ReplyBuf::new(&mut buf);
        let create = Request::Create { flags: 0, mode: 0o644, umask: 0, open_flags: 0, name: b"held" };
        assert_eq!(fs.handle(&header(1), create, &mut out), Outcome::Reply);
        let held = u64_at(out.as_slice(), 0);
        let mut out = ReplyBuf::new(&mut buf);
        let mkdir = Request::Mkdir { mode: 0o755, umask: 0, name: b"forgotten" };
        assert_eq!(fs.handle(&header(1), mkdir, &mut out), Outcome::Reply);
        let forgotten = u64_at(out.as_slice(), 0);
        fs.forget(forgotten, 1);

        let mut out = ReplyBuf::new(&mut buf);
        let req = Request::Readdirplus { fh: 0, offset: 0, size: 4096 };
        assert_eq!(fs.handle(&header(1), req, &mut out), Outcome::Reply);
        let b = out.as_slice();
        let mut at = 0;
        let mut seen = 0;
        while at < b.len() {
            let d = at + abi::ENTRY_OUT_LEN;
            let namelen = u32_at(b, d + 16) as usize;
            let (nodeid, dirent_ino) = (u64_at(b, at), u64_at(b, d));
            match &b[d + 24..d + 24 + namelen] {
                b"held" => {
                    assert_eq!((nodeid, dirent_ino), (0, held), "held: no attributes, its inode number listed");
                    seen += 1;
                }
                b"forgotten" => {
                    assert_eq!((nodeid, dirent_ino), (forgotten, forgotten), "not held: attributes sent");
                    assert_eq!(u64_at(b, at + 40), forgotten);
                    seen += 1;
                }
                _ => {}
            }
            at = d + (abi::DIRENT_LEN + namelen).next_multiple_of(8);
        }
        assert_eq!(seen, 2);
        assert_eq!(fs.vol.references(dualfs_engine::types::InodeNo(held)), 1, "no reference for a bare entry");
        assert_eq!(fs.vol.references(dualfs_engine::types::InodeNo(forgotten)), 1, "one for a full one");
    }

    #[test]
    fn requests_not_served_are_enosys_and_flush_is_too() {
        let fs = adapter();
        let mut buf = vec![0u8; 64];
        let mut out = ReplyBuf::new(&mut buf);
        assert_eq!(fs.handle(&header(1), Request::Unknown { opcode: 31 }, &mut out), Outcome::Error(libc::ENOSYS));
        assert_eq!(fs.handle(&header(1), Request::Syncfs, &mut out), Outcome::Error(libc::ENOSYS));
        assert_eq!(
            fs.handle(&header(1), Request::Flush { fh: 0, lock_owner: 0 }, &mut out),
            Outcome::Error(libc::ENOSYS)
        );
        assert_eq!(fs.handle(&header(1), Request::Forget { nlookup: 0 }, &mut out), Outcome::NoReply);
        let size_only = Request::Getxattr { name: b"user.none", size: 0 };
        assert_eq!(fs.handle(&header(1), size_only, &mut out), Outcome::Error(libc::ENODATA));
    }

    /// GETXATTR's errno for `name` on the root, or its size.
    fn getxattr_size(fs: &DualFs, name: &[u8]) -> Result<u32, i32> {
        let mut buf = vec![0u8; 256];
        let mut out = ReplyBuf::new(&mut buf);
        match fs.handle(&header(1), Request::Getxattr { name, size: 0 }, &mut out) {
            Outcome::Reply => Ok(u32_at(out.as_slice(), 0)),
            Outcome::Error(e) => Err(e),
            Outcome::NoReply => Err(0),
        }
    }

    fn listed(fs: &DualFs) -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let mut out = ReplyBuf::new(&mut buf);
        assert_eq!(fs.handle(&header(1), Request::Listxattr { size: 4096 }, &mut out), Outcome::Reply);
        out.as_slice().to_vec()
    }

    #[test]
    fn nosecurity_xattr_refuses_the_security_namespace_and_keeps_what_is_stored() {
        let on = adapter();
        let mut buf = vec![0u8; 64];
        for name in [&b"security.test"[..], b"user.test"] {
            let mut out = ReplyBuf::new(&mut buf);
            let set = Request::Setxattr { name, value: b"v1", flags: 0, setxattr_flags: 0 };
            assert_eq!(on.handle(&header(1), set, &mut out), Outcome::Reply);
        }
        assert_eq!(getxattr_size(&on, b"security.selinux"), Err(libc::ENODATA), "served: absent");
        assert_eq!(getxattr_size(&on, b"security.test"), Ok(2));
        assert_eq!(listed(&on), b"security.test\0user.test\0");

        // The same volume with the namespace turned off.
        let off = DualFs::new(on.vol.clone(), AdapterOptions { security_xattrs: false, ..AdapterOptions::default() });
        for name in [&b"security.selinux"[..], b"security.test", b"security.capability"] {
            assert_eq!(getxattr_size(&off, name), Err(libc::EOPNOTSUPP), "{}", String::from_utf8_lossy(name));
        }
        let mut out = ReplyBuf::new(&mut buf);
        let set = Request::Setxattr { name: b"security.other", value: b"v", flags: 0, setxattr_flags: 0 };
        assert_eq!(off.handle(&header(1), set, &mut out), Outcome::Error(libc::EOPNOTSUPP));
        let remove = Request::Removexattr { name: b"security.test" };
        assert_eq!(off.handle(&header(1), remove, &mut out), Outcome::Error(libc::EOPNOTSUPP));
        assert_eq!(listed(&off), b"user.test\0", "listed without the security namespace");
        assert_eq!(getxattr_size(&off, b"user.test"), Ok(2), "other namespaces served");
        assert_eq!(getxattr_size(&on, b"security.test"), Ok(2), "still stored");
    }
}
