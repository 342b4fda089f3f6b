//! `dualfs trace summary`: what a trace did, per device and per class.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use dualfs_engine::device::tracing::{BlockClass, TraceDevice, TraceOp};
use dualfs_engine::types::BLOCK_BYTES;
use serde_json::{Value, json};

use super::Trace;

/// Counters for one group of requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests (for a class: requests that touched at least one of its blocks).
    pub requests: u64,
    /// Blocks moved (for a class: its own blocks only).
    pub blocks: u64,
    /// Requests that started where the previous request on the device ended.
    pub sequential: u64,
}

impl Counts {
    fn add(&mut self, blocks: u64, sequential: bool) {
        self.requests += 1;
        self.blocks = self.blocks.saturating_add(blocks);
        self.sequential += u64::from(sequential);
    }

    /// Bytes moved.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.blocks.saturating_mul(BLOCK_BYTES)
    }

    /// Fraction of requests that were sequential.
    #[must_use]
    pub fn sequential_fraction(&self) -> f64 {
        if self.requests == 0 { 0.0 } else { self.sequential as f64 / self.requests as f64 }
    }

    /// Mean request size in KiB (for a class: its bytes per request that touched it).
    #[must_use]
    pub fn mean_kib(&self) -> f64 {
        if self.requests == 0 { 0.0 } else { self.bytes() as f64 / 1024.0 / self.requests as f64 }
    }
}

/// The summary of a trace.
#[derive(Debug, Default)]
pub struct Summary {
    /// Per device and operation (reads and writes).
    pub per_device: BTreeMap<(TraceDevice, TraceOp), Counts>,
    /// Flushes per device.
    pub flushes: BTreeMap<TraceDevice, u64>,
    /// Per device, operation and class.
    pub per_class: BTreeMap<(TraceDevice, TraceOp, BlockClass), Counts>,
    /// Seconds from the first request's start to the last one's end.
    pub span_s: f64,
}

/// Counts a trace.
#[must_use]
pub fn summarize(t: &Trace) -> Summary {
    let mut s = Summary::default();
    let mut head: BTreeMap<TraceDevice, u64> = BTreeMap::new();
    let (mut first, mut last) = (u64::MAX, 0u64);
    for r in &t.records {
        first = first.min(r.start_ns);
        last = last.max(r.start_ns.saturating_add(r.duration_ns));
        if r.op == TraceOp::Flush {
            *s.flushes.entry(r.device).or_default() += 1;
            continue;
        }
        let sequential = head.get(&r.device) == Some(&r.first);
        head.insert(r.device, r.first.saturating_add(r.count));
        s.per_device.entry((r.device, r.op)).or_default().add(r.count, sequential);
        let mut per: BTreeMap<BlockClass, u64> = BTreeMap::new();
        for (c, n) in &r.classes {
            *per.entry(*c).or_default() += u64::from(*n);
        }
        for (c, n) in per {
            s.per_class.entry((r.device, r.op, c)).or_default().add(n, sequential);
        }
    }
    if first < last {
        s.span_s = (last - first) as f64 / 1e9;
    }
    s
}

fn device_name(d: TraceDevice) -> &'static str {
    match d {
        TraceDevice::Meta => "meta",
        TraceDevice::Data => "data",
    }
}

fn op_name(o: TraceOp) -> &'static str {
    match o {
        TraceOp::Read => "read",
        TraceOp::Write => "write",
        TraceOp::Flush => "flush",
        TraceOp::Discard => "discard",
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn line(out: &mut String, what: &str, c: &Counts) {
    let _ = writeln!(
        out,
        "  {what:<24} {:>9} {:>10.2} {:>9.1} {:>8.1}%",
        c.requests,
        mib(c.bytes()),
        c.mean_kib(),
        100.0 * c.sequential_fraction()
    );
}

/// The summary as a table for people.
#[must_use]
pub fn to_text(s: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "span {:.3} s", s.span_s);
    let _ = writeln!(out, "  {:<24} {:>9} {:>10} {:>9} {:>9}", "", "requests", "MiB", "mean KiB", "seq");
    for ((d, o), c) in &s.per_device {
        line(&mut out, &format!("{} {}", device_name(*d), op_name(*o)), c);
        for ((_, _, class), cc) in
            s.per_class.range((*d, *o, BlockClass::ALL[0])..).take_while(|((dd, oo, _), _)| dd == d && oo == o)
        {
            line(&mut out, &format!("  {class}"), cc);
        }
    }
    for (d, n) in &s.flushes {
        let _ = writeln!(out, "  {:<24} {n:>9}", format!("{} flush", device_name(*d)));
    }
    out
}

fn counts_json(c: &Counts) -> Value {
    json!({
        "requests": c.requests,
        "bytes": c.bytes(),
        "mean_kib": c.mean_kib(),
        "sequential_fraction": c.sequential_fraction(),
    })
}

/// The summary as JSON: `{device: {read|write: {..., classes: {class: {...}}}, flushes}}`.
#[must_use]
pub fn to_json(s: &Summary) -> Value {
    let mut devices = serde_json::Map::new();
    for ((d, o), c) in &s.per_device {
        let dev = devices.entry(device_name(*d)).or_insert_with(|| json!({}));
        let mut v = counts_json(c);
        let mut classes = serde_json::Map::new();
        for ((dd, oo, class), cc) in &s.per_class {
            if dd == d && oo == o {
                classes.insert(class.name().to_string(), counts_json(cc));
            }
        }
        v["classes"] = Value::Object(classes);
        dev[op_name(*o)] = v;
    }
    for (d, n) in &s.flushes {
        let dev = devices.entry(device_name(*d)).or_insert_with(|| json!({}));
        dev["flushes"] = json!(n);
    }
    json!({ "span_s": s.span_s, "devices": devices })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dualfs_engine::device::tracing::TraceRecord;

    fn rec(t: u64, device: TraceDevice, op: TraceOp, first: u64, classes: Vec<(BlockClass, u32)>) -> TraceRecord {
        let count = classes.iter().map(|(_, n)| u64::from(*n)).sum();
        TraceRecord { start_ns: t, duration_ns: 10, device, op, first, count, classes }
    }

    #[test]
    fn requests_bytes_and_sequential_runs_are_counted_per_device_and_class() {
        let m = TraceDevice::Meta;
        let t = Trace {
            devices: BTreeMap::new(),
            records: vec![
                rec(1, m, TraceOp::Write, 100, vec![(BlockClass::Descriptor, 1), (BlockClass::Inode, 3)]),
                rec(2, m, TraceOp::Write, 104, vec![(BlockClass::Descriptor, 1), (BlockClass::Dir, 1)]),
                rec(3, m, TraceOp::Flush, 0, vec![]),
                rec(4, m, TraceOp::Write, 50, vec![(BlockClass::Checkpoint, 1)]),
            ],
        };
        let s = summarize(&t);
        let w = s.per_device[&(m, TraceOp::Write)];
        assert_eq!((w.requests, w.blocks, w.sequential), (3, 7, 1));
        assert_eq!(s.flushes[&m], 1);
        let d = s.per_class[&(m, TraceOp::Write, BlockClass::Descriptor)];
        assert_eq!((d.requests, d.blocks), (2, 2));
        let text = to_text(&s);
        assert!(text.contains("meta write"), "{text}");
        assert!(text.contains("descriptor"), "{text}");
        assert_eq!(to_json(&s)["devices"]["meta"]["flushes"], json!(1));
    }
}
