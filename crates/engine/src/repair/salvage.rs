//! What of each inode can be read, and what of it is sound: every live
//! record and node read from the devices (a record that the strict decoder
//! refuses is read leniently, one that cannot be read at all is lost), then
//! per inode its contents (directory entries, extents, inline bytes, a
//! symlink's target, extended attributes), each structure either *sound*
//! (kept as it is on disk, nodes and all) or rebuilt from what of it is
//! readable (a tree's readable leaves, including those its damaged parents
//! no longer reach).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{Repair, Severity};
use crate::error::{Error, Result};
use crate::format::block::{self, BlockKind};
use crate::format::codec::Reader;
use crate::format::inode::{Body, Extent, InodeRecord, MAX_FILE_SIZE, TreeRoot, Xattrs, inline_entries_len};
use crate::format::inode_block;
use crate::format::name::{COLLISION_SLOTS, FileName, hash_position};
use crate::format::node::{Entries, MAX_LEVEL, Node, NodeSource, TreeKind};
use crate::meta_log::{Log, Object};
use crate::namespace::xattr::XATTR_NAME_MAX;
use crate::types::{BLOCK_BYTES, DataBlock, FileKind, InodeNo, MetaBlock, NodeId};

/// Every live record and node the devices still give.
#[derive(Debug, Default)]
pub(super) struct Loaded {
    /// Records read, set right where the lenient decoder could.
    pub records: BTreeMap<InodeNo, InodeRecord>,
    /// Nodes and blobs read, with the inode their header names.
    pub nodes: HashMap<NodeId, (InodeNo, Object)>,
    /// Node ids the node map names whose block does not hold them.
    pub bad_nodes: HashSet<NodeId>,
    /// Inodes in use whose record cannot be read.
    pub lost: Vec<InodeNo>,
}

fn lost(ino: InodeNo, why: String) -> Repair {
    Repair { severity: Severity::Loses, ino: Some(ino), problem: why, action: "the inode is cleared".into() }
}

/// Reads every inode the inode map has in use and every node the node map
/// names; records what cannot be read as repairs (the inode is cleared).
pub(super) fn load(log: &Log, repairs: &mut Vec<Repair>) -> Loaded {
    let mut out = Loaded::default();
    let mut by_block: BTreeMap<MetaBlock, Vec<InodeNo>> = BTreeMap::new();
    let inodes = &log.ifile().inodes;
    for i in 1..inodes.len() as u64 {
        let e = inodes.get(i as usize);
        if !e.in_use() {
            continue;
        }
        if e.address.0 == 0 {
            repairs.push(lost(InodeNo(i), "in use in the inode map but never written".into()));
            out.lost.push(InodeNo(i));
            continue;
        }
        by_block.entry(e.address).or_default().push(InodeNo(i));
    }
    for (at, inos) in by_block {
        let table = log.read_meta(at, 1).map_err(|e| e.to_string()).and_then(|raw| {
            let (_, payload) = block::open_block_of_kind(&raw, at, log.volume_id(), BlockKind::Inodes)
                .map_err(|e| format!("inode block at {}: {}", at.0, e.0))?;
            let table = inode_block::table(payload).map_err(|e| format!("inode block at {}: {}", at.0, e.0))?;
            Ok((payload.to_vec(), table))
        });
        let (payload, table) = match table {
            Ok(t) => t,
            Err(why) => {
                for ino in inos {
                    repairs.push(lost(ino, format!("its record cannot be read ({why})")));
                    out.lost.push(ino);
                }
                continue;
            }
        };
        for ino in inos {
            let Some((_, range)) = table.iter().find(|(i, _)| *i == ino) else {
                repairs.push(lost(ino, format!("the inode block at {} the inode map names does not hold it", at.0)));
                out.lost.push(ino);
                continue;
            };
            match InodeRecord::decode_salvaging(&payload[range.clone()]) {
                Ok((rec, _)) if rec.ino != ino => {
                    repairs
                        .push(lost(ino, format!("the inode block at {} holds inode {} in its place", at.0, rec.ino)));
                    out.lost.push(ino);
                }
                Ok((rec, notes)) => {
                    for n in notes {
                        let (severity, action) = if n.starts_with("size") {
                            (Severity::Changes, "the size is set to where its data ends")
                        } else if n.contains("dropped") {
                            (Severity::Loses, "dropped")
                        } else {
                            (Severity::Safe, "set to zero")
                        };
                        repairs.push(Repair { severity, ino: Some(ino), problem: n, action: action.into() });
                    }
                    out.records.insert(ino, rec);
                }
                Err(e) => {
                    repairs.push(lost(ino, format!("its record does not decode ({})", e.0)));
                    out.lost.push(ino);
                }
            }
        }
    }
    let nodes = &log.ifile().nodes;
    for id in 1..nodes.len() as u64 {
        let at = MetaBlock(nodes.get(id as usize));
        if at.0 == 0 {
            continue;
        }
        let obj = log.read_meta(at, 1).ok().and_then(|raw| {
            let (h, payload) = block::open_block(&raw, at, log.volume_id()).ok()?;
            if h.name != id {
                return None;
            }
            let obj = match h.kind {
                BlockKind::Node => Object::Node(Node::decode(payload, h.aux).ok()?),
                BlockKind::Blob => Object::Blob(payload.to_vec()),
                _ => return None,
            };
            Some((h.owner, obj))
        });
        match obj {
            Some(o) => {
                out.nodes.insert(NodeId(id), o);
            }
            None => {
                out.bad_nodes.insert(NodeId(id));
            }
        }
    }
    out
}

