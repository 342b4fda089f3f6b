//! A meta-data device filled by ordinary operations must be emptied again
//! by deletes: DESIGN.md, "Full devices" (deletes may use half the reserve).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, SetMode};
use dualfs_engine::{Error, Volume};

fn log_state(v: &Volume) -> String {
    v.with_fs(|fs| {
        format!(
            "free segments {}, reserve {}, head {:?}",
            fs.log.free_segments(),
            fs.log.reserve_segments(),
            fs.log.head()
        )
    })
}

/// 20 segments of 1 MiB, files of 8 bytes with a 200-byte xattr, created
/// until ENOSPC (about 33,000), then every one deleted. Found through the
/// mount (tests/space.rs in the CLI): deletes used to eat the segments the
/// cleaner needed, were refused with ENOSPC, and the volume finally turned
/// read-only. The log's reserve now keeps, above the checkpoint's room, two
/// segments for the cleaner and two more for operations that release
/// meta-data, which growing operations never touch: the deletes go through
/// and the volume comes back clean.
#[test]
fn a_full_meta_data_device_is_emptied_by_deletes() {
    let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(20 * 256));
    let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(32768));
    Volume::format(meta.clone(), data.clone(), &MkfsOptions::default()).unwrap();
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let d = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
    let mut n = 0;
    loop {
        let name = format!("f{n:06}");
        let r = v.create(d, name.as_bytes(), 0o644, Creds::ROOT).and_then(|a| {
            v.write(a.ino, 0, format!("file {n}\n").as_bytes())?;
            v.setxattr(a.ino, b"user.x", format!("{n:0200}").as_bytes(), SetMode::Any)?;
            v.forget(a.ino, 1)
        });
        match r {
            Ok(()) => n += 1,
            Err(Error::NoSpace(_)) => break,
            Err(e) => panic!("create {n}: {e}"),
        }
    }
    let full = log_state(&v);
    for i in 0..=n {
        match v.unlink(d, format!("f{i:06}").as_bytes()) {
            Ok(()) | Err(Error::NotFound) => {}
            Err(e) => panic!("unlink {i} of {n}: {e} (when full: {full}; now: {})", log_state(&v)),
        }
    }
    v.rmdir(InodeNo::ROOT, b"d").unwrap();
    v.create(InodeNo::ROOT, b"after", 0o644, Creds::ROOT).unwrap();
    v.close().unwrap();
    let report = dualfs_engine::check::check(meta, data).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
}
