//! `dualfs scrub MOUNTPOINT`: the serving process scrubs the mounted
//! volume in a thread of its own while requests go on. The client sets the
//! control attribute `dualfs.scrub` to the order ([`ScrubOrder`]), reads
//! it for the progress and, at the end, the report ([`report_json`], one
//! shape mounted or not), and removes it to stop a scrub early.

use std::sync::Arc;

use dualfs_engine::Volume;
use dualfs_engine::volume::{ScrubOptions, ScrubReport};
use serde_json::{Value, json};

use crate::Errno;
use crate::job::Job;

/// Set to start a scrub, read for its state, removed to stop it.
pub const SCRUB: &str = "dualfs.scrub";

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
        "degraded": r.degraded,
        "per_copy": (1..=r.copies.max(1)).map(|c| {
            let (bad, repaired) = r.bad_on_copy(c);
            json!({ "copy": c, "bad": bad, "repaired": repaired, "unrepaired": bad - repaired })
        }).collect::<Vec<_>>(),
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
            "copies": b.copies,
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

/// The scrub running or last run through the control attribute: one at a time.
#[derive(Debug)]
pub struct Scrubber(Job<ScrubReport>);

impl Default for Scrubber {
    fn default() -> Self {
        Scrubber(Job::new("scrub", "scrub"))
    }
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
        let vol = vol.clone();
        self.0.start(order_text(&opts), 0, move |progress| {
            log::info!("scrubbing: {}", order_text(&opts));
            let report = vol.scrub(opts, progress).map_err(|e| e.to_string())?;
            if let Some(why) = &report.degraded {
                log::warn!("scrub: the meta-data mirror is degraded ({why}): one copy read");
            }
            for b in &report.bad_meta {
                let done = if b.repaired { "rewritten from the other copy" } else { "not repaired" };
                log::error!("scrub: meta-data block {} ({}, {}): {}; {done}", b.block, b.structure, b.tree, b.error);
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
            Ok(report)
        })
    }

    /// The state of the latest scrub, as JSON text.
    #[must_use]
    pub fn status(&self) -> Vec<u8> {
        self.0.json(|r| r.map_or(Value::Null, report_json))
    }

    /// Asks a running scrub to stop after the read in hand.
    pub fn stop(&self) {
        self.0.stop();
    }

    /// Stops a running scrub and waits for it (at unmount).
    pub fn shutdown(&self) {
        self.0.shutdown();
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
