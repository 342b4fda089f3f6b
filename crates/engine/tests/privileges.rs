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
use dualfs_engine::volume::{Changer, Creds, MkfsOptions, MountOptions, SetAttr};

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

/// A caller without CAP_FSETID in groups 100 and 200.
fn user() -> Changer {
    Changer::Unprivileged { groups: vec![100, 200] }
}

fn mode(v: &Volume, f: InodeNo) -> u32 {
    v.getattr(f).unwrap().perm & 0o7777
}

#[test]
fn a_privileged_write_keeps_the_set_id_bits_but_not_the_capabilities() {
    let v = volume();
    let f = file(&v, b"f", 0o6755);
    v.drop_privileges(f, &Changer::Privileged).unwrap();
    assert_eq!(mode(&v, f), 0o6755);
    assert!(v.getxattr(f, CAP).is_err());
}

#[test]
fn an_unprivileged_write_drops_set_user_id_and_group_executable_set_group_id() {
    let v = volume();
    let f = file(&v, b"f", 0o6755);
    v.drop_privileges(f, &user()).unwrap();
    assert_eq!(mode(&v, f), 0o755);
    assert!(v.getxattr(f, CAP).is_err());
}

/// Linux 6.2's rule (`setattr_should_drop_sgid`), not the old one that
/// read set-group-id without group execute as mandatory locking and kept it.
#[test]
fn set_group_id_without_group_execute_goes_unless_the_writer_is_in_the_group() {
    let v = volume();
    let outsider = file(&v, b"g", 0o2666);
    v.drop_privileges(outsider, &user()).unwrap();
    assert_eq!(mode(&v, outsider), 0o666, "root's group 0 is not the writer's");
    let both = file(&v, b"h", 0o6766);
    v.drop_privileges(both, &user()).unwrap();
    assert_eq!(mode(&v, both), 0o766);

    let member = file(&v, b"m", 0o6766);
    v.setattr(member, &SetAttr { gid: Some(200), mode: Some(0o6766), ..SetAttr::default() }).unwrap();
    v.drop_privileges(member, &user()).unwrap();
    assert_eq!(mode(&v, member), 0o2766, "a member keeps it, set-user-id goes");
    let privileged = file(&v, b"p", 0o2666);
    v.drop_privileges(privileged, &Changer::Privileged).unwrap();
    assert_eq!(mode(&v, privileged), 0o2666);
}

#[test]
fn truncation_and_chown_drop_what_they_must() {
    let v = volume();
    let root_trunc = file(&v, b"a", 0o4755);
    v.setattr(root_trunc, &SetAttr { size: Some(0), ..SetAttr::default() }).unwrap();
    assert_eq!(mode(&v, root_trunc), 0o4755, "a privileged truncation keeps set-user-id");
    assert!(v.getxattr(root_trunc, CAP).is_err(), "any truncation drops capabilities");

    let user_trunc = file(&v, b"b", 0o4755);
    v.setattr(user_trunc, &SetAttr { size: Some(0), changer: user(), ..SetAttr::default() }).unwrap();
    assert_eq!(mode(&v, user_trunc), 0o755);
    let user_trunc_sgid = file(&v, b"b2", 0o2666);
    v.setattr(user_trunc_sgid, &SetAttr { size: Some(0), changer: user(), ..SetAttr::default() }).unwrap();
    assert_eq!(mode(&v, user_trunc_sgid), 0o666);

    let chowned = file(&v, b"c", 0o6755);
    v.setattr(chowned, &SetAttr { uid: Some(0), ..SetAttr::default() }).unwrap();
    assert_eq!(mode(&v, chowned), 0o755, "chown, even to the same owner, drops the set-id bits");
    assert!(v.getxattr(chowned, CAP).is_err());
    let kept = file(&v, b"d", 0o6744);
    v.setattr(kept, &SetAttr { uid: Some(0), ..SetAttr::default() }).unwrap();
    assert_eq!(mode(&v, kept), 0o2744, "root's chown keeps set-group-id without group execute");
    let user_chown = file(&v, b"e", 0o2744);
    v.setattr(user_chown, &SetAttr { gid: Some(100), changer: user(), ..SetAttr::default() }).unwrap();
    assert_eq!(mode(&v, user_chown), 0o744, "not in the file's former group 0");
}
