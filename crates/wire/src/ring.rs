//! FUSE over io_uring (Linux 6.14+, `fs/fuse/dev_uring.c`): one queue per
//! possible CPU, each a thread pinned to its CPU with its own ring. Every
//! ring entry owns a header buffer (`struct fuse_uring_req_header`) and a
//! payload buffer, registered once with FUSE_IO_URING_CMD_REGISTER; after
//! that a single COMMIT_AND_FETCH command both delivers a reply and waits
//! for the next request, so a round trip is one io_uring_enter instead of a
//! write and a read, and the kernel queues a request on the ring of the CPU
//! its caller runs on.

use std::fs::File;
use std::os::fd::AsRawFd;

use io_uring::{IoUring, cqueue, opcode, squeue, types};

use crate::abi::{self, InHeader, Request, URING_HEADER_AREA, uring_cmd};
use crate::devfuse::Error;
use crate::tree::{Fs, Outcome};

/// Offset of `struct fuse_uring_ent_in_out` in the header buffer.
const ENT_IN_OUT: usize = 2 * URING_HEADER_AREA;
/// Offset of `payload_sz` in it (after `flags` and `commit_id`).
const PAYLOAD_SZ: usize = ENT_IN_OUT + 16;

/// One ring entry's buffers. The kernel writes a request into them when it
/// completes our command and reads the reply when we submit the next one;
/// between the two the thread owns them, and it never resizes them, so the
/// addresses registered stay valid until the ring is dropped.
#[derive(Debug)]
struct Entry {
    header: Vec<u8>,
    payload: Vec<u8>,
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

/// One queue: its thread pins itself to CPU `qid`, registers `depth`
/// entries and serves their requests until the connection ends.
pub struct Queue {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    entries: Vec<Entry>,
    qid: u16,
    dev_fd: i32,
    /// Completions seen while checking the registrations: a request may
    /// already have arrived, and must be served, not dropped.
    early: Vec<(u64, i32)>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("qid", &self.qid).field("entries", &self.entries.len()).finish()
    }
}

impl Queue {
    /// Pins the calling thread to CPU `qid`, builds its ring and registers
    /// `depth` entries with payload buffers of `payload_len` bytes. A failed
    /// registration makes the kernel fall back to /dev/fuse.
    ///
    /// # Errors
    ///
    /// [`Error::Ring`] when the ring cannot be built or the kernel refuses a
    /// registration (for example EOPNOTSUPP with enable_uring off).
    pub fn register(dev: &File, qid: u16, depth: u16, payload_len: usize) -> Result<Self, Error> {
        let mut cpus = nix::sched::CpuSet::new();
        // Pinning is locality, not correctness: a CPU that cannot be pinned
        // still gets its queue served.
        if cpus.set(usize::from(qid)).is_ok() {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpus);
        }
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .build(u32::from(depth).next_power_of_two().max(2))
            .map_err(|e| Error::Ring(format!("cannot build a ring: {e}")))?;
        let entries = (0..depth)
            .map(|_| {
                let mut header = vec![0u8; abi::URING_REQ_HEADER_LEN];
                let mut payload = vec![0u8; payload_len];
                let iov = Box::new([
                    libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: header.len() },
                    libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() },
                ]);
                Entry { header, payload, iov }
            })
            .collect();
        let mut q = Self { ring, entries, qid, dev_fd: dev.as_raw_fd(), early: Vec::new() };
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
        // SAFETY: every buffer the SQE points at (the iovecs for REGISTER,
        // and through them the header and payload buffers the kernel keeps
        // using for COMMIT_AND_FETCH) belongs to `self.entries`, which is
        // neither dropped nor resized while `self.ring` exists; the ring is
        // dropped first (field order), which cancels the commands.
        unsafe { self.ring.submission().push(&sqe) }.map_err(|_| Error::Ring("submission queue full".into()))
    }

    /// Serves requests until the connection ends (the kernel completes the
    /// queued commands with ENOTCONN or ECONNABORTED).
    ///
    /// # Errors
    ///
    /// [`Error::Ring`] when io_uring_enter fails or a command completes with
    /// an unexpected error.
    pub fn serve(mut self, fs: &Fs) -> Result<(), Error> {
        let mut out = Vec::with_capacity(self.entries.first().map_or(0, |e| e.payload.len()));
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
                let commit_id = self.answer(i, fs, &mut out);
                let sqe = opcode::UringCmd80::new(types::Fd(self.dev_fd), uring_cmd::COMMIT_AND_FETCH)
                    .cmd(abi::encode_cmd_req(commit_id, self.qid))
                    .build()
                    .user_data(i as u64);
                self.push(sqe)?;
            }
            done.clear();
        }
    }

    /// Decodes entry `i`'s request, serves it and writes the reply into the
    /// entry's buffers; returns the commit id to send back.
    fn answer(&mut self, i: usize, fs: &Fs, out: &mut Vec<u8>) -> u64 {
        let Some(e) = self.entries.get_mut(i) else { return 0 };
        let (commit_id, payload_sz) = abi::decode_ent_in_out(&e.header[ENT_IN_OUT..]).unwrap_or((0, 0));
        out.clear();
        let outcome = match InHeader::decode(&e.header) {
            Ok(h) => {
                let fixed_len = abi::op_header_len(h.opcode).min(URING_HEADER_AREA);
                let fixed = &e.header[URING_HEADER_AREA..URING_HEADER_AREA + fixed_len];
                let rest = &e.payload[..usize::try_from(payload_sz).unwrap_or(0).min(e.payload.len())];
                match Request::decode(h.opcode, fixed, rest) {
                    Ok(req) => {
                        fs.note_ring_request();
                        fs.handle(&h, &req, out, e.payload.len())
                    }
                    Err(_) => Outcome::Error(libc::EIO),
                }
            }
            Err(_) => Outcome::Error(libc::EIO),
        };
        let error = match outcome {
            Outcome::Reply if out.len() <= e.payload.len() => 0,
            // The kernel waits for a commit either way; a no-reply request
            // never comes through the ring.
            Outcome::Reply | Outcome::NoReply => -libc::EIO,
            Outcome::Error(errno) => -errno,
        };
        let len = if error == 0 { out.len() } else { 0 };
        e.payload[..len].copy_from_slice(&out[..len]);
        let header = abi::encode_out_header(abi::OUT_HEADER_LEN + len, error, commit_id);
        e.header[..abi::OUT_HEADER_LEN].copy_from_slice(&header);
        e.header[PAYLOAD_SZ..PAYLOAD_SZ + 4].copy_from_slice(&u32::try_from(len).unwrap_or(0).to_ne_bytes());
        commit_id
    }
}
