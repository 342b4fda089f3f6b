//! Block-level semantic tracing: a device that records every request made
//! to the device it wraps, and what the blocks hold.
//!
//! This is the semantic block-level analysis of Prabhakaran et al. (USENIX
//! 2005) done where DualFS can do it cheaply: in the device layer, below
//! the engine. Each read, write and flush becomes one line of a text trace:
//! when it started, how long the device took, which device, which blocks,
//! and the classes of those blocks (superblock, checkpoint, descriptor,
//! inode block, directory / extent / xattr node, blob, IFile, data), found by
//! decoding the self-identifying header every meta-data block carries.
//!
//! Tracing off costs nothing: the volume's devices are simply not wrapped.
//!
//! The format, one request per line (`#` lines are comments and headers):
//!
//! ```text
//! # dualfs-trace 1
//! # device m blocks=104448 name=meta.img
//! 1718000000123456789 8123 m W 1024 9 descriptor*1+dir*3+inode*5
//! 1718000000123470000 140211 m F 0 0 -
//! ```
//!
//! Fields: start time (ns since the Unix epoch), duration (ns), device
//! (`m` meta-data, `d` data), operation (`R`, `W`, `F`), first block,
//! block count, and the classes in block order as `class*count` runs
//! joined by `+` (`-` for a flush). Blocks are [`BLOCK_SIZE`] bytes.

use std::fmt::{self, Write as _};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::BlockDevice;
use crate::types::BLOCK_SIZE;

/// The first line of every trace file.
pub const TRACE_HEADER: &str = "# dualfs-trace 1";

/// Which device of a volume a request went to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum TraceDevice {
    /// The meta-data device (for a peer file system: its journal or log device).
    Meta,
    /// The data device (for a peer file system: its main device).
    Data,
}

impl TraceDevice {
    /// The letter used in trace files.
    #[must_use]
    pub fn letter(self) -> char {
        match self {
            TraceDevice::Meta => 'm',
            TraceDevice::Data => 'd',
        }
    }

    /// The device a trace letter names.
    #[must_use]
    pub fn from_letter(s: &str) -> Option<TraceDevice> {
        match s {
            "m" => Some(TraceDevice::Meta),
            "d" => Some(TraceDevice::Data),
            _ => None,
        }
    }
}

/// A request's operation.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum TraceOp {
    /// Blocks read.
    Read,
    /// Blocks written.
    Write,
    /// A cache flush (fsync of the image or device).
    Flush,
    /// Blocks discarded (TRIM).
    Discard,
}

impl TraceOp {
    /// The letter used in trace files.
    #[must_use]
    pub fn letter(self) -> char {
        match self {
            TraceOp::Read => 'R',
            TraceOp::Write => 'W',
            TraceOp::Flush => 'F',
            TraceOp::Discard => 'D',
        }
    }
}

macro_rules! block_classes {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// What a block holds, as far as the trace can tell.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
        pub enum BlockClass {
            $($(#[$doc])* $variant,)*
        }

        impl BlockClass {
            /// Every class, in the order summaries list them.
            pub const ALL: &'static [BlockClass] = &[$(BlockClass::$variant,)*];

            /// The name used in trace files and summaries.
            #[must_use]
            pub fn name(self) -> &'static str {
                match self { $(BlockClass::$variant => $name,)* }
            }

            /// The class a trace file names.
            #[must_use]
            pub fn from_name(s: &str) -> Option<BlockClass> {
                match s { $($name => Some(BlockClass::$variant),)* _ => None }
            }
        }
    };
}

