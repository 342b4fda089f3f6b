//! POSIX ACLs through the engine API: the mode and the access ACL stay two
//! views of one thing, and directories hand their default ACL down.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::namespace::acl::{
    ACCESS, Acl, AclEntry, AclKind, DEFAULT, GROUP, GROUP_OBJ, MASK, OTHER, USER, USER_OBJ,
};
use dualfs_engine::namespace::xattr::SetMode;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, SetAttr};
use dualfs_engine::{Error, Volume};

fn volume() -> (Volume, Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(8192));
    let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(16384));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    (Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap(), meta, data)
}

fn e(tag: u16, perm: u16, id: u32) -> AclEntry {
    AclEntry { tag, perm, id }
}

fn acl(entries: &[AclEntry]) -> Vec<u8> {
    Acl::new(entries.to_vec()).unwrap().encode()
}

fn entries(v: &[u8]) -> Vec<AclEntry> {
    Acl::decode(v).unwrap().unwrap().entries().to_vec()
}

const USER_022: Creds = Creds { uid: 1000, gid: 1000, umask: 0o022 };

#[test]
fn setting_an_access_acl_sets_the_mode_and_a_plain_one_is_not_stored() {
    let (v, ..) = volume();
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap();
    let named = acl(&[e(USER_OBJ, 6, 0), e(USER, 4, 65534), e(GROUP_OBJ, 4, 0), e(MASK, 5, 0), e(OTHER, 0, 0)]);
    v.setxattr(f.ino, ACCESS, &named, SetMode::Any).unwrap();
    assert_eq!(v.getattr(f.ino).unwrap().perm, 0o650, "group bits are the mask's");
    assert_eq!(v.getxattr(f.ino, ACCESS).unwrap(), named);
    assert!(v.listxattr(f.ino).unwrap().contains(&ACCESS.to_vec()));

    // What cp -a and setfacl -b send for a file without named entries: a chmod.
    let plain = acl(&[e(USER_OBJ, 7, 0), e(GROUP_OBJ, 5, 0), e(OTHER, 1, 0)]);
    v.setxattr(f.ino, ACCESS, &plain, SetMode::Any).unwrap();
    assert_eq!(v.getattr(f.ino).unwrap().perm, 0o751);
    assert!(matches!(v.getxattr(f.ino, ACCESS), Err(Error::NoXattr)), "an ACL the mode says is not kept");

    let bad = [2u8, 0, 0, 0, 1, 0, 7, 0];
    assert!(matches!(v.setxattr(f.ino, ACCESS, &bad, SetMode::Any), Err(Error::Invalid(_))));
}

#[test]
fn chmod_rewrites_the_access_acl() {
    let (v, ..) = volume();
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap();
    let named = acl(&[e(USER_OBJ, 6, 0), e(USER, 7, 42), e(GROUP_OBJ, 4, 0), e(MASK, 7, 0), e(OTHER, 4, 0)]);
    v.setxattr(f.ino, ACCESS, &named, SetMode::Any).unwrap();
    v.setattr(f.ino, &SetAttr { mode: Some(0o2740), ..SetAttr::default() }).unwrap();
    assert_eq!(
        entries(&v.getxattr(f.ino, ACCESS).unwrap()),
        [
            e(USER_OBJ, 7, u32::MAX),
            e(USER, 7, 42),
            e(GROUP_OBJ, 4, u32::MAX),
            e(MASK, 4, u32::MAX),
            e(OTHER, 0, u32::MAX)
        ]
    );
    assert_eq!(v.getattr(f.ino).unwrap().perm, 0o2740);
}

