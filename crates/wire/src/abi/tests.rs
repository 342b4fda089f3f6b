#![allow(clippy::unwrap_used)]

use std::time::Duration;

use super::*;

fn neg() -> Negotiated {
    Negotiated::default()
}

fn ext() -> Negotiated {
    Negotiated { flags: init_flags::SETXATTR_EXT, ..Negotiated::default() }
}

fn header(opcode: u32, len: usize) -> [u8; IN_HEADER_LEN] {
    InHeader {
        len: u32::try_from(len).unwrap(),
        opcode,
        unique: 7,
        nodeid: ROOT_ID,
        uid: 1000,
        gid: 1000,
        pid: 42,
        total_extlen: 0,
    }
    .encode()
}

fn message(opcode: u32, body: &[u8]) -> Vec<u8> {
    let mut m = header(opcode, IN_HEADER_LEN + body.len()).to_vec();
    m.extend_from_slice(body);
    m
}

/// Native-endian words, 4 or 8 bytes as given.
enum W {
    U32(u32),
    U64(u64),
}

fn words(ws: &[W]) -> Vec<u8> {
    let mut b = Vec::new();
    for w in ws {
        match *w {
            W::U32(v) => b.extend_from_slice(&v.to_ne_bytes()),
            W::U64(v) => b.extend_from_slice(&v.to_ne_bytes()),
        }
    }
    b
}

fn with(mut fixed: Vec<u8>, rest: &[u8]) -> Vec<u8> {
    fixed.extend_from_slice(rest);
    fixed
}

