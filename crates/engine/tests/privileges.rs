//! What a write, truncation or chown drops (HANDLE_KILLPRIV_V2 makes it the
//! volume's job): set-id bits and file capabilities. The kernel also removes
//! `security.capability` on its own when it sees one, so only a test of the
//! engine shows that the volume does it.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::namespace::xattr::SetMode;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, SetAttr};

const CAP: &[u8] = b"security.capability";

fn volume() -> Volume {
    let (meta, data): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) =
        (Arc::new(MemoryDevice::new(8192)), Arc::new(MemoryDevice::new(65536)));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    Volume::open(meta, data, MountOptions::default()).unwrap()
}

fn file(v: &Volume, name: &[u8], mode: u32) -> InodeNo {
    let f = v.create(InodeNo::ROOT, name, mode, Creds::ROOT).unwrap().ino;
    v.setattr(f, &SetAttr { mode: Some(mode), ..SetAttr::default() }).unwrap();
    v.setxattr(f, CAP, &[2, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], SetMode::Any).unwrap();
    f
}

fn mode(v: &Volume, f: InodeNo) -> u32 {
    v.getattr(f).unwrap().perm & 0o7777
}

#[test]
fn a_privileged_write_keeps_the_set_id_bits_but_not_the_capabilities() {
    let v = volume();
    let f = file(&v, b"f", 0o6755);
    v.drop_privileges(f, false).unwrap();
    assert_eq!(mode(&v, f), 0o6755);
    assert!(v.getxattr(f, CAP).is_err());
}

#[test]
fn an_unprivileged_write_drops_set_user_id_and_group_executable_set_group_id() {
    let v = volume();
    let f = file(&v, b"f", 0o6755);
    v.drop_privileges(f, true).unwrap();
    assert_eq!(mode(&v, f), 0o755);
    assert!(v.getxattr(f, CAP).is_err());
    // Set-group-id without group execute means mandatory locking: it stays.
    let g = file(&v, b"g", 0o2745);
    v.drop_privileges(g, true).unwrap();
    assert_eq!(mode(&v, g), 0o2745);
}

#[test]
fn truncation_and_chown_drop_what_they_must() {
    let v = volume();
    let root_trunc = file(&v, b"a", 0o4755);
    v.setattr(root_trunc, &SetAttr { size: Some(0), ..SetAttr::default() }).unwrap();
    assert_eq!(mode(&v, root_trunc), 0o4755, "a privileged truncation keeps set-user-id");
    assert!(v.getxattr(root_trunc, CAP).is_err(), "any truncation drops capabilities");

    let user_trunc = file(&v, b"b", 0o4755);
    v.setattr(user_trunc, &SetAttr { size: Some(0), kill_privileges: true, ..SetAttr::default() }).unwrap();
    assert_eq!(mode(&v, user_trunc), 0o755);

    let chowned = file(&v, b"c", 0o6755);
    v.setattr(chowned, &SetAttr { uid: Some(0), ..SetAttr::default() }).unwrap();
    assert_eq!(mode(&v, chowned), 0o755, "chown, even to the same owner, drops the set-id bits");
    assert!(v.getxattr(chowned, CAP).is_err());
}
