//! A spinning disk: one head, a read-ahead segment cache, a write cache.

use std::collections::{BTreeSet, VecDeque};

use super::{Counters, Ms, Op, Request, Submitted, Ticket};

/// A spinning disk's parameters.
#[derive(Clone, Copy, Debug)]
pub struct HddParams {
    pub track_to_track_ms: f64,
    pub full_stroke_ms: f64,
    pub rpm: f64,
    /// Media transfer rate, MB/s (10^6 bytes).
    pub media_mb_s: f64,
    /// Interface rate, MB/s: what a cache hit costs per byte.
    pub bus_mb_s: f64,
    /// Command processing per request, ms.
    pub overhead_ms: f64,
    /// Bytes one read-ahead segment holds.
    pub segment_bytes: u64,
    /// Read-ahead segments (streams the drive keeps at once).
    pub segments: usize,
    /// Bytes of written data the cache holds before writes wait.
    pub write_cache_bytes: u64,
}

/// The DualFS paper's disk, Seagate ST-34310A (5,400 rpm, Ultra ATA/33,
/// 512 KiB buffer).
pub const HDD5400: HddParams = HddParams {
    track_to_track_ms: 1.5,
    full_stroke_ms: 21.0,
    rpm: 5400.0,
    media_mb_s: 10.0,
    bus_mb_s: 33.0,
    overhead_ms: 0.3,
    segment_bytes: 512 << 10,
    segments: 1,
    write_cache_bytes: 512 << 10,
};

/// A current 7,200 rpm SATA disk.
pub const HDD7200: HddParams = HddParams {
    track_to_track_ms: 0.8,
    full_stroke_ms: 16.0,
    rpm: 7200.0,
    media_mb_s: 160.0,
    bus_mb_s: 600.0,
    overhead_ms: 0.1,
    segment_bytes: 2 << 20,
    segments: 4,
    write_cache_bytes: 16 << 20,
};

/// Reading ahead from `from` since time `at`, up to `limit`; the segment
/// keeps the last `segment_bytes` read, from `start` on.
#[derive(Clone, Copy, Debug)]
struct Prefetch {
    start: u64,
    from: u64,
    at: Ms,
    limit: u64,
}

#[derive(Debug)]
enum JobKind {
    Read(Ticket),
    WriteThrough(Ticket),
    /// Cached writes going to the platter: the sequence numbers they carry.
    Destage(Vec<u64>),
}

#[derive(Debug)]
struct Job {
    kind: JobKind,
    offset: u64,
    len: u64,
    arrival: Ms,
}

impl Job {
    fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

#[derive(Debug)]
struct Running {
    job: Job,
    finish: Ms,
    /// For a read that continued the read-ahead: the stream it continued.
    streamed: Option<Prefetch>,
}

/// A waiting write (the cache was full): ticket, offset, length, arrival.
type Blocked = (Ticket, u64, u64, Ms);

#[derive(Debug)]
pub(super) struct Hdd {
    p: HddParams,
    span: f64,
    /// Bytes per track (one revolution at the media rate).
    track: f64,
    rev_ms: f64,
    /// Bytes per millisecond at the media rate.
    rate: f64,
    write_cache: bool,
    head: u64,
    head_free: Ms,
    busy: Option<Running>,
    queue: Vec<Job>,
    active: Option<Prefetch>,
    /// Segments the head left, newest first: what each still holds.
    frozen: VecDeque<(u64, u64)>,
    dirty_bytes: u64,
    next_seq: u64,
    outstanding: BTreeSet<u64>,
    /// Flushes waiting: every write with a sequence number below theirs
    /// must reach the platter first.
    flushes: Vec<(Ticket, u64, Ms)>,
    blocked: VecDeque<Blocked>,
}

fn overlaps(a: u64, b: u64, c: u64, d: u64) -> bool {
    a < d && c < b
}

impl Hdd {
    pub(super) fn new(p: HddParams, span_bytes: u64, write_cache: bool) -> Hdd {
        let rev_ms = 60_000.0 / p.rpm;
        let rate = p.media_mb_s * 1e3;
        Hdd {
            p,
            span: span_bytes.max(1) as f64,
            track: rate * rev_ms,
            rev_ms,
            rate,
            write_cache,
            head: 0,
            head_free: 0.0,
            busy: None,
            queue: Vec::new(),
            active: None,
            frozen: VecDeque::new(),
            dirty_bytes: 0,
            next_seq: 0,
            outstanding: BTreeSet::new(),
            flushes: Vec::new(),
            blocked: VecDeque::new(),
        }
    }

    pub(super) fn idle(&self) -> bool {
        self.busy.is_none() && self.queue.is_empty() && self.blocked.is_empty()
    }

    fn bus_ms(&self, len: u64) -> Ms {
        len as f64 / (self.p.bus_mb_s * 1e3)
    }

    fn media_ms(&self, len: u64) -> Ms {
        len as f64 / self.rate
    }

