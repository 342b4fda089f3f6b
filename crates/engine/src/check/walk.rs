//! The walk itself: load every live inode and node from disk, then check
//! the namespace (reachability, link counts, directories, extent maps,
//! xattrs, ownership) against what was found. The space accounting is
//! checked against the same load in `space.rs`.

use std::collections::{HashMap, HashSet, VecDeque};

use super::{CheckStats, Invariant, Loaded, Problem, tree};
use crate::error::{Error, Result};
use crate::format::block::{self, BlockKind};
use crate::format::codec::Reader;
use crate::format::inode::{Body, Extent, InodeRecord, TreeRoot, Xattrs};
use crate::format::inode_block;
use crate::format::name::{COLLISION_SLOTS, FileName, hash_position};
use crate::format::node::{Node, NodeSource, TreeKind};
use crate::meta_log::{Log, Object};
use crate::types::{BLOCK_BYTES, DataBlock, FileKind, InodeNo, MetaBlock, NodeId};

pub(super) fn problem(
    invariant: Invariant,
    structure: &'static str,
    ino: Option<InodeNo>,
    block: Option<u64>,
    message: impl Into<String>,
) -> Problem {
    Problem { invariant: Some(invariant), structure, ino, block, message: message.into() }
}

/// Reads every live inode record and node from the meta-data device.
pub(super) fn load(log: &Log, problems: &mut Vec<Problem>) -> Loaded {
    let mut loaded = Loaded::default();
    let mut by_block: HashMap<MetaBlock, Vec<InodeNo>> = HashMap::new();
    for i in 1..log.ifile().inodes.len() as u64 {
        let e = log.ifile().inodes.get(i as usize);
        if !e.in_use() {
            continue;
        }
        if e.address.0 == 0 {
            problems.push(problem(Invariant::I8, "inode map", Some(InodeNo(i)), None, "in use but never written"));
            continue;
        }
        by_block.entry(e.address).or_default().push(InodeNo(i));
    }
    let mut blocks: Vec<_> = by_block.into_iter().collect();
    blocks.sort_unstable();
    for (at, inos) in blocks {
        let records = log.read_meta(at, 1).and_then(|raw| {
            let (_, payload) = block::open_block_of_kind(&raw, at, log.volume_id(), BlockKind::Inodes)
                .map_err(|e| Error::corrupt_meta("inode block", at.0, e.0))?;
            inode_block::decode_all(payload).map_err(|e| Error::corrupt_meta("inode block", at.0, e.0))
        });
        let records = match records {
            Ok(r) => r,
            Err(e) => {
                problems.push(problem(Invariant::I5, "inode block", None, Some(at.0), e.to_string()));
                continue;
            }
        };
        for ino in inos {
            let e = log.ifile().inodes.get(ino.0 as usize);
            match records.iter().find(|r| r.ino == ino) {
                None => problems.push(problem(
                    Invariant::I2,
                    "inode map",
                    Some(ino),
                    Some(at.0),
                    "points at a block without the inode (overwritten while live, or a misdirected write)",
                )),
                Some(r) => {
                    if r.group.0 >= log.superblock().group_count {
                        problems.push(problem(
                            Invariant::I8,
                            "inode",
                            Some(ino),
                            Some(at.0),
                            format!("names data group {}, the volume has {}", r.group.0, log.superblock().group_count),
                        ));
                    }
                    if r.generation != e.generation {
                        problems.push(problem(
                            Invariant::I8,
                            "inode",
                            Some(ino),
                            Some(at.0),
                            format!("generation {} but the inode map says {}", r.generation, e.generation),
                        ));
                    }
                    if r.encoded_len() != usize::from(e.record_len) {
                        problems.push(problem(
                            Invariant::I7,
                            "inode map",
                            Some(ino),
                            Some(at.0),
                            format!("record length {} but the record is {} bytes", e.record_len, r.encoded_len()),
                        ));
                    }
                    loaded.inodes.insert(ino, r.clone());
                }
            }
        }
    }
    for id in 1..log.ifile().nodes.len() as u64 {
        let at = log.ifile().node_address(NodeId(id));
        if at.0 == 0 {
            continue;
        }
        // A valid block of another identity where the map points was
        // reused while live (I2); anything else fails to decode (I5).
        let obj = (|| -> std::result::Result<_, (Invariant, String)> {
            let raw = log.read_meta(at, 1).map_err(|e| (Invariant::I5, e.to_string()))?;
            let (h, payload) = block::open_block(&raw, at, log.volume_id())
                .map_err(|e| (Invariant::I5, format!("meta-data block: {}", e.0)))?;
            if h.name != id {
                return Err((
                    Invariant::I2,
                    format!("holds node {} instead of {id} (overwritten while live, or a misdirected write)", h.name),
                ));
            }
            let obj = match h.kind {
                BlockKind::Node => Object::Node(
                    Node::decode(payload, h.aux).map_err(|e| (Invariant::I5, format!("B-tree node: {}", e.0)))?,
                ),
                BlockKind::Blob => Object::Blob(payload.to_vec()),
                k => {
                    return Err((
                        Invariant::I2,
                        format!("node {id} is a {} (overwritten while live, or a misdirected write)", k.name()),
                    ));
                }
            };
            Ok((h.owner, obj))
        })();
        match obj {
            Ok(o) => {
                loaded.nodes.insert(NodeId(id), o);
            }
            Err((invariant, why)) => problems.push(problem(invariant, "node", None, Some(at.0), why)),
        }
    }
    loaded
}

