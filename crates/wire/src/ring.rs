//! FUSE over io_uring (Linux 6.14+, `fs/fuse/dev_uring.c`): one queue per
//! possible CPU, each a thread pinned to its CPU with its own ring. Every
//! ring entry owns a header buffer (`struct fuse_uring_req_header`) and a
//! payload buffer, registered once with FUSE_IO_URING_CMD_REGISTER; after
//! that a single COMMIT_AND_FETCH command both delivers a reply and waits
//! for the next request, so a round trip is one io_uring_enter instead of a
//! write and a read, and the kernel queues a request on the ring of the CPU
//! its caller runs on.
//!
//! A request that blocks (FSYNC, a commit under WRITE, a cold READ) must
//! not stall the others of its CPU. The kernel gives a queue's next
//! request to any free entry of that queue, whichever ring registered it,
//! and completes a command only in the task that submitted it. So each
//! queue is served by several threads, each with its own ring and a single
//! entry: a thread busy with a request has no free entry for the kernel to
//! hand another one to, and the queue's other threads answer meanwhile.
//! No request changes threads, which a worker pool would cost (two more
//! wake-ups per hand-off; docs/DESIGN.md has the numbers).

use std::os::fd::AsRawFd;
use std::sync::Arc;

use io_uring::{IoUring, cqueue, opcode, squeue, types};

use crate::abi::{self, InHeader, Negotiated, ReplyBuf, Request, URING_HEADER_AREA, uring_cmd};
use crate::handler::{Handler, dispatch};
use crate::server::Stats;
use crate::session::{Error, Session};

/// Offset of `struct fuse_uring_ent_in_out` in the header buffer.
const ENT_IN_OUT: usize = 2 * URING_HEADER_AREA;
/// Offset of `payload_sz` in it (after `flags` and `commit_id`).
const PAYLOAD_SZ: usize = ENT_IN_OUT + 16;
/// Room for the small replies (the largest, CREATE's, is 144 bytes).
const SCRATCH: usize = 4096;

/// One ring entry's buffers. The kernel writes a request into them when it
/// completes our command and reads the reply when we submit the next one;
/// between the two the queue's thread owns them. They are boxed slices,
/// never resized, so the addresses registered stay valid until the entry
/// is dropped.
#[derive(Debug)]
struct Entry {
    header: Box<[u8]>,
    payload: Box<[u8]>,
    /// Where small replies are built while the request is read in place.
    scratch: Box<[u8]>,
    /// The two iovecs REGISTER points at.
    iov: Box<[libc::iovec; 2]>,
}

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

/// Pins the calling thread to `cpu`; pinning is locality, not correctness,
/// so a CPU that cannot be pinned is not an error.
fn pin(cpu: usize) {
    let mut cpus = nix::sched::CpuSet::new();
    if cpus.set(cpu).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpus);
    }
}

/// One thread's share of a queue: it pins itself to CPU `qid`, registers
/// its entries and serves their requests until the connection ends.
pub struct Queue<H: Handler> {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    entries: Vec<Entry>,
    qid: u16,
    dev_fd: i32,
    session: Arc<Session>,
    handler: Arc<H>,
    stats: Arc<Stats>,
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
    /// `depth` entries with payload buffers of the negotiated size (one, so
    /// that a request that blocks this thread holds no entry the kernel
    /// could give another request to). A failed registration makes the
    /// kernel fall back to /dev/fuse.
    ///
    /// # Errors
    ///
    /// [`Error::Ring`] when the ring cannot be built or the kernel refuses a
    /// registration (for example EOPNOTSUPP with enable_uring off).
    pub fn register(
        session: Arc<Session>,
        handler: Arc<H>,
        stats: Arc<Stats>,
        qid: u16,
        depth: u16,
    ) -> Result<Self, Error> {
        pin(usize::from(qid));
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .build(u32::from(depth).next_power_of_two().max(2))
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
                Entry { header, payload, scratch: vec![0u8; SCRATCH].into_boxed_slice(), iov }
            })
            .collect();
        let dev_fd = session.dev().as_raw_fd();
        let mut q = Self { ring, entries, qid, dev_fd, session, handler, stats, early: Vec::new() };
        for i in 0..q.entries.len() {
            let iov_addr = q.entries[i].iov.as_ptr() as u64;
            let sqe = opcode::UringCmd80::new(types::Fd(q.dev_fd), uring_cmd::REGISTER)
                .cmd(abi::encode_cmd_req(0, qid))
                .addr(Some(iov_addr))
                .build()
                .user_data(i as u64);
            q.push(with_len(sqe, 2))?;
        }
        q.ring.submit().map_err(|e| Error::Ring(format!("cannot submit REGISTER: {e}")))?;
        // A refused registration completes at once; an accepted one stays
        // queued until the first request arrives (which may be now).
        let early: Vec<(u64, i32)> = q.ring.completion().map(|c| (c.user_data(), c.result())).collect();
        if let Some(&(_, res)) = early.iter().find(|c| c.1 < 0) {
            let err = std::io::Error::from_raw_os_error(-res);
            return Err(Error::Ring(format!("FUSE_IO_URING_CMD_REGISTER on queue {qid}: {err}")));
        }
        q.early = early;
        Ok(q)
    }

    fn push(&mut self, sqe: squeue::Entry128) -> Result<(), Error> {
        // SAFETY: every buffer an SQE points at (the iovecs for REGISTER,
        // and through them the header and payload buffers the kernel keeps
        // using for COMMIT_AND_FETCH) is heap memory owned by
        // `self.entries`, never resized nor freed while `self.ring` exists;
        // the ring is dropped first (field order), which cancels what is
        // still queued.
        unsafe { self.ring.submission().push(&sqe) }.map_err(|_| Error::Ring("submission queue full".into()))
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
                if res < 0 {
                    if matches!(-res, libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED | libc::ENODEV) {
                        return Ok(());
                    }
                    let err = std::io::Error::from_raw_os_error(-res);
                    return Err(Error::Ring(format!("queue {} entry {i}: {err}", self.qid)));
                }
                let i = usize::try_from(i).unwrap_or(usize::MAX);
                let Some(e) = self.entries.get_mut(i) else { continue };
                let commit_id = serve_entry(&self.session, &*self.handler, &self.stats, e);
                self.commit(i, commit_id)?;
            }
            done.clear();
        }
    }
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
/// the payload buffer. Returns the commit id to send back.
fn serve_entry<H: Handler>(session: &Session, handler: &H, stats: &Stats, e: &mut Entry) -> u64 {
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
    commit_id
}
