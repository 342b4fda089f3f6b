//! Crash states: what the two devices (three on a mirrored volume) may hold
//! if power is cut at some point of a recording.
//!
//! At a cut, for each device on its own: the writes before its last flush
//! are durable; the writes after it are *in flight*, and any subset of them
//! may have reached the disk, in any order (a subset applied in order covers
//! every outcome, since a later write to the same block can be the one
//! lost). One in-flight block may also be *torn*: only some of its eight
//! 512-byte sectors made it.
//!
//! The two copies of a mirrored meta-data device are two devices here:
//! each has its own flushes, and the subset of its in-flight writes that
//! survives is drawn for it alone, so that a crash leaves one copy with a
//! write the other lacks, in either direction, up to one copy holding
//! every write in flight and the other none ([`Choice::Apart`]). A write
//! is acknowledged only after a flush of both copies, so each copy alone
//! must hold everything acknowledged before the cut.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use dualfs_engine::types::BLOCK_SIZE;

use crate::image::{Block, BlockMap, Image, SECTOR_BYTES, SECTORS_PER_BLOCK};
use crate::record::{Dev, Event, Mark, discarded_garbage, discarded_zeros};
use crate::rng::Rng;

/// A recorded run: the images it started from and every event.
#[derive(Clone, Debug)]
pub struct Recording {
    /// The meta-data device before the first event.
    pub meta: Arc<Image>,
    /// The data device before the first event.
    pub data: Arc<Image>,
    /// The second meta-data copy before the first event (a mirrored volume).
    pub mirror: Option<Arc<Image>>,
    /// Writes, flushes and marks, in order.
    pub events: Vec<Event>,
}

/// Which in-flight writes reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// All of them, in order (the plain prefix).
    All,
    /// None: only what was flushed.
    Flushed,
    /// Each one with probability 1/2, per device, from this seed.
    Random(u64),
    /// A random subset, and one of the in-flight writes torn at sector
    /// level: some sectors new, the others old; on the meta-data device, half
    /// the time one of the old sectors is garbage instead (the sector being
    /// written when power failed). Data blocks get no garbage: the data
    /// device carries no checksums, and a file overwritten in place when
    /// power fails may show garbage there on any file system.
    Torn(u64),
    /// The meta-data copies apart: one keeps every write in flight, the
    /// other none (which one from the seed's lowest bit), the data device a
    /// random subset from this seed. Drawn for mirrored recordings only.
    Apart(u64),
}

/// One crash state: the first `cut` events happened, and `choice` says
/// which in-flight writes survived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateSpec {
    /// Number of events that happened.
    pub cut: usize,
    /// Which in-flight writes reached the disk.
    pub choice: Choice,
}

impl std::fmt::Display for StateSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.choice {
            Choice::All => write!(f, "cut {} all", self.cut),
            Choice::Flushed => write!(f, "cut {} flushed", self.cut),
            Choice::Random(s) => write!(f, "cut {} random {s:#x}", self.cut),
            Choice::Torn(s) => write!(f, "cut {} torn {s:#x}", self.cut),
            Choice::Apart(s) => write!(f, "cut {} apart {s:#x}", self.cut),
        }
    }
}

/// The operations a crash state may show: at least up to `durable`, at
/// most up to `issued` (step numbers; 0 = none), and every file fsync'd by
/// a step up to `synced` as that step left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Last step promised durable before the cut.
    pub durable: usize,
    /// Last step begun before the cut.
    pub issued: usize,
    /// Last step whose file fsync returned before the cut.
    pub synced: usize,
}

/// The device images of a crash state, and its window.
#[derive(Debug)]
pub struct CrashImages {
    /// Meta-data device (the first copy of a mirror).
    pub meta: Arc<Image>,
    /// Data device.
    pub data: Arc<Image>,
    /// The second meta-data copy, on a mirrored volume.
    pub mirror: Option<Arc<Image>>,
    /// What it may show.
    pub window: Window,
    /// Identifies the contents: equal fingerprints, equal images.
    pub fingerprint: u64,
    /// Sectors torn: (device, block, sector mask that reached the disk).
    pub torn: Option<(Dev, u64, u8)>,
}

