//! FUSE over io_uring (Linux 6.14+, `fs/fuse/dev_uring.c`): one queue per
//! possible CPU, each a thread pinned to its CPU with its own ring. Every
//! ring entry owns a header buffer (`struct fuse_uring_req_header`) and a
//! payload buffer, registered once with FUSE_IO_URING_CMD_REGISTER; after
//! that a single COMMIT_AND_FETCH command both delivers a reply and waits
//! for the next request, so a round trip is one io_uring_enter instead of a
//! write and a read, and the kernel queues a request on the ring of the CPU
//! its caller runs on.
//!
//! Requests that may block ([`abi::may_block`]) are not served on the
//! queue's thread: the entry's buffers go to a worker of a shared [`Pool`],
//! which decodes, serves and writes the reply into them, then hands them
//! back through a channel and wakes the queue through an eventfd the ring
//! polls. Only the queue's thread submits on its ring: the kernel completes
//! a command in the task that submitted it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use io_uring::{IoUring, cqueue, opcode, squeue, types};

use crate::abi::{self, InHeader, Negotiated, ReplyBuf, Request, URING_HEADER_AREA, uring_cmd};
use crate::devfuse::dispatch;
use crate::handler::Handler;
use crate::server::Stats;
use crate::session::{Error, Session};

/// Offset of `struct fuse_uring_ent_in_out` in the header buffer.
const ENT_IN_OUT: usize = 2 * URING_HEADER_AREA;
/// Offset of `payload_sz` in it (after `flags` and `commit_id`).
const PAYLOAD_SZ: usize = ENT_IN_OUT + 16;
/// The user_data of the eventfd read; entries use their index.
const WAKE: u64 = u64::MAX;
/// Room for the small replies (the largest, CREATE's, is 144 bytes).
const SCRATCH: usize = 4096;

/// One ring entry's buffers. The kernel writes a request into them when it
/// completes our command and reads the reply when we submit the next one;
/// between the two the queue (or a worker it lent them to) owns them. They
/// are boxed slices, never resized, so the addresses registered stay valid
/// wherever the `Entry` moves, until it is dropped.
#[derive(Debug)]
struct Entry {
    header: Box<[u8]>,
    payload: Box<[u8]>,
    /// Where small replies are built while the request is read in place.
    scratch: Box<[u8]>,
    /// The two iovecs REGISTER points at.
    iov: Box<[libc::iovec; 2]>,
}

// SAFETY: the raw pointers in `iov` point into `header` and `payload`,
// which the Entry owns; moving the Entry to another thread moves the
// ownership with them, and nothing else dereferences the pointers in user
// space.
unsafe impl Send for Entry {}

/// The CPUs the kernel makes a queue for (`num_possible_cpus`), all of which
/// need a registered entry before the ring carries requests.
pub fn possible_cpus() -> usize {
    let parsed = std::fs::read_to_string("/sys/devices/system/cpu/possible").ok().and_then(|s| {
        s.trim().split(',').map(|r| r.rsplit('-').next().and_then(|n| n.parse::<usize>().ok())).max().flatten()
    });
    parsed.map_or_else(|| std::thread::available_parallelism().map_or(1, usize::from), |last| last + 1)
}

/// The SQE's `len` is the number of iovecs for REGISTER; the crate's
/// URING_CMD builder leaves it zero.
fn with_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const _: () = assert!(size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is #[repr(C)]: the kernel's 64-byte `struct
    // io_uring_sqe` followed by 64 command bytes, plain integers all; any
    // byte pattern is a valid value, so the round trip through bytes is sound.
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute(e) };
    // `__u32 len` sits at offset 24 of `struct io_uring_sqe`.
    bytes[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(bytes) }
}

type Job = Box<dyn FnOnce() + Send>;

/// Threads that serve the requests that may block, for every queue.
#[derive(Debug, Clone)]
pub struct Pool {
    tx: Sender<Job>,
}

