//! Quotas: usage follows every change of an inode (create, write,
//! truncate, punch, unlink, rename, chown, project), limits refuse with
//! `QuotaExceeded` (EDQUOT), a soft limit turns hard when its grace time
//! ends, EXDEV across projects under project inheritance, and usage is
//! exact after a crash (it is counted from the inodes at open).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use dualfs_engine::Error;
use dualfs_engine::Volume;
use dualfs_engine::check::Invariant;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::format::inode::FLAG_PROJINHERIT;
use dualfs_engine::format::quota::QUOTA_XATTR;
use dualfs_engine::format::superblock::INCOMPAT_QUOTA;
use dualfs_engine::namespace::xattr::SetMode;
use dualfs_engine::types::{InodeNo, Timestamp};
use dualfs_engine::volume::quota::{Kind, QuotaLimits, QuotaUsed};
use dualfs_engine::volume::{Clock, Creds, FallocateMode, MkfsOptions, MountOptions, RenameFlags, SetAttr};

const ALICE: Creds = Creds { uid: 1000, gid: 100, umask: 0 };

struct Rig {
    meta: Arc<MemoryDevice>,
    data: Arc<MemoryDevice>,
    secs: Arc<AtomicI64>,
    clock: Clock,
}

impl Rig {
    fn new() -> Rig {
        let (meta, data) = (Arc::new(MemoryDevice::new(16384)), Arc::new(MemoryDevice::new(65536)));
        let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
        Volume::format(meta.clone(), data.clone(), &opts).unwrap();
        let secs = Arc::new(AtomicI64::new(1_000_000));
        let at = secs.clone();
        let clock: Clock = Arc::new(move || Timestamp { sec: at.load(Ordering::SeqCst), nsec: 0 });
        Rig { meta, data, secs, clock }
    }

    fn advance(&self, secs: i64) {
        self.secs.fetch_add(secs, Ordering::SeqCst);
    }

    fn options() -> MountOptions {
        MountOptions { commit_interval: std::time::Duration::ZERO, ..MountOptions::default() }
    }

    fn open(&self) -> Volume {
        Volume::open_with_clock(self.meta.clone(), self.data.clone(), Rig::options(), self.clock.clone()).unwrap()
    }

    /// The volume as a power cut now would leave it, recovered.
    fn crash(&self) -> Volume {
        let meta: Arc<dyn BlockDevice> = Arc::new(self.meta.snapshot());
        let data: Arc<dyn BlockDevice> = Arc::new(self.data.snapshot());
        Volume::open_with_clock(meta, data, Rig::options(), self.clock.clone()).unwrap()
    }
}

fn used(v: &Volume, kind: Kind, id: u32) -> QuotaUsed {
    v.quota_report().unwrap().rows.iter().find(|r| r.kind == kind && r.id == id).map(|r| r.used).unwrap_or_default()
}

fn q1(v: &Volume) {
    let wrong = v.verify_quota_usage().unwrap();
    assert!(wrong.is_empty(), "Q1: {wrong:#?}");
}

fn edquot<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    assert!(matches!(r, Err(Error::QuotaExceeded)), "{what}: {r:?}");
}

