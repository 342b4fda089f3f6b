//! `dualfs mirror add|remove|replace MOUNTPOINT`: the serving process
//! changes the mounted volume's meta-data mirror. The client sets the
//! control attribute `dualfs.mirror` to the order (`add`, `remove` or
//! `replace`, then the devices, one absolute path a line: [`mirror_order`]);
//! the serving process opens a new copy as migrate opens its device, names
//! the copies by the paths it was mounted with, changes the mirror and
//! answers when done; meanwhile `getxattr dualfs.mirror` reads the
//! progress, and after, the outcome, with the devices to mount with next.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::Errno;
use crate::migrate::DeviceOpener;
use dualfs_engine::Volume;
use dualfs_engine::error::DeviceRole;
use dualfs_engine::volume::{MirrorChange, MirrorReport};
use serde_json::{Value, json};

/// Set to an order to change the mirror; read for progress and outcome.
pub const MIRROR: &str = "dualfs.mirror";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What `dualfs mirror` asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MirrorOrder {
    /// A new copy beside the one in use.
    Add(PathBuf),
    /// Drop a copy.
    Remove(PathBuf),
    /// Resync the second path from the good copy and drop the first.
    Replace(PathBuf, PathBuf),
}

impl MirrorOrder {
    fn verb(&self) -> &'static str {
        match self {
            MirrorOrder::Add(_) => "add",
            MirrorOrder::Remove(_) => "remove",
            MirrorOrder::Replace(..) => "replace",
        }
    }
}

/// An order as text: the verb, then each path, a line each.
#[must_use]
pub fn mirror_order(o: &MirrorOrder) -> String {
    let paths: Vec<&Path> = match o {
        MirrorOrder::Add(p) | MirrorOrder::Remove(p) => vec![p],
        MirrorOrder::Replace(a, b) => vec![a, b],
    };
    let mut s = o.verb().to_string();
    for p in paths {
        s.push('\n');
        s.push_str(&p.display().to_string());
    }
    s
}

/// Reads an order.
///
/// # Errors
/// An unknown verb, the wrong number of paths, a path not absolute.
pub fn parse_mirror(s: &str) -> Result<MirrorOrder, String> {
    let mut lines = s.lines();
    let verb = lines.next().unwrap_or_default();
    let paths: Vec<PathBuf> = lines.map(PathBuf::from).collect();
    if let Some(p) = paths.iter().find(|p| !p.is_absolute()) {
        return Err(format!("{} is not an absolute path", p.display()));
    }
    match (verb, paths.as_slice()) {
        ("add", [p]) => Ok(MirrorOrder::Add(p.clone())),
        ("remove", [p]) => Ok(MirrorOrder::Remove(p.clone())),
        ("replace", [a, b]) => Ok(MirrorOrder::Replace(a.clone(), b.clone())),
        ("add" | "remove", _) => Err(format!("{verb} takes one device")),
        ("replace", _) => Err("replace takes two devices: the old copy and the new one".into()),
        _ => Err(format!("unknown mirror order '{verb}' (add, remove, replace)")),
    }
}

/// Whether `a` and `b` name the same device or file.
fn same(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) if x.file_type().is_block_device() && y.file_type().is_block_device() => x.rdev() == y.rdev(),
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => a == b,
    }
}

/// The mirror changes through the control attribute, and the paths of
/// the meta-data devices the mount runs on.
pub struct Mirrorer {
    state: Mutex<Value>,
    /// The meta-data devices in the volume's order
    /// ([`Volume::mirror_in_use`]); empty when the mounting code gave none.
    paths: Mutex<Vec<PathBuf>>,
    /// One change at a time.
    running: Mutex<()>,
    opener: DeviceOpener,
}

impl std::fmt::Debug for Mirrorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirrorer").field("state", &self.state).field("paths", &self.paths).finish_non_exhaustive()
    }
}

impl Mirrorer {
    /// A mirrorer opening new copies with `opener`; `paths` are the
    /// meta-data devices the mount runs on, in the volume's order.
    #[must_use]
    pub fn new(opener: DeviceOpener, paths: Vec<PathBuf>) -> Mirrorer {
        Mirrorer { state: Mutex::new(Value::Null), paths: Mutex::new(paths), running: Mutex::new(()), opener }
    }

    /// The place of `p` among the copies, if it is one.
    fn place(&self, p: &Path) -> Option<usize> {
        lock(&self.paths).iter().position(|q| same(p, q))
    }

