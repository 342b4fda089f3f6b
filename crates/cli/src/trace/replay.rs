//! `dualfs trace replay`: total I/O time of a trace under a disk model.
//!
//! The DualFS paper's metric is the total time the disks spend serving the
//! file system's requests. These machines have no spinning disk (a seek
//! costs nothing on a loop device over a virtual disk), so the trace is
//! replayed, request by request in the order it was issued, through a
//! model of one: seek (a square-root curve from track-to-track to full
//! stroke, as Ruemmler and Wilkes fit real disks), rotational latency
//! (half a revolution on average, none when a request continues where the
//! head is), transfer at the media rate, a per-command overhead, and the
//! drive's read-ahead segment (the paper credits the 512 KiB read-ahead of
//! its IDE disks for DualFS's fast meta-data reads). Writes go straight to
//! the platter (write cache off, as a journaling file system's ordering
//! assumes), so a flush costs nothing on a disk. The SSD model charges a
//! fixed latency per request, a transfer rate, and a cost per flush.
//! Requests do not overlap: total I/O time is the sum of service times.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use clap::ValueEnum;
use dualfs_engine::device::tracing::{BlockClass, TraceDevice, TraceOp};
use dualfs_engine::types::BLOCK_BYTES;
use serde_json::{Value, json};

use super::{Layout, Trace};

pub const HELP: &str = "\
Models:
  hdd5400  the DualFS paper's disk (Seagate ST-34310A, 5,400 rpm IDE):
           seek 1.5-21 ms, 9.3 ms average; 10 MB/s; 512 KiB read-ahead
  hdd7200  a current 7,200 rpm SATA disk: seek 0.8-16 ms, 8.5 ms average;
           160 MB/s; 2 MiB read-ahead
  ssd      a SATA SSD: 80 us per read, 30 us per write, 500 MB/s, 0.5 ms per flush

Layouts: one-disk puts the meta-data (or journal) device on the outer
tracks and the data device after it, on one disk whose size is their sum;
two-disks gives each device a disk of its own, as large as the larger
device. Write caches are off: a flush costs nothing on a disk.";

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

/// A spinning disk's parameters.
#[derive(Clone, Copy, Debug)]
struct Hdd {
    track_to_track_ms: f64,
    full_stroke_ms: f64,
    rpm: f64,
    media_mb_s: f64,
    bus_mb_s: f64,
    overhead_ms: f64,
    read_ahead_bytes: u64,
}

const HDD5400: Hdd = Hdd {
    track_to_track_ms: 1.5,
    full_stroke_ms: 21.0,
    rpm: 5400.0,
    media_mb_s: 10.0,
    bus_mb_s: 33.0,
    overhead_ms: 0.3,
    read_ahead_bytes: 512 << 10,
};

const HDD7200: Hdd = Hdd {
    track_to_track_ms: 0.8,
    full_stroke_ms: 16.0,
    rpm: 7200.0,
    media_mb_s: 160.0,
    bus_mb_s: 600.0,
    overhead_ms: 0.1,
    read_ahead_bytes: 2 << 20,
};

/// A solid-state disk's parameters.
#[derive(Clone, Copy, Debug)]
struct Ssd {
    read_ms: f64,
    write_ms: f64,
    mb_s: f64,
    flush_ms: f64,
}

const SSD: Ssd = Ssd { read_ms: 0.08, write_ms: 0.03, mb_s: 500.0, flush_ms: 0.5 };

/// One disk's state during a replay, in disk blocks.
#[derive(Debug)]
struct Disk {
    span: u64,
    head: Option<u64>,
    read_ahead: (u64, u64),
}

impl Disk {
    fn new(span: u64) -> Disk {
        Disk { span: span.max(1), head: None, read_ahead: (0, 0) }
    }

    fn hdd(&mut self, p: &Hdd, op: TraceOp, first: u64, count: u64) -> f64 {
        let bytes = count as f64 * BLOCK_BYTES as f64;
        let end = first.saturating_add(count);
        match op {
            // A disk has no TRIM: the kernel refuses it before the drive.
            TraceOp::Flush | TraceOp::Discard => 0.0,
            TraceOp::Read if first >= self.read_ahead.0 && end <= self.read_ahead.1 => {
                p.overhead_ms + bytes / (p.bus_mb_s * 1e3)
            }
            _ => {
                let position = match self.head {
                    Some(h) if h == first => 0.0,
                    Some(h) => {
                        let distance = h.abs_diff(first) as f64 / self.span as f64;
                        p.track_to_track_ms
                            + (p.full_stroke_ms - p.track_to_track_ms) * distance.min(1.0).sqrt()
                            + 0.5 * 60_000.0 / p.rpm
                    }
                    None => 0.5 * 60_000.0 / p.rpm,
                };
                self.head = Some(end);
                self.read_ahead = if op == TraceOp::Read {
                    (first, end.saturating_add(p.read_ahead_bytes / BLOCK_BYTES))
                } else if first < self.read_ahead.1 && end > self.read_ahead.0 {
                    (0, 0)
                } else {
                    self.read_ahead
                };
                p.overhead_ms + position + bytes / (p.media_mb_s * 1e3)
            }
        }
    }
}

