//! `dualfs scrub`: its report, `--json` and exit status on an unmounted
//! volume, clean and damaged, and a mounted volume scrubbed by its serving
//! process while files are being written.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{TestVolume, dualfs};
use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, FileDevice};
use dualfs_engine::meta_log::Log;
use dualfs_engine::meta_log::live::LiveKind;
use dualfs_engine::types::{BLOCK_SIZE, InodeNo};
use dualfs_engine::volume::{Creds, MountOptions};
use serde_json::Value;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn devices(meta: &Path, data: &Path) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    (Arc::new(FileDevice::open(meta, false, true).unwrap()), Arc::new(FileDevice::open(data, false, true).unwrap()))
}

fn report(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

#[test]
fn an_unmounted_volume_scrubs_with_fsck_exit_statuses_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("meta.img"), dir.path().join("data.img"));
    assert!(dualfs(&["mkfs", "--size", "256M", s(&meta), s(&data)]).status.success());
    {
        let (m, d) = devices(&meta, &data);
        let v = Volume::open(m, d, MountOptions::default()).unwrap();
        let dir = v.mkdir(InodeNo::ROOT, b"docs", 0o755, Creds::ROOT).unwrap().ino;
        for i in 0..200 {
            let f = v.create(dir, format!("file-{i:03}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
            v.write(f, 0, &vec![i as u8; 6000]).unwrap();
        }
        v.close().unwrap();
    }
    let clean = dualfs(&["scrub", s(&meta), s(&data)]);
    assert_eq!(clean.status.code(), Some(0), "{clean:?}");
    let text = String::from_utf8_lossy(&clean.stdout);
    assert!(text.contains("no errors found") && text.contains("no checksums"), "{text}");
    let j = report(&dualfs(&["scrub", "--json", s(&meta), s(&data)]));
    let r = &j["report"];
    assert_eq!((j["mounted"].as_bool(), r["data_checksummed"].as_bool()), (Some(false), Some(false)), "{j}");
    assert!(r["data_blocks"].as_u64().unwrap() >= 400, "{j}");
    assert_eq!(r["bad_meta"].as_array().unwrap().len(), 0, "{j}");

    // An inode block of the directory's files: its checksum broken.
    let at = {
        let (m, d) = devices(&meta, &data);
        let (mut log, _) = Log::open(m, d).unwrap();
        let blocks = log.live_blocks(true).unwrap();
        blocks
            .into_iter()
            .find(|b| matches!(&b.kind, LiveKind::Inodes(v) if v.len() > 4 && !v.contains(&InodeNo::ROOT)))
            .unwrap()
            .at
    };
    let f = std::fs::OpenOptions::new().write(true).open(&meta).unwrap();
    f.write_all_at(&[0xa5; 64], at.0 * BLOCK_SIZE as u64 + 1024).unwrap();
    f.sync_all().unwrap();
    let out = dualfs(&["scrub", "--json", s(&meta), s(&data)]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let r = &report(&out)["report"];
    let bad = &r["bad_meta"].as_array().unwrap()[0];
    assert_eq!(bad["block"].as_u64(), Some(at.0), "{r}");
    assert_eq!(bad["repaired"].as_bool(), Some(false));
    let files = bad["files"].as_array().unwrap();
    assert!(files.len() > 4, "{bad}");
    assert!(files.iter().all(|f| f["path"].as_str().is_some_and(|p| p.starts_with("/docs/file-"))), "{bad}");
    let words = String::from_utf8_lossy(&dualfs(&["scrub", s(&meta), s(&data)]).stdout).into_owned();
    assert!(words.contains(&format!("BAD meta-data block {}", at.0)) && words.contains("uncorrectable"), "{words}");

    // Could not run at all: 8; a usage error: clap's 2.
    assert_eq!(dualfs(&["scrub", s(&dir.path().join("none")), s(&data)]).status.code(), Some(8));
    assert_eq!(dualfs(&["scrub", "--rate", "fast", s(&meta), s(&data)]).status.code(), Some(2));
}

#[test]
fn a_mounted_volume_is_scrubbed_by_its_serving_process_while_files_are_written() {
    let Some(mut v) = TestVolume::create("1G") else {
        return;
    };
    v.mount_with("");
    let root = v.path("w");
    std::fs::create_dir(&root).unwrap();
    for i in 0..300 {
        std::fs::write(root.join(format!("before-{i}")), vec![i as u8; 9000]).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, root) = (stop.clone(), root.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let p = root.join(format!("during-{n}"));
                std::fs::write(&p, vec![n as u8; 20_000]).unwrap();
                if n.is_multiple_of(3) {
                    std::fs::remove_file(&p).unwrap();
                }
                n += 1;
            }
            n
        })
    };
    for _ in 0..3 {
        let out = dualfs(&["scrub", "--json", v.m()]);
        assert_eq!(out.status.code(), Some(0), "{out:?}\n{}", v.log());
        let j = report(&out);
        assert_eq!(j["mounted"].as_bool(), Some(true));
        let r = &j["report"];
        assert_eq!(r["bad_meta"].as_array().unwrap().len(), 0, "{j}");
        assert_eq!(r["data_errors"].as_array().unwrap().len(), 0, "{j}");
        // What was written before it began: 300 files of three blocks.
        assert!(r["data_blocks"].as_u64().unwrap() >= 900, "{j}");
        assert!(r["meta_blocks"].as_u64().unwrap() > 10, "{j}");
    }
    // At a limited rate, and its words.
    let out = dualfs(&["scrub", "--rate", "20M", v.m()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("no errors found"), "{out:?}");
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert!(written > 0);
    v.umount();
    v.fsck();
}
