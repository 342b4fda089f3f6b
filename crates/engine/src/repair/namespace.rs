//! The namespace as repair leaves it: a root directory, every entry naming
//! an inode in use with its type, every directory named once with `..`
//! saying where, every inode in use reached (what no directory reaches any
//! more goes into `lost+found`, as `#INODE`), link counts equal to names,
//! and no data block claimed by two files (a later claimant gets a copy).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use super::salvage::{Content, Entry, Item};
use super::{Repair, Severity};
use crate::format::inode::{Body, Extent, InodeRecord, Xattrs};
use crate::types::{FileKind, InodeNo};

/// Stands for a `lost+found` directory repair will make, until it has a number.
pub(super) const NEW_LOST_FOUND: InodeNo = InodeNo(u64::MAX);

/// The name `lost+found` has in the root.
pub(super) const LOST_FOUND: &[u8] = b"lost+found";

/// What the namespace needs beyond the items' own changes.
#[derive(Debug, Default)]
pub(super) struct NsPlan {
    /// The root directory must be made anew.
    pub new_root: bool,
    /// Entries a new `lost+found` gets (None: no new one is needed).
    pub new_lost_found: Option<Vec<Entry>>,
    /// Directories a new `lost+found` holds (for its link count).
    pub new_lost_found_subdirs: u32,
    /// Entries to add to directories kept as they are (their body is not
    /// rewritten): `lost+found` and the root.
    pub added: BTreeMap<InodeNo, Vec<Entry>>,
    /// Inodes cleared because nothing names them and they hold nothing.
    pub cleared: Vec<InodeNo>,
}

fn kind(item: &Item) -> Option<FileKind> {
    FileKind::from_mode(item.rec.mode)
}

fn is_dir(item: &Item) -> bool {
    kind(item) == Some(FileKind::Directory)
}

fn dir_entries(item: &mut Item) -> Vec<Entry> {
    match &mut item.content {
        Content::Dir(e) => std::mem::take(e),
        _ => Vec::new(),
    }
}

/// Whether an inode holds nothing worth a name in `lost+found`.
fn holds_nothing(item: &Item) -> bool {
    let empty = match &item.content {
        Content::Extents(e) => e.is_empty() && item.rec.size == 0,
        Content::Inline(d) => d.is_empty(),
        Content::Dir(e) => e.is_empty(),
        Content::Symlink(_) => false,
        Content::Special => true,
    };
    empty && item.xattrs.is_empty()
}

struct Walk<'a> {
    items: &'a mut BTreeMap<InodeNo, Item>,
    repairs: &'a mut Vec<Repair>,
    reached: HashSet<InodeNo>,
    names: HashMap<InodeNo, u32>,
    subdirs: HashMap<InodeNo, u32>,
    parent: HashMap<InodeNo, InodeNo>,
    plan: NsPlan,
    /// The `lost+found` in use, once one is chosen or planned.
    lost_found: Option<InodeNo>,
    /// For a directory several directories name: the one its `..` names,
    /// whose entry is kept (as e2fsck trusts `..` in pass 3).
    preferred: HashMap<InodeNo, InodeNo>,
}