#[test]
fn usage_follows_every_change_and_survives_a_crash() {
    let rig = Rig::new();
    let v = rig.open();
    assert!(!v.quotas_on());
    let f0 = v.create(InodeNo::ROOT, b"before", 0o644, ALICE).unwrap().ino;
    v.write(f0, 0, &vec![1; 3 * 4096]).unwrap();
    v.commit().unwrap();
    // Turning quotas on counts what is there.
    v.enable_quotas().unwrap();
    assert!(v.quotas_on());
    assert_eq!(used(&v, Kind::User, 1000), QuotaUsed { blocks: 3, inodes: 1 });
    let d = v.mkdir(InodeNo::ROOT, b"d", 0o755, ALICE).unwrap().ino;
    let f = v.create(d, b"f", 0o644, ALICE).unwrap().ino;
    v.write(f, 0, &vec![2; 10 * 4096]).unwrap();
    v.commit().unwrap();
    assert_eq!(used(&v, Kind::User, 1000), QuotaUsed { blocks: 13, inodes: 3 });
    assert_eq!(used(&v, Kind::Group, 100), QuotaUsed { blocks: 13, inodes: 3 });
    q1(&v);
    // Punch, truncate, preallocate.
    v.fallocate(f, 4096, 2 * 4096, FallocateMode { punch_hole: true, keep_size: true, ..Default::default() }).unwrap();
    v.setattr(f, &SetAttr { size: Some(6 * 4096), ..SetAttr::default() }).unwrap();
    v.fallocate(f, 6 * 4096, 4 * 4096, FallocateMode::default()).unwrap();
    v.commit().unwrap();
    assert_eq!(used(&v, Kind::User, 1000), QuotaUsed { blocks: 3 + 4 + 4, inodes: 3 });
    q1(&v);
    // chown moves it, rename keeps it, unlink frees it.
    v.setattr(f0, &SetAttr { uid: Some(2000), gid: Some(200), ..SetAttr::default() }).unwrap();
    v.rename(InodeNo::ROOT, b"before", d, b"moved", RenameFlags::default()).unwrap();
    assert_eq!(used(&v, Kind::User, 2000), QuotaUsed { blocks: 3, inodes: 1 });
    assert_eq!(used(&v, Kind::User, 1000), QuotaUsed { blocks: 8, inodes: 2 });
    v.unlink(d, b"f").unwrap();
    // An unlinked file still open keeps its usage until it is freed.
    assert_eq!(used(&v, Kind::User, 1000).inodes, 2);
    v.forget(f, 1).unwrap();
    v.commit().unwrap();
    assert_eq!(used(&v, Kind::User, 1000), QuotaUsed { blocks: 0, inodes: 1 });
    q1(&v);
    let g = v.create(d, b"g", 0o644, ALICE).unwrap().ino;
    v.write(g, 0, &vec![3; 5 * 4096]).unwrap();
    v.fsync(g).unwrap();
    // A crash: what recovery brings back is counted again, exactly.
    let after = rig.crash();
    assert!(after.quotas_on());
    assert_eq!(used(&after, Kind::User, 1000), QuotaUsed { blocks: 5, inodes: 2 });
    assert_eq!(used(&after, Kind::User, 2000), QuotaUsed { blocks: 3, inodes: 1 });
    q1(&after);
}

#[test]
fn hard_limits_refuse_writes_creates_fallocate_and_chown() {
    let rig = Rig::new();
    let v = rig.open();
    v.enable_quotas().unwrap();
    v.set_quota(Kind::User, 1000, QuotaLimits { block_hard: 8, inode_hard: 3, ..Default::default() }).unwrap();
    let f = v.create(InodeNo::ROOT, b"f", 0o644, ALICE).unwrap().ino;
    v.write(f, 0, &vec![1; 8 * 4096]).unwrap();
    edquot(v.write(f, 8 * 4096, b"x"), "a write past the hard limit");
    // Dirty pages count before they are written back; after, the blocks.
    v.commit().unwrap();
    edquot(v.write(f, 8 * 4096, b"x"), "the same after a commit");
    v.write(f, 0, b"overwrite").unwrap();
    edquot(v.fallocate(f, 8 * 4096, 4096, FallocateMode::default()), "fallocate");
    v.create(InodeNo::ROOT, b"g", 0o644, ALICE).unwrap();
    v.mkdir(InodeNo::ROOT, b"h", 0o755, ALICE).unwrap();
    edquot(v.create(InodeNo::ROOT, b"i", 0o644, ALICE), "a fourth inode");
    // root is never limited; giving alice a file over her limit is refused.
    let r = v.create(InodeNo::ROOT, b"r", 0o644, Creds::ROOT).unwrap().ino;
    v.write(r, 0, b"root's").unwrap();
    edquot(v.setattr(r, &SetAttr { uid: Some(1000), ..SetAttr::default() }), "chown to a full user");
    // Freeing makes room.
    v.setattr(f, &SetAttr { size: Some(0), ..SetAttr::default() }).unwrap();
    v.commit().unwrap();
    v.write(f, 0, &vec![1; 4 * 4096]).unwrap();
    // The limits are durable, and apply after a crash.
    v.commit().unwrap();
    let after = rig.crash();
    let f = after.lookup(InodeNo::ROOT, b"f").unwrap().ino;
    after.write(f, 4 * 4096, &vec![1; 4 * 4096]).unwrap();
    edquot(after.write(f, 8 * 4096, b"x"), "after the crash");
    q1(&after);
}