    fn failed(&self, order: &MirrorOrder, e: String) -> Errno {
        *lock(&self.state) = json!({ "state": "failed", "error": e, "action": order.verb() });
        Errno::EINVAL
    }

    /// Changes the mirror as the request text `value` says, synchronously,
    /// and keeps the outcome for [`Mirrorer::status`].
    ///
    /// # Errors
    /// EBUSY while a change runs; EINVAL for a bad request or one that does
    /// not apply (the reason is in the status); the errno of a device
    /// failure.
    pub fn change(&self, vol: &Volume, value: &[u8]) -> Result<(), Errno> {
        let text = std::str::from_utf8(value).map_err(|_| Errno::EINVAL)?;
        let order = match parse_mirror(text) {
            Ok(o) => o,
            Err(e) => {
                *lock(&self.state) = json!({ "state": "failed", "error": e });
                return Err(Errno::EINVAL);
            }
        };
        let Ok(_one) = self.running.try_lock() else { return Err(Errno::EBUSY) };
        if lock(&self.paths).is_empty() {
            return Err(self.failed(&order, "this mount does not know its meta-data devices' paths".into()));
        }
        let new_path = match &order {
            MirrorOrder::Add(p) | MirrorOrder::Replace(_, p) => Some(p.clone()),
            MirrorOrder::Remove(_) => None,
        };
        if let Some(p) = &new_path
            && self.place(p).is_some()
        {
            return Err(self.failed(&order, format!("{} is a meta-data copy of this volume already", p.display())));
        }
        let new = match &new_path {
            Some(p) => match (self.opener)(p, DeviceRole::Meta) {
                Ok(d) => Some(d),
                Err(e) => return Err(self.failed(&order, e)),
            },
            None => None,
        };
        let change = match (&order, new) {
            (MirrorOrder::Add(_), Some(n)) => MirrorChange::Add(n),
            (MirrorOrder::Replace(old, _), Some(n)) => MirrorChange::Replace(self.place(old), n),
            (MirrorOrder::Remove(old), _) => MirrorChange::Remove(self.place(old)),
            _ => return Err(self.failed(&order, "no new device".into())),
        };
        *lock(&self.state) = json!({ "state": "running", "action": order.verb(), "done": 0, "total": 0 });
        let r = vol.mirror_change(change, &mut |done, total| {
            *lock(&self.state) = json!({ "state": "running", "action": order.verb(), "done": done, "total": total });
        });
        let out = match r {
            Ok(report) => {
                let paths = {
                    let mut paths = lock(&self.paths);
                    let kept = paths.get(report.kept).cloned().unwrap_or_default();
                    *paths = std::iter::once(kept).chain(new_path).collect();
                    paths.clone()
                };
                Ok(report_json(&order, &report, &paths))
            }
            Err(e) => {
                log::warn!("mirror {}: {e}", order.verb());
                Err((Errno::from_i32(e.errno()), e.to_string()))
            }
        };
        match out {
            Ok(v) => {
                *lock(&self.state) = v;
                Ok(())
            }
            Err((errno, e)) => {
                *lock(&self.state) = json!({ "state": "failed", "error": e, "action": order.verb() });
                Err(errno)
            }
        }
    }

    /// The latest change's state, as JSON bytes.
    #[must_use]
    pub fn status(&self) -> Vec<u8> {
        lock(&self.state).to_string().into_bytes()
    }
}

fn report_json(order: &MirrorOrder, r: &MirrorReport, paths: &[PathBuf]) -> Value {
    json!({
        "state": "done",
        "error": null,
        "action": order.verb(),
        "copies": r.copies,
        "meta_device": paths.first().map(|p| p.display().to_string()),
        "mirror_device": paths.get(1).map(|p| p.display().to_string()),
        "copied_blocks": r.copied_blocks,
        "mirrored_blocks": r.mirrored_blocks,
        "generation": r.generation,
        "micros": r.micros,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirror_order_reads_back_what_it_prints() {
        let (a, b) = (PathBuf::from("/dev/sdb"), PathBuf::from("/dev/sdc"));
        for o in [MirrorOrder::Add(a.clone()), MirrorOrder::Remove(b.clone()), MirrorOrder::Replace(a, b)] {
            assert_eq!(parse_mirror(&mirror_order(&o)), Ok(o));
        }
        assert!(parse_mirror("add\nrelative.img").is_err());
        assert!(parse_mirror("replace\n/x").is_err());
        assert!(parse_mirror("grow\n/x").is_err());
    }
}