#[test]
fn new_inodes_take_the_default_acl_instead_of_the_umask() {
    let (v, meta, data) = volume();
    let d = v.mkdir(InodeNo::ROOT, b"d", 0o777, USER_022).unwrap();
    assert_eq!(d.perm, 0o755, "no default ACL: the umask applies");
    let default =
        acl(&[e(USER_OBJ, 7, 0), e(USER, 7, 65534), e(GROUP_OBJ, 7, 0), e(GROUP, 5, 7), e(MASK, 7, 0), e(OTHER, 5, 0)]);
    v.setxattr(d.ino, DEFAULT, &default, SetMode::Any).unwrap();
    assert_eq!(v.getattr(d.ino).unwrap().perm, 0o755, "a default ACL leaves the mode alone");

    let f = v.create(d.ino, b"f", 0o666, USER_022).unwrap();
    assert_eq!(f.perm, 0o664, "the umask does not apply; the ACL masks the mode");
    assert_eq!(
        entries(&v.getxattr(f.ino, ACCESS).unwrap()),
        [
            e(USER_OBJ, 6, u32::MAX),
            e(USER, 7, 65534),
            e(GROUP_OBJ, 7, u32::MAX),
            e(GROUP, 5, 7),
            e(MASK, 6, u32::MAX),
            e(OTHER, 4, u32::MAX)
        ]
    );
    assert!(matches!(v.getxattr(f.ino, DEFAULT), Err(Error::NoXattr)), "files get no default ACL");

    let sub = v.mkdir(d.ino, b"sub", 0o777, USER_022).unwrap();
    assert_eq!(sub.perm, 0o775);
    assert_eq!(v.getxattr(sub.ino, DEFAULT).unwrap(), default, "directories inherit the default ACL");
    let deeper = v.mknod(sub.ino, b"fifo", dualfs_engine::types::FileKind::Fifo, 0o600, 0, USER_022).unwrap();
    assert_eq!(deeper.perm, 0o600);
    let l = v.symlink(d.ino, b"l", b"f", USER_022).unwrap();
    assert_eq!(l.perm, 0o777);
    assert!(matches!(v.getxattr(l.ino, ACCESS), Err(Error::NoXattr)), "symbolic links have no ACL");

    v.close().unwrap();
    let v = Volume::open(meta, data, MountOptions::default()).unwrap();
    let f = v.lookup(d.ino, b"f").unwrap();
    assert_eq!(f.perm, 0o664);
    assert!(v.getxattr(f.ino, ACCESS).is_ok());
}

#[test]
fn removing_acls_follows_linux() {
    let (v, ..) = volume();
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap();
    let ctime = v.getattr(f.ino).unwrap().ctime;
    v.removexattr(f.ino, ACCESS).unwrap();
    v.removexattr(f.ino, DEFAULT).unwrap();
    assert_eq!(v.getattr(f.ino).unwrap().ctime, ctime, "nothing removed, nothing changed");
    let default = acl(&[e(USER_OBJ, 7, 0), e(GROUP_OBJ, 5, 0), e(OTHER, 5, 0)]);
    assert!(matches!(v.setxattr(f.ino, DEFAULT, &default, SetMode::Any), Err(Error::Invalid(_))));
    let named = acl(&[e(USER_OBJ, 6, 0), e(USER, 7, 42), e(GROUP_OBJ, 4, 0), e(MASK, 7, 0), e(OTHER, 4, 0)]);
    v.setxattr(f.ino, ACCESS, &named, SetMode::Any).unwrap();
    v.removexattr(f.ino, ACCESS).unwrap();
    assert!(matches!(v.getxattr(f.ino, ACCESS), Err(Error::NoXattr)));
    assert_eq!(v.getattr(f.ino).unwrap().perm, 0o674, "removing the ACL leaves the mode");
}

#[test]
fn setting_an_acl_can_drop_the_setgid_bit() {
    let (v, ..) = volume();
    let f = v.create(InodeNo::ROOT, b"f", 0o2755, Creds::ROOT).unwrap();
    let plain = acl(&[e(USER_OBJ, 7, 0), e(GROUP_OBJ, 5, 0), e(OTHER, 5, 0)]);
    v.set_acl(f.ino, AclKind::Access, Some(&plain), false).unwrap();
    assert_eq!(v.getattr(f.ino).unwrap().perm, 0o2755);
    v.set_acl(f.ino, AclKind::Access, Some(&plain), true).unwrap();
    assert_eq!(v.getattr(f.ino).unwrap().perm, 0o755);
}
