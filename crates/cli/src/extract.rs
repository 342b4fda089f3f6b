//! `dualfs cat` and `dualfs get`: files out of an unmounted volume, even a
//! damaged one (debugfs's `cat` and `rdump`), without the kernel.
//!
//! The volume is opened read-only from its newest usable checkpoint. What
//! cannot be read (a corrupt inode block, directory node or extent map, a
//! data block the device refuses) is skipped, reported on standard error,
//! and the rest is copied: a file's unreadable blocks come out as zeros,
//! an unreadable directory as what could be listed of it. When the whole
//! volume is copied and something was unreadable, every file the walk
//! could not reach (its directory was damaged) is copied to
//! `lost+found/#INODE`, as e2fsck does. That is the first thing a user
//! with a broken volume needs.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use dualfs_engine::Volume;
use dualfs_engine::format::inode::flag_letters;
use dualfs_engine::types::{BLOCK_BYTES, FileKind, InodeNo, Timestamp};
use dualfs_engine::volume::{Attr, MountOptions};

use crate::args::{CatArgs, GetArgs};
use crate::devices::{Access, named, open_pair};
use crate::exit::Exit;
use crate::inspect::resolve;
use crate::words::count;

/// Exit status when something was skipped (as fsck's "problems left").
const EXIT_INCOMPLETE: i32 = 4;
/// Bytes read per engine call.
const CHUNK: usize = 1 << 20;
/// Deepest directory nesting followed: a corrupt volume cannot make the
/// walk run on (nor a loop, which the visited set also stops).
const MAX_DEPTH: usize = 4096;

fn open_volume(meta: &Path, data: &Path) -> Result<Volume> {
    let (meta, data) = named(meta, Some(data))?;
    let (m, d) = open_pair(&meta, &data, Access::Shared)?;
    let options = MountOptions { read_only: true, ..MountOptions::default() };
    Volume::open(m, d, options)
        .map_err(|e| anyhow!("cannot open the volume on {} and {}: {e}", meta.display(), data.display()))
}

/// Reads `len` bytes of `ino` from `offset`: by chunk, and a chunk that
/// fails block by block, unreadable blocks as zeros. Returns the bytes and
/// the first error met, if any.
fn read_salvaging(vol: &Volume, ino: InodeNo, offset: u64, len: usize) -> (Vec<u8>, Option<String>) {
    match vol.read(ino, offset, len) {
        Ok(d) => (d, None),
        Err(first) => {
            let mut out = Vec::with_capacity(len);
            let block = BLOCK_BYTES as usize;
            while out.len() < len {
                let at = offset + out.len() as u64;
                let want = block.min(len - out.len());
                match vol.read(ino, at, want) {
                    Ok(d) if d.is_empty() => break,
                    Ok(d) => out.extend_from_slice(&d),
                    Err(_) => out.resize(out.len() + want, 0),
                }
            }
            (out, Some(first.to_string()))
        }
    }
}

/// Copies the contents of `ino` (`size` bytes) to `out`, leaving zero
/// chunks as holes when `sparse`. Returns the bytes read, and the ranges
/// that could not be.
fn copy_contents(vol: &Volume, ino: InodeNo, size: u64, out: &mut File, sparse: bool) -> Result<(u64, Vec<String>)> {
    let mut problems = Vec::new();
    let mut at = 0u64;
    while at < size {
        let want = CHUNK.min(usize::try_from(size - at).unwrap_or(CHUNK));
        let (data, err) = read_salvaging(vol, ino, at, want);
        if let Some(e) = err {
            problems
                .push(format!("bytes {at}..{} unreadable, copied as zeros where they failed: {e}", at + want as u64));
        }
        if data.is_empty() {
            break;
        }
        if sparse && data.iter().all(|&b| b == 0) {
            out.seek(SeekFrom::Current(data.len() as i64))?;
        } else {
            out.write_all(&data)?;
        }
        at += data.len() as u64;
    }
    if sparse {
        out.set_len(size)?;
    }
    Ok((at, problems))
}