    /// Seek time between two byte positions: none on the same track,
    /// otherwise track-to-track plus the square root of the distance's
    /// share of the disk times what remains to the full stroke.
    pub(super) fn seek_ms(&self, from: u64, to: u64) -> Ms {
        let (a, b) = ((from as f64 / self.track).floor(), (to as f64 / self.track).floor());
        if a == b {
            return 0.0;
        }
        let share = (from.abs_diff(to) as f64 / self.span).min(1.0);
        self.p.track_to_track_ms + (self.p.full_stroke_ms - self.p.track_to_track_ms) * share.sqrt()
    }

    /// Wait at time `t` until the sector at byte `x` passes under the head:
    /// the platter turns once per `rev_ms`, the byte's angle is its place
    /// on its track (so consecutive bytes follow each other round, and on
    /// to the next track, as a drive's track skew arranges).
    pub(super) fn rotation_ms(&self, t: Ms, x: u64) -> Ms {
        let platter = (t / self.rev_ms).fract();
        let sector = (x as f64 / self.track).fract();
        (sector - platter).rem_euclid(1.0) * self.rev_ms
    }

    fn frontier(&self, pf: &Prefetch, t: Ms) -> u64 {
        let read = ((t - pf.at).max(0.0) * self.rate) as u64;
        pf.from.saturating_add(read).min(pf.limit)
    }

    /// Whether `[a, b)` is in a read-ahead segment at time `now`.
    fn read_ahead_hit(&self, now: Ms, a: u64, b: u64) -> bool {
        let active = self.active.as_ref().is_some_and(|pf| {
            let f = self.frontier(pf, now);
            a >= pf.start.max(f.saturating_sub(self.p.segment_bytes)) && b <= f
        });
        active || self.frozen.iter().any(|&(s, e)| a >= s && b <= e)
    }

    /// Whether `[a, b)` is all in data still waiting in the write cache.
    fn write_cache_hit(&self, a: u64, b: u64) -> bool {
        let queued = self.queue.iter().filter(|j| matches!(j.kind, JobKind::Destage(_)));
        let running = self.busy.iter().map(|r| &r.job).filter(|j| matches!(j.kind, JobKind::Destage(_)));
        queued.chain(running).any(|j| a >= j.offset && b <= j.end())
    }

    /// A write drops whatever read-ahead it overlaps; the head stops
    /// reading ahead where it is.
    fn invalidate(&mut self, now: Ms, a: u64, b: u64) {
        if let Some(pf) = self.active
            && overlaps(a, b, pf.start, pf.limit)
        {
            self.head = self.frontier(&pf, now);
            self.active = None;
        }
        self.frozen.retain(|&(s, e)| !overlaps(a, b, s, e));
    }

    pub(super) fn submit(&mut self, now: Ms, r: Request, ticket: Ticket, c: &mut Counters) -> Submitted {
        let (a, b) = (r.offset, r.offset.saturating_add(r.len));
        let answered = now + self.p.overhead_ms + self.bus_ms(r.len);
        match r.op {
            Op::Read => {
                if self.write_cache_hit(a, b) {
                    c.write_cache_hits += 1;
                    return Submitted::At(answered);
                }
                if self.read_ahead_hit(now, a, b) {
                    c.read_ahead_hits += 1;
                    return Submitted::At(answered);
                }
                self.queue.push(Job { kind: JobKind::Read(ticket), offset: a, len: r.len, arrival: now });
                Submitted::Later(ticket)
            }
            Op::Write | Op::Zero => {
                self.invalidate(now, a, b);
                if !self.write_cache || r.len > self.p.write_cache_bytes {
                    self.queue.push(Job { kind: JobKind::WriteThrough(ticket), offset: a, len: r.len, arrival: now });
                    return Submitted::Later(ticket);
                }
                if self.blocked.is_empty() && self.dirty_bytes + r.len <= self.p.write_cache_bytes {
                    self.cache(now, a, r.len, c);
                    return Submitted::At(answered);
                }
                c.blocked_writes += 1;
                self.blocked.push_back((ticket, a, r.len, now));
                Submitted::Later(ticket)
            }
            Op::Flush => {
                let waiting = self.outstanding.first().is_some();
                if !waiting {
                    return Submitted::At(now + self.p.overhead_ms);
                }
                self.flushes.push((ticket, self.next_seq, now));
                Submitted::Later(ticket)
            }
            // A disk has no use for TRIM; answered as a command.
            Op::Discard => Submitted::At(now + self.p.overhead_ms),
        }
    }