#[test]
fn a_soft_limit_turns_hard_after_the_grace_time() {
    let rig = Rig::new();
    let v = rig.open();
    v.enable_quotas().unwrap();
    v.set_quota_grace(Kind::Group, 60, 60).unwrap();
    v.set_quota(Kind::Group, 100, QuotaLimits { block_soft: 2, block_hard: 100, ..Default::default() }).unwrap();
    let f = v.create(InodeNo::ROOT, b"f", 0o644, ALICE).unwrap().ino;
    v.write(f, 0, &vec![1; 3 * 4096]).unwrap();
    let row = v.quota_report().unwrap().rows.into_iter().find(|r| r.kind == Kind::Group && r.id == 100).unwrap();
    assert_eq!(row.entry.block_grace_end, 1_000_000 + 60, "the grace time starts past the soft limit");
    rig.advance(59);
    v.write(f, 3 * 4096, b"y").unwrap();
    rig.advance(1);
    edquot(v.write(f, 5 * 4096, b"z"), "past the grace time");
    // Back under the soft limit, the grace time stops.
    v.setattr(f, &SetAttr { size: Some(4096), ..SetAttr::default() }).unwrap();
    v.commit().unwrap();
    v.write(f, 4096, b"a").unwrap();
    let row = v.quota_report().unwrap().rows.into_iter().find(|r| r.kind == Kind::Group && r.id == 100).unwrap();
    assert_eq!(row.entry.block_grace_end, 0);
}

#[test]
fn projects_limit_their_tree_and_refuse_renames_across_projects() {
    let rig = Rig::new();
    let v = rig.open();
    v.enable_quotas().unwrap();
    let p = v.mkdir(InodeNo::ROOT, b"p", 0o777, Creds::ROOT).unwrap().ino;
    v.set_flags(p, FLAG_PROJINHERIT, Some(42)).unwrap();
    v.set_quota(Kind::Project, 42, QuotaLimits { block_hard: 4, ..Default::default() }).unwrap();
    let f = v.create(p, b"f", 0o644, ALICE).unwrap().ino;
    assert_eq!(v.getattr(f).unwrap().project, 42);
    v.write(f, 0, &vec![1; 4 * 4096]).unwrap();
    edquot(v.write(f, 4 * 4096, b"x"), "the project is full");
    // Root's writes count against a project too (only id 0 is free).
    let r = v.create(p, b"r", 0o644, Creds::ROOT).unwrap().ino;
    edquot(v.write(r, 0, &vec![1; 8192]), "root in a full project");
    let outside = v.create(InodeNo::ROOT, b"o", 0o644, ALICE).unwrap().ino;
    v.write(outside, 0, &vec![1; 8 * 4096]).unwrap();
    let e = v.rename(InodeNo::ROOT, b"o", p, b"o", RenameFlags::default());
    assert!(matches!(e, Err(Error::CrossProject)), "{e:?}");
    assert!(matches!(v.link(outside, p, b"o2"), Err(Error::CrossProject)));
    // Out of the project is allowed (the root has no project inheritance).
    v.rename(p, b"f", InodeNo::ROOT, b"f", RenameFlags::default()).unwrap();
    q1(&v);
}

#[test]
fn an_old_volume_is_marked_when_quotas_go_on() {
    let rig = Rig::new();
    let v = rig.open();
    let sb = |m: &Arc<MemoryDevice>| {
        let b = dualfs_engine::device::read(m.as_ref(), dualfs_engine::DeviceRole::Meta, 0, 1).unwrap();
        dualfs_engine::format::superblock::Superblock::decode(&b).unwrap()
    };
    assert_eq!(sb(&rig.meta).incompat & INCOMPAT_QUOTA, 0);
    assert!(v.set_quota(Kind::User, 5, QuotaLimits::default()).is_err(), "limits before quotas are on");
    v.enable_quotas().unwrap();
    let s = sb(&rig.meta);
    assert_ne!(s.incompat & INCOMPAT_QUOTA, 0);
    assert!(s.minor >= 9);
    // The record is the volume's: no caller lists it.
    assert!(v.listxattr(InodeNo::ROOT).unwrap().is_empty());
    v.close().unwrap();
    let r = dualfs_engine::check::check(rig.meta.clone(), rig.data.clone()).unwrap();
    assert!(r.is_clean(), "{:#?}", r.problems);
}

#[test]
fn fsck_names_a_damaged_quota_record() {
    let rig = Rig::new();
    let v = rig.open();
    v.enable_quotas().unwrap();
    v.set_quota(Kind::User, 7, QuotaLimits { inode_hard: 1, ..Default::default() }).unwrap();
    v.with_fs(|fs| {
        let mut bytes = fs.xattr_get(InodeNo::ROOT, QUOTA_XATTR).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs.xattr_set(InodeNo::ROOT, QUOTA_XATTR, &bytes, SetMode::Any).unwrap();
    });
    v.commit().unwrap();
    v.close().unwrap();
    let r = dualfs_engine::check::check(rig.meta.clone(), rig.data.clone()).unwrap();
    let found: Vec<_> = r.problems.iter().map(|p| (p.invariant, p.to_string())).collect();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].0, Some(Invariant::Q1), "{found:#?}");
    assert!(found[0].1.contains("checksum"), "{found:#?}");
}
