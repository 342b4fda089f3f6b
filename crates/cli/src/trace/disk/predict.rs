//! The model's own figures for fio-like runs (`dualfs trace predict`): a
//! closed loop that keeps a fixed number of requests outstanding on a
//! [`Drive`], issuing the next the moment one completes, as fio does with
//! a queue depth. The calibration compares these with fio run on an
//! emulated disk: the difference is what the emulation itself costs.

use std::collections::HashMap;

use super::{Drive, Model, Ms, Op, Request, Submitted, Ticket};

pub use crate::args::Pattern;

/// What a run achieved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    pub iops: f64,
    pub mb_s: f64,
    /// Mean time from issue to completion, ms.
    pub mean_latency_ms: f64,
}

/// A small, seeded generator (SplitMix64), so that a prediction is the
/// same every time.
#[derive(Debug)]
pub(crate) struct SplitMix(pub u64);

impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Runs `ios` requests of `bs` bytes over the first `size` bytes of a
/// drive of `model` (span `span`), `qd` at a time; writes end with a flush
/// (fio's `end_fsync`), counted in the run's time.
#[must_use]
#[allow(clippy::too_many_arguments)]
pub fn closed_loop(
    model: Model,
    span: u64,
    write_cache: bool,
    pattern: Pattern,
    bs: u64,
    size: u64,
    qd: usize,
    ios: u64,
) -> Prediction {
    let mut drive = Drive::new(model, span, write_cache);
    let bs = bs.max(512);
    let slots = (size / bs).max(1);
    let mut rng = SplitMix(0x5eed);
    let mut next_seq = 0u64;
    let mut offset = |rng: &mut SplitMix| match pattern {
        Pattern::Read | Pattern::Write => {
            let o = (next_seq % slots) * bs;
            next_seq += 1;
            o
        }
        Pattern::Randread | Pattern::Randwrite => (rng.next() % slots) * bs,
    };
    let op = if matches!(pattern, Pattern::Read | Pattern::Randread) { Op::Read } else { Op::Write };
    // Completions known in advance (time, issue time), and tickets waiting
    // for the head (ticket -> issue time).
    let mut timed: Vec<(Ms, Ms)> = Vec::new();
    let mut waiting: HashMap<Ticket, Ms> = HashMap::new();
    let mut head_end: Option<Ms> = None;
    let (mut issued, mut completed, mut latency, mut now) = (0u64, 0u64, 0.0, 0.0);
    let mut issue = |drive: &mut Drive, now: Ms, timed: &mut Vec<(Ms, Ms)>, waiting: &mut HashMap<Ticket, Ms>| {
        let o = offset(&mut rng);
        match drive.submit(now, Request { op, offset: o, len: bs }) {
            Submitted::At(t) => timed.push((t, now)),
            Submitted::Later(t) => {
                waiting.insert(t, now);
            }
        }
    };
    while issued < ios.min(qd as u64) {
        issue(&mut drive, now, &mut timed, &mut waiting);
        issued += 1;
    }
    while completed < ios {
        if head_end.is_none() {
            head_end = drive.start_next();
        }
        let first_timed = timed.iter().enumerate().min_by(|a, b| a.1.0.total_cmp(&b.1.0)).map(|(i, &(t, _))| (i, t));
        match (first_timed, head_end) {
            (Some((i, t)), h) if h.is_none_or(|h| t <= h) => {
                let (end, start) = timed.swap_remove(i);
                now = now.max(end);
                completed += 1;
                latency += end - start;
                if issued < ios {
                    issue(&mut drive, now, &mut timed, &mut waiting);
                    issued += 1;
                }
            }
            (_, Some(h)) => {
                now = now.max(h);
                head_end = None;
                for (t, at) in drive.finish() {
                    if let Some(start) = waiting.remove(&t) {
                        timed.push((at, start));
                    }
                }
            }
            (_, None) => break,
        }
    }
    if op == Op::Write {
        now = drain(&mut drive, now, &mut head_end, Request { op: Op::Flush, offset: 0, len: 0 });
    }
    let secs = (now / 1e3).max(1e-9);
    Prediction {
        iops: completed as f64 / secs,
        mb_s: (completed * bs) as f64 / secs / 1e6,
        mean_latency_ms: latency / completed.max(1) as f64,
    }
}

/// Submits `req` at `now` and runs the head (busy until `head_end`, if it
/// is; kept up to date) until the request completes; returns the
/// completion time.
pub(crate) fn drain(drive: &mut Drive, now: Ms, head_end: &mut Option<Ms>, req: Request) -> Ms {
    let ticket = match drive.submit(now, req) {
        Submitted::At(t) => return t,
        Submitted::Later(t) => t,
    };
    loop {
        if head_end.take().or_else(|| drive.start_next()).is_none() {
            return now;
        }
        if let Some((_, done)) = drive.finish().into_iter().find(|(t, _)| *t == ticket) {
            return done;
        }
    }
}