/// A directory entry as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    pub name: Vec<u8>,
    pub ino: InodeNo,
    /// The type byte the entry carries (`DT_*`).
    pub dtype: u8,
}

/// What an inode holds, as it will be.
#[derive(Clone, Debug)]
pub(super) enum Content {
    /// A directory's entries.
    Dir(Vec<Entry>),
    /// A regular file's extents, sorted, disjoint, inside the data device.
    Extents(Vec<Extent>),
    /// A regular file's bytes in the inode.
    Inline(Vec<u8>),
    /// A symbolic link's target.
    Symlink(Vec<u8>),
    /// A device, fifo or socket.
    Special,
}

/// The plan for one inode.
#[derive(Clone, Debug)]
pub(super) struct Item {
    /// The record as it will be written (its body and xattrs as on disk
    /// while they are kept; fields set right).
    pub rec: InodeRecord,
    /// The record as read.
    pub was: InodeRecord,
    pub content: Content,
    /// The body is written anew from `content` (its old nodes are freed).
    pub rewrite_body: bool,
    /// Extended attributes, as they will be.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// The xattrs are written anew from `xattrs`.
    pub rewrite_xattrs: bool,
    /// Nodes of the body as it is on disk, kept unless it is rewritten.
    pub body_nodes: Vec<NodeId>,
    /// Nodes of the xattr tree and its blobs, kept unless rewritten.
    pub xattr_nodes: Vec<NodeId>,
    /// Extents (logical, old physical, length) whose blocks another file
    /// claimed first: copied into new blocks.
    pub clones: Vec<Extent>,
    /// The record is written again even if unchanged (the inode map's
    /// generation or record length disagree with it).
    pub rewrite_record: bool,
}

impl Item {
    /// The nodes that stay: those of the structures not written anew.
    pub fn kept_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        let body = if self.rewrite_body { &[][..] } else { &self.body_nodes[..] };
        let xattrs = if self.rewrite_xattrs { &[][..] } else { &self.xattr_nodes[..] };
        body.iter().chain(xattrs).copied()
    }
}

/// Entries of a tree or set, in order.
type Pairs<K> = Vec<(K, Vec<u8>)>;

/// A tree's entries, whether it is sound, and its nodes (when sound).
type TreeRead = (Pairs<u64>, bool, Vec<NodeId>);

/// The loaded nodes as a B-tree source.
struct Source<'a> {
    nodes: &'a HashMap<NodeId, (InodeNo, Object)>,
}

impl NodeSource for Source<'_> {
    fn node(&mut self, id: NodeId) -> Result<&Node> {
        match self.nodes.get(&id) {
            Some((_, Object::Node(n))) => Ok(n),
            _ => Err(Error::corrupt_meta("B-tree node", 0, format!("node {id} is missing, unreadable or a blob"))),
        }
    }
}

