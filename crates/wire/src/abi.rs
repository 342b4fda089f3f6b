//! The FUSE kernel protocol, as far as the prototype speaks it: the structs
//! of `include/uapi/linux/fuse.h` (protocol 7.42+, native byte order),
//! decoded by hand from byte slices. Decoding never panics: a short or
//! garbled buffer is a [`DecodeError`], answered EIO or dropped by the caller.

use thiserror::Error;

/// The protocol major version this prototype speaks.
pub const KERNEL_VERSION: u32 = 7;
/// The highest minor version whose structs are written here (7.42 added
/// FUSE_OVER_IO_URING); the reply to INIT takes the smaller of this and the
/// kernel's.
pub const KERNEL_MINOR_VERSION: u32 = 44;
/// The node id of the root directory.
pub const ROOT_ID: u64 = 1;

/// `struct fuse_in_header`.
pub const IN_HEADER_LEN: usize = 40;
/// `struct fuse_out_header`.
pub const OUT_HEADER_LEN: usize = 16;
/// `struct fuse_attr`.
pub const ATTR_LEN: usize = 88;
/// `struct fuse_entry_out`.
pub const ENTRY_OUT_LEN: usize = 40 + ATTR_LEN;
/// `struct fuse_attr_out`.
pub const ATTR_OUT_LEN: usize = 16 + ATTR_LEN;
/// `struct fuse_init_out`.
pub const INIT_OUT_LEN: usize = 64;
/// `struct fuse_uring_req_header`: in/out header area, op header area,
/// `struct fuse_uring_ent_in_out`.
pub const URING_HEADER_AREA: usize = 128;
/// Size of `struct fuse_uring_req_header`.
pub const URING_REQ_HEADER_LEN: usize = 2 * URING_HEADER_AREA + 32;

/// Opcodes (`enum fuse_opcode`) the prototype knows by name.
pub mod opcode {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const BATCH_FORGET: u32 = 42;
    pub const READDIRPLUS: u32 = 44;
    pub const STATX: u32 = 52;
}

/// `fuse_setattr_in.valid`: the mode is to be set.
pub const FATTR_MODE: u32 = 1 << 0;
/// `fuse_setattr_in.valid`: the owner is to be set.
pub const FATTR_UID: u32 = 1 << 1;
/// `fuse_setattr_in.valid`: the group is to be set.
pub const FATTR_GID: u32 = 1 << 2;
/// `fuse_setattr_in.valid`: the size is to be set.
pub const FATTR_SIZE: u32 = 1 << 3;

/// INIT flags (`flags | flags2 << 32`).
pub mod init_flags {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const INIT_EXT: u64 = 1 << 30;
    pub const OVER_IO_URING: u64 = 1 << 41;
}

/// io_uring command opcodes (`enum fuse_uring_cmd`), the SQE's `cmd_op`.
pub mod uring_cmd {
    pub const REGISTER: u32 = 1;
    pub const COMMIT_AND_FETCH: u32 = 2;
}

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

    fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Short { what: self.what, need: n, have: self.buf.len() });
        }
        self.buf = &self.buf[n..];
        Ok(())
    }
}

/// `struct fuse_in_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
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
}

/// Length of the opcode's fixed argument struct (`in_args[0]`), the part the
/// io_uring transport puts in the op header area; what follows (names) is in
/// the payload. On /dev/fuse both follow the header back to back.
pub fn op_header_len(opcode: u32) -> usize {
    match opcode {
        opcode::FORGET | opcode::INTERRUPT | opcode::BATCH_FORGET => 8,
        opcode::OPEN | opcode::OPENDIR | opcode::MKDIR => 8,
        opcode::GETXATTR | opcode::LISTXATTR | opcode::ACCESS => 8,
        opcode::GETATTR | opcode::CREATE | opcode::MKNOD | opcode::FSYNC | opcode::FSYNCDIR => 16,
        opcode::RELEASE | opcode::RELEASEDIR | opcode::FLUSH => 24,
        opcode::READ | opcode::WRITE | opcode::READDIR | opcode::READDIRPLUS => 40,
        opcode::STATX => 24,
        opcode::SETATTR => 88,
        opcode::INIT => 64,
        _ => 0,
    }
}