/// Runs `dualfs cat`.
///
/// # Errors
/// The volume cannot be opened, the path is not a file; `Exit(4)` when
/// some of it could not be read (written as zeros, said on standard error).
pub fn cat(args: &CatArgs) -> Result<()> {
    let vol = open_volume(&args.meta, &args.data)?;
    let ino = resolve(&vol, &args.path)?;
    let a = vol.getattr(ino).map_err(|e| anyhow!("{}: {e}", args.path))?;
    match a.kind {
        FileKind::Regular => {}
        FileKind::Directory => bail!("{}: is a directory (dualfs get copies trees)", args.path),
        FileKind::Symlink => {
            let t = vol.readlink(ino).map_err(|e| anyhow!("{}: {e}", args.path))?;
            bail!("{}: is a symbolic link to {}", args.path, String::from_utf8_lossy(&t));
        }
        _ => bail!("{}: not a regular file", args.path),
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut at = 0u64;
    let mut problems = Vec::new();
    while at < a.size {
        let want = CHUNK.min(usize::try_from(a.size - at).unwrap_or(CHUNK));
        let (data, err) = read_salvaging(&vol, ino, at, want);
        if let Some(e) = err {
            problems.push(format!("bytes {at}..{}: {e}", at + want as u64));
        }
        if data.is_empty() {
            break;
        }
        out.write_all(&data).context("cannot write to standard output")?;
        at += data.len() as u64;
    }
    out.flush().context("cannot write to standard output")?;
    if problems.is_empty() {
        return Ok(());
    }
    for p in &problems {
        eprintln!("dualfs: {}: {p} (written as zeros)", args.path);
    }
    Err(Exit(EXIT_INCOMPLETE).into())
}

/// What a copy did.
#[derive(Debug, Default)]
struct Tally {
    files: u64,
    dirs: u64,
    symlinks: u64,
    others: u64,
    bytes: u64,
    problems: Vec<String>,
}

/// A copy of a tree out of the volume.
struct Copier<'a> {
    vol: &'a Volume,
    tally: Tally,
    /// Files with several links already copied: later names become links.
    linked: HashMap<InodeNo, PathBuf>,
    /// Directories entered (a damaged tree may loop).
    visited: HashSet<InodeNo>,
    /// Every inode met, for finding those no directory leads to.
    reached: HashSet<InodeNo>,
    root: bool,
    verbose: bool,
    /// Copies to give inode flags or a project once everything is copied
    /// (an immutable file takes no link, an immutable directory no entry):
    /// the path in the volume, the copy, the flags and the project.
    flagged: Vec<(String, PathBuf, u32, u32)>,
    /// Inode flags and projects the copies could not take, in words.
    not_kept: Vec<String>,
}

fn system_time(t: Timestamp) -> nix::sys::time::TimeSpec {
    nix::sys::time::TimeSpec::new(t.sec, i64::from(t.nsec))
}