/// One well-formed body for every opcode the adapter serves, and the
/// request it must decode to (under `neg()`, or `ext()` where marked).
fn cases() -> Vec<(u32, Vec<u8>, Request<'static>, Negotiated)> {
    use W::{U32, U64};
    let n = neg();
    let mut setattr = words(&[U32(0x3f), U32(0), U64(9), U64(4096), U64(77)]);
    setattr.extend(words(&[U64(11), U64(22), U64(33), U32(1), U32(2), U32(3), U32(0o100_644), U32(0)]));
    setattr.extend(words(&[U32(1000), U32(100), U32(0)]));
    assert_eq!(setattr.len(), 88);
    let sa = SetattrIn {
        valid: 0x3f,
        fh: 9,
        size: 4096,
        lock_owner: 77,
        atime: 11,
        mtime: 22,
        ctime: 33,
        atime_nsec: 1,
        mtime_nsec: 2,
        ctime_nsec: 3,
        mode: 0o100_644,
        uid: 1000,
        gid: 100,
    };
    let rw = |size: u32| words(&[U64(5), U64(8192), U32(size), U32(2), U64(66), U32(0o2), U32(0)]);
    let mut v = vec![
        (opcode::LOOKUP, b"name\0".to_vec(), Request::Lookup { name: b"name" }, n),
        (opcode::FORGET, words(&[U64(3)]), Request::Forget { nlookup: 3 }, n),
        (opcode::GETATTR, words(&[U32(1), U32(0), U64(12)]), Request::Getattr { flags: 1, fh: 12 }, n),
        (opcode::SETATTR, setattr, Request::Setattr(sa), n),
        (opcode::READLINK, vec![], Request::Readlink, n),
        (opcode::SYMLINK, b"l\0a/b\0".to_vec(), Request::Symlink { name: b"l", target: b"a/b" }, n),
        (
            opcode::MKNOD,
            with(words(&[U32(0o10_644), U32(0x0801), U32(0o22), U32(0)]), b"fifo\0"),
            Request::Mknod { mode: 0o10_644, rdev: 0x0801, umask: 0o22, name: b"fifo" },
            n,
        ),
        (
            opcode::MKDIR,
            with(words(&[U32(0o755), U32(0o22)]), b"d\0"),
            Request::Mkdir { mode: 0o755, umask: 0o22, name: b"d" },
            n,
        ),
        (opcode::UNLINK, b"f\0".to_vec(), Request::Unlink { name: b"f" }, n),
        (opcode::RMDIR, b"d\0".to_vec(), Request::Rmdir { name: b"d" }, n),
        (
            opcode::RENAME,
            with(words(&[U64(9)]), b"a\0b\0"),
            Request::Rename { newdir: 9, name: b"a", newname: b"b" },
            n,
        ),
        (
            opcode::RENAME2,
            with(words(&[U64(9), U32(2), U32(0)]), b"a\0b\0"),
            Request::Rename2 { newdir: 9, flags: 2, name: b"a", newname: b"b" },
            n,
        ),
        (opcode::LINK, with(words(&[U64(4)]), b"hard\0"), Request::Link { oldnodeid: 4, newname: b"hard" }, n),
        (opcode::OPEN, words(&[U32(0o2), U32(1)]), Request::Open { flags: 0o2, open_flags: 1 }, n),
        (
            opcode::READ,
            rw(4096),
            Request::Read { fh: 5, offset: 8192, size: 4096, read_flags: 2, lock_owner: 66, flags: 0o2 },
            n,
        ),
        (
            opcode::WRITE,
            with(rw(3), b"abc"),
            Request::Write { fh: 5, offset: 8192, data: b"abc", write_flags: 2, lock_owner: 66, flags: 0o2 },
            n,
        ),
        (opcode::STATFS, vec![], Request::Statfs, n),
        (
            opcode::RELEASE,
            words(&[U64(5), U32(0o2), U32(1), U64(66)]),
            Request::Release { fh: 5, flags: 0o2, release_flags: 1, lock_owner: 66 },
            n,
        ),
        (opcode::FSYNC, words(&[U64(5), U32(1), U32(0)]), Request::Fsync { fh: 5, fsync_flags: 1 }, n),
        (
            opcode::SETXATTR,
            with(words(&[U32(2), U32(1)]), b"user.a\0hi"),
            Request::Setxattr { name: b"user.a", value: b"hi", flags: 1, setxattr_flags: 0 },
            n,
        ),
        (
            opcode::SETXATTR,
            with(words(&[U32(2), U32(1), U32(1), U32(0)]), b"system.posix_acl_access\0hi"),
            Request::Setxattr { name: b"system.posix_acl_access", value: b"hi", flags: 1, setxattr_flags: 1 },
            ext(),
        ),
        (
            opcode::GETXATTR,
            with(words(&[U32(0), U32(0)]), b"security.capability\0"),
            Request::Getxattr { name: b"security.capability", size: 0 },
            n,
        ),
        (opcode::LISTXATTR, words(&[U32(4096), U32(0)]), Request::Listxattr { size: 4096 }, n),
        (opcode::REMOVEXATTR, b"user.a\0".to_vec(), Request::Removexattr { name: b"user.a" }, n),
        (opcode::FLUSH, words(&[U64(5), U32(0), U32(0), U64(66)]), Request::Flush { fh: 5, lock_owner: 66 }, n),
        (opcode::OPENDIR, words(&[U32(0), U32(0)]), Request::Opendir { flags: 0, open_flags: 0 }, n),
        (opcode::READDIR, rw(4096), Request::Readdir { fh: 5, offset: 8192, size: 4096 }, n),
        (opcode::READDIRPLUS, rw(4096), Request::Readdirplus { fh: 5, offset: 8192, size: 4096 }, n),
        (
            opcode::RELEASEDIR,
            words(&[U64(5), U32(0), U32(0), U64(0)]),
            Request::Releasedir { fh: 5, flags: 0, release_flags: 0, lock_owner: 0 },
            n,
        ),
        (opcode::FSYNCDIR, words(&[U64(5), U32(0), U32(0)]), Request::Fsyncdir { fh: 5, fsync_flags: 0 }, n),
        (opcode::ACCESS, words(&[U32(4), U32(0)]), Request::Access { mask: 4 }, n),
        (
            opcode::CREATE,
            with(words(&[U32(0o100_101), U32(0o644), U32(0o022), U32(0)]), b"file\0"),
            Request::Create { flags: 0o100_101, mode: 0o644, umask: 0o022, open_flags: 0, name: b"file" },
            n,
        ),
        (
            opcode::TMPFILE,
            with(words(&[U32(0o20_200_002), U32(0o600), U32(0o022), U32(0)]), b"/\0"),
            Request::Tmpfile { flags: 0o20_200_002, mode: 0o600, umask: 0o022, open_flags: 0 },
            n,
        ),
        (opcode::INTERRUPT, words(&[U64(99)]), Request::Interrupt { unique: 99 }, n),
        (opcode::DESTROY, vec![], Request::Destroy, n),
        (
            opcode::IOCTL,
            with(words(&[U64(5), U32(0), U32(0x8008_6601), U64(0xdead), U32(2), U32(8)]), b"xy"),
            Request::Ioctl { fh: 5, flags: 0, cmd: 0x8008_6601, arg: 0xdead, in_size: 2, out_size: 8, data: b"xy" },
            n,
        ),
        (
            opcode::FALLOCATE,
            words(&[U64(5), U64(0), U64(1 << 20), U32(1), U32(0)]),
            Request::Fallocate { fh: 5, offset: 0, length: 1 << 20, mode: 1 },
            n,
        ),
        (
            opcode::LSEEK,
            words(&[U64(5), U64(100), U32(3), U32(0)]),
            Request::Lseek { fh: 5, offset: 100, whence: 3 },
            n,
        ),
        (
            opcode::COPY_FILE_RANGE,
            words(&[U64(1), U64(2), U64(3), U64(4), U64(5), U64(6), U64(0)]),
            Request::CopyFileRange { fh_in: 1, off_in: 2, nodeid_out: 3, fh_out: 4, off_out: 5, len: 6, flags: 0 },
            n,
        ),
        (opcode::SYNCFS, words(&[U64(0)]), Request::Syncfs, n),
        (
            opcode::STATX,
            words(&[U32(1), U32(0), U64(5), U32(0x100), U32(0xfff)]),
            Request::Statx { getattr_flags: 1, fh: 5, sx_flags: 0x100, sx_mask: 0xfff },
            n,
        ),
        (
            opcode::INIT,
            {
                let mut b = words(&[U32(7), U32(44), U32(1 << 17), U32(1), U32(1 << 9)]);
                b.resize(64, 0);
                b
            },
            Request::Init(InitIn { major: 7, minor: 44, max_readahead: 1 << 17, flags: 1 | init_flags::OVER_IO_URING }),
            n,
        ),
    ];
    let mut batch = words(&[U32(2), U32(0)]);
    batch.extend(words(&[U64(5), U64(1), U64(6), U64(2)]));
    v.push((opcode::BATCH_FORGET, batch, Request::Lookup { name: b"placeholder" }, n));
    v
}