/// Read-only access to the loaded nodes for the B-tree checker, recording
/// which inode each node was reached from.
pub(super) struct Source<'a> {
    pub(super) loaded: &'a Loaded,
}

impl NodeSource for Source<'_> {
    fn node(&mut self, id: NodeId) -> Result<&Node> {
        match self.loaded.nodes.get(&id) {
            Some((_, Object::Node(n))) => Ok(n),
            Some((_, Object::Blob(_))) => Err(Error::corrupt_meta("B-tree node", 0, format!("node {id} is a blob"))),
            None => Err(Error::corrupt_meta(
                "B-tree node",
                0,
                format!("node {id} is referenced but not allocated or unreadable"),
            )),
        }
    }
}

/// A decoded xattr tree entry: name, and blob length and nodes if not inline.
type XattrEntry = (Vec<u8>, Option<(u32, Vec<NodeId>)>);

/// What one inode's walk needs to share.
struct Walk<'a> {
    log: &'a Log,
    loaded: &'a Loaded,
    problems: &'a mut Vec<Problem>,
    /// While a receive is under way: where the namespace disagreements it
    /// explains go (entries naming inodes it has not made yet, link counts
    /// and `..` it sets at its end), instead of `problems`.
    explained: Option<&'a mut Vec<Problem>>,
    /// Which inode references each node.
    node_owner: HashMap<NodeId, InodeNo>,
    /// Every mapped data extent with its file.
    extents: Vec<(DataBlock, u32, InodeNo)>,
}

