//! `dualfs scrub MOUNTPOINT`: the serving process scrubs the mounted
//! volume in a thread of its own while requests go on. The client sets the
//! control attribute `dualfs.scrub` to the order ([`ScrubOrder`]), reads
//! it for the progress and, at the end, the report ([`report_json`], one
//! shape mounted or not), and removes it to stop a scrub early.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use dualfs_engine::Volume;
use dualfs_engine::volume::{ScrubOptions, ScrubReport};
use serde_json::{Value, json};

use crate::Errno;

/// Set to start a scrub, read for its state, removed to stop it.
pub const SCRUB: &str = "dualfs.scrub";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A scrub's order as text: `rate=BYTES meta_only=1`, each optional,
/// separated by spaces or commas.
///
/// # Errors
/// An unknown key, or a value that does not parse.
pub fn parse_order(s: &str) -> Result<ScrubOptions, String> {
    let mut o = ScrubOptions::default();
    for item in s.split([' ', ',', '\n']).filter(|i| !i.is_empty()) {
        let (k, v) = item.split_once('=').ok_or_else(|| format!("{item:?} is not key=value"))?;
        match k {
            "rate" => o.rate = Some(v.parse().map_err(|_| format!("rate={v}: not a number of bytes per second"))?),
            "meta_only" => o.meta_only = v == "1",
            _ => return Err(format!("unknown key {k:?} (rate, meta_only)")),
        }
    }
    Ok(o)
}

/// The order text [`parse_order`] reads.
#[must_use]
pub fn order_text(o: &ScrubOptions) -> String {
    let mut v = Vec::new();
    if let Some(r) = o.rate {
        v.push(format!("rate={r}"));
    }
    if o.meta_only {
        v.push("meta_only=1".into());
    }
    v.join(" ")
}

/// A report as `dualfs scrub --json` prints it under `report`.
#[must_use]
pub fn report_json(r: &ScrubReport) -> Value {
    json!({
        "meta_blocks": r.meta_blocks,
        "data_blocks": r.data_blocks,
        "bytes": r.bytes(),
        "micros": r.micros,
        "copies": r.copies,
        "moved": r.moved,
        "stopped": r.stopped,
        "corrected": r.corrected(),
        "uncorrectable": r.uncorrectable(),
        "data_checksummed": false,
        "bad_meta": r.bad_meta.iter().map(|b| json!({
            "block": b.block,
            "structure": b.structure,
            "tree": b.tree,
            "error": b.error,
            "repaired": b.repaired,
            "files": b.inodes.iter().zip(b.paths.iter().chain(std::iter::repeat(&None))).map(|(i, p)| json!({
                "inode": i.0,
                "path": p,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "data_errors": r.data_errors.iter().map(|e| json!({
            "block": e.block,
            "inode": e.ino.0,
            "file_block": e.file_block,
            "path": e.path,
            "tree": e.tree,
            "error": e.error,
        })).collect::<Vec<_>>(),
    })
}

/// Where the latest scrub is.
#[derive(Clone, Debug, Default)]
struct Status {
    /// Scrubs started since mount; 0 before the first.
    id: u64,
    running: bool,
    order: String,
    done: u64,
    total: u64,
    report: Option<ScrubReport>,
    error: Option<String>,
}

impl Status {
    fn json(&self) -> Value {
        let state = match (self.id, self.running, &self.error) {
            (0, _, _) => "idle",
            (_, true, _) => "running",
            (_, false, Some(_)) => "failed",
            _ => "done",
        };
        json!({
            "id": self.id,
            "state": state,
            "request": self.order,
            "done": self.done,
            "total": self.total,
            "error": self.error,
            "report": self.report.as_ref().map(report_json),
        })
    }
}

/// The scrub running or last run through the control attribute: one at a time.
#[derive(Debug, Default)]
pub struct Scrubber {
    status: Arc<Mutex<Status>>,
    stop: Arc<AtomicBool>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl Scrubber {
    /// Starts a scrub in the background.
    ///
    /// # Errors
    /// EBUSY while one runs, EINVAL for a bad order, EAGAIN if no thread
    /// can be started.
    pub fn start(&self, vol: &Arc<Volume>, value: &[u8]) -> Result<(), Errno> {
        let text = std::str::from_utf8(value).map_err(|_| Errno::EINVAL)?;
        let opts = parse_order(text).map_err(|e| {
            log::warn!("{SCRUB}: {e}");
            Errno::EINVAL
        })?;
        let mut worker = lock(&self.worker);
        if lock(&self.status).running {
            return Err(Errno::EBUSY);
        }
        if let Some(h) = worker.take() {
            let _ = h.join();
        }
        self.stop.store(false, Ordering::Relaxed);
        {
            let mut s = lock(&self.status);
            *s = Status { id: s.id + 1, running: true, order: order_text(&opts), ..Status::default() };
        }
        let (vol, status, stop) = (vol.clone(), self.status.clone(), self.stop.clone());
        let spawned = std::thread::Builder::new().name("dualfs-scrub".into()).spawn(move || {
            log::info!("scrubbing: {}", order_text(&opts));
            let r = vol.scrub(opts, &mut |done, total| {
                let mut s = lock(&status);
                (s.done, s.total) = (done, total);
                !stop.load(Ordering::Relaxed)
            });
            let mut s = lock(&status);
            s.running = false;
            match r {
                Ok(report) => {
                    for b in &report.bad_meta {
                        log::error!("scrub: meta-data block {} ({}, {}): {}", b.block, b.structure, b.tree, b.error);
                    }
                    for e in &report.data_errors {
                        log::error!("scrub: data block {} of inode {}: {}", e.block, e.ino, e.error);
                    }
                    log::info!(
                        "scrubbed {} meta-data and {} data blocks: {} errors corrected, {} uncorrectable",
                        report.meta_blocks,
                        report.data_blocks,
                        report.corrected(),
                        report.uncorrectable()
                    );
                    s.report = Some(report);
                }
                Err(e) => {
                    log::error!("scrub failed: {e}");
                    s.error = Some(e.to_string());
                }
            }
        });
        match spawned {
            Ok(h) => {
                *worker = Some(h);
                Ok(())
            }
            Err(e) => {
                let mut s = lock(&self.status);
                s.running = false;
                s.error = Some(format!("cannot start the scrub's thread: {e}"));
                Err(Errno::EAGAIN)
            }
        }
    }

    /// The state of the latest scrub, as JSON text.
    #[must_use]
    pub fn status(&self) -> Vec<u8> {
        lock(&self.status).json().to_string().into_bytes()
    }

    /// Asks a running scrub to stop after the read in hand.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stops a running scrub and waits for it (at unmount).
    pub fn shutdown(&self) {
        self.stop();
        if let Some(h) = lock(&self.worker).take()
            && h.join().is_err()
        {
            log::error!("the scrub's thread panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_reads_back_what_it_prints() {
        for o in [ScrubOptions::default(), ScrubOptions { rate: Some(1 << 20), meta_only: true }] {
            let back = parse_order(&order_text(&o)).unwrap_or_default();
            assert_eq!((back.rate, back.meta_only), (o.rate, o.meta_only));
        }
        assert!(parse_order("rate=fast").is_err());
        assert!(parse_order("speed=1").is_err());
    }
}
