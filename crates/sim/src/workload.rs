//! Workloads for the crash explorer: steps over named paths, run against
//! the engine and the reference model together, with the model's state kept
//! after every step.
//!
//! Every byte a workload writes is *tagged*: its value is a hash of the step
//! that wrote it and its offset in the file ([`tag`]), so a byte that shows
//! up where no step put it (stale data of a freed block, another file's
//! data, the poison of a block never written) does not match any state the
//! model went through.

use std::collections::HashMap;
use std::sync::Arc;

use dualfs_engine::format::inode::{FLAG_APPEND, FLAG_DIRSYNC, FLAG_IMMUTABLE, FLAG_SYNC};
use dualfs_engine::types::{InodeNo, Timestamp};
use dualfs_engine::volume::{CleanReport, CleanRequest, Creds, FallocateMode, Policy, SetAttr, SetMode};
use dualfs_engine::{Error, Volume};

use crate::model::{Id, Kind, Model, ROOT};
use crate::record::{Mark, Recorder};

mod step;
pub use step::Step;

/// A snapshot or kept tree made or deleted by a step (a switch of the
/// live tree makes the outgoing one and deletes the incoming one).
#[derive(Clone, Debug)]
pub struct SnapshotEvent {
    /// The step.
    pub step: usize,
    /// The snapshot's name.
    pub name: String,
    /// The tree it keeps (None: the step deleted it).
    pub tree: Option<crate::tree::Tree>,
    /// A writable tree (a clone, or a tree once live), not a snapshot.
    pub writable: bool,
}

/// A named list of steps.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Stable name: what a replay string names.
    pub name: String,
    /// The steps, run in order.
    pub steps: Vec<Step>,
    /// How many times the usual number of crash states to draw from it.
    pub scale: u32,
}

/// The tagged byte step `step` writes at file offset `offset`.
#[must_use]
pub fn tag(step: u64, offset: u64) -> u8 {
    let mut z = step.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ offset.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    z ^= z >> 29;
    z = z.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (z >> 56) as u8
}

/// `len` tagged bytes of step `step` from `offset`.
#[must_use]
pub fn tagged(step: u64, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| tag(step, offset + i)).collect()
}

/// The time of every test volume: fixed, so that runs are byte-identical.
pub const FIXED_NOW: Timestamp = Timestamp { sec: 1_700_000_000, nsec: 0 };

/// The clock of every test volume: [`FIXED_NOW`], for stamps and intervals.
#[must_use]
pub fn fixed_clock() -> dualfs_engine::volume::Clock {
    Arc::new(|| FIXED_NOW)
}

/// A file the engine held for replacement: truncated to zero at step
/// `from`, closed (or otherwise released) at step `until`. In between, a
/// crash must show its old contents (`namespace::replace`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldSpan {
    /// The file.
    pub id: Id,
    /// The step that truncated it.
    pub from: usize,
    /// The step that closed it (`usize::MAX`: never).
    pub until: usize,
    /// Its contents before the truncation.
    pub old: Vec<u8>,
}

/// A length below which a file may not be cut (by a delayed tail) in
/// states from step `from` on: what a rename over another file, or the
/// close that ends a replacement, made whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Floor {
    /// The file.
    pub id: Id,
    /// From the state after this step.
    pub from: usize,
    /// Its length then.
    pub len: usize,
}