/// The per-inode analysis, sharing what inodes must not both claim.
pub(super) struct Salvager<'a> {
    pub log: &'a Log,
    pub loaded: &'a Loaded,
    /// Nodes claimed by a structure kept as it is, and by whom.
    pub claimed: HashMap<NodeId, InodeNo>,
    pub repairs: &'a mut Vec<Repair>,
}

impl Salvager<'_> {
    fn note(&mut self, severity: Severity, ino: InodeNo, problem: impl Into<String>, action: impl Into<String>) {
        self.repairs.push(Repair { severity, ino: Some(ino), problem: problem.into(), action: action.into() });
    }

    /// A tree's entries, and whether the tree is sound: every node
    /// readable, of its kind and level, owned by `ino`, claimed by nobody
    /// else, its count right. A tree that is not sound gives what its
    /// readable leaves hold, from its root and from leaves of `ino` no
    /// parent reaches any more.
    fn tree(&mut self, ino: InodeNo, t: &TreeRoot, kind: TreeKind, what: &str) -> TreeRead {
        let mut seen = Vec::new();
        let checked =
            crate::check::tree::check(&mut Source { nodes: &self.loaded.nodes }, Some(t.root), kind, &mut |id| {
                seen.push(id)
            });
        let why = match checked {
            Ok(Ok(entries)) => {
                let foreign = seen.iter().find(|id| self.loaded.nodes.get(id).is_none_or(|(o, _)| *o != ino));
                let taken = seen.iter().find(|id| self.claimed.contains_key(id));
                match (foreign, taken) {
                    (None, None) => {
                        if entries.len() as u64 != t.count {
                            self.note(
                                Severity::Safe,
                                ino,
                                format!("{what} holds {} entries, the inode says {}", entries.len(), t.count),
                                "the count is set right",
                            );
                        }
                        for id in &seen {
                            self.claimed.insert(*id, ino);
                        }
                        return (entries, true, seen);
                    }
                    (Some(id), _) => format!("node {id} belongs to another inode"),
                    (_, Some(id)) => {
                        format!(
                            "node {id} is also in the tree of inode {}",
                            self.claimed.get(id).copied().unwrap_or_default()
                        )
                    }
                }
            }
            Ok(Err(msg)) => msg,
            Err(e) => e.to_string(),
        };
        // Salvage: readable leaves of the right kind, reached from the root
        // (whoever owns them) or owned by this inode and reached from nowhere.
        let mut found: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let mut visited = HashSet::new();
        self.leaves(t.root, kind, MAX_LEVEL, &mut visited, &mut found);
        let mut orphans: Vec<NodeId> = self
            .loaded
            .nodes
            .iter()
            .filter(|(id, (owner, o))| {
                *owner == ino
                    && !visited.contains(*id)
                    && !self.claimed.contains_key(*id)
                    && matches!(o, Object::Node(n) if n.tree == kind && n.level == 0)
            })
            .map(|(id, _)| *id)
            .collect();
        orphans.sort_unstable();
        for id in orphans {
            if let Some((_, Object::Node(Node { entries: Entries::Leaf(e), .. }))) = self.loaded.nodes.get(&id) {
                for (k, v) in e {
                    found.entry(*k).or_insert_with(|| v.clone());
                }
            }
        }
        self.note(
            Severity::Loses,
            ino,
            format!("{what} is damaged ({why})"),
            format!("rebuilt from the {} entries its readable nodes hold", found.len()),
        );
        (found.into_iter().collect(), false, Vec::new())
    }

    fn leaves(
        &self,
        id: NodeId,
        kind: TreeKind,
        depth: u16,
        visited: &mut HashSet<NodeId>,
        out: &mut BTreeMap<u64, Vec<u8>>,
    ) {
        if !visited.insert(id) {
            return;
        }
        let Some((_, Object::Node(n))) = self.loaded.nodes.get(&id) else { return };
        if n.tree != kind {
            return;
        }
        match &n.entries {
            Entries::Leaf(e) => {
                for (k, v) in e {
                    out.entry(*k).or_insert_with(|| v.clone());
                }
            }
            Entries::Internal(e) if depth > 0 => {
                for (_, child) in e {
                    self.leaves(*child, kind, depth - 1, visited, out);
                }
            }
            Entries::Internal(_) => {}
        }
    }

    /// A blob's bytes, if every block is readable, owned by `ino`, claimed
    /// by nobody else, and they add up to `len`.
    fn blob(&mut self, ino: InodeNo, nodes: &[NodeId], len: u32) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for id in nodes {
            match self.loaded.nodes.get(id) {
                Some((o, Object::Blob(b))) if *o == ino && !self.claimed.contains_key(id) => out.extend_from_slice(b),
                _ => return None,
            }
        }
        (out.len() == len as usize).then_some(out)
    }

    /// The plan for inode `ino`, whose record `rec` was read.
    pub(super) fn inode(&mut self, ino: InodeNo, rec: &InodeRecord) -> Option<Item> {
        let sb = self.log.superblock();
        let mut item = Item {
            rec: rec.clone(),
            was: rec.clone(),
            content: Content::Special,
            rewrite_body: false,
            xattrs: Vec::new(),
            rewrite_xattrs: false,
            body_nodes: Vec::new(),
            xattr_nodes: Vec::new(),
            clones: Vec::new(),
            rewrite_record: false,
        };
        if rec.group.0 >= sb.group_count {
            self.note(Severity::Safe, ino, format!("data group {} does not exist", rec.group.0), "set to group 0");
            item.rec.group = crate::types::GroupNo(0);
        }
        let kind = FileKind::from_mode(rec.mode)?;
        match kind {
            FileKind::Directory => self.directory(ino, rec, &mut item),
            FileKind::Regular => self.regular(ino, rec, &mut item),
            FileKind::Symlink => {
                let target = match &rec.body {
                    Body::Inline(t) if !t.is_empty() => Some(t.clone()),
                    Body::Blob { len, nodes } => {
                        let t = self.blob(ino, nodes, *len);
                        if t.is_some() {
                            item.body_nodes.extend(nodes.iter().copied());
                            for id in nodes {
                                self.claimed.insert(*id, ino);
                            }
                        }
                        t
                    }
                    _ => None,
                };
                let Some(t) = target else {
                    self.note(
                        Severity::Loses,
                        ino,
                        "symbolic link whose target cannot be read",
                        "the inode is cleared",
                    );
                    return None;
                };
                if t.len() as u64 != rec.size {
                    self.note(
                        Severity::Safe,
                        ino,
                        format!("symbolic link of size {} with a target of {} bytes", rec.size, t.len()),
                        "the size is set to the target's",
                    );
                    item.rec.size = t.len() as u64;
                }
                item.content = Content::Symlink(t);
            }
            FileKind::Fifo | FileKind::Socket | FileKind::CharDevice | FileKind::BlockDevice => {
                if rec.body != Body::Empty {
                    self.note(Severity::Safe, ino, "device, fifo or socket with a body", "the body is cleared");
                    item.rec.body = Body::Empty;
                }
                item.content = Content::Special;
            }
        }
        self.xattrs(ino, rec, &mut item);
        Some(item)
    }

    fn directory(&mut self, ino: InodeNo, rec: &InodeRecord, item: &mut Item) {
        let inline_max = self.log.superblock().inline_max as usize;
        let (raw, sound) = match &rec.body {
            Body::Empty => (Vec::new(), true),
            Body::Entries(e) => {
                let ok = !e.is_empty() && inline_entries_len(e) <= inline_max;
                if !ok {
                    self.note(
                        Severity::Safe,
                        ino,
                        "inline directory entries empty or beyond the inline limit",
                        "rewritten",
                    );
                }
                (e.clone(), ok)
            }
            Body::Tree(t) => {
                let (entries, sound, nodes) = self.tree(ino, t, TreeKind::Directory, "directory tree");
                if sound {
                    item.body_nodes.extend(nodes);
                    if entries.len() as u64 != t.count {
                        item.rec.body = Body::Tree(TreeRoot { root: t.root, count: entries.len() as u64 });
                    }
                }
                (entries, sound)
            }
            _ => {
                self.note(Severity::Loses, ino, "directory whose body is neither entries nor a tree", "emptied");
                (Vec::new(), false)
            }
        };
        let key = self.log.superblock().hash_key;
        let mut entries = Vec::new();
        let mut names = HashSet::new();
        let mut changed = false;
        for (pos, v) in raw {
            let mut r = Reader::new(&v);
            let (Ok(target), Ok(dtype)) = (r.u64(), r.u8()) else {
                self.note(Severity::Loses, ino, format!("malformed directory entry at {pos:#x}"), "removed");
                changed = true;
                continue;
            };
            let name = r.bytes(r.remaining()).unwrap_or_default().to_vec();
            let shown = String::from_utf8_lossy(&name).into_owned();
            if target == 0 || FileName::new(&name).is_err() {
                self.note(
                    Severity::Loses,
                    ino,
                    format!("directory entry {shown:?} with an invalid name or inode 0"),
                    "removed",
                );
                changed = true;
                continue;
            }
            if !names.insert(name.clone()) {
                self.note(
                    Severity::Loses,
                    ino,
                    format!("{shown:?} appears twice in the directory"),
                    "the second is removed",
                );
                changed = true;
                continue;
            }
            let base = hash_position(&key, &name);
            if !(base..base + COLLISION_SLOTS).contains(&pos) {
                self.note(Severity::Safe, ino, format!("{shown:?} sits at a position its hash does not give"), "moved");
                changed = true;
            }
            entries.push(Entry { name, ino: InodeNo(target), dtype });
        }
        item.content = Content::Dir(entries);
        item.rewrite_body = !sound || changed;
    }

    fn regular(&mut self, ino: InodeNo, rec: &InodeRecord, item: &mut Item) {
        let inline_max = u64::from(self.log.superblock().inline_max);
        let data_blocks = self.log.superblock().data_blocks;
        let list: Vec<Extent> = match &rec.body {
            Body::Inline(d) => {
                let mut d = d.clone();
                if d.len() as u64 != rec.size {
                    if rec.size <= inline_max {
                        // Bytes past the stored ones read as zeros: the file reads the same.
                        d.resize(rec.size as usize, 0);
                        self.note(
                            Severity::Safe,
                            ino,
                            "inline data and size disagree",
                            "the data is cut or padded to the size",
                        );
                    } else {
                        self.note(
                            Severity::Changes,
                            ino,
                            format!("inline file of size {} above the inline limit", rec.size),
                            format!("the size is set to its {} stored bytes", d.len()),
                        );
                        item.rec.size = d.len() as u64;
                    }
                    item.rewrite_body = true;
                }
                if d.len() as u64 > inline_max {
                    item.rewrite_body = true;
                }
                if rec.blocks != 0 {
                    item.rec.blocks = 0;
                    self.note(Severity::Safe, ino, format!("inline file says {} data blocks", rec.blocks), "set to 0");
                }
                item.content = Content::Inline(d);
                return;
            }
            Body::Empty => Vec::new(),
            Body::Extents(v) => v.clone(),
            Body::Tree(t) => {
                let (entries, sound, nodes) = self.tree(ino, t, TreeKind::Extents, "extent tree");
                if sound {
                    item.body_nodes.extend(nodes);
                    if entries.len() as u64 != t.count {
                        item.rec.body = Body::Tree(TreeRoot { root: t.root, count: entries.len() as u64 });
                    }
                } else {
                    item.rewrite_body = true;
                }
                let mut out = Vec::new();
                for (k, v) in entries {
                    let mut r = Reader::new(&v);
                    let e = (|| {
                        let physical = DataBlock(r.u64().ok()?);
                        let len = r.u32().ok()?;
                        let flags = r.u8().ok()?;
                        let ok = len > 0
                            && flags <= 1
                            && r.remaining() == 0
                            && k.checked_add(u64::from(len)).is_some()
                            && physical.0.checked_add(u64::from(len)).is_some();
                        ok.then_some(Extent { logical: k, physical, len, unwritten: flags == 1 })
                    })();
                    match e {
                        Some(e) => out.push(e),
                        None => {
                            self.note(Severity::Loses, ino, format!("malformed extent at file block {k}"), "removed");
                            item.rewrite_body = true;
                        }
                    }
                }
                out
            }
            Body::Blob { .. } | Body::Entries(_) => {
                self.note(Severity::Loses, ino, "regular file with a blob or directory body", "emptied");
                item.rewrite_body = true;
                item.rec.size = 0;
                Vec::new()
            }
        };
        let mut kept: Vec<Extent> = Vec::with_capacity(list.len());
        for e in list {
            if e.physical.0 == 0 || e.physical.0 + u64::from(e.len) > data_blocks {
                self.note(
                    Severity::Loses,
                    ino,
                    format!(
                        "extent at file block {} maps data blocks {}+{} outside the data device",
                        e.logical, e.physical.0, e.len
                    ),
                    "removed (a hole)",
                );
                item.rewrite_body = true;
                continue;
            }
            if kept.last().is_some_and(|p| p.logical_end() > e.logical) {
                self.note(
                    Severity::Loses,
                    ino,
                    format!("extents overlap at file block {}", e.logical),
                    "the second is removed",
                );
                item.rewrite_body = true;
                continue;
            }
            kept.push(e);
        }
        // A size above the maximum, or below written data, is set to where
        // the data ends (e2fsck: i_size follows the blocks).
        let written_end = kept.iter().filter(|e| !e.unwritten).map(Extent::logical_end).max().unwrap_or(0);
        if rec.size == MAX_FILE_SIZE && written_end * BLOCK_BYTES < MAX_FILE_SIZE {
            item.rec.size = written_end * BLOCK_BYTES;
        } else if written_end > rec.size.div_ceil(BLOCK_BYTES) && !self.log.is_orphan(ino) {
            self.note(
                Severity::Changes,
                ino,
                format!("written blocks lie beyond the end of the file (size {})", rec.size),
                format!("the size is set to {}", written_end * BLOCK_BYTES),
            );
            item.rec.size = written_end * BLOCK_BYTES;
        }
        item.content = Content::Extents(kept);
    }

    fn xattrs(&mut self, ino: InodeNo, rec: &InodeRecord, item: &mut Item) {
        let (raw, sound): (Pairs<Vec<u8>>, bool) = match &rec.xattrs {
            Xattrs::Inline(p) => (p.clone(), true),
            Xattrs::Tree(t) => {
                let (entries, mut sound, nodes) = self.tree(ino, t, TreeKind::Xattrs, "xattr tree");
                let mut pairs = Vec::new();
                let mut blob_nodes = Vec::new();
                for (k, v) in entries {
                    let mut r = Reader::new(&v);
                    let parsed = (|| {
                        let form = r.u8().ok()?;
                        let nl = usize::from(r.u8().ok()?);
                        let name = r.bytes(nl).ok()?.to_vec();
                        match form {
                            0 => Some((name, Ok(r.bytes(r.remaining()).ok()?.to_vec()))),
                            1 => {
                                let len = r.u32().ok()?;
                                let mut ids = Vec::new();
                                while r.remaining() >= 8 {
                                    ids.push(NodeId(r.u64().ok()?));
                                }
                                (r.remaining() == 0).then_some((name, Err((len, ids))))
                            }
                            _ => None,
                        }
                    })();
                    match parsed {
                        None => {
                            self.note(
                                Severity::Loses,
                                ino,
                                format!("malformed extended attribute at {k:#x}"),
                                "removed",
                            );
                            sound = false;
                        }
                        Some((name, Ok(value))) => pairs.push((name, value)),
                        Some((name, Err((len, ids)))) => match self.blob(ino, &ids, len) {
                            Some(value) => {
                                blob_nodes.extend(ids);
                                pairs.push((name, value));
                            }
                            None => {
                                self.note(
                                    Severity::Loses,
                                    ino,
                                    format!(
                                        "the value of extended attribute {:?} cannot be read",
                                        String::from_utf8_lossy(&name)
                                    ),
                                    "removed",
                                );
                                sound = false;
                            }
                        },
                    }
                }
                if sound {
                    for id in &blob_nodes {
                        self.claimed.insert(*id, ino);
                    }
                    item.xattr_nodes.extend(nodes);
                    item.xattr_nodes.extend(blob_nodes);
                }
                (pairs, sound)
            }
        };
        let mut seen = HashSet::new();
        let mut pairs = Vec::new();
        let mut changed = false;
        for (name, value) in raw {
            let shown = String::from_utf8_lossy(&name).into_owned();
            if name.is_empty() || name.len() > XATTR_NAME_MAX || !seen.insert(name.clone()) {
                self.note(
                    Severity::Loses,
                    ino,
                    format!("extended attribute {shown:?} is invalid or named twice"),
                    "removed",
                );
                changed = true;
                continue;
            }
            pairs.push((name, value));
        }
        item.xattrs = pairs;
        item.rewrite_xattrs = !sound || changed;
    }
}