fn tear(old: &Block, new: &Block, mask: u8, garbage: Option<usize>) -> Block {
    let mut b = **old;
    if let Some(g) = garbage {
        for (i, x) in b[g * SECTOR_BYTES..(g + 1) * SECTOR_BYTES].iter_mut().enumerate() {
            *x = (i as u8).wrapping_mul(151) ^ 0x5A;
        }
    }
    for s in 0..SECTORS_PER_BLOCK {
        if mask & (1 << s) != 0 {
            let r = s * SECTOR_BYTES..(s + 1) * SECTOR_BYTES;
            b[r.clone()].copy_from_slice(&new[r]);
        }
    }
    debug_assert_eq!(b.len(), BLOCK_SIZE);
    Arc::new(b)
}

impl Recording {
    /// `logged[n]`: step `n` wrote to the meta-data device (so a commit
    /// or checkpoint then may have made a record of any file durable).
    #[must_use]
    pub fn logged_steps(&self) -> Vec<bool> {
        let mut logged = Vec::new();
        let mut step = 0;
        for e in &self.events {
            match e {
                Event::Mark(Mark::StepStart(n)) => step = *n,
                Event::Write { dev: Dev::Meta, .. } => {
                    if logged.len() <= step {
                        logged.resize(step + 1, false);
                    }
                    logged[step] = true;
                }
                _ => {}
            }
        }
        logged
    }

    /// Builds the images of one crash state.
    #[must_use]
    pub fn build(&self, spec: &StateSpec) -> CrashImages {
        let cut = spec.cut.min(self.events.len());
        let mut durable: [BlockMap; 3] = Default::default();
        let mut pending: [Vec<(u64, Block)>; 3] = Default::default();
        let mut window = Window { durable: 0, issued: 0, synced: 0 };
        // Discarded blocks read as zeros in some states, garbage in others.
        let discarded = match spec.choice {
            Choice::All | Choice::Random(_) | Choice::Apart(_) => discarded_zeros(),
            Choice::Flushed | Choice::Torn(_) => discarded_garbage(),
        };
        for e in &self.events[..cut] {
            match e {
                Event::Write { dev, block, data } => pending[dev.index()].push((*block, data.clone())),
                Event::Flush(dev) => {
                    let i = dev.index();
                    for (b, d) in pending[i].drain(..) {
                        durable[i].insert(b, d);
                    }
                }
                // Gone at once and for good: a write before it, flushed or
                // not, is lost with it.
                Event::Discard { dev, first, count } => {
                    let i = dev.index();
                    let range = *first..first + count;
                    pending[i].retain(|(b, _)| !range.contains(b));
                    for b in range {
                        durable[i].insert(b, discarded.clone());
                    }
                }
                Event::Mark(Mark::StepStart(n)) => window.issued = *n,
                Event::Mark(Mark::Durable(n)) => window.durable = *n,
                Event::Mark(Mark::Synced(n)) => window.synced = *n,
            }
        }
        let mut rng = match spec.choice {
            Choice::Random(s) | Choice::Torn(s) | Choice::Apart(s) => Rng::new(s),
            _ => Rng::new(0),
        };
        let in_flight: usize = pending.iter().map(Vec::len).sum();
        // Apart: the copy that keeps what was in flight.
        let ahead = match spec.choice {
            Choice::Apart(s) if s & 1 == 0 => Dev::Meta,
            _ => Dev::Mirror,
        };
        let torn_at = match spec.choice {
            Choice::Torn(_) if in_flight > 0 => Some(rng.below(in_flight as u64) as usize),
            _ => None,
        };
        let mut torn = None;
        let mut k = 0;
        for dev in Dev::ALL {
            let i = dev.index();
            for (b, d) in std::mem::take(&mut pending[i]) {
                let here = Some(k) == torn_at;
                k += 1;
                let keep = match spec.choice {
                    Choice::All => true,
                    Choice::Flushed => false,
                    Choice::Apart(_) if dev.is_meta() => dev == ahead,
                    Choice::Random(_) | Choice::Torn(_) | Choice::Apart(_) => rng.below(2) == 1,
                };
                if here {
                    // Some sectors, not none and not all.
                    let mask = 1 + rng.below(254) as u8;
                    let base = match dev {
                        Dev::Meta => &self.meta,
                        Dev::Data => &self.data,
                        Dev::Mirror => self.mirror.as_ref().unwrap_or(&self.meta),
                    };
                    let old = durable[i].get(&b).cloned().unwrap_or_else(|| base.block(b));
                    let lost: Vec<usize> = (0..SECTORS_PER_BLOCK).filter(|s| mask & (1 << s) == 0).collect();
                    let garbage =
                        (dev.is_meta() && rng.below(2) == 0).then(|| lost[rng.below(lost.len() as u64) as usize]);
                    durable[i].insert(b, tear(&old, &d, mask, garbage));
                    torn = Some((dev, b, mask));
                } else if keep {
                    durable[i].insert(b, d);
                }
            }
        }
        let fingerprint = fingerprint(&durable, torn);
        let [m, d, c] = durable;
        CrashImages {
            meta: Arc::new(self.meta.with_blocks(m)),
            data: Arc::new(self.data.with_blocks(d)),
            mirror: self.mirror.as_ref().map(|base| Arc::new(base.with_blocks(c))),
            window,
            fingerprint,
            torn,
        }
    }

