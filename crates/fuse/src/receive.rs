//! `dualfs receive MOUNTPOINT`: the serving process applies a send stream
//! to the mounted volume. The client spools the stream to a file and sets
//! the control attribute `dualfs.receive` to its path (or to `abort`, for
//! `dualfs receive --abort`: the receive under way is abandoned and the
//! tree goes back to the last complete one); the receive runs in
//! a thread of its own (reading the state: `getxattr dualfs.receive`), so
//! that no request is held while it runs, and so that its last step, making
//! the kernel forget the names and inodes the stream changed, happens
//! outside any request (a notification sent from inside a request on the
//! same directory would wait for that request).

use std::ffi::OsStr;
use std::io::BufReader;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use dualfs_engine::Volume;
use dualfs_engine::volume::{AbortReport, ReceiveReport, Touched};
use serde_json::{Value, json};

use crate::Errno;
use crate::answers::{NotifierSlot, Notify};

/// Set to a stream's path to receive it; read for the state of the latest receive.
pub const RECEIVE: &str = "dualfs.receive";
/// The value of [`RECEIVE`] that abandons the receive under way (a path
/// the client sends is absolute).
pub const ABORT: &[u8] = b"abort";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What `dualfs receive` prints: the state of a receive, as JSON.
#[must_use]
pub fn report_json(r: &Result<ReceiveReport, String>) -> Value {
    match r {
        Ok(r) => json!({
            "state": "done",
            "snapshot": r.snapshot,
            "resumed": r.resumed,
            "inodes": r.counts.inodes,
            "gone": r.counts.gone,
            "data_bytes": r.counts.data_bytes,
            "records": r.counts.records,
        }),
        Err(e) => json!({ "state": "failed", "error": e }),
    }
}

/// What `dualfs receive --abort` prints: the state of an abort, as JSON.
#[must_use]
pub fn abort_json(r: &Result<AbortReport, String>) -> Value {
    match r {
        Ok(r) => json!({
            "state": "done",
            "aborted": r.stream,
            "base": r.base,
            "inodes": r.inodes,
        }),
        Err(e) => json!({ "state": "failed", "error": e }),
    }
}

/// The receive running or last run through the control attribute.
#[derive(Debug, Default)]
pub struct Receiver {
    state: Arc<Mutex<Value>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl Receiver {
    /// Starts receiving the stream in file `value` (a path).
    ///
    /// # Errors
    /// EBUSY while a receive runs; ENOENT and the like when the file cannot
    /// be opened.
    pub fn start(
        &self,
        vol: &Arc<Volume>,
        tree: Option<&str>,
        notifier: &NotifierSlot,
        value: &[u8],
    ) -> Result<(), Errno> {
        let mut worker = lock(&self.worker);
        if worker.as_ref().is_some_and(|h| !h.is_finished()) {
            return Err(Errno::EBUSY);
        }
        if let Some(h) = worker.take() {
            let _ = h.join();
        }
        let (vol, notifier, state) = (vol.clone(), notifier.clone(), self.state.clone());
        let tree = tree.map(str::to_string);
        if value == ABORT {
            *lock(&self.state) = json!({ "state": "running" });
            *worker = Some(std::thread::spawn(move || {
                // The whole of it in the mount's tree, other trees waiting.
                let _in = match tree.as_deref().map(|t| vol.enter_tree(t)).transpose() {
                    Ok(g) => g,
                    Err(e) => {
                        *lock(&state) = abort_json(&Err(e.to_string()));
                        return;
                    }
                };
                let mut touched = Touched::default();
                let out = vol.receive_abort(&mut touched);
                forget_cached(notifier.get().map(|n| &**n), &touched);
                let out = out.map_err(|e| {
                    log::warn!("receive --abort: {e}");
                    e.to_string()
                });
                *lock(&state) = abort_json(&out);
            }));
            return Ok(());
        }
        let path = std::path::PathBuf::from(OsStr::from_bytes(value));
        let file = std::fs::File::open(&path).map_err(|e| Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO)))?;
        *lock(&self.state) = json!({ "state": "running" });
        *worker = Some(std::thread::spawn(move || {
            let _in = match tree.as_deref().map(|t| vol.enter_tree(t)).transpose() {
                Ok(g) => g,
                Err(e) => {
                    *lock(&state) = report_json(&Err(e.to_string()));
                    return;
                }
            };
            let mut touched = Touched::default();
            let out = vol.receive_with(&mut BufReader::with_capacity(1 << 20, file), &mut touched);
            // A receive refused midway went back to the tree before it:
            // what it changed, and changed back, is forgotten either way.
            forget_cached(notifier.get().map(|n| &**n), &touched);
            let out = out.map_err(|e| {
                log::warn!("receive of {}: {e}", path.display());
                e.to_string()
            });
            *lock(&state) = report_json(&out);
        }));
        Ok(())
    }

    /// The latest receive's state, as JSON bytes (null before any).
    #[must_use]
    pub fn status(&self) -> Vec<u8> {
        lock(&self.state).to_string().into_bytes()
    }

    /// Waits for a running receive (at unmount).
    pub fn shutdown(&self) {
        if let Some(h) = lock(&self.worker).take()
            && h.join().is_err()
        {
            log::error!("the receiving thread panicked");
        }
    }
}

/// Makes the kernel forget what it caches of what the receive changed:
/// names it may hold (present or absent), attributes and pages.
fn forget_cached(notifier: Option<&dyn Notify>, r: &Touched) {
    if r.inodes.is_empty() && r.names.is_empty() {
        return;
    }
    log::debug!("receive: forgetting {} names and {} inodes", r.names.len(), r.inodes.len());
    let Some(n) = notifier else {
        log::warn!("receive: no notifier");
        return;
    };
    for (dir, name) in &r.names {
        if let Err(e) = n.inval_entry(dir.0, name) {
            log::warn!("receive: inval entry {dir}: {e}");
        }
    }
    for ino in &r.inodes {
        if let Err(e) = n.inval_inode(ino.0, 0, 0) {
            log::warn!("receive: inval inode {ino}: {e}");
        }
    }
    // The root's attributes: the provenance attribute and the snapshot.
    let _ = n.inval_inode(1, -1, 0);
}
