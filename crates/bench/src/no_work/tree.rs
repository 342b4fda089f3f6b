//! The no-work server's file system: an in-memory tree of directories,
//! symbolic links and files that keep a size but no data, answering the
//! requests DualFS's adapter answers. It stands in for the adapter so that
//! a round trip measures FUSE and the transport, not the engine. The
//! transport's own kernel tests (crates/wire/tests) serve it too.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dualfs_wire::abi::{self, Attr, EntryOut, InHeader, InitIn, InitOut, Kstatfs, ReplyBuf, Request, init_flags};
use dualfs_wire::{Handler, Outcome};

/// How long the kernel may keep entries and attributes (DualFS's adapter
/// keeps them an hour too), so the request mix matches the real mount's.
const VALID: Duration = Duration::from_secs(3600);
/// Largest write accepted, DualFS's (the tree keeps no data; this sizes the
/// buffers and the kernel's ring payload).
pub const MAX_WRITE: u32 = 1024 * 1024;

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFMT: u32 = 0o170_000;
const DT_DIR: u32 = 4;
const DT_REG: u32 = 8;
const DT_LNK: u32 = 10;

/// A directory's entries, by name for lookups and by inode number for
/// listing: an entry's READDIR offset is its inode number (never reused),
/// so entries removed while a listing is under way do not make it skip
/// others, as offsets by position would (bonnie++ lists and deletes).
#[derive(Debug, Default)]
struct Dir {
    names: BTreeMap<Vec<u8>, u64>,
    order: BTreeMap<u64, Vec<u8>>,
}

impl Dir {
    fn get(&self, name: &[u8]) -> Option<u64> {
        self.names.get(name).copied()
    }

    fn contains_key(&self, name: &[u8]) -> bool {
        self.names.contains_key(name)
    }

    fn insert(&mut self, name: &[u8], ino: u64) {
        self.names.insert(name.to_vec(), ino);
        self.order.insert(ino, name.to_vec());
    }

    fn remove(&mut self, name: &[u8]) {
        if let Some(ino) = self.names.remove(name) {
            self.order.remove(&ino);
        }
    }

    fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[derive(Debug)]
struct Node {
    attr: Attr,
    /// `Some` for a directory.
    children: Option<Dir>,
    /// A symbolic link's target (empty otherwise).
    target: Vec<u8>,
    /// References the kernel holds (entries replied minus forgotten): an
    /// unlinked node stays until they are gone, since the kernel may still
    /// write back its attributes.
    lookups: u64,
}

#[derive(Debug)]
struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
}

/// The in-memory file system.
#[derive(Debug)]
pub struct Fs {
    tree: Mutex<Tree>,
}

fn now_s() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The attributes of a new node.
fn attr(ino: u64, size: u64, mode: u32, nlink: u32, uid: u32, gid: u32) -> Attr {
    let t = now_s();
    let blocks = size.div_ceil(512);
    Attr { ino, size, blocks, atime: t, mtime: t, ctime: t, mode, nlink, uid, gid, blksize: 4096, ..Attr::default() }
}

fn entry(a: &Attr) -> EntryOut {
    EntryOut { nodeid: a.ino, generation: 1, entry_valid: VALID, attr_valid: VALID, attr: *a }
}

impl Default for Fs {
    fn default() -> Self {
        Self::new()
    }
}

impl Fs {
    /// An empty root directory owned by root, mode 0777 so that tests and
    /// benchmarks of any user can create in it.
    pub fn new() -> Self {
        let root = Node {
            attr: attr(abi::ROOT_ID, 0, S_IFDIR | 0o777, 2, 0, 0),
            children: Some(Dir::default()),
            target: Vec::new(),
            lookups: 1,
        };
        let nodes = HashMap::from([(abi::ROOT_ID, root)]);
        Self { tree: Mutex::new(Tree { nodes, next_ino: 2 }) }
    }
}

impl Handler for Fs {
    /// What DualFS's adapter asks for, so that the kernel sends the same
    /// requests (one WRITE per file at close, no GETXATTR
    /// security.capability before each write).
    fn init(&self, _offer: &InitIn) -> InitOut {
        InitOut {
            flags: init_flags::ASYNC_READ
                | init_flags::BIG_WRITES
                | init_flags::PARALLEL_DIROPS
                | init_flags::WRITEBACK_CACHE
                | init_flags::HANDLE_KILLPRIV_V2,
            max_write: MAX_WRITE,
            max_pages: u16::try_from(MAX_WRITE / 4096).unwrap_or(1),
            ..InitOut::default()
        }
    }