/// A decoded request: the operations the prototype serves, and `Other` for
/// the rest (answered ENOSYS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Init {
        major: u32,
        minor: u32,
        max_readahead: u32,
        flags: u64,
    },
    Lookup {
        name: &'a [u8],
    },
    /// FORGET: the kernel drops `nlookup` references to the header's node.
    Forget {
        nlookup: u64,
    },
    /// BATCH_FORGET: `(nodeid, nlookup)` pairs, 16 bytes each, checked to
    /// be whole.
    BatchForget {
        pairs: &'a [u8],
    },
    Getattr,
    /// Mode, owner and size are applied (`valid` says which); times are
    /// not kept.
    Setattr {
        valid: u32,
        size: u64,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    /// The data is counted, not kept: the prototype measures round trips.
    Write {
        offset: u64,
        data: &'a [u8],
    },
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Readlink,
    /// Answered with zeros: no data is kept.
    Read {
        offset: u64,
        size: u32,
    },
    Statfs,
    Opendir,
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Releasedir,
    Open {
        flags: u32,
    },
    Create {
        flags: u32,
        mode: u32,
        umask: u32,
        name: &'a [u8],
    },
    Mkdir {
        mode: u32,
        name: &'a [u8],
    },
    Release,
    Unlink {
        name: &'a [u8],
    },
    Flush,
    Getxattr {
        size: u32,
        name: &'a [u8],
    },
    Listxattr {
        size: u32,
    },
    Access,
    Interrupt,
    Destroy,
    Other(u32),
}

/// A non-empty NUL-terminated string at the start of `buf`, without the NUL.
fn cstr(buf: &[u8]) -> Result<&[u8], DecodeError> {
    let end = buf.iter().position(|&b| b == 0).ok_or(DecodeError::Name)?;
    let n = &buf[..end];
    if n.is_empty() {
        return Err(DecodeError::Name);
    }
    Ok(n)
}

/// A directory entry's name: a [`cstr`] without '/'.
fn name(buf: &[u8]) -> Result<&[u8], DecodeError> {
    let n = cstr(buf)?;
    if n.contains(&b'/') {
        return Err(DecodeError::Name);
    }
    Ok(n)
}