impl Walk<'_> {
    fn note(&mut self, severity: Severity, ino: InodeNo, problem: String, action: &str) {
        self.repairs.push(Repair { severity, ino: Some(ino), problem, action: action.into() });
    }

    /// Checks the entries of every directory reached from `start`,
    /// breadth first: each names an inode in use, with its type; a
    /// directory is named once.
    fn visit_from(&mut self, start: InodeNo) {
        let mut queue = VecDeque::from([start]);
        while let Some(dir) = queue.pop_front() {
            let Some(item) = self.items.get_mut(&dir) else { continue };
            let entries = dir_entries(item);
            let mut kept = Vec::with_capacity(entries.len());
            let mut changed = false;
            for mut e in entries {
                let shown = String::from_utf8_lossy(&e.name).into_owned();
                let Some(target) = self.items.get(&e.ino) else {
                    self.note(
                        Severity::Loses,
                        dir,
                        format!("entry {shown:?} names inode {}, which is not in use or was cleared", e.ino),
                        "the entry is removed",
                    );
                    changed = true;
                    continue;
                };
                let tkind = kind(target);
                let want = tkind.map_or(0, FileKind::dirent_type);
                if e.dtype != want {
                    self.note(
                        Severity::Safe,
                        dir,
                        format!("entry {shown:?} has type {} but inode {} is {}", e.dtype, e.ino, kind_name(tkind)),
                        "the type is set right",
                    );
                    e.dtype = want;
                    changed = true;
                }
                if tkind == Some(FileKind::Directory) {
                    let elsewhere = self.preferred.get(&e.ino).is_some_and(|p| *p != dir);
                    if e.ino == InodeNo::ROOT || elsewhere || !self.reached.insert(e.ino) {
                        self.note(
                            Severity::Changes,
                            dir,
                            format!("entry {shown:?} is a second name of directory {}", e.ino),
                            "the entry is removed",
                        );
                        changed = true;
                        continue;
                    }
                    self.parent.insert(e.ino, dir);
                    *self.subdirs.entry(dir).or_default() += 1;
                    queue.push_back(e.ino);
                } else {
                    self.reached.insert(e.ino);
                    *self.names.entry(e.ino).or_default() += 1;
                }
                kept.push(e);
            }
            if let Some(item) = self.items.get_mut(&dir) {
                item.content = Content::Dir(kept);
                if changed {
                    item.rewrite_body = true;
                }
            }
        }
    }

    /// The `lost+found` to attach to: the root's, or a new one.
    fn lost_found(&mut self) -> InodeNo {
        if let Some(lf) = self.lost_found {
            return lf;
        }
        let existing = match self.items.get(&InodeNo::ROOT).map(|r| &r.content) {
            Some(Content::Dir(e)) => e.iter().find(|e| e.name == LOST_FOUND).map(|e| e.ino),
            _ => None,
        };
        let lf = match existing {
            Some(ino) if self.items.get(&ino).is_some_and(is_dir) && self.parent.get(&ino) == Some(&InodeNo::ROOT) => {
                ino
            }
            _ => {
                self.repairs.push(Repair {
                    severity: Severity::Changes,
                    ino: None,
                    problem: "inodes in use that no directory names need a lost+found directory".into(),
                    action: "/lost+found is made".into(),
                });
                self.plan.new_lost_found = Some(Vec::new());
                *self.subdirs.entry(InodeNo::ROOT).or_default() += 1;
                NEW_LOST_FOUND
            }
        };
        self.lost_found = Some(lf);
        lf
    }

    /// A name `#INODE` in `lost+found` not taken yet.
    fn free_name(&self, lf: InodeNo, ino: InodeNo) -> Vec<u8> {
        let taken: HashSet<&[u8]> = match (lf, self.items.get(&lf)) {
            (NEW_LOST_FOUND, _) => self.plan.new_lost_found.iter().flatten().map(|e| e.name.as_slice()).collect(),
            (_, Some(Item { content: Content::Dir(e), .. })) => e.iter().map(|e| e.name.as_slice()).collect(),
            _ => HashSet::new(),
        };
        let base = format!("#{}", ino.0);
        let mut name = base.clone().into_bytes();
        let mut n = 1;
        while taken.contains(name.as_slice()) {
            name = format!("{base}.{n}").into_bytes();
            n += 1;
        }
        name
    }

    /// Gives `ino` a name in `lost+found`.
    fn attach(&mut self, ino: InodeNo) {
        let lf = self.lost_found();
        let Some(item) = self.items.get(&ino) else { return };
        let dtype = kind(item).map_or(0, FileKind::dirent_type);
        let dir = is_dir(item);
        let e = Entry { name: self.free_name(lf, ino), ino, dtype };
        self.note(
            Severity::Changes,
            ino,
            format!("in use (links {}) but no directory reached from the root names it", item.rec.nlink),
            &format!("moved to /lost+found/{}", String::from_utf8_lossy(&e.name)),
        );
        if lf == NEW_LOST_FOUND {
            if let Some(v) = self.plan.new_lost_found.as_mut() {
                v.push(e.clone());
            }
        } else if let Some(Item { content: Content::Dir(v), .. }) = self.items.get_mut(&lf) {
            v.push(e.clone());
            self.plan.added.entry(lf).or_default().push(e.clone());
        }
        self.reached.insert(ino);
        if dir {
            self.parent.insert(ino, lf);
            if lf == NEW_LOST_FOUND {
                self.plan.new_lost_found_subdirs += 1;
            } else {
                *self.subdirs.entry(lf).or_default() += 1;
            }
            self.visit_from(ino);
        } else {
            *self.names.entry(ino).or_default() += 1;
        }
    }
}

