//! A solid-state disk: a fixed latency per request, served on several
//! channels at once, data over one shared link, a cost per flush.

use super::{Counters, Ms, Op, Request};

/// A solid-state disk's parameters.
#[derive(Clone, Copy, Debug)]
pub struct SsdParams {
    pub read_ms: f64,
    pub write_ms: f64,
    /// The link's rate, MB/s (10^6 bytes), shared by all channels.
    pub mb_s: f64,
    pub flush_ms: f64,
    pub discard_ms: f64,
    /// Requests served at once.
    pub channels: usize,
}

/// A SATA SSD.
pub const SSD: SsdParams =
    SsdParams { read_ms: 0.08, write_ms: 0.03, mb_s: 500.0, flush_ms: 0.5, discard_ms: 0.05, channels: 4 };

#[derive(Debug)]
pub(super) struct Ssd {
    p: SsdParams,
    /// When each channel is free.
    channels: Vec<Ms>,
    /// When the link is free.
    link: Ms,
}

impl Ssd {
    pub(super) fn new(p: SsdParams) -> Ssd {
        Ssd { p, channels: vec![0.0; p.channels.max(1)], link: 0.0 }
    }

    /// The completion time of a request arriving at `now`: on the channel
    /// free first, its latency, then its bytes over the link. A flush waits
    /// for every channel, and holds them all while the drive makes its
    /// cache durable.
    pub(super) fn submit(&mut self, now: Ms, r: Request, c: &mut Counters) -> Ms {
        if r.op == Op::Flush {
            let start = self.channels.iter().copied().fold(now, f64::max);
            let end = start + self.p.flush_ms;
            c.busy_ms += self.p.flush_ms;
            self.channels.iter_mut().for_each(|ch| *ch = end);
            return end;
        }
        let (i, free) =
            self.channels.iter().copied().enumerate().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or((0, now));
        let start = free.max(now);
        let (latency, bytes) = match r.op {
            Op::Read => (self.p.read_ms, r.len),
            Op::Write | Op::Zero => (self.p.write_ms, r.len),
            Op::Discard | Op::Flush => (self.p.discard_ms, 0),
        };
        let transfer = bytes as f64 / (self.p.mb_s * 1e3);
        let end = (start + latency).max(self.link) + transfer;
        if bytes > 0 {
            self.link = end;
        }
        c.busy_ms += end - start;
        if let Some(ch) = self.channels.get_mut(i) {
            *ch = end;
        }
        end
    }
}
