//! The disk models, in one place for `trace replay` (the total I/O time of
//! a recorded trace) and `trace serve --model` (every request answered
//! when the modelled disk would have answered it, so that any file system
//! on a loop device over the served image runs on an emulated disk).
//!
//! A [`Drive`] is a discrete-event model driven by the caller's clock, in
//! milliseconds: requests are [`Drive::submit`]ted at a time; those the
//! drive answers at once (a read-ahead hit, a write taken into the write
//! cache, anything on the SSD) come back with their completion time, the
//! others wait for the head, which the caller runs with
//! [`Drive::start_next`] and [`Drive::finish`]. The replay runs the clock
//! itself; the server runs it in real time and sleeps until each
//! completion.
//!
//! A spinning disk ([`hdd`]): a seek on a square-root curve from
//! track-to-track to full stroke (as Ruemmler and Wilkes fit real disks),
//! the rotational wait from the platter's angle at the time the head
//! arrives (so back-to-back sequential transfers pay none and a late one
//! waits for the sector to come round), transfer at the media rate, a
//! per-command overhead; read-ahead into a segment while the head is idle
//! after a read (the paper credits its disk's 512 KiB read-ahead for
//! DualFS's fast meta-data reads); a write cache that takes writes at bus
//! speed, merges adjacent ones and writes them back when the head is free,
//! which a flush waits for; one head serving the queue in one-way elevator
//! order (C-LOOK), which stands for the kernel's elevator and the drive's
//! own queue together. An SSD ([`ssd`]): a fixed latency per request,
//! several requests at once on its channels, one shared transfer link, a
//! cost per flush.

mod hdd;
pub mod predict;
mod ssd;
#[cfg(test)]
mod tests;

use clap::ValueEnum;
use serde_json::{Value, json};

/// Milliseconds on the model's clock.
pub type Ms = f64;

/// The disk models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Model {
    /// The paper's 5,400 rpm IDE disk.
    Hdd5400,
    /// A current 7,200 rpm SATA disk.
    Hdd7200,
    /// A SATA SSD.
    Ssd,
}

impl Model {
    /// The name on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Model::Hdd5400 => "hdd5400",
            Model::Hdd7200 => "hdd7200",
            Model::Ssd => "ssd",
        }
    }
}

/// The parameters of each model, for `--help` and BENCHMARKS.md.
pub const HELP: &str = "\
Models:
  hdd5400  the DualFS paper's disk (Seagate ST-34310A, 5,400 rpm IDE):
           seek 1.5-21 ms on a square-root curve, 10 MB/s media, 33 MB/s
           bus, 0.3 ms per command, one 512 KiB read-ahead segment,
           512 KiB write cache
  hdd7200  a current 7,200 rpm SATA disk: seek 0.8-16 ms, 160 MB/s media,
           600 MB/s bus, 0.1 ms per command, four 2 MiB read-ahead
           segments, 16 MiB write cache
  ssd      a SATA SSD: 80 us per read, 30 us per write, 4 channels, one
           500 MB/s link, 0.5 ms per flush, 50 us per discard";

/// What a request asks of the drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read bytes.
    Read,
    /// Write bytes.
    Write,
    /// Make every completed write durable (drain the write cache).
    Flush,
    /// Forget a range (TRIM): free on a disk, a command on an SSD.
    Discard,
    /// Write zeros over a range (what a loop device's write-zeroes becomes).
    Zero,
}

/// One request: an operation on `len` bytes at byte `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub op: Op,
    pub offset: u64,
    pub len: u64,
}

/// Names a request the drive answers later, in [`Drive::finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// What [`Drive::submit`] says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Submitted {
    /// Answered without waiting for the head, complete at this time.
    At(Ms),
    /// Waits for the head; [`Drive::finish`] names it when it completes.
    Later(Ticket),
}