fn ssd(p: &Ssd, op: TraceOp, count: u64) -> f64 {
    let transfer = count as f64 * BLOCK_BYTES as f64 / (p.mb_s * 1e3);
    match op {
        TraceOp::Read => p.read_ms + transfer,
        TraceOp::Write => p.write_ms + transfer,
        TraceOp::Flush => p.flush_ms,
        // A command that moves no data.
        TraceOp::Discard => p.write_ms,
    }
}

/// Time spent per device and operation.
#[derive(Debug, Default)]
pub struct Replay {
    /// The model replayed through.
    pub model: &'static str,
    /// The layout.
    pub layout: &'static str,
    /// Milliseconds and requests per device and operation.
    pub per: BTreeMap<(TraceDevice, TraceOp), (f64, u64)>,
    /// Milliseconds per class of block: a request's time is shared among
    /// its blocks' classes in proportion to their blocks.
    pub per_class: BTreeMap<BlockClass, f64>,
}

impl Replay {
    /// Total I/O time in seconds.
    #[must_use]
    pub fn total_s(&self) -> f64 {
        self.per.values().map(|(ms, _)| ms).sum::<f64>() / 1e3
    }

    /// I/O time of one device in seconds.
    #[must_use]
    pub fn device_s(&self, d: TraceDevice) -> f64 {
        self.per.iter().filter(|((dd, _), _)| *dd == d).map(|(_, (ms, _))| ms).sum::<f64>() / 1e3
    }
}

/// Replays a trace through a model.
#[must_use]
pub fn replay(t: &Trace, model: Model, layout: Layout) -> Replay {
    let meta = t.devices.get(&TraceDevice::Meta).copied().unwrap_or(0);
    let data = t.devices.get(&TraceDevice::Data).copied().unwrap_or(0);
    // One disk: meta-data on the outer tracks, data after it. Two disks:
    // each device at the start of its own disk.
    let (data_offset, spans) = match layout {
        Layout::OneDisk => (meta, vec![meta.saturating_add(data)]),
        Layout::TwoDisks => (0, vec![meta.max(data); 2]),
    };
    let disk_of = |d: TraceDevice| usize::from(layout == Layout::TwoDisks && d == TraceDevice::Data);
    let mut disks: Vec<Disk> = spans.into_iter().map(Disk::new).collect();
    let mut out = Replay {
        model: model.name(),
        layout: match layout {
            Layout::OneDisk => "one-disk",
            Layout::TwoDisks => "two-disks",
        },
        per: BTreeMap::new(),
        per_class: BTreeMap::new(),
    };
    for r in &t.records {
        let first = r.first.saturating_add(if r.device == TraceDevice::Data { data_offset } else { 0 });
        let disk = &mut disks[disk_of(r.device)];
        let ms = match model {
            Model::Hdd5400 => disk.hdd(&HDD5400, r.op, first, r.count),
            Model::Hdd7200 => disk.hdd(&HDD7200, r.op, first, r.count),
            Model::Ssd => ssd(&SSD, r.op, r.count),
        };
        let e = out.per.entry((r.device, r.op)).or_insert((0.0, 0));
        e.0 += ms;
        e.1 += 1;
        let blocks: u64 = r.classes.iter().map(|(_, n)| u64::from(*n)).sum();
        for (class, n) in &r.classes {
            *out.per_class.entry(*class).or_default() += ms * f64::from(*n) / blocks.max(1) as f64;
        }
    }
    out
}

fn names(d: TraceDevice, o: TraceOp) -> (&'static str, &'static str) {
    let dn = if d == TraceDevice::Meta { "meta" } else { "data" };
    let on = match o {
        TraceOp::Read => "read",
        TraceOp::Write => "write",
        TraceOp::Flush => "flush",
        TraceOp::Discard => "discard",
    };
    (dn, on)
}

/// The replay as a table for people.
#[must_use]
pub fn to_text(r: &Replay) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "model {}, layout {}: total I/O time {:.3} s", r.model, r.layout, r.total_s());
    for ((d, o), (ms, n)) in &r.per {
        let (dn, on) = names(*d, *o);
        let mean = if *n == 0 { 0.0 } else { ms / *n as f64 };
        let _ = writeln!(out, "  {dn} {on:<6} {n:>9} requests {:>10.3} s  {mean:>7.3} ms each", ms / 1e3);
    }
    if !r.per_class.is_empty() {
        let _ = writeln!(out, "by class of block:");
        for (class, ms) in &r.per_class {
            let _ = writeln!(out, "  {:<12} {:>10.3} s", class.name(), ms / 1e3);
        }
    }
    out
}

