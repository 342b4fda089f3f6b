//! The classic transport: mount with a /dev/fuse descriptor, negotiate INIT,
//! then one read(2) per request and one write(2) per reply. It is also the
//! fallback and, with io_uring on, still carries what the kernel never puts
//! on the ring (FORGET, INTERRUPT).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};

use crate::abi::{self, InitOut, Request, init_flags};
use crate::tree::{Fs, Outcome};

/// Largest write the prototype accepts, DualFS's (it keeps no data; this
/// sizes the buffers and the kernel's ring payload).
pub const MAX_WRITE: u32 = 1024 * 1024;
/// Room for a whole request read from /dev/fuse: the largest write plus its
/// headers (the kernel refuses reads into smaller buffers).
const READ_BUF: usize = MAX_WRITE as usize + 4096;

/// Errors of the transports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open /dev/fuse: {0}")]
    Open(io::Error),
    #[error("cannot mount on {0}: {1}")]
    Mount(PathBuf, nix::Error),
    #[error("FUSE INIT failed: {0}")]
    Init(String),
    #[error("I/O on /dev/fuse: {0}")]
    Io(#[from] io::Error),
    #[error("io_uring: {0}")]
    Ring(String),
}

/// A mounted connection.
#[derive(Debug)]
pub struct Session {
    dev: File,
    mountpoint: PathBuf,
    /// Whether INIT negotiated FUSE over io_uring.
    pub uring: bool,
}

/// Whether the fuse module lets a server use io_uring (`enable_uring`).
pub fn uring_enabled() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").is_ok_and(|s| s.trim() == "Y")
}

impl Session {
    /// Mounts an empty FUSE file system on `mountpoint` (needs root) and
    /// negotiates INIT, asking for io_uring if `want_uring` and the kernel
    /// offers it.
    ///
    /// # Errors
    ///
    /// [`Error`] when /dev/fuse cannot be opened, the mount fails, or INIT
    /// does not arrive or is malformed.
    pub fn mount(mountpoint: &Path, want_uring: bool) -> Result<Self, Error> {
        let dev = OpenOptions::new().read(true).write(true).open("/dev/fuse").map_err(Error::Open)?;
        let opts = format!("fd={},rootmode=40000,user_id=0,group_id=0,allow_other", dev.as_raw_fd());
        nix::mount::mount(
            Some("uring-proto"),
            mountpoint,
            Some("fuse.uring-proto"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(opts.as_str()),
        )
        .map_err(|e| Error::Mount(mountpoint.to_path_buf(), e))?;
        let mut s = Self { dev, mountpoint: mountpoint.to_path_buf(), uring: false };
        if let Err(e) = s.init(want_uring) {
            s.unmount();
            return Err(e);
        }
        Ok(s)
    }

    fn init(&mut self, want_uring: bool) -> Result<(), Error> {
        let mut buf = vec![0u8; READ_BUF];
        let n = self.dev.read(&mut buf)?;
        let (h, req) = Request::decode_message(&buf[..n]).map_err(|e| Error::Init(e.to_string()))?;
        let Request::Init { major, minor, max_readahead, flags } = req else {
            return Err(Error::Init(format!("first request is opcode {}", h.opcode)));
        };
        if major != abi::KERNEL_VERSION {
            return Err(Error::Init(format!("kernel speaks FUSE {major}.{minor}")));
        }
        let mut want = init_flags::ASYNC_READ
            | init_flags::BIG_WRITES
            | init_flags::PARALLEL_DIROPS
            | init_flags::MAX_PAGES
            | init_flags::INIT_EXT
            // What DualFS's adapter asks for, so that the kernel sends the
            // same requests (one WRITE per file at close, no GETXATTR
            // security.capability before each write).
            | init_flags::WRITEBACK_CACHE
            | init_flags::HANDLE_KILLPRIV_V2;
        // The kernel offers FUSE_OVER_IO_URING only while enable_uring is Y.
        if want_uring {
            want |= init_flags::OVER_IO_URING;
        }
        let granted = flags & want;
        self.uring = granted & init_flags::OVER_IO_URING != 0;
        let out = InitOut {
            minor: minor.min(abi::KERNEL_MINOR_VERSION),
            max_readahead,
            flags: granted,
            max_write: MAX_WRITE,
            max_pages: u16::try_from(MAX_WRITE / 4096).unwrap_or(1),
        };
        let mut reply = vec![0u8; abi::OUT_HEADER_LEN];
        out.encode(&mut reply);
        let header = abi::encode_out_header(reply.len(), 0, h.unique);
        reply[..abi::OUT_HEADER_LEN].copy_from_slice(&header);
        (&self.dev).write_all(&reply)?;
        Ok(())
    }

    /// The /dev/fuse descriptor, for the io_uring queues.
    pub fn dev(&self) -> &File {
        &self.dev
    }

    /// Unmounts (lazily, so that a process still inside the mount does not
    /// keep the server alive); the serving loops then see the connection end.
    pub fn unmount(&self) {
        // The mount may already be gone (umount by the caller).
        let _ = nix::mount::umount2(&self.mountpoint, MntFlags::MNT_DETACH);
    }

    /// Serves requests read from /dev/fuse until the file system is
    /// unmounted. Several threads may run it on one session.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] on a read or write error other than the connection's end.
    pub fn serve_dev(&self, fs: &Fs) -> Result<(), Error> {
        let mut buf = vec![0u8; READ_BUF];
        let mut out = Vec::with_capacity(READ_BUF);
        loop {
            let n = match (&self.dev).read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
                // ENOENT: the request was interrupted before we read it.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::ENOENT)) => continue,
                Err(e) => return Err(e.into()),
            };
            let msg = &buf[..n];
            out.clear();
            out.resize(abi::OUT_HEADER_LEN, 0);
            let (unique, outcome) = match Request::decode_message(msg) {
                Ok((h, req)) => (h.unique, fs.handle(&h, &req, &mut out, READ_BUF)),
                // A garbled request still gets its EIO when its id is legible.
                Err(_) => match abi::InHeader::decode(msg) {
                    Ok(h) => (h.unique, Outcome::Error(libc::EIO)),
                    Err(_) => continue,
                },
            };
            let error = match outcome {
                Outcome::NoReply => continue,
                Outcome::Reply => 0,
                Outcome::Error(e) => {
                    out.truncate(abi::OUT_HEADER_LEN);
                    -e
                }
            };
            let header = abi::encode_out_header(out.len(), error, unique);
            out[..abi::OUT_HEADER_LEN].copy_from_slice(&header);
            match (&self.dev).write(&out) {
                Ok(_) => {}
                // The request was interrupted and is gone: nothing to do.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
                // The kernel refused this reply (EINVAL: a size it did not
                // expect); the caller got EIO, the server goes on.
                Err(e) => eprintln!("uring-proto: reply to request {unique} refused: {e}"),
            }
        }
    }
}

impl AsFd for Session {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.dev.as_fd()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.unmount();
    }
}