/// Runs steps against a volume and the model together.
pub struct Runner<'a> {
    vol: &'a Volume,
    /// The reference.
    pub model: Model,
    /// The model after each step: `states[0]` before the first.
    pub states: Vec<Model>,
    /// Contents a file may show while step `n` is under way, beyond those of
    /// the states: a truncate that cuts a block zeroes the rest of it in
    /// place, an in-place data write like any other, not atomic with the
    /// size change (the same holds for ext4's ordered mode).
    pub partials: Vec<Vec<(Id, Vec<u8>)>>,
    pending_partial: Vec<(Id, Vec<u8>)>,
    handles: HashMap<u8, (Id, InodeNo)>,
    rec: Option<Arc<Recorder>>,
    /// Added to step numbers in tags, so setup and workload bytes differ.
    tag_base: u64,
    /// What the workload's clean steps did, so that a test can tell that
    /// they moved live data.
    pub cleaned: CleanReport,
    /// Files the engine held for replacement, and when they were let go.
    pub holds: Vec<HoldSpan>,
    /// Lengths files may not be cut below.
    pub floors: Vec<Floor>,
    /// File fsyncs: (step, file).
    pub fsyncs: Vec<(usize, Id)>,
    /// `order=strict`: an fsync promises every step before it.
    pub strict: bool,
    /// Snapshots made and deleted, in step order.
    pub snapshots: Vec<SnapshotEvent>,
    /// The trees snapshots and kept trees hold, by name.
    pub kept: HashMap<String, Model>,
    /// The live tree's name.
    pub live_tree: String,
    /// Steps that made another tree the live one: (step, its name).
    pub switches: Vec<(usize, String)>,
}

/// What a step promised once it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Promise {
    /// Nothing.
    None,
    /// Every step so far.
    All,
    /// This file as it is now.
    File(Id),
}

impl std::fmt::Debug for Runner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner").field("steps", &(self.states.len() - 1)).finish_non_exhaustive()
    }
}

const BLOCK: u64 = dualfs_engine::types::BLOCK_BYTES;

fn split(path: &str) -> Vec<&[u8]> {
    path.split('/').filter(|c| !c.is_empty()).map(str::as_bytes).collect()
}

fn errno<T>(r: Result<T, Error>) -> Result<(), i32> {
    r.map(|_| ()).map_err(|e| e.errno())
}

