//! A [`Drive`] run in real time: each request returns when the modelled
//! disk would have completed it. The drive's clock is milliseconds since
//! the server started. A request the drive answers at once (a cache hit, a
//! cached write, anything on the SSD) sleeps until its completion time in
//! the serving thread; the others wait for the head, which one thread of
//! its own runs: it starts the next request in elevator order, sleeps
//! until its modelled end and reports what completed.
//!
//! Times chain on the model's clock, not on when a thread woke: the head's
//! next request starts when its last one ended (or when it arrived), so a
//! late wake-up delays the answer by its own lateness and never
//! accumulates. The lateness is measured and reported with the rest.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::trace::disk::{Drive, Model, Ms, Request, Submitted, Ticket};

/// A thread's timer slack, ns: the kernel's default of 50 us would be a
/// fifth of an SSD's modelled read.
const TIMER_SLACK_NS: u64 = 1000;

#[derive(Debug, Default)]
struct Lateness {
    requests: u64,
    /// Sum and largest of (when the answer went out - modelled completion), ms.
    late_ms: f64,
    late_max_ms: f64,
    /// Sum of modelled response times (completion - arrival), ms.
    response_ms: f64,
}

/// Where the head leaves a waiting request's completion time: one per
/// request, so that a completion wakes its own thread and no other.
#[derive(Debug, Default)]
struct Slot {
    at: Mutex<Option<Ms>>,
    cv: Condvar,
}

#[derive(Debug)]
struct State {
    drive: Drive,
    waiting: HashMap<Ticket, Arc<Slot>>,
    stop: bool,
    lateness: Lateness,
}

/// The emulated disk behind a served image.
#[derive(Debug)]
pub struct Emulator {
    model: Model,
    write_cache: bool,
    span: u64,
    epoch: Instant,
    state: Mutex<State>,
    head_cv: Condvar,
    head: Mutex<Option<JoinHandle<()>>>,
}

fn set_timer_slack() {
    // Best effort: without it sleeps are up to 50 us late.
    let _ = nix::sys::prctl::set_timerslack(TIMER_SLACK_NS);
}

impl Emulator {
    /// A drive of `model` over `span` bytes, with its head thread running.
    pub fn start(model: Model, span: u64, write_cache: bool) -> Arc<Emulator> {
        let e = Arc::new(Emulator {
            model,
            write_cache,
            span,
            epoch: Instant::now(),
            state: Mutex::new(State {
                drive: Drive::new(model, span, write_cache),
                waiting: HashMap::new(),
                stop: false,
                lateness: Lateness::default(),
            }),
            head_cv: Condvar::new(),
            head: Mutex::new(None),
        });
        let runner = Arc::clone(&e);
        let handle = std::thread::Builder::new().name("disk-head".into()).spawn(move || runner.run_head()).ok();
        *e.head.lock().unwrap_or_else(PoisonError::into_inner) = handle;
        e
    }

    /// The model emulated.
    pub fn model(&self) -> Model {
        self.model
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> Ms {
        self.epoch.elapsed().as_secs_f64() * 1e3
    }

    fn sleep_until(&self, at: Ms) {
        let now = self.now();
        if at > now {
            std::thread::sleep(Duration::from_secs_f64((at - now) / 1e3));
        }
    }

    fn run_head(&self) {
        set_timer_slack();
        let mut st = self.lock();
        loop {
            if st.stop {
                return;
            }
            let Some(end) = st.drive.start_next() else {
                st = self.head_cv.wait(st).unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            drop(st);
            self.sleep_until(end);
            st = self.lock();
            for (ticket, at) in st.drive.finish() {
                if let Some(slot) = st.waiting.remove(&ticket) {
                    *slot.at.lock().unwrap_or_else(PoisonError::into_inner) = Some(at);
                    slot.cv.notify_one();
                }
            }
        }
    }

    /// Serves `req`: returns when the modelled disk has completed it.
    pub fn serve(&self, req: Request) {
        thread_local!(static SLACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
        if !SLACK.with(|s| s.replace(true)) {
            set_timer_slack();
        }
        let arrival = self.now();
        let mut st = self.lock();
        let submitted = st.drive.submit(arrival, req);
        // Anything submitted may have given the head work (a cached write
        // to write back, a read to seek for).
        self.head_cv.notify_one();
        let at = match submitted {
            Submitted::At(t) => {
                drop(st);
                t
            }
            Submitted::Later(ticket) => {
                // Registered under the drive's lock: the head cannot
                // complete the request before its slot is there.
                let slot = Arc::new(Slot::default());
                st.waiting.insert(ticket, Arc::clone(&slot));
                drop(st);
                let mut at = slot.at.lock().unwrap_or_else(PoisonError::into_inner);
                loop {
                    if let Some(t) = *at {
                        break t;
                    }
                    at = slot.cv.wait(at).unwrap_or_else(PoisonError::into_inner);
                }
            }
        };
        self.sleep_until(at);
        let late = (self.now() - at).max(0.0);
        let mut st = self.lock();
        let l = &mut st.lateness;
        l.requests += 1;
        l.late_ms += late;
        l.late_max_ms = l.late_max_ms.max(late);
        l.response_ms += at - arrival;
    }

    /// Stops the head thread.
    pub fn stop(&self) {
        self.lock().stop = true;
        self.head_cv.notify_all();
        if let Some(h) = self.head.lock().unwrap_or_else(PoisonError::into_inner).take() {
            let _ = h.join();
        }
    }

    /// The model, its counters and how late answers went out, as JSON.
    pub fn to_json(&self) -> Value {
        let st = self.lock();
        let l = &st.lateness;
        json!({
            "model": self.model.name(),
            "write_cache": self.write_cache,
            "span_bytes": self.span,
            "clock_ms": self.now(),
            "drive": st.drive.counters().to_json(),
            "answered": l.requests,
            "response_ms": l.response_ms,
            "late_ms": l.late_ms,
            "late_max_ms": l.late_max_ms,
        })
    }
}