/// Plans the namespace: root, reachability, `lost+found`, link counts and
/// `..`; changes the items accordingly.
pub(super) fn plan(
    items: &mut BTreeMap<InodeNo, Item>,
    orphans: &HashSet<InodeNo>,
    repairs: &mut Vec<Repair>,
) -> NsPlan {
    let mut w = Walk {
        items,
        repairs,
        reached: HashSet::new(),
        names: HashMap::new(),
        subdirs: HashMap::new(),
        parent: HashMap::new(),
        plan: NsPlan::default(),
        lost_found: None,
        preferred: HashMap::new(),
    };
    w.preferred = preferred_parents(w.items);
    match w.items.get(&InodeNo::ROOT) {
        Some(r) if is_dir(r) => {}
        other => {
            let why = if other.is_some() { "is not a directory" } else { "is missing or cannot be read" };
            if other.is_some() {
                w.items.remove(&InodeNo::ROOT);
            }
            w.note(Severity::Loses, InodeNo::ROOT, format!("the root directory {why}"), "a new root directory is made");
            w.plan.new_root = true;
            w.items.insert(InodeNo::ROOT, new_dir_item(InodeNo::ROOT));
        }
    }
    w.reached.insert(InodeNo::ROOT);
    w.parent.insert(InodeNo::ROOT, InodeNo::ROOT);
    w.visit_from(InodeNo::ROOT);

    // Directories no one reaches: the top of each cut-off tree goes to
    // lost+found, the rest follows it.
    let unreached_dirs: Vec<InodeNo> =
        w.items.iter().filter(|(i, it)| is_dir(it) && !w.reached.contains(i)).map(|(i, _)| *i).collect();
    for d in unreached_dirs {
        if w.reached.contains(&d) {
            continue;
        }
        let mut top = d;
        let mut seen = BTreeSet::from([d]);
        loop {
            let p = w.items.get(&top).map_or(InodeNo(0), |i| i.rec.parent);
            let up = w.items.get(&p).is_some_and(is_dir) && !w.reached.contains(&p) && seen.insert(p);
            if !up {
                break;
            }
            top = p;
        }
        w.attach(top);
    }
    let unreached: Vec<InodeNo> = w.items.keys().filter(|i| !w.reached.contains(i)).copied().collect();
    for ino in unreached {
        let Some(item) = w.items.get(&ino) else { continue };
        if item.rec.nlink == 0 && orphans.contains(&ino) {
            // Unlinked while open: mount's recovery frees it.
            continue;
        }
        if item.rec.nlink == 0 && holds_nothing(item) {
            w.note(
                Severity::Safe,
                ino,
                "in use with no links, no name and nothing in it, and not on the orphan list".into(),
                "the inode is cleared",
            );
            w.plan.cleared.push(ino);
            w.items.remove(&ino);
            continue;
        }
        w.attach(ino);
    }

    // Link counts and `..`.
    let inos: Vec<InodeNo> = w.items.keys().copied().collect();
    for ino in inos {
        let want_parent = w.parent.get(&ino).copied();
        let (dir, nlink, parent) = match w.items.get(&ino) {
            Some(it) => (is_dir(it), it.rec.nlink, it.rec.parent),
            None => continue,
        };
        let want = if dir {
            if w.reached.contains(&ino) { 2 + w.subdirs.get(&ino).copied().unwrap_or(0) } else { 0 }
        } else {
            w.names.get(&ino).copied().unwrap_or(0)
        };
        if nlink != want {
            w.note(Severity::Safe, ino, format!("link count {nlink} but {want} expected"), "set right");
        }
        let new_parent = if dir { want_parent.unwrap_or(parent) } else { parent };
        if dir && new_parent != parent && new_parent != NEW_LOST_FOUND {
            w.note(
                Severity::Safe,
                ino,
                format!("'..' says {parent} but the directory is in {new_parent}"),
                "set right",
            );
        }
        if let Some(it) = w.items.get_mut(&ino) {
            it.rec.nlink = want;
            it.rec.parent = new_parent;
        }
    }
    // The root gains entries (a new lost+found) without being rewritten.
    if w.plan.new_lost_found.is_some() {
        let lf = Entry { name: LOST_FOUND.to_vec(), ino: NEW_LOST_FOUND, dtype: FileKind::Directory.dirent_type() };
        w.plan.added.entry(InodeNo::ROOT).or_default().push(lf);
    }
    w.plan
}

/// Directories named by more than one directory, each with the one its
/// `..` names, when that one is among them.
fn preferred_parents(items: &BTreeMap<InodeNo, Item>) -> HashMap<InodeNo, InodeNo> {
    let mut named_by: HashMap<InodeNo, Vec<InodeNo>> = HashMap::new();
    for (dir, item) in items {
        if let Content::Dir(entries) = &item.content {
            for e in entries {
                if items.get(&e.ino).is_some_and(is_dir) {
                    named_by.entry(e.ino).or_default().push(*dir);
                }
            }
        }
    }
    named_by
        .into_iter()
        .filter(|(_, dirs)| dirs.len() > 1)
        .filter_map(|(t, dirs)| {
            let p = items.get(&t)?.rec.parent;
            dirs.contains(&p).then_some((t, p))
        })
        .collect()
}

