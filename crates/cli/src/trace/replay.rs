//! `dualfs trace replay`: total I/O time of a trace under a disk model.
//!
//! The DualFS paper's metric is the total time the disks spend serving the
//! file system's requests. These machines have no spinning disk (a seek
//! costs nothing on a loop device over a virtual disk), so the trace is
//! replayed, request by request in the order it was issued, through the
//! disk models of [`super::disk`]: each request is issued when the one
//! before it has completed plus the pause the traced workload left between
//! them (during which the drive reads ahead or writes back its cache), and
//! its I/O time is from issue to completion. Requests do not overlap:
//! total I/O time is the sum of those times, plus whatever the write cache
//! still holds at the end, written as by a final flush.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use dualfs_engine::device::tracing::{BlockClass, TraceDevice, TraceOp};
use dualfs_engine::types::BLOCK_BYTES;
use serde_json::{Value, json};

use super::disk::{self, Drive, Model, Ms, Op, Request};
use super::{Layout, Trace};

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

/// One disk of a replay and where its head is.
#[derive(Debug)]
struct Disk {
    drive: Drive,
    /// When the head's current request ends, while it works.
    head_end: Option<Ms>,
}

impl Disk {
    /// Lets the head work on what it has (write-back, for one) until `t`.
    fn advance(&mut self, t: Ms) {
        loop {
            let end = match self.head_end.or_else(|| self.drive.start_next()) {
                Some(end) => end,
                None => return,
            };
            if end > t {
                self.head_end = Some(end);
                return;
            }
            self.head_end = None;
            self.drive.finish();
        }
    }

    /// Issues `req` at `now` and waits for it: its completion time.
    fn run(&mut self, now: Ms, req: Request) -> Ms {
        disk::predict::drain(&mut self.drive, now, &mut self.head_end, req)
    }
}