impl Copier<'_> {
    fn problem(&mut self, path: &str, what: impl std::fmt::Display) {
        self.tally.problems.push(format!("{path}: {what}"));
    }

    /// Owner, mode, extended attributes and times, as `cp -a` keeps them
    /// (owners only when run by root). Failures are noted, not fatal.
    fn finish(&mut self, path: &str, ino: InodeNo, a: &Attr, dest: &Path) {
        if a.kind != FileKind::Symlink {
            let names = self.vol.listxattr(ino).unwrap_or_else(|e| {
                self.problem(path, format!("extended attributes not listed: {e}"));
                Vec::new()
            });
            for name in names {
                // Other users may set only user.*: leave the rest to root.
                if !self.root && !name.starts_with(b"user.") {
                    continue;
                }
                match self.vol.getxattr(ino, &name) {
                    Ok(v) => {
                        let n = OsStr::from_bytes(&name);
                        if let Err(e) = rustix::fs::lsetxattr(dest, n, &v, rustix::fs::XattrFlags::empty()) {
                            self.problem(path, format!("extended attribute {} not set: {e}", n.to_string_lossy()));
                        }
                    }
                    Err(e) => self.problem(path, format!("extended attribute unreadable: {e}")),
                }
            }
        }
        if self.root
            && let Err(e) = nix::unistd::fchownat(
                nix::fcntl::AT_FDCWD,
                dest,
                Some(nix::unistd::Uid::from_raw(a.uid)),
                Some(nix::unistd::Gid::from_raw(a.gid)),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
        {
            self.problem(path, format!("owner not set: {e}"));
        }
        if a.kind != FileKind::Symlink {
            use std::os::unix::fs::PermissionsExt;
            if let Err(e) = std::fs::set_permissions(dest, std::fs::Permissions::from_mode(a.perm & 0o7777)) {
                self.problem(path, format!("mode not set: {e}"));
            }
        }
        if let Err(e) = nix::sys::stat::utimensat(
            nix::fcntl::AT_FDCWD,
            dest,
            &system_time(a.atime),
            &system_time(a.mtime),
            nix::sys::stat::UtimensatFlags::NoFollowSymlink,
        ) {
            self.problem(path, format!("times not set: {e}"));
        }
        if a.flags != 0 || a.project != 0 {
            if matches!(a.kind, FileKind::Regular | FileKind::Directory) {
                self.flagged.push((path.to_string(), dest.to_path_buf(), a.flags, a.project));
            } else {
                // FS_IOC_SETFLAGS needs an open file: a symlink or a device
                // cannot be opened for it without being followed or used.
                self.not_kept.push(format!(
                    "{path}: inode flags {} not set: chattr cannot reach a symbolic link or special file",
                    flag_letters(a.flags)
                ));
            }
        }
    }

    /// Gives the copies their inode flags and projects, deepest first (a
    /// directory's entries before it), as `chattr` would.
    fn apply_flags(&mut self) -> u64 {
        let mut kept = 0;
        for (path, dest, flags, project) in std::mem::take(&mut self.flagged) {
            match crate::iflags::apply(&dest, flags, project) {
                Ok(()) => kept += 1,
                Err(e) => self.not_kept.push(format!("{path}: {e}")),
            }
        }
        kept
    }

    fn copy(&mut self, ino: InodeNo, path: &str, dest: &Path, depth: usize) {
        self.reached.insert(ino);
        let a = match self.vol.getattr(ino) {
            Ok(a) => a,
            Err(e) => return self.problem(path, format!("inode {ino} unreadable: {e}")),
        };
        if self.verbose {
            say!("{path}");
        }
        match a.kind {
            FileKind::Directory => self.copy_dir(ino, path, dest, &a, depth),
            FileKind::Regular => self.copy_file(ino, path, dest, &a),
            FileKind::Symlink => match self.vol.readlink(ino) {
                Ok(t) => match std::os::unix::fs::symlink(OsStr::from_bytes(&t), dest) {
                    Ok(()) => {
                        self.tally.symlinks += 1;
                        self.finish(path, ino, &a, dest);
                    }
                    Err(e) => self.problem(path, format!("cannot create {}: {e}", dest.display())),
                },
                Err(e) => self.problem(path, format!("symlink target unreadable: {e}")),
            },
            kind => self.copy_special(ino, path, dest, &a, kind),
        }
    }

    fn copy_dir(&mut self, ino: InodeNo, path: &str, dest: &Path, a: &Attr, depth: usize) {
        if depth > MAX_DEPTH || !self.visited.insert(ino) {
            return self.problem(path, "directory met twice or nested too deep: the tree is damaged; not followed");
        }
        match std::fs::create_dir(dest) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dest.is_dir() => {}
            Err(e) => return self.problem(path, format!("cannot create {}: {e}", dest.display())),
        }
        self.tally.dirs += 1;
        let mut entries = Vec::new();
        let listed = self.vol.readdir(ino, 0, &mut |l| {
            if l.name != b"." && l.name != b".." {
                entries.push((l.name, l.ino));
            }
            true
        });
        if let Err(e) = listed {
            self.problem(path, format!("directory only partly readable ({} entries listed): {e}", entries.len()));
        }
        for (name, child) in entries {
            let shown = format!("{}/{}", path.trim_end_matches('/'), String::from_utf8_lossy(&name));
            self.copy(child, &shown, &dest.join(OsStr::from_bytes(&name)), depth + 1);
        }
        self.finish(path, ino, a, dest);
    }

    fn copy_file(&mut self, ino: InodeNo, path: &str, dest: &Path, a: &Attr) {
        if a.nlink > 1 {
            if let Some(first) = self.linked.get(&ino) {
                if let Err(e) = std::fs::hard_link(first, dest) {
                    self.problem(path, format!("cannot link {} to {}: {e}", dest.display(), first.display()));
                }
                return;
            }
            self.linked.insert(ino, dest.to_path_buf());
        }
        let mut out = match OpenOptions::new().write(true).create(true).truncate(true).open(dest) {
            Ok(f) => f,
            Err(e) => return self.problem(path, format!("cannot create {}: {e}", dest.display())),
        };
        match copy_contents(self.vol, ino, a.size, &mut out, true) {
            Ok((bytes, problems)) => {
                self.tally.files += 1;
                self.tally.bytes += bytes;
                for p in problems {
                    self.problem(path, p);
                }
            }
            Err(e) => self.problem(path, format!("cannot write {}: {e}", dest.display())),
        }
        drop(out);
        self.finish(path, ino, a, dest);
    }

    fn copy_special(&mut self, ino: InodeNo, path: &str, dest: &Path, a: &Attr, kind: FileKind) {
        use nix::sys::stat::{Mode, SFlag};
        let flag = match kind {
            FileKind::Fifo => SFlag::S_IFIFO,
            FileKind::Socket => SFlag::S_IFSOCK,
            FileKind::CharDevice => SFlag::S_IFCHR,
            _ => SFlag::S_IFBLK,
        };
        let perm = Mode::from_bits_truncate(a.perm & 0o777);
        match nix::sys::stat::mknod(dest, flag, perm, a.rdev) {
            Ok(()) => {
                self.tally.others += 1;
                self.finish(path, ino, a, dest);
            }
            Err(e) => self.problem(path, format!("cannot create {} ({kind:?}): {e}", dest.display())),
        }
    }
}