/// A kind in words.
pub(super) fn kind_name(k: Option<FileKind>) -> &'static str {
    match k {
        Some(FileKind::Regular) => "a regular file",
        Some(FileKind::Directory) => "a directory",
        Some(FileKind::Symlink) => "a symbolic link",
        Some(FileKind::Fifo) => "a fifo",
        Some(FileKind::Socket) => "a socket",
        Some(FileKind::CharDevice) => "a character device",
        Some(FileKind::BlockDevice) => "a block device",
        None => "of no known kind",
    }
}

/// The plan of an empty directory made by repair (a new root).
pub(super) fn new_dir_item(ino: InodeNo) -> Item {
    let rec = InodeRecord {
        ino,
        mode: libc::S_IFDIR | 0o755,
        nlink: 2,
        parent: ino,
        body: Body::Empty,
        xattrs: Xattrs::default(),
        ..InodeRecord::default()
    };
    Item {
        rec: rec.clone(),
        was: rec,
        content: Content::Dir(Vec::new()),
        rewrite_body: false,
        xattrs: Vec::new(),
        rewrite_xattrs: false,
        body_nodes: Vec::new(),
        xattr_nodes: Vec::new(),
        clones: Vec::new(),
        rewrite_record: false,
    }
}

/// No data block belongs to two files: in inode order, the first file to
/// map a block keeps it; a later one gets its own copy (`clones`), as
/// e2fsck's pass 1B does. Sets each file's block count.
pub(super) fn resolve_claims(items: &mut BTreeMap<InodeNo, Item>, repairs: &mut Vec<Repair>) {
    // Claimed ranges, start -> end, disjoint.
    let mut claimed: BTreeMap<u64, u64> = BTreeMap::new();
    let overlap = |claimed: &BTreeMap<u64, u64>, s: u64, e: u64| -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        // The range starting at or before s, then every range starting inside.
        if let Some((_, &b)) = claimed.range(..=s).next_back()
            && b > s
        {
            out.push((s, b.min(e)));
        }
        for (&a, &b) in claimed.range(s + 1..e) {
            out.push((a, b.min(e)));
        }
        out
    };
    for (ino, item) in items.iter_mut() {
        let Content::Extents(list) = &item.content else { continue };
        let mut keep: Vec<Extent> = Vec::new();
        let mut clones: Vec<Extent> = Vec::new();
        for e in list {
            let (s, end) = (e.physical.0, e.physical.0 + u64::from(e.len));
            let taken = overlap(&claimed, s, end);
            if taken.is_empty() {
                claimed.insert(s, end);
                keep.push(*e);
                continue;
            }
            // Cut the extent at the claimed ranges: free parts stay, taken parts are copied.
            let mut at = s;
            let mut pieces: Vec<(u64, u64, bool)> = Vec::new();
            for (a, b) in taken {
                if a > at {
                    pieces.push((at, a, false));
                }
                pieces.push((a.max(at), b, true));
                at = b;
            }
            if at < end {
                pieces.push((at, end, false));
            }
            for (a, b, copy) in pieces {
                if b <= a {
                    continue;
                }
                let piece = Extent {
                    logical: e.logical + (a - s),
                    physical: crate::types::DataBlock(a),
                    len: (b - a) as u32,
                    unwritten: e.unwritten,
                };
                if copy {
                    clones.push(piece);
                } else {
                    // Disjoint from every claimed range: the map stays a set of disjoint ranges.
                    claimed.insert(a, b);
                    keep.push(piece);
                }
            }
        }
        if !clones.is_empty() {
            let blocks: u64 = clones.iter().map(|c| u64::from(c.len)).sum();
            repairs.push(Repair {
                severity: Severity::Changes,
                ino: Some(*ino),
                problem: format!("{blocks} data blocks it maps belong to another file too"),
                action: "they are copied into blocks of its own".into(),
            });
            item.rewrite_body = true;
        }
        keep.sort_by_key(|e| e.logical);
        item.content = Content::Extents(keep);
        item.clones = clones;
        let total: u64 = match &item.content {
            Content::Extents(k) => k.iter().chain(&item.clones).map(|e| u64::from(e.len)).sum(),
            _ => 0,
        };
        if item.rec.blocks != total && matches!(item.rec.body, Body::Empty | Body::Extents(_) | Body::Tree(_)) {
            repairs.push(Repair {
                severity: Severity::Safe,
                ino: Some(*ino),
                problem: format!("says {} data blocks, its extents map {total}", item.rec.blocks),
                action: "set right".into(),
            });
            item.rec.blocks = total;
        }
    }
}
