//! [`Server`]: a mount, its INIT, and the threads that serve it over the
//! transport the kernel allows: per-CPU io_uring queues (with a /dev/fuse
//! thread beside them) or /dev/fuse alone.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use crate::handler::Handler;
use crate::notify::Notifier;
use crate::ring::{self, Queue};
use crate::session::{Error, Session, uring_enabled};
use crate::{QUEUE_THREADS, devfuse};

/// The transport a mount ended up with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// Requests arrive on per-CPU io_uring queues.
    Uring { queues: usize },
    /// Requests are read from /dev/fuse; `why` says why not io_uring.
    DevFuse { why: String },
}

impl Transport {
    /// `"uring"` or `"devfuse"`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Uring { .. } => "uring",
            Self::DevFuse { .. } => "devfuse",
        }
    }
}

/// What to serve over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transports {
    /// Ask for io_uring (falling back to /dev/fuse when refused).
    pub uring: bool,
    /// Threads reading /dev/fuse (at least one: with io_uring it carries
    /// FORGET and INTERRUPT).
    pub dev_threads: usize,
    /// Threads per io_uring queue, each with its own ring and one entry: a
    /// request that blocks holds its thread and entry until answered, the
    /// queue's other threads serve the CPU's next requests meanwhile.
    pub queue_threads: u16,
}

impl Default for Transports {
    fn default() -> Self {
        Self { uring: false, dev_threads: 1, queue_threads: QUEUE_THREADS }
    }
}

/// Requests counted by the transports.
#[derive(Debug)]
pub struct Stats {
    counts: Vec<AtomicU64>,
    by_cpu: Vec<AtomicU64>,
    ring_requests: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            counts: (0..64).map(|_| AtomicU64::new(0)).collect(),
            by_cpu: (0..64).map(|_| AtomicU64::new(0)).collect(),
            ring_requests: AtomicU64::new(0),
        }
    }
}

