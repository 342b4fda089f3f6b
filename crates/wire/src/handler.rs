//! What the transports call: a [`Handler`] serves decoded requests and
//! answers with an [`Outcome`], the payload written into a [`ReplyBuf`].

use crate::abi::{InHeader, InitIn, InitOut, ReplyBuf, Request};

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
/// once (the /dev/fuse readers, the io_uring queues, the worker pool that
/// serves requests that may block), hence `Send + Sync`.
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
