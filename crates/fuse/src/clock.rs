//! One clock for the kernel and the volume.
//!
//! Under the writeback cache the kernel stamps some times itself (mtime and
//! ctime of a file whose pages it caches, sent later with a SETATTR) and
//! the volume stamps the others (creates, links, renames, chmod...). The
//! kernel takes its time from `current_time()`, which for a FUSE inode is
//! the coarse real-time clock (the time of the last timer tick, up to a few
//! milliseconds behind); a volume reading the precise clock would stamp an
//! earlier event later than a kernel-stamped later one, and make, rsync and
//! backup tools compare such times. So the volume reads the same coarse
//! clock ([`KernelClock::now`]), and never stamps below the newest change
//! time the kernel has handed it ([`KernelClock::saw`]), in case the two
//! ever disagree.

use std::sync::atomic::{AtomicI64, Ordering};

use dualfs_engine::types::Timestamp;

/// How far ahead of our clock a kernel time may pull the floor: a time
/// further ahead is not the kernel's clock but something set by hand.
const MAX_LEAD_NANOS: i64 = 1_000_000_000;

/// The coarse real-time clock, with a floor.
#[derive(Debug, Default)]
pub struct KernelClock {
    /// The newest kernel-stamped time seen, in nanoseconds since the epoch.
    floor: AtomicI64,
}

fn nanos(t: Timestamp) -> i64 {
    t.sec.saturating_mul(1_000_000_000).saturating_add(i64::from(t.nsec))
}

fn timestamp(n: i64) -> Timestamp {
    // rem_euclid is in 0..1e9, so the cast cannot truncate.
    Timestamp::new(n.div_euclid(1_000_000_000), n.rem_euclid(1_000_000_000) as u32)
}

/// `CLOCK_REALTIME_COARSE`, the kernel's `current_time()` for FUSE inodes.
#[must_use]
pub fn coarse_now() -> Timestamp {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    // tv_nsec is in 0..1e9 by the kernel's contract.
    Timestamp::new(t.tv_sec, u32::try_from(t.tv_nsec).unwrap_or(0))
}

impl KernelClock {
    /// The time to stamp now: the coarse clock, or the floor if later.
    #[must_use]
    pub fn now(&self) -> Timestamp {
        self.at(coarse_now())
    }

    fn at(&self, clock: Timestamp) -> Timestamp {
        timestamp(nanos(clock).max(self.floor.load(Ordering::Relaxed)))
    }

    /// Notes a change time the kernel stamped (a SETATTR's ctime, which no
    /// caller can choose): later stamps are never below it.
    pub fn saw(&self, t: Timestamp) {
        self.saw_at(t, coarse_now());
    }

    fn saw_at(&self, t: Timestamp, clock: Timestamp) {
        let n = nanos(t);
        if n <= nanos(clock).saturating_add(MAX_LEAD_NANOS) {
            self.floor.fetch_max(n, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_never_below_a_kernel_time_seen() {
        let c = KernelClock::default();
        let clock = Timestamp::new(1000, 500);
        assert_eq!(c.at(clock), clock);
        // The kernel stamped a little later than our clock reads.
        c.saw_at(Timestamp::new(1000, 900), clock);
        assert_eq!(c.at(clock), Timestamp::new(1000, 900));
        assert_eq!(c.at(Timestamp::new(1001, 0)), Timestamp::new(1001, 0));
        // Older kernel times do not lower the floor.
        c.saw_at(Timestamp::new(999, 0), clock);
        assert_eq!(c.at(clock), Timestamp::new(1000, 900));
        // A time far ahead is not the kernel's clock: ignored.
        c.saw_at(Timestamp::new(5000, 0), clock);
        assert_eq!(c.at(clock), Timestamp::new(1000, 900));
    }

    #[test]
    fn the_coarse_clock_never_runs_ahead_of_the_precise_one() {
        for _ in 0..1000 {
            let coarse = coarse_now();
            let precise = Timestamp::now();
            assert!(coarse <= precise, "{coarse:?} > {precise:?}");
        }
    }

    #[test]
    fn times_before_1970_survive_the_nanosecond_form() {
        let t = Timestamp::new(-2, 800_000_000);
        assert_eq!(timestamp(nanos(t)), t);
    }
}