block_classes! {
    /// Block 0 of either device.
    Superblock => "superblock",
    /// A checkpoint slot.
    Checkpoint => "checkpoint",
    /// A partial-segment descriptor block.
    Descriptor => "descriptor",
    /// A block of packed inodes.
    Inode => "inode",
    /// A directory B-tree node.
    Dir => "dir",
    /// An extent-map B-tree node.
    Extent => "extent",
    /// An extended-attribute B-tree node.
    Xattr => "xattr",
    /// A blob block (long symlink target, large xattr value).
    Blob => "blob",
    /// An IFile table block.
    IFile => "ifile",
    /// An IFile index block.
    IFileIndex => "ifile-index",
    /// A snapshot list or snapshot block.
    Snapshot => "snapshot",
    /// A meta-data device block that decodes as nothing (never written, or stale).
    Unknown => "unknown",
    /// File contents on the data device.
    Data => "data",
    /// A peer file system's main device (its blocks are not decoded).
    Fs => "fs",
    /// A peer file system's external journal or log device.
    Journal => "journal",
}

impl fmt::Display for BlockClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the tracer names a block, from its address and bytes. The device
/// layer knows no format, so whoever wraps a volume's devices hands in the
/// format's classifier ([`crate::format::classify`]).
pub type Classifier = fn(address: u64, block: &[u8]) -> BlockClass;

/// The classes of a run of blocks as `(class, count)` runs in block order.
#[must_use]
pub fn classify(classifier: Classifier, first: u64, buf: &[u8]) -> Vec<(BlockClass, u32)> {
    let mut runs: Vec<(BlockClass, u32)> = Vec::new();
    for (i, block) in buf.chunks(BLOCK_SIZE).enumerate() {
        let class = classifier(first + i as u64, block);
        match runs.last_mut() {
            Some((c, n)) if *c == class => *n += 1,
            _ => runs.push((class, 1)),
        }
    }
    runs
}

/// One request, as a trace line holds it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TraceRecord {
    /// When the request started, in ns since the Unix epoch.
    pub start_ns: u64,
    /// How long the device took, in ns.
    pub duration_ns: u64,
    /// Which device.
    pub device: TraceDevice,
    /// Read, write or flush.
    pub op: TraceOp,
    /// First block (0 for a flush).
    pub first: u64,
    /// Number of blocks (0 for a flush).
    pub count: u64,
    /// The blocks' classes in block order, as runs.
    pub classes: Vec<(BlockClass, u32)>,
}

impl TraceRecord {
    /// The line (without its newline) this record is stored as.
    #[must_use]
    pub fn to_line(&self) -> String {
        let mut s = String::with_capacity(64);
        // Writing to a String cannot fail.
        let _ = write!(
            s,
            "{} {} {} {} {} {} ",
            self.start_ns,
            self.duration_ns,
            self.device.letter(),
            self.op.letter(),
            self.first,
            self.count
        );
        if self.classes.is_empty() {
            s.push('-');
        }
        for (i, (class, n)) in self.classes.iter().enumerate() {
            if i > 0 {
                s.push('+');
            }
            let _ = write!(s, "{class}*{n}");
        }
        s
    }

    /// Parses a request line; `None` for a comment or a blank line.
    ///
    /// # Errors
    /// A malformed line, with the reason.
    pub fn parse(line: &str) -> Result<Option<TraceRecord>, String> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return Ok(None);
        }
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.len() != 7 {
            return Err(format!("{} fields where 7 were expected", f.len()));
        }
        let num = |i: usize, what: &str| f[i].parse::<u64>().map_err(|_| format!("bad {what} {:?}", f[i]));
        let device = TraceDevice::from_letter(f[2]).ok_or_else(|| format!("bad device {:?}", f[2]))?;
        let op = match f[3] {
            "R" => TraceOp::Read,
            "W" => TraceOp::Write,
            "F" => TraceOp::Flush,
            "D" => TraceOp::Discard,
            other => return Err(format!("bad operation {other:?}")),
        };
        let mut classes = Vec::new();
        if f[6] != "-" {
            for run in f[6].split('+') {
                let (name, n) = run.split_once('*').ok_or_else(|| format!("bad class run {run:?}"))?;
                let class = BlockClass::from_name(name).ok_or_else(|| format!("unknown class {name:?}"))?;
                let n = n.parse::<u32>().map_err(|_| format!("bad class count {n:?}"))?;
                classes.push((class, n));
            }
        }
        Ok(Some(TraceRecord {
            start_ns: num(0, "time")?,
            duration_ns: num(1, "duration")?,
            device,
            op,
            first: num(4, "block")?,
            count: num(5, "count")?,
            classes,
        }))
    }
}

