#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::{FileKind, InodeNo};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, RenameFlags};
use dualfs_engine::{Error, Volume};

fn devices() -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    (Arc::new(MemoryDevice::new(8192)), Arc::new(MemoryDevice::new(65536)))
}

fn fsck(meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) {
    let r = dualfs_engine::check::check(meta.clone(), data.clone()).unwrap();
    assert!(r.is_clean(), "fsck: {:#?}", r.problems);
}

fn mkfs(meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) {
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
}

#[test]
fn files_survive_close_and_reopen() {
    let (meta, data) = devices();
    mkfs(&meta, &data);
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let root = InodeNo::ROOT;
    let d = v.mkdir(root, b"dir", 0o755, Creds::ROOT).unwrap();
    let f = v.create(d.ino, b"small", 0o644, Creds::ROOT).unwrap();
    v.write(f.ino, 0, b"hello world").unwrap();
    let g = v.create(d.ino, b"big", 0o600, Creds::ROOT).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    v.write(g.ino, 0, &big).unwrap();
    v.symlink(root, b"link", b"dir/small", Creds::ROOT).unwrap();
    v.setxattr(f.ino, b"user.color", b"blue", dualfs_engine::namespace::xattr::SetMode::Any).unwrap();
    assert_eq!(v.read(g.ino, 0, 400_000).unwrap(), big);
    v.close().unwrap();

    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    assert_eq!(v.open_report().recovery.partial_segments, 0, "clean close needs no roll-forward");
    let d = v.lookup(root, b"dir").unwrap();
    assert_eq!(d.kind, FileKind::Directory);
    let f = v.lookup(d.ino, b"small").unwrap();
    assert_eq!(v.read(f.ino, 0, 100).unwrap(), b"hello world");
    let g = v.lookup(d.ino, b"big").unwrap();
    assert_eq!(g.size, 300_000);
    assert_eq!(v.read(g.ino, 0, 400_000).unwrap(), big);
    let l = v.lookup(root, b"link").unwrap();
    assert_eq!(v.readlink(l.ino).unwrap(), b"dir/small");
    assert_eq!(v.getxattr(f.ino, b"user.color").unwrap(), b"blue");
    v.rename(d.ino, b"small", root, b"moved", RenameFlags::default()).unwrap();
    assert!(matches!(v.lookup(d.ino, b"small"), Err(Error::NotFound)));
    v.unlink(d.ino, b"big").unwrap();
    v.close().unwrap();

    fsck(&meta, &data);
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let m = v.lookup(root, b"moved").unwrap();
    assert_eq!(v.read(m.ino, 0, 100).unwrap(), b"hello world");
    let d = v.lookup(root, b"dir").unwrap();
    assert!(matches!(v.lookup(d.ino, b"big"), Err(Error::NotFound)));
    v.close().unwrap();
    fsck(&meta, &data);
}

#[test]
fn crash_without_close_rolls_forward() {
    let (meta, data) = devices();
    mkfs(&meta, &data);
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    for i in 0..500u32 {
        let f = v.create(InodeNo::ROOT, format!("f{i}").as_bytes(), 0o644, Creds::ROOT).unwrap();
        v.write(f.ino, 0, &vec![i as u8; (i as usize * 37) % 9000]).unwrap();
    }
    v.commit().unwrap();
    drop(v);
    fsck(&meta, &data);
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    assert!(v.open_report().recovery.partial_segments > 0);
    for i in 0..500u32 {
        let f = v.lookup(InodeNo::ROOT, format!("f{i}").as_bytes()).unwrap();
        assert_eq!(v.read(f.ino, 0, 10_000).unwrap(), vec![i as u8; (i as usize * 37) % 9000]);
    }
    v.close().unwrap();
    fsck(&meta, &data);
}
