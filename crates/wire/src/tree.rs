//! The prototype's file system: a tiny in-memory tree of directories and
//! empty files, and the one request handler both transports call. It stands
//! in for DualFS's adapter so that a round trip measures the transport, not
//! the engine.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::abi::{self, Attr, InHeader, Request};

/// How long the kernel may keep entries and attributes (DualFS's adapter
/// keeps them an hour too), so the request mix matches the real mount's.
const VALID_S: u64 = 3600;

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFMT: u32 = 0o170_000;
const DT_DIR: u32 = 4;
const DT_REG: u32 = 8;
const DT_LNK: u32 = 10;

/// What the handler answers: a reply with a payload (already in the output
/// buffer), an error, or nothing (FORGET).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Reply with error 0 and the payload written to the buffer.
    Reply,
    /// Reply with this errno and no payload.
    Error(i32),
    /// The kernel expects no reply.
    NoReply,
}

#[derive(Debug)]
struct Node {
    attr: Attr,
    /// `Some` for a directory.
    children: Option<BTreeMap<Vec<u8>, u64>>,
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

/// The in-memory file system and per-opcode request counters.
#[derive(Debug)]
pub struct Fs {
    tree: Mutex<Tree>,
    counts: Vec<AtomicU64>,
    /// Requests that arrived on an io_uring queue (the rest came through
    /// /dev/fuse), so a test can tell which transport really served.
    ring_requests: AtomicU64,
    /// Requests served, by the CPU the serving thread ran on: with a client
    /// pinned, the ones served on another CPU paid a wake-up across CPUs.
    by_cpu: Vec<AtomicU64>,
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
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
            attr: Attr { ino: abi::ROOT_ID, size: 0, mode: S_IFDIR | 0o777, nlink: 2, uid: 0, gid: 0, time_s: now_s() },
            children: Some(BTreeMap::new()),
            target: Vec::new(),
            lookups: 1,
        };
        let nodes = HashMap::from([(abi::ROOT_ID, root)]);
        Self {
            tree: Mutex::new(Tree { nodes, next_ino: 2 }),
            counts: (0..64).map(|_| AtomicU64::new(0)).collect(),
            ring_requests: AtomicU64::new(0),
            by_cpu: (0..64).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Requests served so far, by opcode (opcodes past 63 are not counted).
    pub fn counts(&self) -> Vec<(u32, u64)> {
        (0u32..).zip(&self.counts).map(|(op, c)| (op, c.load(Ordering::Relaxed))).filter(|&(_, c)| c > 0).collect()
    }

    /// Counts a request that arrived on an io_uring queue.
    pub fn note_ring_request(&self) {
        self.ring_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests served so far by the CPU they were served on (CPUs past 63
    /// are not counted).
    pub fn by_cpu(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.by_cpu.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        while v.last() == Some(&0) {
            v.pop();
        }
        v
    }

    /// Requests that arrived on io_uring queues so far.
    pub fn ring_requests(&self) -> u64 {
        self.ring_requests.load(Ordering::Relaxed)
    }

    /// Serves one decoded request (INIT excepted: the transport negotiates
    /// it), appending the reply's payload to `out`.
    pub fn handle(&self, h: &InHeader, req: &Request<'_>, out: &mut Vec<u8>, max_out: usize) -> Outcome {
        if let Some(c) = usize::try_from(h.opcode).ok().and_then(|i| self.counts.get(i)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(c) = self.by_cpu.get(rustix::thread::sched_getcpu()) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let Ok(mut t) = self.tree.lock() else { return Outcome::Error(libc::EIO) };
        match *req {
            Request::Forget { nlookup } => {
                t.forget(h.nodeid, nlookup);
                Outcome::NoReply
            }
            Request::BatchForget { pairs } => {
                for (node, nlookup) in abi::forget_pairs(pairs) {
                    t.forget(node, nlookup);
                }
                Outcome::NoReply
            }
            Request::Interrupt => Outcome::NoReply,
            Request::Getattr => match t.nodes.get(&h.nodeid) {
                Some(n) => {
                    abi::encode_attr_out(out, VALID_S, &n.attr);
                    Outcome::Reply
                }
                None => Outcome::Error(libc::ENOENT),
            },
            Request::Setattr { valid, size, mode, uid, gid } => match t.nodes.get_mut(&h.nodeid) {
                Some(n) => {
                    if valid & abi::FATTR_MODE != 0 {
                        n.attr.mode = (n.attr.mode & !0o7777) | (mode & 0o7777);
                    }
                    if valid & abi::FATTR_UID != 0 {
                        n.attr.uid = uid;
                    }
                    if valid & abi::FATTR_GID != 0 {
                        n.attr.gid = gid;
                    }
                    if valid & abi::FATTR_SIZE != 0 {
                        n.attr.size = size;
                    }
                    abi::encode_attr_out(out, VALID_S, &n.attr);
                    Outcome::Reply
                }
                None => Outcome::Error(libc::ENOENT),
            },
            Request::Write { offset, data } => match t.nodes.get_mut(&h.nodeid) {
                Some(n) if n.children.is_none() => {
                    let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
                    n.attr.size = n.attr.size.max(offset.saturating_add(len));
                    abi::encode_write_out(out, u32::try_from(data.len()).unwrap_or(u32::MAX));
                    Outcome::Reply
                }
                Some(_) => Outcome::Error(libc::EISDIR),
                None => Outcome::Error(libc::ENOENT),
            },
            Request::Read { offset, size } => match t.nodes.get(&h.nodeid) {
                Some(n) if n.children.is_none() => {
                    let left = n.attr.size.saturating_sub(offset);
                    let len = left.min(u64::from(size)).min(u64::try_from(max_out).unwrap_or(u64::MAX));
                    out.resize(out.len() + usize::try_from(len).unwrap_or(0), 0);
                    Outcome::Reply
                }
                Some(_) => Outcome::Error(libc::EISDIR),
                None => Outcome::Error(libc::ENOENT),
            },
            Request::Symlink { name, target } => t.create(h, S_IFLNK | 0o777, name, target, out),
            Request::Readlink => match t.nodes.get(&h.nodeid) {
                Some(n) if n.attr.mode & S_IFMT == S_IFLNK => {
                    out.extend_from_slice(&n.target);
                    Outcome::Reply
                }
                Some(_) => Outcome::Error(libc::EINVAL),
                None => Outcome::Error(libc::ENOENT),
            },
            Request::Lookup { name } => {
                let child = match t.dir(h.nodeid) {
                    Ok(d) => d.get(name).copied(),
                    Err(e) => return Outcome::Error(e),
                };
                match child.and_then(|c| t.nodes.get_mut(&c)) {
                    Some(n) => {
                        n.lookups += 1;
                        abi::encode_entry(out, n.attr.ino, VALID_S, &n.attr);
                    }
                    // A negative entry the kernel may cache (node id 0).
                    None => abi::encode_entry(out, 0, VALID_S, &Attr::default()),
                }
                Outcome::Reply
            }
            Request::Create { mode, name, .. } => t.create(h, S_IFREG | (mode & 0o7777), name, b"", out),
            Request::Mkdir { mode, name } => t.create(h, S_IFDIR | (mode & 0o7777), name, b"", out),
            Request::Unlink { name } => t.unlink(h.nodeid, name),
            Request::Statfs => {
                let files = u64::try_from(t.nodes.len()).unwrap_or(u64::MAX);
                abi::encode_statfs(out, 1 << 20, 1 << 20, 1 << 20, (1 << 20) - files);
                Outcome::Reply
            }
            Request::Opendir | Request::Open { .. } => {
                abi::encode_open_out(out, 0);
                Outcome::Reply
            }
            Request::Readdir { offset, size, .. } => t.readdir(h.nodeid, offset, size, out, max_out),
            Request::Releasedir | Request::Release => Outcome::Reply,
            Request::Getxattr { .. } => Outcome::Error(libc::ENODATA),
            Request::Listxattr { size } => {
                if size == 0 {
                    out.extend_from_slice(&0u64.to_ne_bytes());
                }
                Outcome::Reply
            }
            // ENOSYS once and the kernel stops sending them.
            Request::Flush | Request::Access | Request::Other(_) => Outcome::Error(libc::ENOSYS),
            Request::Init { .. } | Request::Destroy => Outcome::Error(libc::EPROTO),
        }
    }
}

impl Tree {
    fn dir(&self, ino: u64) -> Result<&BTreeMap<Vec<u8>, u64>, i32> {
        let n = self.nodes.get(&ino).ok_or(libc::ENOENT)?;
        n.children.as_ref().ok_or(libc::ENOTDIR)
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut BTreeMap<Vec<u8>, u64>, i32> {
        let n = self.nodes.get_mut(&ino).ok_or(libc::ENOENT)?;
        n.children.as_mut().ok_or(libc::ENOTDIR)
    }

    /// Makes an empty file or directory (`mode` has the type bits); a file's
    /// reply carries an open handle too (CREATE), a directory's does not.
    /// Makes an empty file, a directory or a symbolic link to `target`
    /// (`mode` has the type bits); a file's reply carries an open handle
    /// too (CREATE), the others' do not.
    fn create(&mut self, h: &InHeader, mode: u32, name: &[u8], target: &[u8], out: &mut Vec<u8>) -> Outcome {
        let ino = self.next_ino;
        match self.dir_mut(h.nodeid) {
            Ok(d) if d.contains_key(name) => return Outcome::Error(libc::EEXIST),
            Ok(d) => {
                d.insert(name.to_vec(), ino);
            }
            Err(e) => return Outcome::Error(e),
        }
        self.next_ino += 1;
        let dir = mode & S_IFMT == S_IFDIR;
        let nlink = if dir { 2 } else { 1 };
        let size = u64::try_from(target.len()).unwrap_or(u64::MAX);
        let attr = Attr { ino, size, mode, nlink, uid: h.uid, gid: h.gid, time_s: now_s() };
        let node = Node { attr, children: dir.then(BTreeMap::new), target: target.to_vec(), lookups: 1 };
        self.nodes.insert(ino, node);
        abi::encode_entry(out, ino, VALID_S, &attr);
        if mode & S_IFMT == S_IFREG {
            abi::encode_open_out(out, 0);
        }
        Outcome::Reply
    }

    fn unlink(&mut self, parent: u64, name: &[u8]) -> Outcome {
        let child = match self.dir(parent) {
            Ok(d) => d.get(name).copied(),
            Err(e) => return Outcome::Error(e),
        };
        let Some(child) = child else { return Outcome::Error(libc::ENOENT) };
        if self.nodes.get(&child).is_some_and(|n| n.children.is_some()) {
            return Outcome::Error(libc::EISDIR);
        }
        if let Ok(d) = self.dir_mut(parent) {
            d.remove(name);
        }
        // Inode numbers are never reused, so the kernel's node for the
        // unlinked file cannot alias a new one; it goes at the last FORGET.
        if let Some(n) = self.nodes.get_mut(&child) {
            n.attr.nlink = 0;
            if n.lookups == 0 {
                self.nodes.remove(&child);
            }
        }
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

    fn readdir(&self, ino: u64, offset: u64, size: u32, out: &mut Vec<u8>, max_out: usize) -> Outcome {
        let d = match self.dir(ino) {
            Ok(d) => d,
            Err(e) => return Outcome::Error(e),
        };
        let max = usize::try_from(size).unwrap_or(usize::MAX).min(max_out);
        // ".." is given as the root: the kernel answers it from its dentries.
        let dots = [(b".".as_slice(), ino, DT_DIR), (b"..".as_slice(), abi::ROOT_ID, DT_DIR)];
        let entries = dots.into_iter().chain(d.iter().map(|(name, &c)| {
            let kind = match self.nodes.get(&c).map(|n| n.attr.mode & S_IFMT) {
                Some(S_IFDIR) => DT_DIR,
                Some(S_IFLNK) => DT_LNK,
                _ => DT_REG,
            };
            (name.as_slice(), c, kind)
        }));
        // The offset of an entry is its index plus one: the next READDIR
        // starts after it.
        for (i, (name, child, kind)) in (1u64..).zip(entries).skip(usize::try_from(offset).unwrap_or(usize::MAX)) {
            if !abi::push_dirent(out, max, child, i, kind, name) {
                break;
            }
        }
        Outcome::Reply
    }
}