/// The replay as JSON.
#[must_use]
pub fn to_json(r: &Replay) -> Value {
    let mut per = serde_json::Map::new();
    for ((d, o), (ms, n)) in &r.per {
        let (dn, on) = names(*d, *o);
        per.insert(format!("{dn}_{on}"), json!({ "seconds": ms / 1e3, "requests": n }));
    }
    json!({
        "model": r.model,
        "layout": r.layout,
        "total_s": r.total_s(),
        "meta_s": r.device_s(TraceDevice::Meta),
        "data_s": r.device_s(TraceDevice::Data),
        "per": per,
        "classes": r.per_class.iter().map(|(c, ms)| (c.name().to_string(), json!(ms / 1e3))).collect::<serde_json::Map<_, _>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dualfs_engine::device::tracing::{BlockClass, TraceRecord};

    fn trace(reqs: &[(TraceDevice, TraceOp, u64, u64)]) -> Trace {
        let mut devices = BTreeMap::new();
        devices.insert(TraceDevice::Meta, 100_000);
        devices.insert(TraceDevice::Data, 900_000);
        let records = reqs
            .iter()
            .enumerate()
            .map(|(i, &(device, op, first, count))| TraceRecord {
                start_ns: i as u64,
                duration_ns: 1,
                device,
                op,
                first,
                count,
                classes: vec![(BlockClass::Data, count as u32)],
            })
            .collect();
        Trace { devices, records }
    }

    #[test]
    fn one_large_request_costs_less_than_the_same_bytes_scattered() {
        let d = TraceDevice::Data;
        let big = trace(&[(d, TraceOp::Write, 0, 256)]);
        let scattered: Vec<_> = (0..256).map(|i| (d, TraceOp::Write, i * 3001, 1)).collect();
        let scattered = trace(&scattered);
        for m in [Model::Hdd5400, Model::Hdd7200, Model::Ssd] {
            let a = replay(&big, m, Layout::OneDisk).total_s();
            let b = replay(&scattered, m, Layout::OneDisk).total_s();
            assert!(a < b, "{m:?}: {a} vs {b}");
        }
    }

    #[test]
    fn sequential_requests_pay_no_seek_and_reads_hit_the_read_ahead() {
        let d = TraceDevice::Data;
        let seq = trace(&[(d, TraceOp::Write, 10, 1), (d, TraceOp::Write, 11, 1), (d, TraceOp::Write, 12, 1)]);
        let r = replay(&seq, Model::Hdd5400, Layout::OneDisk);
        // One rotational wait for the first, then transfer and overhead only.
        let expected = 3.0 * 0.3 + 0.5 * 60_000.0 / 5400.0 + 3.0 * 4096.0 / 10_000.0;
        assert!((r.total_s() * 1e3 - expected).abs() < 1e-6, "{}", r.total_s());
        let reads = trace(&[(d, TraceOp::Read, 1000, 1), (d, TraceOp::Read, 1050, 1)]);
        let r = replay(&reads, Model::Hdd5400, Layout::OneDisk);
        assert!(r.total_s() < 0.010, "second read should come from the read-ahead: {}", r.total_s());
    }

    #[test]
    fn time_is_shared_among_classes_by_blocks() {
        let mut t = trace(&[(TraceDevice::Meta, TraceOp::Write, 100, 4)]);
        t.records[0].classes = vec![(BlockClass::Descriptor, 1), (BlockClass::Dir, 3)];
        let r = replay(&t, Model::Hdd5400, Layout::OneDisk);
        let total: f64 = r.per_class.values().sum();
        assert!((total / 1e3 - r.total_s()).abs() < 1e-9);
        assert!((r.per_class[&BlockClass::Dir] - 3.0 * r.per_class[&BlockClass::Descriptor]).abs() < 1e-9);
    }

    #[test]
    fn two_disks_spare_the_long_seeks_between_meta_data_and_data() {
        let (m, d) = (TraceDevice::Meta, TraceDevice::Data);
        let reqs: Vec<_> =
            (0..100).flat_map(|i| [(m, TraceOp::Write, 10 + i, 1), (d, TraceOp::Write, 800_000 + i * 8, 1)]).collect();
        let t = trace(&reqs);
        let one = replay(&t, Model::Hdd5400, Layout::OneDisk).total_s();
        let two = replay(&t, Model::Hdd5400, Layout::TwoDisks).total_s();
        assert!(two < one / 2.0, "{two} vs {one}");
        assert!(to_text(&replay(&t, Model::Ssd, Layout::TwoDisks)).contains("total I/O time"));
    }
}