impl Copier<'_> {
    /// Copies every file in use that the walk did not reach (its directory
    /// is damaged) to `dest/lost+found/#INODE`. Directories are left out:
    /// their entries were reached through them, or are unreadable.
    fn salvage_unreached(&mut self, dest: &Path) {
        let numbers = self.vol.with_fs(|fs| fs.log.ifile().inodes.len() as u64);
        let lost: Vec<InodeNo> = (1..numbers)
            .map(InodeNo)
            .filter(|i| !self.reached.contains(i))
            .filter(|&i| self.vol.with_fs(|fs| fs.log.map_entry(i)).ok().flatten().is_some_and(|e| e.in_use()))
            .collect();
        if lost.is_empty() {
            return;
        }
        let dir = dest.join("lost+found");
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return self.problem("lost+found", format!("cannot create {}: {e}", dir.display()));
        }
        let mut saved = 0u64;
        for ino in lost {
            match self.vol.getattr(ino) {
                Ok(a) if a.kind == FileKind::Directory => {}
                // Unlinked but still open when the volume was last closed.
                Ok(a) if a.nlink == 0 => {}
                Ok(_) => {
                    saved += 1;
                    self.copy(ino, &format!("#{ino}"), &dir.join(format!("#{ino}")), 0);
                }
                Err(e) => self.problem(&format!("#{ino}"), format!("inode {ino} unreadable: {e}")),
            }
        }
        eprintln!("dualfs: {} no directory leads to copied to {}", count(saved, "file"), dir.display());
    }
}

/// Where `path` goes: into `dest` when that is an existing directory (as
/// cp), else to `dest` itself.
fn target(path: &str, dest: &Path) -> PathBuf {
    let base = path.trim_end_matches('/').rsplit('/').next().filter(|b| !b.is_empty());
    match base {
        Some(b) if dest.is_dir() && path.starts_with('/') => dest.join(b),
        _ => dest.to_path_buf(),
    }
}

/// Runs `dualfs get`.
///
/// # Errors
/// The volume cannot be opened or the path is not there; `Exit(4)` when
/// anything was skipped (each said on standard error).
pub fn get(args: &GetArgs) -> Result<()> {
    let vol = open_volume(&args.meta, &args.data)?;
    let ino = resolve(&vol, &args.path)?;
    let dest = target(&args.path, &args.dest);
    let mut c = Copier {
        vol: &vol,
        tally: Tally::default(),
        linked: HashMap::new(),
        visited: HashSet::new(),
        reached: HashSet::new(),
        root: nix::unistd::geteuid().is_root(),
        verbose: args.verbose,
        flagged: Vec::new(),
        not_kept: Vec::new(),
    };
    c.copy(ino, &args.path, &dest, 0);
    if ino == InodeNo::ROOT && !c.tally.problems.is_empty() {
        if !dest.is_dir() {
            // The root itself was unreadable: make the place to put the rest.
            let _ = std::fs::create_dir_all(&dest);
        }
        c.salvage_unreached(&dest);
    }
    let flagged = c.apply_flags();
    let t = &c.tally;
    say!(
        "copied {}, {}, {} and {} ({}) to {}",
        count(t.files, "file"),
        count(t.dirs, "directory"),
        count(t.symlinks, "symlink"),
        count(t.others, "special file"),
        crate::words::human_bytes(t.bytes),
        dest.display()
    );
    if flagged > 0 {
        say!("inode flags or projects set on {}", count(flagged, "copy"));
    }
    for n in &c.not_kept {
        eprintln!("dualfs: {n}");
    }
    if !c.not_kept.is_empty() {
        eprintln!(
            "dualfs: {} kept without their inode flags or project (the copy is otherwise whole)",
            count(c.not_kept.len() as u64, "file")
        );
    }
    if t.problems.is_empty() {
        return Ok(());
    }
    for p in &t.problems {
        eprintln!("dualfs: {p}");
    }
    eprintln!("dualfs: {}: the copy is incomplete", count(t.problems.len() as u64, "problem"));
    Err(Exit(EXIT_INCOMPLETE).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_goes_into_an_existing_directory_under_its_own_name() {
        let tmp = std::env::temp_dir();
        assert_eq!(target("/a/b", &tmp), tmp.join("b"));
        assert_eq!(target("/", &tmp), tmp);
        assert_eq!(target("/a/b/", Path::new("/no/such/dir")), PathBuf::from("/no/such/dir"));
    }
}
