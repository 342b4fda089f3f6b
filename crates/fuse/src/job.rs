//! A long job the serving process runs in a thread of its own while
//! requests go on (a cleaning run, a scrub): started by setting a control
//! attribute, followed by reading it, stopped by removing it. One at a
//! time per kind; the latest one's progress and outcome stay readable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use serde_json::{Value, json};

use crate::Errno;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where the latest job is.
#[derive(Debug)]
struct State<R> {
    /// Jobs started since mount; 0 before the first.
    id: u64,
    running: bool,
    order: String,
    done: u64,
    total: u64,
    /// Asked to stop before it ended.
    stopped: bool,
    outcome: Option<R>,
    error: Option<String>,
}

impl<R> Default for State<R> {
    fn default() -> Self {
        State {
            id: 0,
            running: false,
            order: String::new(),
            done: 0,
            total: 0,
            stopped: false,
            outcome: None,
            error: None,
        }
    }
}

/// Reports progress as (done, total) and answers whether to go on.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64) -> bool;

/// One kind of background job: `what` names it in the log ("cleaning",
/// "scrub") and its thread is `dualfs-THREAD`.
#[derive(Debug)]
pub struct Job<R> {
    what: &'static str,
    thread: &'static str,
    state: Arc<Mutex<State<R>>>,
    stop: Arc<AtomicBool>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl<R: Send + 'static> Job<R> {
    #[must_use]
    pub fn new(what: &'static str, thread: &'static str) -> Job<R> {
        Job { what, thread, state: Arc::default(), stop: Arc::default(), worker: Mutex::new(None) }
    }

    /// Starts `work` in the background, described by `order`, with `total`
    /// as its first estimate of the work. `work` reports its progress and
    /// stops early when the progress callback answers false; its error is
    /// logged and kept for the reader.
    ///
    /// # Errors
    /// EBUSY while a job of this kind runs, EAGAIN if no thread can be
    /// started.
    pub fn start<F>(&self, order: String, total: u64, work: F) -> Result<(), Errno>
    where
        F: FnOnce(Progress<'_>) -> Result<R, String> + Send + 'static,
    {
        let mut worker = lock(&self.worker);
        if lock(&self.state).running {
            return Err(Errno::EBUSY);
        }
        // The previous job has ended: its thread is done or about to be.
        if let Some(h) = worker.take() {
            let _ = h.join();
        }
        self.stop.store(false, Ordering::Relaxed);
        {
            let mut s = lock(&self.state);
            *s = State { id: s.id + 1, running: true, order, total, ..State::default() };
        }
        let (state, stop, what) = (self.state.clone(), self.stop.clone(), self.what);
        let spawned = std::thread::Builder::new().name(format!("dualfs-{}", self.thread)).spawn(move || {
            let r = work(&mut |done, total| {
                let mut s = lock(&state);
                (s.done, s.total) = (done, total);
                !stop.load(Ordering::Relaxed)
            });
            let mut s = lock(&state);
            s.running = false;
            s.stopped = stop.load(Ordering::Relaxed);
            match r {
                Ok(outcome) => s.outcome = Some(outcome),
                Err(e) => {
                    log::error!("{what} failed: {e}");
                    s.error = Some(e);
                }
            }
        });
        match spawned {
            Ok(h) => {
                *worker = Some(h);
                Ok(())
            }
            Err(e) => {
                let mut s = lock(&self.state);
                s.running = false;
                s.error = Some(format!("cannot start the {} thread: {e}", self.what));
                Err(Errno::EAGAIN)
            }
        }
    }

    /// The latest job's state as the control attribute answers it: its
    /// outcome drawn by `outcome` (given None before one).
    pub fn json(&self, outcome: impl Fn(Option<&R>) -> Value) -> Vec<u8> {
        let s = lock(&self.state);
        let state = match (s.id, s.running, &s.error) {
            (0, _, _) => "idle",
            (_, true, _) => "running",
            (_, false, Some(_)) => "failed",
            _ => "done",
        };
        json!({
            "id": s.id,
            "state": state,
            "request": s.order,
            "done": s.done,
            "total": s.total,
            "stopped": s.stopped,
            "error": s.error,
            "report": outcome(s.outcome.as_ref()),
        })
        .to_string()
        .into_bytes()
    }

    /// Asks a running job to stop at its next progress report.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stops a running job and waits for it (at unmount).
    pub fn shutdown(&self) {
        self.stop();
        if let Some(h) = lock(&self.worker).take()
            && h.join().is_err()
        {
            log::error!("the {} thread panicked", self.what);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(job: &Job<u32>) -> Value {
        serde_json::from_slice(&job.json(|o| json!(o))).unwrap_or_default()
    }

    #[test]
    fn a_job_runs_once_at_a_time_and_stops_when_asked() {
        let job = Job::<u32>::new("test", "test");
        assert_eq!(state(&job)["state"], "idle");
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let started = job.start("first".into(), 10, move |progress| {
            let _ = go_rx.recv();
            let mut n = 0;
            while progress(n, 10) && n < 1_000_000 {
                n += 1;
            }
            Ok(n as u32)
        });
        assert_eq!(started, Ok(()));
        assert_eq!(job.start("second".into(), 1, |_| Ok(0)), Err(Errno::EBUSY));
        assert_eq!(state(&job)["state"], "running");
        job.stop();
        let _ = go_tx.send(());
        job.shutdown();
        let s = state(&job);
        assert_eq!(
            (s["state"].as_str(), s["stopped"].as_bool(), s["report"].as_u64()),
            (Some("done"), Some(true), Some(0))
        );
        assert_eq!(job.start("third".into(), 1, |_| Err("no".into())), Ok(()));
        job.shutdown();
        let s = state(&job);
        assert_eq!((s["id"].as_u64(), s["state"].as_str(), s["error"].as_str()), (Some(2), Some("failed"), Some("no")));
    }
}
