//! Progress of long work: `mkfs` of a large volume writes its whole IFile,
//! `fsck` reads every live block and checks every bitmap bit, which takes
//! seconds per TiB. A spinner on standard error tells a person waiting at a
//! terminal how much has been read or written so far, measured at the
//! devices, and for how long. It shows nothing to scripts (standard error
//! is not a terminal) and nothing for work done within a second.
//!
//! For mkfs and fsck it is a spinner, not a bar: how much there is to do is
//! only known to the engine's check and log layers, which report no phases.
//! `dualfs clean` knows how many segments it will clean, and shows a bar.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use dualfs_engine::device::BlockDevice;
use dualfs_engine::types::BLOCK_SIZE;
use indicatif::{ProgressBar, ProgressStyle};

use crate::words::human_bytes;

/// Work shorter than this shows nothing.
const SHOW_AFTER: Duration = Duration::from_secs(1);
/// How often the figures are redrawn.
const TICK: Duration = Duration::from_millis(100);

/// A device that counts the bytes read from and written to it.
#[derive(Debug)]
pub struct Metered {
    inner: Arc<dyn BlockDevice>,
    read: Arc<AtomicU64>,
    written: Arc<AtomicU64>,
}

/// Bytes moved through [`Metered`] devices.
#[derive(Clone, Debug, Default)]
pub struct Meter {
    /// Bytes read.
    pub read: Arc<AtomicU64>,
    /// Bytes written.
    pub written: Arc<AtomicU64>,
}

impl Meter {
    /// `dev`, counted by this meter.
    pub fn wrap(&self, dev: Arc<dyn BlockDevice>) -> Arc<dyn BlockDevice> {
        Arc::new(Metered { inner: dev, read: self.read.clone(), written: self.written.clone() })
    }
}

impl BlockDevice for Metered {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn refresh_block_count(&self) -> std::io::Result<u64> {
        self.inner.refresh_block_count()
    }

    fn copies(&self) -> usize {
        self.inner.copies()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_blocks(first, buf)?;
        self.read.fetch_add((buf.len() / BLOCK_SIZE * BLOCK_SIZE) as u64, Ordering::Relaxed);
        Ok(())
    }

    fn read_checked(&self, first: u64, buf: &mut [u8], right: &dyn Fn(usize, &[u8]) -> bool) -> std::io::Result<()> {
        self.inner.read_checked(first, buf, right)?;
        self.read.fetch_add((buf.len() / BLOCK_SIZE * BLOCK_SIZE) as u64, Ordering::Relaxed);
        Ok(())
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_blocks(first, buf)?;
        self.written.fetch_add((buf.len() / BLOCK_SIZE * BLOCK_SIZE) as u64, Ordering::Relaxed);
        Ok(())
    }

    fn write_blocks_vectored(&self, first: u64, bufs: &[&[u8]]) -> std::io::Result<()> {
        self.inner.write_blocks_vectored(first, bufs)?;
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        self.written.fetch_add((len / BLOCK_SIZE * BLOCK_SIZE) as u64, Ordering::Relaxed);
        Ok(())
    }

    fn write_runs(&self, runs: &[(u64, &[&[u8]])]) -> Result<(), (u64, std::io::Error)> {
        self.inner.write_runs(runs)?;
        let len: usize = runs.iter().flat_map(|(_, bufs)| bufs.iter()).map(|b| b.len()).sum();
        self.written.fetch_add((len / BLOCK_SIZE * BLOCK_SIZE) as u64, Ordering::Relaxed);
        Ok(())
    }

    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }

    fn discard(&self, first: u64, count: u64) -> std::io::Result<()> {
        self.inner.discard(first, count)
    }
}

/// A bar of `total` segments on standard error when it is a terminal
/// (hidden otherwise): what `dualfs clean` has done so far.
pub fn segment_bar(what: &str, total: usize) -> ProgressBar {
    unit_bar(what, total, "segments")
}

/// [`segment_bar`] counting `unit` (a template word: no braces).
#[must_use]
pub fn unit_bar(what: &str, total: usize, unit: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template(&format!("{{msg}} [{{bar:40}}] {{pos}}/{{len}} {unit} [{{elapsed}}]"))
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_string());
    bar
}

/// A bar of `total` bytes with the rate on standard error when it is a
/// terminal (hidden otherwise): what `dualfs scrub` has read so far.
#[must_use]
pub fn byte_bar(what: &str, total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} [{elapsed}]",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_string());
    bar
}

/// A spinner for one piece of long work; cleared when dropped.
#[derive(Debug)]
pub struct Activity {
    stop: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Activity {
    /// Shows `what` with the bytes `counter` counts (`verb`: "read",
    /// "written") once the work has lasted [`SHOW_AFTER`], if standard
    /// error is a terminal.
    pub fn start(what: String, counter: Arc<AtomicU64>, verb: &'static str) -> Activity {
        if !std::io::stderr().is_terminal() {
            return Activity { stop: None, handle: None };
        }
        let (stop, rx) = mpsc::channel::<()>();
        let handle = thread::Builder::new()
            .name("dualfs-progress".into())
            .spawn(move || {
                if rx.recv_timeout(SHOW_AFTER) != Err(RecvTimeoutError::Timeout) {
                    return;
                }
                let bar = ProgressBar::new_spinner().with_elapsed(SHOW_AFTER);
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                loop {
                    bar.set_message(format!("{what}: {} {verb}", human_bytes(counter.load(Ordering::Relaxed))));
                    bar.tick();
                    if rx.recv_timeout(TICK) != Err(RecvTimeoutError::Timeout) {
                        break;
                    }
                }
                bar.finish_and_clear();
            })
            .ok();
        Activity { stop: Some(stop), handle }
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use dualfs_engine::device::MemoryDevice;

    use super::*;

    #[test]
    fn a_metered_device_counts_what_moves_through_it() {
        let meter = Meter::default();
        let dev = meter.wrap(Arc::new(MemoryDevice::new(16)));
        dev.write_blocks(2, &[7u8; 2 * BLOCK_SIZE]).unwrap_or_else(|e| panic!("{e}"));
        let mut buf = [0u8; 3 * BLOCK_SIZE];
        dev.read_blocks(1, &mut buf).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(buf[BLOCK_SIZE], 7);
        assert_eq!(meter.written.load(Ordering::Relaxed), 2 * BLOCK_SIZE as u64);
        assert_eq!(meter.read.load(Ordering::Relaxed), 3 * BLOCK_SIZE as u64);
        assert!(dev.write_blocks(15, &[0u8; 2 * BLOCK_SIZE]).is_err(), "errors pass through, uncounted");
        assert_eq!(meter.written.load(Ordering::Relaxed), 2 * BLOCK_SIZE as u64);
    }

    #[test]
    fn short_work_shows_nothing_and_ends_at_once() {
        let start = std::time::Instant::now();
        drop(Activity::start("testing".into(), Arc::new(AtomicU64::new(0)), "read"));
        assert!(start.elapsed() < Duration::from_millis(500));
    }
}