impl Pool {
    /// Starts `threads` workers; they end when the last clone is dropped.
    pub fn new(threads: usize) -> Self {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..threads.max(1) {
            let rx = Arc::clone(&rx);
            std::thread::spawn(move || {
                loop {
                    // The lock is held only to take one job.
                    let job = match rx.lock() {
                        Ok(r) => r.recv(),
                        Err(_) => return,
                    };
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                }
            });
        }
        Self { tx }
    }

    fn run(&self, job: Job) -> Result<(), Job> {
        self.tx.send(job).map_err(|e| e.0)
    }
}

/// An eventfd a worker writes to when it hands an entry back.
#[derive(Debug)]
struct Wake(OwnedFd);

impl Wake {
    fn new() -> Result<Self, Error> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a
        // new descriptor nobody else owns.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::Ring(format!("eventfd: {}", std::io::Error::last_os_error())));
        }
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // An eventfd write fails only if the counter would overflow, which
        // still leaves it readable: the queue wakes either way.
        // SAFETY: writes 8 bytes from a live local array.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

/// One queue: its thread pins itself to CPU `qid`, registers `depth`
/// entries and serves their requests until the connection ends.
pub struct Queue<H: Handler> {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// `None` while a worker has the entry.
    entries: Vec<Option<Entry>>,
    /// The eventfd read's target; boxed so the address stays put.
    wake_buf: Box<[u8; 8]>,
    wake: Arc<Wake>,
    back_tx: Sender<(usize, Entry)>,
    back_rx: Receiver<(usize, Entry)>,
    qid: u16,
    dev_fd: i32,
    session: Arc<Session>,
    handler: Arc<H>,
    stats: Arc<Stats>,
    pool: Pool,
    /// Completions seen while checking the registrations: a request may
    /// already have arrived, and must be served, not dropped.
    early: Vec<(u64, i32)>,
}

impl<H: Handler> std::fmt::Debug for Queue<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("qid", &self.qid).field("entries", &self.entries.len()).finish()
    }
}