impl Walk<'_> {
    /// A disagreement between entries and inodes, which a receive under
    /// way explains.
    fn namespace(&mut self, p: Problem) {
        match self.explained.as_mut() {
            Some(e) => e.push(p),
            None => self.problems.push(p),
        }
    }

    fn claim(&mut self, id: NodeId, ino: InodeNo) {
        if let Some(prev) = self.node_owner.insert(id, ino) {
            self.problems.push(problem(
                Invariant::I8,
                "node",
                Some(ino),
                None,
                format!("node {id} is also referenced by inode {prev}"),
            ));
        }
        if let Some((owner, _)) = self.loaded.nodes.get(&id)
            && *owner != ino
        {
            self.problems.push(problem(
                Invariant::I8,
                "node",
                Some(ino),
                None,
                format!("node {id} says it belongs to inode {owner}"),
            ));
        }
    }

    /// Checks a tree and returns its entries (empty on failure, with a problem).
    fn tree(&mut self, ino: InodeNo, t: &TreeRoot, kind: TreeKind, what: &'static str) -> Vec<(u64, Vec<u8>)> {
        let mut seen = Vec::new();
        let res = tree::check(&mut Source { loaded: self.loaded }, Some(t.root), kind, &mut |id| seen.push(id));
        for id in seen {
            self.claim(id, ino);
        }
        match res {
            Ok(Ok(entries)) => {
                if entries.len() as u64 != t.count {
                    self.problems.push(problem(
                        Invariant::I8,
                        what,
                        Some(ino),
                        None,
                        format!("holds {} entries, the inode says {}", entries.len(), t.count),
                    ));
                }
                entries
            }
            Ok(Err(msg)) => {
                self.problems.push(problem(Invariant::I8, what, Some(ino), None, msg));
                Vec::new()
            }
            Err(e) => {
                self.problems.push(problem(Invariant::I8, what, Some(ino), None, e.to_string()));
                Vec::new()
            }
        }
    }

    fn blob(&mut self, ino: InodeNo, nodes: &[NodeId], len: u32, what: &'static str) {
        let mut total = 0usize;
        for id in nodes {
            self.claim(*id, ino);
            match self.loaded.nodes.get(id) {
                Some((_, Object::Blob(b))) => total += b.len(),
                _ => self.problems.push(problem(
                    Invariant::I8,
                    what,
                    Some(ino),
                    None,
                    format!("blob node {id} missing or not a blob"),
                )),
            }
        }
        if total != len as usize {
            self.problems.push(problem(
                Invariant::I8,
                what,
                Some(ino),
                None,
                format!("blob holds {total} bytes, expected {len}"),
            ));
        }
    }

    fn extents(&mut self, ino: InodeNo, rec: &InodeRecord, orphan: bool) -> u64 {
        let list: Vec<Extent> = match &rec.body {
            Body::Extents(v) => v.clone(),
            Body::Tree(t) => self
                .tree(ino, t, TreeKind::Extents, "extent map")
                .into_iter()
                .filter_map(|(k, v)| {
                    let mut r = Reader::new(&v);
                    let e = (|| -> Option<Extent> {
                        let physical = DataBlock(r.u64().ok()?);
                        let len = r.u32().ok()?;
                        let flags = r.u8().ok()?;
                        (len > 0 && flags <= 1 && r.remaining() == 0).then_some(Extent {
                            logical: k,
                            physical,
                            len,
                            unwritten: flags == 1,
                        })
                    })();
                    if e.is_none() {
                        self.problems.push(problem(
                            Invariant::I5,
                            "extent map",
                            Some(ino),
                            None,
                            format!("malformed extent at file block {k}"),
                        ));
                    }
                    e
                })
                .collect(),
            _ => Vec::new(),
        };
        let data_blocks = self.log.superblock().data_blocks;
        let eof_block = rec.size.div_ceil(BLOCK_BYTES);
        let mut total = 0u64;
        for (i, e) in list.iter().enumerate() {
            if i > 0 && list[i - 1].logical_end() > e.logical {
                self.problems.push(problem(
                    Invariant::I8,
                    "extent map",
                    Some(ino),
                    None,
                    format!("extents overlap at file block {}", e.logical),
                ));
            }
            if e.physical.0 == 0 || e.physical.0.saturating_add(u64::from(e.len)) > data_blocks {
                self.problems.push(problem(
                    Invariant::I8,
                    "extent map",
                    Some(ino),
                    None,
                    format!(
                        "extent at file block {} maps data blocks {}+{} outside the data device",
                        e.logical, e.physical.0, e.len
                    ),
                ));
                continue;
            }
            if !e.unwritten && e.logical_end() > eof_block && !orphan {
                self.problems.push(problem(
                    Invariant::I8,
                    "extent map",
                    Some(ino),
                    None,
                    format!(
                        "written blocks {}..{} lie beyond the end of the file (size {})",
                        e.logical.max(eof_block),
                        e.logical_end(),
                        rec.size
                    ),
                ));
            }
            total += u64::from(e.len);
            self.extents.push((e.physical, e.len, ino));
        }
        if total != rec.blocks {
            self.problems.push(problem(
                Invariant::I8,
                "inode",
                Some(ino),
                None,
                format!("says {} data blocks, its extents map {total}", rec.blocks),
            ));
        }
        total
    }

    fn xattrs(&mut self, ino: InodeNo, rec: &InodeRecord) {
        let Xattrs::Tree(t) = &rec.xattrs else { return };
        let mut names = HashSet::new();
        for (_, v) in self.tree(ino, t, TreeKind::Xattrs, "xattr tree") {
            let mut r = Reader::new(&v);
            let parsed = (|| -> Option<XattrEntry> {
                let form = r.u8().ok()?;
                let nl = usize::from(r.u8().ok()?);
                let name = r.bytes(nl).ok()?.to_vec();
                match form {
                    0 => Some((name, None)),
                    1 => {
                        let len = r.u32().ok()?;
                        let mut nodes = Vec::new();
                        while r.remaining() >= 8 {
                            nodes.push(NodeId(r.u64().ok()?));
                        }
                        (r.remaining() == 0).then_some((name, Some((len, nodes))))
                    }
                    _ => None,
                }
            })();
            match parsed {
                None => self.problems.push(problem(Invariant::I5, "xattr tree", Some(ino), None, "malformed entry")),
                Some((name, blob)) => {
                    if !names.insert(name.clone()) {
                        self.problems.push(problem(
                            Invariant::I8,
                            "xattr tree",
                            Some(ino),
                            None,
                            format!("duplicate name {:?}", String::from_utf8_lossy(&name)),
                        ));
                    }
                    if let Some((len, nodes)) = blob {
                        self.blob(ino, &nodes, len, "xattr value");
                    }
                }
            }
        }
    }
}

