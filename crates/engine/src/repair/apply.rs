//! Writing a repair plan: first what the IFile derives (live bytes, the
//! nodes nothing keeps, cleared inodes, the bitmap), directly; then every
//! record and structure that changes, through the namespace's own
//! operations in ordinary commit groups; then a checkpoint. The log is
//! detached first: until that checkpoint, a crash leaves the volume as it
//! was before the repair.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::namespace::{NEW_LOST_FOUND, NsPlan};
use super::salvage::{Content, Entry, Item};
use crate::device::{self, BlockDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::format::descriptor::Change;
use crate::format::inode::{Body, Extent, InodeRecord, Xattrs};
use crate::format::name::FileName;
use crate::meta_log::Log;
use crate::meta_log::mount::OpenReport;
use crate::namespace::Fs;
use crate::namespace::inode::NewInode;
use crate::namespace::xattr::SetMode;
use crate::types::{BLOCK_SIZE, DataBlock, FileKind, InodeNo, NodeId};
use crate::volume::{Clock, MountOptions, Volume};

/// Entries or extents written per step (each step a bounded operation).
const BATCH: usize = 32;

/// Everything `apply` needs.
pub(super) struct Plan {
    pub items: BTreeMap<InodeNo, Item>,
    pub ns: NsPlan,
    /// Inodes whose record could not be read: their numbers are freed.
    pub lost: Vec<InodeNo>,
}

fn kind_of(dtype: u8) -> Result<FileKind> {
    FileKind::from_dirent_type(dtype).ok_or(Error::Invalid("directory entry of no known type"))
}

/// Writes the plan over `log` (opened on the staged devices).
///
/// # Errors
/// A device fails, or the engine meets a structure the plan kept and
/// cannot use (a bug of the plan: the caller reports it).
pub(super) fn apply(
    mut log: Log,
    report: OpenReport,
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    mut plan: Plan,
    clock: Clock,
) -> Result<()> {
    // What the IFile derives from the maps and the files, set right first:
    // every later step keeps it right by construction.
    log.recount_live_bytes();
    log.detach_head()?;
    let kept: HashSet<NodeId> = plan.items.values().flat_map(Item::kept_nodes).collect();
    for id in 1..log.ifile().nodes.len() as u64 {
        if log.ifile().node_address(NodeId(id)).0 != 0 && !kept.contains(&NodeId(id)) {
            log.free_object(NodeId(id));
        }
    }
    let mut clear: std::collections::BTreeSet<InodeNo> = plan.lost.iter().copied().collect();
    clear.extend(plan.ns.cleared.iter().copied());
    for ino in 1..log.ifile().inodes.len() as u64 {
        let ino = InodeNo(ino);
        if log.ifile().inode(ino).is_some_and(|e| e.in_use()) && !plan.items.contains_key(&ino) {
            clear.insert(ino);
        }
    }
    for ino in &clear {
        log.drop_inode_entry(*ino);
    }
    let used: Vec<(DataBlock, u32)> = plan
        .items
        .values()
        .filter_map(|i| match &i.content {
            Content::Extents(e) => Some(e.iter().map(|e| (e.physical, e.len))),
            _ => None,
        })
        .flatten()
        .collect();
    log.rebuild_bitmap(&used);

    let options = MountOptions { commit_interval: Duration::ZERO, ..MountOptions::default() };
    let vol = Volume::assemble(log, report, meta, data, options, None, clock)?;
    let inline_max = vol.with_fs(|fs| fs.config.inline_max) as usize;

    if plan.ns.new_root {
        let rec = plan.items.get(&InodeNo::ROOT).map(|i| i.rec.clone()).unwrap_or_default();
        vol.repair_step(|fs, now| {
            let group = fs.log.space_mut().bind_directory()?;
            let rec = InodeRecord { atime: now, mtime: now, ctime: now, crtime: now, group, ..rec.clone() };
            fs.log.create_inode_at(InodeNo::ROOT, rec);
            Ok(())
        })?;
    }

    let inos: Vec<InodeNo> = plan.items.keys().copied().collect();
    for ino in inos {
        let Some(item) = plan.items.get(&ino) else { continue };
        if ino == InodeNo::ROOT && plan.ns.new_root {
            continue;
        }
        let changed = item.rec != item.was || item.rewrite_body || item.rewrite_xattrs || item.rewrite_record;
        if changed {
            write_item(&vol, ino, item, inline_max)?;
        }
    }

    // Entries added to directories kept as they are, and a new lost+found.
    let mut lost_found = None;
    if let Some(entries) = plan.ns.new_lost_found.take() {
        let lf = vol.repair_step(|fs, now| {
            let new = NewInode { kind: FileKind::Directory, perm: 0o700, uid: 0, gid: 0, rdev: 0 };
            let lf = fs.new_inode(InodeNo::ROOT, new, now)?;
            let mut r = fs.inode_mut(lf)?;
            r.parent = InodeNo::ROOT;
            r.nlink = 2 + plan.ns.new_lost_found_subdirs;
            Ok(lf)
        })?;
        insert_entries(&vol, lf, &entries, lf)?;
        lost_found = Some(lf);
    }
    for (dir, entries) in &plan.ns.added {
        let rewritten = plan.items.get(dir).is_some_and(|i| i.rewrite_body);
        if rewritten && *dir != InodeNo::ROOT {
            continue;
        }
        let entries: Vec<Entry> = entries.iter().filter(|e| !rewritten || e.ino == NEW_LOST_FOUND).cloned().collect();
        insert_entries(&vol, *dir, &entries, lost_found.unwrap_or(NEW_LOST_FOUND))?;
    }
    // `..` of directories moved into a new lost+found, now that it has a number.
    if let Some(lf) = lost_found {
        for (ino, item) in &plan.items {
            if item.rec.parent == NEW_LOST_FOUND {
                vol.repair_step(|fs, _| {
                    fs.inode_mut(*ino)?.parent = lf;
                    Ok(())
                })?;
            }
        }
    }
    vol.finish_orphans()?;
    vol.close()
}

/// Writes one inode's changes: its record, then whatever of its body and
/// xattrs is rewritten.
fn write_item(vol: &Volume, ino: InodeNo, item: &Item, inline_max: usize) -> Result<()> {
    let mut rec = item.rec.clone();
    let mut late_inline = None;
    if item.rewrite_body {
        rec.body = match &item.content {
            Content::Inline(d) if d.len() <= inline_max => Body::Inline(d.clone()),
            Content::Inline(d) => {
                rec.size = 0;
                late_inline = Some(d.clone());
                Body::Empty
            }
            Content::Symlink(t) if t.len() <= inline_max => Body::Inline(t.clone()),
            Content::Dir(_) | Content::Extents(_) | Content::Symlink(_) | Content::Special => Body::Empty,
        };
    }
    if item.rewrite_xattrs {
        rec.xattrs = Xattrs::default();
    }
    vol.repair_step(|fs, _| {
        fs.log.replace_inode(rec.clone());
        Ok(())
    })?;
    if item.rewrite_body {
        match &item.content {
            Content::Dir(entries) => insert_entries(vol, ino, entries, NEW_LOST_FOUND)?,
            Content::Extents(kept) => {
                let mut all: Vec<Extent> = kept.clone();
                for c in &item.clones {
                    all.extend(clone_extent(vol, ino, c)?);
                }
                all.sort_by_key(|e| e.logical);
                for batch in all.chunks(BATCH) {
                    vol.repair_step(|fs, _| fs.replace_extents(ino, &[], batch.to_vec()))?;
                }
            }
            Content::Symlink(t) if t.len() > inline_max => {
                vol.repair_step(|fs, _| {
                    let nodes = fs.write_blob(ino, t);
                    fs.inode_mut(ino)?.body = Body::Blob { len: t.len() as u32, nodes };
                    Ok(())
                })?;
            }
            Content::Inline(_) | Content::Symlink(_) | Content::Special => {}
        }
        if let Some(d) = &late_inline {
            vol.repair_step(|fs, _| fs.write(ino, 0, d))?;
        }
    }
    if item.rewrite_xattrs {
        for (name, value) in &item.xattrs {
            vol.repair_step(|fs, _| fs.xattr_set(ino, name, value, SetMode::Any))?;
        }
    }
    Ok(())
}

/// Inserts `entries` into `dir`; an entry naming the new lost+found names `lost_found`.
fn insert_entries(vol: &Volume, dir: InodeNo, entries: &[Entry], lost_found: InodeNo) -> Result<()> {
    for batch in entries.chunks(BATCH) {
        vol.repair_step(|fs: &mut Fs, _| {
            for e in batch {
                let target = if e.ino == NEW_LOST_FOUND { lost_found } else { e.ino };
                if target == NEW_LOST_FOUND {
                    continue;
                }
                let name = FileName::new(&e.name)?;
                if fs.dir_lookup(dir, &e.name)?.is_some() {
                    // Only a name repair itself chose can be taken twice
                    // (lost+found in the root): never two entries of one name.
                    continue;
                }
                fs.dir_insert(dir, &name, target, kind_of(e.dtype)?)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// Copies the blocks of `c` (mapped by another file first) into newly
/// allocated blocks: the extents that map them for `ino`.
fn clone_extent(vol: &Volume, ino: InodeNo, c: &Extent) -> Result<Vec<Extent>> {
    let mut out = Vec::new();
    let mut done = 0u32;
    while done < c.len {
        let want = c.len - done;
        let piece = vol.repair_step(|fs, _| {
            fs.log.space_mut().reserve(u64::from(want))?;
            let group = fs.inode(ino)?.group;
            let goal = fs.log.space().group_start(group);
            let Some((at, n)) = fs.log.space_mut().allocate(goal, u64::from(want))? else {
                fs.log.space_mut().unreserve(u64::from(want));
                return Err(Error::NoSpace(DeviceRole::Data));
            };
            fs.log.space_mut().unreserve(u64::from(want - n));
            fs.log.record(Change::DataAlloc { start: at, len: n });
            if !c.unwritten {
                let from = c.physical.0 + u64::from(done);
                let bytes = device::read(fs.log.data_device().as_ref(), DeviceRole::Data, from, n as usize)?;
                debug_assert_eq!(bytes.len(), n as usize * BLOCK_SIZE);
                device::write(fs.log.data_device().as_ref(), DeviceRole::Data, at.0, &bytes)?;
                device::flush(fs.log.data_device().as_ref(), DeviceRole::Data)?;
            }
            Ok(Extent { logical: c.logical + u64::from(done), physical: at, len: n, unwritten: c.unwritten })
        })?;
        done += piece.len;
        out.push(piece);
    }
    Ok(out)
}
