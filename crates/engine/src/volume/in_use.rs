//! Trees in use beside the live one (DESIGN.md, "Several trees in use at
//! once"): the volume knows every kept tree it serves beside the live tree
//! and where, and refuses to delete or switch to one of them: its image is
//! what the view reads, and deleting it would hand its blocks to the live
//! tree under the view.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::{MountOptions, TreeServed, Volume, lock};
use crate::device::BlockDevice;
use crate::error::{Error, Result};

/// The trees a volume serves beside its live tree: for each view or
/// writable tree served, its tree's name, who uses it (a mount point, in
/// words), and whether it is a read-only view.
#[derive(Debug, Default)]
pub(super) struct TreesInUse {
    next: u64,
    views: BTreeMap<u64, (String, String, bool)>,
}

/// Registers one view of a tree while it lives: dropped with the view's
/// volume, which is when the tree may go.
#[derive(Debug)]
pub(super) struct TreeUse {
    registry: Arc<Mutex<TreesInUse>>,
    token: u64,
}

impl Drop for TreeUse {
    fn drop(&mut self) {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner).views.remove(&self.token);
    }
}

impl Volume {
    /// Opens kept tree `name` (a snapshot or a writable clone) read-only
    /// beside the live tree, used by `user` (where it is mounted, in
    /// words). Its image is loaded whole from this volume's log; until the
    /// returned volume goes, deleting the tree or making it the live one is
    /// refused, naming `user`. A clone is read as its record keeps it.
    ///
    /// # Errors
    /// No such tree, the live tree's name, a damaged image, or a device
    /// fails.
    pub fn open_tree(&self, name: &str, user: &str, options: MountOptions) -> Result<Volume> {
        self.open_tree_on((self.meta.clone(), self.data.clone()), name, user, options)
    }

    /// As [`Volume::open_tree`], the view reading through `devices` (the
    /// meta-data and data device, opened by the caller apart from this
    /// volume's handles): it may outlive this volume, which lets go of
    /// its devices when it closes.
    ///
    /// # Errors
    /// As [`Volume::open_tree`].
    pub fn open_tree_on(
        &self,
        (meta, data): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>),
        name: &str,
        user: &str,
        options: MountOptions,
    ) -> Result<Volume> {
        self.check_up()?;
        // Registered under the file-system lock, where a deletion or a
        // switch looks: none can come between finding the record and
        // holding it.
        let (image, report, held) = {
            let fs = lock(&self.fs);
            let Some(s) = fs.log.snapshots().iter().find(|s| s.name == name) else {
                if fs.log.live_tree_name() == name {
                    return Err(Error::SnapshotRefused(format!(
                        "{name} is the live tree: it is served by the volume itself"
                    )));
                }
                return Err(Error::NoSnapshot(name.to_string()));
            };
            let held = self.hold_tree(name, user, true);
            (fs.log.open_image_on(&s.checkpoint, meta.clone(), data.clone())?, self.open_report.clone(), held)
        };
        let mut view = Volume::over_image(image, report, meta, data, name, options)?;
        view.in_use = Some(held);
        Ok(view)
    }

    fn hold_tree(&self, name: &str, user: &str, view: bool) -> TreeUse {
        let mut trees = self.trees_in_use.lock().unwrap_or_else(PoisonError::into_inner);
        trees.next += 1;
        let token = trees.next;
        trees.views.insert(token, (name.to_string(), user.to_string(), view));
        TreeUse { registry: self.trees_in_use.clone(), token }
    }

    /// Registers writable tree `name` (the live one or a writable clone)
    /// as served at `user` (a mount point, in words), whose operations
    /// enter it ([`Volume::enter_tree`]). Until the returned value goes,
    /// deleting the tree, or switching to it other than through the
    /// gate, is refused naming `user`.
    ///
    /// # Errors
    /// No such tree, or a read-only snapshot.
    pub fn serve_tree(&self, name: &str, user: &str) -> Result<TreeServed> {
        let fs = lock(&self.fs);
        if fs.log.live_tree_name() != name {
            match fs.log.snapshots().iter().find(|s| s.name == name) {
                None => return Err(Error::NoSnapshot(name.to_string())),
                Some(s) if !s.writable => {
                    return Err(Error::SnapshotRefused(format!(
                        "{name} is a read-only snapshot: mount it with -o snapshot={name}, or make a writable \
                         clone of it (dualfs clone {name} NEW)"
                    )));
                }
                Some(_) => {}
            }
        }
        let held = self.hold_tree(name, user, false);
        drop(fs);
        Ok(self.gate_serve(name, held))
    }

    /// Who uses tree `name` beside the live one, in the order they came.
    #[must_use]
    pub fn tree_users(&self, name: &str) -> Vec<String> {
        let trees = self.trees_in_use.lock().unwrap_or_else(PoisonError::into_inner);
        trees.views.values().filter(|(n, _, _)| n == name).map(|(_, u, _)| u.clone()).collect()
    }

    /// Refuses to make tree `name` live while a read-only view of it is
    /// open: the view reads the image its record keeps, which the switch
    /// lets go.
    pub(super) fn refuse_tree_viewed(&self, name: &str) -> Result<()> {
        let trees = self.trees_in_use.lock().unwrap_or_else(PoisonError::into_inner);
        let users: Vec<&str> =
            trees.views.values().filter(|(n, _, v)| n == name && *v).map(|(_, u, _)| u.as_str()).collect();
        if users.is_empty() {
            return Ok(());
        }
        Err(Error::Busy(format!(
            "{name} is mounted read-only ({}): unmount it before it is written beside the live tree",
            users.join(", ")
        )))
    }

    /// Refuses `what` to tree `name` while a view of it is open; asked
    /// with the file-system lock held, as views are registered.
    pub(super) fn refuse_tree_in_use(&self, name: &str, what: &str) -> Result<()> {
        let users = self.tree_users(name);
        if users.is_empty() {
            return Ok(());
        }
        Err(Error::Busy(format!("{name} is in use ({}): unmount it before it is {what}", users.join(", "))))
    }
}