impl<H: Handler> Queue<H> {
    /// Pins the calling thread to CPU `qid`, builds its ring and registers
    /// `depth` entries with payload buffers of the negotiated size. A
    /// failed registration makes the kernel fall back to /dev/fuse.
    ///
    /// # Errors
    ///
    /// [`Error::Ring`] when the ring cannot be built or the kernel refuses a
    /// registration (for example EOPNOTSUPP with enable_uring off).
    pub fn register(
        session: Arc<Session>,
        handler: Arc<H>,
        stats: Arc<Stats>,
        pool: Pool,
        qid: u16,
        depth: u16,
    ) -> Result<Self, Error> {
        let mut cpus = nix::sched::CpuSet::new();
        // Pinning is locality, not correctness: a CPU that cannot be pinned
        // still gets its queue served.
        if cpus.set(usize::from(qid)).is_ok() {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpus);
        }
        // One slot per entry and one for the eventfd read.
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .build((u32::from(depth) + 1).next_power_of_two().max(2))
            .map_err(|e| Error::Ring(format!("cannot build a ring: {e}")))?;
        let payload_len = session.init_out.max_payload();
        let entries = (0..depth)
            .map(|_| {
                let mut header = vec![0u8; abi::URING_REQ_HEADER_LEN].into_boxed_slice();
                let mut payload = vec![0u8; payload_len].into_boxed_slice();
                let iov = Box::new([
                    libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: header.len() },
                    libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() },
                ]);
                Some(Entry { header, payload, scratch: vec![0u8; SCRATCH].into_boxed_slice(), iov })
            })
            .collect();
        let (back_tx, back_rx) = channel();
        let dev_fd = session.dev().as_raw_fd();
        let mut q = Self {
            ring,
            entries,
            wake_buf: Box::new([0; 8]),
            wake: Arc::new(Wake::new()?),
            back_tx,
            back_rx,
            qid,
            dev_fd,
            session,
            handler,
            stats,
            pool,
            early: Vec::new(),
        };
        for i in 0..q.entries.len() {
            let Some(iov_addr) = q.entries[i].as_ref().map(|e| e.iov.as_ptr() as u64) else { continue };
            let sqe = opcode::UringCmd80::new(types::Fd(q.dev_fd), uring_cmd::REGISTER)
                .cmd(abi::encode_cmd_req(0, qid))
                .addr(Some(iov_addr))
                .build()
                .user_data(i as u64);
            q.push(with_len(sqe, 2))?;
        }
        q.arm_wake()?;
        q.ring.submit().map_err(|e| Error::Ring(format!("cannot submit REGISTER: {e}")))?;
        // A refused registration completes at once; an accepted one stays
        // queued until the first request arrives (which may be now).
        let early: Vec<(u64, i32)> = q.ring.completion().map(|c| (c.user_data(), c.result())).collect();
        if let Some(&(_, res)) = early.iter().find(|c| c.0 != WAKE && c.1 < 0) {
            let err = std::io::Error::from_raw_os_error(-res);
            return Err(Error::Ring(format!("FUSE_IO_URING_CMD_REGISTER on queue {qid}: {err}")));
        }
        q.early = early;
        Ok(q)
    }

    fn push(&mut self, sqe: squeue::Entry128) -> Result<(), Error> {
        // SAFETY: every buffer an SQE points at (the iovecs for REGISTER,
        // and through them the header and payload buffers the kernel keeps
        // using for COMMIT_AND_FETCH; the eventfd read's `wake_buf`) is
        // heap memory owned by `self` or by an Entry lent to a worker, which
        // comes back before its command is submitted again; none is freed
        // while `self.ring` exists, which is dropped first (field order) and
        // cancels what is still queued.
        unsafe { self.ring.submission().push(&sqe) }.map_err(|_| Error::Ring("submission queue full".into()))
    }

    /// Queues a read of the eventfd, which completes when a worker hands an
    /// entry back.
    fn arm_wake(&mut self) -> Result<(), Error> {
        let sqe = opcode::Read::new(types::Fd(self.wake.0.as_raw_fd()), self.wake_buf.as_mut_ptr(), 8)
            .build()
            .user_data(WAKE);
        self.push(sqe.into())
    }

    fn commit(&mut self, i: usize, commit_id: u64) -> Result<(), Error> {
        let sqe = opcode::UringCmd80::new(types::Fd(self.dev_fd), uring_cmd::COMMIT_AND_FETCH)
            .cmd(abi::encode_cmd_req(commit_id, self.qid))
            .build()
            .user_data(i as u64);
        self.push(sqe)
    }

    /// Serves requests until the connection ends (the kernel completes the
    /// queued commands with ENOTCONN or ECONNABORTED).
    ///
    /// # Errors
    ///
    /// [`Error::Ring`] when io_uring_enter fails or a command completes with
    /// an unexpected error.
    pub fn serve(mut self) -> Result<(), Error> {
        let mut done = std::mem::take(&mut self.early);
        loop {
            if done.is_empty() {
                match self.ring.submit_and_wait(1) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(e) => return Err(Error::Ring(format!("io_uring_enter: {e}"))),
                }
                done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            }
            for &(i, res) in &done {
                if i == WAKE {
                    while let Ok((i, e)) = self.back_rx.try_recv() {
                        let commit_id = finish(&e);
                        if let Some(slot) = self.entries.get_mut(i) {
                            *slot = Some(e);
                        }
                        self.commit(i, commit_id)?;
                    }
                    self.arm_wake()?;
                    continue;
                }
                if res < 0 {
                    if matches!(-res, libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED | libc::ENODEV) {
                        return Ok(());
                    }
                    let err = std::io::Error::from_raw_os_error(-res);
                    return Err(Error::Ring(format!("queue {} entry {i}: {err}", self.qid)));
                }
                let i = usize::try_from(i).unwrap_or(usize::MAX);
                let Some(e) = self.entries.get_mut(i).and_then(Option::take) else { continue };
                let op = InHeader::decode(&e.header).map_or(0, |h| h.opcode);
                if abi::may_block(op) {
                    self.lend(i, e);
                } else {
                    let e = self.answer(e);
                    let commit_id = finish(&e);
                    self.entries[i] = Some(e);
                    self.commit(i, commit_id)?;
                }
            }
            done.clear();
        }
    }

    /// Hands entry `i` to a worker, which serves it and sends it back.
    fn lend(&mut self, i: usize, e: Entry) {
        let (session, handler, stats) = (Arc::clone(&self.session), Arc::clone(&self.handler), Arc::clone(&self.stats));
        let (back, wake) = (self.back_tx.clone(), Arc::clone(&self.wake));
        let job: Job = Box::new(move || {
            let e = serve_entry(&session, &*handler, &stats, e);
            if back.send((i, e)).is_ok() {
                wake.wake();
            }
        });
        // The pool outlives the queues; should it be gone, serve here.
        if let Err(job) = self.pool.run(job) {
            job();
        }
    }

    fn answer(&self, e: Entry) -> Entry {
        serve_entry(&self.session, &*self.handler, &self.stats, e)
    }
}