/// Where the records of one or more traced devices go: one text file,
/// buffered, shared by the devices of a volume.
#[derive(Debug)]
pub struct TraceSink {
    out: Mutex<Option<BufWriter<File>>>,
    epoch_unix_ns: u64,
    epoch: Instant,
}

impl TraceSink {
    /// Creates (or truncates) the trace file and writes its header.
    ///
    /// # Errors
    /// The file cannot be created or written.
    pub fn create(path: &Path) -> io::Result<Arc<TraceSink>> {
        let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
        writeln!(out, "{TRACE_HEADER}")?;
        let epoch_unix_ns =
            SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_nanos()).unwrap_or(0)).unwrap_or(0);
        Ok(Arc::new(TraceSink { out: Mutex::new(Some(out)), epoch_unix_ns, epoch: Instant::now() }))
    }

    fn lock(&self) -> MutexGuard<'_, Option<BufWriter<File>>> {
        self.out.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Nanoseconds since the Unix epoch, on a monotonic clock.
    #[must_use]
    pub fn now_ns(&self, at: Instant) -> u64 {
        let since = u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        self.epoch_unix_ns.saturating_add(since)
    }

    /// Writes a header or comment line (`# ` is prepended).
    pub fn comment(&self, text: &str) {
        self.write_line(&format!("# {text}"));
    }

    /// Appends one record.
    pub fn record(&self, record: &TraceRecord) {
        self.write_line(&record.to_line());
    }

    fn write_line(&self, line: &str) {
        let mut out = self.lock();
        if let Some(w) = out.as_mut()
            && let Err(e) = writeln!(w, "{line}")
        {
            // A trace that cannot be written must not fail the file system:
            // stop tracing and say so once.
            log::error!("trace file write failed, tracing stopped: {e}");
            *out = None;
        }
    }

    /// Writes out what is buffered.
    ///
    /// # Errors
    /// The trace file cannot be written.
    pub fn flush(&self) -> io::Result<()> {
        match self.lock().as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for TraceSink {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            log::error!("trace file could not be completed: {e}");
        }
    }
}

/// A device that records every request to the device it wraps.
#[derive(Debug)]
pub struct TracingDevice {
    inner: Arc<dyn BlockDevice>,
    device: TraceDevice,
    sink: Arc<TraceSink>,
    classifier: Classifier,
}

impl TracingDevice {
    /// Wraps `inner` as the `device` of a volume; writes a header line
    /// naming it (`name` is for people: a path or a role). `classifier`
    /// names the blocks of each request.
    #[must_use]
    pub fn new(
        inner: Arc<dyn BlockDevice>,
        device: TraceDevice,
        name: &str,
        sink: Arc<TraceSink>,
        classifier: Classifier,
    ) -> TracingDevice {
        sink.comment(&format!("device {} blocks={} name={}", device.letter(), inner.block_count(), name));
        TracingDevice { inner, device, sink, classifier }
    }

    fn log(&self, start: Instant, op: TraceOp, first: u64, buf: &[u8]) {
        let count = (buf.len() / BLOCK_SIZE) as u64;
        let classes = if op == TraceOp::Flush { Vec::new() } else { classify(self.classifier, first, buf) };
        self.log_count(start, op, first, count, classes);
    }

    fn log_count(&self, start: Instant, op: TraceOp, first: u64, count: u64, classes: Vec<(BlockClass, u32)>) {
        let end = Instant::now();
        self.sink.record(&TraceRecord {
            start_ns: self.sink.now_ns(start),
            duration_ns: u64::try_from(end.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX),
            device: self.device,
            op,
            first,
            count,
            classes,
        });
    }
}

impl BlockDevice for TracingDevice {
    fn copies(&self) -> usize {
        self.inner.copies()
    }

    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn refresh_block_count(&self) -> io::Result<u64> {
        self.inner.refresh_block_count()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        let start = Instant::now();
        self.inner.read_blocks(first, buf)?;
        self.log(start, TraceOp::Read, first, buf);
        Ok(())
    }