#[test]
fn in_header_round_trips() {
    let b = header(opcode::GETATTR, 56);
    let h = InHeader::decode(&b).unwrap();
    assert_eq!((h.len, h.opcode, h.unique, h.nodeid, h.uid, h.gid, h.pid), (56, 3, 7, ROOT_ID, 1000, 1000, 42));
    assert_eq!(h.encode(), b);
}

#[test]
fn every_opcode_decodes_its_fields_on_both_layouts() {
    for (op, body, want, neg) in cases() {
        let m = message(op, &body);
        let (h, got) = Request::decode_message(&m, &neg).unwrap();
        assert_eq!(h.opcode, op);
        if op == opcode::BATCH_FORGET {
            let Request::BatchForget { forgets } = got else { panic!("not a batch forget: {got:?}") };
            assert_eq!(forgets.iter().collect::<Vec<_>>(), [(5, 1), (6, 2)]);
            assert_eq!(forgets.len(), 2);
            continue;
        }
        assert_eq!(got, want, "opcode {op}");
        // The ring's layout: the fixed struct in a 128-byte area whose tail
        // holds stale bytes, the rest in the payload.
        let split = op_header_len(op, &neg);
        let mut area = [0xa5u8; URING_HEADER_AREA];
        area[..split].copy_from_slice(&body[..split]);
        let got = Request::decode(op, &area[..split], &body[split..], &neg).unwrap();
        assert_eq!(got, want, "opcode {op} on the ring");
    }
}

