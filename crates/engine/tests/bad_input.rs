//! Bad input gets a clear error and changes nothing: bad names, sizes past
//! the maximum, full devices, corrupt and truncated images.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::namespace::xattr::SetMode;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, SetAttr};
use dualfs_engine::{DeviceRole, Error, Volume};

fn setup(meta_blocks: u64, data_blocks: u64) -> (Arc<MemoryDevice>, Arc<MemoryDevice>) {
    let meta = Arc::new(MemoryDevice::new(meta_blocks));
    let data = Arc::new(MemoryDevice::new(data_blocks));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 1024, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    (meta, data)
}

fn open(meta: &Arc<MemoryDevice>, data: &Arc<MemoryDevice>) -> Volume {
    Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap()
}

fn fsck_clean(meta: &Arc<MemoryDevice>, data: &Arc<MemoryDevice>) {
    let r = dualfs_engine::check::check(meta.clone(), data.clone()).unwrap();
    assert!(r.is_clean(), "fsck: {:#?}", r.problems);
}

fn names(v: &Volume, dir: InodeNo) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    v.readdir(dir, 0, &mut |l| {
        out.push(l.name);
        true
    })
    .unwrap();
    out
}

#[test]
fn bad_names_are_refused_and_change_nothing() {
    let (meta, data) = setup(4096, 4096);
    let v = open(&meta, &data);
    let root = InodeNo::ROOT;
    let f = v.create(root, b"file", 0o644, Creds::ROOT).unwrap().ino;
    let before = names(&v, root);
    let long = vec![b'x'; 256];
    for (name, want) in [
        (&b""[..], libc::EINVAL),
        (&long[..], libc::ENAMETOOLONG),
        (b".", libc::EINVAL),
        (b"..", libc::EINVAL),
        (b"a/b", libc::EINVAL),
        (b"a\0b", libc::EINVAL),
    ] {
        assert_eq!(v.create(root, name, 0o644, Creds::ROOT).unwrap_err().errno(), want, "create {name:?}");
        assert_eq!(v.mkdir(root, name, 0o755, Creds::ROOT).unwrap_err().errno(), want, "mkdir {name:?}");
        assert_eq!(v.symlink(root, name, b"t", Creds::ROOT).unwrap_err().errno(), want, "symlink {name:?}");
        assert_eq!(v.link(f, root, name).unwrap_err().errno(), want, "link {name:?}");
        let r = v.rename(root, b"file", root, name, Default::default());
        assert_eq!(r.unwrap_err().errno(), want, "rename to {name:?}");
    }
    assert_eq!(v.lookup(root, &long).unwrap_err().errno(), libc::ENAMETOOLONG);
    assert!(v.create(root, &[b'y'; 255], 0o644, Creds::ROOT).is_ok(), "255 bytes is allowed");
    let mut after = names(&v, root);
    after.retain(|n| n != &vec![b'y'; 255]);
    assert_eq!(before, after);
    assert_eq!(v.getattr(f).unwrap().nlink, 1);
    v.close().unwrap();
    fsck_clean(&meta, &data);
}

#[test]
fn sizes_past_the_maximum_give_efbig() {
    let (meta, data) = setup(4096, 4096);
    let v = open(&meta, &data);
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    let max = dualfs_engine::namespace::file::MAX_FILE_SIZE;
    assert_eq!(v.write(f, max, b"x").unwrap_err().errno(), libc::EFBIG);
    assert_eq!(v.write(f, max - 1, b"xy").unwrap_err().errno(), libc::EFBIG);
    assert_eq!(v.setattr(f, &SetAttr { size: Some(max + 1), ..SetAttr::default() }).unwrap_err().errno(), libc::EFBIG);
    v.write(f, max - 1, b"z").unwrap();
    assert_eq!(v.getattr(f).unwrap().size, max);
    assert_eq!(v.read(f, max - 1, 10).unwrap(), b"z");
    v.close().unwrap();
    fsck_clean(&meta, &data);
}