/// Reachability, directory entries, link counts, per-inode structure, node
/// ownership.
pub(super) fn check_namespace(
    log: &Log,
    loaded: &Loaded,
    problems: &mut Vec<Problem>,
    explained: Option<&mut Vec<Problem>>,
    stats: &mut CheckStats,
) {
    let mut w = Walk { log, loaded, problems, explained, node_owner: HashMap::new(), extents: Vec::new() };
    let Some(names) = reachability(&mut w, stats) else { return };
    let mut inos: Vec<&InodeNo> = loaded.inodes.keys().collect();
    inos.sort_unstable();
    for &ino in inos {
        let rec = &loaded.inodes[&ino];
        let orphan = log.is_orphan(ino);
        stats.inodes += 1;
        stats.orphans += u64::from(orphan);
        link_count(&mut w, &names, ino, rec, orphan);
        inode_body(&mut w, stats, ino, rec, orphan);
        w.xattrs(ino, rec);
    }
    let mut leaked: Vec<NodeId> = loaded.nodes.keys().filter(|id| !w.node_owner.contains_key(id)).copied().collect();
    leaked.sort_unstable();
    for id in leaked {
        w.problems.push(problem(
            Invariant::I8,
            "node",
            None,
            None,
            format!("node {id} is allocated but nothing refers to it"),
        ));
    }
    stats.nodes = loaded.nodes.len() as u64;
    let extents = std::mem::take(&mut w.extents);
    check_extents_disjoint(extents, w.problems);
}

/// What the walk from the root found: who is reached, and by how many names.
#[derive(Default)]
struct Names {
    /// Inodes some directory reachable from the root names.
    reached: HashSet<InodeNo>,
    /// Names of each non-directory.
    links: HashMap<InodeNo, u32>,
    /// Subdirectories of each directory.
    subdirs: HashMap<InodeNo, u32>,
}

/// Walks the tree from the root, breadth first: every directory has one
/// name and its `..` says where that is. `None` when there is no root
/// directory to walk from.
fn reachability(w: &mut Walk<'_>, stats: &mut CheckStats) -> Option<Names> {
    let root = InodeNo::ROOT;
    match w.loaded.inodes.get(&root) {
        Some(r) if FileKind::from_mode(r.mode) == Some(FileKind::Directory) => {
            if r.parent != root {
                w.problems.push(problem(
                    Invariant::I8,
                    "directory",
                    Some(root),
                    None,
                    "the root's parent is not itself",
                ));
            }
        }
        _ => {
            w.problems.push(problem(
                Invariant::I8,
                "inode",
                Some(root),
                None,
                "the root directory is missing or not a directory",
            ));
            return None;
        }
    }
    let mut names = Names::default();
    let mut queue = VecDeque::from([root]);
    names.reached.insert(root);
    while let Some(dir) = queue.pop_front() {
        let Some(rec) = w.loaded.inodes.get(&dir) else {
            continue;
        };
        for (ino, kind, target) in directory_entries(w, stats, dir, rec) {
            *names.links.entry(ino).or_default() += 1;
            if kind == Some(FileKind::Directory) {
                *names.subdirs.entry(dir).or_default() += 1;
                if !names.reached.insert(ino) {
                    w.namespace(problem(
                        Invariant::I8,
                        "directory",
                        Some(ino),
                        None,
                        "directory has more than one name",
                    ));
                    continue;
                }
                if target.parent != dir {
                    w.namespace(problem(
                        Invariant::I8,
                        "directory",
                        Some(ino),
                        None,
                        format!("'..' says {} but it lives in {dir}", target.parent),
                    ));
                }
                queue.push_back(ino);
            } else {
                names.reached.insert(ino);
            }
        }
    }
    Some(names)
}

