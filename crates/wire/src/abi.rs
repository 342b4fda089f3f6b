//! The FUSE kernel protocol: the structs of `include/uapi/linux/fuse.h`
//! (protocol 7.41+, native byte order), decoded by hand from byte slices
//! ([`request`]) and encoded into the transport's reply buffer ([`reply`]).
//! Decoding never panics: a short or garbled buffer is a [`DecodeError`],
//! answered EIO or dropped by the transport.

pub mod consts;
pub mod reply;
pub mod request;

pub use consts::*;
pub use reply::*;
pub use request::*;

use thiserror::Error;

/// Why a request could not be decoded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer ends before a field the opcode needs.
    #[error("request truncated: {what} needs {need} bytes, {have} present")]
    Short { what: &'static str, need: usize, have: usize },
    /// The header's length disagrees with the bytes received.
    #[error("header says {header} bytes, {received} received")]
    Length { header: u32, received: usize },
    /// A name is not NUL-terminated, empty, or contains '/'.
    #[error("malformed name")]
    Name,
}

/// A bounds-checked reader over one byte slice.
#[derive(Debug)]
struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, what }
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, rest) = self.buf.split_first_chunk::<N>().ok_or(DecodeError::Short {
            what: self.what,
            need: N,
            have: self.buf.len(),
        })?;
        self.buf = rest;
        Ok(*head)
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        self.take::<2>().map(u16::from_ne_bytes)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.take::<4>().map(u32::from_ne_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.take::<8>().map(u64::from_ne_bytes)
    }

    fn i64(&mut self) -> Result<i64, DecodeError> {
        self.take::<8>().map(i64::from_ne_bytes)
    }

    fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Short { what: self.what, need: n, have: self.buf.len() });
        }
        self.buf = &self.buf[n..];
        Ok(())
    }
}

/// `struct fuse_in_header`: who asks (uid, gid, pid) about which node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// Length of the extensions after the arguments, in 8-byte units.
    pub total_extlen: u16,
}

impl InHeader {
    /// Decodes the first [`IN_HEADER_LEN`] bytes of `buf`.
    ///
    /// # Errors
    ///
    /// [`DecodeError::Short`] when `buf` is shorter than the header.
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf, "fuse_in_header");
        let h = Self {
            len: r.u32()?,
            opcode: r.u32()?,
            unique: r.u64()?,
            nodeid: r.u64()?,
            uid: r.u32()?,
            gid: r.u32()?,
            pid: r.u32()?,
            total_extlen: r.u16()?,
        };
        r.skip(2)?;
        Ok(h)
    }

    /// The encoding, for tests and for building requests by hand.
    pub fn encode(&self) -> [u8; IN_HEADER_LEN] {
        let mut b = [0u8; IN_HEADER_LEN];
        b[0..4].copy_from_slice(&self.len.to_ne_bytes());
        b[4..8].copy_from_slice(&self.opcode.to_ne_bytes());
        b[8..16].copy_from_slice(&self.unique.to_ne_bytes());
        b[16..24].copy_from_slice(&self.nodeid.to_ne_bytes());
        b[24..28].copy_from_slice(&self.uid.to_ne_bytes());
        b[28..32].copy_from_slice(&self.gid.to_ne_bytes());
        b[32..36].copy_from_slice(&self.pid.to_ne_bytes());
        b[36..38].copy_from_slice(&self.total_extlen.to_ne_bytes());
        b
    }

    /// Bytes of extensions (security context, supplementary groups) at the
    /// end of the request, which the decoders leave out.
    pub fn ext_len(&self) -> usize {
        usize::from(self.total_extlen) * 8
    }
}

/// `struct fuse_out_header`.
pub fn encode_out_header(len: usize, error: i32, unique: u64) -> [u8; OUT_HEADER_LEN] {
    let mut b = [0u8; OUT_HEADER_LEN];
    b[0..4].copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_ne_bytes());
    b[4..8].copy_from_slice(&error.to_ne_bytes());
    b[8..16].copy_from_slice(&unique.to_ne_bytes());
    b
}

/// `struct fuse_uring_ent_in_out` from the ring entry's header buffer: the
/// commit id and the payload's length.
///
/// # Errors
///
/// [`DecodeError::Short`] when `buf` is shorter than the 32-byte struct.
pub fn decode_ent_in_out(buf: &[u8]) -> Result<(u64, u32), DecodeError> {
    let mut r = Reader::new(buf, "fuse_uring_ent_in_out");
    let _flags = r.u64()?;
    let commit_id = r.u64()?;
    let payload_sz = r.u32()?;
    Ok((commit_id, payload_sz))
}

/// The 80-byte command area of a FUSE io_uring SQE (`struct
/// fuse_uring_cmd_req`).
pub fn encode_cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut b = [0u8; 80];
    b[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    b[16..18].copy_from_slice(&qid.to_ne_bytes());
    b
}

#[cfg(test)]
mod tests;