    /// Positions just after each flush, and the end of the recording.
    fn flush_cuts(&self) -> Vec<usize> {
        let mut cuts: Vec<usize> =
            self.events.iter().enumerate().filter(|(_, e)| matches!(e, Event::Flush(_))).map(|(i, _)| i + 1).collect();
        cuts.push(self.events.len());
        cuts.dedup();
        cuts
    }

    /// Positions just after each write.
    fn write_cuts(&self) -> Vec<usize> {
        self.events.iter().enumerate().filter(|(_, e)| matches!(e, Event::Write { .. })).map(|(i, _)| i + 1).collect()
    }

    /// Up to `budget` crash states, deterministic in `seed`: first every
    /// prefix that ends at a flush (with and without what was in flight),
    /// then prefixes that end at writes, random subsets and torn writes at
    /// random cuts. A long recording, whose flushes alone would use up the
    /// budget, gets an even sample of its flush cuts from start to end
    /// instead, and random write cuts for its prefixes.
    #[must_use]
    pub fn states(&self, seed: u64, budget: usize) -> Vec<StateSpec> {
        let mut out = Vec::new();
        let push = |s: StateSpec, out: &mut Vec<StateSpec>| {
            if out.len() < budget && !out.contains(&s) {
                out.push(s);
            }
        };
        let flushes = self.flush_cuts();
        let k = (budget / 4).max(2);
        let chosen: Vec<usize> = if flushes.len() <= k {
            flushes
        } else {
            (0..k).map(|i| flushes[i * (flushes.len() - 1) / (k - 1)]).collect()
        };
        for cut in chosen {
            push(StateSpec { cut, choice: Choice::All }, &mut out);
            push(StateSpec { cut, choice: Choice::Flushed }, &mut out);
        }
        let writes = self.write_cuts();
        if writes.is_empty() {
            return out;
        }
        let every_write = writes.len() * 3 <= budget;
        let mut rng = Rng::new(seed);
        let mut next_prefix = 0;
        let mut attempts = 0;
        // A mirrored recording also draws its copies apart.
        let kinds = if self.mirror.is_some() { 4 } else { 3 };
        while out.len() < budget && attempts < budget * 4 {
            attempts += 1;
            let s = rng.next_u64();
            let choice = match attempts % kinds {
                0 if every_write && next_prefix < writes.len() => {
                    next_prefix += 1;
                    push(StateSpec { cut: writes[next_prefix - 1], choice: Choice::All }, &mut out);
                    continue;
                }
                0 => Choice::All,
                1 => Choice::Random(s),
                2 => Choice::Torn(s),
                _ => Choice::Apart(s),
            };
            let cut = writes[rng.below(writes.len() as u64) as usize];
            push(StateSpec { cut, choice }, &mut out);
        }
        out
    }
}