    fn read_checked(&self, first: u64, buf: &mut [u8], right: &dyn Fn(usize, &[u8]) -> bool) -> io::Result<()> {
        let start = Instant::now();
        self.inner.read_checked(first, buf, right)?;
        self.log(start, TraceOp::Read, first, buf);
        Ok(())
    }

    /// Passed on, not recorded: the device reads (or not) on its own time,
    /// and a read it served from its cache shows as a short one.
    fn will_need(&self, first: u64, count: u64) {
        self.inner.will_need(first, count);
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        let start = Instant::now();
        self.inner.write_blocks(first, buf)?;
        self.log(start, TraceOp::Write, first, buf);
        Ok(())
    }

    fn write_blocks_vectored(&self, first: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let start = Instant::now();
        self.inner.write_blocks_vectored(first, bufs)?;
        // The trace classifies each block by its bytes: one record of the
        // request, its bytes gathered only for the log.
        self.log(start, TraceOp::Write, first, &bufs.concat());
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let start = Instant::now();
        self.inner.flush()?;
        self.log(start, TraceOp::Flush, 0, &[]);
        Ok(())
    }

    fn discard(&self, first: u64, count: u64) -> io::Result<()> {
        let start = Instant::now();
        self.inner.discard(first, count)?;
        // Nothing is left to classify.
        self.log_count(start, TraceOp::Discard, first, count, Vec::new());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    /// The data device's classes as the format gives them; the device layer
    /// cannot ask the format, so its test states them.
    fn data_classes(address: u64, _block: &[u8]) -> BlockClass {
        if address == 0 { BlockClass::Superblock } else { BlockClass::Data }
    }

    #[test]
    fn records_survive_a_round_trip_through_a_line() {
        let r = TraceRecord {
            start_ns: 1_700_000_000_000_000_001,
            duration_ns: 5120,
            device: TraceDevice::Meta,
            op: TraceOp::Write,
            first: 1024,
            count: 9,
            classes: vec![(BlockClass::Descriptor, 1), (BlockClass::Dir, 3), (BlockClass::Inode, 5)],
        };
        let line = r.to_line();
        assert_eq!(line, "1700000000000000001 5120 m W 1024 9 descriptor*1+dir*3+inode*5");
        assert_eq!(TraceRecord::parse(&line), Ok(Some(r)));
        assert_eq!(TraceRecord::parse("# comment"), Ok(None));
        assert!(TraceRecord::parse("1 2 x W 0 1 data*1").is_err());
        assert!(TraceRecord::parse("1 2 d W 0 1 bogus*1").is_err());
        assert!(TraceRecord::parse("1 2 d W").is_err());
    }

    #[test]
    fn a_traced_device_records_every_request_and_passes_it_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        let sink = TraceSink::create(&path).unwrap();
        let inner: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(16));
        let dev = TracingDevice::new(inner.clone(), TraceDevice::Data, "data", sink.clone(), data_classes);
        let buf = vec![7u8; 2 * BLOCK_SIZE];
        dev.write_blocks(0, &buf).unwrap();
        dev.flush().unwrap();
        let mut back = vec![0u8; BLOCK_SIZE];
        dev.read_blocks(1, &mut back).unwrap();
        assert_eq!(back, vec![7u8; BLOCK_SIZE]);
        drop(dev);
        drop(sink);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], TRACE_HEADER);
        assert_eq!(lines[1], "# device d blocks=16 name=data");
        let recs: Vec<TraceRecord> = lines.iter().filter_map(|l| TraceRecord::parse(l).unwrap()).collect();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].classes, vec![(BlockClass::Superblock, 1), (BlockClass::Data, 1)]);
        assert_eq!((recs[1].op, recs[1].count), (TraceOp::Flush, 0));
        assert_eq!((recs[2].op, recs[2].first, recs[2].count), (TraceOp::Read, 1, 1));
    }
}