impl<'a> Request<'a> {
    /// Decodes a request whose fixed argument struct is `fixed` (at least
    /// [`op_header_len`] bytes; more is ignored) and whose variable part
    /// (names) is `rest`.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when either part is too short or a name is malformed.
    pub fn decode(opcode: u32, fixed: &'a [u8], rest: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(fixed, "op header");
        Ok(match opcode {
            opcode::INIT => {
                let major = r.u32()?;
                let minor = r.u32()?;
                let max_readahead = r.u32()?;
                let flags = u64::from(r.u32()?);
                // flags2 exists from 7.36 on; an older kernel sends 16 bytes.
                let flags2 = if minor >= 36 {
                    let f = r.u32()?;
                    r.skip(44)?;
                    u64::from(f)
                } else {
                    0
                };
                Self::Init { major, minor, max_readahead, flags: flags | flags2 << 32 }
            }
            opcode::LOOKUP => Self::Lookup { name: name(rest)? },
            opcode::FORGET => Self::Forget { nlookup: r.u64()? },
            opcode::BATCH_FORGET => {
                let count = usize::try_from(r.u32()?).unwrap_or(usize::MAX);
                r.skip(4)?;
                let need = count.saturating_mul(16);
                let pairs =
                    rest.get(..need).ok_or(DecodeError::Short { what: "forget pairs", need, have: rest.len() })?;
                Self::BatchForget { pairs }
            }
            opcode::GETATTR => {
                r.skip(16)?;
                Self::Getattr
            }
            opcode::SETATTR => {
                let valid = r.u32()?;
                r.skip(12)?;
                let size = r.u64()?;
                r.skip(44)?;
                let mode = r.u32()?;
                r.skip(4)?;
                let uid = r.u32()?;
                let gid = r.u32()?;
                r.skip(4)?;
                Self::Setattr { valid, size, mode, uid, gid }
            }
            opcode::WRITE => {
                r.skip(8)?;
                let offset = r.u64()?;
                let size = usize::try_from(r.u32()?).unwrap_or(usize::MAX);
                r.skip(20)?;
                let data =
                    rest.get(..size).ok_or(DecodeError::Short { what: "write data", need: size, have: rest.len() })?;
                Self::Write { offset, data }
            }
            opcode::SYMLINK => {
                let n = name(rest)?;
                let target = cstr(&rest[n.len() + 1..])?;
                Self::Symlink { name: n, target }
            }
            opcode::READLINK => Self::Readlink,
            opcode::READ => {
                r.skip(8)?;
                let offset = r.u64()?;
                let size = r.u32()?;
                r.skip(20)?;
                Self::Read { offset, size }
            }
            opcode::STATFS => Self::Statfs,
            opcode::OPENDIR => {
                r.skip(8)?;
                Self::Opendir
            }
            opcode::READDIR => {
                let fh = r.u64()?;
                let offset = r.u64()?;
                let size = r.u32()?;
                r.skip(20)?;
                Self::Readdir { fh, offset, size }
            }
            opcode::RELEASEDIR => {
                r.skip(24)?;
                Self::Releasedir
            }
            opcode::OPEN => {
                let flags = r.u32()?;
                r.skip(4)?;
                Self::Open { flags }
            }
            opcode::CREATE => {
                let flags = r.u32()?;
                let mode = r.u32()?;
                let umask = r.u32()?;
                r.skip(4)?;
                Self::Create { flags, mode, umask, name: name(rest)? }
            }
            opcode::MKDIR => {
                let mode = r.u32()?;
                r.skip(4)?;
                Self::Mkdir { mode, name: name(rest)? }
            }
            opcode::RELEASE => {
                r.skip(24)?;
                Self::Release
            }
            opcode::UNLINK => Self::Unlink { name: name(rest)? },
            opcode::FLUSH => {
                r.skip(24)?;
                Self::Flush
            }
            opcode::GETXATTR => {
                let size = r.u32()?;
                r.skip(4)?;
                Self::Getxattr { size, name: name(rest)? }
            }
            opcode::LISTXATTR => {
                let size = r.u32()?;
                r.skip(4)?;
                Self::Listxattr { size }
            }
            opcode::ACCESS => {
                r.skip(8)?;
                Self::Access
            }
            opcode::INTERRUPT => {
                r.skip(8)?;
                Self::Interrupt
            }
            opcode::DESTROY => Self::Destroy,
            other => Self::Other(other),
        })
    }

    /// Decodes one message as read from /dev/fuse: header, then the
    /// arguments back to back.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when the message is shorter than its header says or
    /// than its opcode needs.
    pub fn decode_message(msg: &'a [u8]) -> Result<(InHeader, Self), DecodeError> {
        let h = InHeader::decode(msg)?;
        if usize::try_from(h.len).ok() != Some(msg.len()) {
            return Err(DecodeError::Length { header: h.len, received: msg.len() });
        }
        let body = &msg[IN_HEADER_LEN..];
        let (fixed, rest) = body.split_at(op_header_len(h.opcode).min(body.len()));
        Ok((h, Self::decode(h.opcode, fixed, rest)?))
    }
}

/// `struct fuse_attr`, the fields the prototype fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub time_s: u64,
}

impl Attr {
    fn encode(&self, out: &mut Vec<u8>) {
        let blocks = self.size.div_ceil(512);
        for v in [self.ino, self.size, blocks, self.time_s, self.time_s, self.time_s] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        // atimensec, mtimensec, ctimensec, mode, nlink, uid, gid, rdev, blksize, flags
        for v in [0, 0, 0, self.mode, self.nlink, self.uid, self.gid, 0, 4096, 0u32] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
    }
}