#[test]
fn a_full_data_device_gives_enospc_and_recovers_after_deletes() {
    let (meta, data) = setup(8192, 1024);
    let v = open(&meta, &data);
    let chunk = vec![0xA5u8; 64 << 10];
    let mut written = Vec::new();
    let mut full = false;
    for i in 0..100 {
        let name = format!("f{i}");
        let f = v.create(InodeNo::ROOT, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        match v.write(f, 0, &chunk) {
            Ok(_) => written.push(name),
            Err(e) => {
                assert!(matches!(e, Error::NoSpace(DeviceRole::Data)), "{e}");
                full = true;
                break;
            }
        }
    }
    assert!(full, "the data device never filled");
    v.commit().unwrap();
    // Everything written before the error is intact; nothing is half there.
    for name in &written {
        let f = v.lookup(InodeNo::ROOT, name.as_bytes()).unwrap().ino;
        assert_eq!(v.read(f, 0, chunk.len()).unwrap(), chunk);
    }
    v.close().unwrap();
    fsck_clean(&meta, &data);

    let v = open(&meta, &data);
    for name in written.iter().take(4) {
        v.unlink(InodeNo::ROOT, name.as_bytes()).unwrap();
    }
    let f = v.create(InodeNo::ROOT, b"again", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &chunk).unwrap();
    v.close().unwrap();
    fsck_clean(&meta, &data);
}

#[test]
fn a_full_meta_data_device_gives_enospc_and_recovers_after_deletes() {
    // 20 segments of 512 KiB: the log fills long before the data device.
    let (meta, data) = setup(128 * 21, 1 << 16);
    let v = open(&meta, &data);
    let big = vec![7u8; 3000];
    let mut made = 0;
    let err = loop {
        let name = format!("f{made}");
        match v.create(InodeNo::ROOT, name.as_bytes(), 0o644, Creds::ROOT) {
            Ok(a) => {
                v.forget(a.ino, 1).unwrap();
                if let Err(e) = v.setxattr(a.ino, b"user.pad", &big, SetMode::Any) {
                    break e;
                }
                made += 1;
            }
            Err(e) => break e,
        }
        assert!(made < 100_000, "the meta-data device never filled");
    };
    assert!(matches!(err, Error::NoSpace(DeviceRole::Meta)), "{err}");
    v.close().unwrap();
    fsck_clean(&meta, &data);

    let v = open(&meta, &data);
    for i in 0..made {
        v.unlink(InodeNo::ROOT, format!("f{i}").as_bytes()).unwrap();
    }
    v.sync().unwrap();
    for i in 0..100 {
        v.create(InodeNo::ROOT, format!("g{i}").as_bytes(), 0o644, Creds::ROOT).unwrap();
    }
    v.close().unwrap();
    fsck_clean(&meta, &data);
}

fn flip(dev: &MemoryDevice, block: u64, byte: usize) {
    let mut buf = vec![0u8; 4096];
    dev.read_blocks(block, &mut buf).unwrap();
    buf[byte] ^= 0x10;
    dev.write_blocks(block, &buf).unwrap();
}

#[test]
fn a_damaged_superblock_is_named() {
    // The meta-data device's own copy damaged: the data device's is used,
    // and said to be (the log's blocks show the device is the volume's).
    let (meta, data) = setup(4096, 4096);
    flip(&meta, 0, 100);
    let v =
        Volume::open(meta.clone(), data.clone(), MountOptions { read_only: true, ..MountOptions::default() }).unwrap();
    let said = v.open_report().superblock_repair.clone().unwrap_or_default();
    assert!(said.contains("meta-data device's superblock does not decode"), "{:?}", v.open_report());
    assert!(!v.open_report().is_damaged(), "nothing is lost: {:?}", v.open_report());
    // The data device's copy damaged past its first sector (which still
    // names the volume): the meta-data device's is used, and a writable
    // open writes the copy again.
    let (meta, data) = setup(4096, 4096);
    flip(&data, 0, 100);
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let said = v.open_report().superblock_repair.clone().unwrap_or_default();
    assert!(said.contains("data device's superblock copy does not decode"), "{:?}", v.open_report());
    v.close().unwrap();
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    assert!(v.open_report().superblock_repair.is_none(), "{:?}", v.open_report());
    // Its first sector damaged too: nothing shows the device is the
    // volume's, and it is refused.
    let (meta, data) = setup(4096, 4096);
    flip(&data, 0, 45);
    let e = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap_err();
    assert!(e.to_string().contains("superblock") && e.to_string().contains("data device"), "{e}");
}

#[test]
fn devices_of_two_volumes_are_not_a_pair() {
    let (meta, _) = setup(4096, 4096);
    let (_, data) = setup(4096, 4096);
    let e = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap_err();
    assert!(matches!(e, Error::WrongVolume(_)), "{e}");
    assert!(e.to_string().contains("not a pair"), "{e}");
    let e = Volume::open(data.clone(), meta.clone(), MountOptions::default()).unwrap_err();
    assert!(e.to_string().contains("data device"), "{e}");
}

#[test]
fn a_truncated_image_is_named() {
    let (meta, data) = setup(4096, 4096);
    let short = Arc::new(meta.snapshot_truncated(2048));
    let e = Volume::open(short, data.clone(), MountOptions::default()).unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
}

#[test]
fn a_torn_newest_checkpoint_falls_back_to_the_older_one() {
    let (meta, data) = setup(4096, 4096);
    let v = open(&meta, &data);
    v.create(InodeNo::ROOT, b"kept", 0o644, Creds::ROOT).unwrap();
    v.close().unwrap();
    // The close wrote checkpoint 3 (mkfs wrote 1, the mount none, close 2 and
    // maybe 3); tear whichever slot is newer.
    let mut newest = (0, 0);
    for slot in [1u64, 2] {
        let mut buf = vec![0u8; 4096];
        meta.read_blocks(slot, &mut buf).unwrap();
        if let Ok(c) = dualfs_engine::format::checkpoint::Checkpoint::decode(&buf)
            && c.number > newest.0
        {
            newest = (c.number, slot);
        }
    }
    flip(&meta, newest.1, 40);
    let v = open(&meta, &data);
    assert!(v.open_report().fell_back.is_some());
    assert!(v.open_report().checkpoint < newest.0);
    v.lookup(InodeNo::ROOT, b"kept").unwrap();
    v.close().unwrap();
    fsck_clean(&meta, &data);
}

#[test]
fn damaged_meta_data_is_reported_not_panicked_on() {
    let (meta, data) = setup(4096, 4096);
    let v = open(&meta, &data);
    let d = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
    for i in 0..200 {
        v.create(d, format!("file-{i}").as_bytes(), 0o644, Creds::ROOT).unwrap();
    }
    v.close().unwrap();
    // Flip a byte in every block of the log, one at a time; open and walk
    // must report an error or a problem, never panic.
    let first = 128u64;
    for b in first..first + 20 {
        let m = Arc::new(meta.snapshot());
        let dd = Arc::new(data.snapshot());
        flip(&m, b, 200);
        match Volume::open(m.clone(), dd.clone(), MountOptions { read_only: true, ..MountOptions::default() }) {
            Err(e) => assert!(matches!(e, Error::Corrupt { .. }), "block {b}: {e}"),
            Ok(v) => {
                let _ = v.lookup(InodeNo::ROOT, b"d").and_then(|a| {
                    v.readdir(a.ino, 0, &mut |_| true)?;
                    Ok(())
                });
            }
        }
        match dualfs_engine::check::check(m, dd) {
            Ok(r) => {
                let _ = r.is_clean();
            }
            Err(e) => assert!(matches!(e, Error::Corrupt { .. }), "block {b}: {e}"),
        }
    }
}
