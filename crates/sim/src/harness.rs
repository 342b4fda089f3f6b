//! Runs abstract operations against the engine and the model side by side,
//! and compares the two trees.
//!
//! Operations pick their targets with selectors that are resolved against
//! the model's current state, so that a random sequence keeps hitting
//! existing names (and shrinks to something readable).

use std::collections::HashMap;
use std::sync::Arc;

use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::{FileKind, InodeNo};
use dualfs_engine::volume::{Creds, FallocateMode, MkfsOptions, MountOptions, RenameFlags, SetAttr, SetMode};
use dualfs_engine::{Error, Volume};

use crate::model::{Id, Kind, Model, ROOT};
use crate::workload::{FIXED_NOW, fixed_clock};

/// The identity every harness volume is formatted with.
pub const IDENTITY_SEED: u64 = 0x5EED_0FD0_A1F5;

/// One operation, with selectors instead of paths.
#[derive(Clone, Debug)]
pub enum Op {
    /// Create a regular file.
    Create { dir: u32, name: u8 },
    /// Make a directory.
    Mkdir { dir: u32, name: u8 },
    /// Make a fifo.
    Mkfifo { dir: u32, name: u8 },
    /// Make a symlink whose target has `len` bytes.
    Symlink { dir: u32, name: u8, len: u16 },
    /// Write `len` bytes of pattern `seed` at `offset`.
    Write { file: u32, offset: u64, len: u32, seed: u8 },
    /// Set the size.
    Truncate { file: u32, size: u64 },
    /// Punch a hole.
    Punch { file: u32, offset: u64, len: u64 },
    /// Collapse a range: `blocks` blocks from block `at`, both bytes
    /// `unaligned` off (0: aligned).
    Collapse { file: u32, at: u16, blocks: u8, unaligned: u16 },
    /// Insert a range, as `Collapse` counts it.
    Insert { file: u32, at: u16, blocks: u8, unaligned: u16 },
    /// Unshare `blocks` blocks from block `at` (the size grows to its end).
    Unshare { file: u32, at: u16, blocks: u8 },
    /// Remove a non-directory name.
    Unlink { dir: u32, name: u8 },
    /// Remove a directory name.
    Rmdir { dir: u32, name: u8 },
    /// Rename; `flags`: 0 plain, 1 noreplace, 2 exchange.
    Rename { from: u32, name: u8, to: u32, new_name: u8, flags: u8 },
    /// Add a hard link.
    Link { target: u32, dir: u32, name: u8 },
    /// Set an xattr of `len` bytes.
    SetXattr { target: u32, name: u8, len: u16, seed: u8 },
    /// Remove an xattr.
    RemoveXattr { target: u32, name: u8 },
    /// Change permission bits.
    Chmod { target: u32, mode: u16 },
    /// Open a file and keep it open (it survives unlink).
    Hold { file: u32 },
    /// Close a held file.
    Release { which: u32 },
    /// Close the volume cleanly and open it again.
    Reopen,
    /// Commit, then drop the volume without closing (a crash after a sync), and open it again.
    CrashAfterCommit,
    /// Run the periodic work (commit, checkpoint).
    Tick,
    /// Take a snapshot named `s{name % 4}`; the model keeps a copy of its tree.
    Snapshot { name: u8 },
    /// Delete the snapshot named `s{name % 4}`.
    DeleteSnapshot { name: u8 },
    /// Mount the snapshot named `s{name % 4}` read-only beside the live
    /// volume and compare its tree with the copy the model kept.
    CheckSnapshot { name: u8 },
    /// Make `c{name % 2}` a writable clone of snapshot `s{source % 4}`; the
    /// model copies that snapshot's tree.
    Clone { source: u8, name: u8 },
    /// Make tree `c0`, `c1` or `main` (`name % 3`) the live one, held
    /// files closed first, as a mount does; the model keeps the outgoing
    /// tree and takes the incoming one.
    SwitchTree { name: u8 },
    /// Delete kept tree `c0`, `c1` or `main` (`name % 3`).
    DeleteTree { name: u8 },
}

fn snapshot_name(n: u8) -> String {
    format!("s{}", n % 4)
}