/// Appends `struct fuse_entry_out`.
pub fn encode_entry(out: &mut Vec<u8>, nodeid: u64, valid_s: u64, attr: &Attr) {
    for v in [nodeid, 1, valid_s, valid_s] {
        out.extend_from_slice(&v.to_ne_bytes());
    }
    out.extend_from_slice(&[0u8; 8]);
    attr.encode(out);
}

/// Appends `struct fuse_attr_out`.
pub fn encode_attr_out(out: &mut Vec<u8>, valid_s: u64, attr: &Attr) {
    out.extend_from_slice(&valid_s.to_ne_bytes());
    out.extend_from_slice(&[0u8; 8]);
    attr.encode(out);
}

/// The `(nodeid, nlookup)` pairs of a BATCH_FORGET.
pub fn forget_pairs(pairs: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    pairs.chunks_exact(16).map(|c| {
        let (a, b) = c.split_at(8);
        (u64::from_ne_bytes(a.try_into().unwrap_or([0; 8])), u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
    })
}

/// Appends `struct fuse_write_out`.
pub fn encode_write_out(out: &mut Vec<u8>, size: u32) {
    out.extend_from_slice(&size.to_ne_bytes());
    out.extend_from_slice(&[0u8; 4]);
}

/// Appends `struct fuse_open_out`.
pub fn encode_open_out(out: &mut Vec<u8>, fh: u64) {
    out.extend_from_slice(&fh.to_ne_bytes());
    out.extend_from_slice(&[0u8; 8]);
}

/// Appends `struct fuse_kstatfs` (`fuse_statfs_out`).
pub fn encode_statfs(out: &mut Vec<u8>, blocks: u64, bfree: u64, files: u64, ffree: u64) {
    for v in [blocks, bfree, bfree, files, ffree] {
        out.extend_from_slice(&v.to_ne_bytes());
    }
    // bsize, namelen, frsize, padding, spare[6]
    for v in [4096u32, 255, 4096, 0, 0, 0, 0, 0, 0, 0] {
        out.extend_from_slice(&v.to_ne_bytes());
    }
}

/// Appends one `struct fuse_dirent` (8-byte aligned) if it fits in `max`
/// bytes in all; says whether it did.
pub fn push_dirent(out: &mut Vec<u8>, max: usize, ino: u64, off: u64, kind: u32, name: &[u8]) -> bool {
    let len = (24 + name.len()).next_multiple_of(8);
    if out.len() + len > max {
        return false;
    }
    out.extend_from_slice(&ino.to_ne_bytes());
    out.extend_from_slice(&off.to_ne_bytes());
    out.extend_from_slice(&u32::try_from(name.len()).unwrap_or(u32::MAX).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(name);
    out.resize(out.len() + (len - 24 - name.len()), 0);
    true
}

/// The reply to INIT (`struct fuse_init_out`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitOut {
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u64,
    pub max_write: u32,
    pub max_pages: u16,
}

impl InitOut {
    /// Appends the 64-byte encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let low = u32::try_from(self.flags & 0xffff_ffff).unwrap_or(0);
        let high = u32::try_from(self.flags >> 32).unwrap_or(0);
        for v in [KERNEL_VERSION, self.minor, self.max_readahead, low] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        out.extend_from_slice(&16u16.to_ne_bytes()); // max_background
        out.extend_from_slice(&12u16.to_ne_bytes()); // congestion_threshold
        out.extend_from_slice(&self.max_write.to_ne_bytes());
        out.extend_from_slice(&1u32.to_ne_bytes()); // time_gran
        out.extend_from_slice(&self.max_pages.to_ne_bytes());
        out.extend_from_slice(&0u16.to_ne_bytes()); // map_alignment
        out.extend_from_slice(&high.to_ne_bytes());
        out.resize(out.len() + INIT_OUT_LEN - 36, 0); // max_stack_depth, request_timeout, unused
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
