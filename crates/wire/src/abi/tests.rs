use super::*;

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

fn create_body(name: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [0o100_101u32, 0o644, 0o022, 0] {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    b.extend_from_slice(name);
    b.push(0);
    b
}

#[test]
fn in_header_round_trips() {
    let b = header(opcode::GETATTR, 56);
    let h = InHeader::decode(&b).unwrap();
    assert_eq!((h.len, h.opcode, h.unique, h.nodeid, h.uid, h.pid), (56, opcode::GETATTR, 7, ROOT_ID, 1000, 42));
    assert_eq!(h.encode(), b);
}

#[test]
fn create_decodes_flags_mode_and_name() {
    let m = message(opcode::CREATE, &create_body(b"file"));
    let (h, req) = Request::decode_message(&m).unwrap();
    assert_eq!(h.opcode, opcode::CREATE);
    assert_eq!(req, Request::Create { flags: 0o100_101, mode: 0o644, umask: 0o022, name: b"file" });
}

#[test]
fn every_truncation_of_every_request_is_refused_without_panicking() {
    let mut bodies: Vec<(u32, Vec<u8>)> = vec![
        (opcode::CREATE, create_body(b"f")),
        (opcode::LOOKUP, b"name\0".to_vec()),
        (opcode::UNLINK, b"name\0".to_vec()),
        (opcode::GETATTR, vec![0; 16]),
        (opcode::READDIR, vec![0; 40]),
        (opcode::RELEASE, vec![0; 24]),
        (opcode::SETATTR, vec![0; 88]),
        (opcode::INIT, {
            let mut b = Vec::new();
            for v in [7u32, 44, 0, 0, 0] {
                b.extend_from_slice(&v.to_ne_bytes());
            }
            b.resize(64, 0);
            b
        }),
    ];
    let mut write = vec![0u8; 40];
    write[16..20].copy_from_slice(&5u32.to_ne_bytes());
    write.extend_from_slice(b"hello");
    bodies.push((opcode::WRITE, write));
    bodies.push((opcode::SYMLINK, b"link\0../target\0".to_vec()));
    bodies.push((opcode::FORGET, 3u64.to_ne_bytes().to_vec()));
    let mut batch = vec![0u8; 8];
    batch[0..4].copy_from_slice(&2u32.to_ne_bytes());
    for v in [5u64, 1, 6, 2] {
        batch.extend_from_slice(&v.to_ne_bytes());
    }
    bodies.push((opcode::BATCH_FORGET, batch.clone()));
    let m = message(opcode::BATCH_FORGET, &batch);
    let Request::BatchForget { pairs } = Request::decode_message(&m).unwrap().1 else { panic!("not a batch forget") };
    assert_eq!(forget_pairs(pairs).collect::<Vec<_>>(), [(5, 1), (6, 2)]);
    let mut getxattr = vec![0u8; 8];
    getxattr.extend_from_slice(b"security.capability\0");
    bodies.push((opcode::GETXATTR, getxattr));
    for (op, body) in bodies {
        let full = message(op, &body);
        assert!(Request::decode_message(&full).is_ok(), "opcode {op} whole");
        for cut in 0..full.len() {
            // Cut but with a header that still claims the whole length.
            assert!(Request::decode_message(&full[..cut]).is_err(), "opcode {op} cut at {cut}");
            // Cut with a header that agrees: the body itself is short.
            if cut >= IN_HEADER_LEN && cut < full.len() {
                let mut m = header(op, cut).to_vec();
                m.extend_from_slice(&full[IN_HEADER_LEN..cut]);
                assert!(Request::decode_message(&m).is_err(), "opcode {op} short body {cut}");
            }
        }
    }
}

#[test]
fn names_without_terminator_empty_or_with_a_slash_are_refused() {
    for bad in [&b"name"[..], b"\0", b"a/b\0", b""] {
        let m = message(opcode::LOOKUP, bad);
        assert_eq!(Request::decode_message(&m).unwrap_err(), DecodeError::Name, "{bad:?}");
    }
}

#[test]
fn a_header_whose_length_disagrees_is_refused() {
    let mut m = message(opcode::GETATTR, &[0; 16]);
    m.push(0);
    assert!(matches!(Request::decode_message(&m), Err(DecodeError::Length { .. })));
}

#[test]
fn garbage_never_panics() {
    // A deterministic xorshift: every length up to 300 bytes, many contents.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for len in 0..300 {
        for _ in 0..20 {
            let mut buf = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push(x as u8);
            }
            if len >= 8 {
                // Sometimes a plausible length and a known opcode.
                buf[0..4].copy_from_slice(&u32::try_from(len).unwrap().to_ne_bytes());
                buf[4..8].copy_from_slice(&(x as u32 % 53).to_ne_bytes());
            }
            let _ = Request::decode_message(&buf);
            let _ = decode_ent_in_out(&buf);
        }
    }
}

#[test]
fn reply_structs_have_the_kernels_sizes() {
    let attr = Attr { ino: 5, size: 1, mode: 0o100_644, nlink: 1, uid: 0, gid: 0, time_s: 1 };
    let mut out = Vec::new();
    encode_entry(&mut out, 5, 1, &attr);
    assert_eq!(out.len(), ENTRY_OUT_LEN);
    out.clear();
    encode_attr_out(&mut out, 1, &attr);
    assert_eq!(out.len(), ATTR_OUT_LEN);
    out.clear();
    encode_statfs(&mut out, 1, 1, 1, 1);
    assert_eq!(out.len(), 80);
    out.clear();
    InitOut { minor: 44, max_readahead: 0, flags: init_flags::OVER_IO_URING, max_write: 4096, max_pages: 1 }
        .encode(&mut out);
    assert_eq!(out.len(), INIT_OUT_LEN);
    // flags2 carries the high half: FUSE_OVER_IO_URING is its bit 9.
    assert_eq!(u32::from_ne_bytes(out[32..36].try_into().unwrap()), 1 << 9);
}

#[test]
fn dirents_are_aligned_and_stop_at_the_limit() {
    let mut out = Vec::new();
    assert!(push_dirent(&mut out, 64, 2, 1, 8, b"abc"));
    assert_eq!(out.len(), 32);
    assert!(!push_dirent(&mut out, 64, 3, 2, 8, b"a-longer-name-than-fits"));
    assert_eq!(out.len(), 32);
}

#[test]
fn write_and_symlink_decode_their_variable_parts() {
    let mut body = vec![0u8; 40];
    body[8..16].copy_from_slice(&4096u64.to_ne_bytes());
    body[16..20].copy_from_slice(&3u32.to_ne_bytes());
    body.extend_from_slice(b"abc");
    let m = message(opcode::WRITE, &body);
    assert_eq!(Request::decode_message(&m).unwrap().1, Request::Write { offset: 4096, data: b"abc" });
    let m = message(opcode::SYMLINK, b"l\0a/b\0");
    assert_eq!(Request::decode_message(&m).unwrap().1, Request::Symlink { name: b"l", target: b"a/b" });
    // A symlink without a target is refused.
    let m = message(opcode::SYMLINK, b"l\0");
    assert!(Request::decode_message(&m).is_err());
}