impl Stats {
    pub(crate) fn count(&self, opcode: u32) {
        if let Some(c) = usize::try_from(opcode).ok().and_then(|i| self.counts.get(i)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(c) = self.by_cpu.get(rustix::thread::sched_getcpu()) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn note_ring_request(&self) {
        self.ring_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// What was served so far.
    pub fn report(&self) -> Report {
        let counts =
            (0u32..).zip(&self.counts).map(|(op, c)| (op, c.load(Ordering::Relaxed))).filter(|&(_, c)| c > 0).collect();
        let mut by_cpu: Vec<u64> = self.by_cpu.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        while by_cpu.last() == Some(&0) {
            by_cpu.pop();
        }
        Report { counts, by_cpu, ring_requests: self.ring_requests.load(Ordering::Relaxed) }
    }
}

/// What a server served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Requests by opcode (opcodes past 63 are not counted).
    pub counts: Vec<(u32, u64)>,
    /// Requests by the CPU the serving thread ran on (CPUs past 63 are not
    /// counted): with a client pinned, the ones served on another CPU paid
    /// a wake-up across CPUs.
    pub by_cpu: Vec<u64>,
    /// Requests that arrived on io_uring queues.
    pub ring_requests: u64,
}

/// A mounted file system and its serving threads.
#[derive(Debug)]
pub struct Server<H: Handler> {
    session: Arc<Session>,
    handler: Arc<H>,
    stats: Arc<Stats>,
    threads: Vec<JoinHandle<Result<(), Error>>>,
    /// What the mount serves requests over, and why.
    pub transport: Transport,
}

impl<H: Handler> Server<H> {
    /// Mounts `handler` on `mountpoint` with `options` (see
    /// [`crate::MountArgs::parse`]; root only), negotiates INIT and starts
    /// serving. With `transports.uring`, asks the kernel for io_uring and
    /// registers one queue per possible CPU, served by
    /// `transports.queue_threads` threads pinned to it; falls back to /dev/fuse, with
    /// the reason in [`Transport`], when the kernel does not offer it or
    /// refuses a queue.
    ///
    /// # Errors
    ///
    /// [`Error`] when the mount or INIT fails.
    pub fn start<S: AsRef<str>>(
        mountpoint: &Path,
        options: &[S],
        handler: Arc<H>,
        transports: Transports,
    ) -> Result<Self, Error> {
        let mut session = Session::mount(mountpoint, options)?;
        if let Err(e) = session.init(&*handler, transports.uring) {
            let _ = session.unmount(true);
            return Err(e);
        }
        let session = Arc::new(session);
        let stats = Arc::new(Stats::default());
        let mut threads = Vec::new();
        for _ in 0..transports.dev_threads.max(1) {
            let (s, h, st) = (Arc::clone(&session), Arc::clone(&handler), Arc::clone(&stats));
            threads.push(std::thread::spawn(move || devfuse::serve(&s, &*h, &st)));
        }
        let transport = if !session.uring {
            let why = if !transports.uring {
                "not asked for".to_string()
            } else if !uring_enabled() {
                "the fuse module's enable_uring is off".to_string()
            } else {
                "the kernel did not offer FUSE_OVER_IO_URING".to_string()
            };
            Transport::DevFuse { why }
        } else {
            let queues = ring::possible_cpus();
            let (tx, rx) = mpsc::channel();
            let per_queue = usize::from(transports.queue_threads.max(1));
            for n in 0..queues * per_queue {
                let (s, h, st) = (Arc::clone(&session), Arc::clone(&handler), Arc::clone(&stats));
                let tx = tx.clone();
                let qid = u16::try_from(n % queues).unwrap_or(u16::MAX);
                threads.push(std::thread::spawn(move || {
                    // Each thread builds its own ring: the kernel completes
                    // a command in the task that submitted it.
                    match Queue::register(s, h, st, qid, 1) {
                        Ok(q) => {
                            let _ = tx.send(Ok(()));
                            q.serve()
                        }
                        // Not a failure of the server: the kernel falls back
                        // to /dev/fuse, and the caller hears why.
                        Err(e) => {
                            let _ = tx.send(Err(e.to_string()));
                            Ok(())
                        }
                    }
                }));
            }
            drop(tx);
            // One word from each queue; the threads keep their senders while they serve.
            let refused: Vec<String> = rx.iter().take(queues * per_queue).filter_map(Result::err).collect();
            match refused.first() {
                None => Transport::Uring { queues },
                // The kernel drops io_uring for the connection on a failed
                // registration and serves /dev/fuse instead.
                Some(why) => Transport::DevFuse { why: why.clone() },
            }
        };
        Ok(Self { session, handler, stats, threads, transport })
    }

    /// Sends notifications to the kernel on this mount.
    pub fn notifier(&self) -> Notifier {
        Notifier::new(self.session.dev_arc())
    }

    /// The session (mount point, what INIT settled, unmount).
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The handler served.
    pub fn handler(&self) -> &Arc<H> {
        &self.handler
    }

    /// Requests served so far.
    pub fn report(&self) -> Report {
        self.stats.report()
    }

    /// Unmounts lazily and waits for every serving thread to see the end.
    ///
    /// # Errors
    ///
    /// The first thread's [`Error`], if one failed.
    pub fn stop(self) -> Result<Report, Error> {
        // Already unmounted by someone else is fine.
        let _ = self.session.unmount(true);
        self.wait()
    }

    /// Waits until the file system is unmounted (by anyone) and every
    /// serving thread has ended, then calls the handler's `destroy`.
    ///
    /// # Errors
    ///
    /// The first thread's [`Error`], if one failed.
    pub fn wait(mut self) -> Result<Report, Error> {
        let mut first = None;
        for t in std::mem::take(&mut self.threads) {
            let r = t.join().unwrap_or_else(|_| Err(Error::Ring("a serving thread panicked".into())));
            if let (Err(e), None) = (r, &first) {
                first = Some(e);
            }
        }
        self.session.destroy_once(&*self.handler);
        match first {
            Some(e) => Err(e),
            None => Ok(self.stats.report()),
        }
    }
}

impl<H: Handler> Drop for Server<H> {
    /// A server dropped without [`Server::stop`] (a failed test, a panic)
    /// still leaves no mount behind.
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let _ = self.session.unmount(true);
        }
    }
}
