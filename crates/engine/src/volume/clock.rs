//! Where the engine's time comes from: the time of day it stamps on inodes
//! and partial segments, and the readings it measures intervals with (the
//! commit interval, idle time before cleaning, how long a clean took).
//!
//! A mounted volume reads the system's clocks ([`SystemClock`]). Tests and
//! the simulations hand in their own, so that a run behaves the same way
//! every time and a failure replays from its seed: any `Fn() -> Timestamp`
//! is a clock, whose intervals are measured on the times it returns.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::types::Timestamp;

/// A source of time for a volume.
pub trait TimeSource: Send + Sync {
    /// The time of day.
    fn now(&self) -> Timestamp;

    /// A reading that never goes back, from an origin of the clock's
    /// choosing: intervals are differences of two readings.
    fn reading(&self) -> Duration;
}

/// What a volume is handed.
pub type Clock = Arc<dyn TimeSource>;

/// The system's clocks: the wall clock for stamps, a monotonic clock for
/// intervals (the wall clock may be set back; intervals must not be).
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// The system's clocks, as a volume is handed them.
    #[must_use]
    pub fn shared() -> Clock {
        Arc::new(SystemClock { origin: Instant::now() })
    }
}

impl TimeSource for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn reading(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A test's clock: the time it returns is both the stamp and the reading
/// (times before the epoch read as zero; a clock set back measures no time).
impl<F: Fn() -> Timestamp + Send + Sync> TimeSource for F {
    fn now(&self) -> Timestamp {
        self()
    }

    fn reading(&self) -> Duration {
        let t = self();
        match u64::try_from(t.sec) {
            Ok(sec) => Duration::new(sec, t.nsec),
            Err(_) => Duration::ZERO,
        }
    }
}

/// Time elapsed since `earlier`, a reading of `clock`.
pub(crate) fn since(clock: &dyn TimeSource, earlier: Duration) -> Duration {
    clock.reading().saturating_sub(earlier)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;

    #[test]
    fn a_test_clock_measures_intervals_on_the_times_it_returns() {
        let now = Arc::new(AtomicI64::new(1_700_000_000));
        let n = now.clone();
        let clock: Clock = Arc::new(move || Timestamp::new(n.load(Ordering::Relaxed), 0));
        let start = clock.reading();
        assert_eq!(since(clock.as_ref(), start), Duration::ZERO);
        now.fetch_add(11, Ordering::Relaxed);
        assert_eq!(since(clock.as_ref(), start), Duration::from_secs(11));
        now.fetch_sub(100, Ordering::Relaxed);
        assert_eq!(since(clock.as_ref(), start), Duration::ZERO, "a clock set back measures no time");
    }

    #[test]
    fn the_system_clock_moves_forward() {
        let clock = SystemClock::shared();
        let a = clock.reading();
        assert!(clock.reading() >= a);
        assert!(clock.now().sec > 1_600_000_000);
    }
}