/// What the drive did, for the server's statistics and the tests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    /// Requests by operation: read, write, flush, discard, zero.
    pub requests: [u64; 5],
    /// Bytes read and written (zeros included) by the host.
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Reads answered from a read-ahead segment.
    pub read_ahead_hits: u64,
    /// Reads the head served by reading on from where its read-ahead was.
    pub streamed_reads: u64,
    /// Reads answered from data still in the write cache.
    pub write_cache_hits: u64,
    /// Writes taken into the write cache, and those that had to wait for room.
    pub cached_writes: u64,
    pub blocked_writes: u64,
    /// Writes of the cache to the platter (after merging), and their bytes.
    pub destages: u64,
    pub destage_bytes: u64,
    /// Time the head (or the SSD's channels) spent working, ms.
    pub busy_ms: f64,
    /// Positioning time (seek plus rotational wait) among it, ms.
    pub positioning_ms: f64,
}

impl Counters {
    fn count(&mut self, r: &Request) {
        let i = match r.op {
            Op::Read => 0,
            Op::Write => 1,
            Op::Flush => 2,
            Op::Discard => 3,
            Op::Zero => 4,
        };
        self.requests[i] += 1;
        match r.op {
            Op::Read => self.read_bytes += r.len,
            Op::Write | Op::Zero => self.write_bytes += r.len,
            Op::Flush | Op::Discard => {}
        }
    }

    /// As JSON, for the served `stats` file.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let [reads, writes, flushes, discards, zeros] = self.requests;
        json!({
            "reads": reads, "writes": writes, "flushes": flushes, "discards": discards, "zeros": zeros,
            "read_bytes": self.read_bytes, "write_bytes": self.write_bytes,
            "read_ahead_hits": self.read_ahead_hits, "streamed_reads": self.streamed_reads,
            "write_cache_hits": self.write_cache_hits, "cached_writes": self.cached_writes,
            "blocked_writes": self.blocked_writes, "destages": self.destages, "destage_bytes": self.destage_bytes,
            "busy_ms": self.busy_ms, "positioning_ms": self.positioning_ms,
        })
    }
}

#[derive(Debug)]
enum Kind {
    Hdd(Box<hdd::Hdd>),
    Ssd(ssd::Ssd),
}

/// One emulated drive.
#[derive(Debug)]
pub struct Drive {
    kind: Kind,
    next_ticket: u64,
    counters: Counters,
}

impl Drive {
    /// A drive of `model` whose addresses run over `span_bytes`, with its
    /// write cache on or off (an SSD has none to turn off: its writes are
    /// always acknowledged from its own memory, and a flush costs the same).
    #[must_use]
    pub fn new(model: Model, span_bytes: u64, write_cache: bool) -> Drive {
        let kind = match model {
            Model::Hdd5400 => Kind::Hdd(Box::new(hdd::Hdd::new(hdd::HDD5400, span_bytes, write_cache))),
            Model::Hdd7200 => Kind::Hdd(Box::new(hdd::Hdd::new(hdd::HDD7200, span_bytes, write_cache))),
            Model::Ssd => Kind::Ssd(ssd::Ssd::new(ssd::SSD)),
        };
        Drive { kind, next_ticket: 0, counters: Counters::default() }
    }

    /// A request arrives at `now` (times never go back).
    pub fn submit(&mut self, now: Ms, req: Request) -> Submitted {
        self.counters.count(&req);
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        match &mut self.kind {
            Kind::Hdd(h) => h.submit(now, req, ticket, &mut self.counters),
            Kind::Ssd(s) => Submitted::At(s.submit(now, req, &mut self.counters)),
        }
    }

    /// Whether the drive has nothing left to do (an SSD never has).
    #[must_use]
    pub fn idle(&self) -> bool {
        match &self.kind {
            Kind::Hdd(h) => h.idle(),
            Kind::Ssd(_) => true,
        }
    }

    /// When the head is free and has work, starts the next request (at the
    /// later of the time the head became free and the request's arrival)
    /// and returns when it ends; `None` when there is nothing to do.
    pub fn start_next(&mut self) -> Option<Ms> {
        match &mut self.kind {
            Kind::Hdd(h) => h.start_next(&mut self.counters),
            Kind::Ssd(_) => None,
        }
    }

    /// The end of the head's current request (call at the time
    /// [`Drive::start_next`] returned): the requests completed by it, with
    /// their completion times.
    pub fn finish(&mut self) -> Vec<(Ticket, Ms)> {
        match &mut self.kind {
            Kind::Hdd(h) => h.finish(&mut self.counters),
            Kind::Ssd(_) => Vec::new(),
        }
    }

    /// What the drive did so far.
    #[must_use]
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}