    /// Takes a write into the cache: into a waiting write-back it
    /// continues or lies inside, or as a new one.
    fn cache(&mut self, now: Ms, a: u64, len: u64, c: &mut Counters) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.outstanding.insert(seq);
        c.cached_writes += 1;
        let b = a.saturating_add(len);
        for j in &mut self.queue {
            let end = j.end();
            let JobKind::Destage(seqs) = &mut j.kind else { continue };
            if a >= j.offset && b <= end {
                seqs.push(seq);
                return;
            }
            if a == end || b == j.offset {
                seqs.push(seq);
                j.offset = j.offset.min(a);
                j.len += len;
                self.dirty_bytes += len;
                return;
            }
        }
        self.dirty_bytes += len;
        self.queue.push(Job { kind: JobKind::Destage(vec![seq]), offset: a, len, arrival: now });
    }

    /// The next job in one-way elevator order: the nearest at or past the
    /// head, else the lowest (then the earliest to arrive).
    fn pick(&self) -> Option<usize> {
        let key = |j: &Job| (j.offset, j.arrival.to_bits());
        let ahead = self.queue.iter().enumerate().filter(|(_, j)| j.offset >= self.head).min_by_key(|(_, j)| key(j));
        ahead.or_else(|| self.queue.iter().enumerate().min_by_key(|(_, j)| key(j))).map(|(i, _)| i)
    }

    pub(super) fn start_next(&mut self, c: &mut Counters) -> Option<Ms> {
        if self.busy.is_some() {
            return None;
        }
        let i = self.pick()?;
        let job = self.queue.swap_remove(i);
        let start = self.head_free.max(job.arrival);
        // The head leaves its read-ahead where it got to.
        let mut streamed = None;
        if let Some(pf) = self.active.take() {
            let f = self.frontier(&pf, start);
            self.head = f;
            let from = pf.start.max(f.saturating_sub(self.p.segment_bytes));
            if matches!(job.kind, JobKind::Read(_)) && job.offset >= from && job.offset < pf.limit && f < pf.limit {
                streamed = Some(Prefetch { start: from, from: f, at: start, limit: pf.limit });
            } else {
                self.frozen.push_front((from, f));
                self.frozen.truncate(self.p.segments);
            }
        }
        let overhead = if matches!(job.kind, JobKind::Destage(_)) { 0.0 } else { self.p.overhead_ms };
        let seek = self.seek_ms(self.head, job.offset);
        let rotation = self.rotation_ms(start + overhead + seek, job.offset);
        let positioned = overhead + seek + rotation + self.media_ms(job.len);
        // A read at or ahead of the read-ahead: reading on to it (the
        // command handled meanwhile), unless seeking there is quicker.
        let stream = streamed.map(|s| self.media_ms(job.end().saturating_sub(s.from)).max(self.p.overhead_ms));
        let service = match stream {
            Some(ms) if ms <= positioned + 1e-6 => {
                c.streamed_reads += 1;
                ms
            }
            _ => {
                if let Some(s) = streamed.take() {
                    self.frozen.push_front((s.start, s.from));
                    self.frozen.truncate(self.p.segments);
                }
                c.positioning_ms += seek + rotation;
                positioned
            }
        };
        c.busy_ms += service;
        let finish = start + service;
        self.head = job.end();
        self.head_free = finish;
        self.busy = Some(Running { job, finish, streamed });
        Some(finish)
    }

    pub(super) fn finish(&mut self, c: &mut Counters) -> Vec<(Ticket, Ms)> {
        let Some(Running { job, finish, streamed }) = self.busy.take() else { return Vec::new() };
        let mut done = Vec::new();
        match job.kind {
            JobKind::Read(t) => {
                done.push((t, finish));
                let (start, from) = match streamed {
                    // The stream went on while the command was handled.
                    Some(s) => (s.start, self.frontier(&s, finish).max(job.end())),
                    None => (job.offset, job.end()),
                };
                self.head = from;
                self.frozen.truncate(self.p.segments.saturating_sub(1));
                let limit = job.end().saturating_add(self.p.segment_bytes).min(self.span as u64).max(from);
                self.active = Some(Prefetch { start, from, at: finish, limit });
            }
            JobKind::WriteThrough(t) => done.push((t, finish)),
            JobKind::Destage(seqs) => {
                c.destages += 1;
                c.destage_bytes += job.len;
                for s in &seqs {
                    self.outstanding.remove(s);
                }
                self.dirty_bytes = self.dirty_bytes.saturating_sub(job.len);
                // A caller that runs the head lazily (the replay) may
                // submit after the write-back it waits for had ended.
                while let Some(&(t, a, len, arrival)) = self.blocked.front() {
                    if self.dirty_bytes + len > self.p.write_cache_bytes {
                        break;
                    }
                    self.blocked.pop_front();
                    let at = finish.max(arrival);
                    self.cache(at, a, len, c);
                    done.push((t, at + self.p.overhead_ms + self.bus_ms(len)));
                }
                let oldest = self.outstanding.first().copied().unwrap_or(u64::MAX);
                let overhead = self.p.overhead_ms;
                self.flushes.retain(|&(t, seq, arrival)| {
                    let drained = oldest >= seq;
                    if drained {
                        done.push((t, finish.max(arrival) + overhead));
                    }
                    !drained
                });
            }
        }
        done
    }
}
