//! The classic transport: one read(2) per request and one write(2) per
//! reply on /dev/fuse, by as many threads as asked. It is also the
//! fallback and, with io_uring on, still carries what the kernel never puts
//! on the ring (FORGET, INTERRUPT).

use std::io::{Read, Write};

use crate::abi::{self, InHeader, ReplyBuf, Request};
use crate::handler::{Handler, dispatch};
use crate::server::Stats;
use crate::session::{Error, Session};

/// Serves requests read from /dev/fuse until the connection ends (the file
/// system is unmounted or aborted). Several threads may run it on one
/// session.
///
/// # Errors
///
/// [`Error::Io`] on a read or write error other than the connection's end.
pub(crate) fn serve<H: Handler>(session: &Session, handler: &H, stats: &Stats) -> Result<(), Error> {
    // The kernel refuses reads into less than the largest request: the
    // largest write plus its headers.
    let payload = session.init_out.max_payload();
    let mut buf = vec![0u8; payload + 4096];
    let mut reply = vec![0u8; abi::OUT_HEADER_LEN + payload];
    let dev = session.dev();
    loop {
        let n = match (&*dev).read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
            // ENOENT: the request was interrupted before we read it.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::ENOENT)) => continue,
            Err(e) => return Err(e.into()),
        };
        let msg = &buf[..n];
        let Ok(h) = InHeader::decode(msg) else { continue };
        let (head, body) = reply.split_at_mut(abi::OUT_HEADER_LEN);
        let mut out = ReplyBuf::new(body);
        let req = Request::decode_message(msg, &session.negotiated).map(|(_, r)| r);
        let Some(error) = dispatch(session, handler, stats, &h, req, &mut out) else { continue };
        let len = abi::OUT_HEADER_LEN + out.len();
        head.copy_from_slice(&abi::encode_out_header(len, error, h.unique));
        match (&*dev).write(&reply[..len]) {
            Ok(_) => {}
            // The request was interrupted and is gone: nothing to do.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
            // The kernel refused this reply (EINVAL: a size it did not
            // expect); the caller got EIO, the server goes on.
            Err(e) => eprintln!("dualfs-wire: reply to request {} (opcode {}) refused: {e}", h.unique, h.opcode),
        }
    }
}