fn fingerprint(maps: &[BlockMap; 3], torn: Option<(Dev, u64, u8)>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (i, m) in maps.iter().enumerate() {
        let mut keys: Vec<&u64> = m.keys().collect();
        keys.sort_unstable();
        i.hash(&mut h);
        for k in keys {
            k.hash(&mut h);
            if torn.is_some_and(|(d, b, _)| d.index() == i && b == *k) {
                m[k][..].hash(&mut h);
            } else {
                // Recorded blocks live as long as the recording: one
                // pointer, one content.
                (Arc::as_ptr(&m[k]) as usize).hash(&mut h);
            }
        }
    }
    h.finish()
}

/// Fingerprints already checked, so that equal states are checked once.
#[derive(Debug, Default)]
pub struct Seen(HashSet<u64>);

impl Seen {
    /// Whether `fp` is new (and remembers it).
    pub fn first(&mut self, fp: u64) -> bool {
        self.0.insert(fp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Fill;

    fn block(v: u8) -> Block {
        Arc::new([v; BLOCK_SIZE])
    }

    fn w(dev: Dev, b: u64, v: u8) -> Event {
        Event::Write { dev, block: b, data: block(v) }
    }

    fn rec() -> Recording {
        let events = vec![
            Event::Mark(Mark::StepStart(1)),
            w(Dev::Data, 5, 1),
            Event::Flush(Dev::Data),
            w(Dev::Meta, 7, 2),
            w(Dev::Data, 6, 3),
            Event::Flush(Dev::Meta),
            Event::Mark(Mark::Durable(1)),
            Event::Mark(Mark::StepStart(2)),
            w(Dev::Meta, 7, 4),
            w(Dev::Meta, 8, 5),
        ];
        Recording {
            meta: Arc::new(Image::new(16, Fill::Zero)),
            data: Arc::new(Image::new(16, Fill::Poison)),
            mirror: None,
            events,
        }
    }

    #[test]
    fn a_flush_makes_only_its_own_device_durable() {
        let r = rec();
        // After the meta flush: the data write after the data flush is still in flight.
        let s = r.build(&StateSpec { cut: 6, choice: Choice::Flushed });
        assert_eq!(s.meta.block(7)[0], 2);
        assert_eq!(s.data.block(5)[0], 1);
        assert_eq!(s.data.block(6)[..8], crate::image::poison_block(6)[..8]);
        assert_eq!(s.window, Window { durable: 0, issued: 1, synced: 0 });
        let all = r.build(&StateSpec { cut: 6, choice: Choice::All });
        assert_eq!(all.data.block(6)[0], 3);
    }

    #[test]
    fn marks_give_the_window_and_in_flight_writes_may_be_lost() {
        let r = rec();
        let s = r.build(&StateSpec { cut: 10, choice: Choice::Flushed });
        assert_eq!(s.window, Window { durable: 1, issued: 2, synced: 0 });
        assert_eq!(s.meta.block(7)[0], 2, "the in-flight rewrite is lost");
        assert_eq!(s.meta.block(8)[0], 0);
        let kept: Vec<u8> = (0..64)
            .map(|seed| r.build(&StateSpec { cut: 10, choice: Choice::Random(seed) }).meta.block(8)[0])
            .collect();
        assert!(kept.contains(&0) && kept.contains(&5), "random subsets keep and lose");
    }

    #[test]
    fn a_torn_block_mixes_old_and_new_sectors() {
        let r = rec();
        for seed in 0..32 {
            let s = r.build(&StateSpec { cut: 10, choice: Choice::Torn(seed) });
            let (dev, b, mask) = s.torn.expect("one block torn");
            assert!(mask != 0 && mask != 0xFF);
            let got = if dev == Dev::Meta { s.meta.block(b) } else { s.data.block(b) };
            let new = match (dev, b) {
                (Dev::Data, _) => 3,
                (_, 7) => 4,
                _ => 5,
            };
            for sector in 0..SECTORS_PER_BLOCK {
                let byte = got[sector * SECTOR_BYTES];
                if mask & (1 << sector) != 0 {
                    assert_eq!(byte, new);
                } else if dev == Dev::Data {
                    assert_eq!(byte, 0xDE, "a lost data sector keeps its old contents (poison here)");
                } else {
                    assert_ne!(byte, new, "a lost sector keeps old contents or garbage");
                }
            }
        }
    }

    #[test]
    fn a_discard_loses_the_blocks_at_once_until_written_again() {
        let mut r = rec();
        r.events.insert(3, Event::Discard { dev: Dev::Data, first: 4, count: 2 });
        r.events.push(w(Dev::Data, 4, 9));
        // Cut right after the discard, nothing flushed since: gone already.
        let s = r.build(&StateSpec { cut: 4, choice: Choice::Flushed });
        assert_eq!(s.data.block(5), discarded_garbage(), "a flushed block discarded");
        assert_eq!(s.data.block(4), discarded_garbage(), "a block never written discarded");
        let s = r.build(&StateSpec { cut: 4, choice: Choice::All });
        assert!(s.data.block(5).iter().all(|&b| b == 0), "zeros in other states");
        // The write after it may be lost, leaving the discarded block.
        let n = r.events.len();
        assert_eq!(r.build(&StateSpec { cut: n, choice: Choice::Flushed }).data.block(4), discarded_garbage());
        assert_eq!(r.build(&StateSpec { cut: n, choice: Choice::All }).data.block(4)[0], 9);
        assert_eq!(
            r.build(&StateSpec { cut: n, choice: Choice::All }).meta.block(7)[0],
            4,
            "the other device keeps its own"
        );
    }

    #[test]
    fn the_copies_of_a_mirror_keep_their_own_flushes_and_in_flight_writes() {
        // Both copies written alike, copy 1 flushed, copy 2 not yet.
        let events = vec![
            Event::Mark(Mark::StepStart(1)),
            w(Dev::Meta, 7, 1),
            w(Dev::Mirror, 7, 1),
            Event::Flush(Dev::Meta),
            w(Dev::Meta, 8, 2),
            w(Dev::Mirror, 8, 2),
        ];
        let zero = || Arc::new(Image::new(16, Fill::Zero));
        let r = Recording { meta: zero(), data: Arc::new(Image::new(16, Fill::Poison)), mirror: Some(zero()), events };
        let s = r.build(&StateSpec { cut: 6, choice: Choice::Flushed });
        let copy2 = s.mirror.expect("a mirror");
        assert_eq!((s.meta.block(7)[0], copy2.block(7)[0]), (1, 0), "a flush makes only its own copy durable");
        for seed in 0..8u64 {
            let s = r.build(&StateSpec { cut: 6, choice: Choice::Apart(seed) });
            let copy2 = s.mirror.expect("a mirror");
            let (one, two) = (s.meta.block(8)[0], copy2.block(8)[0]);
            assert_eq!((one, two), if seed & 1 == 0 { (2, 0) } else { (0, 2) }, "seed {seed}: apart");
            assert_eq!(s.meta.block(7)[0], 1, "what copy 1 flushed stays");
        }
        let drawn = r.states(3, 40);
        assert!(drawn.iter().any(|s| matches!(s.choice, Choice::Apart(_))), "a mirrored recording draws copies apart");
        assert!(!rec().states(3, 40).iter().any(|s| matches!(s.choice, Choice::Apart(_))));
    }

    #[test]
    fn states_cover_every_flush_and_stay_within_the_budget() {
        let r = rec();
        let s = r.states(1, 40);
        assert!(s.len() <= 40);
        for cut in [3, 6, 10] {
            assert!(s.contains(&StateSpec { cut, choice: Choice::Flushed }), "cut {cut}");
        }
        assert_eq!(s, r.states(1, 40), "deterministic");
    }
}