/// The entries of directory `dir`, each checked: well formed, a valid name
/// at the position its hash gives, named once, naming an inode in use of
/// the type the entry says. Returns the entries that name an inode in use,
/// with its kind and record.
fn directory_entries<'a>(
    w: &mut Walk<'a>,
    stats: &mut CheckStats,
    dir: InodeNo,
    rec: &InodeRecord,
) -> Vec<(InodeNo, Option<FileKind>, &'a InodeRecord)> {
    let entries = match &rec.body {
        Body::Empty => Vec::new(),
        Body::Entries(e) => {
            if e.is_empty() || crate::format::inode::inline_entries_len(e) > w.log.superblock().inline_max as usize {
                w.problems.push(problem(
                    Invariant::I8,
                    "directory",
                    Some(dir),
                    None,
                    "inline entries empty or beyond the inline limit",
                ));
            }
            e.clone()
        }
        Body::Tree(t) => w.tree(dir, t, TreeKind::Directory, "directory"),
        _ => {
            w.problems.push(problem(Invariant::I8, "directory", Some(dir), None, "body is neither empty nor a tree"));
            Vec::new()
        }
    };
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (pos, v) in entries {
        stats.entries += 1;
        let mut r = Reader::new(&v);
        let (Ok(ino), Ok(t)) = (r.u64(), r.u8()) else {
            w.problems.push(problem(
                Invariant::I5,
                "directory",
                Some(dir),
                None,
                format!("malformed entry at {pos:#x}"),
            ));
            continue;
        };
        let name = r.bytes(r.remaining()).unwrap_or_default().to_vec();
        let ino = InodeNo(ino);
        let shown = String::from_utf8_lossy(&name).into_owned();
        if FileName::new(&name).is_err() {
            w.problems.push(problem(Invariant::I8, "directory", Some(dir), None, format!("invalid name {shown:?}")));
        }
        let base = hash_position(&w.log.superblock().hash_key, &name);
        // A restored dump's names were replaced after they were placed.
        if !w.log.superblock().scanned_names() && !(base..base + COLLISION_SLOTS).contains(&pos) {
            w.problems.push(problem(
                Invariant::I8,
                "directory",
                Some(dir),
                None,
                format!("{shown:?} sits at a position its hash does not give"),
            ));
        }
        if !seen.insert(name.clone()) {
            w.problems.push(problem(Invariant::I8, "directory", Some(dir), None, format!("{shown:?} appears twice")));
        }
        let Some(target) = w.loaded.inodes.get(&ino) else {
            w.namespace(problem(
                Invariant::I8,
                "directory",
                Some(dir),
                None,
                format!("{shown:?} names inode {ino}, which is not in use"),
            ));
            continue;
        };
        let kind = FileKind::from_mode(target.mode);
        if kind.map(FileKind::dirent_type) != Some(t) {
            w.namespace(problem(
                Invariant::I8,
                "directory",
                Some(dir),
                None,
                format!("{shown:?} has type {t} but inode {ino} is {kind:?}"),
            ));
        }
        out.push((ino, kind, target));
    }
    out
}