/// The commit id of the request in `e` (the kernel's unique).
fn finish(e: &Entry) -> u64 {
    abi::decode_ent_in_out(&e.header[ENT_IN_OUT..]).map_or(0, |(id, _)| id)
}

/// Opcodes whose reply may be large (data, names, directory entries):
/// their reply is written straight into the payload buffer, and their
/// request's variable part (a name at most, or an ioctl's few bytes) is
/// copied out first, since a request and its reply share the buffer. The
/// others (WRITE's data, SETXATTR's value) are read in place and reply
/// through the entry's small scratch buffer.
fn big_reply(op: u32) -> bool {
    use crate::abi::opcode::*;
    matches!(op, READ | READDIR | READDIRPLUS | GETXATTR | LISTXATTR | READLINK | IOCTL)
}

/// Decodes the entry's request, serves it and writes the reply into the
/// entry's buffers: the out header into the header area, the payload into
/// the payload buffer.
fn serve_entry<H: Handler>(session: &Session, handler: &H, stats: &Stats, mut e: Entry) -> Entry {
    let (commit_id, payload_sz) = abi::decode_ent_in_out(&e.header[ENT_IN_OUT..]).unwrap_or((0, 0));
    stats.note_ring_request();
    let neg: Negotiated = session.negotiated;
    let (error, len) = match InHeader::decode(&e.header) {
        Ok(h) => {
            let fixed_len = abi::op_header_len(h.opcode, &neg).min(URING_HEADER_AREA);
            let fixed = &e.header[URING_HEADER_AREA..URING_HEADER_AREA + fixed_len];
            let rest_len = usize::try_from(payload_sz).unwrap_or(0).min(e.payload.len());
            let rest_len = rest_len.saturating_sub(h.ext_len());
            if big_reply(h.opcode) {
                let rest = e.payload[..rest_len].to_vec();
                let mut out = ReplyBuf::new(&mut e.payload);
                let req = Request::decode(h.opcode, fixed, &rest, &neg);
                // The kernel waits for a commit either way; a no-reply
                // request never comes through the ring.
                let error = dispatch(session, handler, stats, &h, req, &mut out).unwrap_or(-libc::EIO);
                (error, if error == 0 { out.len() } else { 0 })
            } else {
                let mut out = ReplyBuf::new(&mut e.scratch);
                let req = Request::decode(h.opcode, fixed, &e.payload[..rest_len], &neg);
                let error = dispatch(session, handler, stats, &h, req, &mut out).unwrap_or(-libc::EIO);
                let len = if error == 0 { out.len() } else { 0 };
                let len = len.min(e.payload.len());
                e.payload[..len].copy_from_slice(&e.scratch[..len]);
                (error, len)
            }
        }
        Err(_) => (-libc::EIO, 0),
    };
    let header = abi::encode_out_header(abi::OUT_HEADER_LEN + len, error, commit_id);
    e.header[..abi::OUT_HEADER_LEN].copy_from_slice(&header);
    e.header[PAYLOAD_SZ..PAYLOAD_SZ + 4].copy_from_slice(&u32::try_from(len).unwrap_or(0).to_ne_bytes());
    e
}
