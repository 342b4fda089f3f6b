//! A prototype FUSE server with two transports, to measure what FUSE over
//! io_uring saves on this kernel before DualFS's adapter (crates/fuse, on
//! fuser) adopts it (docs/DESIGN.md, "FUSE over io_uring").
//!
//! Layers, top down: [`Server`] starts a mount and its threads; [`tree`] is
//! the file system (an in-memory tree) and the one request handler;
//! [`devfuse`] mounts, negotiates INIT and serves read/write on /dev/fuse;
//! [`ring`] serves the per-CPU io_uring queues; [`abi`] decodes and encodes
//! the kernel's structs. The engine never sees any of it.

pub mod abi;
pub mod devfuse;
pub mod ring;
pub mod tree;

use std::path::Path;
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

pub use devfuse::{Error, Session, uring_enabled};
pub use tree::Fs;

/// Ring entries per queue: one serves a client at a time; a second lets a
/// queue take the next request while the first is being answered.
pub const QUEUE_DEPTH: u16 = 2;

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

/// What a server served, once it has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Requests by opcode.
    pub counts: Vec<(u32, u64)>,
    /// Requests by the CPU the serving thread ran on.
    pub by_cpu: Vec<u64>,
    /// Requests that arrived on io_uring queues.
    pub ring_requests: u64,
}

/// A mounted prototype and its serving threads.
#[derive(Debug)]
pub struct Server {
    session: Arc<Session>,
    fs: Arc<Fs>,
    threads: Vec<JoinHandle<Result<(), Error>>>,
    /// What the mount serves requests over.
    pub transport: Transport,
}

impl Server {
    /// Mounts the prototype on `mountpoint` (root only). With `want_uring`,
    /// asks the kernel for io_uring and registers one queue per possible
    /// CPU; falls back to /dev/fuse, with the reason in [`Transport`], when
    /// the kernel does not offer it or refuses a queue. `dev_threads`
    /// threads read /dev/fuse (at least one: FORGET and INTERRUPT never
    /// travel on the ring).
    ///
    /// # Errors
    ///
    /// [`Error`] when the mount or INIT fails.
    pub fn start(mountpoint: &Path, want_uring: bool, dev_threads: usize) -> Result<Self, Error> {
        let session = Arc::new(Session::mount(mountpoint, want_uring)?);
        let fs = Arc::new(Fs::new());
        let mut threads = Vec::new();
        for _ in 0..dev_threads.max(1) {
            let (s, f) = (Arc::clone(&session), Arc::clone(&fs));
            threads.push(std::thread::spawn(move || s.serve_dev(&f)));
        }
        let transport = if !session.uring {
            let why = if !want_uring {
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
            for qid in 0..queues {
                let (s, f, tx) = (Arc::clone(&session), Arc::clone(&fs), tx.clone());
                let qid = u16::try_from(qid).unwrap_or(u16::MAX);
                threads.push(std::thread::spawn(move || {
                    // The queue is built on its own thread: the kernel
                    // completes its commands in the submitting task.
                    match ring::Queue::register(s.dev(), qid, QUEUE_DEPTH, devfuse::MAX_WRITE as usize) {
                        Ok(q) => {
                            let _ = tx.send(Ok(()));
                            q.serve(&f)
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
            let refused: Vec<String> = rx.iter().take(queues).filter_map(Result::err).collect();
            match refused.first() {
                None => Transport::Uring { queues },
                // The kernel drops io_uring for the connection on a failed
                // registration and serves /dev/fuse instead.
                Some(why) => Transport::DevFuse { why: why.clone() },
            }
        };
        Ok(Self { session, fs, threads, transport })
    }

    /// Requests served so far, by opcode.
    pub fn counts(&self) -> Vec<(u32, u64)> {
        self.fs.counts()
    }

    /// Requests that arrived on io_uring queues so far (0 over /dev/fuse).
    pub fn ring_requests(&self) -> u64 {
        self.fs.ring_requests()
    }

    /// Unmounts and waits for every serving thread to see the end.
    ///
    /// # Errors
    ///
    /// The first thread's [`Error`], if one failed.
    pub fn stop(self) -> Result<Report, Error> {
        self.session.unmount();
        self.wait()
    }

    /// Waits until the file system is unmounted (by anyone) and every
    /// serving thread has ended.
    ///
    /// # Errors
    ///
    /// The first thread's [`Error`], if one failed.
    pub fn wait(mut self) -> Result<Report, Error> {
        self.wait_threads()?;
        Ok(Report { counts: self.fs.counts(), by_cpu: self.fs.by_cpu(), ring_requests: self.fs.ring_requests() })
    }

    fn wait_threads(&mut self) -> Result<(), Error> {
        let mut first = None;
        for t in std::mem::take(&mut self.threads) {
            let r = t.join().unwrap_or_else(|_| Err(Error::Ring("a serving thread panicked".into())));
            if let (Err(e), None) = (r, &first) {
                first = Some(e);
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    /// A server dropped without [`Server::stop`] (a failed test, a panic)
    /// still leaves no mount behind.
    fn drop(&mut self) {
        self.session.unmount();
    }
}