/// An inode in use is reached from the root (unless it waits on the orphan
/// list to be freed), and its link count is the number of its names (for a
/// directory: 2 plus its subdirectories).
fn link_count(w: &mut Walk<'_>, names: &Names, ino: InodeNo, rec: &InodeRecord, orphan: bool) {
    let reached = names.reached.contains(&ino);
    let pending_free = orphan && rec.nlink == 0;
    if !reached && !pending_free {
        // An inode without links that is not on the orphan list would
        // never be freed (I4); one with links that nothing names is lost (I8).
        if rec.nlink == 0 {
            let message = "has no links, is not reachable and is not on the orphan list";
            w.problems.push(problem(Invariant::I4, "inode", Some(ino), None, message));
        } else {
            let message = format!("in use (nlink {}) but not reachable from the root", rec.nlink);
            w.namespace(problem(Invariant::I8, "inode", Some(ino), None, message));
        }
    }
    if pending_free && reached {
        w.problems.push(problem(
            Invariant::I4,
            "inode",
            Some(ino),
            None,
            "has no links but a directory still names it",
        ));
    }
    if FileKind::from_mode(rec.mode) == Some(FileKind::Directory) {
        let want = if reached { 2 + names.subdirs.get(&ino).copied().unwrap_or(0) } else { 0 };
        if rec.nlink != want {
            w.namespace(problem(
                Invariant::I8,
                "inode",
                Some(ino),
                None,
                format!("directory link count {} but {want} expected", rec.nlink),
            ));
        }
    } else {
        let want = names.links.get(&ino).copied().unwrap_or(0);
        if rec.nlink != want {
            w.namespace(problem(
                Invariant::I8,
                "inode",
                Some(ino),
                None,
                format!("link count {} but {want} names", rec.nlink),
            ));
        }
    }
}

/// What an inode holds fits its kind: inline data or extents for a file, a
/// target of its size for a symlink, nothing for a device, fifo or socket.
/// (Directories' bodies are checked with their entries.)
fn inode_body(w: &mut Walk<'_>, stats: &mut CheckStats, ino: InodeNo, rec: &InodeRecord, orphan: bool) {
    match FileKind::from_mode(rec.mode) {
        Some(FileKind::Regular) => {
            stats.files += 1;
            match &rec.body {
                Body::Inline(d) => {
                    stats.inline_files += 1;
                    if d.len() as u64 != rec.size || rec.size > u64::from(w.log.superblock().inline_max) {
                        w.problems.push(problem(
                            Invariant::I8,
                            "inode",
                            Some(ino),
                            None,
                            format!("inline data of {} bytes, size {}", d.len(), rec.size),
                        ));
                    }
                }
                Body::Empty | Body::Extents(_) | Body::Tree(_) => {
                    stats.data_blocks += w.extents(ino, rec, orphan);
                }
                Body::Blob { .. } | Body::Entries(_) => w.problems.push(problem(
                    Invariant::I8,
                    "inode",
                    Some(ino),
                    None,
                    "regular file with a blob or entries body",
                )),
            }
        }
        Some(FileKind::Symlink) => {
            stats.symlinks += 1;
            match &rec.body {
                Body::Inline(t) if !t.is_empty() && t.len() as u64 == rec.size => {}
                Body::Blob { len, nodes } if u64::from(*len) == rec.size => w.blob(ino, nodes, *len, "symlink target"),
                _ => w.problems.push(problem(
                    Invariant::I8,
                    "inode",
                    Some(ino),
                    None,
                    "symlink without a target of its size",
                )),
            }
        }
        Some(FileKind::Directory) => stats.directories += 1,
        _ => {
            stats.special += 1;
            if rec.body != Body::Empty {
                w.problems.push(problem(Invariant::I8, "inode", Some(ino), None, "device, fifo or socket with a body"));
            }
        }
    }
}

/// No data block belongs to two files (or twice to one).
fn check_extents_disjoint(mut extents: Vec<(DataBlock, u32, InodeNo)>, problems: &mut Vec<Problem>) {
    extents.sort_unstable();
    for pair in extents.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.0.0 + u64::from(a.1) > b.0.0 {
            problems.push(problem(
                Invariant::I8,
                "extent map",
                Some(b.2),
                None,
                format!("data blocks from {} are also mapped by inode {}", b.0.0, a.2),
            ));
        }
    }
}