impl<'a> Runner<'a> {
    /// A runner over `vol`, whose contents `model` describes. With `rec`,
    /// step starts and durability promises are marked in the recording.
    #[must_use]
    pub fn new(vol: &'a Volume, model: Model, rec: Option<Arc<Recorder>>, tag_base: u64) -> Runner<'a> {
        Runner {
            vol,
            states: vec![model.clone()],
            partials: vec![Vec::new()],
            pending_partial: Vec::new(),
            model,
            handles: HashMap::new(),
            rec,
            tag_base,
            cleaned: CleanReport::default(),
            holds: Vec::new(),
            floors: Vec::new(),
            fsyncs: Vec::new(),
            strict: false,
            snapshots: Vec::new(),
            kept: HashMap::new(),
            live_tree: dualfs_engine::format::snapshot::DEFAULT_TREE.to_string(),
            switches: Vec::new(),
        }
    }

    fn mark(&self, m: Mark) {
        if let Some(r) = &self.rec {
            r.mark(m);
        }
    }

    /// Resolves `path` in the model: (parent, last name, what it names).
    fn model_path(&self, path: &str) -> Option<(Id, Vec<u8>, Option<Id>)> {
        let parts = split(path);
        let (last, dirs) = parts.split_last()?;
        let mut dir = ROOT;
        for c in dirs {
            let child = *self.model.entries(dir).get(*c)?;
            if !matches!(self.model.nodes[&child].kind, Kind::Dir(_)) {
                return None;
            }
            dir = child;
        }
        Some((dir, last.to_vec(), self.model.entries(dir).get(*last).copied()))
    }

    /// Resolves `path` in the engine (the whole path must exist).
    fn engine_path(&self, path: &str) -> Result<InodeNo, String> {
        let mut ino = InodeNo::ROOT;
        for c in split(path) {
            ino = self.vol.lookup(ino, c).map_err(|e| format!("engine lookup of {path}: {e}"))?.ino;
        }
        Ok(ino)
    }

    fn parent_ino(&self, path: &str) -> Result<InodeNo, String> {
        let parts = split(path);
        let mut ino = InodeNo::ROOT;
        for c in &parts[..parts.len().saturating_sub(1)] {
            ino = self.vol.lookup(ino, c).map_err(|e| format!("engine lookup of {path}: {e}"))?.ino;
        }
        Ok(ino)
    }

    fn is_file(&self, id: Id) -> bool {
        matches!(self.model.nodes[&id].kind, Kind::File(_))
    }

    fn held(&self) -> impl Fn(Id) -> bool + use<> {
        let ids: Vec<Id> = self.handles.values().map(|(i, _)| *i).collect();
        move |id| ids.contains(&id)
    }

    /// Runs step `n` (1-based) of a workload.
    ///
    /// # Errors
    /// The engine and the model disagree, or the engine fails where the
    /// model cannot (I/O, corruption).
    pub fn run(&mut self, n: usize, step: &Step) -> Result<(), String> {
        self.mark(Mark::StepStart(n));
        let closes = self.closes(step);
        let replaced = match step {
            Step::Rename { from, to } => match (self.model_path(from), self.model_path(to)) {
                (Some((_, _, Some(s))), Some((_, _, Some(d)))) if s != d && self.is_file(s) && self.is_file(d) => {
                    Some(s)
                }
                _ => None,
            },
            _ => None,
        };
        let promise = self.apply(n, step).map_err(|e| format!("step {n} ({step:?}): {e}"))?;
        if self.vol.quotas_on() {
            let wrong = self.vol.verify_quota_usage().map_err(|e| format!("step {n}: {e}"))?;
            if !wrong.is_empty() {
                return Err(format!("step {n} ({step:?}): Q1 broken: {}", wrong.join("; ")));
            }
        }
        let len_now = |r: &Self, id: Id| match r.model.nodes.get(&id).map(|n| &n.kind) {
            Some(Kind::File(d)) => d.len(),
            _ => 0,
        };
        match promise {
            Promise::None => {}
            Promise::All => self.mark(Mark::Durable(n)),
            Promise::File(id) => {
                self.mark(Mark::Synced(n));
                self.fsyncs.push((n, id));
                // Whatever a later commit leaves for later, never this much.
                self.floors.push(Floor { id, from: n, len: len_now(self, id) });
            }
        }
        self.states.push(self.model.clone());
        self.partials.push(std::mem::take(&mut self.pending_partial));
        // A rename over another file commits with the new file's data.
        if let Some(s) = replaced
            && self
                .model_path(match step {
                    Step::Rename { to, .. } => to,
                    _ => unreachable!(),
                })
                .and_then(|(_, _, id)| id)
                == Some(s)
        {
            self.floors.push(Floor { id: s, from: n, len: len_now(self, s) });
        }
        for h in self.holds.iter_mut().filter(|h| h.until == usize::MAX) {
            if closes.as_ref().is_none_or(|ids| ids.contains(&h.id)) {
                h.until = n;
            }
        }
        let ended: Vec<Id> = self.holds.iter().filter(|h| h.until == n).map(|h| h.id).collect();
        for id in ended {
            let len = len_now(self, id);
            self.floors.push(Floor { id, from: n, len });
        }
        if let Step::Truncate { path, size: 0 } = step
            && let Some((_, _, Some(id))) = self.model_path(path)
            && !self.holds.iter().any(|h| h.id == id && h.until == usize::MAX)
            && self.vol.held_for_replacement(self.engine_path(path)?)
        {
            let old = match self.states[n - 1].nodes.get(&id).map(|n| &n.kind) {
                Some(Kind::File(d)) => d.clone(),
                _ => Vec::new(),
            };
            self.holds.push(HoldSpan { id, from: n, until: usize::MAX, old });
        }
        Ok(())
    }

    /// The files step `step` closes or releases from a replacement hold
    /// (`None`: every file, a durability point).
    fn closes(&self, step: &Step) -> Option<Vec<Id>> {
        let at = |p: &str| self.model_path(p).and_then(|(_, _, id)| id);
        let ids = match step {
            Step::Sync
            | Step::QuotaOn
            | Step::RemountRo
            | Step::SnapshotCreate(_)
            | Step::SnapshotDelete(_)
            | Step::CloneCreate { .. }
            | Step::SwitchTree(_)
            | Step::EnterTree(_) => return None,
            Step::Fsync(p) | Step::Fdatasync(p) => match at(p) {
                Some(id) if self.is_file(id) => vec![Some(id)],
                _ => return None,
            },
            Step::FsyncOpen(h) => vec![self.handles.get(h).map(|(id, _)| *id)],
            Step::Write { path, .. } | Step::SetXattr { path, .. } | Step::Unlink(path) => vec![at(path)],
            Step::Rename { from, to } | Step::RenameWhiteout { from, to } | Step::Link { from, to } => {
                vec![at(from), at(to)]
            }
            Step::Close(h) | Step::LinkOpen { h, .. } => vec![self.handles.get(h).map(|(id, _)| *id)],
            _ => Vec::new(),
        };
        Some(ids.into_iter().flatten().collect())
    }

    /// What a file fsync of `id` promises in this mode.
    fn file_promise(&self, id: Id) -> Promise {
        if self.strict { Promise::All } else { Promise::File(id) }
    }

    /// Whether `step` changes names in a directory with the dirsync or
    /// sync flag: the engine then commits before it returns.
    fn dirsync(&self, step: &Step) -> bool {
        let synced = |p: &str| {
            let parts = split(p);
            let dir =
                parts[..parts.len().saturating_sub(1)].iter().map(|c| String::from_utf8_lossy(c)).collect::<Vec<_>>();
            let id =
                if dir.is_empty() { Some(ROOT) } else { self.model_path(&dir.join("/")).and_then(|(_, _, id)| id) };
            id.and_then(|id| self.model.nodes.get(&id)).is_some_and(|n| n.flags & (FLAG_DIRSYNC | FLAG_SYNC) != 0)
        };
        match step {
            Step::Mkdir(p) | Step::Create(p) | Step::Symlink { path: p, .. } | Step::Unlink(p) | Step::Rmdir(p) => {
                synced(p)
            }
            Step::Rename { from, to } => synced(from) || synced(to),
            Step::Link { to, .. } => synced(to),
            _ => false,
        }
    }

    /// Applies one step; says what it promised.
    fn apply(&mut self, n: usize, step: &Step) -> Result<Promise, String> {
        let stamp = self.tag_base + n as u64;
        let vol = self.vol;
        let dirsync = self.dirsync(step);
        let (got, want): (Result<(), i32>, Result<(), i32>) = match step {
            Step::Mkdir(p) | Step::Create(p) | Step::Symlink { path: p, .. } => {
                let Some((dir, name, _)) = self.model_path(p) else { return Ok(Promise::None) };
                let di = self.parent_ino(p)?;
                let (got, want) = match step {
                    Step::Mkdir(_) => (vol.mkdir(di, &name, 0o755, Creds::ROOT), self.model.mkdir(dir, &name, 0o755)),
                    Step::Create(_) => {
                        (vol.create(di, &name, 0o644, Creds::ROOT), self.model.create(dir, &name, 0o644))
                    }
                    Step::Symlink { target, .. } => (
                        vol.symlink(di, &name, target.as_bytes(), Creds::ROOT),
                        self.model.symlink(dir, &name, target.as_bytes()),
                    ),
                    _ => unreachable!(),
                };
                if let Ok(a) = &got {
                    vol.forget(a.ino, 1).map_err(|e| e.to_string())?;
                }
                (errno(got), want.map(|_| ()))
            }
            Step::Write { path, offset, len } => {
                let Some((_, _, Some(id))) = self.model_path(path) else { return Ok(Promise::None) };
                if !self.is_file(id) {
                    return Ok(Promise::None);
                }
                let ino = self.engine_path(path)?;
                let data = tagged(stamp, *offset, *len as usize);
                let (flags, size) = match &self.model.nodes[&id] {
                    crate::model::Node { flags, kind: Kind::File(d), .. } => (*flags, d.len() as u64),
                    _ => (0, 0),
                };
                // Immutable refuses every write, append-only one below the
                // end (its tagged bytes are never the ones there).
                let refused = flags & FLAG_IMMUTABLE != 0 || (flags & FLAG_APPEND != 0 && *offset < size && *len > 0);
                if !refused {
                    self.model.write(id, *offset, &data);
                }
                let got = errno(vol.write(ino, *offset, &data));
                // A write by path opens, writes and closes.
                vol.file_closed(ino);
                let want = if refused { Err(libc::EPERM) } else { Ok(()) };
                if got != want {
                    return Err(format!("write: engine says {got:?}, model says {want:?}"));
                }
                // A sync file's write is durable when it returns.
                return Ok(if flags & FLAG_SYNC != 0 && !refused { self.file_promise(id) } else { Promise::None });
            }
            Step::WriteOpen { h, offset, len } => {
                let Some(&(id, ino)) = self.handles.get(h) else { return Ok(Promise::None) };
                let data = tagged(stamp, *offset, *len as usize);
                self.model.write(id, *offset, &data);
                (errno(vol.write(ino, *offset, &data)), Ok(()))
            }
            Step::Truncate { path, size } => {
                let Some((_, _, Some(id))) = self.model_path(path) else { return Ok(Promise::None) };
                if !self.is_file(id) {
                    return Ok(Promise::None);
                }
                let ino = self.engine_path(path)?;
                if let Kind::File(d) = &self.model.nodes[&id].kind
                    && (*size as usize) < d.len()
                    && !size.is_multiple_of(BLOCK)
                {
                    let mut cut = d.clone();
                    let end = (size.next_multiple_of(BLOCK) as usize).min(d.len());
                    cut[*size as usize..end].fill(0);
                    self.pending_partial.push((id, cut));
                }
                self.model.truncate(id, *size);
                (errno(vol.setattr(ino, &SetAttr { size: Some(*size), ..SetAttr::default() })), Ok(()))
            }
            Step::Fallocate { path, size } => {
                let Some((_, _, Some(id))) = self.model_path(path) else { return Ok(Promise::None) };
                if !self.is_file(id) {
                    return Ok(Promise::None);
                }
                let ino = self.engine_path(path)?;
                if let Kind::File(d) = &self.model.nodes[&id].kind
                    && (*size as usize) > d.len()
                {
                    self.model.truncate(id, *size);
                }
                (errno(vol.fallocate(ino, 0, *size, FallocateMode::default())), Ok(()))
            }
            Step::Shift { path, offset, len, collapse } => {
                let Some((_, _, Some(id))) = self.model_path(path) else { return Ok(Promise::None) };
                if !self.is_file(id) {
                    return Ok(Promise::None);
                }
                let ino = self.engine_path(path)?;
                let (mode, want) = if *collapse {
                    (FallocateMode::COLLAPSE_RANGE, self.model.collapse(id, *offset, *len))
                } else {
                    (FallocateMode::INSERT_RANGE, self.model.insert(id, *offset, *len))
                };
                (errno(vol.fallocate(ino, *offset, *len, mode)), want)
            }
            Step::Unshare { path, offset, len } => {
                let Some((_, _, Some(id))) = self.model_path(path) else { return Ok(Promise::None) };
                if !self.is_file(id) {
                    return Ok(Promise::None);
                }
                let ino = self.engine_path(path)?;
                let mode = FallocateMode { keep_size: true, ..FallocateMode::UNSHARE_RANGE };
                (errno(vol.fallocate(ino, *offset, *len, mode)), Ok(()))
            }
            Step::Unlink(p) | Step::Rmdir(p) => {
                let Some((dir, name, _)) = self.model_path(p) else { return Ok(Promise::None) };
                let di = self.parent_ino(p)?;
                let held = self.held();
                if matches!(step, Step::Unlink(_)) {
                    (errno(vol.unlink(di, &name)), self.model.unlink(dir, &name, &held))
                } else {
                    (errno(vol.rmdir(di, &name)), self.model.rmdir(dir, &name, &held))
                }
            }
            Step::Rename { from, to } => {
                let (Some((fd, fname, _)), Some((td, tname, _))) = (self.model_path(from), self.model_path(to)) else {
                    return Ok(Promise::None);
                };
                let (fi, ti) = (self.parent_ino(from)?, self.parent_ino(to)?);
                let held = self.held();
                let got = vol.rename(fi, &fname, ti, &tname, dualfs_engine::volume::RenameFlags::default());
                (errno(got), self.model.rename(fd, &fname, td, &tname, false, false, &held))
            }
            Step::RenameWhiteout { from, to } => {
                let (Some((fd, fname, _)), Some((td, tname, _))) = (self.model_path(from), self.model_path(to)) else {
                    return Ok(Promise::None);
                };
                let (fi, ti) = (self.parent_ino(from)?, self.parent_ino(to)?);
                let held = self.held();
                let flags = dualfs_engine::volume::RenameFlags { whiteout: Some((0, 0)), ..Default::default() };
                let got = vol.rename(fi, &fname, ti, &tname, flags);
                (errno(got), self.model.rename_whiteout(fd, &fname, td, &tname, &held))
            }
            Step::Link { from, to } => {
                let (Some((_, _, Some(id))), Some((td, tname, _))) = (self.model_path(from), self.model_path(to))
                else {
                    return Ok(Promise::None);
                };
                let ino = self.engine_path(from)?;
                let ti = self.parent_ino(to)?;
                let got = vol.link(ino, ti, &tname);
                if let Ok(a) = &got {
                    vol.forget(a.ino, 1).map_err(|e| e.to_string())?;
                }
                (errno(got), self.model.link(id, td, &tname))
            }
            Step::SetXattr { path, len } => {
                let Some((_, _, Some(id))) = self.model_path(path) else { return Ok(Promise::None) };
                let ino = self.engine_path(path)?;
                let value = tagged(stamp, 0, usize::from(*len));
                self.model.setxattr(id, b"user.k", &value);
                (errno(vol.setxattr(ino, b"user.k", &value, SetMode::Any)), Ok(()))
            }
            Step::Fsync(p) | Step::Fdatasync(p) => {
                let Some((_, _, Some(id))) = self.model_path(p) else { return Ok(Promise::None) };
                let ino = self.engine_path(p)?;
                if matches!(step, Step::Fdatasync(_)) {
                    vol.fdatasync(ino).map_err(|e| format!("fdatasync: {e}"))?;
                } else {
                    vol.fsync(ino).map_err(|e| format!("fsync: {e}"))?;
                }
                return Ok(if self.is_file(id) { self.file_promise(id) } else { Promise::All });
            }
            Step::FsyncOpen(h) => {
                let Some(&(id, ino)) = self.handles.get(h) else { return Ok(Promise::None) };
                vol.fsync(ino).map_err(|e| format!("fsync: {e}"))?;
                return Ok(self.file_promise(id));
            }
            Step::Sync => {
                vol.sync().map_err(|e| format!("sync: {e}"))?;
                return Ok(Promise::All);
            }
            Step::SnapshotCreate(name) => {
                vol.snapshot_create(name).map_err(|e| format!("snapshot create: {e}"))?;
                let tree = crate::tree::Tree::of_model(&self.model);
                self.snapshots.push(SnapshotEvent { step: n, name: name.clone(), tree: Some(tree), writable: false });
                self.kept.insert(name.clone(), self.model.clone());
                return Ok(Promise::All);
            }
            Step::SnapshotDelete(name) => {
                vol.snapshot_delete(name).map_err(|e| format!("snapshot delete: {e}"))?;
                self.snapshots.push(SnapshotEvent { step: n, name: name.clone(), tree: None, writable: false });
                self.kept.remove(name);
                return Ok(Promise::All);
            }
            Step::CloneCreate { source, name } => {
                vol.clone_create(source, name).map_err(|e| format!("clone: {e}"))?;
                let model = self.kept.get(source).cloned().ok_or_else(|| format!("no model of {source}"))?;
                let tree = crate::tree::Tree::of_model(&model);
                self.snapshots.push(SnapshotEvent { step: n, name: name.clone(), tree: Some(tree), writable: true });
                self.kept.insert(name.clone(), model);
                return Ok(Promise::All);
            }
            Step::SwitchTree(name) | Step::EnterTree(name) => {
                if matches!(step, Step::EnterTree(_)) {
                    // The tree stays entered until another is: only one
                    // thread runs the steps.
                    drop(vol.enter_tree(name).map_err(|e| format!("enter {name}: {e}"))?);
                    if *name == self.live_tree {
                        return Ok(Promise::None);
                    }
                } else {
                    vol.switch_tree(name).map_err(|e| format!("switch to {name}: {e}"))?;
                }
                let incoming = self.kept.remove(name).ok_or_else(|| format!("no model of {name}"))?;
                let outgoing = std::mem::replace(&mut self.model, incoming);
                let tree = crate::tree::Tree::of_model(&outgoing);
                let old = std::mem::replace(&mut self.live_tree, name.clone());
                self.snapshots.push(SnapshotEvent { step: n, name: old.clone(), tree: Some(tree), writable: true });
                self.snapshots.push(SnapshotEvent { step: n, name: name.clone(), tree: None, writable: true });
                self.kept.insert(old, outgoing);
                self.switches.push((n, name.clone()));
                return Ok(Promise::All);
            }
            Step::Tick => {
                vol.tick().map_err(|e| format!("tick: {e}"))?;
                return Ok(Promise::None);
            }
            Step::SetFlags { path, flags } => {
                let Some((_, _, Some(id))) = self.model_path(path) else { return Ok(Promise::None) };
                let ino = self.engine_path(path)?;
                vol.set_flags(ino, *flags, None).map_err(|e| format!("set flags: {e}"))?;
                if let Some(node) = self.model.nodes.get_mut(&id) {
                    node.flags = *flags;
                }
                // Made sync, the inode is durable with its new flags.
                return Ok(match (flags & FLAG_SYNC != 0, self.is_file(id)) {
                    (false, _) => Promise::None,
                    (true, true) => self.file_promise(id),
                    (true, false) => Promise::All,
                });
            }
            Step::RemountRo => {
                vol.set_read_only(true).map_err(|e| format!("remount ro: {e}"))?;
                // A change while read-only is refused and leaves no trace.
                match vol.mkdir(InodeNo::ROOT, b"refused", 0o755, Creds::ROOT) {
                    Err(Error::ReadOnly(_)) => {}
                    other => return Err(format!("mkdir on a read-only volume: {other:?}")),
                }
                return Ok(Promise::All);
            }
            Step::RemountRw => {
                vol.set_read_only(false).map_err(|e| format!("remount rw: {e}"))?;
                return Ok(Promise::None);
            }
            Step::Clean { segments } => {
                let req = CleanRequest {
                    max_segments: usize::from(*segments),
                    policy: Policy::Greedy,
                    max_utilization: 1.0,
                    free_now: true,
                };
                let r = vol.clean(req, &mut |_, _| {}).map_err(|e| format!("clean: {e}"))?;
                self.cleaned.add(&r);
                // The clean commits and checkpoints, but it promises nothing:
                // the durable marks around it make the oracle strict.
                return Ok(Promise::None);
            }
            Step::QuotaOn => {
                vol.enable_quotas().map_err(|e| format!("quota on: {e}"))?;
                return Ok(Promise::All);
            }
            Step::Chown { path, uid } => {
                if self.model_path(path).and_then(|(_, _, id)| id).is_none() {
                    return Ok(Promise::None);
                }
                let ino = self.engine_path(path)?;
                let set = dualfs_engine::volume::SetAttr { uid: Some(*uid), ..Default::default() };
                vol.setattr(ino, &set).map_err(|e| format!("chown: {e}"))?;
                return Ok(Promise::None);
            }
            Step::Trim => {
                vol.trim(dualfs_engine::volume::TrimRange::ALL).map_err(|e| format!("trim: {e}"))?;
                // It commits and checkpoints, but promises nothing, as a clean.
                return Ok(Promise::None);
            }
            Step::Resize { meta, data } => {
                let req = dualfs_engine::volume::ResizeRequest {
                    meta_blocks: (*meta > 0).then_some(*meta),
                    data_blocks: (*data > 0).then_some(*data),
                };
                vol.resize(req).map_err(|e| format!("resize: {e}"))?;
                // Like a clean: it checkpoints, but promises nothing.
                return Ok(Promise::None);
            }
            Step::Open { path, h } => {
                let Some((_, _, Some(id))) = self.model_path(path) else { return Ok(Promise::None) };
                if !self.is_file(id) || self.handles.contains_key(h) {
                    return Ok(Promise::None);
                }
                let ino = self.engine_path(path)?;
                vol.open_file(ino).map_err(|e| format!("open: {e}"))?;
                self.handles.insert(*h, (id, ino));
                return Ok(Promise::None);
            }
            Step::Tmpfile { dir, h } => {
                let Some((_, _, Some(d))) = self.model_path(dir) else { return Ok(Promise::None) };
                if self.is_file(d) || self.handles.contains_key(h) {
                    return Ok(Promise::None);
                }
                let di = self.engine_path(dir)?;
                let a = vol.tmpfile(di, 0o644, Creds::ROOT).map_err(|e| format!("tmpfile: {e}"))?;
                // Held as an open file is (its lookup reference stays).
                vol.open_file(a.ino).map_err(|e| format!("open: {e}"))?;
                vol.forget(a.ino, 1).map_err(|e| e.to_string())?;
                let id = self.model.create_unnamed(0o644);
                self.handles.insert(*h, (id, a.ino));
                return Ok(Promise::None);
            }
            Step::LinkOpen { h, to } => {
                let Some(&(id, ino)) = self.handles.get(h) else { return Ok(Promise::None) };
                let Some((td, tname, _)) = self.model_path(to) else { return Ok(Promise::None) };
                let ti = self.parent_ino(to)?;
                let got = vol.link(ino, ti, &tname);
                if let Ok(a) = &got {
                    vol.forget(a.ino, 1).map_err(|e| e.to_string())?;
                }
                (errno(got), self.model.link(id, td, &tname))
            }
            Step::Close(h) => {
                let Some((id, ino)) = self.handles.remove(h) else { return Ok(Promise::None) };
                vol.release_file(ino).map_err(|e| format!("close: {e}"))?;
                if !self.handles.values().any(|(i, _)| *i == id) {
                    self.model.release(id);
                }
                return Ok(Promise::None);
            }
        };
        if got != want {
            return Err(format!("engine says {got:?}, model says {want:?}"));
        }
        Ok(if dirsync && got.is_ok() { Promise::All } else { Promise::None })
    }

    /// Closes every handle still open (engine and model).
    ///
    /// # Errors
    /// The engine fails to free an unlinked file.
    pub fn close_all(&mut self) -> Result<(), String> {
        let mut hs: Vec<u8> = self.handles.keys().copied().collect();
        hs.sort_unstable();
        for h in hs {
            self.apply(0, &Step::Close(h))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_differ_between_steps_and_offsets() {
        let a = tagged(1, 0, 4096);
        let b = tagged(2, 0, 4096);
        let c = tagged(1, 4096, 4096);
        assert!(a.iter().zip(&b).filter(|(x, y)| x == y).count() < 64);
        assert!(a.iter().zip(&c).filter(|(x, y)| x == y).count() < 64);
        assert_eq!(tagged(1, 100, 10), a[100..110].to_vec());
    }
}