    fn handle(&self, h: &InHeader, req: Request<'_>, out: &mut ReplyBuf<'_>) -> Outcome {
        // Nothing to make durable.
        if matches!(req, Request::Fsync { .. } | Request::Fsyncdir { .. }) {
            return Outcome::Reply;
        }
        let Ok(mut t) = self.tree.lock() else { return Outcome::Error(libc::EIO) };
        match req {
            Request::Forget { nlookup } => {
                t.forget(h.nodeid, nlookup);
                Outcome::NoReply
            }
            Request::BatchForget { forgets } => {
                for (node, nlookup) in forgets.iter() {
                    t.forget(node, nlookup);
                }
                Outcome::NoReply
            }
            Request::Interrupt { .. } => Outcome::NoReply,
            Request::Getattr { .. } => match t.nodes.get(&h.nodeid) {
                Some(n) => {
                    out.attr_out(&n.attr, VALID);
                    Outcome::Reply
                }
                None => Outcome::Error(libc::ENOENT),
            },
            Request::Setattr(s) => match t.nodes.get_mut(&h.nodeid) {
                Some(n) => {
                    if s.valid & abi::fattr::MODE != 0 {
                        n.attr.mode = (n.attr.mode & !0o7777) | (s.mode & 0o7777);
                    }
                    if s.valid & abi::fattr::UID != 0 {
                        n.attr.uid = s.uid;
                    }
                    if s.valid & abi::fattr::GID != 0 {
                        n.attr.gid = s.gid;
                    }
                    if s.valid & abi::fattr::SIZE != 0 {
                        n.attr.size = s.size;
                        n.attr.blocks = s.size.div_ceil(512);
                    }
                    out.attr_out(&n.attr, VALID);
                    Outcome::Reply
                }
                None => Outcome::Error(libc::ENOENT),
            },
            Request::Write { offset, data, .. } => match t.nodes.get_mut(&h.nodeid) {
                Some(n) if n.children.is_none() => {
                    let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
                    n.attr.size = n.attr.size.max(offset.saturating_add(len));
                    n.attr.blocks = n.attr.size.div_ceil(512);
                    out.write_out(u32::try_from(data.len()).unwrap_or(u32::MAX));
                    Outcome::Reply
                }
                Some(_) => Outcome::Error(libc::EISDIR),
                None => Outcome::Error(libc::ENOENT),
            },
            // Zeros: the tree keeps no data. Written in place.
            Request::Read { offset, size, .. } => match t.nodes.get(&h.nodeid) {
                Some(n) if n.children.is_none() => {
                    let left = n.attr.size.saturating_sub(offset);
                    let spare = out.spare();
                    let len = usize::try_from(left.min(u64::from(size))).unwrap_or(usize::MAX).min(spare.len());
                    spare[..len].fill(0);
                    out.advance(len);
                    Outcome::Reply
                }
                Some(_) => Outcome::Error(libc::EISDIR),
                None => Outcome::Error(libc::ENOENT),
            },
            Request::Symlink { name, target } => t.create(h, S_IFLNK | 0o777, name, target, out),
            Request::Readlink => match t.nodes.get(&h.nodeid) {
                Some(n) if n.attr.mode & S_IFMT == S_IFLNK => {
                    out.push(&n.target);
                    Outcome::Reply
                }
                Some(_) => Outcome::Error(libc::EINVAL),
                None => Outcome::Error(libc::ENOENT),
            },
            Request::Lookup { name } => {
                let child = match t.dir(h.nodeid) {
                    Ok(d) => d.get(name),
                    Err(e) => return Outcome::Error(e),
                };
                match child.and_then(|c| t.nodes.get_mut(&c)) {
                    Some(n) => {
                        n.lookups += 1;
                        out.entry_out(&entry(&n.attr));
                    }
                    // A negative entry the kernel may cache (node id 0).
                    None => out.entry_out(&EntryOut { entry_valid: VALID, ..EntryOut::default() }),
                }
                Outcome::Reply
            }
            Request::Create { mode, name, .. } => t.create(h, S_IFREG | (mode & 0o7777), name, b"", out),
            Request::Mkdir { mode, name, .. } => t.create(h, S_IFDIR | (mode & 0o7777), name, b"", out),
            Request::Unlink { name } => t.unlink(h.nodeid, name),
            Request::Rmdir { name } => t.rmdir(h.nodeid, name),
            Request::Statfs => {
                let files = u64::try_from(t.nodes.len()).unwrap_or(u64::MAX);
                let free = 1 << 20;
                out.statfs_out(&Kstatfs {
                    blocks: 1 << 20,
                    bfree: free,
                    bavail: free,
                    files: 1 << 20,
                    ffree: (1 << 20) - files,
                    bsize: 4096,
                    namelen: 255,
                    frsize: 4096,
                });
                Outcome::Reply
            }
            Request::Opendir { .. } | Request::Open { .. } => {
                out.open_out(0, 0);
                Outcome::Reply
            }
            Request::Readdir { offset, size, .. } => t.readdir(h.nodeid, offset, size, out),
            Request::Releasedir { .. } | Request::Release { .. } => Outcome::Reply,
            Request::Getxattr { .. } => Outcome::Error(libc::ENODATA),
            Request::Listxattr { size } => {
                if size == 0 {
                    out.getxattr_out(0);
                }
                Outcome::Reply
            }
            // ENOSYS once and the kernel stops sending them.
            _ => Outcome::Error(libc::ENOSYS),
        }
    }
}

