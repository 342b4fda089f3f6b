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
const DT_DIR: u32 = 4;
const DT_REG: u32 = 8;

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
        };
        let nodes = HashMap::from([(abi::ROOT_ID, root)]);
        Self { tree: Mutex::new(Tree { nodes, next_ino: 2 }), counts: (0..64).map(|_| AtomicU64::new(0)).collect() }
    }

    /// Requests served so far, by opcode (opcodes past 63 are not counted).
    pub fn counts(&self) -> Vec<(u32, u64)> {
        (0u32..).zip(&self.counts).map(|(op, c)| (op, c.load(Ordering::Relaxed))).filter(|&(_, c)| c > 0).collect()
    }

    /// Serves one decoded request (INIT excepted: the transport negotiates
    /// it), appending the reply's payload to `out`.
    pub fn handle(&self, h: &InHeader, req: &Request<'_>, out: &mut Vec<u8>, max_out: usize) -> Outcome {
        if let Some(c) = usize::try_from(h.opcode).ok().and_then(|i| self.counts.get(i)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let Ok(mut t) = self.tree.lock() else { return Outcome::Error(libc::EIO) };
        match *req {
            Request::Forget | Request::Interrupt => Outcome::NoReply,
            Request::Getattr => match t.nodes.get(&h.nodeid) {
                Some(n) => {
                    abi::encode_attr_out(out, VALID_S, &n.attr);
                    Outcome::Reply
                }
                None => Outcome::Error(libc::ENOENT),
            },
            Request::Setattr { valid, mode } => match t.nodes.get_mut(&h.nodeid) {
                Some(n) => {
                    if valid & abi::FATTR_MODE != 0 {
                        n.attr.mode = (n.attr.mode & !0o7777) | (mode & 0o7777);
                    }
                    abi::encode_attr_out(out, VALID_S, &n.attr);
                    Outcome::Reply
                }
                None => Outcome::Error(libc::ENOENT),
            },
            Request::Lookup { name } => {
                let child = match t.dir(h.nodeid) {
                    Ok(d) => d.get(name).copied(),
                    Err(e) => return Outcome::Error(e),
                };
                match child.and_then(|c| t.nodes.get(&c)) {
                    Some(n) => abi::encode_entry(out, n.attr.ino, VALID_S, &n.attr),
                    // A negative entry the kernel may cache (node id 0).
                    None => abi::encode_entry(out, 0, VALID_S, &Attr::default()),
                }
                Outcome::Reply
            }
            Request::Create { mode, name, .. } => t.create(h, S_IFREG | (mode & 0o7777), name, out),
            Request::Mkdir { mode, name } => t.create(h, S_IFDIR | (mode & 0o7777), name, out),
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
    /// Makes an empty file or directory (`mode` has the type bits); a file's
    /// reply carries an open handle too (CREATE), a directory's does not.
    fn create(&mut self, h: &InHeader, mode: u32, name: &[u8], out: &mut Vec<u8>) -> Outcome {
        let ino = self.next_ino;
        match self.dir_mut(h.nodeid) {
            Ok(d) if d.contains_key(name) => return Outcome::Error(libc::EEXIST),
            Ok(d) => {
                d.insert(name.to_vec(), ino);
            }
            Err(e) => return Outcome::Error(e),
        }
        self.next_ino += 1;
        let dir = mode & S_IFDIR != 0;
        let nlink = if dir { 2 } else { 1 };
        let attr = Attr { ino, size: 0, mode, nlink, uid: h.uid, gid: h.gid, time_s: now_s() };
        self.nodes.insert(ino, Node { attr, children: dir.then(BTreeMap::new) });
        abi::encode_entry(out, ino, VALID_S, &attr);
        if !dir {
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
        // Inode numbers are never reused, so the kernel's cached node for
        // the unlinked file cannot alias a new one.
        self.nodes.remove(&child);
        Outcome::Reply
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
            let kind = if self.nodes.get(&c).is_some_and(|n| n.children.is_some()) { DT_DIR } else { DT_REG };
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