#[test]
fn unknown_opcodes_decode_as_unknown() {
    for op in [opcode::GETLK, opcode::BMAP, opcode::POLL, opcode::SETUPMAPPING, 1000] {
        let m = message(op, &[0; 8]);
        assert_eq!(Request::decode_message(&m, &neg()).unwrap().1, Request::Unknown { opcode: op });
    }
}

#[test]
fn every_truncation_of_every_request_is_refused_without_panicking() {
    for (op, body, _, neg) in cases() {
        let full = message(op, &body);
        assert!(Request::decode_message(&full, &neg).is_ok(), "opcode {op} whole");
        for cut in 0..full.len() {
            // Cut but with a header that still claims the whole length.
            assert!(Request::decode_message(&full[..cut], &neg).is_err(), "opcode {op} cut at {cut}");
            // Cut with a header that agrees: the body itself is short.
            if cut >= IN_HEADER_LEN && cut < full.len() {
                let mut m = header(op, cut).to_vec();
                m.extend_from_slice(&full[IN_HEADER_LEN..cut]);
                assert!(Request::decode_message(&m, &neg).is_err(), "opcode {op} short body {cut}");
            }
        }
    }
}

#[test]
fn names_without_terminator_empty_or_with_a_slash_are_refused() {
    for bad in [&b"name"[..], b"\0", b"a/b\0", b""] {
        let m = message(opcode::LOOKUP, bad);
        assert_eq!(Request::decode_message(&m, &neg()).unwrap_err(), DecodeError::Name, "{bad:?}");
    }
    // The new name of a rename is checked too.
    let mut body = 9u64.to_ne_bytes().to_vec();
    body.extend_from_slice(b"a\0b/c\0");
    assert_eq!(Request::decode_message(&message(opcode::RENAME, &body), &neg()).unwrap_err(), DecodeError::Name);
    // A symlink without a target is refused.
    assert!(Request::decode_message(&message(opcode::SYMLINK, b"l\0"), &neg()).is_err());
}

#[test]
fn a_header_whose_length_disagrees_is_refused() {
    let mut m = message(opcode::GETATTR, &[0; 16]);
    m.push(0);
    assert!(matches!(Request::decode_message(&m, &neg()), Err(DecodeError::Length { .. })));
}

#[test]
fn extensions_after_the_arguments_are_left_out() {
    let mut m = message(opcode::LOOKUP, b"name\0");
    m.extend_from_slice(&[0xff; 16]);
    let mut h = InHeader::decode(&m).unwrap();
    h.len = u32::try_from(m.len()).unwrap();
    h.total_extlen = 2;
    m[..IN_HEADER_LEN].copy_from_slice(&h.encode());
    assert_eq!(Request::decode_message(&m, &neg()).unwrap().1, Request::Lookup { name: b"name" });
}

#[test]
fn garbage_never_panics() {
    // A deterministic xorshift: every length up to 300 bytes, many contents,
    // with both SETXATTR layouts.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for len in 0..300 {
        for round in 0..40 {
            let mut buf = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push(x as u8);
            }
            if len >= 8 {
                // Mostly a plausible length and a known opcode.
                buf[0..4].copy_from_slice(&u32::try_from(len).unwrap().to_ne_bytes());
                buf[4..8].copy_from_slice(&(x as u32 % 55).to_ne_bytes());
            }
            if len >= 40 && round % 2 == 0 {
                buf[36..38].copy_from_slice(&[0, 0]);
            }
            let n = if round % 3 == 0 { ext() } else { neg() };
            let _ = Request::decode_message(&buf, &n);
            let _ = decode_ent_in_out(&buf);
            if len >= 8 {
                let op = u32::from_ne_bytes(buf[4..8].try_into().unwrap());
                let (a, b) = buf.split_at(len / 3);
                let _ = Request::decode(op, a, b, &n);
            }
        }
    }
}