/// Replays a trace through a model.
#[must_use]
pub fn replay(t: &Trace, model: Model, layout: Layout, write_cache: bool) -> Replay {
    let meta = t.devices.get(&TraceDevice::Meta).copied().unwrap_or(0);
    let data = t.devices.get(&TraceDevice::Data).copied().unwrap_or(0);
    // One disk: meta-data on the outer tracks, data after it. Two disks:
    // each device at the start of its own disk.
    let (data_offset, spans) = match layout {
        Layout::OneDisk => (meta, vec![meta.saturating_add(data)]),
        Layout::TwoDisks => (0, vec![meta.max(data); 2]),
    };
    let disk_of = |d: TraceDevice| usize::from(layout == Layout::TwoDisks && d == TraceDevice::Data);
    let mut disks: Vec<Disk> = spans
        .into_iter()
        .map(|blocks| Disk {
            drive: Drive::new(model, blocks.saturating_mul(BLOCK_BYTES), write_cache),
            head_end: None,
        })
        .collect();
    let mut out = Replay {
        model: model.name(),
        layout: match layout {
            Layout::OneDisk => "one-disk",
            Layout::TwoDisks => "two-disks",
        },
        per: BTreeMap::new(),
        per_class: BTreeMap::new(),
    };
    let mut now: Ms = 0.0;
    let mut last_end_ns: Option<u64> = None;
    for r in &t.records {
        if let Some(end) = last_end_ns {
            now += r.start_ns.saturating_sub(end) as f64 / 1e6;
        }
        last_end_ns = Some(r.start_ns.saturating_add(r.duration_ns));
        let first = r.first.saturating_add(if r.device == TraceDevice::Data { data_offset } else { 0 });
        let op = match r.op {
            TraceOp::Read => Op::Read,
            TraceOp::Write => Op::Write,
            TraceOp::Flush => Op::Flush,
            // The disk models have no TRIM (a disk has none): its time passes idle.
            TraceOp::Discard => continue,
        };
        let req = Request { op, offset: first.saturating_mul(BLOCK_BYTES), len: r.count.saturating_mul(BLOCK_BYTES) };
        let disk = &mut disks[disk_of(r.device)];
        disk.advance(now);
        let done = disk.run(now, req);
        let ms = (done - now).max(0.0);
        now = now.max(done);
        let e = out.per.entry((r.device, r.op)).or_insert((0.0, 0));
        e.0 += ms;
        e.1 += 1;
        let blocks: u64 = r.classes.iter().map(|(_, n)| u64::from(*n)).sum();
        for (class, n) in &r.classes {
            *out.per_class.entry(*class).or_default() += ms * f64::from(*n) / blocks.max(1) as f64;
        }
    }
    // What the write caches still hold is written as by a final flush.
    for (i, disk) in disks.iter_mut().enumerate() {
        if disk.head_end.is_none() && disk.drive.idle() {
            continue;
        }
        let done = disk.run(now, Request { op: Op::Flush, offset: 0, len: 0 });
        let device = if layout == Layout::TwoDisks && i == 0 { TraceDevice::Meta } else { TraceDevice::Data };
        if done > now {
            out.per.entry((device, TraceOp::Flush)).or_insert((0.0, 0)).0 += done - now;
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

    /// A trace of requests `(device, op, first block, blocks)`, issued
    /// `gap_ms` apart.
    fn trace_gap(reqs: &[(TraceDevice, TraceOp, u64, u64)], gap_ms: u64) -> Trace {
        let mut devices = BTreeMap::new();
        devices.insert(TraceDevice::Meta, 100_000);
        devices.insert(TraceDevice::Data, 900_000);
        let records = reqs
            .iter()
            .enumerate()
            .map(|(i, &(device, op, first, count))| TraceRecord {
                start_ns: i as u64 * (gap_ms * 1_000_000 + 1),
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

    fn trace(reqs: &[(TraceDevice, TraceOp, u64, u64)]) -> Trace {
        trace_gap(reqs, 0)
    }

    #[test]
    fn one_large_request_costs_less_than_the_same_bytes_scattered() {
        let d = TraceDevice::Data;
        let big = trace(&[(d, TraceOp::Write, 0, 256)]);
        let scattered: Vec<_> = (0..256).map(|i| (d, TraceOp::Write, i * 3001, 1)).collect();
        let scattered = trace(&scattered);
        for m in [Model::Hdd5400, Model::Hdd7200, Model::Ssd] {
            for cache in [true, false] {
                let a = replay(&big, m, Layout::OneDisk, cache).total_s();
                let b = replay(&scattered, m, Layout::OneDisk, cache).total_s();
                assert!(a < b, "{m:?} cache {cache}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn a_read_after_a_pause_comes_from_the_read_ahead() {
        let d = TraceDevice::Data;
        let reads = [(d, TraceOp::Read, 1000, 1), (d, TraceOp::Read, 1050, 1)];
        // 100 ms after the first read the 512 KiB segment is full: the
        // second costs a command and the bus, not a seek.
        let r = replay(&trace_gap(&reads, 100), Model::Hdd5400, Layout::OneDisk, true);
        let first = r.total_s() * 1e3 - (0.3 + 4096.0 / 33_000.0);
        let second = r.total_s() * 1e3 - first;
        assert!((second - (0.3 + 4096.0 / 33_000.0)).abs() < 1e-6, "second read {second} ms");
        // Back to back the head has read nothing ahead yet: it reads on.
        let r = replay(&trace(&reads), Model::Hdd5400, Layout::OneDisk, true);
        assert!(r.total_s() * 1e3 > first + 0.3, "{}", r.total_s());
    }

    #[test]
    fn cached_writes_are_paid_for_at_the_end() {
        let d = TraceDevice::Data;
        let writes: Vec<_> = (0..50).map(|i| (d, TraceOp::Write, i * 5000, 1)).collect();
        let r = replay(&trace(&writes), Model::Hdd5400, Layout::OneDisk, true);
        let (write_ms, n) = r.per[&(d, TraceOp::Write)];
        assert_eq!(n, 50);
        assert!(write_ms / 50.0 < 0.5, "cached writes cost a command and the bus: {write_ms}");
        let (flush_ms, flushes) = r.per[&(d, TraceOp::Flush)];
        assert_eq!(flushes, 0, "the final write-back is not a request of the trace");
        assert!(flush_ms > 50.0 * 1.5, "each write-back seeks: {flush_ms} ms");
    }

    #[test]
    fn time_is_shared_among_classes_by_blocks() {
        let mut t = trace(&[(TraceDevice::Meta, TraceOp::Write, 100, 4)]);
        t.records[0].classes = vec![(BlockClass::Descriptor, 1), (BlockClass::Dir, 3)];
        let r = replay(&t, Model::Hdd5400, Layout::OneDisk, false);
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
        let one = replay(&t, Model::Hdd5400, Layout::OneDisk, false).total_s();
        let two = replay(&t, Model::Hdd5400, Layout::TwoDisks, false).total_s();
        assert!(two < one / 2.0, "{two} vs {one}");
        assert!(to_text(&replay(&t, Model::Ssd, Layout::TwoDisks, true)).contains("total I/O time"));
    }
}