fn tree_name(n: u8) -> String {
    match n % 3 {
        2 => dualfs_engine::format::snapshot::DEFAULT_TREE.to_string(),
        k => format!("c{k}"),
    }
}

fn name(n: u8) -> Vec<u8> {
    format!("n{}", n % 12).into_bytes()
}

fn pattern(seed: u8, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| ((offset + i) as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// The engine under test and the model, side by side.
#[derive(Debug)]
pub struct Harness {
    meta: Arc<MemoryDevice>,
    data: Arc<MemoryDevice>,
    vol: Option<Volume>,
    /// The reference.
    pub model: Model,
    held: Vec<(Id, InodeNo)>,
    options: MountOptions,
    /// The model's tree when each snapshot was taken, by name.
    snapshots: std::collections::BTreeMap<String, Model>,
    /// The trees kept while another is live (clones, the tree once live).
    trees: std::collections::BTreeMap<String, Model>,
    /// The live tree's name.
    live: String,
}

fn errno(r: Result<(), Error>) -> Result<(), i32> {
    r.map_err(|e| e.errno())
}

impl Harness {
    /// A fresh volume of `meta_blocks` and `data_blocks`.
    ///
    /// # Panics
    /// If mkfs or mount fails.
    #[must_use]
    pub fn new(meta_blocks: u64, data_blocks: u64, options: MountOptions) -> Harness {
        Harness::with_inline_max(meta_blocks, data_blocks, options, 1024)
    }

    /// [`Harness::new`] with an inline limit for files and directories (a
    /// small one sends small directories into B-trees and back).
    ///
    /// # Panics
    /// If mkfs or mount fails.
    #[must_use]
    pub fn with_inline_max(meta_blocks: u64, data_blocks: u64, options: MountOptions, inline_max: u32) -> Harness {
        let meta = Arc::new(MemoryDevice::new(meta_blocks));
        let data = Arc::new(MemoryDevice::new(data_blocks));
        // A fixed identity (UUIDs, name-hash key) and clock: the same
        // operations build the same volume, so a failing case replays.
        let mkfs = MkfsOptions {
            segment_blocks: 128,
            group_blocks: 4096,
            inline_max,
            now: FIXED_NOW,
            identity_seed: Some(IDENTITY_SEED),
            ..MkfsOptions::default()
        };
        Volume::format(meta.clone(), data.clone(), &mkfs).expect("mkfs");
        let vol = Volume::open_with_clock(meta.clone(), data.clone(), options, fixed_clock()).expect("mount");
        Harness {
            meta,
            data,
            vol: Some(vol),
            model: Model::default(),
            held: Vec::new(),
            options,
            snapshots: std::collections::BTreeMap::new(),
            trees: std::collections::BTreeMap::new(),
            live: dualfs_engine::format::snapshot::DEFAULT_TREE.to_string(),
        }
    }

    /// The mounted volume.
    ///
    /// # Panics
    /// Never between operations.
    #[must_use]
    pub fn vol(&self) -> &Volume {
        self.vol.as_ref().expect("mounted")
    }

    /// The two devices.
    #[must_use]
    pub fn devices(&self) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
        (self.meta.clone(), self.data.clone())
    }

    fn resolve(&self, path: &[Vec<u8>]) -> InodeNo {
        let mut ino = InodeNo::ROOT;
        for c in path {
            ino = self.vol().lookup(ino, c).unwrap_or_else(|e| panic!("lookup of {:?} failed: {e}", show(path))).ino;
        }
        ino
    }

    fn pick(&self, sel: u32, pred: impl Fn(&Kind) -> bool) -> Option<(Vec<Vec<u8>>, Id, InodeNo)> {
        let all: Vec<_> = self.model.paths().into_iter().filter(|(_, id)| pred(&self.model.nodes[id].kind)).collect();
        if all.is_empty() {
            return None;
        }
        let (path, id) = all[sel as usize % all.len()].clone();
        let ino = self.resolve(&path);
        Some((path, id, ino))
    }

    fn dir(&self, sel: u32) -> (Id, InodeNo) {
        let (_, id, ino) = self.pick(sel, |k| matches!(k, Kind::Dir(_))).expect("the root is a directory");
        (id, ino)
    }

    /// Applies one operation to both sides.
    ///
    /// # Errors
    /// A description of the first disagreement.
    pub fn apply(&mut self, op: &Op) -> Result<(), String> {
        let held_ids: Vec<Id> = self.held.iter().map(|(i, _)| *i).collect();
        let held = move |id: Id| held_ids.contains(&id);
        let (got, want): (Result<(), i32>, Result<(), i32>) = match *op {
            Op::Create { dir, name: n } | Op::Mkdir { dir, name: n } | Op::Mkfifo { dir, name: n } => {
                let (d, di) = self.dir(dir);
                let nm = name(n);
                let (got, want) = match op {
                    Op::Create { .. } => (
                        self.vol().create(di, &nm, 0o644, Creds::ROOT).map(|a| a.ino),
                        self.model.create(d, &nm, 0o644),
                    ),
                    Op::Mkdir { .. } => {
                        (self.vol().mkdir(di, &nm, 0o755, Creds::ROOT).map(|a| a.ino), self.model.mkdir(d, &nm, 0o755))
                    }
                    _ => (
                        self.vol().mknod(di, &nm, FileKind::Fifo, 0o600, 0, Creds::ROOT).map(|a| a.ino),
                        self.model.mkfifo(d, &nm, 0o600),
                    ),
                };
                if let Ok(ino) = &got {
                    self.vol().forget(*ino, 1).map_err(|e| e.to_string())?;
                }
                (got.map(|_| ()).map_err(|e| e.errno()), want.map(|_| ()))
            }
            Op::Symlink { dir, name: n, len } => {
                let (d, di) = self.dir(dir);
                let target = vec![b't'; 1 + usize::from(len) % 4095];
                let got = self.vol().symlink(di, &name(n), &target, Creds::ROOT);
                if let Ok(a) = &got {
                    self.vol().forget(a.ino, 1).map_err(|e| e.to_string())?;
                }
                (got.map(|_| ()).map_err(|e| e.errno()), self.model.symlink(d, &name(n), &target).map(|_| ()))
            }
            Op::Write { file, offset, len, seed } => {
                let Some((_, id, ino)) = self.pick(file, |k| matches!(k, Kind::File(_))) else {
                    return Ok(());
                };
                let data = pattern(seed, offset, len as usize);
                let got = self.vol().write(ino, offset, &data).map(|_| ());
                self.model.write(id, offset, &data);
                (errno(got), Ok(()))
            }
            Op::Truncate { file, size } => {
                let Some((_, id, ino)) = self.pick(file, |k| matches!(k, Kind::File(_))) else {
                    return Ok(());
                };
                let got = self.vol().setattr(ino, &SetAttr { size: Some(size), ..SetAttr::default() }).map(|_| ());
                self.model.truncate(id, size);
                (errno(got), Ok(()))
            }
            Op::Punch { file, offset, len } => {
                let Some((_, id, ino)) = self.pick(file, |k| matches!(k, Kind::File(_))) else {
                    return Ok(());
                };
                let mode = FallocateMode::PUNCH_HOLE;
                let got = self.vol().fallocate(ino, offset, len.max(1), mode);
                self.model.punch(id, offset, len.max(1));
                (errno(got), Ok(()))
            }
            Op::Collapse { file, at, blocks, unaligned } | Op::Insert { file, at, blocks, unaligned } => {
                let Some((_, id, ino)) = self.pick(file, |k| matches!(k, Kind::File(_))) else {
                    return Ok(());
                };
                let (offset, len) = (u64::from(at) * 4096 + u64::from(unaligned), u64::from(blocks) * 4096);
                let collapse = matches!(op, Op::Collapse { .. });
                let mode = if collapse { FallocateMode::COLLAPSE_RANGE } else { FallocateMode::INSERT_RANGE };
                let got = self.vol().fallocate(ino, offset, len, mode);
                let want =
                    if collapse { self.model.collapse(id, offset, len) } else { self.model.insert(id, offset, len) };
                (errno(got), want)
            }
            Op::Unshare { file, at, blocks } => {
                let Some((_, id, ino)) = self.pick(file, |k| matches!(k, Kind::File(_))) else {
                    return Ok(());
                };
                let (offset, len) = (u64::from(at) * 4096, u64::from(blocks.max(1)) * 4096);
                let got = self.vol().fallocate(ino, offset, len, FallocateMode::UNSHARE_RANGE);
                self.model.unshare(id, offset, len);
                (errno(got), Ok(()))
            }
            Op::Unlink { dir, name: n } => {
                let (d, di) = self.dir(dir);
                (errno(self.vol().unlink(di, &name(n))), self.model.unlink(d, &name(n), &held))
            }
            Op::Rmdir { dir, name: n } => {
                let (d, di) = self.dir(dir);
                (errno(self.vol().rmdir(di, &name(n))), self.model.rmdir(d, &name(n), &held))
            }
            Op::Rename { from, name: n, to, new_name, flags } => {
                let (f, fi) = self.dir(from);
                let (t, ti) = self.dir(to);
                let rf = RenameFlags { noreplace: flags % 3 == 1, exchange: flags % 3 == 2, whiteout: None };
                let got = self.vol().rename(fi, &name(n), ti, &name(new_name), rf);
                let want = self.model.rename(f, &name(n), t, &name(new_name), rf.noreplace, rf.exchange, &held);
                (errno(got), want)
            }
            Op::Link { target, dir, name: n } => {
                let Some((_, id, ino)) = self.pick(target, |k| !matches!(k, Kind::Dir(_))) else {
                    return Ok(());
                };
                let (d, di) = self.dir(dir);
                let got = self.vol().link(ino, di, &name(n));
                if let Ok(a) = &got {
                    self.vol().forget(a.ino, 1).map_err(|e| e.to_string())?;
                }
                (got.map(|_| ()).map_err(|e| e.errno()), self.model.link(id, d, &name(n)))
            }
            Op::SetXattr { target, name: n, len, seed } => {
                let Some((_, id, ino)) = self.pick(target, |_| true) else {
                    return Ok(());
                };
                let key = format!("user.k{}", n % 6).into_bytes();
                let value = pattern(seed, 0, usize::from(len) % 5000);
                let got = self.vol().setxattr(ino, &key, &value, SetMode::Any);
                self.model.setxattr(id, &key, &value);
                (errno(got), Ok(()))
            }
            Op::RemoveXattr { target, name: n } => {
                let Some((_, id, ino)) = self.pick(target, |_| true) else {
                    return Ok(());
                };
                let key = format!("user.k{}", n % 6).into_bytes();
                (errno(self.vol().removexattr(ino, &key)), self.model.removexattr(id, &key))
            }
            Op::Chmod { target, mode } => {
                let Some((_, id, ino)) = self.pick(target, |k| !matches!(k, Kind::Symlink(_))) else {
                    return Ok(());
                };
                let mode = u32::from(mode) & 0o7777;
                let got = self.vol().setattr(ino, &SetAttr { mode: Some(mode), ..SetAttr::default() }).map(|_| ());
                self.model.chmod(id, mode);
                (errno(got), Ok(()))
            }
            Op::Hold { file } => {
                let Some((_, id, ino)) = self.pick(file, |k| matches!(k, Kind::File(_))) else {
                    return Ok(());
                };
                self.vol().open_file(ino).map_err(|e| e.to_string())?;
                self.held.push((id, ino));
                return Ok(());
            }
            Op::Release { which } => {
                if self.held.is_empty() {
                    return Ok(());
                }
                let (id, ino) = self.held.remove(which as usize % self.held.len());
                self.vol().release_file(ino).map_err(|e| e.to_string())?;
                if !self.held.iter().any(|(i, _)| *i == id) {
                    self.model.release(id);
                }
                return Ok(());
            }
            Op::Reopen => {
                self.release_all()?;
                let v = self.vol.take().expect("mounted");
                v.close().map_err(|e| format!("close: {e}"))?;
                self.vol = Some(
                    Volume::open_with_clock(self.meta.clone(), self.data.clone(), self.options, fixed_clock())
                        .map_err(|e| format!("reopen: {e}"))?,
                );
                return Ok(());
            }
            Op::CrashAfterCommit => {
                self.release_all()?;
                let v = self.vol.take().expect("mounted");
                v.commit().map_err(|e| format!("commit: {e}"))?;
                drop(v);
                self.vol = Some(
                    Volume::open_with_clock(self.meta.clone(), self.data.clone(), self.options, fixed_clock())
                        .map_err(|e| format!("recovery: {e}"))?,
                );
                return Ok(());
            }
            Op::Tick => {
                self.vol().tick().map_err(|e| format!("tick: {e}"))?;
                return Ok(());
            }
            Op::Snapshot { name } => {
                let name = snapshot_name(name);
                let got = self.vol().snapshot_create(&name).map(|_| ());
                let want = if self.snapshots.contains_key(&name) { Err(()) } else { Ok(()) };
                if want.is_ok() && got.is_ok() {
                    self.snapshots.insert(name, self.model.clone());
                }
                (got.map_err(|_| 1), want.map_err(|()| 1))
            }
            Op::DeleteSnapshot { name } => {
                let name = snapshot_name(name);
                let got = self.vol().snapshot_delete(&name);
                let want = self.snapshots.remove(&name).map(|_| ()).ok_or(());
                (got.map_err(|_| 1), want.map_err(|()| 1))
            }
            Op::CheckSnapshot { name } => {
                let name = snapshot_name(name);
                let Some(model) = self.snapshots.get(&name) else {
                    return Ok(());
                };
                let snap = Volume::open_snapshot(self.meta.clone(), self.data.clone(), &name, self.options)
                    .map_err(|e| format!("mount of snapshot {name}: {e}"))?;
                compare_tree(&snap, model, &[]).map_err(|e| format!("snapshot {name}: {e}"))?;
                snap.close().map_err(|e| format!("closing snapshot {name}: {e}"))?;
                return Ok(());
            }
            Op::Clone { source, name } => {
                let (source, name) = (snapshot_name(source), format!("c{}", name % 2));
                let got = self.vol().clone_create(&source, &name).map(|_| ());
                let taken = self.trees.contains_key(&name) || self.live == name;
                let want = match self.snapshots.get(&source) {
                    Some(m) if !taken => Ok(m.clone()),
                    _ => Err(()),
                };
                if let (Ok(()), Ok(m)) = (&got, &want) {
                    self.trees.insert(name, m.clone());
                }
                (got.map_err(|_| 1), want.map(|_| ()).map_err(|()| 1))
            }
            Op::SwitchTree { name } => {
                let name = tree_name(name);
                // As a mount: nothing holds a file of the tree that goes
                // (every other reference was let go after its operation).
                self.release_all()?;
                let got = self.vol().switch_tree(&name);
                let want = if name == self.live || self.trees.contains_key(&name) { Ok(()) } else { Err(()) };
                if got.is_ok()
                    && name != self.live
                    && let Some(incoming) = self.trees.remove(&name)
                {
                    let outgoing = std::mem::replace(&mut self.model, incoming);
                    self.trees.insert(std::mem::replace(&mut self.live, name), outgoing);
                }
                (got.map_err(|_| 1), want.map_err(|()| 1))
            }
            Op::DeleteTree { name } => {
                let name = tree_name(name);
                let got = self.vol().snapshot_delete(&name);
                let want = self.trees.remove(&name).map(|_| ()).ok_or(());
                (got.map_err(|_| 1), want.map_err(|()| 1))
            }
        };
        if got != want {
            return Err(format!("{op:?}: engine says {got:?}, model says {want:?}"));
        }
        Ok(())
    }

    fn release_all(&mut self) -> Result<(), String> {
        for (id, ino) in std::mem::take(&mut self.held) {
            self.vol().release_file(ino).map_err(|e| e.to_string())?;
            self.model.release(id);
        }
        Ok(())
    }

    /// Compares the engine's tree with the model's.
    ///
    /// # Errors
    /// A description of the first difference.
    pub fn compare(&self) -> Result<(), String> {
        compare_tree(self.vol(), &self.model, &self.held)
    }

    /// Closes the volume and runs fsck.
    ///
    /// # Errors
    /// Close fails or fsck finds problems.
    pub fn finish(mut self) -> Result<(), String> {
        self.release_all()?;
        let v = self.vol.take().expect("mounted");
        v.close().map_err(|e| format!("close: {e}"))?;
        let report =
            dualfs_engine::check::check(self.meta.clone(), self.data.clone()).map_err(|e| format!("fsck: {e}"))?;
        if !report.is_clean() {
            let list: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
            return Err(format!("fsck found:\n{}", list.join("\n")));
        }
        Ok(())
    }
}

/// Compares the tree of `v` with `model`'s; `held` are files open through
/// `v` (unlinked ones included), whose contents are compared too.
fn compare_tree(v: &Volume, model: &Model, held: &[(Id, InodeNo)]) -> Result<(), String> {
    let mut ids: HashMap<Id, InodeNo> = HashMap::new();
    let mut stack = vec![(Vec::<Vec<u8>>::new(), ROOT, InodeNo::ROOT)];
    while let Some((path, id, ino)) = stack.pop() {
        let node = &model.nodes[&id];
        if let Some(prev) = ids.insert(id, ino)
            && prev != ino
        {
            return Err(format!("{}: one model node, two engine inodes", show(&path)));
        }
        let a = v.getattr(ino).map_err(|e| format!("{}: getattr: {e}", show(&path)))?;
        if a.perm != node.perm || a.nlink != node.nlink {
            return Err(format!(
                "{}: perm/nlink {:o}/{} vs model {:o}/{}",
                show(&path),
                a.perm,
                a.nlink,
                node.perm,
                node.nlink
            ));
        }
        let names = v.listxattr(ino).map_err(|e| e.to_string())?;
        let mut got_x = std::collections::BTreeMap::new();
        for n in names {
            let val = v.getxattr(ino, &n).map_err(|e| e.to_string())?;
            got_x.insert(n, val);
        }
        if got_x != node.xattrs {
            return Err(format!("{}: xattrs differ", show(&path)));
        }
        match &node.kind {
            Kind::File(d) => {
                if a.kind != FileKind::Regular || a.size != d.len() as u64 {
                    return Err(format!(
                        "{}: {:?} of size {} vs model file of {}",
                        show(&path),
                        a.kind,
                        a.size,
                        d.len()
                    ));
                }
                let got = v.read(ino, 0, d.len() + 10).map_err(|e| format!("{}: read: {e}", show(&path)))?;
                if &got != d {
                    let at = got.iter().zip(d.iter()).position(|(a, b)| a != b).unwrap_or(got.len().min(d.len()));
                    return Err(format!("{}: contents differ at byte {at}", show(&path)));
                }
            }
            Kind::Symlink(t) => {
                if v.readlink(ino).map_err(|e| e.to_string())? != *t {
                    return Err(format!("{}: symlink target differs", show(&path)));
                }
            }
            Kind::Fifo => {
                if a.kind != FileKind::Fifo {
                    return Err(format!("{}: not a fifo", show(&path)));
                }
            }
            Kind::Whiteout => {
                if a.kind != FileKind::CharDevice || a.rdev != 0 {
                    return Err(format!("{}: not a whiteout", show(&path)));
                }
            }
            Kind::Dir(entries) => {
                let mut listed = Vec::new();
                v.readdir(ino, 0, &mut |l| {
                    listed.push(l);
                    true
                })
                .map_err(|e| e.to_string())?;
                let names: Vec<Vec<u8>> = listed.iter().skip(2).map(|l| l.name.clone()).collect();
                let mut sorted = names.clone();
                sorted.sort();
                sorted.dedup();
                let want: Vec<Vec<u8>> = entries.keys().cloned().collect();
                if sorted != want || names.len() != want.len() {
                    return Err(format!("{}: lists {:?}, model {:?}", show(&path), show_all(&names), show_all(&want)));
                }
                for l in listed.iter().skip(2) {
                    let child = entries[&l.name];
                    let mut p = path.clone();
                    p.push(l.name.clone());
                    stack.push((p, child, l.ino));
                }
            }
        }
    }
    for (id, ino) in held {
        if let Kind::File(d) = &model.nodes[id].kind {
            let got = v.read(*ino, 0, d.len() + 10).map_err(|e| format!("held inode {ino}: {e}"))?;
            if &got != d {
                return Err(format!("held inode {ino}: contents differ"));
            }
        }
    }
    Ok(())
}

fn show(path: &[Vec<u8>]) -> String {
    format!("/{}", path.iter().map(|c| String::from_utf8_lossy(c).into_owned()).collect::<Vec<_>>().join("/"))
}

fn show_all(names: &[Vec<u8>]) -> Vec<String> {
    names.iter().map(|n| String::from_utf8_lossy(n).into_owned()).collect()
}