fn attr() -> Attr {
    Attr {
        ino: 5,
        size: 1,
        blocks: 8,
        atime: -1,
        mtime: 2,
        ctime: 3,
        atime_nsec: 4,
        mtime_nsec: 5,
        ctime_nsec: 6,
        mode: 0o100_644,
        nlink: 1,
        uid: 7,
        gid: 8,
        rdev: 9,
        blksize: 4096,
        flags: 10,
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

#[test]
fn reply_structs_have_the_kernels_sizes_and_fields() {
    let mut mem = vec![0u8; 4096];
    let mut out = ReplyBuf::new(&mut mem);
    let e = EntryOut {
        nodeid: 5,
        generation: 2,
        entry_valid: Duration::new(3, 4),
        attr_valid: Duration::new(5, 6),
        attr: attr(),
    };
    out.entry_out(&e);
    assert_eq!(out.len(), ENTRY_OUT_LEN);
    let b = out.as_slice();
    assert_eq!((u64_at(b, 0), u64_at(b, 8), u64_at(b, 16), u64_at(b, 24)), (5, 2, 3, 5));
    assert_eq!((u32_at(b, 32), u32_at(b, 36)), (4, 6));
    // fuse_attr: ino, size, blocks, atime (-1 as the kernel's s64), ... flags last.
    assert_eq!((u64_at(b, 40), u64_at(b, 56), u64_at(b, 64)), (5, 8, u64::MAX));
    assert_eq!((u32_at(b, 40 + 60), u32_at(b, 40 + 84)), (0o100_644, 10));
    out.clear();
    out.attr_out(&attr(), Duration::from_secs(1));
    assert_eq!(out.len(), ATTR_OUT_LEN);
    out.clear();
    out.create_out(&e, 11, fopen::KEEP_CACHE);
    assert_eq!(out.len(), ENTRY_OUT_LEN + OPEN_OUT_LEN);
    assert_eq!((u64_at(out.as_slice(), ENTRY_OUT_LEN), u32_at(out.as_slice(), ENTRY_OUT_LEN + 8)), (11, 2));
    out.clear();
    out.statfs_out(&Kstatfs { blocks: 1, bfree: 2, bavail: 3, files: 4, ffree: 5, bsize: 6, namelen: 7, frsize: 8 });
    assert_eq!(out.len(), STATFS_OUT_LEN);
    assert_eq!((u64_at(out.as_slice(), 32), u32_at(out.as_slice(), 40), u32_at(out.as_slice(), 48)), (5, 6, 8));
    for (f, len) in [
        (&(|o: &mut ReplyBuf<'_>| o.write_out(3)) as &dyn Fn(&mut ReplyBuf<'_>), 8),
        (&|o: &mut ReplyBuf<'_>| o.getxattr_out(3), 8),
        (&|o: &mut ReplyBuf<'_>| o.lseek_out(3), 8),
        (&|o: &mut ReplyBuf<'_>| o.open_out(3, 0), 16),
        (&|o: &mut ReplyBuf<'_>| o.ioctl_out(-1, b"abcd"), 20),
    ] {
        out.clear();
        f(&mut out);
        assert_eq!(out.len(), len);
    }
    out.clear();
    let init = InitOut { minor: 44, flags: init_flags::OVER_IO_URING | 1, max_write: 1 << 20, ..InitOut::default() };
    init.encode(&mut out);
    assert_eq!(out.len(), INIT_OUT_LEN);
    // flags2 carries the high half: FUSE_OVER_IO_URING is its bit 9.
    assert_eq!((u32_at(out.as_slice(), 12), u32_at(out.as_slice(), 32)), (1, 1 << 9));
    assert_eq!(init.max_payload(), 1 << 20);
}

#[test]
fn dirents_are_aligned_and_stop_at_the_size() {
    let mut mem = vec![0u8; 4096];
    let mut out = ReplyBuf::new(&mut mem);
    assert!(out.push_dirent(64, 2, 1, 8, b"abc"));
    assert_eq!(out.len(), 32);
    assert!(!out.push_dirent(64, 3, 2, 8, b"a-longer-name-than-fits"));
    assert_eq!(out.len(), 32);
    assert!(!out.overflowed(), "a dirent that does not fit is not an overflow");
    out.clear();
    // No entry: node id 0 and no attributes, but the dirent keeps its ino.
    let none = EntryOut::default();
    assert!(out.push_direntplus(4096, &none, 1, 8, b"x"));
    assert_eq!(out.len(), (ENTRY_OUT_LEN + DIRENT_LEN + 1).next_multiple_of(8));
    assert_eq!(u64_at(out.as_slice(), 0), 0);
    let e = EntryOut { nodeid: 9, attr: Attr { ino: 9, ..Attr::default() }, ..EntryOut::default() };
    assert!(out.push_direntplus(4096, &e, 2, 8, b"name"));
    assert_eq!(u64_at(out.as_slice(), 160), 9);
    assert_eq!(u64_at(out.as_slice(), 160 + ENTRY_OUT_LEN), 9);
    assert!(!out.push_direntplus(300, &e, 3, 8, b"more"));
}

#[test]
fn reply_buf_refuses_past_its_limit_and_fills_in_place() {
    let mut mem = [0u8; 16];
    let mut out = ReplyBuf::new(&mut mem);
    assert_eq!(out.limit(), 16);
    out.lseek_out(1);
    out.spare()[..4].copy_from_slice(b"data");
    out.advance(4);
    assert_eq!(&out.as_slice()[8..], b"data");
    assert!(!out.push(b"too long"));
    assert!(out.overflowed());
    out.advance(100);
    assert_eq!(out.len(), 16);
}

#[test]
fn notifications_are_whole_messages() {
    let m = notify_inval_entry(1, b"name", 0);
    assert_eq!(m.len(), OUT_HEADER_LEN + 16 + 5);
    assert_eq!(u32_at(&m, 0) as usize, m.len());
    assert_eq!((u32_at(&m, 4), u64_at(&m, 8)), (notify_code::INVAL_ENTRY as u32, 0));
    assert_eq!(&m[32..], b"name\0");
    let m = notify_delete(1, 5, b"f");
    assert_eq!(m.len(), OUT_HEADER_LEN + 24 + 2);
    assert_eq!(u64_at(&m, 24), 5);
    let m = notify_inval_inode(5, -1, 0);
    assert_eq!(m.len(), OUT_HEADER_LEN + 24);
    assert_eq!(u64_at(&m, 24), u64::MAX);
}

#[test]
fn statx_out_is_the_kernels_struct_with_btime_where_known() {
    let mut buf = vec![0u8; 512];
    let attr = Attr { ino: 9, mode: 0o100_644, atime: 1, ctime: 3, mtime: 4, atime_nsec: 5, ..Attr::default() };
    let mut out = ReplyBuf::new(&mut buf);
    out.statx_out(&attr, Some((2, 7)), std::time::Duration::from_secs(1));
    let b = out.as_slice();
    assert_eq!(b.len(), 32 + 256, "fuse_statx_out");
    let u32_at = |at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap());
    assert_eq!(u32_at(32), 0x7ff | 0x800, "basic stats and btime");
    assert_eq!(u16::from_ne_bytes(b[60..62].try_into().unwrap()), 0o100_644);
    assert_eq!(u64_at(64), 9, "ino");
    assert_eq!((u64_at(96), u32_at(104)), (1, 5), "atime");
    assert_eq!((u64_at(112), u32_at(120)), (2, 7), "btime");
    assert_eq!(u64_at(128), 3, "ctime");
    assert_eq!(u64_at(144), 4, "mtime");
    let mut out = ReplyBuf::new(&mut buf);
    out.statx_out(&attr, None, std::time::Duration::from_secs(1));
    assert_eq!(u32::from_ne_bytes(out.as_slice()[32..36].try_into().unwrap()), 0x7ff, "no btime");
}
