//! What the transports call: a [`Handler`] serves decoded requests and
//! answers with an [`Outcome`], the payload written into a [`ReplyBuf`].

use crate::abi::{self, InHeader, InitIn, InitOut, ReplyBuf, Request, opcode};
use crate::server::Stats;
use crate::session::Session;

/// What a handler answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Reply with error 0 and the payload written to the buffer.
    Reply,
    /// Reply with this (positive) errno and no payload.
    Error(i32),
    /// The kernel expects no reply (FORGET, BATCH_FORGET, INTERRUPT).
    NoReply,
}

/// A file system served over FUSE. Requests arrive on several threads at
/// once (the /dev/fuse readers, the threads of the io_uring queues), hence
/// `Send + Sync`; any request may block its thread (on io_uring, each
/// queue has several).
pub trait Handler: Send + Sync + 'static {
    /// The reply to INIT, given the kernel's offer: the flags wanted (the
    /// transport keeps only those offered, and adds INIT_EXT and
    /// OVER_IO_URING itself), max_write, max_pages, time_gran and so on.
    fn init(&self, offer: &InitIn) -> InitOut;

    /// Serves one request (never INIT: the transport negotiates it). A
    /// reply's payload goes into `out`, at most `out.limit()` bytes; READ
    /// may write straight into `out.spare()`. The caller's uid, gid and pid
    /// are in `h`.
    fn handle(&self, h: &InHeader, req: Request<'_>, out: &mut ReplyBuf<'_>) -> Outcome;

    /// The session ended (DESTROY, or the kernel ended the connection
    /// because the file system was unmounted or aborted). Called once.
    fn destroy(&self) {}
}

/// Serves one decoded request for either transport and returns the error
/// field of the reply (0 or a negative errno), or `None` when no reply is
/// due. `out` holds the payload afterwards (emptied on an error).
pub(crate) fn dispatch<H: Handler>(
    session: &Session,
    handler: &H,
    stats: &Stats,
    h: &InHeader,
    req: Result<Request<'_>, abi::DecodeError>,
    out: &mut ReplyBuf<'_>,
) -> Option<i32> {
    stats.count(h.opcode);
    let outcome = match req {
        Ok(_) if !session.admits(h) => Outcome::Error(libc::EACCES),
        // A garbled request still gets its EIO: the kernel waits for it.
        Err(_) => Outcome::Error(libc::EIO),
        Ok(Request::Init(_)) => Outcome::Error(libc::EPROTO),
        Ok(Request::Destroy) => {
            session.destroy_once(handler);
            Outcome::Reply
        }
        Ok(req) => handler.handle(h, req, out),
    };
    // The kernel expects nothing for these, whatever the handler said.
    if matches!(h.opcode, opcode::FORGET | opcode::BATCH_FORGET) {
        return None;
    }
    match outcome {
        Outcome::NoReply => None,
        Outcome::Reply if !out.overflowed() => Some(0),
        // A reply that did not fit: EIO rather than a truncated struct.
        Outcome::Reply => {
            out.clear();
            Some(-libc::EIO)
        }
        Outcome::Error(errno) => {
            out.clear();
            Some(-errno.abs())
        }
    }
}