impl Tree {
    fn dir(&self, ino: u64) -> Result<&Dir, i32> {
        let n = self.nodes.get(&ino).ok_or(libc::ENOENT)?;
        n.children.as_ref().ok_or(libc::ENOTDIR)
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut Dir, i32> {
        let n = self.nodes.get_mut(&ino).ok_or(libc::ENOENT)?;
        n.children.as_mut().ok_or(libc::ENOTDIR)
    }

    /// Makes an empty file, a directory or a symbolic link to `target`
    /// (`mode` has the type bits); a file's reply carries an open handle
    /// too (CREATE), the others' do not.
    fn create(&mut self, h: &InHeader, mode: u32, name: &[u8], target: &[u8], out: &mut ReplyBuf<'_>) -> Outcome {
        let ino = self.next_ino;
        match self.dir_mut(h.nodeid) {
            Ok(d) if d.contains_key(name) => return Outcome::Error(libc::EEXIST),
            Ok(d) => d.insert(name, ino),
            Err(e) => return Outcome::Error(e),
        }
        self.next_ino += 1;
        let dir = mode & S_IFMT == S_IFDIR;
        let nlink = if dir { 2 } else { 1 };
        let size = u64::try_from(target.len()).unwrap_or(u64::MAX);
        let attr = attr(ino, size, mode, nlink, h.uid, h.gid);
        let node = Node { attr, children: dir.then(Dir::default), target: target.to_vec(), lookups: 1 };
        self.nodes.insert(ino, node);
        if mode & S_IFMT == S_IFREG {
            out.create_out(&entry(&attr), 0, 0);
        } else {
            out.entry_out(&entry(&attr));
        }
        Outcome::Reply
    }

    fn unlink(&mut self, parent: u64, name: &[u8]) -> Outcome {
        let child = match self.dir(parent) {
            Ok(d) => d.get(name),
            Err(e) => return Outcome::Error(e),
        };
        let Some(child) = child else { return Outcome::Error(libc::ENOENT) };
        if self.nodes.get(&child).is_some_and(|n| n.children.is_some()) {
            return Outcome::Error(libc::EISDIR);
        }
        self.detach(parent, name, child);
        Outcome::Reply
    }

    /// Takes `name` (naming `child`) out of `parent`. Inode numbers are
    /// never reused, so the kernel's node for the removed one cannot alias
    /// a new one; it goes at the last FORGET.
    fn detach(&mut self, parent: u64, name: &[u8], child: u64) {
        if let Ok(d) = self.dir_mut(parent) {
            d.remove(name);
        }
        if let Some(n) = self.nodes.get_mut(&child) {
            n.attr.nlink = 0;
            if n.lookups == 0 {
                self.nodes.remove(&child);
            }
        }
    }

    /// Removes an empty directory: without it `rm -rf` and bonnie++ fail
    /// half-way and the floor they measure is too low.
    fn rmdir(&mut self, parent: u64, name: &[u8]) -> Outcome {
        let child = match self.dir(parent) {
            Ok(d) => d.get(name),
            Err(e) => return Outcome::Error(e),
        };
        let Some(child) = child else { return Outcome::Error(libc::ENOENT) };
        match self.nodes.get(&child).map(|n| n.children.as_ref().map(Dir::is_empty)) {
            Some(Some(true)) => {}
            Some(Some(false)) => return Outcome::Error(libc::ENOTEMPTY),
            Some(None) => return Outcome::Error(libc::ENOTDIR),
            None => return Outcome::Error(libc::ENOENT),
        }
        self.detach(parent, name, child);
        Outcome::Reply
    }

    fn forget(&mut self, ino: u64, nlookup: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.lookups = n.lookups.saturating_sub(nlookup);
            if n.lookups == 0 && n.attr.nlink == 0 {
                self.nodes.remove(&ino);
            }
        }
    }

    fn readdir(&self, ino: u64, offset: u64, size: u32, out: &mut ReplyBuf<'_>) -> Outcome {
        let d = match self.dir(ino) {
            Ok(d) => d,
            Err(e) => return Outcome::Error(e),
        };
        let max = usize::try_from(size).unwrap_or(usize::MAX);
        // ".." is given as the root: the kernel answers it from its dentries.
        // Offsets: 1 and 2 for the dots, a child's inode number plus 2.
        let dots = [(b".".as_slice(), ino, DT_DIR), (b"..".as_slice(), abi::ROOT_ID, DT_DIR)];
        let dots = (1u64..).zip(dots).skip(usize::try_from(offset.min(2)).unwrap_or(2));
        let children = d.order.range(offset.saturating_sub(1)..).map(|(&c, name)| {
            let kind = match self.nodes.get(&c).map(|n| n.attr.mode & S_IFMT) {
                Some(S_IFDIR) => DT_DIR,
                Some(S_IFLNK) => DT_LNK,
                _ => DT_REG,
            };
            (c.saturating_add(2), (name.as_slice(), c, kind))
        });
        for (off, (name, child, kind)) in dots.chain(children) {
            if !out.push_dirent(max, child, off, kind, name) {
                break;
            }
        }
        Outcome::Reply
    }
}
